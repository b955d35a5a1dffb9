"""The shipped warm starts: SFT'd tiny base models, committed with the recipes they came from.

The warm-start SFT is where the embedded experiments depend most on the machine (CPUs with other
floating-point kernels grow other models from it: docs/reproducibility.md), so its results
ship with the repository, as a released model's pinned commit does at the paper's scales:
``warm_starts/<name>/`` holds one's weights, SFT loss history and ``recipe.json`` (``default``:
the embedded default's; ``task_families``: the premise studies'). Rule ``sft_base_model``
reuses the one whose recipe a run asks for, byte for byte (``sft.reuse_shipped``: architecture,
SFT settings, the sha256 of the SFT examples' token ids, the SFT code); any other recipe
trains, and the log names what differs from the nearest shipped one.

    python -m dashrepro.embedded.warm_start results/tiny/base_model/tiny   # ship as "default"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from dashrepro.io import atomic_dir, read_json, sha256_file, write_json
from dashrepro.layout import MODEL_WEIGHTS, SFT_HISTORY

#: The committed warm starts, one folder each (package data).
SHIPPED_ROOT = Path(__file__).with_name("warm_starts")
#: The embedded default's.
SHIPPED = SHIPPED_ROOT / "default"
#: The recipe, in a shipped folder and beside a trained model.
RECIPE = "recipe.json"
#: What a warm start is: these files of the model folder (the tokenizer is the run's own).
FILES = ("config.json", "generation_config.json", MODEL_WEIGHTS, SFT_HISTORY)
#: The code that turns the examples into weights: a change to it makes a new recipe.
CODE = ("sft.py", "tiny_model.py")
#: Keys of ``sft`` that choose how the base model is obtained, not what it is.
NOT_RECIPE = ("reuse_shipped",)


def examples_sha256(examples: Sequence[tuple[Sequence[int], int]]) -> str:
    """The SFT examples' identity: their token ids and prompt lengths, in order."""
    canonical = json.dumps([[list(map(int, ids)), int(n)] for ids, n in examples])
    return hashlib.sha256(canonical.encode()).hexdigest()


def sft_examples_for(frame, tokenizer, protocol, sft: Mapping, teacher_views: Sequence[str]):
    """The SFT examples of a scale's ``sft`` settings (``embedded.sft.build_sft_examples``):
    what rule ``sft_base_model`` trains on, and whose sha256 the recipe records. Here, not in
    ``sft.py``, whose own sha256 is part of the recipe."""
    from dashrepro.embedded.sft import build_sft_examples

    return build_sft_examples(
        frame,
        tokenizer,
        protocol,
        sft["teacher_fraction"],
        sft["seed"],
        teacher_views=tuple(teacher_views),
        no_thinking_fraction=sft.get("no_thinking_fraction", 0.0),
    )


def make_recipe(
    architecture: Mapping,
    sft: Mapping,
    examples: Sequence[tuple[Sequence[int], int]],
    special_tokens: Mapping[str, int],
) -> dict:
    """What decides the warm start's weights, as JSON-comparable values."""
    here = Path(__file__).parent
    return {
        "architecture": dict(sorted(architecture.items())),
        "sft": {k: v for k, v in sorted(sft.items()) if k not in NOT_RECIPE},
        "examples_sha256": examples_sha256(examples),
        "n_examples": len(examples),
        "special_tokens": dict(sorted(special_tokens.items())),
        "code_sha256": {name: sha256_file(here / name) for name in CODE},
    }


