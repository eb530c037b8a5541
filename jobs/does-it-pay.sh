#!/usr/bin/env bash
# does-it-pay.sh - run jobs/experiments/does-it-pay.toml (and -mlp) on shared memory and on emulated
# clusters with slow per-node links (scripts/emulated-cluster.sh, docs/emulated-cluster.md), measuring
# the collectives (α, β) in every setting beside the runs, then the break-even reports - against the
# fastest of the fp16/bf16/fp32 Allreduce - with their model-vs-measured check, per setting,
# experiment and target (issues 13 part 4 and 27; docs/does-it-pay.md).
#
# usage: bash jobs/does-it-pay.sh [--np "4 8"] [--rates "1gbit 100mbit"] [--no-shm] [--out DIR]
#                                 [--exp "does-it-pay does-it-pay-mlp"] [--grid "0,5,7"]
#                                 [--reuse-collectives] [-- hpcgc.bench options, e.g. --set run.iterations=50]
#   --np      rank counts (one emulated node per rank)        default: "4 8"        (env DIP_NP)
#   --rates   link rates of the emulated clusters (tc rates)   default: "1gbit 100mbit" (env DIP_RATES)
#   --no-shm  skip the shared-memory setting                                         (env DIP_SHM=0)
#   --out     results directory                                default: results/does-it-pay (env DIP_OUT)
#   --exp     experiment files (jobs/experiments/E.toml)       default: does-it-pay does-it-pay-mlp (env DIP_EXPS)
#   --grid    grid points of every experiment (--grid-index: I, I,J or I-J)  default: all (env DIP_GRID)
#   --reuse-collectives  keep a setting's collectives file from an earlier invocation (same links)
# A quick check of a reduced scope, e.g.:
#   DIP_NP=4 DIP_RATES=1gbit DIP_SHM=0 DIP_EXPS=does-it-pay DIP_GRID=0,5,7 bash jobs/does-it-pay.sh --out /tmp/dip
# Per setting S (shm, emu-1gbit, ...), rank count N, experiment E and target T it writes DIR/S-nN-E.h5
# (the runs), DIR/S-nN-collectives.h5 (`collectives`, same ranks, same links), DIR/S-nN-E-T/
# (`hpcgc breakeven` with check.csv: model against measurement; T = grad1e-2, grad1e-4 for
# does-it-pay, grad1e-2, acc0.5 for does-it-pay-mlp), and for the whole invocation DIR/breakeven-all.csv
# and DIR/check-all.csv (every report's rows, with setting, n, experiment and target columns) and
# DIR/manifest.txt (commit, date, commands, load averages): what a later regeneration reads.
# The emulated settings need root (or CAP_NET_ADMIN + CAP_SYS_ADMIN); each cluster is removed again,
# also when a run fails. On a real cluster use jobs/does-it-pay.sbatch / jobs/submit.sh instead.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
EXPS=${DIP_EXPS:-"does-it-pay does-it-pay-mlp"}
NPS=${DIP_NP:-"4 8"} RATES=${DIP_RATES-"1gbit 100mbit"} SHM=${DIP_SHM:-1} OUT=${DIP_OUT:-results/does-it-pay}
GRID=${DIP_GRID:-} BENCH=() REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NPS=$2; shift 2 ;;
    --grid) GRID=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --no-shm) SHM=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    --exp) EXPS=$2; shift 2 ;;
    --reuse-collectives) REUSE=1; shift ;;
    --) shift; BENCH=("$@"); break ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "does-it-pay: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "${VIRTUAL_ENV:-}" ] || { [ -r .venv/bin/activate ] && source .venv/bin/activate; }
command -v mpiexec >/dev/null || { echo "does-it-pay: error: mpiexec not found (source .venv/bin/activate)" >&2; exit 2; }
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-14400}
SEL=()
[ -z "$GRID" ] || SEL=(--grid-index "$GRID")
mkdir -p "$OUT"
for e in $EXPS; do   # bad input: stop before anything runs
  python -m hpcgc.bench validate --config "jobs/experiments/$e.toml" "${SEL[@]}" "${BENCH[@]}" >/dev/null
done
MANIFEST="$OUT/manifest.txt"
{
  echo "# does-it-pay.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "# np: $NPS; rates: $RATES; shm: $SHM; experiments: $EXPS; grid: ${GRID:-all}; bench options: ${BENCH[*]:-}"
} >> "$MANIFEST"
FAILED=()

