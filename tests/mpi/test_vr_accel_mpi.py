"""VR-DIANA, ADIANA, ADIANA+ and MARINA under a real mpiexec (pytest-mpi):
``mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_vr_accel_mpi.py``. Every rank is a worker."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import compressors
from hpcgc.algorithms.base import shared_coin
from tests.conftest import libsvm_path
from tests.mpi.test_core_mpi import run_cfg, shared_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD

MUSHROOMS = {"data.partition": "label-sorted", "problem.kind": "logreg", "run.per_iteration_times": False,
             "run.checkpoint_every": 0}
SMALL = {"data.dataset": "breast-cancer", "data.partition": "label-sorted", "problem.kind": "logreg",
         "problem.l2": 0.05, "run.per_iteration_times": False, "run.checkpoint_every": 0}


def test_vr_diana_reaches_1e10_where_diana_with_the_same_batches_stalls(shared_dir):  # noqa: F811
    """mushrooms, λ = 0.1, 4 workers of 2031 samples, b = 101 ≈ m/20, ℓ∞ block-16 quantization (ω = 1.5):
    VR-DIANA (γ = 4 × its theory step = 0.075, below DIANA's own theory step 0.113) reaches
    f − f* ≤ 1e-10; DIANA with the same batches stalls at its variance floor (≈ 1e-4)."""
    base = dict(MUSHROOMS, **{"data.dataset": f"libsvm:{libsvm_path('mushrooms')}", "problem.l2": 0.1,
                              "run.compressor": "quant:p=inf,block=16", "run.batch": 101, "run.eval_every": 100})
    vr, _, _ = run_cfg(shared_dir / "vr.h5", dict(base, **{"run.algorithm": "vr-diana", "run.iterations": 1500,
                                                            "run.step_multiplier": 4.0, "run.tolerance": 1e-11}))
    dn, _, _ = run_cfg(shared_dir / "dn.h5", dict(base, **{"run.algorithm": "diana", "run.iterations": 600}))
    vr, dn = vr[0], dn[0]
    final = vr.series["suboptimality"][-1]
    assert vr.status == "completed" and final <= 1e-10, vr.series["suboptimality"][-5:]
    assert vr.attrs["gamma"] < dn.attrs["gamma"]
    assert vr.attrs["probability"] == pytest.approx(101 / vr.workers["samples"].max())
    T, p = int(vr.series["iteration"][-1]), vr.attrs["probability"]
    refreshes = sum(shared_coin(0, k, p) for k in range(T))
    m = vr.workers["samples"]
    assert np.array_equal(vr.workers["grad_evals"], m + 2 * 101 * T + m * refreshes)    # counted evaluations
    assert np.all(np.isnan(dn.workers["grad_evals"]))
    floor = dn.series["suboptimality"][-3:].min()
    assert floor >= 100 * max(final, 1e-10), (floor, final)


def test_marina_dense_rounds_on_the_same_iterations_everywhere_and_in_both_ledgers(shared_dir):  # noqa: F811
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


def test_marina_with_p_one_is_dcgd_identity_exactly(shared_dir):  # noqa: F811
    base = dict(SMALL, **{"run.iterations": 40, "run.eval_every": 10})
    m, _, _ = run_cfg(shared_dir / "m1.h5", dict(base, **{"run.algorithm": "marina", "run.compressor": "randk:k=3",
                                                           "run.probability": 1.0}))
    g, _, _ = run_cfg(shared_dir / "gd.h5", dict(base, **{"run.algorithm": "dcgd", "run.compressor": "identity"}))
    assert np.array_equal(m[0].x_final, g[0].x_final)
    assert np.array_equal(m[0].series["bits_up_model"], g[0].series["bits_up_model"])
    assert np.array_equal(m[0].series["suboptimality"], g[0].series["suboptimality"])


def test_adiana_plus_dense_and_diagonal_reach_1e8(shared_dir):  # noqa: F811
    res, _, _ = run_cfg(shared_dir / "aplus.h5", dict(SMALL, **{
        "run.algorithm": "adiana+", "run.collective": "allgather", "run.iterations": 4000, "run.eval_every": 50,
        "run.tolerance": 1e-8}), sweep={"run.compressor": ["quant+", "quant+:matrix=diag"]})
    for run in res:
        assert run.status == "completed" and run.stop_reason.startswith("tolerance"), run.series["suboptimality"][-3:]
        assert run.attrs["smoothness_matrix"] == ("diagonal" if "diag" in run.attrs["compressor"] else "dense")
        assert run.workers["one_time_bits"].min() > 0


def test_same_seed_same_iterates(shared_dir):  # noqa: F811
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
