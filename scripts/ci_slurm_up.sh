#!/usr/bin/env bash
# A real single-node SLURM cluster for the tests (tests/workflow/test_slurm_cluster.py), made
# from Debian 12's packages (slurm-wlm 22.05, munge, slurmdbd + MariaDB for accounting), with
# no systemd and no cgroups. Needs root and apt-get; stop it with scripts/ci_slurm_down.sh.
#
#   sudo bash scripts/ci_slurm_up.sh              # install (first time, ~1 min), start, wait
#   FAKE_GPUS=4 sudo bash scripts/ci_slurm_up.sh  # more fake GPUs on the GPU partition
#
# What it makes, on this machine (node = `hostname -s`, all its CPUs, its memory less 2 GiB):
#   partitions  ci-cpu (default) and ci-gpu, the same node; ci-gpu's node has FAKE_GPUS
#               (default 2) fake GPUs, GRES gpu:a800:N on dummy character devices, so that
#               `--gpus=N` / `--gpus=a800:N` requests schedule;
#   account     ci_account, holding the calling user (profiles/slurm-ci uses it);
#   accounting  slurmdbd on MariaDB: `sacct` (the SLURM executor plugin's default status
#               command, without which Snakemake never sees a job finish) records every job
#               with its state, exit code, comment (Snakemake's rule and wildcards) and the
#               `sbatch` line that submitted it.
# Idempotent: a daemon already running (its PID file names a live process of that name) is left
# alone, installed packages are not reinstalled, and a second run only waits for the node; a
# changed slurm.conf restarts slurmctld and slurmd. A slurmctld this script starts starts empty:
# jobs left from an earlier start of the cluster are dropped, not recovered.
set -euo pipefail

FAKE_GPUS=${FAKE_GPUS:-2}
ACCOUNT=ci_account
CLUSTER=ci
LOG_DIR=/var/log/slurm

say() { echo "ci_slurm_up: $*"; }
die() {
  echo "ci_slurm_up: $*" >&2
  exit 2
}

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts daemons)"

