"""The collectives benchmark's timed primitives under a real mpiexec (pytest-mpi; launched by
``tests/test_cli_mpi.py::test_pytest_mpi_suite_on_4_ranks``)."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.transport import COLLECTIVES, LEDGER, CollectiveTimer, Transport

pytestmark = pytest.mark.mpi(min_size=2)
comm = MPI.COMM_WORLD


def test_timed_collectives_move_the_data_and_leave_the_ledger_alone():
    t = Transport()
    t.gather_payloads(np.ones(5, dtype=np.uint8))            # algorithm traffic: counted
    before = t.ledger.copy()
    timer = CollectiveTimer(t)
    n = comm.size
    for kind in COLLECTIVES:
        timer.allocate(kind, 1024)
        for nbytes in (8, 1024):
            tmin, tavg, tmax, it = timer.measure(kind, nbytes, iterations=5, warmup=2, max_seconds=0.0)
            assert 0 < tmin <= tavg <= tmax and it == 5
            both = comm.allgather((tmin, tavg, tmax, it))
            assert all(b == both[0] for b in both)           # every rank has the same statistics
            count = nbytes // timer.dtype.itemsize
            if kind == "allreduce":
                assert np.all(timer._recv[:count] == n)     # Σ over ranks of a vector of ones
            elif kind == "allgather" or (kind == "gather" and t.is_root):
                assert np.all(timer._recv[:n * count] == 1) and np.all(timer._counts == nbytes)
        timer.release()
    # benchmark traffic is not algorithm traffic
    np.testing.assert_array_equal(t.ledger, before)
    assert before[LEDGER.index("Gatherv")] == 5 and before[LEDGER.index("Allreduce")] == 0


def test_max_seconds_caps_iterations_alike_on_every_rank():
    t = Transport()
    timer = CollectiveTimer(t)
    timer.allocate("allgather", 1 << 16)
    *_, it = timer.measure("allgather", 1 << 16, iterations=10**6, warmup=3, max_seconds=1e-6, min_iterations=3)
    assert comm.allgather(it) == [3] * comm.size
    timer.release()
