#!/usr/bin/env bash
# Start TensorBoard on a run's tracking folder and take a screenshot of its scalars page in
# headless Chromium (Debian's `chromium` package): every run's training curves and checkpoint
# scores, as a researcher watching the run sees them. TensorBoard is stopped afterwards.
#
#   bash scripts/tensorboard_screenshot.sh [LOGDIR] [OUT.png] [FILTER]
#
# LOGDIR: default results/tiny/tracking/tensorboard (the embedded default's); OUT: default
# docs-screenshots/tensorboard.png; FILTER: a tag regex for the page (default: train/loss and
# the checkpoints' mean Avg@k).
set -euo pipefail
cd "$(dirname "$0")/.."
LOGDIR=${1:-results/tiny/tracking/tensorboard}
OUT=$(realpath -m "${2:-docs-screenshots/tensorboard.png}")
FILTER=${3:-train/loss|checkpoint/mean_avg_at_k}
BROWSER=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$BROWSER" ]; then
  echo "[tensorboard_screenshot] needs Chromium: apt-get install chromium" >&2
  exit 2
fi
if [ ! -d "$LOGDIR" ]; then
  echo "[tensorboard_screenshot] no TensorBoard folder $LOGDIR: run the workflow first" >&2
  exit 2
fi
PYTHON=${PYTHON:-.venv/bin/python}
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
"$PYTHON" -m tensorboard.main --logdir "$LOGDIR" --host 127.0.0.1 --port "$PORT" \
  --reload_interval 0 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 120); do
  if "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/data/runs', timeout=1)" 2>/dev/null; then
    break
  fi
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.5
done
RUNS=$("$PYTHON" -c "import json, urllib.request as u; print(len(json.load(u.urlopen('http://127.0.0.1:$PORT/data/runs'))))")
mkdir -p "$(dirname "$OUT")"
QUERY=$("$PYTHON" -c "import sys, urllib.parse as p; print(p.quote(sys.argv[1], safe=''))" "$FILTER")
"$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000 \
  --virtual-time-budget=15000 --screenshot="$OUT" \
  "http://127.0.0.1:$PORT/?smoothing=0#scalars&tagFilter=$QUERY" >/dev/null 2>&1
echo "[tensorboard_screenshot] $OUT ($RUNS runs in $LOGDIR)"
