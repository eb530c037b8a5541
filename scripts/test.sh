#!/usr/bin/env bash
# One command: set up .venv, lint, and run the whole test suite (serial tests, then the MPI tests,
# which the suite launches itself under a real `mpiexec -n 4` with a timeout). Extra args go to pytest.
# The report.html test opens the report in Debian's headless `chromium`, installed here with apt-get
# when it is missing (as root, or with passwordless sudo); its screenshot lands in
# test-artifacts/report-html-screenshot.png (or $HPCGC_TEST_ARTIFACTS).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/mpi-env.sh
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
echo "hpcgc test: ruff check hpcgc analysis tests"
ruff check hpcgc analysis tests
exec python -m pytest -p no:cacheprovider "$@"
