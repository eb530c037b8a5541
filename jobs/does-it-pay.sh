#!/usr/bin/env bash
# does-it-pay.sh - run jobs/experiments/does-it-pay.toml on shared memory and on emulated clusters
# with slow per-node links (scripts/emulated-cluster.sh, docs/emulated-cluster.md), measuring the
# collectives (α, β) in every setting beside the runs. DRAFT (issue 13, part 4).
#
# usage: bash jobs/does-it-pay.sh [--np "4 8"] [--rates "1gbit 100mbit"] [--no-shm] [--out DIR]
#                                 [-- hpcgc.bench options, e.g. --set run.iterations=50]
#   --np      rank counts (one emulated node per rank)        default: 4
#   --rates   link rates of the emulated clusters (tc rates)   default: "1gbit 100mbit"
#   --no-shm  skip the shared-memory setting
#   --out     results directory                                default: results/does-it-pay
# Per setting S (shm, emu-1gbit, ...) and rank count N it writes DIR/S-nN.h5 (the runs) and
# DIR/S-nN-collectives.h5 (`collectives`, same ranks, same links). The emulated settings need root
# (or CAP_NET_ADMIN + CAP_SYS_ADMIN); each cluster is removed again, also when a run fails.
# On a real cluster use jobs/does-it-pay.sbatch / jobs/submit.sh instead.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
EXP=jobs/experiments/does-it-pay.toml
NPS="4" RATES="1gbit 100mbit" SHM=1 OUT=results/does-it-pay BENCH=()
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NPS=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --no-shm) SHM=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; BENCH=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "does-it-pay: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "${VIRTUAL_ENV:-}" ] || { [ -r .venv/bin/activate ] && source .venv/bin/activate; }
command -v mpiexec >/dev/null || { echo "does-it-pay: error: mpiexec not found (source .venv/bin/activate)" >&2; exit 2; }
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-14400}
mkdir -p "$OUT"
python -m hpcgc.bench validate --config "$EXP" "${BENCH[@]}" >/dev/null   # bad input: stop before anything runs
COLL=(-m hpcgc.bench collectives --max-size 16M --max-seconds 0.5)

for n in $NPS; do
  if [ "$SHM" = 1 ]; then
    echo "does-it-pay: shared memory, n = $n"
    mpiexec -n "$n" python "${COLL[@]}" -o "$OUT/shm-n$n-collectives.h5"
    mpiexec -n "$n" python -m hpcgc.bench --config "$EXP" "${BENCH[@]}" -o "$OUT/shm-n$n.h5"
  fi
  for rate in $RATES; do
    name=hpcgc-dip-$$-$n-$rate
    echo "does-it-pay: emulated cluster, $n nodes at $rate ($name)"
    bash scripts/emulated-cluster.sh up --nodes "$n" --rate "$rate" --name "$name"
    trap 'bash scripts/emulated-cluster.sh down --name "$name" >/dev/null 2>&1 || true' EXIT
    status=0
    {
      bash scripts/emulated-cluster.sh run --name "$name" -- -n "$n" python "${COLL[@]}" \
        -o "$OUT/emu-$rate-n$n-collectives.h5" &&
      bash scripts/emulated-cluster.sh run --name "$name" -- -n "$n" python -m hpcgc.bench \
        --config "$EXP" "${BENCH[@]}" -o "$OUT/emu-$rate-n$n.h5"
    } || status=$?
    bash scripts/emulated-cluster.sh down --name "$name"
    trap - EXIT
    [ "$status" = 0 ] || { echo "does-it-pay: error: $n nodes at $rate failed (exit $status)" >&2; exit "$status"; }
  done
done
echo "does-it-pay: results in $OUT/"
# TODO(issue 13, part 2): the break-even report over $OUT/*.h5 with each setting's collectives file,
# and the model-vs-measured time-to-target per run, once the report command has landed.
