"""Each sampling backend's needs, declared once: where it runs, which environment, which class.

The rules' resources (GPUs, conda environment), the settings' allowed values and
``make_sampler`` all ask this registry, so that "does this job need a GPU?" has one answer.
A backend that can run on either device (``hf``, ``hf_compiled``, ``hf_continuous``) runs
where the config's ``device`` says; ``vllm`` runs on CUDA only. Torch-free: the workflow's parse reads it.

    needs_gpu("hf", "cuda")        # True: an HF evaluation on a GPU gets one on the cluster
    environment(needs_gpu("vllm")) # "gpu"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """One backend: its evaluation sampler's class, its rollout sampler's, where it may run."""

    name: str
    module: str  # the module holding its samplers (imported only when one is made)
    sampler: str  # the evaluation sampler's class (``make_sampler``)
    rollout_sampler: str  # the trainer's rollout sampler's class (``make_rollout_sampler``)
    devices: tuple[str, ...]  # where it runs; the first is where it runs unless told
    summary: str


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend(
            "hf",
            "dashrepro.sampling.hf",
            "HFSampler",
            "HFRolloutSampler",
            ("cpu", "cuda"),
            "Hugging Face generate, eager, on the policy as loaded (the CPU default)",
        ),
        Backend(
            "hf_compiled",
            "dashrepro.sampling.hf_compiled",
            "CompiledSampler",
            "CompiledRolloutSampler",
            ("cpu", "cuda"),
            "Hugging Face generate on a plain copy of the policy (base plus the adapter's delta, "
            "written in place), a static key/value cache and a compiled decode step",
        ),
        Backend(
            "hf_continuous",
            "dashrepro.sampling.hf_continuous",
            "ContinuousSampler",
            "ContinuousRolloutSampler",
            ("cpu", "cuda"),
            "transformers' continuous batching on a plain copy of the policy (base plus the "
            "adapter's delta, written in place): a paged key/value cache, finished requests "
            "leaving at once, sampling on the device",
        ),
        Backend(
            "vllm",
            "dashrepro.sampling.vllm",
            "VLLMSampler",
            "VLLMRolloutSampler",
            ("cuda",),
            "a vLLM engine, each adapter a LoRA request",
        ),
    )
}

#: The environments a job can run in (``envs/<name>.yaml``).
CPU_ENVIRONMENT, GPU_ENVIRONMENT = "cpu", "gpu"


def backend(name: str) -> Backend:
    """The registered backend ``name``; a clear error naming the known ones otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sampling backend {name!r}; expected one of {tuple(BACKENDS)}")
    return BACKENDS[name]


def job_device(name: str, device: str | None = None) -> str:
    """Where a job sampling with backend ``name`` runs: ``device`` where given (and allowed),
    else the backend's first device."""
    allowed = backend(name).devices
    if device is None:
        return allowed[0]
    if device not in allowed:
        raise ValueError(f"sampling backend {name!r} runs on {allowed}, not on {device!r}")
    return device


def needs_gpu(name: str, device: str | None = None) -> bool:
    """Whether a job sampling with backend ``name`` on ``device`` needs a GPU."""
    return job_device(name, device) == "cuda"


def environment(gpu: bool) -> str:
    """The environment of a job that does (or does not) need a GPU."""
    return GPU_ENVIRONMENT if gpu else CPU_ENVIRONMENT
