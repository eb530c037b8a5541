"""Objectives against finite differences, and the reference optimum against an independent solver."""
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

from hpcgc.problems import Objective, prox_l1, solve_reference


def _data(kind, m=80, d=12, sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, d))
    A[rng.random((m, d)) < 0.5] = 0.0
    y = np.sign(rng.standard_normal(m)) if kind == "logreg" else rng.standard_normal(m)
    return (sp.csr_matrix(A) if sparse else A), y, rng.random(m) / m


@pytest.mark.parametrize("kind", ["logreg", "ridge"])
@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_and_hessp_match_finite_differences(kind, sparse):
    A, y, w = _data(kind, sparse=sparse)
    obj = Objective(kind, A, y, w, l2=0.1)
    x = np.random.default_rng(1).standard_normal(obj.d)
    assert scipy.optimize.check_grad(obj.loss, obj.grad, x) < 1e-6
    v = np.random.default_rng(2).standard_normal(obj.d)
    fd = (obj.grad(x + 1e-6 * v) - obj.grad(x - 1e-6 * v)) / 2e-6
    assert np.allclose(obj.hessp(x, v), fd, atol=1e-6)


def test_minibatch_gradient_is_unbiased():
    A, y, w = _data("logreg", m=20)
    w = np.full(20, 1 / 20)
    obj = Objective("logreg", A, y, w, l2=0.1)
    x = np.ones(obj.d)
    rows = [np.array([i]) for i in range(20)]
    assert np.allclose(np.mean([obj.grad(x, r) for r in rows], axis=0), obj.grad(x))


@pytest.mark.parametrize("kind", ["logreg", "ridge"])
def test_smoothness_constant_bounds_the_hessian(kind):
    A, y, w = _data(kind)
    obj = Objective(kind, A, y, w, l2=0.01)
    L = obj.smoothness()
    H = np.column_stack([obj.hessp(np.zeros(obj.d), e) for e in np.eye(obj.d)])
    assert np.linalg.eigvalsh(H)[-1] <= L * (1 + 1e-12)
    if kind == "logreg":   # at x = 0 the logistic curvature is exactly 1/4: the bound is attained
        assert np.linalg.eigvalsh(H)[-1] == pytest.approx(L, rel=1e-10)


@pytest.mark.parametrize("kind", ["logreg", "ridge"])
def test_reference_optimum_matches_bfgs(kind):
    A, y, w = _data(kind, sparse=True)
    obj = Objective(kind, A, y, w, l2=1e-2)
    opt = solve_reference(obj)
    ind = scipy.optimize.minimize(obj.loss, np.zeros(obj.d), jac=obj.grad, method="BFGS", options={"gtol": 1e-12})
    assert opt.grad_norm < 1e-12
    assert opt.f <= ind.fun + 1e-14
    assert np.allclose(opt.x, ind.x, atol=1e-6)


def test_reference_optimum_with_l1_satisfies_optimality():
    A, y, w = _data("logreg")
    obj = Objective("logreg", A, y, w, l2=1e-2, l1=0.02)
    opt = solve_reference(obj)
    g = obj.grad(opt.x)
    nz = opt.x != 0
    assert np.any(~nz)                                   # the l1 term produces exact zeros
    assert np.allclose(g[nz] + 0.02 * np.sign(opt.x[nz]), 0, atol=1e-7)
    assert np.all(np.abs(g[~nz]) <= 0.02 + 1e-7)


def test_prox_l1_soft_thresholds():
    x = np.array([-3.0, -0.5, 0.0, 0.2, 2.0])
    assert np.allclose(prox_l1(x, 1.0), [-2.0, 0.0, 0.0, 0.0, 1.0])


def test_lanczos_lambda_max_is_the_same_bits_every_time():
    """Above DENSE_EIG_MAX_DIM the Lanczos estimate starts from a fixed vector: same data ⇒ same
    L_max ⇒ same theory step (ARPACK's own random start moved the 15th digit between runs)."""
    from hpcgc.problems import DENSE_EIG_MAX_DIM, weighted_gram_lambda_max
    m, d = DENSE_EIG_MAX_DIM + 500, DENSE_EIG_MAX_DIM + 1500
    A = sp.random(m, d, density=0.005, random_state=1, format="csr")
    w = np.full(m, 1.0 / m)
    got = {weighted_gram_lambda_max(A, w) for _ in range(3)}
    assert len(got) == 1
    B = A.toarray() * np.sqrt(w)[:, None]
    assert got.pop() == pytest.approx(np.linalg.eigvalsh(B @ B.T)[-1], rel=1e-9)
