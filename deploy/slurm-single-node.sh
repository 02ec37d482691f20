#!/usr/bin/env bash
# dpdist's copy of the single-node SLURM recipe: start a real SLURM cluster (munge + slurmctld +
# slurmd) on this machine, as root, for the SLURM tests (tests/flows/test_slurm.py) and trials.
# Verified on Debian bookworm with slurm-wlm 22.05: `srun -N1 hostname` answers, and
# dask_jobqueue.SLURMCluster(queue="debug") gets workers in a few seconds.
# Usage: bash deploy/slurm-single-node.sh start|stop|status
set -euo pipefail
cmd=${1:-start}
H=$(hostname)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))

start() {
  if ! command -v slurmctld >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
  fi
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge /etc/munge
  [ -f /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 400 /etc/munge/munge.key
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$H
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$H CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
CONF
  running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
  running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
  running /run/slurmctld.pid || /usr/sbin/slurmctld
  running /run/slurmd.pid || /usr/sbin/slurmd
  for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
  sinfo
}
stop() {
  # each daemon wrote its own pid file; end exactly those processes
  for f in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
}
case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) sinfo; squeue ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
