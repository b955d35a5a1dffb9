"""An experiment as the workflow's rules see it: its files, its settings and its report contexts.

``Experiment(config)`` takes a validated, expanded config (``rules/common.smk`` validates it) and
answers what the rules ask: which runs exist, which files a table or figure reads and what each
file is, which settings each stage's params hold, and which environment and GPUs a job needs.
The rules' input functions are one-line calls into it, so everything here is testable without
Snakemake. Paths come from ``dashrepro.layout.Results``.

Settings are split by the stage that uses them (generation, grading), so a grader change reruns
grading only; a key absent from the config stays absent from the params, so adding an optional
key does not rerun jobs that do not use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import product

from dashrepro.analysis.registry import SCORE_KINDS, kind_module, kind_needs
from dashrepro.analysis.tables import published_layout, published_table_specs
from dashrepro.experiment.run_matrix import (
    GROUPS,
    base_scale,
    run_matrix,
    spec_scales,
)
from dashrepro.experiment.semantics import VALIDATION_SPLIT
from dashrepro.hub import SNAPSHOT_RECORD, model_id_of, snapshot_folder
from dashrepro.layout import (
    AUDIT_REPORT,
    BASE_ACCURACY,
    MODEL_WEIGHTS,
    PREMISE_BRANCHES,
    PREMISE_FIGURE,
    PREMISE_ROLLOUTS,
    PREMISE_STATISTICS,
    PREMISE_TOKENS,
    PUBLISHED,
    REPRODUCTION_GAP,
    RESPONSES,
    SAMPLES,
    STATISTICS_REPORT,
    STUDENT_SAMPLES,
    SUMMARY,
    TOKEN_TRACES,
    TRAIN_DATA,
    TRAIN_METRICS,
    VALIDATION_DATA,
    Results,
    resolve_repo_path,
)
from dashrepro.objectives.registry import teacher_views_of
from dashrepro.sampling.backends import CPU_ENVIRONMENT, GPU_ENVIRONMENT, environment, needs_gpu
from dashrepro.settings import (
    GenerationSettings,
    GradingSettings,
    PremiseProbeSettings,
    TrainSettings,
)
from dashrepro.training.methods import training_entry

CPU_ENV = "../envs/cpu.yaml"
GPU_ENV = "../envs/gpu.yaml"
ENVIRONMENTS = {CPU_ENVIRONMENT: CPU_ENV, GPU_ENVIRONMENT: GPU_ENV}
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("png", "pdf", "json")
# The file of an input set in a checkpoint's evaluation folder, and in a run's folder.
CHECKPOINT_FILES = {"summaries": SUMMARY, "samples": SAMPLES}
RUN_FILES = {"traces": TOKEN_TRACES, "metrics": TRAIN_METRICS}


class Experiment:
    """The workflow's view of one validated config (``config["experiment"]`` names it)."""

    def __init__(self, config: Mapping):
        self.config = config
        self.name = config["experiment"]
        self.layout = Results(self.name)
        self.published_layout = Results(PUBLISHED)
        self.benchmarks = list(config["benchmarks"])
        # The held-out split checkpoints are also evaluated on (data.validation), or None, and
        # the name it is graded and summarised under.
        self.validation = config["data"].get("validation")
        self.validation_set = VALIDATION_SPLIT if self.validation else None
        # What a checkpoint is sampled on: the benchmarks, then the validation split if any.
        self.evaluation_sets = self.benchmarks + ([self.validation_set] if self.validation else [])
        # The privileged teacher's layouts the configured methods read: the embedded warm start
        # teaches each, and the base model's evaluation measures the teacher in each.
        self.teacher_views = list(teacher_views_of(config["methods"]))
        # The published numbers ship with the workflow: found from any working directory.
        self.published = str(resolve_repo_path(config["published_numbers"]))
        # Each config table whose published table the numbers hold, at the scales they hold it
        # (not the experiment's): the paper's tables come out the same whatever experiment.
        self.published_tables = published_table_specs(
            config["tables"], published_layout(self.published)
        )
        # (method, scale) -> its training seeds: the `runs` groups, and every pair a table or
        # figure reports on (with the global `seeds` unless a group names it).
        self.runs = run_matrix(config)
        # The scales the tables and figures report on, and their base models (a derived scale,
        # `derive_from`, trains from its base scale's model).
        self.report_scales = sorted(
            {s for group in GROUPS for spec in config[group].values() for s in spec_scales(spec)}
        )
        self.base_scales = sorted({base_scale(config, s) for s in self.report_scales})
        self.synthetic_benchmarks = [
            b for b in self.benchmarks if config["benchmarks"][b]["dataset"] is None
        ]
        # What a checkpoint's responses depend on, and how they are graded: the jobs' params.
        self.generation = GenerationSettings.job_params(config["evaluation"])
        self.grading = GradingSettings.job_params(config["evaluation"])
        # A generation on CUDA (vLLM's always) needs the GPU stack: the generating rules'
        # environment, and one GPU per job (sampling.backends says which backend runs where).
        gpu = GenerationSettings.from_config(config["evaluation"]).needs_gpu
        self.generation_env = ENVIRONMENTS[environment(gpu)]
        self.evaluation_gpus = 1 if gpu else 0
        # The scores tables (rows are methods, cells means over seeds of selected checkpoints),
        # which statistics and the audit follow down to their graded samples.
        self.score_tables = {
            name: spec for name, spec in config["tables"].items() if spec["kind"] in SCORE_KINDS
        }
        self.score_pairs = sorted(
            {
                (method, scale)
                for spec in self.score_tables.values()
                for scale in spec_scales(spec)
                for method in spec["methods"]
            }
        )
        self.score_base_scales = {scale: base_scale(config, scale) for _, scale in self.score_pairs}
        self.score_bases = sorted(set(self.score_base_scales.values()))
        # The premise probe's settings as its job's params (None: no probe), and the base
        # models it probes: every base model the tables and figures train from.
        probe = config.get("premise_probe")
        self.premise_probe = (
            None if probe is None else PremiseProbeSettings.from_config(probe).to_dict()
        )
        self.premise_scales = self.base_scales if probe is not None else []

    # settings -----------------------------------------------------------------------------
    def generation_of(self, scale: str) -> dict:
        """A scale's generation settings: the global ones with its own ``evaluation`` keys."""
        own = self.config["scales"][scale].get("evaluation") or {}
        return {**self.generation, **own}

    def train_settings(self, scale: str) -> TrainSettings:
        """A scale's training settings."""
        return TrainSettings.from_config(
            self.config["scales"][scale]["train"], f"scales.{scale}.train"
        )

    def steps(self, scale: str) -> list[int]:
        """A scale's checkpoint steps."""
        return self.train_settings(scale).checkpoint_steps()

    def training_env(self, scale: str) -> str:
        """The GPU environment for a GPU run (vLLM rollouts, bf16 or DeepSpeed), else CPU's."""
        train = self.train_settings(scale)
        gpu = (
            needs_gpu(train.rollout_backend)
            or train.precision == "bf16"
            or bool(train.deepspeed_config)
        )
        return ENVIRONMENTS[environment(gpu)]

    def training_gpus(self, scale: str) -> int:
        """GPUs of a scale's training job: its ``num_processes``, so config and profile agree."""
        if self.training_env(scale) != GPU_ENV:
            return 0
        return self.train_settings(scale).num_processes

    def premise_gpus(self, scale: str) -> int:
        """GPUs of a scale's premise probe: one where its training runs on GPUs."""
        return 1 if self.training_env(scale) == GPU_ENV else 0

    def premise_method(self) -> dict:
        """The probed method's name and its training entry (the probe job's ``method`` param)."""
        name = self.premise_probe["method"]
        return {"name": name, "entry": training_entry(self.config["methods"][name])}

    def premise_files(self) -> list[str]:
        """The statistics and figure of every premise probe (target ``all``, ``premise``)."""
        names = [f"{PREMISE_STATISTICS}.{ext}" for ext in ("csv", "md", "json")]
        names += [PREMISE_TOKENS, PREMISE_ROLLOUTS, PREMISE_BRANCHES]
        names += [f"{PREMISE_FIGURE}.{ext}" for ext in ("png", "pdf")]
        return [self.layout.premise_file(n, s) for s in self.premise_scales for n in names]

    def batch_layout(self, scale: str) -> dict:
        """A scale's batch decomposition (what the batch_runtime table shows)."""
        train = self.train_settings(scale)
        return {
            "micro_batch_size": train.micro_batch_size,
            "grad_accumulation": train.grad_accumulation,
            "num_processes": train.num_processes,
        }

    # data ---------------------------------------------------------------------------------
    def synthetic_data_params(self) -> dict:
        """What the synthetic data depends on (not the labels or the real datasets' specs)."""
        params = {key: self.config["data"][key] for key in ("seed", "n_train")}
        if "tasks" in self.config["data"]:  # absent otherwise, as the validation split
            params["tasks"] = list(self.config["data"]["tasks"])
        if self.validation:  # absent otherwise: the job and its outputs stay as they were
            params["validation"] = self.validation
        return params

    def synthetic_benchmark_specs(self) -> dict:
        benchmarks = self.config["benchmarks"]
        return {
            b: {"task": benchmarks[b]["task"], "n_problems": benchmarks[b]["n_problems"]}
            for b in self.synthetic_benchmarks
        }

    def validation_outputs(self, folder) -> dict:
        """The validation split among a data rule's outputs, when the config asks for one;
        ``folder``: ``layout.data`` or ``layout.synthetic``."""
        return {"validation": folder(VALIDATION_DATA)} if self.validation else {}

    def training_set_source(self) -> dict:
        """The prepare rule's inputs: the synthetic files, a real dataset's local file, or none
        (a Hugging Face dataset)."""
        spec = self.config["data"]["training_set"]
        if spec is None:
            synthetic = self.layout.synthetic
            return {
                "source": synthetic(TRAIN_DATA),
                **{f"{k}_source": v for k, v in self.validation_outputs(synthetic).items()},
            }
        return _local_dataset_file(spec)

    def benchmark_source(self, bench: str) -> dict:
        spec = self.config["benchmarks"][bench]["dataset"]
        if spec is None:
            return {"source": self.layout.synthetic(f"benchmarks/{bench}.parquet")}
        return _local_dataset_file(spec)

    def benchmark_files(self) -> list[str]:
        return [self.layout.benchmark(b) for b in self.benchmarks]

    def evaluation_files(self) -> list[str]:
        """The files of ``evaluation_sets``, in its order."""
        validation = [self.layout.data(VALIDATION_DATA)] if self.validation else []
        return self.benchmark_files() + validation

    # base models --------------------------------------------------------------------------
    def base_model_dir(self, scale: str) -> str:
        """The embedded base model's folder; a derived scale shares its base scale's."""
        return self.layout.base_model(base_scale(self.config, scale))

    def hub_model_dir(self, scale: str) -> str | None:
        """A Hugging Face model's local snapshot (rule download_model), by id and commit; None
        for the embedded model or a local folder."""
        spec = self.config["scales"][scale]
        if spec["source"] == "embedded" or os.path.isdir(spec["model"]):
            return None
        return snapshot_folder(spec["model"], spec.get("revision"))

    def model_revision_key(self, repo: str, revision: str) -> str:
        """The config key that pins a downloaded model (named by download_model's error)."""
        folder = snapshot_folder(model_id_of(repo), revision)
        for scale in self.config["scales"]:
            if self.hub_model_dir(scale) == folder:
                return f"scales.{scale}.revision"
        return "scales.<scale>.revision"

    def base_model_ref(self, scale: str) -> str:
        """What from_pretrained loads: the embedded model's folder, a hub model's downloaded
        snapshot, or the scale's local folder."""
        spec = self.config["scales"][scale]
        if spec["source"] == "embedded":
            return self.base_model_dir(scale)
        return self.hub_model_dir(scale) or spec["model"]

    def base_model_inputs(self, scale: str) -> dict:
        """Base model files that rules take as inputs: the embedded model's weights, a hub
        model's snapshot record (so its download runs first), or a local folder."""
        spec = self.config["scales"][scale]
        if spec["source"] == "embedded":
            return {"base_model": f"{self.base_model_dir(scale)}/{MODEL_WEIGHTS}"}
        if self.hub_model_dir(scale):
            return {"base_model": f"{self.hub_model_dir(scale)}/{SNAPSHOT_RECORD}"}
        return {"base_model": spec["model"]}

    # runs and checkpoints -----------------------------------------------------------------
    def train_all_runs_files(self) -> list[str]:
        """Every run of the matrix: each (method, scale) pair with each of its seeds."""
        return [
            self.layout.run_file(TRAIN_METRICS, method, scale, seed)
            for (method, scale), seeds in self.runs.items()
            for seed in seeds
        ]

    def evaluate_all_runs_files(self) -> list[str]:
        """Every checkpoint's evaluation summary of every run of the matrix (the studies read
        every checkpoint, not only the one a table selects)."""
        return [
            path
            for (method, scale), seeds in self.runs.items()
            for seed in seeds
            for path in self.checkpoint_eval_files(SUMMARY, method, scale, seed)
        ]

    def checkpoint_eval_files(self, name: str, method: str, scale: str, seed) -> list[str]:
        """One evaluation file (``SUMMARY``, ``SAMPLES``) of every checkpoint of one run."""
        return [
            self.layout.checkpoint_file(name, method, scale, seed, t) for t in self.steps(scale)
        ]

    # tables and figures -------------------------------------------------------------------
    def result_keys(self, name: str, scales, methods) -> list:
        """What each file of an input set of ``dashrepro.analysis.registry.INPUT_SETS`` is, over
        the (method, scale) pairs of a table or figure and each pair's seeds: a run's [method,
        scale, seed], a checkpoint's [method, scale, seed, step], a scale (its base model's
        accuracy)."""
        runs = [[m, c, s] for c in scales for m in methods for s in self.runs[(m, c)]]
        if name in ("selections", "traces", "metrics"):
            return runs
        if name in ("summaries", "samples"):
            return [[*run, t] for run in runs for t in self.steps(run[1])]
        if name == "base_accuracy":
            return list(scales)
        if name == "published":
            return [None]
        raise ValueError(f"unknown input set {name!r}")

    def result_file(self, name: str, key) -> str:
        """The file of one key of an input set (``result_keys``)."""
        layout = self.layout
        if name == "selections":
            return layout.selection(*key)
        if name in CHECKPOINT_FILES:
            return layout.checkpoint_file(CHECKPOINT_FILES[name], *key)
        if name in RUN_FILES:
            return layout.run_file(RUN_FILES[name], *key)
        if name == "base_accuracy":
            return layout.base_eval_file(BASE_ACCURACY, base_scale(self.config, key))
        if name == "published":
            return self.published
        raise ValueError(f"unknown input set {name!r}")

    def result_set(self, name: str, scales, methods) -> list[str]:
        """The files of one input set, in the order of ``result_keys(name, scales, methods)``:
        files and keys come from one list, so a table or figure module can zip them."""
        return [self.result_file(name, key) for key in self.result_keys(name, scales, methods)]

    def report_inputs(self, group: str, name: str) -> dict[str, list[str]]:
        """The input sets a table or figure entry's kind needs, as files."""
        spec = self.config[group][name]
        scales = spec_scales(spec)
        return {
            need: self.result_set(need, scales, spec["methods"]) for need in kind_needs(group, spec)
        }

    def report_context(self, group: str, name: str) -> dict:
        """What a table or figure module may need besides its inputs: labels, order, seeds, and
        what each input file is (``input_keys``: per input set, ``result_keys``)."""
        config = self.config
        spec = config[group][name]
        scales = spec_scales(spec)
        methods = spec["methods"]
        return {
            "input_keys": {
                need: self.result_keys(need, scales, methods) for need in kind_needs(group, spec)
            },
            "id": name,
            "experiment": self.name,
            "scale": scales[0],
            "scales": scales,
            "scale_labels": {s: config["scales"][s].get("label", s) for s in scales},
            "benchmarks": self.benchmarks,
            "benchmark_labels": self._benchmark_labels(),
            "method_labels": {m: config["methods"][m]["label"] for m in methods},
            "seeds": sorted({s for m in methods for s in self.runs[(m, scales[0])]}),
            "runs": {f"{m}/{c}": self.runs[(m, c)] for c in scales for m in methods},
            "steps": self.steps(scales[0]),
            "train": {s: self.batch_layout(s) for s in scales},
        }

    def published_context(self, name: str) -> dict:
        """What a table kind reads to draw ``name`` from the published numbers: labels and
        scales only, none of them the experiment's (``published_scale_labels`` head the scales)."""
        spec = self.published_tables[name]
        scales = spec_scales(spec)
        labels = self.config.get("published_scale_labels") or {}
        return {
            "id": name,
            "experiment": "published",
            "scales": scales,
            "scale_labels": {s: labels.get(s, s) for s in scales},
            "benchmarks": self.benchmarks,
            "benchmark_labels": self._benchmark_labels(),
            "method_labels": {m: self.config["methods"][m]["label"] for m in spec["methods"]},
        }

    def _benchmark_labels(self) -> dict:
        return {b: self.config["benchmarks"][b]["label"] for b in self.benchmarks}

    def kind_caption(self, group: str, name: str) -> str:
        return kind_module(group, self.config[group][name]["kind"]).CAPTION

    def table_files(self) -> list[str]:
        return [self.layout.table(t, e) for t, e in product(self.config["tables"], TABLE_FORMATS)]

    def figure_files(self) -> list[str]:
        figures = self.config["figures"]
        return [self.layout.figure(f, e) for f, e in product(figures, FIGURE_FORMATS)]

    def published_table_files(self) -> list[str]:
        """The tables the paper's published numbers hold, drawn from those numbers."""
        tables = self.published_tables
        return [self.published_layout.table(t, e) for t, e in product(tables, TABLE_FORMATS)]

    def base_accuracy_files(self) -> list[str]:
        return [self.layout.base_eval_file(BASE_ACCURACY, scale) for scale in self.base_scales]

    # statistics and audit -----------------------------------------------------------------
    def score_checkpoints(self) -> list[tuple]:
        """(method, scale, seed, step) of every candidate checkpoint of every scores-table run."""
        return [
            (m, c, s, t)
            for m, c in self.score_pairs
            for s in self.runs[(m, c)]
            for t in self.steps(c)
        ]

    def score_files(self, name: str) -> list[str]:
        """One file (``SAMPLES``, ``RESPONSES``, ...) of every candidate checkpoint of every
        scores-table run, in the order of ``score_checkpoints()``."""
        return [self.layout.checkpoint_file(name, *key) for key in self.score_checkpoints()]

    def score_table_files(self, ext: str = "csv") -> list[str]:
        return [self.layout.table(t, ext) for t in self.score_tables]

    def statistics_inputs(self) -> dict:
        return {
            "tables": self.score_table_files(),
            "samples": self.score_files(SAMPLES),
            "base_samples": [
                self.layout.base_eval_file(STUDENT_SAMPLES, base) for base in self.score_bases
            ],
            "published": self.published,
        }

    def statistics_keys(self) -> dict:
        """What each input file of the statistics rule is, beside it in the same order (the
        script never parses a path): each samples file's (method, scale, seed, step), each
        base-samples file's scale, each table's id."""
        return {
            "samples": [list(key) for key in self.score_checkpoints()],
            "base_samples": self.score_bases,
            "tables": list(self.score_tables),
        }

    def audit_inputs(self) -> dict:
        """What the audit checks: the tables (every format), their selections, every
        candidate's graded samples, summaries and generations, and the adapters they came from."""
        runs = [(m, c, s) for m, c in self.score_pairs for s in self.runs[(m, c)]]
        return {
            "tables": self.score_table_files(),
            # Their other formats too: an edited Markdown or LaTeX table stops the audit job.
            "rendered": [
                self.layout.table(t, ext) for t in self.score_tables for ext in ("md", "tex")
            ],
            "selections": [self.layout.selection(m, c, s) for m, c, s in runs],
            "samples": self.score_files(SAMPLES),
            "summaries": self.score_files(SUMMARY),
            "responses": self.score_files(RESPONSES),
            "adapters": [
                self.layout.adapter(m, c, s, t) for m, c, s in runs for t in self.steps(c)
            ],
        }

    def analysis_report_files(self) -> list[str]:
        """The statistics report, the reproduction gap and the audit report (target ``all``)."""
        return [
            self.layout.statistics(STATISTICS_REPORT),
            self.layout.statistics(f"{REPRODUCTION_GAP}.csv"),
            self.layout.audit(f"{AUDIT_REPORT}.md"),
        ]


def _local_dataset_file(spec: Mapping) -> dict:
    """A real dataset's local file as a rule input (so Snakemake tracks it), or none for the hub."""
    return {"source": spec["path"]} if "path" in spec else {}
