"""Objectives, gradients, smoothness constants and the reference optimum.

The distributed problem is the one of the DIANA paper (Mishchenko et al., 2019, arXiv 1901.09269)
and the smoothness-aware papers (Safaryan, Hanzely, Richtárik 2021; Wang, Safaryan, Richtárik 2022):

    min_x  F(x) = f(x) + l1·‖x‖₁,     f(x) = (1/n) Σ_i f_i(x),
    f_i(x) = (1/m_i) Σ_{j ∈ shard i} ℓ(a_jᵀx, y_j) + (l2/2)·‖x‖²,

with ℓ the logistic loss log(1 + exp(−y·t)) (labels ±1), the squared loss ½(t − y)², or the
nonconvex sigmoid loss φ(y·t) = (1 − σ(y·t))² (labels ±1; the Richtárik group's nonconvex linear
benchmark, `spec/diana.md` "Group's neural-net and nonconvex runs", code burlachenkok/marina
`linear_model_with_non_convex_loss`).
Every objective, local or global, is a weighted sum over rows: the local f_i weighs its rows by
1/m_i, the global f by 1/(n·m_i), so one class serves both and f* is the optimum of exactly the
function the workers minimise (also when shards have different sizes).

Smoothness (λ/2 convention, `spec/smoothness.md` §2.3): logistic L_i = λ_max(A_iᵀA_i)/(4m_i) + l2,
ridge L_i = λ_max(A_iᵀA_i)/m_i + l2; strong convexity μ = l2. sigmoid-loss L_i =
sup|φ''|·λ_max(A_iᵀA_i)/m_i + l2, sup|φ''| ≈ 0.154059 (:func:`sigmoid_curvature`); it is nonconvex: no μ, no f*.

The ℓ1 term is never differentiated: algorithms apply it through its prox (soft-thresholding) and
the reference optimum treats it by the standard split x = u − v, u, v ≥ 0 (L-BFGS-B), which is
independent of the algorithms' prox code.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import config as numba_config
from numba import njit

from .errors import ConfigError
from .losses import (
    ACCUMULATE,
    CODES,
    GRAD,
    MINUS,
    add_l2,
    compact_columns,
    csr_grad,
    csr_grad_compact,
    dloss_into,
    unsigned,
)
from .losses import warm as warm_losses
from .losses import warm_dense as warm_dense_losses
from .matrix import issparse

CONVEX_KINDS = ("logreg", "ridge")
"""Strongly convex for l2 > 0 (μ = l2): a reference optimum x*, f* is solved for them."""
NONCONVEX_KINDS = ("sigmoid-loss",)
"""Smooth (L known) but nonconvex: no μ, no f*; runs are measured by ‖∇f(x)‖²."""
KINDS = CONVEX_KINDS + NONCONVEX_KINDS
BINARY_KINDS = ("logreg", "sigmoid-loss")
"""Kinds whose labels are mapped to ±1 (and whose accuracy is that of sign(aᵀx))."""
DENSE_EIG_MAX_DIM = 2000


def sigmoid_curvature() -> float:
    """sup_t |φ''(t)| for φ(t) = (1 − σ(t))², σ the logistic function: the curvature bound of the
    sigmoid loss, so that L = sup|φ''|·λ_max(Aᵀ W A) + l2 (W = diag(w), w = 1/m for a shard).

    With s = σ(t), σ' = s(1 − s):  φ'(t) = −2 s (1 − s)²  and  φ''(t) = 2 s (1 − s)² (3s − 1),
    whose derivative in s is 2 (1 − s)(−12 s² + 9 s − 1). On (0, 1) the extremes are at
    s± = (9 ± √33)/24: φ'' = +0.154059 at s₊ = 0.61436 (t = 0.46566) and −0.120204 at s₋, so
    sup|φ''| = 2 s₊ (1 − s₊)² (3 s₊ − 1) ≈ 0.154059 (< 0.16; the logistic loss has 1/4). The Hessian
    of Σ_j w_j φ(y_j a_jᵀx) + (l2/2)‖x‖² is Aᵀ diag(w_j φ''(y_j a_jᵀx)) A + l2·I (y_j² = 1), whose
    spectral norm is at most sup|φ''|·λ_max(AᵀWA) + l2 — a valid L; the Hessian is indefinite in
    general, so the problem is nonconvex."""
    s = (9.0 + np.sqrt(33.0)) / 24.0
    return float(2.0 * s * (1.0 - s) ** 2 * (3.0 * s - 1.0))


def _as_matrix(A):
    return A.tocsr() if issparse(A) else np.ascontiguousarray(A, dtype=np.float64)


@njit(cache=True)
def _expit_into(t, out):
    for i in range(t.size):
        out[i] = 1.0 / (1.0 + math.exp(-t[i]))


def expit(t) -> np.ndarray:
    """The logistic function σ(t) = 1/(1 + e^(−t)), elementwise on a float64 array: bit for bit
    ``scipy.special.expit``, without importing scipy (a worker of a dense data set never does:
    ``docs/performance.md``, start-up).

    scipy computes ``1 / (1 + std::exp(-x))`` (``scipy/special/xsf/log_exp.h``, ``expit``); the
    loop does the same operations in the same order with the same C library ``exp`` (numba lowers
    ``math.exp`` to a call of it), hence the same bits (``tests/test_startup.py`` compares them over
    the float range). With Intel SVML numba may vectorise the loop with SVML's own exp: then
    scipy's function is used.
    """
    if numba_config.USING_SVML:
        from scipy.special import expit as scipy_expit
        return scipy_expit(t)
    if type(t) is np.ndarray and t.dtype.char == "d" and t.ndim == 1 and t.flags.c_contiguous:
        out = np.empty(t.shape[0])                  # the gradient's case: no conversions, no reshapes
        _expit_into(t, out)
        return out
    t = np.ascontiguousarray(t, dtype=np.float64)
    out = np.empty_like(t)
    _expit_into(t.reshape(-1), out.reshape(-1))
    return out


class Objective:
    """Σ_j w_j ℓ(a_jᵀx, y_j) + (l2/2)‖x‖²  (the smooth part; l1 is kept for prox and reporting)."""

    def __init__(self, kind: str, A, y, weights, l2: float, l1: float = 0.0):
        if kind not in KINDS:
            raise ConfigError(f"unknown problem kind {kind!r}; available: {', '.join(KINDS)}")
        if not (l2 >= 0.0 and np.isfinite(l2)):
            raise ConfigError(f"problem.l2 must be a finite number >= 0, got {l2!r}")
        if not (l1 >= 0.0 and np.isfinite(l1)):
            raise ConfigError(f"problem.l1 must be a finite number >= 0, got {l1!r}")
        self.kind = kind
        self.A = _as_matrix(A)
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        self.w = np.ascontiguousarray(weights, dtype=np.float64)
        self.l2 = float(l2)
        self.l1 = float(l1)
        self.d = self.A.shape[1]
        self._sparse = issparse(self.A)
        self._code = CODES[kind]                 # the loss's kernel code
        self._AT = None if self._sparse else self.A.T     # the transposed view, made once
        self._compact = None                     # a CSR shard's (cols, cidx), made on first use (grad_to)

    @property
    def kernels(self) -> tuple:
        """Warm-up functions of the numba kernels :meth:`grad` calls (``warm_jit``): the sparse
        gradient's for a CSR shard, the derivative's and the l2 term's for a dense one."""
        if self._sparse:
            return (warm_losses,)
        return () if numba_config.USING_SVML else (warm_dense_losses,)

    # -- values and derivatives --------------------------------------------------------------
    def loss(self, x) -> float:
        """Smooth part f(x) (data term + l2 term)."""
        t = self.A @ x
        if self.kind == "logreg":
            data = np.dot(self.w, np.logaddexp(0.0, -self.y * t))
        elif self.kind == "sigmoid-loss":
            data = np.dot(self.w, expit(-self.y * t) ** 2)          # (1 − σ(u))² = σ(−u)²
        else:
            r = t - self.y
            data = 0.5 * np.dot(self.w, r * r)
        return float(data + 0.5 * self.l2 * np.dot(x, x))

    def full_loss(self, x) -> float:
        """F(x) = f(x) + l1‖x‖₁, the objective whose optimum is f*."""
        return self.loss(x) + self.l1 * float(np.abs(x).sum())

    def _dloss(self, t, y, w):
        if self.kind == "logreg":
            return -w * y * expit(-y * t)
        if self.kind == "sigmoid-loss":
            u = y * t                                 # d/dt (1 − σ(u))² = −2 y σ(u) (1 − σ(u))²
            return -2.0 * w * y * expit(u) * expit(-u) ** 2
        return w * (t - y)

    def grad(self, x, rows=None):
        """∇f(x); with `rows`, the unbiased mini-batch estimate using those rows only. A sparse
        shard's gradient is one kernel (:func:`hpcgc.losses.csr_grad`, the same bits as the scipy
        products); a dense shard's uses BLAS for the two products and two kernels for the rest
        (:func:`hpcgc.losses.dloss_into`, :func:`hpcgc.losses.add_l2`: numpy's bits)."""
        A, y, w, AT = self.A, self.y, self.w, self._AT
        if rows is not None:
            A, y = A[rows], y[rows]
            AT = None if self._sparse else A.T
            w = w[rows] * (w.shape[0] / len(rows))    # so that E[grad over a uniform batch] = full gradient
        if self._sparse:
            out = np.empty(self.d)
            csr_grad(self._code, unsigned(A.indptr), unsigned(A.indices), A.data,
                     np.ascontiguousarray(x, dtype=np.float64), y, w, self.l2, out)
            return out
        if numba_config.USING_SVML:            # numba might vectorise exp with SVML's: numpy's bits instead
            g = AT @ self._dloss(A @ x, y, w)
            return np.asarray(g, dtype=np.float64).ravel() + self.l2 * x
        if type(x) is not np.ndarray or x.dtype.char != "d":
            x = np.asarray(x, dtype=np.float64)
        t = A @ x
        dloss_into(self._code, t, y, w)                # t ← w·ℓ'(t, y), numpy's operations in order
        g = AT @ t
        add_l2(g, x, self.l2)
        return g

    def grad_to(self, x, out, mode: int = GRAD, h=None, gamma: float = 1.0):
        """The full gradient g = ∇f(x) written where it is used, in one pass over the d-vectors for a
        sparse shard (:func:`hpcgc.losses.csr_grad_compact`): ``out = g`` (``GRAD``), ``out = g − h``
        (``MINUS``: DIANA's Δ) or ``out += γ·g`` (``ACCUMULATE``: error feedback's memory). The same
        bits as :meth:`grad` followed by numpy's ``g − h`` / ``out + γ·g``; a dense shard takes that path."""
        if not self._sparse:
            return _combine(self.grad(x), out, mode, h, gamma)
        A = self.A
        if self._compact is None:
            self._compact = compact_columns(A.indices, int(A.indptr[-1]))
        cols, cidx = self._compact
        csr_grad_compact(self._code, unsigned(A.indptr), unsigned(A.indices), A.data, cols, cidx,
                         np.ascontiguousarray(x, dtype=np.float64), self.y, self.w, self.l2, mode,
                         out if h is None else h, float(gamma), out)
        return out

    def hessp(self, x, v):
        t = self.A @ x
        if self.kind == "logreg":
            s = expit(t)
            c = self.w * s * (1.0 - s)
        elif self.kind == "sigmoid-loss":
            s = expit(self.y * t)
            c = self.w * 2.0 * s * (1.0 - s) ** 2 * (3.0 * s - 1.0)   # φ''(y t), indefinite
        else:
            c = self.w
        return np.asarray(self.A.T @ (c * (self.A @ v))).ravel() + self.l2 * v

    # -- constants ----------------------------------------------------------------------------
    def smoothness(self) -> float:
        """Scalar smoothness constant L = λ_max(Aᵀ W A)·c + l2 (c = 1/4 logistic, 1 ridge,
        sup|φ''| ≈ 0.154059 sigmoid-loss: :func:`sigmoid_curvature`)."""
        return self._curvature() * weighted_gram_lambda_max(self.A, self.w) + self.l2

    def row_smoothness(self) -> float:
        """max_j L_j of the single-row functions ℓ(a_jᵀx, y_j) + (l2/2)‖x‖²: c·max_j ‖a_j‖² + l2
        (the 'L_max per worker' of mini-batch step rules; c as in :meth:`smoothness`)."""
        A = self.A
        sq = np.asarray(A.multiply(A).sum(axis=1)).ravel() if issparse(A) else np.einsum("ij,ij->i", A, A)
        return self._curvature() * float(sq.max(initial=0.0)) + self.l2

    def _curvature(self) -> float:
        """sup_t |∂²ℓ/∂t²|: 1/4 logistic, 1 ridge, ≈ 0.154059 sigmoid-loss (:func:`sigmoid_curvature`)."""
        return {"logreg": 0.25, "sigmoid-loss": sigmoid_curvature()}.get(self.kind, 1.0)

    @property
    def convex(self) -> bool:
        return self.kind in CONVEX_KINDS

    @property
    def mu(self) -> float:
        """Strong convexity l2 for the convex kinds; None for the nonconvex sigmoid loss."""
        return self.l2 if self.convex else None


