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

and three shared cores: ``config`` (loading and validating the configuration), ``parameters``
(the registries of aggregations and objectives with their parameter ranges) and ``io`` (atomic
writes, reads that name their file, hashing).
"""

__version__ = "0.1.0"
