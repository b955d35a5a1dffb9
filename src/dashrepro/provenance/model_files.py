"""The files of a model folder that a job reads beside the one it declares as its input.

A rule declares one file of each model folder it loads (the base model's weights, a hub
snapshot's record, a checkpoint's adapter weights and config); loading reads the others too,
and each changes what is sampled or trained: ``config.json``, ``generation_config.json``, the
tokenizer's files and chat template. ``model_folder_files`` lists them; ``provenance.job``
records each with its sha256 (``read_files``), which the audit checks again. Left out: weights
(declared, or listed in a snapshot's record), provenance records, hidden files and Markdown
(docs/audit.md lists every file that shapes a number and what checks it).

    model_folder_files({"base_model": ["results/tiny/base_model/tiny/model.safetensors"]})
    # {"base_model_files": ["results/tiny/base_model/tiny/config.json", ...]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

#: The input names under which the rules declare a file of a model folder.
MODEL_INPUTS = ("base_model", "adapter")
#: Suffixes of weights files: inputs of their own, or hashed in a hub snapshot's record.
WEIGHTS_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack",
                              ".ckpt", ".onnx"})  # fmt: skip


def _is_read_by_loading(path: Path) -> bool:
    return (
        path.is_file()
        and not path.name.startswith(".")
        and path.suffix not in WEIGHTS_SUFFIXES
        and path.suffix != ".md"
        and path.name != "provenance.json"
        and not path.name.endswith(".provenance.json")
    )


def model_folder_files(inputs: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``{"<input>_files": [path, ...]}``: for each declared file of a model folder (inputs
    ``MODEL_INPUTS``), the other files of its folder that loading reads, named as the input is
    (relative to the workflow's directory), sorted. A model input that is a folder (a local
    model, hashed whole as the input) or a hub id (no file) has none; declared inputs are not
    listed again."""
    declared = {str(path) for paths in inputs.values() for path in paths}
    found: dict[str, list[str]] = {}
    for name in MODEL_INPUTS:
        files: set[str] = set()
        for path in map(Path, inputs.get(name, ())):
            if not path.is_file():
                continue
            for child in path.parent.iterdir():
                named = str(path.parent / child.name)
                if named not in declared and _is_read_by_loading(child):
                    files.add(named)
        if files:
            found[f"{name}_files"] = sorted(files)
    return found
