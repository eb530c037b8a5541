"""The floor (``run --floor``) and the honest phases (``wait_*``, ``other``) under a real mpiexec
(pytest-mpi; launched by ``tests/test_cli_mpi.py::test_pytest_mpi_suite_on_4_ranks``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.transport import LEDGER, PHASES, CollectiveTimer, Transport
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=2)
comm = MPI.COMM_WORLD
BASE = {"run.iterations": 40, "run.eval_every": 10, "problem.l2": 0.1, "run.algorithm": "diana"}


def run_one(out: Path, overrides: dict, floor: float = 0.0):
    res, runs, summaries, _ = run_experiment(out, {**BASE, **overrides}, name="floor", floor=floor)
    return res[0], runs[0], summaries


def test_sequence_moves_each_ranks_own_sizes_and_leaves_the_ledger_alone():
    t = Transport()
    before = t.ledger.copy()
    n, me = comm.size, comm.rank
    timer = CollectiveTimer(t)
    ops = [("gather", 3 + me, np.uint8), ("bcast", 16, np.float64), ("allreduce", 12, np.float32),
           ("allgather", 5 * me, np.uint8)]
    op = timer.sequence(ops)
    (_, g), (b, _), (_, a), (_, ag) = op.buffers
    b[:] = 0 if me else 7.0                                 # rank 0's broadcast value
    assert timer.period(op, 3) > 0
    np.testing.assert_array_equal(t.ledger, before)          # measurement traffic, not algorithm traffic
    total = sum(3 + r for r in range(n))
    if me == 0:
        assert g.size == total and np.all(g == 1)            # every rank's payload of ones arrived
    else:
        assert g is None
    assert np.all(b == 7.0) and b.size == 2
    assert a.dtype == np.float32 and a.size == 3 and np.all(a == n)        # Σ over ranks of ones
    assert ag.size == 5 * n * (n - 1) // 2 and np.all(ag == 1)


def test_floor_attributes_and_ratio(shared_dir):
    """The floor is the run's own collective sequence: its sizes are the ones the results file's
    ledgers show, and floor_ratio = median iteration / floor_seconds."""
    run, r, summaries = run_one(shared_dir / "g.h5", {"run.compressor": "qsgd:s=2"}, floor=0.05)
    d, n, T = run.attrs["d"], run.attrs["n_workers"], int(run.attrs["iterations_done"])
    payload = run.mpi_bytes["Gatherv"][-1, 0] / T                # rank 0's payload bytes per iteration
    assert payload == int(payload) > 0
    # the control word's Bcast (where the workers wait for the step) apart from the iterate's
    assert run.attrs["floor_collectives"] == f"gather {int(payload)} B, bcast 8 B, bcast {8 * d} B"
    assert run.attrs["floor_seconds"] > 0
    med = np.median(run.per_iteration["iter"].astype(np.float64))
    assert run.attrs["floor_ratio"] == pytest.approx(med / run.attrs["floor_seconds"], rel=1e-5)
    if comm.rank == 0:
        s = summaries[0]
        assert s.floor_ratio == pytest.approx(run.attrs["floor_ratio"]) and s.floor_ms > 0
    assert n == comm.size


@pytest.mark.parametrize("collective,compressor", [("allreduce", "identity"), ("allgather", "qsgd:s=2")])
def test_floor_of_the_other_collectives(shared_dir, collective, compressor):
    run, _, _ = run_one(shared_dir / f"{collective}.h5", {"run.compressor": compressor,
                                                         "run.collective": collective}, floor=0.05)
    T = int(run.attrs["iterations_done"])
    if collective == "allreduce":
        assert run.attrs["floor_collectives"] == f"allreduce {4 * run.attrs['d']} B"     # float32 vector
    else:
        per_it = int(run.mpi_bytes["Allgatherv"][-1, 0] / T)
        assert run.attrs["floor_collectives"] == f"allgather {per_it} B"
    assert run.attrs["floor_seconds"] > 0 and run.attrs["floor_ratio"] > 0


def test_phases_add_up_and_barriers_change_no_iterate(shared_dir):
    """iter = the sum of the other phases (every rank, every iteration); without run.wait_phases the
    wait phases are 0 (and the control word rides the iterate's Bcast); splitting them changes no
    iterate, no bit and no byte of the ledgers."""
    a, _, _ = run_one(shared_dir / "a.h5", {"run.compressor": "qsgd:s=2"})
    b, _, _ = run_one(shared_dir / "b.h5", {"run.compressor": "qsgd:s=2", "run.wait_phases": False}, floor=0.02)
    assert set(PHASES) <= set(a.per_iteration) and set(PHASES) <= set(a.time)
    for run in (a, b):
        pi = {ph: run.per_iteration[ph].astype(np.float64) for ph in PHASES}
        parts = sum(pi[ph] for ph in PHASES if ph != "iter")
        np.testing.assert_allclose(parts, pi["iter"], rtol=1e-5, atol=1e-9)
        for ph in PHASES:
            if ph != "other":
                assert np.all(run.time[ph] >= 0), ph
        np.testing.assert_allclose(run.time["iter"][-1], run.per_iteration["iter"].astype(np.float64).sum(0),
                                   rtol=1e-5)
    assert np.all(b.time["wait_up"] == 0) and np.all(b.time["wait_down"] == 0)
    d = b.attrs["d"]                     # unsplit: the control word rides the iterate's Bcast
    assert b.attrs["floor_collectives"].endswith(f", bcast {8 * (d + 1)} B")
    assert np.all(a.time["wait_down"][-1] > 0)
    np.testing.assert_array_equal(a.x_final, b.x_final)
    for key in ("loss", "bits_up_model", "bits_up_wire", "bits_down_wire"):
        np.testing.assert_array_equal(a.series[key], b.series[key])
    for c in LEDGER:
        np.testing.assert_array_equal(a.mpi_bytes[c], b.mpi_bytes[c])


@pytest.mark.parametrize("algorithm,collective,compressor", [("ef", "allgather", "topk:k=40"),
                                                            ("diana", "gather", "randk:k=40")])
def test_line_floor_counts_the_lines_of_the_messages_sent(shared_dir, algorithm, collective, compressor):
    """The line floor's sparse message items (hpcgc.traffic) count the distinct lines of the entries
    the workers' messages carry (hpcgc.floor.next_positions: each worker's next message on copies of
    the run's state, gathered to rank 0), not the expectation for random ones; the run's results are
    those of a run without the floor (its copies leave the state alone)."""
    over = {"run.algorithm": algorithm, "run.collective": collective, "run.compressor": compressor,
            "data.dataset": "synthetic:sparse,n=400,d=4096,nnz=10,seed=0"}
    run, _, summaries = run_one(shared_dir / f"lines-{algorithm}.h5", over, floor=0.05)
    plain, _, _ = run_one(shared_dir / f"lines-{algorithm}-plain.h5", over)
    np.testing.assert_array_equal(run.x_final, plain.x_final)
    if comm.rank != 0:
        return
    d, n, k = run.attrs["d"], run.attrs["n_workers"], 40
    items = summaries[0].traffic["items"]
    own = next(it for it in items["compress"] if it.scatter is not None).scatter
    step = next(it for it in items["server"] if it.scatter is not None).scatter
    assert own.entries == k and own.lines is not None and -(-k // 8) <= own.lines <= k
    assert step.entries == n * k and step.lines is not None and own.lines <= step.lines <= min(n * k, -(-d // 8))
    # the server's row in lines: its streams as counted plus 128 B per line of the messages' entries
    streams = sum(it.nbytes for it in items["server"] if it.scatter is None)
    assert summaries[0].traffic["line_rows"][2] == ("server", pytest.approx(streams + 128 * step.lines),
                                                    pytest.approx((streams + 128 * step.lines)
                                                                  / summaries[0].traffic["bandwidth"]))