# --- packages ------------------------------------------------------------------------------
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "needs apt-get to install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' init scripts from starting daemons: this script starts them itself.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# alive PIDFILE NAME: the PID file names a running process called NAME.
alive() {
  [ -s "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# wait_for DESCRIPTION SECONDS COMMAND...: retry COMMAND every 0.5 s.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq $((seconds * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "$what did not come up within ${seconds}s (logs in $LOG_DIR)"
}

# stop PIDFILE NAME: SIGTERM the daemon and wait for it to exit.
stop() {
  alive "$1" "$2" || return 0
  local pid
  pid=$(cat "$1")
  kill "$pid"
  for _ in $(seq 60); do
    [ -d "/proc/$pid" ] || break
    sleep 0.5
  done
  rm -f "$1"
}

HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(($(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 2048))

mkdir -p /run/munge /var/log/munge /var/lib/munge /var/spool/slurmctld /var/spool/slurmd \
  "$LOG_DIR" /run/mysqld
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge
chown slurm:slurm /var/spool/slurmctld "$LOG_DIR"
chown mysql:mysql /run/mysqld

# --- configuration ---------------------------------------------------------------------------
GRES_NODE=""
GRES_TYPES=""
if [ "$FAKE_GPUS" -gt 0 ]; then
  mkdir -p /opt/fakegpu
  for i in $(seq 0 $((FAKE_GPUS - 1))); do
    [ -e "/opt/fakegpu/nvidia$i" ] || mknod "/opt/fakegpu/nvidia$i" c 195 "$i"
  done
  GRES_NODE="Gres=gpu:a800:${FAKE_GPUS}"
  GRES_TYPES="GresTypes=gpu"
fi

changed=0
# install_file PATH MODE OWNER: PATH gets stdin if different, and `changed` is set.
install_file() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
  else
    install -m "$2" -o "$3" -g "$3" "$tmp" "$1"
    rm -f "$tmp"
    changed=1
  fi
}

mkdir -p /etc/slurm
MARK="# Written by scripts/ci_slurm_up.sh (the project's single-node test cluster)."
if [ -f /etc/slurm/slurm.conf ] && [ "$(head -n 1 /etc/slurm/slurm.conf)" != "$MARK" ]; then
  die "/etc/slurm/slurm.conf was not written by this script: not overwriting a real cluster's"
fi
if [ "$FAKE_GPUS" -gt 0 ]; then
  install_file /etc/slurm/gres.conf 644 root \
    <<<"NodeName=${HOST} Name=gpu Type=a800 File=/opt/fakegpu/nvidia[0-$((FAKE_GPUS - 1))]"
fi
install_file /etc/slurm/slurm.conf 644 root <<CONF
${MARK}
ClusterName=${CLUSTER}
SlurmctldHost=${HOST}
AuthType=auth/munge
SlurmUser=slurm
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoreFlags=job_comment
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
${GRES_TYPES}
DefMemPerCPU=1000
MinJobAge=300
KillWait=30
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
NodeName=${HOST} CPUs=${CPUS} RealMemory=${MEM} ${GRES_NODE} State=UNKNOWN
PartitionName=ci-cpu Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
PartitionName=ci-gpu Nodes=${HOST} MaxTime=INFINITE State=UP
CONF
slurm_changed=$changed
install_file /etc/slurm/slurmdbd.conf 600 slurm <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=${LOG_DIR}/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurmpw
CONF

# --- daemons -------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid munged; then
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged
fi
wait_for munged 30 munge -n

if ! alive /run/mysqld/mysqld.pid mariadbd; then
  say "starting mariadbd"
  setsid /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid \
    </dev/null >"$LOG_DIR/mariadb.out" 2>&1 &
fi
wait_for mariadbd 60 mariadb-admin ping
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

if ! alive /run/slurmdbd.pid slurmdbd; then
  say "starting slurmdbd"
  slurmdbd
fi
wait_for slurmdbd 60 sacctmgr -n list cluster
USER_NAME=$(id -un)
[ -n "$(sacctmgr -n -P list cluster "$CLUSTER" format=cluster)" ] ||
  sacctmgr -i add cluster "$CLUSTER" >/dev/null
[ -n "$(sacctmgr -n -P list account "$ACCOUNT" format=account)" ] ||
  sacctmgr -i add account "$ACCOUNT" Description=ci Organization=ci >/dev/null
[ -n "$(sacctmgr -n -P list assoc user="$USER_NAME" account="$ACCOUNT" format=user)" ] ||
  sacctmgr -i add user "$USER_NAME" Account="$ACCOUNT" >/dev/null

if [ "$slurm_changed" = 1 ]; then
  stop /run/slurmd.pid slurmd
  stop /run/slurmctld.pid slurmctld
fi
if ! alive /run/slurmctld.pid slurmctld; then
  # -c: start with no jobs. A cluster stopped with jobs in it (a test run cut off, a machine
  # image saved mid-run) would otherwise recover them as running, holding the node's CPUs until
  # their time limits end, and every new job would wait behind them.
  say "starting slurmctld (with a clear job state)"
  slurmctld -c
fi
if ! alive /run/slurmd.pid slurmd; then
  say "starting slurmd"
  slurmd
fi

node_up() { sinfo -h -n "$HOST" -o %T | grep -Eqx 'idle|mixed|allocated|completing'; }
for _ in $(seq 120); do
  node_up && break
  # A node left down or drained by an earlier, unclean stop: take it back.
  if sinfo -h -n "$HOST" -o %T 2>/dev/null | grep -Eq 'down|drain'; then
    scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
  fi
  sleep 0.5
done
node_up || die "node $HOST is not up: $(sinfo -h -n "$HOST" -o '%T %E' 2>&1)"
sinfo -o "%P %N %c %m %G %T"
