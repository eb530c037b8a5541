"""Standard dithering with Elias-omega encoding: ``dither`` (uniform step) and ``quant+``
(smoothness-aware per-coordinate steps).

Wang, Safaryan, Richtárik, *Theoretically Better and Numerically Faster Distributed Optimization
with Smoothness-Aware Quantization Techniques*, NeurIPS 2022 (arXiv 2106.03524), §5 and the
authors' code (`spec/smoothness.md` §5.2, §6). For y ∈ R^d, steps Δ ∈ R^d_{>0} and r = ‖y‖_p
(p = ∞ by default, as in the papers' experiments):

    u_j = |y_j|/r,   level_j = ⌊u_j/Δ_j⌋ + Bernoulli(u_j/Δ_j − ⌊u_j/Δ_j⌋),   Q(y)_j = r·sign(y_j)·level_j·Δ_j,

unbiased, with E‖Q(y) − y‖² ≤ min(‖Δ‖₂², ‖Δ‖₂)·‖y‖² (ω) and E‖Q(y) − y‖²_L ≤ ‖diag(L)∘Δ‖₂·‖y‖²
(L̃, for p ≥ 2). ``r`` is the norm as sent (float32 rounded up by default).

* ``dither``: Δ_j = 1/s. With ``dcgd``/``diana`` this is the papers' non-smoothness-aware
  baseline "quant": s = 0 (auto) becomes s = max(1, ⌊√d/n⌋) in a run. Under ``dcgd+``/``diana+``
  it is their uniform-step comparator "DIANA+ (quant)": auto gives Δ_j = n/√d (the budget
  Σ_j Δ_j^{-2} = (d/n)²), an explicit s gives Δ_j = 1/s.
* ``quant+``: Δ_j = √(Σ_k a_k / a_j)/β with Σ_j Δ_j^{-2} = β², β = d/n by default; a_j = L_jj for
  ``dcgd+`` and a_j = √(1 + (L_jj/(nλ))²) for ``diana+`` (§5.2). Its steps come from the worker's
  smoothness matrix, so it only runs under ``dcgd+``/``diana+`` (which bind it per worker and ship
  Δ to the server once).

Wire format (after the 8-byte header): B block norms (float32, or float64 with ``fp64=true``;
B = 1 here), then an Elias-omega bit stream, LSB-first, zero-padded to a byte: per block
EO(nnz + 1), then per nonzero EO(gap) · sign bit · EO(level) (:mod:`.kernels.elias_omega`).
Model bits (§6): F·B + Σ_nonzero (|EO(gap)| + 1 + |EO(level)|).
"""
from __future__ import annotations

import copy
import math

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import wire
from .kernels.elias_omega import (
    ERR_CODE,
    ERR_OVERRUN,
    ERR_PADDING,
    ERR_RANGE,
    dither_levels,
    dither_stream_bits,
    dither_stream_read,
    dither_stream_write,
)
from .params import FP64_PARAM, Param
from .sparse_base import DecodeSparse

FORMAT_EO_DITHER = 40

MATRIX_PARAMS = (
    Param("matrix", str, "auto", choices=("auto", "dense", "diag"), in_spec="nondefault",
          doc="smoothness matrix under dcgd+/diana+: dense L_i^(1/2) up to dense_max, else the diagonal surrogate"),
    Param("dense_max", int, 2000, low=1, in_spec="nondefault",
          doc="largest d for which matrix=auto uses dense L_i^(1/2)"),
)
"""Parameters of the smoothness-aware compressors that choose the smoothness matrix."""

_ERRORS = {ERR_OVERRUN: "bit stream truncated", ERR_RANGE: "index out of range",
           ERR_CODE: "invalid Elias-omega code", ERR_PADDING: "nonzero padding or trailing bytes"}


def stream_error(who: str, code: int) -> PayloadError:
    return PayloadError(f"{who}: corrupted payload: {_ERRORS.get(int(code), 'invalid stream')}")


