"""The ≥ 10⁶-parameter MLP (64-700-700-700-10, 1 033 910 parameters; issue 13) under a real
mpiexec -n 4: the first DCGD step equals x⁰ − γ·(1/n)Σ_i ∇f_i(x⁰) summed independently here, under
gather and under an uncompressed Allreduce; local SGD with the identity over Allreduce keeps every
rank's iterate identical and sends 32·d bits per worker per round; DIANA + QSGD over gather learns."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.models import ClassifierProblem, Model
from tests.mpi.conftest import run_experiment, shared_tmpdir

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
D = 1_033_910
BASE = {"data.dataset": "synthetic:multiclass,n=400,d=64,classes=10,seed=1", "data.partition": "iid",
        "problem.kind": "mlp", "problem.hidden": 700, "problem.depth": 3, "problem.l2": 1e-4,
        "run.learning_rate": 0.05, "run.per_iteration_times": False}


@pytest.fixture(scope="module")
def shared_dir():
    return shared_tmpdir()


def run_one(out: Path, overrides: dict):
    """(results read back, this rank's Run) of one configuration."""
    res, runs, _, _ = run_experiment(out, {**BASE, **overrides}, name="mlp")
    return res[0], runs[0]


def everywhere_equal(x) -> bool:
    return all(np.array_equal(x, y) for y in comm.allgather(x))


def test_first_dcgd_step_is_the_mean_of_the_shard_gradients(shared_dir):
    one = {"run.algorithm": "dcgd", "run.compressor": "identity:fp64=true", "run.batch": 0,
           "run.iterations": 1, "run.eval_every": 1}
    g, run_g = run_one(shared_dir / "dcgd-gather.h5", {**one, "run.collective": "gather"})
    a, run_a = run_one(shared_dir / "dcgd-allreduce.h5", {**one, "run.collective": "allreduce"})
    assert g.attrs["d"] == a.attrs["d"] == D and g.status == a.status == "completed"
    # independently: a fresh model on this rank's shard, the gradients summed with mpi4py
    shard = run_g.s.local
    model = Model("mlp", 64, 10, hidden=700, depth=3)
    x0 = model.init(0)
    assert np.array_equal(x0, run_g.x0)
    mine = ClassifierProblem(model, shard.A, shard.labels, 1e-4).grad(x0)
    total = np.empty_like(mine)
    comm.Allreduce(mine, total, op=MPI.SUM)
    x1 = x0 - 0.05 * total / comm.size
    scale = np.abs(x1 - x0).max()
    assert scale > 0
    assert np.abs(g.x_final - x1).max() <= 1e-12 * scale + 1e-15 * np.abs(x1).max()
    assert everywhere_equal(run_a.x_final)
    assert np.abs(run_a.x_final - x1).max() <= 1e-12 * scale + 1e-15 * np.abs(x1).max()
    assert a.series["bits_up_model"][-1, comm.rank] == 64 * D            # identity:fp64: 64 bits per parameter


def test_local_sgd_identity_allreduce_and_diana_qsgd_gather_learn(shared_dir):
    """Eight rounds each, mini-batches of 32: the training loss goes down."""
    iters = 8
    loc, run = run_one(shared_dir / "local.h5", {"run.algorithm": "local-sgd", "run.compressor": "identity",
                                                  "run.collective": "allreduce", "run.batch": 32,
                                                  "run.learning_rate": 0.1, "run.iterations": iters,
                                                  "run.eval_every": iters})
    assert everywhere_equal(run.x_final)
    assert loc.status == "completed" and loc.attrs["d"] == D
    assert np.all(loc.series["bits_up_model"][-1] == iters * 32 * D)    # float32 on the wire
    loss = loc.series["loss"]
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0], loss
    dia, _ = run_one(shared_dir / "diana.h5", {"run.algorithm": "diana", "run.compressor": "qsgd:s=16",
                                               "run.collective": "gather", "run.batch": 32,
                                               "run.iterations": iters, "run.eval_every": iters})
    assert dia.status == "completed" and dia.attrs["step_rule"] == "learning-rate"
    loss = dia.series["loss"]
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0], loss
    bits = dia.series["bits_up_model"][-1]
    assert np.all((bits > 0) & (bits < iters * 32 * D / 4)), bits          # QSGD s=16: under 8 bits/coordinate
    if comm.rank == 0:
        print(f"\nMLP {D} parameters, 4 ranks, {iters} rounds: local SGD (identity, allreduce) loss "
              f"{loc.series['loss'][0]:.4f} -> {loc.series['loss'][-1]:.4f}; DIANA + QSGD (gather) "
              f"{loss[0]:.4f} -> {loss[-1]:.4f}, {bits.mean() / iters / D:.3f} bits/parameter/round")
