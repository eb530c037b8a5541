"""``run.overlap`` under ``run.collective = "allgather"`` and ``"gather"`` with a real mpiexec -n 4: each
MLP layer is compressed alone (``C.segment(d, d_j)``) and gathered with one ``MPI_Iallgather`` (to
every rank) or ``MPI_Igather`` (to the parameter server, then its Bcast of the iterate) of
fixed-size slots started inside the backward pass. The reference is the same per-bucket method with
blocking ``Allgather`` / ``Gather`` calls after the pass (``run.overlap_blocking = true``): the two results files compared
field by field (hpcgc.results.compare), every difference but the config text a failure — iterates,
bits and ledgers — for DCGD and DIANA with rand-k (random draws per bucket) and EF with top-k; the
bytes handed to MPI are the slots; the per-bucket method differs from the whole-vector one."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.results.compare import compare
from hpcgc.transport import LEDGER, LENGTH_BYTES
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
BASE = {"data.dataset": "digits", "data.partition": "iid", "problem.kind": "mlp", "problem.hidden": 24,
        "problem.depth": 2, "problem.l2": 1e-4, "run.collective": "allgather", "run.learning_rate": 0.05,
        "run.batch": 32, "run.iterations": 12, "run.eval_every": 4, "run.seed": 3, "run.overlap": True}
EXPECTED = {"config", "overlap_window_seconds"}
"""The only attributes that may differ: the run's config text (run.overlap_blocking) and the window H
(0: the blocking exchange hides nothing)."""


@pytest.mark.parametrize("collective", ["allgather", "gather"])
@pytest.mark.parametrize("alg, spec", [("dcgd", "randk:k=200"), ("diana", "randk:k=200"), ("ef", "topk:k=200")])
def test_overlap_equals_the_blocking_per_bucket_exchange(shared_dir, collective, alg, spec):
    over = {**BASE, "run.algorithm": alg, "run.compressor": spec, "run.collective": collective}
    off, _, _, _ = run_experiment(shared_dir / "off.h5", {**over, "run.overlap_blocking": True}, name="overlap")
    on, runs, _, t = run_experiment(shared_dir / "on.h5", over, name="overlap")
    assert off[0].status == on[0].status == "completed"
    assert on[0].attrs["overlap_buckets"] == 3 == off[0].attrs["overlap_buckets"]
    diffs = compare(shared_dir / "off.h5", shared_dir / "on.h5") if comm.rank == 0 else None
    unexpected = [line for line in comm.bcast(diffs) if not any(f"attribute {a}:" in line for a in EXPECTED)]
    assert not unexpected, "\n".join(unexpected)
    # the bytes this rank handed to MPI: one slot per bucket per iteration, 4-byte length + the bound
    ex = runs[0].ex
    assert ex.slot_bytes == [LENGTH_BYTES + c.payload_bound(b - a) for c, (a, b) in zip(ex.comps[0], ex.buckets)]
    slots, payloads = ("Allgather", "Allgatherv") if collective == "allgather" else ("Gather", "Gatherv")
    assert t.ledger[LEDGER.index(slots)] == 12 * sum(ex.slot_bytes)
    assert t.ledger[LEDGER.index(payloads)] == 0
    # k splits over the buckets in proportion to their sizes: k_j = ⌈k·d_j/d⌉
    d = runs[0].s.d
    assert [c.k for c in ex.comps[0]] == [min(b - a, -(-200 * (b - a) // d)) for a, b in ex.buckets]
    hidden = on[0].time["comm_hidden"][-1]
    assert np.all(hidden >= 0) and np.all(off[0].time["comm_hidden"][-1] == 0)
    assert on[0].attrs["overlap_window_seconds"] > 0 and off[0].attrs["overlap_window_seconds"] == 0
    # the per-bucket compressor is not the whole-vector one: the plain allgather run differs
    plain, *_ = run_experiment(shared_dir / "plain.h5", {**over, "run.overlap": False}, name="overlap")
    if comm.rank == 0:
        assert not np.array_equal(plain[0].x_final, on[0].x_final)


def runs_d(run) -> int:
    return int(run.attrs["d"])


def test_gather_with_a_compressed_downlink(shared_dir):
    """The parameter server's EF21-P downlink after the overlapped uplink: the same files as blocking."""
    over = {**BASE, "run.algorithm": "diana", "run.compressor": "randk:k=200", "run.collective": "gather",
            "run.downlink": "randk:k=2000"}
    off, *_ = run_experiment(shared_dir / "doff.h5", {**over, "run.overlap_blocking": True}, name="overlap")
    on, *_ = run_experiment(shared_dir / "don.h5", over, name="overlap")
    assert off[0].status == on[0].status == "completed"
    diffs = compare(shared_dir / "doff.h5", shared_dir / "don.h5") if comm.rank == 0 else None
    unexpected = [line for line in comm.bcast(diffs) if not any(f"attribute {a}:" in line for a in EXPECTED)]
    assert not unexpected, "\n".join(unexpected)
    assert np.asarray(on[0].series["bits_down_wire"])[-1] < 64 * 12 * runs_d(on[0])
