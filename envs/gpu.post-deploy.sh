#!/usr/bin/env bash
# Post-deploy script of envs/gpu.yaml. Snakemake (--software-deployment-method conda) runs it in the
# new, activated environment right after creating it, and rebuilds the environment when this file
# changes. By hand, in an environment made from envs/gpu.yaml or envs/gpu-lock.txt:
#
#   bash envs/gpu.post-deploy.sh
#
# It builds the two packages that ship only as sdists whose setup.py imports torch, against the
# environment's torch (the CUDA build vLLM pins):
#   - DeepSpeed (ZeRO-2 with CPU optimizer offload), with no op precompiled (DS_BUILD_OPS=0): an op
#     it needs is JIT-built with ninja on first use.
#   - FlashAttention-2 (the trainer's attention when installed, training/model.py; vLLM brings
#     its own kernels). Its setup.py first looks for a prebuilt wheel for this torch/CUDA/Python on
#     the project's release page and otherwise compiles with nvcc (about an hour or more; peak
#     memory about 9 GiB per job).
# Both with --no-build-isolation (the build must see the environment's torch, not a fresh one)
# and --no-deps (their requirements are pinned in envs/gpu.yaml and checked against the resolved
# stack by scripts/check_gpu_env.py), so this script never changes the resolved stack.
# scripts/check_gpu_env.py reads the two pins below: keep them as NAME==VERSION.
#
# Settings (environment): CUDA_HOME (a CUDA 13.x toolkit; default: the environment's conda-forge
# nvcc), FLASH_ATTN_CUDA_ARCHS (default "80;90": A800 and H100 only, which halves the compile
# time), MAX_JOBS (parallel compile jobs; default: flash-attn's, from cores and free memory),
# DASHREPRO_SKIP_FLASH_ATTN=1 (no flash-attn: the trainer then uses torch's SDPA attention).
set -euo pipefail

DEEPSPEED="deepspeed==0.19.8"
FLASH_ATTN="flash-attn==2.8.3.post2"

PYTHON=${PYTHON:-python}
echo "[gpu.post-deploy] building $DEEPSPEED and $FLASH_ATTN with $("$PYTHON" -c 'import sys; print(sys.executable)')"
"$PYTHON" -c 'import torch; print("[gpu.post-deploy] torch", torch.__version__, "CUDA", torch.version.cuda)'

DS_BUILD_OPS=0 "$PYTHON" -m pip install --no-build-isolation --no-deps "$DEEPSPEED"

if [ "${DASHREPRO_SKIP_FLASH_ATTN:-0}" = 1 ]; then
  echo "[gpu.post-deploy] DASHREPRO_SKIP_FLASH_ATTN=1: no flash-attn"
else
  if [ -z "${CUDA_HOME:-}" ] && [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/nvcc" ]; then
    export CUDA_HOME="$CONDA_PREFIX"
  fi
  if [ -z "${CUDA_HOME:-}" ] || [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "[gpu.post-deploy] no nvcc: set CUDA_HOME to a CUDA 13.x toolkit, or DASHREPRO_SKIP_FLASH_ATTN=1" >&2
    exit 1
  fi
  # conda-forge's CUDA packages keep their headers and libraries under targets/<arch>-linux, where
  # torch's extension builder (which looks in $CUDA_HOME/include and lib64) does not look.
  targets="$CUDA_HOME/targets/$(uname -m)-linux"
  if [ -d "$targets/include" ]; then
    export CPATH="$targets/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$targets/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  fi
  "$CUDA_HOME/bin/nvcc" --version | tail -n 2
  FLASH_ATTN_CUDA_ARCHS="${FLASH_ATTN_CUDA_ARCHS:-80;90}" \
    "$PYTHON" -m pip install --no-build-isolation --no-deps "$FLASH_ATTN"
fi

# Every installed package's requirements hold (the sdists' included), and the builds import.
"$PYTHON" -m pip check
"$PYTHON" -c 'import deepspeed; print("[gpu.post-deploy] deepspeed", deepspeed.__version__)'
if [ "${DASHREPRO_SKIP_FLASH_ATTN:-0}" != 1 ]; then
  "$PYTHON" -c 'import flash_attn; print("[gpu.post-deploy] flash_attn", flash_attn.__version__)'
fi
