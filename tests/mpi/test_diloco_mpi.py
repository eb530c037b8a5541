"""DiLoCo under a real mpiexec -n 4 (pytest-mpi): it learns the digits MLP to a stated target with
an int8 pseudo-gradient and the paper's outer Nesterov step, ahead of local SGD with the same
messages; H = 1, outer momentum 0, outer rate 1 is DCGD bit for bit under every collective it
rides (η_in = 0.5, a power of two); the wire bytes of an int8 Allreduce are the buffers'."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.transport import LEDGER
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD

MLP = {"data.dataset": "digits", "data.partition": "label-sorted", "data.test_fraction": 0.2,
       "problem.kind": "mlp", "problem.hidden": 32, "problem.l2": 1e-4, "run.batch": 32,
       "run.learning_rate": 0.05, "run.local_steps": 8, "run.iterations": 60, "run.eval_every": 10,
       "run.checkpoint_every": 0, "run.compressor": "int8"}


def run_cfg(out: Path, overrides: dict, sweep: dict | None = None):
    res, runs, _, t = run_experiment(out, overrides, name="diloco", sweep=sweep)
    return res, runs, t


def test_diloco_int8_learns_the_mlp_ahead_of_local_sgd(shared_dir):
    """Digits, 4 label-sorted workers, MLP 64-32-10, H = 8 inner SGD steps (batch 32, η_in = 0.05),
    int8 pseudo-gradient, outer Nesterov η = 0.7, μ = 0.9 (the paper's): after 60 rounds the
    training loss is ≤ 0.1 and the test accuracy ≥ 0.93; local SGD (outer SGD, rate 1) with the
    same inner steps and int8 messages ends with a higher loss at the same bits."""
    res, _, _ = run_cfg(shared_dir / "mlp.h5", MLP, sweep={"run.algorithm": ["diloco", "local-sgd"]})
    dl, ls = res
    assert dl.attrs["algorithm"] == "diloco" and dl.attrs["outer_momentum"] == 0.9
    assert dl.attrs["outer_learning_rate"] == 0.7 and dl.attrs["local_steps"] == 8
    assert dl.status == "completed" and ls.status == "completed"
    assert dl.series["loss"][-1] <= 0.1, dl.series["loss"]
    assert dl.series["accuracy"][-1] >= 0.93, dl.series["accuracy"]
    assert ls.series["loss"][-1] > dl.series["loss"][-1], (ls.series["loss"], dl.series["loss"])
    assert np.array_equal(dl.series["bits_up_model"], ls.series["bits_up_model"])   # 8 bits/entry + scales
    assert np.all(dl.series["bits_up_model"][-1] == 60 * (8 * dl.attrs["d"] + 32 * 4))   # 4 tensors, 1 scale each
    if comm.rank == 0:
        print(f"\nDiLoCo int8 H=8 digits MLP: loss {dl.series['loss'][-1]:.4f}, accuracy "
              f"{dl.series['accuracy'][-1]:.3f}; local SGD: loss {ls.series['loss'][-1]:.4f}, accuracy "
              f"{ls.series['accuracy'][-1]:.3f}; model bits per worker {dl.series['bits_up_model'][-1].mean():.0f}")


A9A_LIKE = {"problem.kind": "logreg", "problem.l2": 0.1, "run.iterations": 40, "run.eval_every": 5,
            "run.checkpoint_every": 0, "run.batch": 20, "run.learning_rate": 0.5}


@pytest.mark.parametrize("collective,spec", [("gather", "qsgd:s=4"), ("allgather", "randk:k=6"),
                                             ("allreduce", "int8"), ("reduce-scatter", "qsgd:s=4")])
def test_one_step_plain_outer_sgd_is_dcgd_bit_for_bit(shared_dir, collective, spec):
    """H = 1, run.outer_momentum = 0, run.outer_learning_rate = 1, η_in = 0.5 against DCGD with
    γ = run.learning_rate = 0.5 on mini-batches of 20 and the same compressor and seed: the same
    iterates on every rank, loss series and model bits bit for bit. (η_in a power of two: C(η_in·g)
    = η_in·C(g) exactly. The wire bytes differ under gather/allgather by local SGD's 4-byte frame
    per tensor; under the Allreduces they are equal.)"""
    common = {**A9A_LIKE, "run.compressor": spec, "run.collective": collective}
    dc, rd, _ = run_cfg(shared_dir / "dcgd.h5", {**common, "run.algorithm": "dcgd", "run.step_rule": "learning-rate"})
    dl, rl, _ = run_cfg(shared_dir / "diloco.h5", {**common, "run.algorithm": "diloco", "run.local_steps": 1,
                                                    "run.outer_momentum": 0.0, "run.outer_learning_rate": 1.0})
    a, b = dc[0], dl[0]
    assert a.attrs["gamma"] == 0.5 and b.attrs["outer_momentum"] == 0.0
    assert np.array_equal(rd[0].x_final, rl[0].x_final)                 # this rank's iterate
    assert all(np.array_equal(rl[0].x_final, y) for y in comm.allgather(rl[0].x_final))
    assert np.array_equal(a.x_final, b.x_final)
    assert np.array_equal(a.series["loss"], b.series["loss"])
    assert np.array_equal(a.series["bits_up_model"], b.series["bits_up_model"])
    assert not np.array_equal(a.x_final, np.zeros_like(a.x_final))
    wire_a, wire_b = a.series["bits_up_wire"][-1], b.series["bits_up_wire"][-1]
    if collective in ("allreduce", "reduce-scatter"):
        assert np.array_equal(wire_a, wire_b)
    else:                                                                  # one tensor: one 4-byte frame
        assert np.all(wire_b - wire_a == 8 * 4 * 40)


def test_int8_allreduce_wire_bytes_are_the_buffers(shared_dir):
    """Under Allreduce every rank's wire bits are 8 × the bytes its Allreduce calls moved (the transport's
    ledger), and the int8 message is d bytes plus a 4-byte scale per tensor (of the model) per round."""
    res, runs, t = run_cfg(shared_dir / "ar.h5", {**MLP, "run.algorithm": "diloco", "run.collective": "allreduce",
                                                  "run.iterations": 10, "run.eval_every": 5})
    run = res[0]
    ledger = dict(zip(LEDGER, t.ledger))
    assert run.series["bits_up_wire"][-1, comm.rank] == 8 * ledger["Allreduce"]
    assert ledger["Allreduce"] >= 10 * run.attrs["d"]
    assert all(np.array_equal(runs[0].x_final, y) for y in comm.allgather(runs[0].x_final))
