#!/usr/bin/env bash
# One command: set up .venv, lint, and run the test suite (serial tests, then the MPI tests, which
# the suite launches itself under a real `mpiexec -n 4` with a timeout). Extra args go to pytest.
#
#   bash scripts/test.sh            every test (what CI runs: `.ci/run`), docs/testing.md
#   bash scripts/test.sh --quick    the quick tier (tests/quick.txt, ~3 min on a quiet 2-core machine):
#                                   every module's fast tests and one real-mpiexec launch, for the
#                                   edit-test loop; no browser, SLURM, emulated cluster, tmpfs or
#                                   bounds-checked fuzzing
#
# The full run also
#  - runs the decoders' fuzz tests recompiled with NUMBA_BOUNDSCHECK=1 (HPCGC_TEST_BOUNDSCHECK=1;
#    set HPCGC_TEST_BOUNDSCHECK=0 to leave them out of a local run);
#  - checks the required tests (tests/required.txt: SLURM, emulated cluster, browser, tmpfs, the
#    tests/mpi files, ...) after pytest and prints what each ran; under CI=true (set by .ci/run) a
#    required test that skipped fails the run, and a test whose component is missing fails
#    instead of skipping (tests/conftest.py: need);
#  - opens report.html in Debian's headless `chromium`, installed here with apt-get when it is
#    missing (as root, or with passwordless sudo); its screenshot lands in
#    test-artifacts/report-html-screenshot.png (or $HPCGC_TEST_ARTIFACTS). The SLURM tests install
#    slurm-wlm and munge themselves (scripts/local-slurm/start-hpcgc-slurm.sh, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
bash scripts/setup.sh
source scripts/mpi-env.sh
if [ "$quick" = 1 ]; then
  echo "hpcgc test: ruff check hpcgc analysis tests"
  ruff check hpcgc analysis tests
  echo "hpcgc test: quick tier (tests/quick.txt); 'bash scripts/test.sh' runs every test"
  exec python -m pytest -p no:cacheprovider --quick "$@"
fi
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi
  if [ "$sudo" != none ]; then
    echo "hpcgc test: installing Debian's chromium (headless browser for the report.html test)"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "hpcgc test: no chromium and no root to install it: the report.html browser test will be skipped"
  fi
fi
if command -v chromium >/dev/null 2>&1; then export HPCGC_REQUIRE_BROWSER=1; fi
export HPCGC_TEST_BOUNDSCHECK=${HPCGC_TEST_BOUNDSCHECK:-1}
if [ "$HPCGC_TEST_BOUNDSCHECK" = 0 ]; then unset HPCGC_TEST_BOUNDSCHECK; fi
echo "hpcgc test: ruff check hpcgc analysis tests"
ruff check hpcgc analysis tests
exec python -m pytest -p no:cacheprovider --required tests/required.txt "$@"
