"""dashrepro: the reference pipeline for on-policy self-distillation (OPSD) and DASH.

Each stage of the Snakemake workflow is a thin call into one subpackage:

- ``data``        -- real datasets normalised to one schema; student and teacher prompts
- ``embedded``    -- the embedded default: synthetic data, tiny tokenizer and model, their SFT
- ``objectives``  -- local signals and rollout aggregations (OPSD, DASH, ablations), baselines, GRPO
- ``training``    -- LoRA on-policy self-distillation with resumable checkpoints
- ``sampling``    -- one sampler interface over Hugging Face generate and vLLM
- ``evaluation``  -- sample responses per checkpoint, grade them, summarise Avg@k
- ``grading``     -- the paper's answer extraction and math-verify equivalence check
- ``analysis``    -- best-checkpoint selection, table and figure kinds
- ``provenance``  -- what every output was made from

and the shared cores: ``config`` (loading and validating the configuration), ``parameters``
(the registries of aggregations and objectives with their parameter ranges), ``run_matrix``
(method grids, derived scales, the runs and their checkpoint steps), ``io`` (atomic writes,
reads that name their file, hashing), ``layout`` (the repository's files a config names),
``adapters`` (a LoRA adapter folder, read by the trainer and the samplers) and ``hub`` (released
models at a pinned commit). The stages import the cores and earlier stages, never each other in
a circle (``tests/test_import_graph.py``).
"""

__version__ = "0.1.0"
