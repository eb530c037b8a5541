"""``rand-tau+``: smoothness-aware independent sparsification with optimal probabilities.

Safaryan, Hanzely, Richtárik, *Smoothness Matrices Beat Smoothness Constants: Better Communication
Compression Techniques for Distributed Optimization*, NeurIPS 2021 (arXiv 2102.07245); the
"DIANA+ (rand-τ+)" of Wang et al.'s code (`spec/smoothness.md` §5.1). Each coordinate is kept
independently with probability p_j and scaled by 1/p_j:

    C(y)_j = y_j/p_j with probability p_j, else 0,        E C(y) = y,   E nnz = Σ_j p_j = τ,

so ω = max_j (1/p_j − 1) and E‖C(y) − y‖²_L = Σ_j (1/p_j − 1) L_jj y_j² ≤ L̃‖y‖² with
L̃ = max_j (1/p_j − 1) L_jj. The probabilities equalize (1/p_j − 1)·a_j:

    p_j = a_j/(a_j + ρ),   ρ > 0 the root of Σ_j a_j/(a_j + ρ) = τ   (monotone: bracketed ``brentq``),

with a_j = L_jj for dcgd+ (then L̃ = ρ) and a_j = 1 + L_jj/(nλ) for diana+ (λ = 0: a_j = L_jj, the
λ → 0 limit up to scale). τ = ⌊d/n⌋ by default; τ ≥ the number of active coordinates keeps
everything. Kept entries are divided by p_j (the authors' code omits this and is biased; see
`spec/decisions.md`). Only usable under ``dcgd+``/``diana+``, which bind p to the worker and ship it
to the server once.

Wire format (after the 8-byte header): an Elias-omega stream EO(nnz + 1), EO(gap) per kept index
(first gap = index + 1), zero-padded to a byte; then the nnz kept values y_j *unscaled* (float32,
or float64 with ``fp64=true``); the 1/p_j scale is applied in float64 at decode.
Model bits: Σ_kept (|EO(gap)| + F).
"""
from __future__ import annotations

import copy

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .dither_plus import MATRIX_PARAMS, float32_exact, stream_error
from .kernels import wire
from .kernels.elias_omega import bernoulli_keep, gap_stream_bits, gap_stream_read, gap_stream_write
from .kernels.norms import nonfinite_flag
from .params import FP64_PARAM, Param
from .sparse_base import DecodeSparse

FORMAT_EO_SPARSE = 41


@njit(cache=True)
def gather_values(x, idx, values):
    """values[q] = x[idx[q]] (cast to values' dtype); returns 0.0, or NaN if a value is non-finite."""
    chk = 0.0
    for q in range(idx.shape[0]):
        values[q] = x[idx[q]]
        chk += values[q] * 0.0
    return chk


