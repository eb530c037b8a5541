#!/usr/bin/env bash
# One tests/mpi launch as tests/test_cli_mpi.py makes it (mpiexec -n 4, several files), with MPICH's
# polling default (MPIR_CVAR_POLLS_BEFORE_YIELD = MPIR_CVAR_POSIX_POLL_FREQUENCY = 1000) and with the
# tests' setting (= 1, tests/conftest.py mpi_env) alternately: wall, user and sys seconds of each
# (/usr/bin/time over mpiexec and its ranks). docs/testing.md, "Waiting ranks yield the core".
#
#   ROUNDS=2 bash scripts/test-launch-yield.sh [tests/mpi/test_x_mpi.py ...]   (default: the first launch's 8 files)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi-env.sh
files=("$@"); [ ${#files[@]} -gt 0 ] || mapfile -t files < <(ls tests/mpi/test_*.py | sort | head -8)
echo "# $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(getconf _NPROCESSORS_ONLN) cores, commit $(git rev-parse --short HEAD); files: ${files[*]}"
for r in $(seq "${ROUNDS:-2}"); do
  order=(1000 1); [ $((r % 2)) -eq 0 ] && order=(1 1000)          # alternate which goes first
  for polls in "${order[@]}"; do
    t=$(mktemp)
    rc=0
    MPIR_CVAR_POLLS_BEFORE_YIELD=$polls MPIR_CVAR_POSIX_POLL_FREQUENCY=$polls NUMBA_NUM_THREADS=1 \
      MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-1200} PYTHONPATH="$PWD" /usr/bin/time -f "%e %U %S" -o "$t" \
      mpiexec -n 4 python -m pytest --with-mpi -q -p no:cacheprovider "${files[@]}" > "$t.log" 2>&1 || rc=$?
    read -r wall user sys < <(tail -1 "$t")
    echo "round $r polls_before_yield=$polls: wall $wall s, user $user s, sys $sys s, load $(cut -d' ' -f1 /proc/loadavg), rc $rc; pytest: $(grep -E '[0-9]+ passed' "$t.log" | tail -1 | tr -d '=' | xargs)"
    rm -f "$t" "$t.log"
  done
done
