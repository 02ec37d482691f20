#!/usr/bin/env bash
# A real multi-node SLURM cluster on this machine, as root, for the multi-node test
# (tests/flows/test_slurm_multi_node.py) and trials of deploy/slurm-multi-node.toml.
#
# Its parts, all its own (it runs beside deploy/slurm-single-node.sh's cluster and shares nothing
# with it: another SLURM_CONF, munge socket, ports, state and log directories):
#   - munged on its own socket; slurmctld (port 6917) and slurmdbd (port 6919, its accounting in a
#     MariaDB server on a Unix socket only) on the flow's side, which is this machine's own network
#     namespace, reached by the nodes at 10.213.57.1 on the bridge dpmn0;
#   - N nodes (DPDIST_SLURM_NODES, default 2), dpdist-node1..N: each one slurmd in its own network
#     namespace with its own address (10.213.57.11, .12, ...) on a veth pair into the bridge, its own
#     hostname, /etc/hosts, /tmp, /var/tmp and /dev/shm. A node reaches the bridge's subnet only.
#   - the shared directory /var/lib/dpdist-slurm-multi/shared, where a run's output (its stores)
#     must be; the nodes see the rest of the filesystem as a cluster node sees its software and home.
#     A ledger in the flow's /tmp is out of the nodes' reach.
# SLURM's commands reach this cluster with SLURM_CONF=/var/lib/dpdist-slurm-multi/etc/slurm.conf
# (`start` prints it); without it they go to the machine's default cluster.
# Verified on Debian bookworm (slurm-wlm 22.05, MariaDB 10.11).
# Usage: bash deploy/slurm-multi-node.sh start|stop|status
set -euo pipefail
cmd=${1:-start}
ROOT=/var/lib/dpdist-slurm-multi
CONF=$ROOT/etc/slurm.conf
NODES=${DPDIST_SLURM_NODES:-2}
BR=dpmn0          # the bridge, and each node's end of its veth pair (so `interface: dpmn0` fits both sides)
NET=10.213.57     # the flow's side is .1, node i is .(10+i)
CTLD_PORT=6917
SLURMD_PORT=6918
DBD_PORT=6919
H=$(hostname -s)
REPO=$(cd "$(dirname "$0")/.." && pwd)
export SLURM_CONF=$CONF

