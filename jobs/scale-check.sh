#!/usr/bin/env bash
# scale-check.sh - the break-even model checked at the design card's scale (issue 30 part 4;
# docs/scale-check.md): measured against predicted time to target on emulated clusters
# (scripts/emulated-cluster.sh, docs/emulated-cluster.md), the collectives (α, β) measured on the
# same links in every setting.
#   (a) one rank per node: N nodes in SC_NODES x link rates SC_RATES, experiment SC_EXP
#       (jobs/experiments/scale-check.toml: fp32 and fp16 Allreduce, EF + top-k under allgather and
#       reduce-scatter, DIANA + shared-seed rand-k under allreduce);
#   (b) several ranks per node: SC_HIER_NODES nodes x SC_RPN ranks at SC_HIER_RATE, experiment
#       SC_HIER_EXP at grid points SC_HIER_GRID, once flat and once with run.topology = "hierarchical".
#
# usage: bash jobs/scale-check.sh [--out DIR] [--reuse-collectives] [-- hpcgc.bench options, e.g. --set run.repeats=3]
#   environment (a reduced scope: set one list empty to skip that part):
#   SC_NODES       node counts of (a)                      default "16 32"
#   SC_RATES       link rates of (a) (tc rates)             default "100mbit 10mbit"
#   SC_EXP         experiment of (a)                        default scale-check
#   SC_GRID        grid points of (a) (I, I,J or I-J)       default all
#   SC_HIER_NODES  node counts of (b)                       default "4"    (empty: skip (b))
#   SC_RPN         ranks per node of (b)                    default 4
#   SC_HIER_RATE   link rate of (b)                         default 1gbit
#   SC_HIER_EXP    experiment of (b)                        default does-it-pay
#   SC_HIER_GRID   grid points of (b)                       default 0,3,4,5,10 (fp32, fp16 Allreduce; DIANA +
#                  rand-k allreduce, EF + top-k allgather and reduce-scatter: every collective and algorithm
#                  of the grid can run hierarchical, docs/collectives.md "Hierarchical")
#   SC_OUT         results directory (--out)                default results/scale-check
#   SC_COLL        options of `bench collectives`           default "-c gather bcast allreduce allgather alltoall
#                  --max-seconds 0.3 --warmup 10 --iterations 100 --warmup-large 1 --iterations-large 3"
#   SC_COLL_MAX    --max-size of `bench collectives`        default 64K at rates below 100mbit, else 256K
#                  (39 s at 4 nodes, 10 Mb/s, under load; estimated 1-1.5 min at 32 nodes: the large
#                  gathers grow with n; the runs' 256 KiB fp32 Allreduce is then priced from the 32 and 64 KiB sizes)
#   A quick check of the tooling, e.g.:
#   SC_NODES=4 SC_RATES=100mbit SC_HIER_NODES=2 SC_RPN=2 bash jobs/scale-check.sh --out /tmp/sc -- \
#     --set run.iterations=20
# Per cluster C (emu-<rate>-<N>x<K>) it writes DIR/C-collectives.h5, per setting S (C, or C-flat and C-hier
# for (b)) DIR/S.h5 (the runs), DIR/S-T/ (`hpcgc breakeven` with check.csv: measured against predicted, T = grad1e-2,
# grad1e-4; a hierarchical run predicted at the collectives file's two levels), then DIR/check-all.csv,
# DIR/breakeven-all.csv (python -m hpcgc.analysis.campaign), DIR/scale-check.md (the table,
# python -m hpcgc.analysis.scale_check) and DIR/manifest.txt (commit, date, commands, load averages).
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN); every cluster (hpcgc-scale-<pid>-...) is removed
# again, also when a run fails or the script is interrupted.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NODES=${SC_NODES-"16 32"} RATES=${SC_RATES-"100mbit 10mbit"} EXP=${SC_EXP:-scale-check} GRID=${SC_GRID:-}
HNODES=${SC_HIER_NODES-4} RPN=${SC_RPN:-4} HRATE=${SC_HIER_RATE:-1gbit} HEXP=${SC_HIER_EXP:-does-it-pay}
HGRID=${SC_HIER_GRID-0,3,4,5,10} OUT=${SC_OUT:-results/scale-check}
COLLOPTS=${SC_COLL:-"-c gather bcast allreduce allgather alltoall --max-seconds 0.3 --warmup 10 --iterations 100 --warmup-large 1 --iterations-large 3"}
BENCH=() REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --reuse-collectives) REUSE=1; shift ;;
    --) shift; BENCH=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale-check: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "${VIRTUAL_ENV:-}" ] || { [ -r .venv/bin/activate ] && source .venv/bin/activate; }
