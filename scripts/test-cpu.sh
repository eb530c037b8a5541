#!/usr/bin/env bash
# CPU seconds of the MPI test files, each file alone under `mpiexec -n 4` (what tests/test_cli_mpi.py
# launches, one file a launch here), measured with /usr/bin/time (user + sys of mpiexec and its ranks:
# less sensitive to the machine's load than wall time). docs/testing.md, "What the tiers cost".
#
#   bash scripts/test-cpu.sh [OUT.csv] [tests/mpi/test_x_mpi.py ...]    (default: every tests/mpi file)
#
# One CSV row a file: file, user_s, sys_s, cpu_s, wall_s, load1 (the 1-minute load average at its
# end), rc; each file's `pytest --durations=15` output beside the CSV (OUT.csv.d/<file>.log). Run it
# twice for a warm numba cache: the first file of a fresh clone compiles the kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi-env.sh
out=${1:-test-cpu.csv}; shift || true
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/mpi/test_*.py)
mkdir -p "$out.d"
echo "file,user_s,sys_s,cpu_s,wall_s,load1,rc" > "$out"
for f in "${files[@]}"; do
  s=$(basename "$f" .py)
  rc=0
  NUMBA_CPU_NAME=${NUMBA_CPU_NAME:-haswell} MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-1200} PYTHONPATH="$PWD" \
    /usr/bin/time -f "%U %S %e" -o "$out.d/$s.time" \
    mpiexec -n 4 python -m pytest --with-mpi -q -p no:cacheprovider --durations=15 "$f" > "$out.d/$s.log" 2>&1 || rc=$?
  read -r user sys wall < <(tail -1 "$out.d/$s.time")
  cpu=$(python -c "print(round($user + $sys, 2))")
  echo "$f,$user,$sys,$cpu,$wall,$(cut -d' ' -f1 /proc/loadavg),$rc" | tee -a "$out"
done
