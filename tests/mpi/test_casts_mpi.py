"""The low-precision casts under a real mpiexec -n 4: identity:fp16 / identity:bf16 / int8 ride
MPI_Allreduce in their wire type; the wire bytes are the buffers' sizes; the iterates equal an
independent numpy computation that casts and sums in rank order (to a stated tolerance); int8's
aggregate is unbiased within its variance bound; an overflow ends a run with status "overflow"
and the experiment goes on."""
from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import compressors
from hpcgc.transport import LEDGER, Transport
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
K = 25
BASE = {"run.iterations": K, "run.eval_every": 5, "problem.l2": 0.1, "run.algorithm": "dcgd",
        "run.collective": "allreduce", "run.seed": 4}
U = {"identity:fp16": 2.0 ** -11, "identity:bf16": 2.0 ** -8}


# -- independent references: the cast, and the sum in the wire type in rank order (numpy) ----------
def fp16(v):
    return np.asarray(v, dtype=np.float64).astype(np.float16)


def bf16(v):
    """Round-to-nearest-even at 8 significant bits (frexp/rint in float64), as float32."""
    m, e = np.frexp(np.asarray(v, dtype=np.float64))
    return np.ldexp(np.rint(m * 256.0) / 256.0, e).astype(np.float32)


def rank_order_sum(vs, spec):
    """Σ_i v_i in the wire type, left to right in rank order (each partial sum rounded)."""
    if spec == "identity:fp16":
        acc = vs[0].copy()
        for v in vs[1:]:
            acc = (acc + v).astype(np.float16)           # numpy: exact in float32, one rounding to float16
        return acc.astype(np.float64)
    acc = vs[0].astype(np.float32)
    for v in vs[1:]:
        acc = bf16(acc + v.astype(np.float32))           # the bfloat16 SUM: float32 add, one rounding
    return acc.astype(np.float64)


def f32_up(v: float) -> float:
    """The smallest float32 ≥ v."""
    f = np.float32(v)
    return float(np.nextafter(f, np.float32(np.inf)) if float(f) < v else f)


@pytest.mark.parametrize("spec", ["identity:fp16", "identity:bf16"])
def test_cast_allreduce_iterates_equal_numpy_rank_order_sum(shared_dir, spec):
    """DCGD (= GD on the casts) under allreduce: x_{k+1} = x_k − γ w Σ_i cast(∇f_i(x_k)).

    Tolerance: MPICH sums in its own order ((v0 + v1) + (v2 + v3) by recursive doubling here), the
    reference in rank order; each of the n − 1 additions of either order rounds by at most u·Σ|v_i|
    per coordinate, so the aggregates differ by ≤ 2(n − 1)·u·Σ_i|v_ij|; a difference in x can also
    flip the cast of a gradient coordinate (≤ 2u|g_ij| per rank). GD with γ ≤ 2/L on a convex f is
    non-expansive, so the iterates differ by at most the sum over iterations of γ·w times these."""
    res, runs, _, t = run_experiment(shared_dir / "c.h5", {**BASE, "run.compressor": spec})
    r, run = res[0], runs[0]
    n, d = comm.size, r.attrs["d"]
    assert r.status == "completed" and r.attrs["compressor"] == spec
    # wire bytes = 2·d per rank per Allreduce, from the transport's ledger (the buffers MPI got)
    assert r.series["bits_up_wire"][-1].tolist() == [16.0 * d * K] * n
    assert r.series["bits_up_model"][-1].tolist() == [16.0 * d * K] * n
    mpi = r.mpi_bytes                                                 # the transport's ledger, per collective
    assert mpi["Allreduce"][-1].tolist() == [2.0 * d * K] * n
    assert sum(float(mpi[c][-1].sum()) for c in LEDGER) == 2.0 * d * K * n
    # the reference, computed independently on every rank from the shards' gradients
    alg, u = run.alg, U[spec]
    w = alg.weights
    equal = bool(np.all(w == w[0]))
    cast = fp16 if spec == "identity:fp16" else bf16
    x = np.array(run.x0, dtype=np.float64)
    tol = np.zeros(d)
    for _ in range(K):
        g = run.s.local.grad(x)
        v = cast(g if equal else w[comm.rank] * g)
        vs = comm.allgather(v)
        total = rank_order_sum(vs, spec)
        scale = w[0] if equal else 1.0
        tol += alg.gamma * scale * u * (2 * (n - 1) + 2) * np.sum([np.abs(vi.astype(np.float64)) for vi in vs], axis=0)
        x = x - alg.gamma * scale * total
    got = run.x_final
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got - x) <= tol + 1e-15), float(np.max(np.abs(got - x) - tol))
    assert all(np.array_equal(got, y) for y in comm.allgather(got))     # every rank the same iterate
    # same seed ⇒ same iterates
    res2, runs2, _, _ = run_experiment(shared_dir / "c2.h5", {**BASE, "run.compressor": spec})
    assert np.array_equal(runs2[0].x_final, got)
    assert np.array_equal(res2[0].series["loss"], r.series["loss"])


