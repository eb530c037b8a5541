#!/usr/bin/env bash
# submit.sh - submit an hpcgc experiment file to SLURM: a job array with one task per grid point
# (or per chunk of grid points), each task writing results/<name>/task-<id>.h5.
#
# usage: jobs/submit.sh [options] EXPERIMENT.toml [hpcgc.bench options, e.g. --set run.iterations=500]
#   --chunk K      K grid points per array task (default: HPCGC_CHUNK from jobs/site.env, 1)
#   --single       one plain job runs the whole experiment -> results/<name>/job-<jobid>.h5
#   --out-dir DIR  where the results go (default: $HPCGC_RESULTS_DIR/<experiment name>)
#   --ntasks N     MPI ranks per run; --time T  time limit per job/array task
#                  (precedence: these options > HPCGC_NTASKS/HPCGC_TIME in the environment >
#                  the experiment's job script jobs/<name>.sbatch #SBATCH lines > jobs/site.env)
#   --force        submit even if DIR already holds task files of an earlier submission
#   --dry-run      validate, print the plan and the sbatch command; submit nothing
#   -h, --help
# Resources, modules, virtualenv and MPI launcher: jobs/site.env (or environment HPCGC_*).
# Before submitting it validates every grid point (`python -m hpcgc.bench validate`) and refuses a
# sweep with more array tasks than the site's MaxArraySize. Writes DIR/sweep.env, which
# jobs/resubmit-failed.sh DIR uses to resubmit only the tasks whose results are missing/incomplete.
# Exit status: 0 submitted; 2 bad usage or invalid experiment; 3 over the array limit; 4 sbatch failed.
set -euo pipefail
trap 'echo "hpcgc: error: ${BASH_SOURCE[0]}:$LINENO: command failed (status $?)" >&2' ERR
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export HPCGC_ROOT=${HPCGC_ROOT:-$(cd "$HERE/.." && pwd)}
# shellcheck source=lib.sh
source "$HPCGC_ROOT/jobs/lib.sh"

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
CHUNK=""; SINGLE=0; OUT_DIR=""; FORCE=0; DRY=0; EXP=""; BENCH=(); OPT_NT=""; OPT_TIME=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks) [ $# -ge 2 ] || hpcgc_die "--ntasks needs a value"; OPT_NT=$2; shift 2 ;;
    --ntasks=*) OPT_NT=${1#*=}; shift ;;
    --time) [ $# -ge 2 ] || hpcgc_die "--time needs a value"; OPT_TIME=$2; shift 2 ;;
    --time=*) OPT_TIME=${1#*=}; shift ;;
    --chunk) [ $# -ge 2 ] || hpcgc_die "--chunk needs a value"; CHUNK=$2; shift 2 ;;
    --chunk=*) CHUNK=${1#*=}; shift ;;
    --single) SINGLE=1; shift ;;
    --out-dir) [ $# -ge 2 ] || hpcgc_die "--out-dir needs a value"; OUT_DIR=$2; shift 2 ;;
    --out-dir=*) OUT_DIR=${1#*=}; shift ;;
    --force) FORCE=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --grid-index|--grid-index=*|-o|--out|--out=*)
      hpcgc_die "$1 is chosen per array task by the job script; use --single with --set/--grid-index in sbatch directly" ;;
    *) if [ -z "$EXP" ] && [[ "$1" != -* ]]; then EXP=$1; else BENCH+=("$1"); fi; shift ;;
  esac
done
[ -n "$EXP" ] || { usage >&2; exit 2; }
[ -f "$EXP" ] || hpcgc_die "experiment file $EXP not found"
EXP_ABS=$(cd "$(dirname "$EXP")" && pwd)/$(basename "$EXP")
case "$EXP_ABS" in "$HPCGC_ROOT"/*) EXP_REL=${EXP_ABS#"$HPCGC_ROOT"/} ;; *) EXP_REL=$EXP_ABS ;; esac

cd "$HPCGC_ROOT"
ENV_NT=${HPCGC_NTASKS:-}; ENV_TIME=${HPCGC_TIME:-}     # set by the user, before site.env fills in
hpcgc_site
hpcgc_env
# the experiment's own job script carries its rank count and time limit
JOBSCRIPT=$HPCGC_ROOT/jobs/$(basename "$EXP_ABS" .toml).sbatch
if [ "$(dirname "$EXP_ABS")" = "$HPCGC_ROOT/jobs/experiments" ] && [ -f "$JOBSCRIPT" ]; then
  JS_NT=$(sed -n 's/^#SBATCH --ntasks=\([0-9][0-9]*\).*/\1/p' "$JOBSCRIPT" | sed -n 1p)
  JS_TIME=$(sed -n 's/^#SBATCH --time=\([^ ]*\).*/\1/p' "$JOBSCRIPT" | sed -n 1p)
  [ -z "$ENV_NT" ] && [ -n "$JS_NT" ] && HPCGC_NTASKS=$JS_NT
  [ -z "$ENV_TIME" ] && [ -n "$JS_TIME" ] && HPCGC_TIME=$JS_TIME
fi
[ -n "$OPT_NT" ] && HPCGC_NTASKS=$OPT_NT
[ -n "$OPT_TIME" ] && HPCGC_TIME=$OPT_TIME
CHUNK=${CHUNK:-${HPCGC_CHUNK:-1}}
[[ "$CHUNK" =~ ^[1-9][0-9]*$ ]] || hpcgc_die "--chunk must be a positive integer, got '$CHUNK'"

# 1. validate every grid point (names, parameters, data files) and count them
echo "hpcgc submit: validating $EXP_REL ${BENCH[*]:-}"
if ! VOUT=$("${HPCGC_PYTHON:-python}" -m hpcgc.bench validate --config "$EXP_ABS" "${BENCH[@]}" 2>&1); then
  printf '%s\n' "$VOUT" >&2
  hpcgc_die "$EXP_REL does not validate; nothing submitted"