@njit(cache=True)
def block_norms_starts(x, starts, use_inf, norms):
    """norms[l] = ‖x[starts[l]:starts[l+1]]‖_∞ or ‖·‖₂; returns Σ x_j·0 (NaN if x is not finite)."""
    chk = 0.0
    for l in range(starts.shape[0] - 1):
        acc = 0.0
        for j in range(starts[l], starts[l + 1]):
            v = np.float64(x[j])
            chk += v * 0.0
            if use_inf:
                a = abs(v)
                if a > acc:
                    acc = a
            else:
                acc += v * v
        norms[l] = acc if use_inf else math.sqrt(acc)
    return chk


def float32_exact(v) -> np.ndarray:
    """Round to float32 (nearest) and back: parameters the server receives as float32 are used in
    exactly this form on both sides."""
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def float32_up(v) -> np.ndarray:
    """Round steps *up* to float32 (and back to float64): both sides use these exact values, and a
    larger step never breaks a budget Σ f(Δ_j) with f decreasing."""
    return wire.round_up_to_float32(np.atleast_1d(np.asarray(v, dtype=np.float64)))


def single_block_constants(steps, diag, active) -> tuple[float, float]:
    """(ω, L̃) of one-block dithering with steps Δ on the active coordinates:
    ω = min(‖Δ‖₂², ‖Δ‖₂), L̃ = ‖diag(L)∘Δ‖₂ (`spec/smoothness.md` §5.2)."""
    s = np.asarray(steps)[active]
    nrm = float(np.linalg.norm(s))
    return min(nrm * nrm, nrm), float(np.linalg.norm(np.asarray(diag)[active] * s))


def diana_plus_weights(diag, n: int, mu: float) -> np.ndarray:
    """quant+ weights for diana+: a_j = √(1 + (L_jj/(nμ))²); for μ = 0 their μ → 0 limit up to
    scale, a_j = L_jj (the steps only depend on a up to scale)."""
    diag = np.asarray(diag, dtype=np.float64)
    if mu > 0:
        a = np.sqrt(1.0 + (diag / (n * mu)) ** 2)
    else:
        a = diag.copy()
    a[diag <= 0] = 0.0
    return a


def quant_plus_steps(a, beta: float) -> np.ndarray:
    """Δ_j = √(Σ_k a_k / a_j)/β on a_j > 0 (so Σ Δ_j^{-2} = β² there); 1 where a_j = 0."""
    a = np.asarray(a, dtype=np.float64)
    pos = a > 0
    if not pos.any():
        return np.ones_like(a)
    total = a[pos].sum()
    out = np.ones_like(a)
    out[pos] = np.sqrt(total / a[pos]) / beta
    return out


