#!/usr/bin/env bash
# start-hpcgc-slurm.sh - start a real single-node SLURM cluster on this machine for hpcgc's tests
# (Debian, root, no systemd, no cgroups): slurmctld + slurmd on localhost, munge for auth.
#
# Adapted from ../shared/tools/local-slurm/start-local-slurm.sh (accounting/slurmdbd dropped;
# state under $HPCGC_SLURM_DIR; MaxArraySize configurable so the array-limit check can be tested).
# Idempotent: installs missing packages, (re)writes the config only when it changed, starts only
# the daemons that are not already running (PID files), waits until `sinfo` shows the node idle
# and slurmctld has run its first scheduling pass.
#
# Environment knobs (all optional):
#   HPCGC_SLURM_DIR             state/log/pid directory          [${TMPDIR:-/tmp}/hpcgc-slurm]
#   HPCGC_SLURM_CONF_DIR        where slurm.conf is written      [/etc/slurm] (the path every Slurm
#                               client reads by default; elsewhere, export SLURM_CONF=<dir>/slurm.conf)
#   HPCGC_SLURM_MPI_DEFAULT     MpiDefault for srun (none|pmi2|pmix)                 [none]
#   HPCGC_SLURM_PORT_BASE       slurmctld port; slurmd uses +1                       [6817]
#   HPCGC_SLURM_TIMEOUT         seconds to wait for the node to become idle          [60]
#   HPCGC_SLURM_MIN_JOB_AGE     seconds a finished job stays visible to squeue/scontrol [300]
#   HPCGC_SLURM_MAX_ARRAY_SIZE  MaxArraySize (largest array index + 1)               [1001]
#   HPCGC_SLURM_NO_INSTALL=1    never call apt-get (fail if packages are missing)
# Exit status: 0 ready; 1 error (message on stderr); 3 packages missing and cannot be installed.
set -euo pipefail
umask 022   # munged insists that every directory above its socket is world-executable

case "${1:-}" in
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  "") ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac

BASE=${HPCGC_SLURM_DIR:-${TMPDIR:-/tmp}/hpcgc-slurm}
CONF_DIR=${HPCGC_SLURM_CONF_DIR:-/etc/slurm}
MPI_DEFAULT=${HPCGC_SLURM_MPI_DEFAULT:-none}
PORT=${HPCGC_SLURM_PORT_BASE:-6817}
TIMEOUT=${HPCGC_SLURM_TIMEOUT:-60}
MIN_JOB_AGE=${HPCGC_SLURM_MIN_JOB_AGE:-300}
MAX_ARRAY=${HPCGC_SLURM_MAX_ARRAY_SIZE:-1001}
CTLD_PORT=$PORT; SLURMD_PORT=$((PORT + 1))
MARK="# managed by hpcgc scripts/local-slurm/start-hpcgc-slurm.sh"

T0=$(date +%s.%N)
log() { printf '[hpcgc-slurm %5.1fs] %s\n' "$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" "$*"; }
die() { log "ERROR: $*" >&2; exit "${2:-1}"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and runs the daemons as root)"

# ---------------------------------------------------------------- packages
# libpmix-dev: Slurm's mpi/pmix plugin dlopen()s the unversioned libpmix.so that only -dev ships.
PKGS="slurmctld slurmd slurm-client munge libpmix-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "${HPCGC_SLURM_NO_INSTALL:-0}" = 1 ] && die "missing packages:$missing (HPCGC_SLURM_NO_INSTALL=1)" 3
  command -v apt-get >/dev/null || die "missing packages:$missing and no apt-get on this machine" 3
  log "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  # keep the packages' init scripts from starting system munge/slurm daemons during the install
  TMP_POLICY=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; TMP_POLICY=1
    trap '[ "$TMP_POLICY" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  mkdir -p "$BASE/log"; APTLOG=$BASE/log/apt.log
  if ! apt-get install -y -q --no-install-recommends $missing >"$APTLOG" 2>&1; then
    apt-get update -q >>"$APTLOG" 2>&1 || true
    apt-get install -y -q --no-install-recommends $missing >>"$APTLOG" 2>&1 \
      || { tail -20 "$APTLOG" >&2; die "apt-get install failed (log: $APTLOG)" 3; }
  fi
  [ "$TMP_POLICY" = 1 ] && { rm -f /usr/sbin/policy-rc.d; TMP_POLICY=0; }
  log "packages installed"
else
  log "packages already installed"
fi

# ---------------------------------------------------------------- layout
RUN=$BASE/run; LOGD=$BASE/log
mkdir -p "$BASE" "$RUN" "$LOGD" "$BASE/state" "$BASE/spool" "$BASE/munge-key" "$BASE/munge-run" "$CONF_DIR"
chmod 700 "$BASE/munge-key"; chmod 755 "$BASE" "$BASE/munge-run"
MUNGE_KEY=$BASE/munge-key/munge.key
MUNGE_SOCK=$BASE/munge-run/munge.socket.2
if [ ! -s "$MUNGE_KEY" ]; then
  dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  chmod 400 "$MUNGE_KEY"
  log "created munge key $MUNGE_KEY"
fi

