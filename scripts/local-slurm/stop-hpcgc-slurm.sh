#!/usr/bin/env bash
# stop-hpcgc-slurm.sh - stop exactly the daemons that start-hpcgc-slurm.sh started (found through
# the PID files in $HPCGC_SLURM_DIR/run; a PID is signalled only while the process still has the
# expected name). Cancels the remaining jobs first. Idempotent.
#   --purge      also delete HPCGC_SLURM_DIR (state, logs, munge key)
#   --no-cancel  do not scancel the remaining jobs first
set -uo pipefail

BASE=${HPCGC_SLURM_DIR:-${TMPDIR:-/tmp}/hpcgc-slurm}
CONF_DIR=${HPCGC_SLURM_CONF_DIR:-/etc/slurm}
RUN=$BASE/run
PURGE=0; CANCEL=1
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    --no-cancel) CANCEL=0 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
[ "$CONF_DIR" != /etc/slurm ] && export SLURM_CONF=$CONF_DIR/slurm.conf
log() { echo "[hpcgc-slurm stop] $*"; }

pid_of() { # pid_of NAME -> prints the pid if $RUN/NAME.pid names a live process called NAME
  local pf=$RUN/$1.pid pid
  [ -s "$pf" ] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "$1" ] && echo "$pid"
}

# cancel the remaining jobs so that no slurmstepd / job processes outlive slurmd
if [ "$CANCEL" = 1 ] && pid_of slurmctld >/dev/null; then
  jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 75; i++)); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

rc=0
stop_group() { # stop_group NAME... : SIGTERM all at once, wait up to 15 s, then SIGKILL stragglers
  local d pid pids="" names="" i alive
  for d in "$@"; do
    if pid=$(pid_of "$d"); then kill "$pid"; pids="$pids $pid"; names="$names $d($pid)"
    else rm -f "$RUN/$d.pid"; fi
  done
  [ -z "$pids" ] && return 0
  for ((i = 0; i < 150; i++)); do
    alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for pid in $pids; do
    if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM for 15 s, sending SIGKILL"; kill -9 "$pid" 2>/dev/null; fi
  done
  for d in "$@"; do [ -e "$RUN/$d.pid" ] && ! pid_of "$d" >/dev/null && rm -f "$RUN/$d.pid"; done
  log "stopped$names"
}
stop_group slurmd slurmctld   # Slurm daemons first (they need munge while shutting down)
stop_group munged

left=$(ps -eo pid=,comm= | awk '$2 == "slurmstepd" {print $1}' | tr '\n' ' ')
[ -n "${left// /}" ] && { log "WARNING: slurmstepd processes still present: $left"; rc=1; }

if [ "$PURGE" = 1 ]; then
  rm -rf "$BASE"
  log "removed $BASE"
fi
exit $rc
