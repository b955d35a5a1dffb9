#!/usr/bin/env bash
# Stops the test cluster of scripts/ci_slurm_up.sh: each daemon by its PID file (only when that
# PID is a live process of the daemon's name), in the reverse order of the start, waiting for
# each to exit. Running it when nothing runs is harmless. Installed packages, configuration and
# the accounting database stay (a later start reuses them).
set -euo pipefail

[ "$(id -u)" = 0 ] || {
  echo "ci_slurm_down: needs root" >&2
  exit 2
}

# Only the cluster that ci_slurm_up.sh configured (the first line of its slurm.conf).
MARK="# Written by scripts/ci_slurm_up.sh (the project's single-node test cluster)."
if [ -f /etc/slurm/slurm.conf ] && [ "$(head -n 1 /etc/slurm/slurm.conf)" != "$MARK" ]; then
  echo "ci_slurm_down: /etc/slurm/slurm.conf is not the test cluster's; leaving SLURM alone"
  exit 0
fi

# PID file, process name
DAEMONS=(
  "/run/slurmd.pid slurmd"
  "/run/slurmctld.pid slurmctld"
  "/run/slurmdbd.pid slurmdbd"
  "/run/mysqld/mysqld.pid mariadbd"
  "/run/munge/munged.pid munged"
)

for entry in "${DAEMONS[@]}"; do
  read -r pid_file name <<<"$entry"
  [ -s "$pid_file" ] || continue
  pid=$(cat "$pid_file")
  if [ ! -r "/proc/$pid/comm" ] || [ "$(cat "/proc/$pid/comm")" != "$name" ]; then
    echo "ci_slurm_down: $name not running (stale $pid_file)"
    rm -f "$pid_file"
    continue
  fi
  kill "$pid"
  for _ in $(seq 60); do
    [ -d "/proc/$pid" ] || break
    sleep 0.5
  done
  if [ -d "/proc/$pid" ]; then
    echo "ci_slurm_down: $name ($pid) still running after 30 s" >&2
    exit 1
  fi
  rm -f "$pid_file"
  echo "ci_slurm_down: stopped $name ($pid)"
done
