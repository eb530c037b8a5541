"""The gradient kernels give the bits of the paths they replaced: ``A.T @ w·ℓ'(A @ x) + l2·x`` with
scipy's sparse products (hpcgc.losses.csr_grad) or BLAS's dense ones (hpcgc.losses.dloss_into,
add_l2) and numpy's elementwise derivative."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit

from hpcgc.problems import Objective


def scipy_gradient(kind, A, y, w, l2, x):
    """The gradient as hpcgc computed it before the kernel (problems.Objective.grad, scipy path)."""
    t = A @ x
    if kind == "logreg":
        v = -w * y * expit(-y * t)
    elif kind == "sigmoid-loss":
        u = y * t
        v = -2.0 * w * y * expit(u) * expit(-u) ** 2
    else:
        v = w * (t - y)
    return np.asarray(A.T @ v, dtype=np.float64).ravel() + l2 * x


@pytest.mark.parametrize("kind", ["logreg", "sigmoid-loss", "ridge"])
@pytest.mark.parametrize("seed", range(4))
def test_sparse_gradient_has_the_scipy_paths_bits(kind, seed):
    rng = np.random.default_rng(seed)
    m, d = int(rng.integers(1, 400)), int(rng.integers(1, 300))
    A = sp.random(m, d, density=float(rng.uniform(0.0, 0.3)), format="csr", random_state=seed,
                  data_rvs=lambda k: rng.standard_normal(k) * 10.0 ** rng.uniform(-3, 3, k))
    y = rng.choice([-1.0, 1.0], m) if kind != "ridge" else rng.standard_normal(m)
    w = rng.uniform(0.1, 2.0, m) / m
    x = rng.standard_normal(d) * 3.0
    obj = Objective(kind, A, y, w, l2=float(rng.uniform(0, 1)))
    assert np.array_equal(obj.grad(x), scipy_gradient(kind, obj.A, obj.y, obj.w, obj.l2, x))
    rows = np.sort(rng.choice(m, size=max(1, m // 3), replace=False))
    want = scipy_gradient(kind, obj.A[rows], obj.y[rows], obj.w[rows] * (m / len(rows)), obj.l2, x)
    assert np.array_equal(obj.grad(x, rows), want)


def test_sparse_gradient_of_a_non_contiguous_iterate_and_empty_rows():
    A = sp.csr_matrix(np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [1.5, 0.0, -3.0]]))
    obj = Objective("logreg", A, np.array([1.0, -1.0, 1.0]), np.full(3, 1 / 3), l2=0.1)
    x = np.arange(6.0)[::2]
    assert np.array_equal(obj.grad(x), scipy_gradient("logreg", obj.A, obj.y, obj.w, 0.1, x))
    assert np.allclose(obj.grad(x), Objective("logreg", A.toarray(), obj.y, obj.w, l2=0.1).grad(x), rtol=1e-14)


@pytest.mark.parametrize("kind", ["logreg", "sigmoid-loss", "ridge"])
@pytest.mark.parametrize("seed", range(4))
def test_dense_gradient_has_the_numpy_paths_bits(kind, seed):
    rng = np.random.default_rng(100 + seed)
    m, d = int(rng.integers(1, 400)), int(rng.integers(1, 120))
    A = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-3, 3, (m, 1))
    y = rng.choice([-1.0, 1.0], m) if kind != "ridge" else rng.standard_normal(m)
    w = rng.uniform(0.1, 2.0, m) / m
    x = rng.standard_normal(d) * 3.0
    obj = Objective(kind, A, y, w, l2=float(rng.uniform(0, 1)))
    assert np.array_equal(obj.grad(x), scipy_gradient(kind, obj.A, obj.y, obj.w, obj.l2, x))
    rows = rng.choice(m, size=max(1, m // 3), replace=False)
    want = scipy_gradient(kind, obj.A[rows], obj.y[rows], obj.w[rows] * (m / len(rows)), obj.l2, x)
    assert np.array_equal(obj.grad(x, rows), want)
    assert np.array_equal(obj.grad(list(x[::-1])[::-1]), obj.grad(x))          # any array-like iterate
    assert np.array_equal(obj.grad(np.repeat(x, 2)[::2]), obj.grad(x))          # a strided one


@pytest.mark.parametrize("kind", ["logreg", "sigmoid-loss", "ridge"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dense", [False, True])
def test_fused_gradient_has_the_bits_of_gradient_then_numpy(kind, seed, dense):
    """Objective.grad_to (one pass over the d-vectors: compact scatter, then g, g − h or e + γg
    written in place) against grad() followed by numpy's expressions: the same bits, including
    columns no row touches (0.0 + l2·x), negative zeros in h and e, and an empty shard."""
    from hpcgc.losses import ACCUMULATE, GRAD, MINUS
    from hpcgc.problems import local_grad
    rng = np.random.default_rng(200 + seed)
    m, d = int(rng.integers(0, 300)), int(rng.integers(1, 400))
    A = sp.random(m, d, density=float(rng.uniform(0.0, 0.2)), format="csr", random_state=seed,
                  data_rvs=lambda k: rng.standard_normal(k) * 10.0 ** rng.uniform(-3, 3, k))
    y = rng.choice([-1.0, 1.0], m) if kind != "ridge" else rng.standard_normal(m)
    w = rng.uniform(0.1, 2.0, m) / max(m, 1)
    x = rng.standard_normal(d) * 3.0
    x[rng.random(d) < 0.1] = -0.0
    obj = Objective(kind, A.toarray() if dense else A, y, w, l2=float(rng.choice([0.0, rng.uniform(0, 1)])))
    h = rng.standard_normal(d)
    h[rng.random(d) < 0.2] = -0.0
    e = rng.standard_normal(d)
    e[rng.random(d) < 0.2] = -0.0
    g = obj.grad(x)
    out = np.full(d, np.nan)
    assert np.array_equal(obj.grad_to(x, out, GRAD), g) and np.array_equal(np.signbit(out), np.signbit(g))
    want = g - h
    got = local_grad(obj, x, None, np.full(d, np.nan), MINUS, h)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
    want = e.copy()
    want += 0.37 * g
    got = local_grad(obj, x, None, e.copy(), ACCUMULATE, gamma=0.37)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("seed", range(3))
def test_fused_gradient_across_blocks(seed):
    """The fused pass works block by block (``losses.OUT_BLOCK`` coordinates): touched columns at
    both edges of blocks, a last partial block, blocks no row touches — the same bits as grad()
    followed by numpy's expressions, in all three modes."""
    from hpcgc.losses import ACCUMULATE, GRAD, MINUS, OUT_BLOCK
    from hpcgc.problems import local_grad
    rng = np.random.default_rng(300 + seed)
    d = 3 * OUT_BLOCK + 17
    m = 60
    edges = [0, OUT_BLOCK - 1, OUT_BLOCK, 2 * OUT_BLOCK - 1, 3 * OUT_BLOCK, d - 1]
    cols = np.concatenate([edges, rng.integers(0, OUT_BLOCK, 300), rng.integers(3 * OUT_BLOCK, d, 5)])
    rows = rng.integers(0, m, cols.size)
    A = sp.csr_matrix((rng.standard_normal(cols.size), (rows, cols)), shape=(m, d))
    y = rng.choice([-1.0, 1.0], m)
    obj = Objective("logreg", A, y, np.full(m, 1.0 / m), l2=0.3)
    x = rng.standard_normal(d)
    x[rng.random(d) < 0.1] = -0.0
    h = rng.standard_normal(d)
    e = rng.standard_normal(d)
    e[rng.random(d) < 0.2] = -0.0
    g = obj.grad(x)
    out = np.full(d, np.nan)
    assert np.array_equal(obj.grad_to(x, out, GRAD), g) and np.array_equal(np.signbit(out), np.signbit(g))
    got = local_grad(obj, x, None, np.full(d, np.nan), MINUS, h)
    assert np.array_equal(got, g - h) and np.array_equal(np.signbit(got), np.signbit(g - h))
    want = e.copy()
    want += 0.37 * g
    got = local_grad(obj, x, None, e.copy(), ACCUMULATE, gamma=0.37)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