class EODither(DecodeSparse, Compressor):
    """Shared machinery of the Elias-omega dithering compressors: contiguous blocks (``starts``),
    per-coordinate steps Δ_j, a norm per block. Subclasses define the layout."""

    FORMAT_ID = FORMAT_EO_DITHER
    unbiased = True
    aware = False            # True: parameters come from the worker's smoothness matrix

    def _init(self) -> None:
        self._use_inf = self._params.get("p", math.inf) == math.inf
        self._bound = None   # (d, starts, steps, inv_steps) once bound to a dimension/worker
        self._cache = {}

    # -- layout ------------------------------------------------------------------------------
    def _default_layout(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, steps) when not bound to a worker (subclasses)."""
        raise NotImplementedError

    def _layout(self, d: int):
        if self._bound is not None:
            if self._bound[0] != d:
                raise ConfigError(f"{self.name}: bound to d={self._bound[0]}, called with d={d}")
            return self._bound[1:]
        if d not in self._cache:
            starts, steps = self._default_layout(d)
            self._cache[d] = (starts, steps, 1.0 / steps)
        return self._cache[d]

    def _bind(self, d: int, starts, steps, **attrs):
        """A copy of this compressor with a fixed layout (same spec and fingerprint)."""
        b = copy.copy(self)
        steps = np.ascontiguousarray(steps, dtype=np.float64)
        if steps.shape != (d,) or not np.all(np.isfinite(steps)) or not np.all(steps > 0):
            raise ValueError(f"{self.name}: steps must be {d} positive finite numbers")
        b._bound = (d, np.ascontiguousarray(starts, dtype=np.int64), steps, 1.0 / steps)
        b._cache = {}
        for k, v in attrs.items():
            setattr(b, k, v)
        return b

    @property
    def steps(self) -> np.ndarray | None:
        """Δ (length d) when bound, else None."""
        return None if self._bound is None else self._bound[2]

    # -- compress ----------------------------------------------------------------------------
    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        starts, _, inv_steps = self._layout(d)
        B = starts.shape[0] - 1
        norms = np.empty(B)
        if block_norms_starts(x, starts, self._use_inf, norms) != 0.0 or not np.isfinite(norms).all():
            raise self._nonfinite_error(x)
        scales = self._scales_for_wire(norms)
        if not np.isfinite(scales).all():
            raise self._nonfinite_error(x, "block norm (float32)")
        levels = np.empty(d, dtype=np.int64)
        dither_levels(x, starts, inv_steps, scales, seed, levels)
        stream_bits, _ = dither_stream_bits(levels, starts)
        off = B * self._scale_bytes
        payload = self._new_payload(off + (stream_bits + 7) // 8, d)
        payload[wire.HEADER_BYTES + off:] = 0
        self._write_scales(payload, scales)
        dither_stream_write(levels, starts, payload, wire.HEADER_BYTES + off)
        return payload

    # -- decode ------------------------------------------------------------------------------
    def decode_sparse(self, payload, d: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(indices, values, model bits) of the nonzero entries; indices increasing."""
        payload = self._as_payload(payload, d)
        starts, steps, _ = self._layout(d)
        B = starts.shape[0] - 1
        need = B * self._scale_bytes + 1
        body = payload.size - wire.HEADER_BYTES
        self._check_payload(payload, d, body if body >= need else need)
        scales = wire.read_scales(payload, wire.HEADER_BYTES, B, self._fp64)
        if not np.isfinite(scales).all() or (scales < 0).any():
            raise PayloadError(f"{self.name}: corrupted payload: invalid block norm")
        idx = np.empty(d, dtype=np.int64)
        vals = np.empty(d)
        off = wire.HEADER_BYTES + B * self._scale_bytes
        q, entry_bits = dither_stream_read(payload, off, payload.size - off, starts, steps, scales, idx, vals)
        if q < 0:
            raise stream_error(self.name, q)
        return idx[:q], vals[:q], int(self._float_bits * B + entry_bits)

    # -- smoothness-aware protocol (used by dcgd+/diana+) -------------------------------------
    def smoothness_bind(self, diag, *, d: int, n: int, mu: float, method: str):
        """Worker side: a copy bound to this worker's diag(L_i) with ``omega_i``, ``ltilde_i`` and
        ``setup_params`` (float64 array of float32 values, shipped once to the server)."""
        raise NotImplementedError

    def smoothness_from_setup(self, params: np.ndarray, *, d: int, n: int):
        """Server side: the bound copy rebuilt from the shipped ``setup_params``."""
        raise NotImplementedError

    def _not_bound(self) -> ConfigError:
        return ConfigError(f"{self.name} is a smoothness-aware compressor: its parameters come from each "
                           "worker's smoothness matrix; use it with run.algorithm = 'dcgd+' or 'diana+'")


def _one_block(d: int) -> np.ndarray:
    return np.array([0, d], dtype=np.int64)


