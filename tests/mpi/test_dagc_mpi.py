"""DAGC under a real mpiexec: the ledger proves the allocation was applied; skew 1 ⇒ dagc = uniform;
local SGD learns. Run by tests/test_cli_mpi.py (``mpiexec -n 4 python -m pytest --with-mpi tests/mpi``)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import allocation
from tests.mpi.test_core_mpi import run_cfg

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD

DIGITS = {"data.dataset": "digits", "data.test_fraction": 0.2, "problem.kind": "softmax", "problem.l2": 1e-4,
          "run.algorithm": "local-sgd", "run.local_steps": 5, "run.batch": 32, "run.learning_rate": 0.2,
          "run.compressor": "topk:k=1", "run.budget": 0.1}


@pytest.mark.parametrize("sparsifier", ["topk", "randk"])
def test_wire_ledger_matches_allocated_k(shared_dir, sparsifier):
    """The bit ledger proves each worker sent its own k_i = max(1, ⌈δ_i·d_t⌉) per tensor.

    Both send k_t float32 values with the indices coded as Elias-omega gaps or fixed ⌈log₂ d_t⌉ bits,
    whichever is smaller, so their bits lie between Σ_t k_t(32 + 1) and Σ_t k_t(32 + ⌈log₂ d_t⌉) —
    intervals that do not overlap for the different k_i of the workers here."""
    res, _, _ = run_cfg(shared_dir / f"alloc-{sparsifier}.h5", dict(DIGITS, **{
        "run.compressor": f"{sparsifier}:k=1", "data.partition": "dirichlet:1+skew:10",
        "run.allocation": "dagc", "run.iterations": 6, "run.eval_every": 1}))
    run = res[0]
    samples = run.workers["samples"]
    delta = allocation.allocate("dagc", samples, 0.1)
    assert np.allclose(run.workers["compression_ratio"], delta)
    assert np.ptp(samples) > 0 and np.ptp(delta) > 0                # really skewed, really different
    sizes = [64 * 10, 10]                                             # softmax on digits: W (64×10), b (10)
    per_round_model = np.diff(run.series["bits_up_model"], axis=0)
    per_round_wire = np.diff(run.series["bits_up_wire"], axis=0)
    for i, dl in enumerate(delta):
        k = [min(dt, max(1, math.ceil(dl * dt - 1e-9))) for dt in sizes]
        upper = sum(kt * (32 + math.ceil(math.log2(dt))) for kt, dt in zip(k, sizes))
        lower = sum(kt * 33 for kt in k)
        assert np.all((per_round_model[:, i] >= lower) & (per_round_model[:, i] <= upper)), (i, k)
        # wire: the model bits plus a bounded framing (4-byte length word, per-tensor header and
        # length, byte padding)
        overhead = per_round_wire[:, i] - per_round_model[:, i]
        assert np.all((overhead >= 0) & (overhead <= 8 * (4 + len(sizes) * (4 + 16 + 1)))), overhead
    order = np.argsort(delta)                                         # more kept, more bytes
    assert np.all(np.diff(per_round_wire.mean(axis=0)[order]) >= 0)


def test_equal_volumes_dagc_equals_uniform(shared_dir):
    over = dict(DIGITS, **{"data.partition": "iid", "data.sizes": [300, 300, 300, 300], "run.iterations": 4,
                           "run.eval_every": 2})
    a, _, _ = run_cfg(shared_dir / "u.h5", dict(over, **{"run.allocation": "uniform"}))
    b, _, _ = run_cfg(shared_dir / "d.h5", dict(over, **{"run.allocation": "dagc"}))
    assert np.array_equal(a[0].workers["compression_ratio"], b[0].workers["compression_ratio"])
    assert np.array_equal(a[0].series["bits_up_wire"], b[0].series["bits_up_wire"])
    assert np.array_equal(a[0].x_final, b[0].x_final)


def test_local_sgd_learns_and_records_workers(shared_dir):
    res, _, _ = run_cfg(shared_dir / "learn.h5", dict(DIGITS, **{
        "data.partition": "dirichlet:1+skew:10", "run.allocation": "dagc", "run.error_feedback": True,
        "run.iterations": 40, "run.eval_every": 10}))
    run = res[0]
    assert run.status == "completed"
    acc = run.series["accuracy"]
    assert acc[0] < 0.3 and acc[-1] > 0.8, acc                      # chance is 0.1
    n = comm.size
    for key in ("samples", "compression_ratio", "label_histogram", "sender_bytes_up"):
        assert run.workers[key].shape[0] == n
    assert run.workers["label_histogram"].shape == (n, 10)
    assert np.all(run.series["bits_up_wire"][-1] > 0)
    assert run.attrs["allocation"] == "dagc" and run.attrs["error_feedback"]
