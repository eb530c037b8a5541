"""Smoothness matrices L_i and their square roots (`spec/smoothness.md` §2, §3, §9).

For a worker's objective f_i(x) = Σ_r w_r ℓ(a_rᵀx, y_r) + (λ/2)‖x‖² (w_r = 1/m_i),

    L_i = c · Aᵀ diag(w) A + λ I,      c = 1/4 (logistic), 1 (ridge),

i.e. A_iᵀA_i/(4m_i) + λI and A_iᵀA_i/m_i + λI. f_i is L_i-smooth, so any M_i ⪰ L_i is a valid
smoothness matrix as well (§2.2).

:func:`factor` returns what the smoothness-aware methods need, either

* **dense** (d ≤ ``dense_max_dim``, default 2000): S_i = L_i^{1/2} and S_i^- = L_i^{†1/2} from
  ``numpy.linalg.eigh`` (not SVD); eigenvalues ≤ d·ε·λ_max count as zero, so λ = 0 with a singular
  L_i gives the pseudo-inverse on the range of L_i (never a division by zero), or
* **diagonal** (the surrogate of §9.3): M_i = κ·c·D + λI with D = diag(Aᵀ diag(w) A) and
  κ = λ_max(D^{-1/2} Aᵀ diag(w) A D^{-1/2}) (Lanczos for large d), so M_i ⪰ L_i; S_i = M_i^{1/2}
  is a vector and no d×d array is ever formed — O(nnz(A)) memory and time per Lanczos step.

A requested dense factor that would need more than :data:`DENSE_MEMORY_LIMIT` bytes on a rank is a
:class:`~hpcgc.errors.ConfigError` that suggests ``matrix=diag``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError
from .matrix import issparse
from .problems import weighted_gram_lambda_max

DENSE_MAX_DIM = 2000
"""Above this dimension ``matrix=auto`` uses the diagonal surrogate (`spec/decisions.md`)."""

DENSE_MEMORY_LIMIT = 2 * 2**30
"""Bytes a rank may spend on dense d×d arrays (worker: L, eigenvectors, S, S^-, eigh workspace;
server: additionally the n stacked S_i). Above it a requested dense factor is refused."""

DENSE_WORK_ARRAYS = 5
SURROGATE_MARGIN = 1e-6
"""κ is inflated by this relative margin: Lanczos approaches λ_max from below."""

MATRIX_CHOICES = ("auto", "dense", "diag")


def loss_curvature(kind: str) -> float:
    """c with ℓ'' ≤ c: 1/4 for the logistic loss, 1 for the squared loss."""
    if kind == "logreg":
        return 0.25
    if kind == "ridge":
        return 1.0
    raise ConfigError(f"smoothness matrices are defined for logreg and ridge, not {kind!r}")


def gram(A, w) -> np.ndarray:
    """Dense Aᵀ diag(w) A (d×d)."""
    if issparse(A):
        import scipy.sparse as sp
        G = (A.T @ (sp.diags(w) @ A)).toarray()
    else:
        G = A.T @ (A * w[:, None])
    return np.asarray(G, dtype=np.float64)


def gram_diagonal(A, w) -> np.ndarray:
    """diag(Aᵀ diag(w) A) = Σ_r w_r A_rj², without forming the d×d matrix."""
    if issparse(A):
        return np.asarray(A.multiply(A).T @ w, dtype=np.float64).ravel()
    return np.asarray((A * A).T @ w, dtype=np.float64)


def smoothness_matrix(obj) -> np.ndarray:
    """Dense L_i = c·Aᵀ diag(w) A + λI of an :class:`hpcgc.problems.Objective`."""
    L = loss_curvature(obj.kind) * gram(obj.A, obj.w)
    L[np.diag_indices_from(L)] += obj.l2
    return L


def dense_bytes(d: int, n_stacked: int = 0) -> int:
    """Bytes of dense float64 work arrays: the worker's, plus ``n_stacked`` S_i on the server."""
    return 8 * d * d * (DENSE_WORK_ARRAYS + n_stacked)


