"""PowerSGD (Vogels, Karimireddy, Jaggi 2019): standalone compressor and the two-round Allreduce
codec. No MPI: n workers are simulated in one process by summing their round vectors with numpy
(in the codec's dtype, as MPI_Allreduce does); the shared generator is one Generator state copied
to every worker, as every rank holds the run's shared stream.

Tolerances: exact reconstructions with fp64 are checked to 1e-12 relative (measured ~1e-15; the
error is float64 rounding in M Q, Gram–Schmidt and P̂Q̂ᵀ); with float32 factors on the wire to
1e-5 relative (float32 has ε ≈ 6e-8; the decoded matrix is a product of two rounded factors).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from hpcgc import compressors
from hpcgc.compressors.kernels import wire
from hpcgc.compressors.powersgd import orthonormalize_columns
from hpcgc.errors import ConfigError, PayloadError

from .compressor_checks import fuzz_decoders

EXACT64 = 1e-12
EXACT32 = 1e-5


def rng(seed=0):
    return np.random.default_rng(seed)


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def exchange(codecs, xs, weights, shared, scale=1.0):
    """One PowerSGD exchange over the simulated workers: returns (decoded aggregate of every
    worker, own decoded message C(x_i) of every worker). ``shared`` is the run's shared Generator
    (every worker draws from an identical copy; it is advanced once)."""
    vs = [c.begin(x, w, copy.deepcopy(shared)) for c, x, w in zip(codecs, xs, weights)]
    shared.integers(0, 2**64, dtype=np.uint64)
    total = np.sum(vs, axis=0, dtype=vs[0].dtype)
    vs = [c.advance(1, total.copy()) for c in codecs]
    total = np.sum(vs, axis=0, dtype=vs[0].dtype)
    d = xs[0].shape[0]
    outs, owns = [], []
    for c in codecs:
        out = np.zeros(d)
        c.decode_add(total.copy(), out, scale)
        outs.append(out)
        own = np.zeros(d)
        c.own_add(own, 1.0)
        owns.append(own)
    return outs, owns


def codecs(spec, n_workers, d, shape):
    c = compressors.make(spec)
    return [c.sum_codec(d, shape) for _ in range(n_workers)]


# ------------------------------------------------------------------------------------------------
# (a) exact rank-r reconstruction
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,r", [(30, 40, 3), (40, 30, 2), (17, 17, 1), (8, 50, 8)])
def test_standalone_exact_on_rank_r(m, n, r):
    g = rng(1)
    M = g.standard_normal((m, r)) @ g.standard_normal((n, r)).T
    x = M.ravel()
    for fp64, tol in ((True, EXACT64), (False, EXACT32)):
        c = compressors.make("powersgd", rank=r, rows=m, fp64=fp64)
        assert c.matrix_shape(m * n) == (m, n)
        for seed in range(3):
            y = c.decompress(c.compress(x, rng(seed)), m * n)
            assert rel(y, x) <= tol, (fp64, rel(y, x))


def test_standalone_full_rank_is_identity_and_padding():
    g = rng(2)
    d = 23                                         # 5 × 5 with 2 padded entries
    x = g.standard_normal(d)
    c = compressors.make("powersgd:rank=5,fp64=true")
    assert c.matrix_shape(d) == (5, 5)
    y = c.decompress(c.compress(x, g), d)
    assert rel(y, x) <= EXACT64
    # a lower rank: an orthogonal projection of the (padded) matrix, so ‖y‖ ≤ ‖x‖, ‖y − x‖ ≤ ‖x‖
    c = compressors.make("powersgd:rank=1,fp64=true")
    for _ in range(20):
        x = g.standard_normal(d)
        y = c.decompress(c.compress(x, g), d)
        assert np.linalg.norm(y) <= np.linalg.norm(x) * (1 + EXACT64)
        assert np.linalg.norm(y - x) ** 2 <= (np.linalg.norm(x) ** 2 - np.linalg.norm(y) ** 2) * (1 + 1e-9) + 1e-24


@pytest.mark.parametrize("fp64,tol", [(True, EXACT64), (False, EXACT32)])
def test_codec_exact_when_the_sum_is_rank_r(fp64, tol):
    """3 workers whose matrices are not rank r (a common full-rank N cancels) but sum to A·Bᵀ."""
    g = rng(3)
    m, n, r = 20, 25, 3
    A = g.standard_normal((m, r))
    N = g.standard_normal((m, n))
    Ms = [A @ g.standard_normal((n, r)).T for _ in range(3)]
    Ms[0] += N
    Ms[1] -= N
    xs = [M.ravel() for M in Ms]
    spec = f"powersgd:rank={r}" + (",fp64=true" if fp64 else "")
    # equal weights: the workers send unweighted vectors, the sum is scaled once
    cs = codecs(spec, 3, m * n, (m, n))
    outs, _ = exchange(cs, xs, [1.0] * 3, rng(7), scale=1 / 3)
    want = sum(xs) / 3
    assert rel(outs[0], want) <= (tol if fp64 else 1e-4)        # float32: N cancels in the sum
    # unequal weights, applied by each worker before the sum
    w = [0.5, 0.3, 0.2]
    xs = [(A @ g.standard_normal((n, r)).T).ravel() for _ in range(3)]
    cs = codecs(spec, 3, m * n, (m, n))
    outs, _ = exchange(cs, xs, w, rng(8))
    assert rel(outs[0], sum(wi * xi for wi, xi in zip(w, xs))) <= tol


# ------------------------------------------------------------------------------------------------
# (c) the aggregate is the same on every worker and equals Σ_i w_i P̂P̂ᵀM_i
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fp64", [True, False])
def test_aggregate_identical_and_projection(fp64):
    g = rng(4)
    m, n, r = 16, 24, 2
    w = [0.2, 0.5, 0.3]
    xs = [g.standard_normal(m * n) for _ in range(3)]
    spec = "powersgd:rank=2" + (",fp64=true" if fp64 else "")
    cs = codecs(spec, 3, m * n, (m, n))
    shared = rng(9)
    q0 = rng(9).integers(0, 2**64, dtype=np.uint64)
    Q = np.random.default_rng(int(q0)).standard_normal((n, r))       # the first Q: from the shared seed
    outs, owns = exchange(cs, xs, w, shared)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])                   # bit-identical on every rank
    for c in cs[1:]:
        np.testing.assert_array_equal(c._P, cs[0]._P)
        np.testing.assert_array_equal(c.q, cs[0].q)
    Ms = [x.reshape(m, n) for x in xs]
    P = sum(wi * Mi for wi, Mi in zip(w, Ms)) @ Q
    Ph = np.linalg.qr(P)[0]                                         # the same span as Gram–Schmidt
    want = sum(wi * Ph @ Ph.T @ Mi for wi, Mi in zip(w, Ms)).ravel()
    tol = 1e-11 if fp64 else 1e-5
    assert rel(outs[0], want) <= tol
    for wi, Mi, own in zip(w, Ms, owns):                              # own message: P̂P̂ᵀM_i, unweighted
        assert rel(own, (Ph @ Ph.T @ Mi).ravel()) <= tol
    # the decoded aggregate is Σ_i w_i (own message of i), to the wire's rounding
    assert rel(outs[0], sum(wi * o for wi, o in zip(w, owns))) <= (1e-13 if fp64 else 1e-6)


def test_orthonormalize_columns():
    g = rng(5)
    P = g.standard_normal((50, 4))
    Ph = orthonormalize_columns(P)
    np.testing.assert_allclose(Ph.T @ Ph, np.eye(4), atol=1e-14)
    np.testing.assert_allclose(Ph @ (Ph.T @ P), P, atol=1e-12)        # same span
    # rank-deficient: a zero column, a dependent column and a zero matrix give zero columns, no NaN
    P[:, 1] = 0.0
    P[:, 3] = 2 * P[:, 0] - 3 * P[:, 2]
    Ph = orthonormalize_columns(P)
    assert np.isfinite(Ph).all()
    assert not Ph[:, 1].any() and not Ph[:, 3].any()
    np.testing.assert_allclose(Ph[:, [0, 2]].T @ Ph[:, [0, 2]], np.eye(2), atol=1e-14)
    assert not orthonormalize_columns(np.zeros((7, 3))).any()
    # scale-free: tiny and huge columns are normalized alike
    for s in (1e-300, 1e-150, 1e150):
        Ph = orthonormalize_columns(s * g.standard_normal((9, 2)))
        np.testing.assert_allclose(Ph.T @ Ph, np.eye(2), atol=1e-14)


def test_zero_gradient_no_nan_and_recovers():
    m, n = 10, 12
    cs = codecs("powersgd:rank=2", 2, m * n, (m, n))
    shared = rng(1)
    zero = np.zeros(m * n)
    outs, owns = exchange(cs, [zero, zero], [0.5, 0.5], shared)
    assert not outs[0].any() and not owns[0].any()
    assert not cs[0].q.any()                                         # Q̂ = 0 after a zero message
    # the next nonzero rank-2 matrix is still reconstructed: zero columns of Q are refilled
    g = rng(2)
    x = (g.standard_normal((m, 2)) @ g.standard_normal((n, 2)).T).ravel()
    outs, _ = exchange(cs, [x, x], [0.5, 0.5], shared)
    assert rel(outs[0], x) <= EXACT32


# ------------------------------------------------------------------------------------------------
# (b) error feedback on a fixed gradient
# ------------------------------------------------------------------------------------------------

def run_error_feedback(gs, w, m, n, r, iters=200, fp64=False):
    """e_i += g_i; m = Σ_i w_i C(e_i) through the codec; e_i −= C(e_i) (own message). Returns the
    per-iteration ‖Σ w_i e_i‖, max_i ‖e_i‖ and the sum of the decoded messages."""
    d = m * n
    spec = f"powersgd:rank={r}" + (",fp64=true" if fp64 else "")
    cs = codecs(spec, len(gs), d, (m, n))
    es = [np.zeros(d) for _ in gs]
    shared = rng(11)
    agg, ind, total = [], [], np.zeros(d)
    for _ in range(iters):
        for e, gi in zip(es, gs):
            e += gi
        vs = [c.begin(e, wi, copy.deepcopy(shared)) for c, e, wi in zip(cs, es, w)]
        shared.integers(0, 2**64, dtype=np.uint64)
        s = np.sum(vs, axis=0, dtype=vs[0].dtype)
        vs = [c.advance(1, s) for c in cs]
        s = np.sum(vs, axis=0, dtype=vs[0].dtype)
        for i, c in enumerate(cs):
            out = np.zeros(d)
            c.decode_add(s, out)                 # every rank decodes (and keeps Q̂ for the warm start)
            if i == 0:
                total += out
            c.own_add(es[i], -1.0)
        agg.append(np.linalg.norm(sum(wi * e for wi, e in zip(w, es))))
        ind.append(max(np.linalg.norm(e) for e in es))
    return np.array(agg), np.array(ind), total


@pytest.mark.parametrize("n_workers", [1, 3])
@pytest.mark.parametrize("m,n,r", [(12, 15, 2), (30, 20, 1), (64, 64, 2)])
def test_error_feedback_bounded_on_fixed_gradient(n_workers, m, n, r):
    """The aggregate residual E = Σ_i w_i e_i obeys E ← (I − P̂P̂ᵀ)(E + ḡ), one power step per
    iteration on E + ḡ: it stays below 25‖ḡ‖ (measured ≤ 18‖ḡ‖ for these shapes) and does not grow
    (the last 100 iterations' maximum ≤ 1.1 × the first 100's), and since Σ_k m_k = K ḡ − E_K the
    average decoded message converges to ḡ at rate ‖E_K‖/K. Identical gradients on every worker:
    each e_i = E is bounded too."""
    g = rng(12)
    gbar = g.standard_normal(m * n)
    w = [1.0 / n_workers] * n_workers
    agg, ind, total = run_error_feedback([gbar] * n_workers, w, m, n, r)
    ng = np.linalg.norm(gbar)
    assert agg.max() <= 25 * ng and ind.max() <= 25 * ng
    assert agg[100:].max() <= 1.1 * agg[:100].max()
    K = agg.size
    assert np.linalg.norm(total / K - gbar) <= agg[-1] / K * (1 + 1e-3) + 1e-4 * ng
    assert np.linalg.norm(total / K - gbar) <= 0.1 * ng


def test_error_feedback_heterogeneous_workers():
    """Different fixed gradients g_i: the aggregate residual Σ w_i e_i stays bounded as for one
    worker and the average message converges to Σ w_i g_i. (The individual e_i are NOT bounded in
    general: the parts of g_i − ḡ outside the shared subspace cancel in the sum, are never sent and
    accumulate — see docs/compressors.md.)"""
    g = rng(13)
    m, n, r = 30, 20, 1
    gs = [g.standard_normal(m * n) for _ in range(3)]
    w = [0.5, 0.3, 0.2]
    gbar = sum(wi * gi for wi, gi in zip(w, gs))
    agg, ind, total = run_error_feedback(gs, w, m, n, r, iters=400)
    ng = np.linalg.norm(gbar)
    assert agg.max() <= 25 * ng
    assert agg[200:].max() <= 1.1 * agg[:200].max()
    assert np.linalg.norm(total / agg.size - gbar) <= 0.05 * ng
    assert ind[-1] > 1.5 * ind[199]                  # the documented drift of the individual residuals


# ------------------------------------------------------------------------------------------------
# (d) configuration errors
# ------------------------------------------------------------------------------------------------

def test_config_errors():
    c = compressors.make("powersgd:rank=4")
    with pytest.raises(ConfigError, match=r"powersgd: parameter rank=4 is larger than the 3x100 layer allows; "
                                          r"largest rank: 3"):
        c.sum_codec(300, (3, 100))
    with pytest.raises(ConfigError, match=r"matrices only.*\(300,\)"):
        c.sum_codec(300, (300,))
    with pytest.raises(ConfigError, match="matrices only"):
        c.sum_codec(300, (3, 10, 10))
    with pytest.raises(ConfigError, match="does not hold d=300"):
        c.sum_codec(300, (20, 20))
    with pytest.raises(ConfigError, match=r"rank=4 is larger than the 3x3 matrix of d=9 allows; largest rank: 3"):
        c.validate(9)
    with pytest.raises(ConfigError, match="rank=4"):
        c.compress(np.ones(9), rng())
    with pytest.raises(ConfigError, match="rank=4"):
        c.sum_codec(9)
    with pytest.raises(ConfigError, match="rows=50 is larger than d=30"):
        compressors.make("powersgd:rows=50").validate(30)
    for bad in ({"rank": 0}, {"rank": 1.5}, {"rows": -1}):
        with pytest.raises(ConfigError, match="powersgd: parameter"):
            compressors.make("powersgd", **bad)
    with pytest.raises(ConfigError) as ei:
        c.sum_codec(300, (3, 100))
    assert "\n" not in str(ei.value)                  # one line
    # one worker's P exceeding float32 on the wire: a clear ValueError suggesting fp64
    cod = compressors.make("powersgd:rank=1").sum_codec(100, (10, 10))
    with pytest.raises(ValueError, match="fp64=true"):
        cod.begin(np.full(100, 1e300), 1.0, rng())
    with pytest.raises(ValueError, match="non-finite"):
        cod.begin(np.r_[np.nan, np.ones(99)], 1.0, rng())
    with pytest.raises(ValueError, match="fp64=true"):
        compressors.make("powersgd:rank=1").compress(np.full(100, 1e300), rng())
    y = compressors.make("powersgd:rank=1,fp64=true")
    assert np.isfinite(y.decompress(y.compress(np.full(100, 1e300), rng()), 100)).all()


def test_catalogue_attributes():
    c = compressors.make("powersgd")
    assert c.spec == "powersgd:rank=2" and compressors.make(c.spec) == c
    assert compressors.make("powersgd:rank=1,rows=8").spec == "powersgd:rank=1,rows=8"
    assert not c.unbiased and c.omega(100) is None and c.delta(100) is None
    assert c.collectives == ("allreduce",) and c.shared_randomness and c.matrices_only
    assert compressors.describe("powersgd").startswith("powersgd: ")
    for name in ("identity", "topk"):          # the others are unaffected
        assert not getattr(compressors.make(name, **({"k": 1} if name == "topk" else {})), "matrices_only", False)


# ------------------------------------------------------------------------------------------------
# (e) warm start and determinism
# ------------------------------------------------------------------------------------------------

def test_warm_start_and_determinism():
    g = rng(14)
    m, n = 12, 10
    xs = [g.standard_normal(m * n) for _ in range(2)]
    a = codecs("powersgd:rank=2", 2, m * n, (m, n))
    b = codecs("powersgd:rank=2", 2, m * n, (m, n))
    sa, sb = rng(5), rng(5)
    ra = [exchange(a, xs, [0.5, 0.5], sa) for _ in range(3)]
    rb = [exchange(b, xs, [0.5, 0.5], sb) for _ in range(3)]
    for (oa, wa), (ob, wb) in zip(ra, rb):     # same shared seed ⇒ identical outputs, call by call
        np.testing.assert_array_equal(oa[0], ob[0])
        np.testing.assert_array_equal(wa[1], wb[1])
    # Q persists: the next call starts from the last aggregate Q̂, not from the fresh seed
    q_before = a[0].q.copy()
    x = xs[0]
    v = a[0].begin(x, 0.5, rng(99))
    np.testing.assert_allclose(v, (0.5 * x.reshape(m, n) @ q_before).astype(np.float32).ravel(), rtol=1e-6)
    assert a[0].q is not None and np.array_equal(a[0].q, q_before)
    # the warm start improves the approximation of a fixed matrix: one power step per call
    M = (g.standard_normal((m, 4)) * [10, 5, 1, 0.1]) @ g.standard_normal((n, 4)).T
    c = codecs("powersgd:rank=2,fp64=true", 1, m * n, (m, n))
    s = rng(6)
    errs = [rel(exchange(c, [M.ravel()], [1.0], s)[0][0], M.ravel()) for _ in range(8)]
    best = np.linalg.svd(M, compute_uv=False)
    opt = np.sqrt((best[2:] ** 2).sum()) / np.sqrt((best ** 2).sum())     # Eckart–Young
    assert errs[-1] <= errs[0] + 1e-12 and errs[-1] <= opt * (1 + 1e-6)
    # each begin draws exactly one number from the generator, as compress does
    g1, g2 = rng(3), rng(3)
    cod = compressors.make("powersgd").sum_codec(120, (12, 10))
    cod.begin(np.ones(120), 1.0, g1)
    g2.integers(0, 2**64, dtype=np.uint64)
    assert g1.integers(2**62) == g2.integers(2**62)
    cod.advance(1, cod.begin(np.ones(120), 1.0, g1))
    cod.decode_add(np.zeros(20, np.float32), np.zeros(120))
    # standalone compress: stateless, deterministic, fresh Q per call
    c = compressors.make("powersgd")
    x = g.standard_normal(400)
    assert np.array_equal(c.compress(x, rng(1)), c.compress(x, rng(1)))
    gg = rng(1)
    assert not np.array_equal(c.compress(x, gg), c.compress(x, gg))


def test_standalone_matches_numpy_oracle():
    """compress/decompress = one power step from Q ~ N(0, 1) seeded with the drawn 64-bit seed."""
    g = rng(15)
    d = 1000
    x = g.standard_normal(d)
    c = compressors.make("powersgd:rank=3,fp64=true")
    m, n = c.matrix_shape(d)
    assert (m, n) == (32, 32)
    seed = rng(4).integers(0, 2**64, dtype=np.uint64)
    Q = np.random.default_rng(int(seed)).standard_normal((n, 3))
    M = np.zeros(m * n)
    M[:d] = x
    M = M.reshape(m, n)
    Ph = np.linalg.qr(M @ Q)[0]
    want = (Ph @ Ph.T @ M).ravel()[:d]
    y = c.decompress(c.compress(x, rng(4)), d)
    assert rel(y, want) <= 1e-12


# ------------------------------------------------------------------------------------------------
# (f) payloads, (g) bits
# ------------------------------------------------------------------------------------------------

def test_payload_format_and_bits():
    d = 1000
    x = rng(1).standard_normal(d)
    for spec, F in (("powersgd", 32), ("powersgd:rank=5,fp64=true", 64), ("powersgd:rank=1,rows=10", 32)):
        c = compressors.make(spec)
        m, n = c.matrix_shape(d)
        p = c.compress(x, rng())
        assert c.model_bits(p, d) == c.rank * (m + n) * F
        assert 8 * p.size == 8 * wire.HEADER_BYTES + c.model_bits(p, d)
        assert p[0] == 13 and p[4:8].view("<u4")[0] == d
        # body: P̂ (m×r) then Q' = MᵀP̂ (n×r), row-major
        vals = p[8:].view("<f8" if F == 64 else "<f4").astype(np.float64)
        P, Qp = vals[:m * c.rank].reshape(m, c.rank), vals[m * c.rank:].reshape(n, c.rank)
        np.testing.assert_allclose(P.T @ P, np.eye(c.rank), atol=1e-6)
        np.testing.assert_array_equal(c.decompress(p, d), (P @ Qp.T).ravel()[:d])
    cod = compressors.make("powersgd:rank=3").sum_codec(50 * 40, (50, 40))
    assert cod.rounds == 2 and cod.lengths() == (150, 120)
    assert cod.model_bits() == 3 * 90 * 32 and cod.wire_bytes() == 3 * 90 * 4
    cod = compressors.make("powersgd:rank=3,fp64=true").sum_codec(2000, (50, 40))
    assert cod.model_bits() == 3 * 90 * 64 and cod.wire_bytes() == 3 * 90 * 8 and cod.dtype == np.float64


def test_payload_corruption():
    c = compressors.make("powersgd")
    d = 500
    p = c.compress(rng(1).standard_normal(d), rng())
    out = np.zeros(d)
    q = p.copy()
    q[8:12] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    with pytest.raises(PayloadError, match="non-finite"):
        c.decompress_add(q, d, out, 1.0)
    with pytest.raises(PayloadError, match="truncated"):
        c.decompress(p[:-4], d)
    with pytest.raises(PayloadError, match="different parameters"):
        compressors.make("powersgd:rank=3").decompress(p, d)
    # float64 factors whose product overflows
    c = compressors.make("powersgd:rank=1,fp64=true")
    p = c.compress(np.ones(16), rng())
    p[8:] = np.frombuffer(np.full((p.size - 8) // 8, 1e200).tobytes(), np.uint8)
    with pytest.raises(PayloadError, match="overflows"):
        c.decompress_add(p, 16, out[:16], 1.0)
    assert not out.any()
    accepted, rejected = fuzz_decoders(["powersgd", "powersgd:rank=4,fp64=true", "powersgd:rank=1,rows=7"])
    assert accepted > 0 and rejected > 0


def test_micro_measure_runs():
    """The micro-benchmark's row for powersgd (biased: δ measured, theory NaN)."""
    from types import SimpleNamespace

    from hpcgc import micro
    args = SimpleNamespace(repeat=2, warmup=0, budget=0.01, no_numpy=False, seed=0)
    row = micro.measure(compressors.make("powersgd"), rng(0).standard_normal(4096).astype(np.float32), args,
                        rng(1), draws=3)
    assert row["model_bits"] == 2 * (64 + 64) * 32 and row["wire_bits"] == row["model_bits"] + 64
    assert np.isnan(row["param_theory"]) and 0.0 < row["param_measured"] < 1.0