command -v mpiexec >/dev/null || { echo "scale-check: error: mpiexec not found (source .venv/bin/activate)" >&2; exit 2; }
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-14400}
sel() { [ -z "$1" ] || printf '%s\n' --grid-index "$1"; }
mapfile -t SEL < <(sel "$GRID")
mapfile -t HSEL < <(sel "$HGRID")
# bad input: stop before anything runs (the experiment files, the grid points, the passthrough options)
[ -z "$NODES" ] || [ -z "$RATES" ] ||
  python -m hpcgc.bench validate --config "jobs/experiments/$EXP.toml" "${SEL[@]}" "${BENCH[@]}" >/dev/null
if [ -n "$HNODES" ]; then
  python -m hpcgc.bench validate --config "jobs/experiments/$HEXP.toml" "${HSEL[@]}" "${BENCH[@]}" \
    --set run.topology=hierarchical >/dev/null
  for h in $HNODES; do [ "$h" -ge 2 ] && [ "$RPN" -ge 2 ] ||
    { echo "scale-check: error: (b) needs at least 2 nodes of at least 2 ranks (SC_HIER_NODES=$h, SC_RPN=$RPN)" >&2; exit 2; }; done
fi
mkdir -p "$OUT"
MANIFEST="$OUT/manifest.txt"
{
  echo "# scale-check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')"
  echo "# (a) nodes: ${NODES:-none}; rates: ${RATES:-none}; experiment: $EXP; grid: ${GRID:-all}"
  echo "# (b) nodes: ${HNODES:-none} x $RPN ranks at $HRATE; experiment: $HEXP; grid: ${HGRID:-all}"
  echo "# bench options: ${BENCH[*]:-}; collectives: $COLLOPTS"
} >> "$MANIFEST"
FAILED=()
CLUSTER=""
cleanup() { [ -z "$CLUSTER" ] || bash scripts/emulated-cluster.sh down --name "$CLUSTER" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "scale-check: $*"; echo "$(date -u +%H:%M:%S) $* (load average $(cut -d' ' -f1-3 /proc/loadavg))" >> "$MANIFEST"; }

collectives() {   # collectives SETTING RANKS RATE: the α, β of the cluster that is up
  local file="$OUT/$1-collectives.h5" max=${SC_COLL_MAX:-}
  [ "$REUSE" = 1 ] && [ -f "$file" ] && return 0
  [ -n "$max" ] || case "$3" in *kbit|[0-9]mbit|[0-9][0-9]mbit) max=64K ;; *) max=256K ;; esac
  log "$1: collectives ($2 ranks, --max-size $max)"
  # shellcheck disable=SC2086  # COLLOPTS are words
  bash scripts/emulated-cluster.sh run --name "$CLUSTER" -- -n "$2" python -m hpcgc.bench collectives \
    $COLLOPTS --max-size "$max" -o "$file"
}

runs() {          # runs SETTING RANKS EXPERIMENT [bench options...]: the experiment on the cluster that is up
  local setting=$1 n=$2 e=$3; shift 3
  log "$setting: $e on $n ranks: python -m hpcgc.bench --config jobs/experiments/$e.toml $* ${BENCH[*]:-}"
  bash scripts/emulated-cluster.sh run --name "$CLUSTER" -- -n "$n" python -m hpcgc.bench \
    --config "jobs/experiments/$e.toml" "$@" "${BENCH[@]}" -o "$OUT/$setting.h5"
}

