"""What the tests/mpi files share: a directory every rank sees, and one experiment run end to end
(config → prepare → execute → the results file read back on every rank)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

from hpcgc import config, results
from hpcgc.run import execute, prepare
from hpcgc.transport import Transport

comm = MPI.COMM_WORLD


def shared_tmpdir() -> Path:
    """A fresh directory made by rank 0, its path broadcast (collective)."""
    d = tempfile.mkdtemp(prefix="hpcgc-mpi-") if comm.rank == 0 else None
    return Path(comm.bcast(d, root=0))


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
    comm.Barrier()
    return results.load(out), runs, summaries, t
