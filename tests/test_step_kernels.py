"""DIANA's server step kernel (hpcgc.algorithms.kernels.shifted_step) gives the bits of the numpy
expressions it replaced, with and without momentum and shifts."""
import numpy as np
import pytest

from hpcgc.algorithms.kernels import shifted_step


def numpy_step(x, h, v, m, gamma, alpha, beta):
    """The step as DIANA (and DIANA+) computed it before the kernel."""
    if beta:
        v *= beta
        v += h
        v += m
    else:
        np.add(h, m, out=v)
    x -= np.multiply(v, gamma)
    if alpha:
        h += np.multiply(m, alpha)


@pytest.mark.parametrize("beta", [0.0, 0.9])
@pytest.mark.parametrize("alpha", [0.0, 0.37])
@pytest.mark.parametrize("d", [1, 7, 1000])
def test_step_kernel_has_the_numpy_bits(d, alpha, beta):
    rng = np.random.default_rng(d)
    want = [rng.standard_normal(d) * 10.0 ** rng.uniform(-5, 5, d) for _ in range(4)]
    got = [a.copy() for a in want]
    for _ in range(3):
        numpy_step(*want, 0.0123, alpha, beta)
        shifted_step(*got, 0.0123, alpha, beta)
    for a, b in zip(want, got):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("beta", [0.0, 0.9])
@pytest.mark.parametrize("alpha", [0.0, 0.37])
def test_step_from_an_allreduce_sum_has_the_bits_of_decode_then_step(dtype, scale, beta, alpha):
    """step_from_sum (the uncompressed Allreduce's fused server step) against what DIANA/DCGD did
    before it: m = 0; m += scale·sum (numpy, in the sum's type); shifted_step — x and h bit for bit
    (signs of zero included), v too when β ≠ 0 (with β = 0 nothing reads v and the kernel leaves
    it). DCGD (α = 0) keeps h = +0.0 and the kernel does not read it."""
    from hpcgc.algorithms.kernels import step_from_sum
    rng = np.random.default_rng(7)
    d = 1001
    total = (rng.standard_normal(d) * 10.0 ** rng.uniform(-5, 5, d)).astype(dtype)
    total[rng.random(d) < 0.1] = -0.0
    x = rng.standard_normal(d)
    x[rng.random(d) < 0.1] = -0.0
    h = rng.standard_normal(d) if alpha else np.zeros(d)
    v = rng.standard_normal(d)
    want = [x.copy(), h.copy(), v.copy()]
    got = [x.copy(), h.copy(), v.copy()]
    for _ in range(3):
        m = np.zeros(d)
        m += scale * total if scale != 1.0 else total
        shifted_step(*want, m, 0.0123, alpha, beta)
        step_from_sum(*got, total, scale, 0.0123, alpha, beta, alpha != 0.0)
    for a, b in zip(want[:2] if not beta else want, got[:2] if not beta else got):
        assert np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))


def _old_ef_step(x, m, payloads, comps, weights):
    """EF's server step before the sparse path: zero m, decode every message into it, x −= m."""
    m[:] = 0.0
    for c, p, w in zip(comps, payloads, weights):
        c.decompress_add(p, x.shape[0], m, w)
    x -= m


@pytest.mark.parametrize("n", [2, 5])
@pytest.mark.parametrize("spec", ["topk:k=5", "topk:k=40", "topk:k=40,fp64=true", "randk:k=9", "threshold:lam=0.5",
                                  "randk:k=9,shared_seed=true", "natural-randk:k=9", "qsgd:s=4"])
