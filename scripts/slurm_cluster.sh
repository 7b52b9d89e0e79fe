#!/usr/bin/env bash
# scripts/slurm_cluster.sh up|down|status - a real SLURM cluster on one Debian machine, as root, without systemd:
# munged, MariaDB + slurmdbd and slurmctld on this host, and SLURM_CI_NODES compute nodes (default 2). Each compute
# node is a slurmd in its own network namespace (its own address on a private bridge, 10.250.77.0/24 by default)
# and UTS namespace (its own hostname, rfnode1, rfnode2, ...), so a job's ranks on different nodes talk over a real
# (virtual) network, resolve each other by name, and see different `hostname`s. The filesystem is shared, as on a
# cluster with a shared home, except $SLURM_CI_ROOT/node-local: a tmpfs of its own on every node (a node-local
# scratch disk; empty from this host). SLURM_CI_NODES=1 is the single-node layout: one slurmd on this host's
# loopback, no namespaces. Traffic stays inside this machine (loopback, or the bridge between the namespaces).
# Why it is built this way: docs/development.md#the-local-slurm-cluster (daemons, accounting, requeue delay,
# CPUs, fake GPUs) and docs/clusters_multinode.md#the-two-node-test-cluster (the nodes).
#   up      install the packages if missing (apt), then start a FRESH cluster (idempotent: stops a previous one)
#   down    stop every daemon `up` started (by pid file; running jobs are cancelled first), kill what is left inside
#           the node namespaces, delete the namespaces, the bridge and its links (idempotent)
#   status  exit 0 if every node answers (idle, mixed, allocated or completing a job), else 1
# Knobs (environment):
#   SLURM_CI_ROOT        state/log/pid dir (default /tmp/slurm-ci)
#   SLURM_CI_NODES       compute nodes (default 2; 1 = one slurmd on this host, no namespaces)
#   SLURM_CI_SUBNET      first three octets of the nodes' private /24 (default 10.250.77): this host .1, node i .1i
#   SLURM_CI_NODE_LOCAL_MB  size cap of each node's node-local tmpfs in MiB (default 256)
#   SLURM_CI_ACCOUNTING  1 = slurmdbd + MariaDB so `sacct` works; submitit needs it to notice jobs killed without a
#                        result (else it waits forever) (default 1)
#   SLURM_CI_CPUS        CPUs each node advertises; more than the real cores oversubscribes (default: real count)
#   SLURM_CI_GPUS        fake GPUs per node (gres/gpu on char devices: CUDA_VISIBLE_DEVICES per task, no CUDA) (default 0)
#   SLURM_CI_PARTITION   partition name (default debug)
set -euo pipefail
ROOT=${SLURM_CI_ROOT:-/tmp/slurm-ci}
NS_PREFIX=rfci-              # every namespace and link this script makes starts with it
BRIDGE=${NS_PREFIX}br0
log() { echo "[slurm_cluster $(date +%T)] $*"; }

alive() {   # running and not a zombie (PID 1 here reaps orphans only every ~2 s)
  local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $st != Z* ]]
}

stop_pids() {   # TERM the given pids, wait up to 10 s, then KILL the survivors
  local pid left
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  for _ in $(seq 100); do
    left=""; for pid in "$@"; do alive "$pid" && left="$left $pid"; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  kill -9 $left 2>/dev/null || true
}

stop_pidfile() {   # $1 = pid file
  local f=$1
  [ -s "$f" ] || { rm -f "$f"; return 0; }
  stop_pids "$(cat "$f")"
  rm -f "$f"
}

node_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX" || true; }

teardown_nodes() {   # the node namespaces (and anything still running in them), their links, the bridge
  local ns link
  for ns in $(node_namespaces); do
    # job steps that outlived their slurmd, if any: only processes of this cluster live in these namespaces
    stop_pids $(ip netns pids "$ns" 2>/dev/null || true)
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$NS_PREFIX" || true); do
    ip link del "$link" 2>/dev/null || true   # the bridge; veth ends go with their namespace
  done
  rm -f "$ROOT/run/hosts"
}

cluster_down() {
  if [ -s "$ROOT/run/slurmctld.pid" ] && alive "$(cat "$ROOT/run/slurmctld.pid")"; then
    JOBS=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$JOBS" ]; then          # cancel first: slurmstepd outlives slurmd otherwise
      scancel $JOBS 2>/dev/null || true
      for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    scontrol shutdown 2>/dev/null || true        # stops slurmctld and every slurmd
  fi
  local f
  for f in "$ROOT"/run/slurmd*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  stop_pidfile "$ROOT/run/slurmctld.pid"
  stop_pidfile "$ROOT/run/slurmdbd.pid"
  stop_pidfile /run/mysqld/mysqld.pid
  stop_pidfile /run/munge/munged.pid
  teardown_nodes
  echo "[slurm-down] stopped"
}

