#!/usr/bin/env bash
# does-it-pay.sh - run jobs/experiments/does-it-pay.toml on shared memory and on emulated clusters
# with slow per-node links (scripts/emulated-cluster.sh, docs/emulated-cluster.md), measuring the
# collectives (α, β) in every setting beside the runs, then the break-even report with its
# model-vs-measured check per setting and experiment (issue 13, part 4; docs/does-it-pay.md).
#
# usage: bash jobs/does-it-pay.sh [--np "4 8"] [--rates "1gbit 100mbit"] [--no-shm] [--out DIR]
#                                 [--exp "does-it-pay does-it-pay-mlp"] [--reuse-collectives]
#                                 [-- hpcgc.bench options, e.g. --set run.iterations=50]
#   --np      rank counts (one emulated node per rank)        default: 4
#   --rates   link rates of the emulated clusters (tc rates)   default: "1gbit 100mbit"
#   --no-shm  skip the shared-memory setting
#   --out     results directory                                default: results/does-it-pay
#   --exp     experiment files (jobs/experiments/E.toml)       default: does-it-pay does-it-pay-mlp
#   --reuse-collectives  keep a setting's collectives file from an earlier invocation (same links)
# Per setting S (shm, emu-1gbit, ...), rank count N and experiment E it writes DIR/S-nN-E.h5 (the
# runs), DIR/S-nN-collectives.h5 (`collectives`, same ranks, same links) and DIR/S-nN-E/ (`hpcgc
# breakeven` with check.csv: model against measurement). The emulated settings need root
# (or CAP_NET_ADMIN + CAP_SYS_ADMIN); each cluster is removed again, also when a run fails.
# On a real cluster use jobs/does-it-pay.sbatch / jobs/submit.sh instead.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
EXPS="does-it-pay does-it-pay-mlp"
NPS="4" RATES="1gbit 100mbit" SHM=1 OUT=results/does-it-pay BENCH=() REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NPS=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --no-shm) SHM=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    --exp) EXPS=$2; shift 2 ;;
    --reuse-collectives) REUSE=1; shift ;;
    --) shift; BENCH=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "does-it-pay: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "${VIRTUAL_ENV:-}" ] || { [ -r .venv/bin/activate ] && source .venv/bin/activate; }
command -v mpiexec >/dev/null || { echo "does-it-pay: error: mpiexec not found (source .venv/bin/activate)" >&2; exit 2; }
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-14400}
mkdir -p "$OUT"
for e in $EXPS; do   # bad input: stop before anything runs
  python -m hpcgc.bench validate --config "jobs/experiments/$e.toml" "${BENCH[@]}" >/dev/null
done
COLL=(-m hpcgc.bench collectives --max-size 8M --max-seconds 0.5)

experiments() {   # experiments SETTING N LAUNCH...: every experiment file, then its break-even report
  local setting=$1 n=$2 e; shift 2
  for e in $EXPS; do
    echo "does-it-pay: $setting, n = $n: $e   (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    "$@" -n "$n" python -m hpcgc.bench --config "jobs/experiments/$e.toml" "${BENCH[@]}" \
      -o "$OUT/$setting-n$n-$e.h5" || return
  done
}

report() {        # report SETTING N: break-even + model-vs-measured check of every experiment
  local setting=$1 n=$2 e
  for e in $EXPS; do
    python -m hpcgc breakeven "$OUT/$setting-n$n-$e.h5" --collectives "$OUT/$setting-n$n-collectives.h5" \
      -o "$OUT/$setting-n$n-$e" > "$OUT/$setting-n$n-$e.breakeven.txt" || return
    echo "does-it-pay: report in $OUT/$setting-n$n-$e/breakeven.md (check.csv: model against measurement)"
  done
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
echo "does-it-pay: results in $OUT/"