targets() {       # targets E: "TAG ARGS..." lines, the break-even reports of experiment E
  case "$1" in
    does-it-pay) printf '%s\n' "grad1e-2 --eps 1e-2 --metric grad_ratio" "grad1e-4 --eps 1e-4 --metric grad_ratio" ;;
    does-it-pay-mlp) printf '%s\n' "grad1e-2 --eps 1e-2 --metric grad_ratio" "acc0.5 --accuracy-within 0.5" ;;
    *) echo "default" ;;
  esac
}
COLL=(-m hpcgc.bench collectives --max-size 8M --max-seconds 0.5)

experiments() {   # experiments SETTING N LAUNCH...: every experiment file, then its break-even report
  local setting=$1 n=$2 e; shift 2
  for e in $EXPS; do
    echo "does-it-pay: $setting, n = $n: $e   (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "$setting n=$n $e: load average $(cut -d' ' -f1-3 /proc/loadavg)" >> "$MANIFEST"
    "$@" -n "$n" python -m hpcgc.bench --config "jobs/experiments/$e.toml" "${SEL[@]}" "${BENCH[@]}" \
      -o "$OUT/$setting-n$n-$e.h5" || return
  done
}

report() {        # report SETTING N: break-even + model-vs-measured check of every experiment and target
  local setting=$1 n=$2 e tag args dir
  for e in $EXPS; do
    while read -r tag args; do
      dir="$OUT/$setting-n$n-$e-$tag"
      # shellcheck disable=SC2086  # ARGS are words
      if python -m hpcgc breakeven "$OUT/$setting-n$n-$e.h5" --collectives "$OUT/$setting-n$n-collectives.h5" \
           $args -o "$dir" > "$dir.breakeven.txt" 2> "$dir.breakeven.err"; then
        printf '%s\n' "$setting" "$n" "$e" "$tag" > "$dir/what.txt"      # for combine
        echo "does-it-pay: report in $dir/breakeven.md (check.csv: model against measurement)"
        echo "report $dir: hpcgc breakeven $OUT/$setting-n$n-$e.h5 --collectives $OUT/$setting-n$n-collectives.h5 $args -o $dir" >> "$MANIFEST"
      else
        echo "does-it-pay: error: the report $dir failed: $(tail -n 1 "$dir.breakeven.err")" >&2
        FAILED+=("$dir")
      fi
    done < <(targets "$e")
  done
}

combine() {       # every report's CSV rows in breakeven-all.csv and check-all.csv (hpcgc/analysis/campaign.py)
  python -m hpcgc.analysis.campaign "$OUT" | sed 's/^campaign:/does-it-pay:/'
}

for n in $NPS; do
  if [ "$SHM" = 1 ]; then
    echo "does-it-pay: shared memory, n = $n"
    [ "$REUSE" = 1 ] && [ -f "$OUT/shm-n$n-collectives.h5" ] ||
      mpiexec -n "$n" python "${COLL[@]}" -o "$OUT/shm-n$n-collectives.h5"
    experiments shm "$n" mpiexec
    report shm "$n"
  fi
  for rate in $RATES; do
    name=hpcgc-dip-$$-$n-$rate
    echo "does-it-pay: emulated cluster, $n nodes at $rate ($name)"
    bash scripts/emulated-cluster.sh up --nodes "$n" --rate "$rate" --name "$name"
    trap 'bash scripts/emulated-cluster.sh down --name "$name" >/dev/null 2>&1 || true' EXIT
    status=0
    {
      { [ "$REUSE" = 1 ] && [ -f "$OUT/emu-$rate-n$n-collectives.h5" ] ||
        bash scripts/emulated-cluster.sh run --name "$name" -- -n "$n" python "${COLL[@]}" \
          -o "$OUT/emu-$rate-n$n-collectives.h5"; } &&
      experiments "emu-$rate" "$n" bash scripts/emulated-cluster.sh run --name "$name" --
    } || status=$?
    bash scripts/emulated-cluster.sh down --name "$name"
    trap - EXIT
    [ "$status" = 0 ] || { echo "does-it-pay: error: $n nodes at $rate failed (exit $status)" >&2; exit "$status"; }
    report "emu-$rate" "$n"
  done
done
combine
echo "does-it-pay: results in $OUT/ (manifest.txt: what ran, and the report commands)"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "does-it-pay: error: ${#FAILED[@]} report(s) failed (a reduced --grid without the baseline?): ${FAILED[*]}" >&2
  exit 1
fi