def test_ef_server_step_at_the_decoded_entries_has_the_bits_of_the_dense_step(spec, n):
    """hpcgc.algorithms.ef.EF.server_step: the step at the sparse messages' entries only
    (kernels.sparse_step, block by block) gives the dense step's bits, with overlapping indices,
    messages that cancel to ±0, signed zeros in x and three steps in a row; shared-seed rand-k,
    natural-randk and qsgd: the dense path."""
    from hpcgc import algorithms, compressors
    d = 64
    comps = [compressors.make(spec) for _ in range(n)]
    info = {"L_max": 1.0, "L": 1.0, "mu": 1e-3, "kind": "logreg"}
    alg = algorithms.make("ef", comps, d=d, n_workers=n, weights=np.full(n, 1 / n), problem_info=info,
                          options={"collective": "allgather", "step_rule": "learning-rate", "learning_rate": 0.1})
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal(d)
    x0[:6] = [0.0, -0.0, 0.0, -0.0, 1e-300, -1e-300]
    ss = alg.server_init(x0)
    want, m = x0.copy(), np.zeros(d)
    for step in range(3):
        base = rng.standard_normal(d)
        vecs = [base * (-1) ** i if step == 1 else rng.standard_normal(d) for i in range(n)]
        if step == 2:
            vecs[0][:8] = 0.0
            vecs[-1][:8] = -0.0
        vecs = [v * 10.0 ** rng.uniform(-3, 3, d) if step == 0 else v for v in vecs]
        payloads = [c.compress(v, np.random.default_rng(i)) for i, (c, v) in enumerate(zip(comps, vecs))]
        _old_ef_step(want, m, payloads, comps, alg.weights * alg.scales)
        got = alg.server_step(ss, list(enumerate(payloads)))
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
        assert not ss.m.any() and not np.signbit(ss.m).any()     # m back to +0.0 everywhere


@pytest.mark.parametrize("block", [1, 4, 16, 4096])
def test_sparse_step_has_the_bits_of_decode_into_m_then_step(block):
    """kernels.sparse_step over several blocks (d = 203, blocks of 1 to 4096 coordinates): the bits
    of m = 0; m[idx_i] += vals_i message by message; x −= m — entries shared by two or three
    messages, messages cancelling to ±0 and signed zeros in x; the block is +0.0 again after."""
    from hpcgc.algorithms.kernels import sparse_step
    g = np.random.default_rng(block)
    d = 203
    x = g.standard_normal(d)
    x[:4] = [0.0, -0.0, -0.0, 0.0]
    idxs = [np.sort(g.choice(d, size=s, replace=False)).astype(np.int64) for s in (60, 150, 1)]
    idxs[0][:3], idxs[1][:3] = [0, 1, 2], [0, 1, 2]
    vals = [g.standard_normal(i.size) * 10.0 ** g.uniform(-3, 3, i.size) for i in idxs]
    vals[0][:3], vals[1][:3] = [1.5, 0.0, -0.0], [-1.5, -0.0, -0.0]
    m, want = np.zeros(d), x.copy()
    for i, v in zip(idxs, vals):
        m[i] += v
    want -= m
    starts = np.array([0, 60, 210, 211], dtype=np.int64)
    blk = np.zeros(block)
    sparse_step(x, np.concatenate(idxs), np.concatenate(vals), starts, blk)
    assert np.array_equal(x.view(np.uint64), want.view(np.uint64))
    assert not blk.any() and not np.signbit(blk).any()


@pytest.mark.parametrize("spec,d", [("topk:k=40", 300), ("topk:k=1024", 2**16), ("topk:k=700,fp64=true", 2**16)])
def test_own_add_has_the_bits_of_decoding_the_own_payload(spec, d):
    """Prepared.add_own (EF's worker_sent): top-k adds its own payload from the entries its encoder
    kept — the bits of decoding the payload (``add``), for the payload encoded last; an older
    payload of the same codec (reduce-scatter encodes several before adding) is decoded."""
    from hpcgc import compressors
    codec = compressors.make(spec).prepared(d)
    g = np.random.default_rng(d)
    e0 = g.standard_normal(d) * 10.0 ** g.uniform(-3, 3, d)
    p_old = codec.encode(g.standard_normal(d), g)
    p = codec.encode(e0, g)
    for payload in (p, p_old):
        want, got = e0.copy(), e0.copy()
        codec.add(payload, want, -0.75)
        touched = codec.add_own(payload, got, -0.75)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
        assert np.array_equal(touched, codec.entries(payload, 1.0).decode()[0])
    assert codec.own is not None


