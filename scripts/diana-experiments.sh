#!/usr/bin/env bash
# diana-experiments.sh - run the experiment files behind docs/diana-experiments.md at the rank count its
# tables use (4), then rebuild every table of that page from the results (python -m hpcgc.docs_tables
# regenerate; the data files docs/data/diana-experiments/*.csv and their provenance sidecars).
#
# usage: bash scripts/diana-experiments.sh [--out DIR] [--only "baselines blocks ..."] [-- hpcgc.bench options]
#   --out   results directory (default results/diana-experiments); one DIR/<table>.h5 per table
#   --only  a subset of the tables: baselines blocks momentum ef-vs-ef21 mlp vr-diana adiana marina
# Iterations and bits to a target are deterministic (same seed => same iterates, same bits); the tables
# show no times, so repeats would repeat the same numbers: the method's spread is over seeds (the mlp
# file sweeps three). Takes ~15-25 min on a 2-core machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=results/diana-experiments
ONLY="baselines blocks momentum ef-vs-ef21 mlp vr-diana adiana marina"
BENCH=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --) shift; BENCH=("$@"); break ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "diana-experiments: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "${VIRTUAL_ENV:-}" ] || { [ -r .venv/bin/activate ] && source .venv/bin/activate; }
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-7200}
declare -A FILE=([baselines]=diana-paper-baselines [blocks]=diana-paper-blocks [momentum]=diana-paper-momentum
                 [ef-vs-ef21]=ef-vs-ef21 [mlp]=diana-paper-mlp [vr-diana]=vr-diana-vs-diana
                 [adiana]=adiana-vs-diana [marina]=marina-diana-ef21-sigmoid)
mkdir -p "$OUT"
for t in $ONLY; do
  [ -n "${FILE[$t]:-}" ] || { echo "diana-experiments: error: unknown table '$t'" >&2; exit 2; }
  python -m hpcgc.bench validate --config "jobs/experiments/${FILE[$t]}.toml" "${BENCH[@]}" >/dev/null
done
for t in $ONLY; do
  echo "diana-experiments: $t (jobs/experiments/${FILE[$t]}.toml, 4 ranks; load average $(cut -d' ' -f1-3 /proc/loadavg))"
  mpiexec -n 4 python -m hpcgc.bench --config "jobs/experiments/${FILE[$t]}.toml" "${BENCH[@]}" \
    -o "$OUT/$t.h5" --overwrite --quiet
  python -m hpcgc.docs_tables regenerate --table "diana-experiments/$t" --from "$OUT/$t.h5"
done
echo "diana-experiments: results in $OUT/, tables in docs/data/diana-experiments/ (rendered into docs/)"