node() { echo "dpdist-node$1"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
skip() { echo "slurm-multi-node: cannot start: $*" >&2; exit 1; }

install_packages() {
  local missing=()
  for exe in slurmctld slurmd slurmdbd munged mariadbd ip unshare; do
    command -v "$exe" >/dev/null || missing+=("$exe")
  done
  [ -f /usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so ] || missing+=(mysql-plugin)
  [ ${#missing[@]} = 0 ] && return
  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      slurm-wlm slurmdbd slurm-wlm-mysql-plugin munge mariadb-server iproute2 util-linux >/dev/null; } \
    || skip "could not install Debian's slurm-wlm, slurmdbd, munge and mariadb-server (missing: ${missing[*]})"
}

write_config() {
  mkdir -p "$ROOT"/{etc,run,log,spool,munge,db,shared}
  chmod 0700 "$ROOT/etc" "$ROOT/run" "$ROOT/log" "$ROOT/spool"
  chmod 1777 "$ROOT/shared"   # like a cluster's scratch filesystem; dpdist makes its stores owner-only
  local nodes="" i mem
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / (NODES + 1) ))
  for i in $(seq "$NODES"); do
    nodes+="NodeName=$(node "$i") NodeAddr=$NET.$((10 + i)) NodeHostname=$(node "$i") CPUs=1 RealMemory=$mem State=UNKNOWN"$'\n'
  done
  cat > "$CONF" <<CONF
ClusterName=dpdistmulti
SlurmctldHost=$H($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$ROOT/munge/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$ROOT/spool/ctld
SlurmdSpoolDir=$ROOT/spool/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NET.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$ROOT/munge/munge.socket
JobCompType=jobcomp/none
${nodes}PartitionName=multi Nodes=$(node 1)-$(node "$NODES") Default=YES MaxTime=INFINITE State=UP
CONF
  # one node range in slurm's syntax: dpdist-node[1-N]
  sed -i "s/Nodes=$(node 1)-$(node "$NODES")/Nodes=dpdist-node[1-$NODES]/" "$CONF"
  cat > "$ROOT/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$ROOT/munge/munge.socket
DbdHost=$H
DbdAddr=$NET.1
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=dpdist_slurm_acct
PidFile=$ROOT/run/slurmdbd.pid
LogFile=$ROOT/log/slurmdbd.log
CONF
  chmod 0600 "$ROOT/etc/slurmdbd.conf"
}

start_munge() {
  chown munge:munge "$ROOT/munge"
  chmod 0755 "$ROOT/munge"
  if [ ! -f "$ROOT/etc/munge.key" ]; then
    dd if=/dev/urandom bs=1 count=1024 of="$ROOT/etc/munge.key" 2>/dev/null
  fi
  mkdir -p "$ROOT/munge-key" && cp "$ROOT/etc/munge.key" "$ROOT/munge-key/munge.key"
  chown -R munge:munge "$ROOT/munge-key" && chmod 0700 "$ROOT/munge-key" && chmod 0400 "$ROOT/munge-key/munge.key"
  alive "$ROOT/munge/munged.pid" || runuser -u munge -- /usr/sbin/munged --socket="$ROOT/munge/munge.socket" \
    --key-file="$ROOT/munge-key/munge.key" --pid-file="$ROOT/munge/munged.pid" \
    --log-file="$ROOT/munge/munged.log" --seed-file="$ROOT/munge/munged.seed"
}

start_accounting() {
  chown mysql:mysql "$ROOT/db"
  if [ ! -d "$ROOT/db/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$ROOT/db" --skip-test-db \
      --auth-root-authentication-method=socket >"$ROOT/log/mariadb-install.log" 2>&1
  fi
  mkdir -p "$ROOT/mysqld" && chown mysql:mysql "$ROOT/mysqld"
  if ! alive "$ROOT/mysqld/mysqld.pid"; then
    # no TCP port: slurmdbd (root, unix_socket authentication) is its only client
    setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$ROOT/db" --skip-networking \
      --socket="$ROOT/mysqld/mysqld.sock" --pid-file="$ROOT/mysqld/mysqld.pid" \
      --log-error="$ROOT/mysqld/mariadb.log" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 60); do [ -S "$ROOT/mysqld/mysqld.sock" ] && break; sleep 0.5; done
  fi
  [ -S "$ROOT/mysqld/mysqld.sock" ] || skip "MariaDB did not start ($ROOT/mysqld/mariadb.log)"
  alive "$ROOT/run/slurmdbd.pid" || MYSQL_UNIX_PORT="$ROOT/mysqld/mysqld.sock" /usr/sbin/slurmdbd
  for _ in $(seq 60); do sacctmgr -n list cluster format=cluster >/dev/null 2>&1 && break; sleep 0.5; done
  sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx dpdistmulti \
    || sacctmgr -i add cluster dpdistmulti >/dev/null \
    || skip "slurmdbd does not answer ($ROOT/log/slurmdbd.log)"
}

start_network() {
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge || skip "cannot make a bridge (ip link add type bridge)"
  ip addr show dev "$BR" | grep -q "$NET.1/24" || ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  local i ns
  for i in $(seq "$NODES"); do
    ns=$(node "$i")
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns" || skip "cannot make a network namespace (ip netns add)"
    fi
    if ! ip link show "dpmn-n$i" >/dev/null 2>&1; then
      ip link add "dpmn-n$i" type veth peer name "dpmn-p$i"
      ip link set "dpmn-p$i" netns "$ns"
      ip -n "$ns" link set "dpmn-p$i" name "$BR"
      ip link set "dpmn-n$i" master "$BR" up
      ip -n "$ns" addr add "$NET.$((10 + i))/24" dev "$BR"
      ip -n "$ns" link set "$BR" up
      ip -n "$ns" link set lo up
    fi
    # the node's /etc/hosts (where `ip netns exec` looks for it too)
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      echo "$NET.1 $H dpdist-flow"
      for j in $(seq "$NODES"); do echo "$NET.$((10 + j)) $(node "$j")"; done
    } > "/etc/netns/$ns/hosts"
  done
}

start_nodes() {
  local i ns
  for i in $(seq "$NODES"); do
    ns=$(node "$i")
    mkdir -p "$ROOT/spool/$ns"
    alive "$ROOT/run/slurmd-$ns.pid" && continue
    # the node's network, and its own hostname, /etc/hosts and scratch (/tmp, /var/tmp, /dev/shm) in mount
    # and UTS namespaces of its own (not `ip netns exec`, whose fresh /sys has no cgroup hierarchy for
    # slurmd); a dpdist checkout under /tmp (its .venv runs the workers) is bound back in
    setsid nsenter --net="/run/netns/$ns" unshare --mount --uts --propagation private sh -c '
      set -e
      ns=$1; repo=$2; keep=$3
      hostname "$ns"
      mount --bind "/etc/netns/$ns/hosts" /etc/hosts
      case "$repo" in /tmp/*|/var/tmp/*) mkdir -p "$keep"; mount --bind "$repo" "$keep" ;; esac
      mount -t tmpfs -o mode=1777 tmpfs /tmp
      mount -t tmpfs -o mode=1777 tmpfs /var/tmp
      mount -t tmpfs -o mode=1777 tmpfs /dev/shm
      case "$repo" in /tmp/*|/var/tmp/*) mkdir -p "$repo"; mount --bind "$keep" "$repo" ;; esac
      exec /usr/sbin/slurmd -D -N "$ns"
    ' sh "$ns" "$REPO" "$ROOT/run/keep-$ns" </dev/null >>"$ROOT/log/slurmd-$ns.out" 2>&1 &
    echo $! > "$ROOT/run/slurmd-$ns.pid"
  done
}

start() {
  [ "$(id -u)" = 0 ] || skip "needs root (network namespaces, SLURM's daemons)"
  install_packages
  write_config
  start_munge
  start_network
  start_accounting
  alive "$ROOT/run/slurmctld.pid" || /usr/sbin/slurmctld
  start_nodes
  local idle=0
  for _ in $(seq 60); do
    idle=$(sinfo -h -N -o "%N %T" 2>/dev/null | grep -c -E " (idle|mixed|allocated)$" || true)
    [ "$idle" -ge "$NODES" ] && break
    sleep 1
  done
  sinfo -N -o "%N %T %c %m"
  [ "$idle" -ge "$NODES" ] || skip "only $idle of $NODES nodes came up ($ROOT/log/)"
  echo "export SLURM_CONF=$CONF   # for sbatch, squeue, sacct, scancel and dpdist run deploy/slurm-multi-node.toml"
}

stop() {
  # the cluster's jobs first (their workers), then each daemon by its pid file, then whatever a node's
  # jobs left in its namespace, then the network
  if alive "$ROOT/run/slurmctld.pid"; then scancel --full --user=root 2>/dev/null || true; fi
  local ns f pids namespaces
  # every node this script made, however many (DPDIST_SLURM_NODES may have differed at start)
  namespaces=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dpdist-node[0-9]+$' || true)
  for f in "$ROOT"/run/slurmd-dpdist-node*.pid "$ROOT/run/slurmctld.pid" "$ROOT/run/slurmdbd.pid" \
           "$ROOT/mysqld/mysqld.pid" "$ROOT/munge/munged.pid"; do
    if alive "$f"; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  for ns in $namespaces; do
    pids=$(ip netns pids "$ns" || true)
    [ -z "$pids" ] || kill $pids 2>/dev/null || true
  done
  sleep 2
  for ns in $namespaces; do
    pids=$(ip netns pids "$ns" || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
  done
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^dpmn-n[0-9]+$' || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  rm -f "$ROOT"/run/*.pid "$ROOT"/mysqld/mysqld.pid
}

status() {
  sinfo -N -o "%N %T %c %m"
  squeue
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