cluster_status() {
  command -v sinfo >/dev/null 2>&1 || return 1
  local states
  states=$(timeout 10 sinfo -h -N -o '%T' 2>/dev/null) || return 1
  [ -n "$states" ] || return 1
  ! grep -qvE '^(idle|alloc|allocated|mix|mixed|completing)' <<<"$states"
}

node_name() { echo "rfnode$1"; }

setup_node_network() {   # $1 = number of nodes: a bridge on this host, one namespace + veth pair per node
  local n=$1 i name ns host
  host=$(hostname -s)
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq "$n"); do
    name=$(node_name "$i"); ns=$NS_PREFIX$name
    ip netns add "$ns"
    ip link add "${NS_PREFIX}h$i" type veth peer name eth0 netns "$ns"
    ip link set "${NS_PREFIX}h$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$SUBNET.1$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  # bind-mounted over /etc/hosts inside every node (start_node_slurmd): each node resolves every node's name
  { echo "127.0.0.1 localhost"; echo "$SUBNET.1 $host"
    for i in $(seq "$n"); do echo "$SUBNET.1$i $(node_name "$i")"; done; } > "$ROOT/run/hosts"
}

start_node_slurmd() {   # $1 = node index: slurmd in the node's namespaces, with its own hostname and tmpfs
  local name ns
  name=$(node_name "$1"); ns=$NS_PREFIX$name
  # a private mount namespace holds the node's /etc/hosts and its node-local tmpfs, which vanish with the node's
  # last process. (Not `ip netns exec`: it remounts /sys, hiding the cgroup mounts slurmd initialises from.)
  nsenter --net="/run/netns/$ns" unshare --uts --mount sh -ec "
    hostname '$name'
    mount --bind '$ROOT/run/hosts' /etc/hosts
    mount -t tmpfs -o size=${LOCAL_MB}m,mode=1777 ${NS_PREFIX}local-$name '$ROOT/node-local'
    exec slurmd -N '$name'"
}

