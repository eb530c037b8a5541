#!/usr/bin/env bash
# Would the tests/mpi launches be cheaper if the waiting ranks yielded (run.wait = "yield") instead
# of spinning in MPI's blocking calls (the default)? The files alone under `mpiexec -n 4`
# (scripts/test-cpu.sh), their runs with HPCGC_TEST_WAIT=spin and =yield alternately
# (tests/mpi/conftest.py: defaults), ROUNDS rounds (default 2). docs/testing.md, "What the tiers cost".
#
#   ROUNDS=3 bash scripts/test-wait-ab.sh OUT.csv [tests/mpi/test_x_mpi.py ...]
#       (default: test_resume_mpi.py, test_ef21sgdm_dasha_mpi.py)
#
# One CSV row a file and run: round, run.wait, then test-cpu.sh's columns (user_s, sys_s, cpu_s,
# wall_s, load1, rc); each run's CSV and --durations logs beside it (OUT.csv.d/).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-test-wait-ab.csv}; shift || true
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(tests/mpi/test_resume_mpi.py tests/mpi/test_ef21sgdm_dasha_mpi.py)
mkdir -p "$out.d"
echo "round,run.wait,file,user_s,sys_s,cpu_s,wall_s,load1,rc" > "$out"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for wait in spin yield; do
    HPCGC_TEST_WAIT=$wait bash scripts/test-cpu.sh "$out.d/$wait-$round.csv" "${files[@]}"
    tail -n +2 "$out.d/$wait-$round.csv" | sed "s/^/$round,$wait,/" >> "$out"
  done
done
