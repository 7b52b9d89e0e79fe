#!/usr/bin/env bash
# scripts/slurm_cluster.sh up|down|status - a real single-node SLURM cluster (munged, MariaDB + slurmdbd,
# slurmctld, slurmd) on Debian, as root, without systemd. Why it is built this way:
# docs/development.md#the-single-node-slurm-cluster.
#   up      install the packages if missing (apt), then start a FRESH cluster (idempotent: stops a previous one)
#   down    stop every daemon `up` started, by pid file (idempotent; cancels running jobs first)
#   status  exit 0 if the cluster answers (node idle or allocated), else 1
# Knobs (environment):
#   SLURM_CI_ROOT        state/log/pid dir (default /tmp/slurm-ci)
#   SLURM_CI_ACCOUNTING  1 = slurmdbd + MariaDB so `sacct` works; submitit needs it to notice jobs killed without a
#                        result (else it waits forever) (default 1)
#   SLURM_CI_CPUS        CPUs to advertise; more than the real cores oversubscribes (default: real count)
#   SLURM_CI_GPUS        fake GPUs (gres/gpu on char devices: CUDA_VISIBLE_DEVICES set per task, no CUDA) (default 0)
#   SLURM_CI_PARTITION   partition name (default debug)
set -euo pipefail
ROOT=${SLURM_CI_ROOT:-/tmp/slurm-ci}
log() { echo "[slurm_cluster $(date +%T)] $*"; }

cluster_down() {
  alive() {   # running and not a zombie (PID 1 here reaps orphans only every ~2 s)
    local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $st != Z* ]]
  }
  stop_pidfile() {   # $1 = pid file; TERM, wait up to 10 s, then KILL
    local f=$1 pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    if alive "$pid"; then
      kill "$pid" 2>/dev/null
      for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$f"
  }

  if [ -s "$ROOT/run/slurmctld.pid" ] && alive "$(cat "$ROOT/run/slurmctld.pid")"; then
    JOBS=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$JOBS" ]; then          # cancel first: slurmstepd outlives slurmd otherwise
      scancel $JOBS 2>/dev/null || true
      for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    scontrol shutdown 2>/dev/null || true        # stops slurmctld and slurmd
  fi
  stop_pidfile "$ROOT/run/slurmd.pid"
  stop_pidfile "$ROOT/run/slurmctld.pid"
  stop_pidfile "$ROOT/run/slurmdbd.pid"
  stop_pidfile /run/mysqld/mysqld.pid
  stop_pidfile /run/munge/munged.pid
  echo "[slurm-down] stopped"
}

cluster_status() {
  command -v sinfo >/dev/null 2>&1 || return 1
  local st
  st=$(timeout 10 sinfo -h -o '%T' 2>/dev/null | head -1) || return 1
  [[ $st == idle* || $st == alloc* || $st == mix* ]]
}

cluster_up() {
ROOT=${SLURM_CI_ROOT:-/tmp/slurm-ci}
ACCOUNTING=${SLURM_CI_ACCOUNTING:-1}
GPUS=${SLURM_CI_GPUS:-0}
PARTITION=${SLURM_CI_PARTITION:-debug}
FIRST_JOB_ID=${SLURM_CI_FIRST_JOB_ID:-$(( $(date +%s) % 5000000 * 10 + 1 ))}   # < MaxJobId 67043328
log() { echo "[slurm-up $(date +%T)] $*"; }

# ---------------------------------------------------------------- 1. packages
export DEBIAN_FRONTEND=noninteractive
PKGS="munge slurmctld slurmd slurm-client"
[ "$ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
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
mkdir -p "$ROOT"/{log,run,state/ctld,state/d,dev}

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
log "munge ok"

# ---------------------------------------------------------------- 4. host facts
NODE=$(hostname -s)
HW=$(slurmd -C | head -1)                              # NodeName=.. CPUs=.. RealMemory=..
REAL_CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$HW")
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
CPUS=${SLURM_CI_CPUS:-$REAL_CPUS}
OVERRIDES=""
[ "$CPUS" -gt "$REAL_CPUS" ] && OVERRIDES="SlurmdParameters=config_overrides"
GRES_NODE=""; GRES_TYPES=""
rm -f /etc/slurm/gres.conf
if [ "$GPUS" -gt 0 ]; then
  # gres/gpu needs character devices to bind CUDA_VISIBLE_DEVICES; alias /dev/null's numbers.
  for i in $(seq 0 $((GPUS - 1))); do mknod "$ROOT/dev/gpu$i" c 1 3; done
  echo "NodeName=$NODE Name=gpu File=$ROOT/dev/gpu[0-$((GPUS - 1))]" > /etc/slurm/gres.conf
  GRES_NODE="Gres=gpu:$GPUS"; GRES_TYPES="GresTypes=gpu"
fi

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
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$ROOT/state/ctld
SlurmdSpoolDir=$ROOT/state/d
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
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
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM $GRES_NODE State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

if [ "$ACCOUNTING" = 1 ]; then   # slurmctld registers the cluster itself once slurmdbd answers
  for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n list cluster >/dev/null || { log "slurmdbd failed"; tail -20 "$ROOT/log/slurmdbd.log"; exit 1; }
fi

# ---------------------------------------------------------------- 7. daemons
slurmctld            # forks; -c not needed, state dir is fresh
slurmd -N "$NODE"
STATE=""
for _ in $(seq 150); do
  STATE=$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null || true)
  [ "$STATE" = idle ] && break
  case "$STATE" in *drain*|down*|inval*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true;; esac
  sleep 0.2
done
if [ "$STATE" != idle ]; then
  log "node not idle (state='$STATE')"; scontrol show node "$NODE" || true
  tail -20 "$ROOT/log/slurmctld.log" "$ROOT/log/slurmd.log" || true
  exit 1
fi
srun -N1 -n1 -t 1 true        # smoke test: a real job step through slurmd
log "cluster ready: node=$NODE cpus=$CPUS gpus=$GPUS mem=${MEM}M partition=$PARTITION accounting=$ACCOUNTING"
}

case "${1:-}" in
  up) cluster_up ;;
  down) cluster_down ;;
  status) cluster_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