def recipe_differences(wanted: Mapping, shipped: Mapping, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two recipes (either side missing counts)."""
    differ = []
    for key in sorted(set(wanted) | set(shipped)):
        mine, theirs = wanted.get(key), shipped.get(key)
        if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
            differ += recipe_differences(mine, theirs, f"{prefix}{key}.")
        elif mine != theirs:
            differ.append(f"{prefix}{key}")
    return differ


def shipped_differences(wanted: Mapping, folder: Path = SHIPPED) -> list[str]:
    """Why the warm start in ``folder`` is not the one ``wanted`` describes (empty: it is)."""
    if not (folder / RECIPE).is_file():
        return [f"no {RECIPE} in {folder}"]
    return recipe_differences(wanted, read_json(folder / RECIPE)["recipe"])


def shipped_folders(root: Path = SHIPPED_ROOT) -> list[Path]:
    """Every shipped warm start under ``root``, by name."""
    return sorted(path.parent for path in root.glob(f"*/{RECIPE}"))


def find_shipped(wanted: Mapping, root: Path = SHIPPED_ROOT) -> tuple[Path | None, list[str]]:
    """The shipped warm start made from recipe ``wanted`` and no differences; or ``None`` and
    why the nearest one (the fewest keys differing) is not it, each key after its folder's name."""
    nearest: list[str] | None = None
    for folder in shipped_folders(root):
        differ = shipped_differences(wanted, folder)
        if not differ:
            return folder, []
        if nearest is None or len(differ) < len(nearest):
            nearest = [f"{folder.name}: {key}" for key in differ]
    return None, nearest if nearest is not None else [f"no {RECIPE} under {root}"]


def shipped_hashes(folder: Path = SHIPPED) -> dict[str, str]:
    """The sha256 of each shipped file: what a model folder that reused them records."""
    return {name: sha256_file(folder / name) for name in (*FILES, RECIPE)}


def reuse_shipped(destination: Path, recipe: Mapping, folder: Path = SHIPPED) -> str:
    """Fill a model folder with the shipped warm start and the record of what it copied (the
    shipped files' sha256 and the run's recipe; no machine: nothing was computed here);
    return the weights' sha256."""
    digest = copy_shipped(destination, folder)
    reused = {
        "reused": "dashrepro.embedded.warm_start",
        "shipped_sha256": shipped_hashes(folder),
        "recipe": recipe,
    }
    write_json(destination / RECIPE, reused)
    return digest


def write_trained_record(destination: Path, recipe: Mapping) -> None:
    """The record beside a warm start trained here: its recipe, and the torch and kernels
    that made it (``ship`` accepts only such a folder)."""
    import torch

    from dashrepro.numerics import kernel_record

    made_with = {"torch": torch.__version__, **kernel_record()}
    write_json(destination / RECIPE, {"recipe": recipe, "made_with": made_with})


def copy_shipped(destination: Path, folder: Path = SHIPPED) -> str:
    """Copy the warm start's files into ``destination``; return its weights' sha256, after
    checking it against the one its recipe recorded (a damaged copy stops here, named)."""
    record = read_json(folder / RECIPE)
    for name in FILES:
        shutil.copyfile(folder / name, destination / name)
    digest = sha256_file(destination / MODEL_WEIGHTS)
    if digest != record["model_sha256"]:
        raise ValueError(
            f"{folder / MODEL_WEIGHTS}: sha256 {digest}, but {folder / RECIPE} records "
            f"{record['model_sha256']}; restore the file from the repository"
        )
    return digest


def ship(model_dir: Path, folder: Path = SHIPPED) -> dict:
    """Make a trained model folder (rule ``sft_base_model``'s output, with its ``recipe.json``)
    the shipped warm start; returns the new record."""
    made = read_json(model_dir / RECIPE)
    if "made_with" not in made:
        raise ValueError(f"{model_dir / RECIPE}: not a trained warm start (it reused one)")
    record = {**made, "model_sha256": sha256_file(model_dir / MODEL_WEIGHTS)}
    with atomic_dir(folder) as tmp:
        for name in FILES:
            shutil.copyfile(model_dir / name, tmp / name)
        write_json(tmp / RECIPE, record)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Ship a trained warm start with the package.")
    parser.add_argument("model_dir", type=Path, help="e.g. results/tiny/base_model/tiny")
    parser.add_argument(
        "--name", default=SHIPPED.name, help="its folder under warm_starts/ (default: default)"
    )
    args = parser.parse_args(argv)
    if not args.name.isidentifier():
        parser.error(f"--name {args.name!r}: a folder name of letters, digits and underscores")
    folder = SHIPPED_ROOT / args.name
    record = ship(args.model_dir, folder)
    print(f"shipped {args.model_dir} as {folder} (model sha256 {record['model_sha256']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