fi
GRID=$(printf '%s\n' "$VOUT" | sed -n 's/^grid points: \([0-9][0-9]*\)$/\1/p' | tail -n 1)
[ -n "$GRID" ] || { printf '%s\n' "$VOUT" >&2; hpcgc_die "could not read 'grid points: N' from validate"; }
NAME=$(printf '%s\n' "$VOUT" | sed -n "s/^experiment '\(.*\)': .*/\1/p" | sed -n 1p)
[ -n "$NAME" ] || read -r NAME _ < <(hpcgc_experiment_info "$EXP_ABS" "${BENCH[@]}")
OUT_DIR=${OUT_DIR:-$HPCGC_RESULTS_DIR/$(hpcgc_safe_name "$NAME")}
OUT_DIR_ABS=$(hpcgc_abspath "$OUT_DIR" "$HPCGC_ROOT")

# 2. the array: tasks = ceil(grid / chunk), checked against the site's MaxArraySize
SB=()
while IFS= read -r line; do SB+=("$line"); done < <(hpcgc_sbatch_args)
if [ "$SINGLE" = 1 ]; then
  TASKS=0
  SB+=("--job-name=hpcgc-$(hpcgc_safe_name "$NAME")" "--output=$OUT_DIR_ABS/logs/%x-%j.out")
  PLAN="one job, $GRID grid point(s) -> $OUT_DIR/job-<jobid>.h5"
else
  TASKS=$(( (GRID + CHUNK - 1) / CHUNK ))
  read -r MAXA MAXA_SRC < <(hpcgc_max_array_size)
  if [ "$TASKS" -gt "$MAXA" ]; then
    need=$(( (GRID + MAXA - 1) / MAXA ))
    HPCGC_DIE_STATUS=3 hpcgc_die "the sweep of $EXP_REL has $GRID grid points -> $TASKS array tasks" \
      "(chunk $CHUNK), more than this site's MaxArraySize of $MAXA (from $MAXA_SRC). Nothing submitted." \
      "Run several grid points per task with --chunk $need (or more), or split the sweep."
  fi
  ARRAY="0-$((TASKS - 1))"
  [ -n "${HPCGC_ARRAY_THROTTLE:-}" ] && ARRAY="$ARRAY%$HPCGC_ARRAY_THROTTLE"
  SB+=("--array=$ARRAY" "--job-name=hpcgc-$(hpcgc_safe_name "$NAME")" "--output=$OUT_DIR_ABS/logs/%x-%A_%a.out")
  PLAN="array of $TASKS task(s) ($GRID grid point(s), $CHUNK per task; MaxArraySize $MAXA from $MAXA_SRC) -> $OUT_DIR/task-<id>.h5"
fi
SB+=("--export=ALL,HPCGC_ROOT=$HPCGC_ROOT,HPCGC_OUT_DIR=$OUT_DIR_ABS,HPCGC_CHUNK=$CHUNK")
CMD=(sbatch --parsable "${SB[@]}" "$HPCGC_ROOT/jobs/hpcgc.sbatch" "$EXP_ABS" "${BENCH[@]}")
echo "hpcgc submit: experiment '$NAME': $PLAN"
echo "hpcgc submit: $(hpcgc_quote "${CMD[@]}")"
if [ "$DRY" = 1 ]; then echo "hpcgc submit: dry run, nothing submitted"; exit 0; fi

# 3. refuse to mix with an earlier submission's files, then submit and record the sweep
if [ "$SINGLE" = 0 ] && [ "$FORCE" = 0 ] && compgen -G "$OUT_DIR_ABS/task-*.h5*" >/dev/null; then
  hpcgc_die "$OUT_DIR already holds task files of an earlier submission; complete them with" \
            "jobs/resubmit-failed.sh $OUT_DIR, or choose another --out-dir, or --force to overwrite"
fi
command -v sbatch >/dev/null || HPCGC_DIE_STATUS=4 hpcgc_die "sbatch not found: is this a SLURM login node?"
mkdir -p "$OUT_DIR_ABS/logs"
if ! JOB=$("${CMD[@]}"); then HPCGC_DIE_STATUS=4 hpcgc_die "sbatch failed (see above); nothing submitted"; fi
JOB=${JOB%%;*}
if [ "$SINGLE" = 0 ]; then
  {
    echo "# written by jobs/submit.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); read by jobs/resubmit-failed.sh"
    printf 'EXPERIMENT=%q\n' "$EXP_ABS"
    printf 'BENCH_ARGS=(%s)\n' "$(hpcgc_quote "${BENCH[@]}")"
    printf 'SBATCH_ARGS=(%s)\n' "$(hpcgc_quote "${SB[@]}")"
    echo "GRID=$GRID"; echo "CHUNK=$CHUNK"; echo "TASKS=$TASKS"; echo "NAME=$(printf '%q' "$NAME")"
    echo "ARRAY_JOB_IDS=\"$JOB\""
  } >"$OUT_DIR_ABS/sweep.env"
fi
echo "hpcgc submit: submitted job $JOB"
echo "  watch:    squeue -j $JOB"
if [ "$SINGLE" = 0 ]; then
  echo "  results:  $OUT_DIR/task-<0..$((TASKS - 1))>.h5   logs: $OUT_DIR/logs/"
  echo "  failed:   jobs/resubmit-failed.sh $OUT_DIR"
  echo "  report:   hpcgc report $OUT_DIR -o $OUT_DIR/report"
else
  echo "  results:  $OUT_DIR/job-$JOB.h5   log: $OUT_DIR/logs/"
fi
