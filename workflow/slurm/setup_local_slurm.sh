#!/usr/bin/env bash
# Stand up a single-node SLURM cluster on this machine (localhost), for trying
# and testing the cluster run of the workflow (workflow/profiles/slurm).
#
#   sudo workflow/slurm/setup_local_slurm.sh          # install if needed, configure, start
#   sudo workflow/slurm/setup_local_slurm.sh --stop   # stop the daemons
#   .venv/bin/pytest -m slurm                          # then the cluster test
#
# Debian/Ubuntu's `slurm-wlm` (Slurm 22.05 on Debian 12) and `munge`, no
# systemd needed: munged, `slurmctld -D` and `slurmd -D` run in the background,
# their logs under /var/log/slurm.  Choices, each for a trap met here:
#   * the config lives at /etc/slurm/slurm.conf: the job step plugin drops
#     SLURM_CONF inside jobs, so `srun` in a job only finds the default path;
#   * no accounting (no slurmdbd): `sacct` fails, so job status comes from
#     `squeue --states=all`, which needs finished jobs kept for long
#     (MinJobAge) - the plugin falls back to sacct below 3x its first status
#     interval;
#   * the node gets `nproc` CPUs: a job (or a Snakemake group) asking for more
#     CPUs than the node has pends forever;
#   * select/cons_tres with CR_CPU_Memory, proctrack/linuxproc and
#     task/none: no cgroups needed inside a container.
# Safe to run again: a running cluster is left as it is.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
MIN_JOB_AGE=${MIN_JOB_AGE:-86400}   # seconds squeue keeps showing a finished job

die() { echo "setup_local_slurm: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and writes $CONF)"

stop() {
    for d in slurmd slurmctld; do
        if [ -f "/run/$d.pid" ] && kill -0 "$(cat /run/$d.pid)" 2>/dev/null; then
            kill "$(cat /run/$d.pid)" && echo "stopped $d"
        fi
        rm -f "/run/$d.pid"
    done
}

if [ "${1:-}" = "--stop" ]; then
    stop
    exit 0
fi

# --------------------------------------------------------------- packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# ------------------------------------------------------------------ munge
if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile=/etc/munge/munge.key
    else
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null | unmunge >/dev/null || die "munged did not start (see /var/log/munge/munged.log)"
fi

# -------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
CPUS=$(nproc)
# What slurmd detects, less a margin for the OS; MB.
MEM_MB=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
cat >"$CONF.new" <<EOF
# Written by cellbench's workflow/slurm/setup_local_slurm.sh: one node, localhost.
ClusterName=cellbench
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
# No slurmdbd: status through squeue, finished jobs kept visible for a day.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=$MIN_JOB_AGE
ReturnToService=2
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=10
Waittime=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
if ! cmp -s "$CONF.new" "$CONF" 2>/dev/null; then
    mv "$CONF.new" "$CONF"
    echo "wrote $CONF (node $HOST: $CPUS CPUs, $MEM_MB MB)"
    stop  # a changed config needs fresh daemons
else
    rm -f "$CONF.new"
fi

# ----------------------------------------------------------------- daemons
running() { [ -f "/run/$1.pid" ] && kill -0 "$(cat "/run/$1.pid")" 2>/dev/null; }
if ! running slurmctld; then
    setsid nohup slurmctld -D -f "$CONF" >>"$LOG_DIR/slurmctld.out" 2>&1 </dev/null &
    echo $! >/run/slurmctld.pid
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
scontrol ping | grep -q UP || die "slurmctld did not come up (see $LOG_DIR/slurmctld.log)"
if ! running slurmd; then
    setsid nohup slurmd -D -f "$CONF" >>"$LOG_DIR/slurmd.out" 2>&1 </dev/null &
    echo $! >/run/slurmd.pid
fi
for _ in $(seq 100); do
    state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
    case $state in idle*|mixed*|allocated*) break;; esac
    sleep 0.2
done
case $state in
    idle*|mixed*|allocated*) ;;
    *) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true; sleep 1
       state=$(sinfo -h -n "$HOST" -o %T)
       case $state in idle*|mixed*|allocated*) ;; *) die "node $HOST is $state (see $LOG_DIR/slurmd.log)";; esac;;
esac

# A job through the whole path: sbatch, the node, srun inside the job.
check=$(mktemp)
if ! sbatch --wait --quiet -o "$check" --wrap 'srun -n1 hostname' >/dev/null 2>&1; then
    die "a test job failed: $(cat "$check" 2>/dev/null)"
fi
rm -f "$check"
echo "SLURM is up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %T')"