def local_grad(problem, x, rows, out, mode: int = GRAD, h=None, gamma: float = 1.0):
    """A worker's gradient written where its algorithm uses it: ``out = g`` (``GRAD``), ``out = g − h``
    (``MINUS``), ``out += γ·g`` (``ACCUMULATE``), g = ∇f_i(x) or its mini-batch estimate on ``rows``.
    A full gradient of an :class:`Objective` is one fused pass (:meth:`Objective.grad_to`); anything
    else (mini-batches, models) computes g and combines it with numpy — the same bits either way."""
    if rows is None and isinstance(problem, Objective):
        return problem.grad_to(x, out, mode, h, gamma)
    return _combine(problem.grad(x, rows), out, mode, h, gamma)


def _combine(g, out, mode, h, gamma):
    """``out`` = g (``GRAD``), g − h (``MINUS``) or out + γ·g (``ACCUMULATE``), with numpy's arithmetic."""
    if mode == MINUS:
        return np.subtract(g, h, out=out)
    if mode == ACCUMULATE:
        out += gamma * g
        return out
    out[:] = g
    return out


def weighted_gram_lambda_max(A, w) -> float:
    """λ_max(Aᵀ diag(w) A) for w ≥ 0 from the smaller of the Gram matrices BᵀB (d × d) and BBᵀ
    (m × m), B = diag(√w) A (same nonzero spectrum): dense eigvalsh when that side is small,
    Lanczos otherwise. A shard of m ≪ d rows thus never needs d × d memory or d-sized Lanczos bases."""
    sw = np.sqrt(w)
    if issparse(A):
        import scipy.sparse as sp
        B = sp.diags(sw) @ A
    else:
        B = A * sw[:, None]
    m, d = A.shape
    small = min(m, d)
    if small <= DENSE_EIG_MAX_DIM:
        G = (B @ B.T) if m < d else (B.T @ B)
        G = G.toarray() if issparse(G) else G
        return float(np.linalg.eigvalsh(G)[-1]) if small else 0.0
    import scipy.sparse.linalg  # large d only: most worker ranks never need it
    if m < d:
        op = scipy.sparse.linalg.LinearOperator((m, m), matvec=lambda v: B @ (B.T @ v), dtype=np.float64)
    else:
        op = scipy.sparse.linalg.LinearOperator((d, d), matvec=lambda v: B.T @ (B @ v), dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(op.shape[0])   # fixed start: same data ⇒ same bits
    return float(scipy.sparse.linalg.eigsh(op, k=1, which="LA", return_eigenvectors=False, tol=1e-10,
                                           v0=v0)[0])


@dataclass
class Optimum:
    x: np.ndarray
    f: float
    grad_norm: float
    method: str


def solve_reference(obj: Objective, tol: float = 1e-13) -> Optimum:
    """x*, f* = argmin F computed with scipy, independently of hpcgc's algorithms.

    Smooth case: Newton-CG with exact Hessian-vector products (quadratic convergence) followed by
    a check on ‖∇f(x*)‖. With an ℓ1 term: L-BFGS-B on the split x = u − v, u, v ≥ 0.
    """
    if not obj.convex:
        raise ValueError(f"no reference optimum for the nonconvex problem.kind {obj.kind!r}")
    import scipy.optimize  # rank 0 only: worker ranks never load the optimizers
    import scipy.sparse.linalg
    d = obj.d
    x0 = np.zeros(d)
    if obj.l1 == 0.0:
        if obj.kind == "ridge":
            # normal equations, solved exactly: (AᵀWA + l2 I) x = AᵀWy
            H = scipy.sparse.linalg.LinearOperator((d, d), matvec=lambda v: obj.hessp(x0, v), dtype=np.float64)
            rhs = np.asarray(obj.A.T @ (obj.w * obj.y)).ravel()
            x, info = scipy.sparse.linalg.cg(H, rhs, rtol=1e-15, atol=0.0, maxiter=50 * d + 1000)
            method = "ridge normal equations (scipy CG)"
        else:
            res = scipy.optimize.minimize(obj.loss, x0, jac=obj.grad, hessp=obj.hessp, method="Newton-CG",
                                          options={"xtol": 1e-16, "maxiter": 1000})
            x = res.x
            method = "scipy Newton-CG"
        # polish: a few exact Newton steps with tight CG (cheap, d is moderate)
        for _ in range(5):
            g = obj.grad(x)
            if np.linalg.norm(g) <= tol * max(1.0, np.linalg.norm(x)):
                break
            H = scipy.sparse.linalg.LinearOperator((d, d), matvec=lambda v, x=x: obj.hessp(x, v), dtype=np.float64)
            step, _ = scipy.sparse.linalg.cg(H, g, rtol=1e-14, atol=0.0, maxiter=10 * d + 100)
            x = x - step
        g = obj.grad(x)
        return Optimum(x=x, f=obj.full_loss(x), grad_norm=float(np.linalg.norm(g)), method=method)

    def fun(z):
        u, v = z[:d], z[d:]
        x = u - v
        g = obj.grad(x)
        val = obj.loss(x) + obj.l1 * (u.sum() + v.sum())
        return val, np.concatenate([g + obj.l1, -g + obj.l1])

    res = scipy.optimize.minimize(fun, np.zeros(2 * d), jac=True, method="L-BFGS-B",
                                  bounds=[(0.0, None)] * (2 * d),
                                  options={"ftol": 1e-16, "gtol": 1e-13, "maxiter": 100000, "maxcor": 30})
    x = res.x[:d] - res.x[d:]
    # prox-gradient residual as optimality measure
    L = obj.smoothness()
    z = x - obj.grad(x) / L
    px = np.sign(z) * np.maximum(np.abs(z) - obj.l1 / L, 0.0)
    return Optimum(x=x, f=obj.full_loss(x), grad_norm=float(L * np.linalg.norm(x - px)),
                   method="scipy L-BFGS-B on the split x = u - v")


def cache_dir() -> Path:
    return Path(os.environ.get("HPCGC_CACHE_DIR", Path.home() / ".cache" / "hpcgc"))


def cached_reference(obj: Objective, key_parts: dict) -> tuple[Optimum, bool]:
    """solve_reference with an on-disk cache keyed by data fingerprint, partition and regularization.

    Returns (optimum, was_cached). A corrupt or unreadable cache entry is recomputed.
    """
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:24]
    path = cache_dir() / "optimum" / f"{key}.npz"
    try:
        with np.load(path) as z:
            if z["x"].shape == (obj.d,):
                return Optimum(x=z["x"], f=float(z["f"]), grad_norm=float(z["grad_norm"]),
                               method=str(z["method"])), True
    except Exception:  # noqa: BLE001 (an unreadable cache entry is recomputed)
        pass
    opt = solve_reference(obj)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, x=opt.x, f=opt.f, grad_norm=opt.grad_norm, method=opt.method,
                 key=json.dumps(key_parts, sort_keys=True, default=str))
        os.replace(tmp, path)
    except OSError:
        pass  # caching is an optimisation; a read-only home must not fail the run
    return opt, False


def prox_l1(x, t):
    """prox of t·‖·‖₁: soft-thresholding (in place)."""
    np.copyto(x, np.sign(x) * np.maximum(np.abs(x) - t, 0.0))
    return x
