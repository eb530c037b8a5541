"""What the tests/mpi files share: a directory every rank sees, and one experiment run end to end
(config → prepare → execute → the results file read back on every rank); under the launch of
tests/test_cli_mpi.py, each rank's record of what every test did (``HPCGC_MPI_REPORT_DIR``)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

from hpcgc import config, results
from hpcgc.run import execute, prepare
from hpcgc.transport import Transport
from hpcgc.transport.waiting import sleep_until

comm = MPI.COMM_WORLD


def shared_tmpdir() -> Path:
    """A fresh directory made by rank 0, its path broadcast (collective)."""
    d = tempfile.mkdtemp(prefix="hpcgc-mpi-") if comm.rank == 0 else None
    return Path(comm.bcast(d, root=0))


def quiet_barrier():
    """Every rank here before any goes on, the waiting ones asleep (``Transport.quiet_barrier``'s
    sleeps): 4 ranks on 2 cores, ranks spinning in a blocking MPI call take the CPU from the rank
    still working (measured: rank 0's report in test_nonconvex_mpi.py, 2.2 CPU-s, took 4.4 s wall
    with the other ranks spinning in the next test's bcast)."""
    sleep_until(comm.Ibarrier(), 5e-5, 5e-3)


@pytest.fixture(autouse=True)
def ranks_wait_asleep():
    """After each test, the ranks meet in :func:`quiet_barrier`: work one rank does alone at a test's
    end (rank 0's reports, files, prints) is not slowed by the others spinning in the next test."""
    yield
    quiet_barrier()


@pytest.fixture
def shared_dir():
    return shared_tmpdir()


def defaults() -> dict:
    """``config.defaults()`` for the tests' runs. ``HPCGC_TEST_WAIT`` (unset in CI) sets their
    ``run.wait``: how ``scripts/test-wait-ab.sh`` measures whether the launches get cheaper when the
    waiting ranks yield (they did not; docs/testing.md, "What the tiers cost")."""
    cfg = config.defaults()
    if os.environ.get("HPCGC_TEST_WAIT"):
        cfg["run"]["wait"] = os.environ["HPCGC_TEST_WAIT"]
    return cfg


def run_experiment(out: Path, overrides: dict, *, name: str = "test", sweep: dict | None = None,
                   floor: float = 0.0):
    """Run the default experiment with ``overrides`` ({"section.key": value}) and ``sweep`` on all
    ranks, write ``out``, and read it back on every rank → (results, runs, summaries, transport).
    ``floor`` > 0: each run measures its collectives' floor after it (``run --floor``)."""
    cfg = defaults()
    cfg["name"] = name
    for key, value in overrides.items():
        sec, k = key.split(".")
        cfg[sec][k] = value
    cfg["sweep"] = sweep or {}
    t = Transport()
    runs = prepare(cfg, t)
    for r in runs:
        r.floor = floor
    _, summaries = execute(runs, t, out, log=lambda *a: None)
    quiet_barrier()
    return results.load(out), runs, summaries, t


REPORT_DIR = os.environ.get("HPCGC_MPI_REPORT_DIR")
"""Set by the launch in tests/test_cli_mpi.py (one ``mpiexec -n 4`` for all the files): each rank
writes what each test did to ``rank-<r>.json`` there, so that the launch is judged file by file."""
_reports: list[dict] = []


def pytest_collectreport(report):
    if REPORT_DIR and not report.passed:                     # a file that does not import or collect
        _reports.append({"nodeid": report.nodeid, "when": "collect", "outcome": report.outcome,
                         "text": report.longreprtext})


def pytest_runtest_logreport(report):
    """Every test's call, and every setup or teardown that did not pass; an xfail counts as not passed."""
    if REPORT_DIR and (report.when == "call" or not report.passed):
        outcome = "xfail" if hasattr(report, "wasxfail") else report.outcome
        _reports.append({"nodeid": report.nodeid, "when": report.when, "outcome": outcome,
                         "text": "" if outcome == "passed" else report.longreprtext})


def pytest_sessionfinish(session, exitstatus):
    if REPORT_DIR:
        (Path(REPORT_DIR) / f"rank-{comm.rank}.json").write_text(json.dumps({"exitstatus": int(exitstatus),
                                                                             "reports": _reports}))
