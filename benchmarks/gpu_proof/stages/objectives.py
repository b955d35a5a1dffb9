"""Stage ``objectives``: ``benchmarks/objectives.py`` at the shape's lengths, each in a process of its
own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..shapes import ROOT, SHAPES


def stage_objectives(args) -> dict:
    spec = SHAPES[args.shape]
    results = {}
    for length in spec["objective_lengths"]:
        path = Path(args.out) / f"objectives_T{length}.json"
        command = [sys.executable, str(ROOT / "benchmarks/objectives.py"), "--T", str(length),
                   "--hidden", str(spec["objective_hidden"]), "--dtypes", "bf16",
                   "--json", str(path)]  # fmt: skip
        if args.shape == "tiny":
            command += ["--V", "4096", "--paths", "naive,chunked"]
        completed = subprocess.run(command, capture_output=True, text=True)
        print(completed.stdout[-3000:], completed.stderr[-3000:], sep="\n")
        if completed.returncode:
            raise RuntimeError(f"objectives.py at T={length} exited {completed.returncode}")
        results[f"T{length}"] = json.loads(path.read_text())
    return results
