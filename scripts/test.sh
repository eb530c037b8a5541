#!/usr/bin/env bash
# One command: set up .venv and run the whole test suite (serial tests, then the MPI tests, which
# the suite launches itself under a real `mpiexec -n 4` with a timeout). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/mpi-env.sh
exec python -m pytest -p no:cacheprovider "$@"
