#!/usr/bin/env bash
# resubmit-failed.sh - resubmit only the array tasks of a sweep whose results file is missing or
# incomplete (only a task-<id>.h5.partial left by a killed task, `complete` false, or unreadable).
#
# usage: jobs/resubmit-failed.sh [--dry-run] RESULTS_DIR [sbatch options, e.g. --time=02:00:00]
#   RESULTS_DIR  the directory jobs/submit.sh wrote (it holds sweep.env and task-<id>.h5)
#   --dry-run    list the failed tasks and print the sbatch command; submit nothing
#   other --options go to sbatch after the recorded ones (so they win): more time for tasks that hit
#   the limit, another partition, ... (the rank count should stay as it was, for comparable runs)
# Tasks of this sweep that are still pending or running (squeue) are left alone. The resubmission
# uses the same experiment, --set options, chunking and sbatch settings as the original
# submission (recorded in RESULTS_DIR/sweep.env); its job id is appended there. A task that left a
# .partial file continues it (hpcgc --resume: finished runs kept, an interrupted run from its
# checkpoint, identical iterates); export HPCGC_RESTART=1 (e.g. --export=ALL,HPCGC_RESTART=1) to
# start such tasks over instead, e.g. after changing the code (a resume refuses another version).
# Exit status: 0 nothing to do or resubmitted; 2 bad usage; 4 sbatch failed.
set -euo pipefail
trap 'echo "hpcgc: error: ${BASH_SOURCE[0]}:$LINENO: command failed (status $?)" >&2' ERR
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export HPCGC_ROOT=${HPCGC_ROOT:-$(cd "$HERE/.." && pwd)}
# shellcheck source=lib.sh
source "$HPCGC_ROOT/jobs/lib.sh"

DRY=0; DIR=""; MORE=()
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) MORE+=("$a") ;;
    *) [ -z "$DIR" ] || hpcgc_die "one RESULTS_DIR expected"; DIR=$a ;;
  esac
done
[ -n "$DIR" ] || hpcgc_die "usage: jobs/resubmit-failed.sh [--dry-run] RESULTS_DIR"
DIR=$(hpcgc_abspath "$DIR")
[ -d "$DIR" ] || hpcgc_die "$DIR is not a directory"
[ -f "$DIR/sweep.env" ] || hpcgc_die "$DIR/sweep.env not found: was $DIR written by jobs/submit.sh (as an array)?"
# shellcheck source=/dev/null
source "$DIR/sweep.env"
cd "$HPCGC_ROOT"
hpcgc_site
hpcgc_env

# tasks of this sweep still queued or running: leave them alone
ACTIVE=""
if command -v squeue >/dev/null; then
  for j in $ARRAY_JOB_IDS; do
    ACTIVE="$ACTIVE $(squeue -h -r -j "$j" -o %K 2>/dev/null | tr '\n' ' ' || true)"
  done
fi

# which task files are missing or incomplete (read with hpcgc.results.load)
REPORT=$("${HPCGC_PYTHON:-python}" - "$DIR" "$TASKS" "$ACTIVE" <<'PY'
import sys
from pathlib import Path
from hpcgc import results
d, tasks = Path(sys.argv[1]), int(sys.argv[2])
active = {int(x) for x in sys.argv[3].split() if x.isdigit()}
for i in range(tasks):
    f = d / f"task-{i}.h5"
    if i in active:
        print(f"{i} active still queued or running")
    elif not f.exists():
        why = "only a .partial file (killed or failed)" if f.with_name(f.name + ".partial").exists() else "no results file"
        print(f"{i} failed {why}")
    else:
        try:
            r = results.load(f)
        except results.ResultsFormatError as exc:
            print(f"{i} failed unreadable: {exc}")
            continue
        print(f"{i} ok complete" if r.complete else f"{i} failed complete = false")
PY
)
FAILED=$(awk '$2 == "failed" {print $1}' <<<"$REPORT" | tr '\n' ' ')
N_ACTIVE=$(awk '$2 == "active"' <<<"$REPORT" | wc -l)
N_OK=$(awk '$2 == "ok"' <<<"$REPORT" | wc -l)
awk '$2 != "ok" {printf "  task %s: %s\n", $1, substr($0, index($0, $3))}' <<<"$REPORT"
echo "hpcgc resubmit: $DIR: $TASKS task(s): $N_OK complete, $N_ACTIVE queued/running, $(wc -w <<<"$FAILED") failed"
[ -n "${FAILED// /}" ] || { echo "hpcgc resubmit: nothing to resubmit"; exit 0; }

LIST=$(hpcgc_ranges "$FAILED")
SB=()
for a in "${SBATCH_ARGS[@]}"; do case "$a" in --array=*) ;; *) SB+=("$a") ;; esac; done
ARRAY=$LIST
[ -n "${HPCGC_ARRAY_THROTTLE:-}" ] && ARRAY="$ARRAY%$HPCGC_ARRAY_THROTTLE"
CMD=(sbatch --parsable "--array=$ARRAY" "${SB[@]}" "${MORE[@]}" "$HPCGC_ROOT/jobs/hpcgc.sbatch" "$EXPERIMENT" "${BENCH_ARGS[@]}")
echo "hpcgc resubmit: $(hpcgc_quote "${CMD[@]}")"
if [ "$DRY" = 1 ]; then echo "hpcgc resubmit: dry run, nothing submitted"; exit 0; fi
command -v sbatch >/dev/null || HPCGC_DIE_STATUS=4 hpcgc_die "sbatch not found: is this a SLURM login node?"
if ! JOB=$("${CMD[@]}"); then HPCGC_DIE_STATUS=4 hpcgc_die "sbatch failed (see above)"; fi
JOB=${JOB%%;*}
echo "ARRAY_JOB_IDS=\"\$ARRAY_JOB_IDS $JOB\"   # resubmitted tasks $LIST on $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$DIR/sweep.env"
echo "hpcgc resubmit: submitted array job $JOB for task(s) $LIST; watch: squeue -j $JOB"
