#!/usr/bin/env bash
# Creates (or reuses) the project's CPU virtual environment in .venv.
#
#   bash scripts/setup_env.sh
#
# Needs only python3 >= 3.11 with venv. torch is pinned to the 2.13.0 CPU wheel first, so
# nothing later pulls a CUDA build. A stamp file records the hash of the dependency files:
# a second run with nothing changed returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
STAMP="$VENV/.dashrepro-setup-stamp"
want=$(cat pyproject.toml envs/cpu-constraints.txt scripts/setup_env.sh | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"dashrepro needs Python >= 3.11, found {sys.version.split()[0]}")
PY

echo "[setup_env] creating $VENV (CPU stack, torch==2.13.0)" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
# DeepSpeed (the trainer's ZeRO-2 path, tested on CPU) ships only an sdist whose setup.py imports
# torch: it is built here against the torch above, without build isolation (setuptools comes with
# torch), and with no op precompiled (DS_BUILD_OPS=0; the CPU path needs none, see
# training/distributed.py). About 15 s from an empty cache. The [dev] install below then finds
# it installed.
DS_BUILD_OPS=0 "$VENV/bin/python" -m pip install --quiet --no-build-isolation \
  -c envs/cpu-constraints.txt "deepspeed==0.19.8"
"$VENV/bin/python" -m pip install --quiet -c envs/cpu-constraints.txt -e ".[dev]"
echo "$want" > "$STAMP"
echo "[setup_env] ready: $VENV" >&2
