#!/bin/bash
# py-spy on every rank of a does-it-pay grid point at d = 2^20 (issue 31's closing-note profile):
#   bash scripts/profile-rank0.sh OUTDIR GRID [NP] [ITERS]
# writes OUTDIR/spy-<grid>-<rank>.txt (py-spy's collapsed stacks, --format raw) and prints rank 0's
# summary (scripts/spy-summary.py): samples by phase function and the top leaves.
# CONFIG=jobs/experiments/default.toml: another experiment's grid point (issue 31 target 3: the
# default experiment at -n 8 / -n 32); NATIVE=1: py-spy --native (numba kernels and MPI's C frames; blocking samples);
# SUMMARY="0 1": the ranks summarised (default 0); EVAL=10: run.eval_every (default 50); RATE: samples/s (500).
# Needs py-spy (pip install py-spy); run as root or with ptrace allowed.
set -euo pipefail
out=${1:?OUTDIR}; grid=${2:?GRID}; np=${3:-2}; iters=${4:-200}
PY=${PY:-$(pwd)/.venv/bin/python}; MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
SPY=${SPY:-$(dirname "$PY")/py-spy}
command -v "$SPY" >/dev/null || { echo "py-spy not found ($SPY): pip install py-spy" >&2; exit 2; }
mkdir -p "$out"
mode=--nonblocking; [ -z "${NATIVE:-}" ] || mode=--native     # native stacks need the process paused
wrap=$(mktemp); trap 'rm -f "$wrap"' EXIT
cat > "$wrap" <<EOW
#!/bin/bash
r=\${PMI_RANK:-\${OMPI_COMM_WORLD_RANK:-0}}
exec "$SPY" record --rate "${RATE:-500}" $mode --format raw -o "$out/spy-$grid-\$r.txt" -- "\$@"
EOW
chmod +x "$wrap"
MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-900} "$MPIEXEC" -n "$np" "$wrap" "$PY" -m hpcgc.bench --config "${CONFIG:-jobs/experiments/does-it-pay.toml}" \
  --grid-index "$grid" --set run.iterations="$iters" --set run.eval_every="${EVAL:-50}" --set run.tolerance=0 -q \
  -o "$out/profile-$grid.h5" --overwrite >/dev/null
for r in ${SUMMARY:-0}; do "$PY" "$(dirname "$0")/spy-summary.py" "$out/spy-$grid-$r.txt"; done
