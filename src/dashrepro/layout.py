"""Where things are: the repository the workflow ships in, and the paths a config names.

A config path (a DeepSpeed JSON, the published numbers) is taken as given when it exists, so a
user's own file wins; otherwise it is one of the files shipped with the workflow, found from any
working directory. Torch- and pandas-free: Snakemake imports it while it parses.
"""

from __future__ import annotations

from pathlib import Path

#: The checkout this package runs from (``src/dashrepro`` is two levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_repo_path(path: str | Path) -> Path:
    """A config path as given if it exists (absolute, or relative to the working directory),
    else relative to the repository (files shipped with it, e.g. config/deepspeed/*.json)."""
    path = Path(path)
    return path if path.is_absolute() or path.exists() else REPO_ROOT / path
