#!/bin/bash
# py-spy on every rank of a does-it-pay grid point at d = 2^20 (issue 31's closing-note profile):
#   bash scripts/profile-rank0.sh OUTDIR GRID [NP] [ITERS]
# writes OUTDIR/spy-<grid>-<rank>.txt (py-spy's collapsed stacks, --format raw) and prints rank 0's
# summary (scripts/spy-summary.py): samples by phase function and the top leaves.
# Needs py-spy (pip install py-spy); run as root or with ptrace allowed.
set -euo pipefail
out=${1:?OUTDIR}; grid=${2:?GRID}; np=${3:-2}; iters=${4:-200}
PY=${PY:-$(pwd)/.venv/bin/python}; MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
SPY=${SPY:-$(dirname "$PY")/py-spy}
command -v "$SPY" >/dev/null || { echo "py-spy not found ($SPY): pip install py-spy" >&2; exit 2; }
mkdir -p "$out"
wrap=$(mktemp); trap 'rm -f "$wrap"' EXIT
cat > "$wrap" <<EOW
#!/bin/bash
r=\${PMI_RANK:-\${OMPI_COMM_WORLD_RANK:-0}}
exec "$SPY" record --rate 500 --nonblocking --format raw -o "$out/spy-$grid-\$r.txt" -- "\$@"
EOW
chmod +x "$wrap"
MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-900} "$MPIEXEC" -n "$np" "$wrap" "$PY" -m hpcgc.bench --config jobs/experiments/does-it-pay.toml \
  --grid-index "$grid" --set run.iterations="$iters" --set run.eval_every=50 --set run.tolerance=0 -q \
  -o "$out/profile-$grid.h5" --overwrite >/dev/null
"$PY" "$(dirname "$0")/spy-summary.py" "$out/spy-$grid-0.txt"
