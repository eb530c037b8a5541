#!/usr/bin/env bash
# One command: set up .venv and run the built-in default benchmark on NP ranks (default 4).
#   bash scripts/quickstart.sh                   # mpiexec -n 4 python -m hpcgc.bench
#   NP=32 bash scripts/quickstart.sh --set run.iterations=2000
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/mpi-env.sh
exec mpiexec "${MPIEXEC_FLAGS[@]}" -n "${NP:-4}" python -m hpcgc.bench "$@"