report() {        # report SETTING CLUSTER EXPERIMENT RATE NODES RPN: break-even + check at every target
  local setting=$1 coll="$OUT/$2-collectives.h5" e=$3 tag args dir; shift 3
  while read -r tag args; do
    dir="$OUT/$setting-$tag"
    # shellcheck disable=SC2086  # ARGS are words
    if python -m hpcgc breakeven "$OUT/$setting.h5" --collectives "$coll" \
         $args -o "$dir" > "$dir.breakeven.txt" 2> "$dir.breakeven.err"; then
      printf '%s\n' "setting=$setting" "n=$(($2 * $3))" "experiment=$e" "target=$tag" "rate=$1" \
        "cluster_nodes=$2" "cluster_ranks_per_node=$3" > "$dir/what.txt"
      log "report $dir: hpcgc breakeven $OUT/$setting.h5 --collectives $coll $args -o $dir"
    else
      echo "scale-check: error: the report $dir failed: $(tail -n 1 "$dir.breakeven.err")" >&2
      FAILED+=("$dir")
    fi
  done < <(printf '%s\n' "grad1e-2 --eps 1e-2 --metric grad_ratio" "grad1e-4 --eps 1e-4 --metric grad_ratio")
}

up() {            # up NODES RPN RATE
  CLUSTER=hpcgc-scale-$$-$1x$2-$3
  log "emulated cluster $CLUSTER: $1 nodes x $2 ranks at $3"
  bash scripts/emulated-cluster.sh up --nodes "$1" --ranks-per-node "$2" --rate "$3" --name "$CLUSTER"
}

down() {
  bash scripts/emulated-cluster.sh down --name "$CLUSTER"
  CLUSTER=""
}

# (a) one rank per node
for n in $NODES; do
  for rate in $RATES; do
    s=emu-$rate-${n}x1
    up "$n" 1 "$rate"
    status=0
    { collectives "$s" "$n" "$rate" && runs "$s" "$n" "$EXP" "${SEL[@]}"; } || status=$?
    down
    [ "$status" = 0 ] || { echo "scale-check: error: $s failed (exit $status)" >&2; exit "$status"; }
    report "$s" "$s" "$EXP" "$rate" "$n" 1
  done
done
# (b) several ranks per node, flat and hierarchical, the same collectives file
for n in $HNODES; do
  s=emu-$HRATE-${n}x$RPN
  up "$n" "$RPN" "$HRATE"
  status=0
  { collectives "$s" $((n * RPN)) "$HRATE" &&
    runs "$s-flat" $((n * RPN)) "$HEXP" "${HSEL[@]}" &&
    runs "$s-hier" $((n * RPN)) "$HEXP" "${HSEL[@]}" --set run.topology=hierarchical; } || status=$?
  down
  [ "$status" = 0 ] || { echo "scale-check: error: $s failed (exit $status)" >&2; exit "$status"; }
  report "$s-flat" "$s" "$HEXP" "$HRATE" "$n" "$RPN"
  report "$s-hier" "$s" "$HEXP" "$HRATE" "$n" "$RPN"
done
python -m hpcgc.analysis.campaign "$OUT" | sed 's/^campaign:/scale-check:/'
if [ -f "$OUT/check-all.csv" ]; then
  python -m hpcgc.analysis.scale_check "$OUT" > "$OUT/scale-check.md"
  echo "scale-check: the table in $OUT/scale-check.md (measured against predicted time to target)"
fi
echo "scale-check: results in $OUT/ (manifest.txt: what ran, and the report commands)"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "scale-check: error: ${#FAILED[@]} report(s) failed (a reduced grid without a baseline?): ${FAILED[*]}" >&2
  exit 1
fi