@pytest.mark.parametrize("spec", ["identity:fp16", "identity:bf16"])
def test_cast_sum_one_allreduce_against_rank_order(spec):
    """One Allreduce of the cast codec on fixed vectors: the decoded sum equals the numpy rank-order
    sum in the wire type within 2(n − 1)·u·Σ|v_i| per coordinate; 2·d bytes handed to MPI."""
    t = Transport()
    n, d = comm.size, 3000
    g = np.random.default_rng(100 + comm.rank)
    x = g.standard_normal(d) * 10.0 ** g.uniform(-6.0, 3.0, d)          # fp16 subnormals to ~1e4
    c = compressors.make(spec)
    codec = c.sum_codec(d)
    v = codec.begin(x, 1.0, np.random.default_rng(0))
    total = np.empty(d, dtype=np.uint16)
    t.reset_ledger()
    t.allreduce(v, total, *codec.reductions()[0])
    assert t.ledger[LEDGER.index("Allreduce")] == 2 * d
    out = np.zeros(d)
    codec.decode_add(total, out, 1.0)
    vs = comm.allgather((fp16 if spec == "identity:fp16" else bf16)(x))
    ref = rank_order_sum(vs, spec)
    bound = 2 * (n - 1) * U[spec] * np.sum([np.abs(vi.astype(np.float64)) for vi in vs], axis=0)
    assert np.all(np.abs(out - ref) <= bound)
    assert all(np.array_equal(out, y) for y in comm.allgather(out))


def test_int8_allreduce_exact_int_sum_and_unbiased_within_variance():
    """int8 under Allreduce on fixed vectors x_i: the int8 sum equals the sum of the ranks' own
    integers (no wrap: each in [−⌊127/n⌋, ⌊127/n⌋]); bytes = 4 (the scale's MAX) + d (int8); the
    mean of 2000 decoded aggregates is within 4.5 standard errors of Σ_i x_i per coordinate, the
    standard error from the exact stochastic-rounding variance Σ_i (s/q)² p_ij(1 − p_ij) (fixed
    seeds), and the Monte-Carlo E‖Σ C_i − Σ x_i‖² is within its ω bound."""
    t = Transport()
    n, d, reps = comm.size, 200, 2000
    g = np.random.default_rng(7 + comm.rank)
    x = g.standard_t(2.5, size=d) * (1 + comm.rank)
    c = compressors.make("int8").for_run(d=d, n_workers=n)
    q = 127 // n
    assert c.q == q
    codec = c.sum_codec(d)
    rng = np.random.default_rng(1000 + comm.rank)
    xs = comm.allgather(x)
    true = np.sum(xs, axis=0)
    s = max(f32_up(np.max(np.abs(xi))) for xi in xs)            # each rank's ‖x_i‖_∞ rounded up, MAX
    acc, sq = np.zeros(d), 0.0
    for k in range(reps):
        s0 = codec.begin(x, 1.0, rng)
        m = np.empty(1, dtype=np.float32)
        t.reset_ledger()
        t.allreduce(s0, m, *codec.reductions()[0])
        v = codec.advance(1, m)
        total = np.empty(d, dtype=np.int8)
        t.allreduce(v, total, *codec.reductions()[1])
        assert t.ledger[LEDGER.index("Allreduce")] == 4 + d
        if k < 20:
            ints = comm.allgather(v.astype(np.int64))
            assert np.all(np.abs(ints[comm.rank]) <= q)
            assert np.array_equal(total.astype(np.int64), np.sum(ints, axis=0))     # exact in int8
            assert float(m[0]) == pytest.approx(s, rel=2 ** -23)
        out = np.zeros(d)
        codec.decode_add(total, out, 1.0)
        acc += out
        sq += float(np.sum((out - true) ** 2))
    mean = acc / reps
    step = s / q
    y = [xi / step for xi in xs]
    p = [yi - np.floor(yi) for yi in y]
    var = np.sum([step ** 2 * pi * (1 - pi) for pi in p], axis=0)            # exact, per coordinate
    se = np.sqrt(var / reps)
    assert np.all(np.abs(mean - true) <= 4.5 * se + 1e-9)
    ok = se > 0
    assert np.mean(((mean[ok] - true[ok]) / se[ok]) ** 2) < 1.5
    omega = c.omega(d)
    bound = omega * float(np.sum([xi @ xi for xi in xs]))                    # Σ_i E‖C_i − x_i‖² ≤ ω Σ‖x_i‖²
    assert sq / reps <= bound
    assert abs(sq / reps - float(var.sum())) <= 0.1 * float(var.sum())


