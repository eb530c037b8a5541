"""VR-DIANA, ADIANA, ADIANA+ and MARINA under a real mpiexec (pytest-mpi):
``mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_vr_accel_mpi.py``. Every rank is a worker.
The long convergence proofs are separate launches with their own timeouts: ``tests/test_vr_accel_runs.py``."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import compressors
from hpcgc.algorithms.base import shared_coin
from tests.mpi.test_core_mpi import run_cfg

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD

SMALL = {"data.dataset": "breast-cancer", "data.partition": "label-sorted", "problem.kind": "logreg",
         "problem.l2": 0.05, "run.per_iteration_times": False, "run.checkpoint_every": 0}


def test_marina_dense_rounds_on_the_same_iterations_everywhere_and_in_both_ledgers(shared_dir):
    d = 30
    res, _, _ = run_cfg(shared_dir / "marina.h5", dict(SMALL, **{
        "run.algorithm": "marina", "run.compressor": "randk:k=3", "run.iterations": 80, "run.eval_every": 1,
        "run.seed": 4}))
    run = res[0]
    p = run.attrs["probability"]
    assert p == pytest.approx(3 / 30)
    model = np.diff(run.series["bits_up_model"], axis=0)          # per iteration, per worker
    wire = np.diff(run.series["bits_up_wire"], axis=0)
    dense_wire = 8 * (4 + compressors.make("identity").compress(np.ones(d), np.random.default_rng(0)).size)
    for k in range(model.shape[0]):
        dense = k == 0 or shared_coin(4, k, p)
        assert np.all(model[k] == 32 * d) == dense and np.all(model[k] < 32 * d) == (not dense), k
        assert np.all(wire[k] == dense_wire) == dense, k
    assert 2 <= sum(shared_coin(4, k, p) for k in range(1, 80)) <= 20
    assert np.array_equal(run.workers["sender_bytes_up"] * 8, run.series["bits_up_wire"][-1])
    m = run.workers["samples"]                          # one full local gradient per worker and iteration
    assert np.array_equal(run.series["grad_evals"], run.series["iteration"] * m.sum())
    assert np.array_equal(run.workers["grad_evals"], 80 * m)


def test_marina_with_p_one_is_dcgd_identity_exactly(shared_dir):
    base = dict(SMALL, **{"run.iterations": 40, "run.eval_every": 10})
    m, _, _ = run_cfg(shared_dir / "m1.h5", dict(base, **{"run.algorithm": "marina", "run.compressor": "randk:k=3",
                                                           "run.probability": 1.0}))
    g, _, _ = run_cfg(shared_dir / "gd.h5", dict(base, **{"run.algorithm": "dcgd", "run.compressor": "identity"}))
    assert np.array_equal(m[0].x_final, g[0].x_final)
    assert np.array_equal(m[0].series["bits_up_model"], g[0].series["bits_up_model"])
    assert np.array_equal(m[0].series["suboptimality"], g[0].series["suboptimality"])
    assert np.all(np.isnan(g[0].series["grad_evals"]))              # dcgd does not count


def test_same_seed_same_iterates(shared_dir):
    cases = [("vr-diana", "gather", {"run.batch": 20}), ("marina", "gather", {}), ("adiana", "allgather", {}),
             ("adiana+", "allgather", {})]
    for name, coll, extra in cases:
        res, _, _ = run_cfg(shared_dir / f"seed-{name}.h5", dict(SMALL, **{
            "run.algorithm": name, "run.collective": coll, "run.compressor": "quant+" if name == "adiana+" else
            "randk:k=3", "run.iterations": 30, "run.eval_every": 10, **extra}), sweep={"run.seed": [7, 7, 8]})
        a, b, c = res
        assert np.array_equal(a.x_final, b.x_final), name
        assert np.array_equal(a.series["bits_up_model"], b.series["bits_up_model"]), name
        assert not np.array_equal(a.x_final, c.x_final), name