def resolve_kind(matrix: str, d: int, dense_max_dim: int = DENSE_MAX_DIM, n_stacked: int = 0,
                 memory_limit: int | None = None) -> str:
    """'dense' or 'diagonal' for a ``matrix`` choice (auto | dense | diag); ConfigError when a
    requested dense factor would exceed the memory limit."""
    if matrix not in MATRIX_CHOICES:
        raise ConfigError(f"smoothness matrix {matrix!r}: expected one of {', '.join(MATRIX_CHOICES)}")
    limit = DENSE_MEMORY_LIMIT if memory_limit is None else memory_limit
    need = dense_bytes(d, n_stacked)
    if matrix == "diag":
        return "diagonal"
    if matrix == "auto":
        return "dense" if d <= dense_max_dim and need <= limit else "diagonal"
    if need > limit:
        raise ConfigError(
            f"dense smoothness matrices for d={d}{f' and {n_stacked} workers' if n_stacked else ''} need "
            f"~{need / 2**30:.2f} GiB of d×d arrays on one rank (limit {limit / 2**30:.2f} GiB); use the "
            "diagonal surrogate M_i ⪰ L_i instead: matrix=diag (or matrix=auto, which switches to it above "
            f"d = {dense_max_dim})")
    return "dense"


@dataclass
class SmoothnessFactor:
    """S = L^{1/2} and S^- = L^{†1/2} of one worker (dense matrices or diagonal vectors)."""
    kind: str                   # "dense" | "diagonal"
    d: int
    diag: np.ndarray            # diag(L_i) (dense) or the surrogate's M_ii (diagonal); 0 off the range
    S: np.ndarray               # (d, d) or (d,)
    S_pinv: np.ndarray          # (d, d) or (d,)
    active: np.ndarray          # bool (d,): coordinates with diag > 0 (all of them when λ > 0)
    lambda_max: float           # λ_max(L_i) (dense) or max M_ii (diagonal)
    rank: int                   # numerical rank of L_i (M_i for the surrogate)
    kappa: float = float("nan")  # surrogate scale κ (diagonal only)

    def whiten(self, v: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out = S^- v, then exactly 0 on inactive coordinates (the range projection)."""
        if self.kind == "dense":
            np.dot(self.S_pinv, v, out=out)
        else:
            np.multiply(self.S_pinv, v, out=out)
        if not self.all_active:
            out[~self.active] = 0.0
        return out

    @functools.cached_property
    def all_active(self) -> bool:
        """Every coordinate active (``active`` is fixed once the factor is built): tested once, not
        on every whitening."""
        return bool(self.active.all())


def _range_tolerance(top: float, d: int) -> float:
    return max(top, 0.0) * d * np.finfo(np.float64).eps


def factor(obj, matrix: str = "auto", dense_max_dim: int = DENSE_MAX_DIM,
           memory_limit: int | None = None) -> SmoothnessFactor:
    """The worker's smoothness factor (see the module docstring)."""
    d = obj.d
    kind = resolve_kind(matrix, d, dense_max_dim, 0, memory_limit)
    if kind == "dense":
        L = smoothness_matrix(obj)
        diag = np.diag(L).copy()
        e, V = np.linalg.eigh(L)
        del L
        tol = _range_tolerance(e[-1], d)
        keep = e > tol
        root = np.where(keep, np.sqrt(np.where(keep, e, 1.0)), 0.0)
        S = (V * root) @ V.T
        S_pinv = (V * np.where(keep, 1.0 / np.where(keep, root, 1.0), 0.0)) @ V.T
        S = 0.5 * (S + S.T)
        S_pinv = 0.5 * (S_pinv + S_pinv.T)
        active = diag > _range_tolerance(diag.max(initial=0.0), d)
        diag[~active] = 0.0
        for M in (S, S_pinv):         # L e_j = 0 there: exact zeros instead of rounding noise
            M[~active, :] = 0.0
            M[:, ~active] = 0.0
        return SmoothnessFactor("dense", d, diag, S, S_pinv, active, float(max(e[-1], 0.0)),
                                int(keep.sum()))
    # diagonal surrogate M = κ c D + λ I ⪰ L
    c = loss_curvature(obj.kind)
    D = gram_diagonal(obj.A, obj.w)
    present = D > _range_tolerance(D.max(initial=0.0), d)
    kappa = 0.0
    if present.any():
        scale = np.where(present, 1.0 / np.sqrt(np.where(present, D, 1.0)), 0.0)
        if issparse(obj.A):
            import scipy.sparse as sp
            As = obj.A @ sp.diags(scale)
        else:
            As = obj.A * scale
        kappa = weighted_gram_lambda_max(As, obj.w) * (1.0 + SURROGATE_MARGIN)
    M = kappa * c * np.where(present, D, 0.0) + obj.l2
    active = M > _range_tolerance(M.max(initial=0.0), d)
    M[~active] = 0.0
    S = np.sqrt(M)
    S_pinv = np.where(active, 1.0 / np.where(active, S, 1.0), 0.0)
    return SmoothnessFactor("diagonal", d, M, S, S_pinv, active, float(M.max(initial=0.0)),
                            int(active.sum()), kappa=float(kappa))