def test_int8_run_converges_and_same_seed_same_iterates(shared_dir):
    """DCGD + int8 under allreduce: bits = 8·d + 32 per rank per iteration (model and wire), the
    run converges as DCGD with ω = min(nd/(4q²), √(nd)/q), same seed ⇒ identical iterates."""
    over = {**BASE, "run.compressor": "int8", "run.iterations": 200, "run.eval_every": 50}
    res, runs, _, _ = run_experiment(shared_dir / "i.h5", over)
    r = res[0]
    d, n = r.attrs["d"], comm.size
    assert r.status == "completed", r.attrs["stop_reason"]
    assert r.series["bits_up_model"][-1].tolist() == [(8.0 * d + 32) * 200] * n
    assert r.series["bits_up_wire"][-1].tolist() == [(8.0 * d + 32) * 200] * n
    q = 127 // n
    assert r.attrs["omega"] == pytest.approx(min(n * d / (4 * q * q), math.sqrt(n * d) / q))
    assert r.series["suboptimality"][-1] < 1e-2 * r.series["suboptimality"][0]
    res2, runs2, _, _ = run_experiment(shared_dir / "i2.h5", over)
    assert np.array_equal(runs2[0].x_final, runs[0].x_final)


@pytest.mark.parametrize("collective", ["allreduce", "gather", "allgather"])
def test_fp16_overflow_ends_the_run_with_status_overflow_and_the_experiment_goes_on(shared_dir, collective):
    """GD with a learning rate far above 2/L on ridge: the gradient grows geometrically and leaves
    float16's range long before the iterate would count as exploding (1e100). The run ends with
    status "overflow" naming the cast and the iteration (under allreduce: the float16 sum of
    in-range values overflows first, or one value does); the next run of the sweep completes; the
    results file reads back."""
    over = {**BASE, "run.collective": collective, "run.iterations": 200, "problem.kind": "ridge",
            "run.step_rule": "learning-rate", "run.compressor": "identity:fp16"}
    res, _, summaries, _ = run_experiment(shared_dir / f"o-{collective}.h5", over,
                                          sweep={"run.learning_rate": [50.0, 0.01]})
    bad, good = res[0], res[1]
    assert bad.status == "overflow", (bad.status, bad.attrs["stop_reason"])
    why = bad.attrs["stop_reason"]
    assert "identity:fp16" in why and "float16" in why and "iteration" in why
    assert ("exceeds the float16 range" in why) or ("sum overflowed at coordinate" in why)
    if collective != "allreduce":
        assert "exceeds the float16 range" in why
    assert good.status == "completed"
    assert bad.series["iteration"][-1] < 200
    if comm.rank == 0:
        assert [s.status for s in summaries] == ["overflow", "completed"]


@pytest.mark.parametrize("d", [1, 4096, 1 << 18])
def test_16bit_sums_accumulate_in_the_wire_type_in_mpich_order(d):
    """Where the sum accumulates: rank values (2048, 1, 1, 1) in float16 (ulp 2 at 2048) and
    (256, 1, 1, 1) in bfloat16 (ulp 2 at 256). An exact sum would give 2051 / 259, a rank-order
    wire-type sum 2048 / 256; MPICH 5.0.2 gives (v0 + v1) + (v2 + v3) = 2048 + 2 = 2050 / 258 on
    every rank, at every size: recursive doubling, each partial sum rounded in the wire type.
    And 4 × 20000 overflows float16 (Inf), 4 × 16000 does not."""
    t = Transport()
    if comm.size != 4:
        pytest.skip("the expected values are those of 4 ranks")
    half = np.full(d, [2048.0, 1.0, 1.0, 1.0][comm.rank], dtype=np.float16).view(np.uint16)
    out = np.empty(d, dtype=np.uint16)
    t.allreduce(half, out, "sum", "float16")
    assert np.all(out.view(np.float16) == 2050.0)
    b = np.full(d, [256.0, 1.0, 1.0, 1.0][comm.rank], dtype=np.float32)
    b16 = (b.view(np.uint32) >> 16).astype(np.uint16)
    t.allreduce(b16, out, "sum", "bfloat16")
    assert np.all((out.astype(np.uint32) << 16).view(np.float32) == 258.0)
    for each, expect in ((16000.0, 64000.0), (20000.0, np.inf)):
        t.allreduce(np.full(d, each, dtype=np.float16).view(np.uint16), out, "sum", "float16")
        assert np.all(out.view(np.float16).astype(np.float64) == expect)


@pytest.mark.parametrize("spec,sizes", [("identity:fp16", lambda d: [2 * d]), ("int8", lambda d: [4, d])])
def test_floor_issues_the_casts_own_reductions(shared_dir, spec, sizes):
    """``--floor`` times the run's Allreduces with their sizes and their operation / wire type
    (float16 SUM; int8: float32 MAX then int8 SUM), not an integer SUM of the same bytes."""
    res, runs, summaries, _ = run_experiment(shared_dir / "f.h5", {**BASE, "run.compressor": spec,
                                                                   "run.iterations": 5}, floor=0.2)
    d = res[0].attrs["d"]
    ops = runs[0].ex.floor_ops(None, d)                  # the Allreduce exchange plans from its codec
    assert [o[1] for o in ops] == sizes(d)
    assert [o[3:] for o in ops] == ([("sum", "float16")] if spec == "identity:fp16"
                                    else [("max", "float32"), ("sum", "int8")])
    if comm.rank == 0:
        assert summaries[0].floor_collectives == ", ".join(f"allreduce {b} B" for b in sizes(d))
        assert summaries[0].floor_ms > 0