def optimal_probabilities(a, tau: float) -> tuple[np.ndarray, float]:
    """(p, ρ): p_j = a_j/(a_j + ρ) with Σ p_j = τ over a_j > 0 (p_j = 0 where a_j = 0).

    ρ is the root of the decreasing F(ρ) = Σ a_j/(a_j + ρ) − τ, bracketed by
    ρ_lo = a_min(k/τ − 1) (F ≥ 0; k = number of a_j > 0) and ρ_hi = Σa/τ (F ≤ 0). τ ≥ k gives p = 1.
    """
    a = np.asarray(a, dtype=np.float64)
    pos = a > 0
    k = int(pos.sum())
    p = np.zeros_like(a)
    if k == 0:
        return p, 0.0
    if tau >= k:
        p[pos] = 1.0
        return p, 0.0
    ap = a[pos]

    def F(rho):
        return float(np.sum(ap / (ap + rho))) - tau

    lo = ap.min() * (k / tau - 1.0)
    hi = ap.sum() / tau
    if F(lo) <= 0.0:
        rho = lo
    elif F(hi) >= 0.0:
        rho = hi
    else:
        import scipy.optimize  # here, not at import: worker ranks never load the optimizers
        rho = scipy.optimize.brentq(F, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    p[pos] = ap / (ap + rho)
    return p, float(rho)


def sparsification_constants(p, diag) -> tuple[float, float]:
    """(ω, L̃) = (max_j (1/p_j − 1), max_j (1/p_j − 1) L_jj) over p_j > 0."""
    p = np.asarray(p)
    act = p > 0
    if not act.any():
        return 0.0, 0.0
    r = 1.0 / p[act] - 1.0
    return float(r.max()), float((r * np.asarray(diag)[act]).max())


class RandTauPlus(DecodeSparse, Compressor):
    """Independent sparsification with smoothness-aware probabilities p_j = a_j/(a_j + ρ),
    Σ p_j = τ, kept entries scaled by 1/p_j (Safaryan et al. 2021)."""

    name = "rand-tau+"
    aware = True
    description = ("smoothness-aware independent sparsification (Safaryan et al. 2021 'rand-tau+'), only with "
                   "dcgd+/diana+: keep y_j w.p. p_j = a_j/(a_j+rho), sum p = tau (0 = floor(d/n)), scaled 1/p_j; "
                   "omega = max(1/p-1), L~ = max((1/p-1) L_jj); bits sum(|EO(gap)| + F)")
    PARAMS = (
        Param("tau", int, 0, low=0, in_spec="nondefault", doc="expected kept coordinates; 0 = floor(d/n)"),
        *MATRIX_PARAMS,
        FP64_PARAM,
    )
    FORMAT_ID = FORMAT_EO_SPARSE
    unbiased = True

    def _init(self) -> None:
        self._bound = None        # (d, p, 1/p)
        self._tau_run = None

    # -- parameters --------------------------------------------------------------------------
    def tau(self, d: int, n: int | None = None) -> int:
        t = self._params["tau"] or self._tau_run or (d // n if n else None)
        if t is None:
            return max(1, min(d, 1))
        if not 1 <= t <= d:
            where = f"tau = {t}" if self._params["tau"] else f"tau = floor(d/n) = floor({d}/{n}) = {t}"
            raise ConfigError(f"{self.name}: {where} is out of range for d = {d}; allowed: 1 <= tau <= d")
        return int(t)

    def _validate(self, d: int) -> None:
        if self._params["tau"] > d:
            self.tau(d)

    def for_run(self, *, d: int, n_workers: int):
        b = copy.copy(self)
        b._tau_run = self.tau(int(d), int(n_workers))
        return b

    def omega(self, d: int) -> float:
        if self._bound is None:
            raise ConfigError(f"{self.name} is a smoothness-aware compressor: its probabilities come from each "
                              "worker's smoothness matrix; use it with run.algorithm = 'dcgd+' or 'diana+'")
        return self.omega_i

    def _probs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        if self._bound is not None:
            if self._bound[0] != d:
                raise ConfigError(f"{self.name}: bound to d={self._bound[0]}, called with d={d}")
            return self._bound[1], self._bound[2]
        p = np.full(d, min(1.0, self.tau(d) / d))     # unbound: uniform (compiles the kernels)
        return p, 1.0 / p

    def _bind(self, d: int, p: np.ndarray, **attrs):
        p = np.ascontiguousarray(p, dtype=np.float64)
        if p.shape != (d,) or not np.all((p >= 0) & (p <= 1)):
            raise ValueError(f"{self.name}: probabilities must be {d} numbers in [0, 1]")
        b = copy.copy(self)
        with np.errstate(divide="ignore"):
            inv = np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), 0.0)
        b._bound = (d, p, inv)
        for k, v in attrs.items():
            setattr(b, k, v)
        return b

    @property
    def probabilities(self) -> np.ndarray | None:
        return None if self._bound is None else self._bound[1]

    def smoothness_bind(self, diag, *, d, n, mu, method):
        diag = np.asarray(diag, dtype=np.float64)
        if method == "dcgd" or mu <= 0:
            a = np.where(diag > 0, diag, 0.0)
        else:
            a = np.where(diag > 0, 1.0 + diag / (n * mu), 0.0)
        p, rho = optimal_probabilities(a, self.tau(d, n))
        p = float32_exact(p)
        om, lt = sparsification_constants(p, diag)
        return self._bind(d, p, omega_i=om, ltilde_i=lt, rho=rho, setup_params=p)

    def smoothness_from_setup(self, params, *, d, n):
        if params.shape != (d,):
            raise PayloadError(f"{self.name}: set-up message has {params.size} probabilities, expected {d}")
        return self._bind(d, params)

    # -- compress / decode ---------------------------------------------------------------------
    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        if nonfinite_flag(x) != 0.0:
            raise self._nonfinite_error(x)
        p, _ = self._probs(d)
        keep = np.empty(d, dtype=np.int64)
        idx = keep[:bernoulli_keep(x, p, seed, keep)]
        stream_bits, _ = gap_stream_bits(idx)
        sbytes = (stream_bits + 7) // 8
        payload = self._new_payload(sbytes + idx.size * self._scale_bytes, d)
        payload[wire.HEADER_BYTES:wire.HEADER_BYTES + sbytes] = 0
        gap_stream_write(idx, payload, wire.HEADER_BYTES)
        values = np.empty(idx.size, dtype=self._dtype())
        if gather_values(x, idx, values) != 0.0:
            raise self._nonfinite_error(x, "value range (float32)")
        payload[wire.HEADER_BYTES + sbytes:] = values.view(np.uint8)
        return payload

    def decode_sparse(self, payload, d: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(indices, values y_j/p_j, model bits)."""
        payload = self._as_payload(payload, d)
        _, inv = self._probs(d)
        body = payload.size - wire.HEADER_BYTES
        self._check_payload(payload, d, body if body >= 1 else 1)
        idx = np.empty(d, dtype=np.int64)
        nnz, used, gap_bits = gap_stream_read(payload, wire.HEADER_BYTES, body, d, idx)
        if nnz < 0:
            raise stream_error(self.name, nnz)
        if body != used + nnz * self._scale_bytes:
            raise PayloadError(f"{self.name}: corrupted payload: {body} body bytes, expected "
                               f"{used + nnz * self._scale_bytes} for {nnz} kept values")
        idx = idx[:nnz]
        vals = wire.read_array(payload, wire.HEADER_BYTES + used, nnz, self._dtype()).astype(np.float64)
        if nonfinite_flag(vals) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        scale = inv[idx]
        if not np.all(scale > 0):
            raise PayloadError(f"{self.name}: corrupted payload: index kept with probability 0")
        vals *= scale
        return idx, vals, int(gap_bits + nnz * self._float_bits)
