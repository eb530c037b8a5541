"""The compressed downlink (``run.downlink``, EF21-P) under a real mpiexec -n 4: a lossless downlink
is the dense run bit for bit, the recorded downlink bits are the broadcast buffers, DIANA + EF21-P
still converges linearly to 1e-8 on real data, and the same seed gives the same iterates."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import compressors
from hpcgc.transport import DOWN_HEADER_BYTES, LEDGER, Transport
from tests.conftest import libsvm_path
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
BASE = {"run.iterations": 80, "run.eval_every": 10, "problem.l2": 0.1, "run.per_iteration_times": False}


def run_one(out: Path, overrides: dict):
    """Run one configuration; returns (results read back, this rank's final iterate, transport)."""
    res, runs, _, t = run_experiment(out, {**BASE, **overrides}, name="down")
    return res[0], runs[0].x_final.copy(), t


@pytest.mark.parametrize("alg,comp", [("diana", "qsgd:s=2"), ("dcgd", "randk:k=6")])
def test_lossless_downlink_equals_dense_bit_for_bit(shared_dir, alg, comp):
    """identity:fp64=true sends x^{k+1} exactly (w = x): every recorded value equals the dense run's."""
    common = {"run.algorithm": alg, "run.compressor": comp, "run.seed": 4}
    a, xa, _ = run_one(shared_dir / "dense.h5", common)
    b, xb, _ = run_one(shared_dir / "identity.h5", {**common, "run.downlink": "identity:fp64=true"})
    assert a.attrs["downlink"] == "dense" and b.attrs["downlink"] == "identity:fp64=true"
    assert np.array_equal(xa, xb)                       # every rank: the workers' model w = the dense iterate
    assert np.array_equal(a.x_final, b.x_final)
    for key in ("loss", "suboptimality", "grad_norm_sq", "bits_up_model", "bits_up_wire", "bits_down_model"):
        assert np.array_equal(a.series[key], b.series[key]), key
    d, k = a.attrs["d"], a.series["iteration"]
    assert np.array_equal(a.series["bits_down_wire"], 8 * k * 8 * (d + 1))          # float64 iterate + control
    assert np.array_equal(b.series["bits_down_wire"], 8 * k * (DOWN_HEADER_BYTES + 8 + 8 * d))   # header + payload
    assert np.array_equal(a.series["bits_down_model"], 64 * d * k)


def test_downlink_bits_are_the_broadcast_buffers_and_seeded(shared_dir):
    """Variable-length downlink payloads (rand-k indices are Elias-coded when shorter): the wire bits
    in the file are 8 × the bytes rank 0 handed to Bcast (its sender-side ledger), the workers' model
    w differs from the server's x, and the same seed twice gives the same iterates and bits."""
    common = {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.downlink": "randk:k=5", "run.seed": 7,
              "run.iterations": 37, "run.eval_every": 5}
    a, xa, t = run_one(shared_dir / "a.h5", common)
    ledger = dict(zip(LEDGER, t.ledger))
    assert {c: a.mpi_bytes[c][-1, comm.rank] for c in LEDGER} == ledger
    bcast = comm.bcast(ledger["Bcast"], root=0)
    assert a.series["bits_down_wire"][-1] == 8 * bcast
    assert np.array_equal(a.series["bits_down_wire"], 8 * a.mpi_bytes["Bcast"][:, 0])
    if comm.rank != 0:
        assert ledger["Bcast"] == 0                      # a broadcast counts at its root only
    d = a.attrs["d"]
    per_iteration = bcast / 37
    assert DOWN_HEADER_BYTES + 8 + 5 * 4 < per_iteration < 8 * (d + 1)   # header, 5 float32 values, indices
    # model bits: k·32 + the index bits of the encoding used, each iteration
    assert 37 * 5 * 32 < a.series["bits_down_model"][-1] <= 37 * 5 * (32 + int(np.ceil(np.log2(d))))
    assert a.attrs["downlink_delta"] == pytest.approx(5 / d)
    # x_final: the server's x on rank 0, the workers' w (identical everywhere) on the others
    finals = comm.allgather(xa)
    assert all(np.array_equal(finals[1], w) for w in finals[2:])
    assert not np.array_equal(finals[0], finals[1])
    b, xb, _ = run_one(shared_dir / "b.h5", common)
    assert np.array_equal(xa, xb)
    for key in ("loss", "bits_up_model", "bits_down_wire", "bits_down_model"):
        assert np.array_equal(a.series[key], b.series[key]), key
    c, _, _ = run_one(shared_dir / "c.h5", {**common, "run.seed": 8})
    assert not np.array_equal(a.series["bits_down_model"], c.series["bits_down_model"])   # other index sets


def test_bcast_header_and_body_every_rank_gets_rank0s_bytes():
    """The transport's two-step downlink broadcast: header (length, control) then the bytes."""
    t = Transport()
    rng = np.random.default_rng(11)
    for n in (0, 1, 70_000, 13):                         # grows the receive buffer past its initial 64 KiB
        payload = rng.integers(0, 256, n, dtype=np.uint8)
        sent, size, control = t.bcast_header(payload if t.is_root else None, 2 if n == 13 else 0)
        assert size == n
        got = t.bcast_body(sent, size)
        assert np.array_equal(got, payload) and control == (2 if n == 13 else 0)
    assert t.ledger[LEDGER.index("Bcast")] == (4 * DOWN_HEADER_BYTES + 70_014 if t.is_root else 0)


def test_diana_ef21p_randk_down_reaches_1e8_on_mushrooms(shared_dir):
    """DIANA (rand-k up, k = d/4) with EF21-P (rand-k down, k = d/4, δ = 1/4) at DIANA's own theory
    step reaches f − f* ≤ 1e-8 on mushrooms (label-sorted, λ = 0.1) in about as many iterations as
    the dense broadcast, with a downlink 6× smaller."""
    path = libsvm_path("mushrooms")
    common = {"data.dataset": f"libsvm:{path}", "run.algorithm": "diana", "run.compressor": "randk:k=28",
              "run.iterations": 2000, "run.tolerance": 1e-8, "run.seed": 1}
    dense, _, _ = run_one(shared_dir / "dense.h5", common)
    down, _, _ = run_one(shared_dir / "down.h5", {**common, "run.downlink": "randk:k=28"})
    for r in (dense, down):
        assert r.status == "completed" and "tolerance" in r.attrs["stop_reason"], r.attrs["stop_reason"]
        assert r.series["suboptimality"][-1] <= 1e-8
    kd, ke = dense.series["iteration"][-1], down.series["iteration"][-1]
    assert ke <= 1.25 * kd
    per_it = down.series["bits_down_wire"][-1] / ke
    assert per_it * 5 < dense.series["bits_down_wire"][-1] / kd == 64 * (down.attrs["d"] + 1)
    if comm.rank == 0:
        up = down.series["bits_up_wire"][-1, 0] / ke
        print(f"\nmushrooms d={down.attrs['d']}: dense {kd} it, EF21-P {ke} it; bits/it per worker up {up:.0f}, "
              f"down dense {64 * (down.attrs['d'] + 1)}, EF21-P {per_it:.0f}")


@pytest.mark.parametrize("alg,comp", [("diana", "qsgd:s=2"), ("ef21", "topk:k=10")])
def test_biased_topk_downlink_converges(shared_dir, alg, comp):
    """A contractive biased downlink (top-k) is taken as it is (scale 1, δ = k/d); EF21 + EF21-P too
    (the bidirectional method of Gruntkowska et al.)."""
    r, _, _ = run_one(shared_dir / f"t-{alg}.h5", {"run.algorithm": alg, "run.compressor": comp,
                                                   "run.downlink": "topk:k=10", "run.iterations": 300,
                                                   "run.step_multiplier": 4.0 if alg == "ef21" else 1.0})
    assert r.attrs["downlink_scale"] == 1.0 and r.attrs["downlink_delta"] == pytest.approx(10 / r.attrs["d"])
    sub = r.series["suboptimality"]
    assert sub[-1] < 1e-3 * sub[0]
    assert compressors.make("topk:k=10").spec == r.attrs["downlink"]
