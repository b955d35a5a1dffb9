# The hooks the Snakefile's onstart, onsuccess and onerror call: checks that stop a run before
# its first job (a vLLM job without vLLM, an unpinned download, a device this machine lacks)
# and the job server's start and stop. None runs in a dry run.


def stop_unless_jobs_can_import_vllm():
    """Before any job (onstart: not in a dry run): a job about to run with a vllm backend
    needs an interpreter with vLLM. Without a deployment method, jobs run in Snakemake's own.
    `--touch` runs no job.
    """
    from importlib.util import find_spec

    from snakemake.exceptions import WorkflowError
    from snakemake.settings.types import DeploymentMethod

    deployed = workflow.deployment_settings.deployment_method & {
        DeploymentMethod.CONDA,
        DeploymentMethod.APPTAINER,
    }
    if workflow.touch or deployed or find_spec("vllm"):
        return
    rules = {job.rule.name for job in workflow.dag.needrun_jobs()}
    problems = vllm_backend_problems(config, rules, sys.executable)
    if problems:
        raise WorkflowError("\n".join(problems))


def stop_unless_downloads_are_pinned():
    """Before any job (onstart: not in a dry run): every hub dataset or model that a job about
    to run would download is pinned to a 40-hex commit; the keys that are not are all named.
    `--touch` runs no job.
    """
    from snakemake.exceptions import WorkflowError

    if workflow.touch:
        return
    jobs = [(job.rule.name, job.wildcards_dict) for job in workflow.dag.needrun_jobs()]
    problems = unpinned_revisions(config, jobs)
    if problems:
        raise WorkflowError("\n".join(problems))


JOB_SERVER = []


def start_job_server():
    """Before any job (onstart): a local run of a few jobs or more starts the fork server that
    spares each job the import of torch, transformers and peft (dashrepro.job_server). Not on
    a cluster, in a deployed environment (other interpreters), with --touch, where a job
    about to run uses vLLM (its engine in a forked job is untested), or where
    DASHREPRO_NO_JOB_SERVER is set.
    """
    from snakemake.settings.types import DeploymentMethod

    from dashrepro import job_server

    jobs = list(workflow.dag.needrun_jobs())
    if (
        workflow.touch
        or os.environ.get(job_server.OFF_VARIABLE)
        or not workflow.local_exec
        or workflow.exec_mode != ExecMode.DEFAULT
        or workflow.deployment_settings.deployment_method
        & {DeploymentMethod.CONDA, DeploymentMethod.APPTAINER}
        or len(jobs) < job_server.MIN_JOBS
        or vllm_backend_keys(config, {job.rule.name for job in jobs})
    ):
        return
    log = Path(".snakemake", "log", "job_server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    JOB_SERVER.append(job_server.start(config.get("cpu_kernels"), str(log.resolve())))


def stop_job_server():
    """After the last job (onsuccess, onerror): stop the server start_job_server started."""
    from dashrepro import job_server

    while JOB_SERVER:
        job_server.stop(*JOB_SERVER.pop())


def stop_unless_local_jobs_have_their_device():
    """Before any job (onstart), on a local run only (a cluster's login node plans jobs for GPU
    nodes it does not have): a generation job configured for a device this machine lacks stops
    the run here, naming the key and its file, instead of failing in each of its retries.
    """
    from snakemake.exceptions import WorkflowError

    from dashrepro.sampling.devices import MissingDeviceError, check_device

    if (
        workflow.touch
        or not workflow.local_exec
        or workflow.exec_mode != ExecMode.DEFAULT
    ):
        return
    rules = {job.rule.name for job in workflow.dag.needrun_jobs()}
    if not rules & {"generate_checkpoint_responses", "evaluate_base_model"}:
        return
    evaluation = config["evaluation"]
    try:
        check_device(evaluation["backend"], evaluation.get("device", "cpu"))
    except MissingDeviceError as error:
        raise WorkflowError(str(error)) from None
