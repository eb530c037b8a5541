"""run.collective under a real mpiexec -n 4: the three exchanges give the same iterates, every rank
holds the same state without a server, and the bit ledger equals the bytes handed to MPI."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.transport import LEDGER
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
BASE = {"run.iterations": 120, "run.eval_every": 20, "problem.l2": 0.1}


def run_one(out: Path, overrides: dict):
    """Run one configuration; returns (results read back, this rank's final iterate, transport)."""
    res, runs, _, t = run_experiment(out, {**BASE, **overrides}, name="coll")
    return res[0], runs[0].x_final.copy(), t


def everywhere_equal(x) -> bool:
    return all(np.array_equal(x, y) for y in comm.allgather(x))


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def test_allreduce_uncompressed_equals_gather_identity(shared_dir):
    """Uncompressed float64 Allreduce = parameter server with identity:fp64, to 1e-12 relative
    (only the summation order differs)."""
    for alg in ("dcgd", "diana"):
        common = {"run.algorithm": alg, "run.compressor": "identity:fp64=true"}
        g, xg, _ = run_one(shared_dir / f"g-{alg}.h5", {**common, "run.collective": "gather"})
        a, xa, _ = run_one(shared_dir / f"a-{alg}.h5", {**common, "run.collective": "allreduce"})
        assert a.attrs["collective"] == "allreduce" and g.attrs["collective"] == "gather"
        assert everywhere_equal(xa)
        assert rel(xa, g.x_final) <= 1e-12
        assert np.allclose(a.series["loss"], g.series["loss"], rtol=1e-12, atol=0)
        # no downlink; each worker hands d float64 per iteration to the Allreduce
        assert a.series["bits_down_wire"][-1] == 0
        assert a.series["bits_up_wire"][-1, 0] == 120 * 64 * a.attrs["d"]
    # the network projection replays it as a ring Allreduce of d float64 per rank, with no downlink
    from hpcgc.analysis import projection as proj
    net = proj.PRESETS["1"]
    up, down = proj.network_time(proj.costs(a), net)
    P, m = comm.size, 8 * a.attrs["d"]
    assert np.all(down == 0)
    assert up[-1] == pytest.approx(120 * (2 * (P - 1) * net.latency + 2 * (P - 1) / P * m / net.bandwidth))


def test_allgather_diana_bit_identical_everywhere_and_equal_to_gather(shared_dir):
    common = {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.seed": 3}
    g, _, _ = run_one(shared_dir / "g.h5", {**common, "run.collective": "gather"})
    a, xa, _ = run_one(shared_dir / "ag.h5", {**common, "run.collective": "allgather"})
    assert everywhere_equal(xa)
    assert np.array_equal(xa, g.x_final)                    # same decode order, same arithmetic
    assert np.array_equal(a.series["loss"], g.series["loss"])
    assert np.array_equal(a.series["bits_up_model"], g.series["bits_up_model"])
    assert a.series["bits_down_wire"][-1] == 0 and g.series["bits_down_wire"][-1] > 0


@pytest.mark.parametrize("fp64,tol", [(True, 1e-12), (False, 1e-5)])
def test_shared_seed_randk_allreduce_equals_gather(shared_dir, fp64, tol):
    """Shared-seed rand-k: the same coordinates on every worker, so the k values add up. Float32
    values are summed in float32 by the Allreduce (rounding ~1e-7 per iteration), hence the looser
    tolerance without fp64."""
    spec = "randk:k=6,shared_seed=true" + (",fp64=true" if fp64 else "")
    common = {"run.algorithm": "diana", "run.compressor": spec, "run.seed": 5}
    g, _, _ = run_one(shared_dir / "g.h5", {**common, "run.collective": "gather"})
    a, xa, _ = run_one(shared_dir / "a.h5", {**common, "run.collective": "allreduce"})
    assert everywhere_equal(xa)
    assert rel(xa, g.x_final) <= tol
    assert np.array_equal(a.series["bits_up_model"], g.series["bits_up_model"])   # k·F per worker
    assert a.attrs["independent_messages"] == 1                 # correlated messages: the step uses n = 1


@pytest.mark.parametrize("collective", ["gather", "allreduce", "allgather"])
def test_wire_bits_equal_the_bytes_handed_to_mpi(shared_dir, collective):
    spec = "randk:k=5,shared_seed=true"
    run, _, t = run_one(shared_dir / f"{collective}.h5", {"run.collective": collective, "run.compressor": spec,
                                                           "run.iterations": 37, "run.eval_every": 5})
    ledger = dict(zip(LEDGER, t.ledger))                  # this rank's own sender-side ledger
    sent = {k: run.mpi_bytes[k][-1, comm.rank] for k in LEDGER}
    assert sent == ledger                                 # the file's per-collective ledger is the transport's
    up = {"gather": ("Gather", "Gatherv"), "allgather": ("Allgather", "Allgatherv"),
          "allreduce": ("Allreduce",)}[collective]
    assert run.series["bits_up_wire"][-1, comm.rank] == 8 * sum(ledger[k] for k in up)
    assert all(ledger[k] == 0 for k in LEDGER if k not in up and k != "Bcast")
    assert run.series["bits_down_wire"][-1] == 8 * comm.bcast(ledger["Bcast"], root=0)
    rows = run.series["iteration"]
    assert run.mpi_bytes[up[-1]].shape == (len(rows), comm.size)
    assert np.all(np.diff(run.mpi_bytes[up[-1]], axis=0) >= 0)          # cumulative per evaluation point
    if collective == "allreduce":                                        # k float32 per iteration, no header
        assert ledger["Allreduce"] == 37 * 5 * 4


def test_local_sgd_allreduce_equals_gather(shared_dir):
    """local SGD with error feedback, uncompressed float64 messages, on a softmax model."""
    common = {"problem.kind": "softmax", "data.dataset": "digits", "run.algorithm": "local-sgd",
              "run.compressor": "identity:fp64=true", "run.error_feedback": True, "run.batch": 16,
              "run.local_steps": 2, "run.iterations": 30, "run.eval_every": 10, "problem.l2": 1e-4}
    g, _, _ = run_one(shared_dir / "g.h5", {**common, "run.collective": "gather"})
    a, xa, _ = run_one(shared_dir / "a.h5", {**common, "run.collective": "allreduce"})
    assert everywhere_equal(xa)
    assert rel(xa, g.x_final) <= 1e-12


def test_diana_plus_allgather_equals_gather(shared_dir):
    common = {"run.algorithm": "diana+", "run.compressor": "quant+:p=inf", "run.iterations": 60}
    g, _, _ = run_one(shared_dir / "g.h5", {**common, "run.collective": "gather"})
    a, xa, _ = run_one(shared_dir / "a.h5", {**common, "run.collective": "allgather"})
    assert everywhere_equal(xa)
    assert np.array_equal(xa, g.x_final)
    assert np.array_equal(a.workers["one_time_bits"], g.workers["one_time_bits"])


def test_powersgd_local_sgd_allreduce_two_rounds(shared_dir):
    """PowerSGD on the MLP's layers (biases uncompressed): two Allreduces per iteration, identical
    state on every rank, exactly r(m + n) floats per weight matrix on the wire, and it learns."""
    common = {"data.dataset": "digits", "problem.kind": "mlp", "problem.hidden": 32, "problem.l2": 1e-4,
              "data.test_fraction": 0.2, "run.algorithm": "local-sgd", "run.error_feedback": True,
              "run.batch": 32, "run.learning_rate": 0.1, "run.iterations": 80, "run.collective": "allreduce"}
    run, x, t = run_one(shared_dir / "p.h5", {**common, "run.compressor": "powersgd:rank=2"})
    assert everywhere_equal(x)
    assert run.attrs["exchange_rounds"] == 2
    floats = 2 * (64 + 32) + 32 + 2 * (32 + 10) + 10            # W1 (64×32), b1, W2 (32×10), b2
    assert run.series["bits_up_model"][-1, comm.rank] == 80 * 32 * floats
    assert run.series["bits_up_wire"][-1, comm.rank] == 8 * t.ledger[LEDGER.index("Allreduce")]
    dense, _, _ = run_one(shared_dir / "d.h5", {**common, "run.compressor": "identity"})
    assert dense.series["bits_up_model"][-1, 0] == 80 * 32 * run.attrs["d"]
    assert run.series["accuracy"][-1] >= 0.8 and dense.series["accuracy"][-1] >= 0.8