cluster_up() {
ACCOUNTING=${SLURM_CI_ACCOUNTING:-1}
GPUS=${SLURM_CI_GPUS:-0}
PARTITION=${SLURM_CI_PARTITION:-debug}
NODES=${SLURM_CI_NODES:-2}
SUBNET=${SLURM_CI_SUBNET:-10.250.77}
LOCAL_MB=${SLURM_CI_NODE_LOCAL_MB:-256}
FIRST_JOB_ID=${SLURM_CI_FIRST_JOB_ID:-$(( $(date +%s) % 5000000 * 10 + 1 ))}   # < MaxJobId 67043328
[[ $NODES =~ ^[1-9]$ ]] || { log "SLURM_CI_NODES must be 1..9 (got '$NODES')"; exit 2; }

# ---------------------------------------------------------------- 1. packages
export DEBIAN_FRONTEND=noninteractive
PKGS="munge slurmctld slurmd slurm-client"
[ "$ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
[ "$NODES" -gt 1 ] && PKGS="$PKGS iproute2"       # ip netns / veth / bridge (unshare is in util-linux)
MISSING=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || MISSING="$MISSING $p"
done
if [ -n "$MISSING" ]; then
  log "apt-get install:$MISSING"
  apt-get update -qq
  # policy-rc.d (exit 101) keeps postinst from starting services; we start them by hand.
  apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
fi

# ---------------------------------------------------------------- 2. clean slate
cluster_down >/dev/null 2>&1 || true
rm -rf "$ROOT/state"
mkdir -p "$ROOT"/{log,run,state/ctld,state/d,dev,node-local}

# ---------------------------------------------------------------- 3. munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged          # forks; pid in /run/munge/munged.pid
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { log "munged failed"; exit 1; }
log "munge ok"     # the nodes reach munged through its socket file, which every namespace shares

# ---------------------------------------------------------------- 4. host facts, nodes and their network
HOST=$(hostname -s)
HW=$(slurmd -C | head -1)                              # NodeName=.. CPUs=.. RealMemory=..
REAL_CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$HW")
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
CPUS=${SLURM_CI_CPUS:-$REAL_CPUS}
OVERRIDES=""
[ "$CPUS" -gt "$REAL_CPUS" ] && OVERRIDES="SlurmdParameters=config_overrides"
if [ "$NODES" = 1 ]; then
  NAMES=$HOST; CTLD_ADDR=127.0.0.1; NODE_LINES="NodeName=$HOST NodeAddr=127.0.0.1"
else
  setup_node_network "$NODES"
  NAMES=""; CTLD_ADDR=$SUBNET.1; NODE_LINES=""
  for i in $(seq "$NODES"); do
    NAMES="$NAMES $(node_name "$i")"
    NODE_LINES="$NODE_LINES
NodeName=$(node_name "$i") NodeAddr=$SUBNET.1$i"
  done
  NAMES=${NAMES# }
  log "network: bridge $BRIDGE $SUBNET.1/24; nodes $NAMES at $SUBNET.1[1-$NODES] (namespaces ${NS_PREFIX}rfnode*)"
fi
NODE_LIST=$(tr ' ' ',' <<<"$NAMES")
GRES_NODE=""; GRES_TYPES=""
rm -f /etc/slurm/gres.conf
if [ "$GPUS" -gt 0 ]; then
  # gres/gpu needs character devices to bind CUDA_VISIBLE_DEVICES; alias /dev/null's numbers (shared by the nodes).
  for i in $(seq 0 $((GPUS - 1))); do mknod "$ROOT/dev/gpu$i" c 1 3; done
  echo "NodeName=$NODE_LIST Name=gpu File=$ROOT/dev/gpu[0-$((GPUS - 1))]" > /etc/slurm/gres.conf
  GRES_NODE="Gres=gpu:$GPUS"; GRES_TYPES="GresTypes=gpu"
fi
NODE_LINES=$(sed "/./s/\$/ CPUs=$CPUS RealMemory=$MEM $GRES_NODE State=UNKNOWN/" <<<"$NODE_LINES")

# ---------------------------------------------------------------- 5. accounting
ACCT_LINES="AccountingStorageType=accounting_storage/none"
if [ "$ACCOUNTING" = 1 ]; then
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  setsid nohup /usr/sbin/mariadbd --user=mysql --skip-networking \
      --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/mysqld.pid \
      --innodb-flush-log-at-trx-commit=0 --innodb-buffer-pool-size=64M \
      >>"$ROOT/log/mariadb.log" 2>&1 < /dev/null &
  for _ in $(seq 150); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
  mariadb-admin ping >/dev/null || { log "mariadb failed"; tail -20 "$ROOT/log/mariadb.log"; exit 1; }
  # fresh job ids every run => old accounting rows with the same ids would confuse sacct/submitit
  mariadb -e 'DROP DATABASE IF EXISTS slurm_acct_db'
  cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$ROOT/log/slurmdbd.log
PidFile=$ROOT/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
  chmod 600 /etc/slurm/slurmdbd.conf
  slurmdbd
  ACCT_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819"
  log "mariadb + slurmdbd started"
fi

# ---------------------------------------------------------------- 6. slurm.conf
# %n: every slurmd has its own pid file, log and spool dir, although they share the filesystem
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=ci
SlurmctldHost=$HOST($CTLD_ADDR)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$ROOT/state/ctld
SlurmdSpoolDir=$ROOT/state/d/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$ACCT_LINES
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
# a requeued job may restart after cred_expire+1 s (default 120 => ~2.5 min per requeue)
AuthInfo=cred_expire=10
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
FirstJobId=$FIRST_JOB_ID
KillWait=5
Waittime=0
$GRES_TYPES
$OVERRIDES
$NODE_LINES
PartitionName=$PARTITION Nodes=$NODE_LIST Default=YES MaxTime=INFINITE State=UP
EOF

if [ "$ACCOUNTING" = 1 ]; then   # slurmctld registers the cluster itself once slurmdbd answers
  for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n list cluster >/dev/null || { log "slurmdbd failed"; tail -20 "$ROOT/log/slurmdbd.log"; exit 1; }
fi

# ---------------------------------------------------------------- 7. daemons
for name in $NAMES; do mkdir -p "$ROOT/state/d/$name"; done
slurmctld            # forks; -c not needed, state dir is fresh
if [ "$NODES" = 1 ]; then
  slurmd -N "$HOST"
else
  for i in $(seq "$NODES"); do start_node_slurmd "$i"; done
fi
STATES=""
for _ in $(seq 150); do
  STATES=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
  [ "$(grep -c ' idle$' <<<"$STATES")" = "$NODES" ] && break
  for bad in $(awk '$2 ~ /drain|down|inval/ {print $1}' <<<"$STATES"); do
    scontrol update nodename="$bad" state=resume 2>/dev/null || true
  done
  sleep 0.2
done
if [ "$(grep -c ' idle$' <<<"$STATES")" != "$NODES" ]; then
  log "nodes not idle: $(tr '\n' ';' <<<"$STATES")"; scontrol show node || true
  tail -20 "$ROOT/log/slurmctld.log" "$ROOT"/log/slurmd-*.log || true
  exit 1
fi
# smoke test: a real job step through every slurmd; each node answers with its own hostname
SEEN=$(srun -N"$NODES" --ntasks-per-node=1 -t 1 hostname -s | sort | tr '\n' ' ')
[ "${SEEN% }" = "$NAMES" ] || { log "srun on every node printed '$SEEN', expected '$NAMES'"; exit 1; }
for _ in $(seq 100); do    # the smoke job's nodes go idle again (completing, briefly)
  [ "$(sinfo -h -N -o '%T' | grep -c '^idle$')" = "$NODES" ] && break; sleep 0.1
done
log "cluster ready: nodes=$NAMES cpus/node=$CPUS gpus/node=$GPUS mem=${MEM}M partition=$PARTITION" \
    "accounting=$ACCOUNTING node-local=$ROOT/node-local"
}

case "${1:-}" in
  up) cluster_up ;;
  down) cluster_down ;;
  status) cluster_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