def test_sparse_step_returns_the_change_of_the_squared_norm():
    """kernels.sparse_step returns Σ (new² − old²) over the entries it changed: ‖x‖² after minus
    before, repeated entries counted once (to rounding)."""
    from hpcgc.algorithms.kernels import sparse_step
    g = np.random.default_rng(3)
    d = 5000
    x = g.standard_normal(d)
    idxs = [np.sort(g.choice(d, size=s, replace=False)).astype(np.int64) for s in (300, 700, 50)]
    vals = [g.standard_normal(i.size) for i in idxs]
    starts = np.array([0, 300, 1000, 1050], dtype=np.int64)
    before = float(np.dot(x, x))
    dsq = sparse_step(x, np.concatenate(idxs), np.concatenate(vals), starts, np.zeros(64))
    assert dsq == pytest.approx(float(np.dot(x, x)) - before, rel=1e-12, abs=1e-9)
    assert sparse_step(x, np.zeros(0, dtype=np.int64), np.zeros(0), np.array([0], dtype=np.int64),
                       np.zeros(64)) == 0.0


def _ef(spec, n=3, d=4096):
    from hpcgc import algorithms, compressors
    comps = [compressors.make(spec) for _ in range(n)]
    info = {"L_max": 1.0, "L": 1.0, "mu": 1e-3, "kind": "logreg"}
    return comps, algorithms.make("ef", comps, d=d, n_workers=n, weights=np.full(n, 1 / n), problem_info=info,
                                  options={"collective": "gather", "step_rule": "learning-rate",
                                           "learning_rate": 0.1})


def test_ef_keeps_the_divergence_tests_squared_norm_across_sparse_steps():
    """EF's sparse server step keeps ‖x‖² for the divergence test (``step_norm_sq``) without a pass
    over x: exact at the first step, after ``restored`` and every EXACT_EVERY steps, the steps'
    changes added in between — within rounding of np.dot(x, x) over 3 × EXACT_EVERY steps; a dense
    step (qsgd) leaves it unknown (None: the exchange computes it); a non-finite entry makes it
    non-finite at once, so ``exploded`` says so without the pass."""
    from hpcgc.algorithms.ef import EXACT_EVERY
    from hpcgc.exchange.base import exploded
    d = 4096
    comps, alg = _ef("topk:k=64,fp64=true", d=d)
    rng = np.random.default_rng(11)
    ss = alg.server_init(rng.standard_normal(d))
    assert alg.step_norm_sq(ss) is None
    for step in range(3 * EXACT_EVERY + 5):
        payloads = [c.compress(rng.standard_normal(d), rng) for c in comps]
        x = alg.server_step(ss, list(enumerate(payloads)))
        assert alg.step_norm_sq(ss) == pytest.approx(float(np.dot(x, x)), rel=1e-12)
        assert ss.since == step % (EXACT_EVERY + 1)
    ss.restored()
    assert alg.step_norm_sq(ss) is None
    bad = rng.standard_normal(d)
    bad[17] = 1e160
    payloads = [c.compress(rng.standard_normal(d), rng) for c in comps]
    x = alg.server_step(ss, list(enumerate(payloads)))                # exact: after a restore
    assert ss.since == 0 and alg.step_norm_sq(ss) == float(np.dot(x, x))
    payloads = [c.compress(bad if i == 1 else rng.standard_normal(d), rng) for i, c in enumerate(comps)]
    x = alg.server_step(ss, list(enumerate(payloads)))                # kept: 1e160² overflows
    with np.errstate(over="ignore"):
        assert ss.since == 1 and exploded(x, alg.step_norm_sq(ss)) and exploded(x)
    dense_comps, dense = _ef("qsgd:s=4", d=d)
    ds = dense.server_init(rng.standard_normal(d))
    dense.server_step(ds, [(i, c.compress(rng.standard_normal(d), rng)) for i, c in enumerate(dense_comps)])
    assert dense.step_norm_sq(ds) is None