class Dither(EODither):
    """Standard dithering with a uniform step Δ = 1/s, Elias-omega coded (the smoothness papers'
    "quant" baseline); ω = min(d/s², √d/s)."""

    name = "dither"
    description = ("standard dithering, uniform step 1/s, norm p, Elias-omega coded (Wang et al. 2022 'quant'); "
                   "s=0: floor(sqrt(d)/n) with dcgd/diana, step n/sqrt(d) with dcgd+/diana+; "
                   "omega = min(d/s^2, sqrt(d)/s); bits F + sum(|EO(gap)| + 1 + |EO(level)|)")
    PARAMS = (
        Param("s", int, 0, low=0, in_spec="nondefault",
              doc="levels (step 1/s); 0 = auto from d and the number of workers n"),
        Param("p", float, math.inf, choices=(2, math.inf), doc="norm used for the scale"),
        FP64_PARAM,
    )

    def _init(self) -> None:
        super()._init()
        self._s_run = None       # s resolved for a run (auto)

    def for_run(self, *, d: int, n_workers: int):
        if self._params["s"] or self._s_run is not None:
            return self
        b = copy.copy(self)
        b._cache = {}
        b._s_run = max(1, math.isqrt(int(d)) // int(n_workers))
        return b

    def levels(self) -> int | None:
        """s in use (None while auto and not yet resolved for a run)."""
        return self._params["s"] or self._s_run

    def omega(self, d: int) -> float:
        s = self.levels()
        if s is None:
            raise ConfigError("dither with s=0 (auto) needs the number of workers: s = max(1, floor(sqrt(d)/n)) "
                              "is resolved inside a run; give s explicitly to use it alone")
        return min(d / s**2, math.sqrt(d) / s)

    def _default_layout(self, d: int):
        return _one_block(d), np.full(d, 1.0 / (self.levels() or 1))

    def uniform_step(self, d: int, n: int) -> float:
        """Δ under dcgd+/diana+: 1/s, or n/√d (Σ Δ^{-2} = (d/n)²) when s is auto."""
        s = self._params["s"]
        return float(float32_up(1.0 / s if s else n / math.sqrt(d))[0])

    def smoothness_bind(self, diag, *, d, n, mu, method):
        steps = np.full(d, self.uniform_step(d, n))
        active = np.asarray(diag) > 0
        om, lt = single_block_constants(steps, diag, active)
        return self._bind(d, _one_block(d), steps, omega_i=om, ltilde_i=lt, setup_params=np.zeros(0))

    def smoothness_from_setup(self, params, *, d, n):
        return self._bind(d, _one_block(d), np.full(d, self.uniform_step(d, n)))


class QuantPlus(EODither):
    """Smoothness-aware standard dithering with per-coordinate steps (Wang et al. 2022, §5):
    Δ_j = √(Σa/a_j)/β, Σ Δ_j^{-2} = β², β = d/n; a_j = L_jj (dcgd+), √(1+(L_jj/nλ)²) (diana+)."""

    name = "quant+"
    aware = True
    description = ("smoothness-aware dithering with per-coordinate steps (Wang et al. 2022 'quant+'), only with "
                   "dcgd+/diana+; sum_j step_j^-2 = budget^2 (budget 0 = d/n); omega = min(|step|^2, |step|), "
                   "L~ = |diag(L_i) * step|; bits F + sum(|EO(gap)| + 1 + |EO(level)|)")
    PARAMS = (
        Param("budget", float, 0.0, low=0.0, in_spec="nondefault",
              doc="beta with sum_j step_j^-2 = beta^2; 0 = d/n"),
        Param("p", float, math.inf, choices=(2, math.inf), doc="norm used for the scale"),
        *MATRIX_PARAMS,
        FP64_PARAM,
    )

    def omega(self, d: int) -> float:
        if self._bound is None:
            raise self._not_bound()
        return self.omega_i

    def _default_layout(self, d: int):
        # unbound: unit steps (only used to compile the kernels before a run)
        return _one_block(d), np.ones(d)

    def budget(self, d: int, n: int) -> float:
        return self._params["budget"] or d / n

    def smoothness_bind(self, diag, *, d, n, mu, method):
        diag = np.asarray(diag, dtype=np.float64)
        a = np.where(diag > 0, diag, 0.0) if method == "dcgd" else diana_plus_weights(diag, n, mu)
        steps = float32_up(quant_plus_steps(a, self.budget(d, n)))
        om, lt = single_block_constants(steps, diag, diag > 0)
        return self._bind(d, _one_block(d), steps, omega_i=om, ltilde_i=lt, setup_params=steps)

    def smoothness_from_setup(self, params, *, d, n):
        if params.shape != (d,):
            raise PayloadError(f"{self.name}: set-up message has {params.size} steps, expected {d}")
        return self._bind(d, _one_block(d), params)