# ---------------------------------------------------------------- helpers
alive() { # alive PIDFILE COMM -> 0 if the PID in PIDFILE runs and is called COMM
  local pf=$1 comm=$2 pid
  [ -s "$pf" ] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "$comm" ]
}
wait_for() { # wait_for SECONDS DESCRIPTION CMD...
  local t=$1 what=$2 end; shift 2
  end=$((SECONDS + t))
  while [ "$SECONDS" -lt "$end" ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "timed out after ${t}s waiting for $what"
}
stop_pid() { # stop_pid PIDFILE COMM
  local pf=$1 comm=$2 pid i
  alive "$pf" "$comm" || return 0
  pid=$(cat "$pf"); kill "$pid"
  for ((i = 0; i < 75; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------- config
HOST=$(hostname -s)
HW=$(slurmd -C | head -1)   # e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 ..."
CPUS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc --all)   # not `nproc`: it obeys OMP_NUM_THREADS
get() { echo "$HW" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
SOCKETS=$(get SocketsPerBoard); CORES=$(get CoresPerSocket); THREADS=$(get ThreadsPerCore)
[ $((SOCKETS * CORES * THREADS)) -eq "$CPUS" ] 2>/dev/null || { SOCKETS=1; CORES=$CPUS; THREADS=1; }
MEM=$(free -m | awk '/^Mem:/{print int($2 * 0.9)}')

NEW_CONF=$(cat <<CONF
$MARK (HPCGC_SLURM_DIR=$BASE)
ClusterName=hpcgc-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGD/slurmctld.log
SlurmdLogFile=$LOGD/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups / systemd needed
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# start queued batch jobs immediately (default batch_sched_delay=3 s)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# reject impossible requests (e.g. -n 3 on a 2-CPU node) at submit time instead of pending forever
EnforcePartLimits=ALL
MpiDefault=$MPI_DEFAULT
MaxArraySize=$MAX_ARRAY
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=$MIN_JOB_AGE
KillWait=5
Waittime=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
)

CONF=$CONF_DIR/slurm.conf
if [ -e "$CONF" ] && ! grep -q "^$MARK" "$CONF"; then
  cp -a "$CONF" "$CONF.before-hpcgc-slurm"
  log "existing $CONF (not ours) saved as $CONF.before-hpcgc-slurm"
fi
CONF_CHANGED=0
if [ "$(cat "$CONF" 2>/dev/null)" != "$NEW_CONF" ]; then
  printf '%s\n' "$NEW_CONF" >"$CONF"; chmod 644 "$CONF"; CONF_CHANGED=1
  log "wrote $CONF"
else
  log "$CONF unchanged"
fi
[ "$CONF_DIR" != /etc/slurm ] && export SLURM_CONF=$CONF

if [ "$CONF_CHANGED" = 1 ]; then  # config changed under running daemons: restart them (not munge)
  for d in slurmd slurmctld; do
    if alive "$RUN/$d.pid" "$d"; then log "config changed: restarting $d"; stop_pid "$RUN/$d.pid" "$d"; fi
  done
fi

# ---------------------------------------------------------------- munged
if alive "$RUN/munged.pid" munged; then
  log "munged already running (pid $(cat "$RUN/munged.pid"))"
else
  rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
  munged --socket="$MUNGE_SOCK" --key-file="$MUNGE_KEY" --pid-file="$RUN/munged.pid" \
         --log-file="$LOGD/munged.log" --seed-file="$BASE/munge-key/munged.seed" --num-threads=4
  wait_for 10 "munged" sh -c "munge -S '$MUNGE_SOCK' -n | unmunge -S '$MUNGE_SOCK'"
  log "munged started (pid $(cat "$RUN/munged.pid"))"
fi

# ---------------------------------------------------------------- slurmctld / slurmd
if alive "$RUN/slurmctld.pid" slurmctld; then
  log "slurmctld already running (pid $(cat "$RUN/slurmctld.pid"))"
else
  slurmctld -i   # -i: ignore unreadable state files instead of refusing to start
  wait_for 30 "slurmctld" scontrol ping
  log "slurmctld started (pid $(cat "$RUN/slurmctld.pid"))"
fi
if alive "$RUN/slurmd.pid" slurmd; then
  log "slurmd already running (pid $(cat "$RUN/slurmd.pid"))"
else
  slurmd
  wait_for 10 "slurmd pid file" test -s "$RUN/slurmd.pid"
  log "slurmd started (pid $(cat "$RUN/slurmd.pid"))"
fi

# ---------------------------------------------------------------- wait for idle
node_state() { sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1; }
st=""
end=$((SECONDS + TIMEOUT))
while [ "$SECONDS" -lt "$end" ]; do
  st=$(node_state || true)
  case "$st" in
    idle|mixed|allocated|completing) break ;;
    down*|drain*|fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
case "$st" in
  idle|mixed|allocated|completing) ;;
  *) sinfo >&2 || true; tail -20 "$LOGD/slurmctld.log" "$LOGD/slurmd.log" >&2 || true
     die "node $HOST not usable (state '$st') after ${TIMEOUT}s" ;;
esac
# slurmctld's first main-scheduler pass comes ~2-3 s after it starts; a job submitted before that
# waits for it. Wait for it here so that the first submission starts at once.
for ((i = 0; i < 75; i++)); do
  c=$(sdiag 2>/dev/null | awk '/^Main schedule/ {m = 1} m && /Total cycles:/ {print $3; exit}')
  [ "${c:-0}" -gt 0 ] && break; sleep 0.2
done
log "cluster ready: node $HOST is $st ($CPUS CPUs, partition debug)"
DIR=$(cd "$(dirname "$0")" && pwd)
[ "$CONF_DIR" != /etc/slurm ] && echo "  export SLURM_CONF=$CONF"
echo "  logs: $LOGD"
echo "  stop: HPCGC_SLURM_DIR=$BASE $DIR/stop-hpcgc-slurm.sh   (--purge also deletes the state)"
