"""Block quantization with B blocks: ``block-dither`` (uniform step) and ``block-quant+``
(smoothness-aware block steps).

Wang, Safaryan, Richtárik, NeurIPS 2022 (arXiv 2106.03524), §4 and the authors' code
(`spec/smoothness.md` §5.3): y is cut into B contiguous blocks (B = n, the number of workers, by
default; blocks 0..B−2 have ⌊d/B⌋ coordinates, the last one the rest), and each block l is dithered
(:mod:`.dither_plus`) with its own norm r_l = ‖y_[l]‖_p and a scalar step Δ_l. With d_l the block
size and N_l = ‖diag(L)_[l]‖₂:

    ω = max_l min(d_l Δ_l², √d_l Δ_l),      L̃ = max_l Δ_l N_l,

and every step rule below keeps the per-node budget Σ_l (Δ_l^{-2} + √d_l Δ_l^{-1}) ≤ d/n (QSGD's
nonzero bound per block, s = 1/Δ_l):

* ``block-dither``: Δ_l = 1/s. With ``dcgd``/``diana`` it is the papers' "block quant" baseline,
  s = 0 (auto) → s = max(1, ⌊√d/n⌋). Under ``dcgd+``/``diana+`` auto gives the uniform block step
  Δ = (√d_b + √(d_b + 4c))/(2c), c = (d/n)/B, the papers' "DIANA+ (block quant)"; here d_b is the
  *largest* block (the code uses ⌊d/B⌋, which overshoots the budget when B does not divide d).
* ``block-quant+`` (dcgd+/diana+ only): dcgd+: δ = d T_B/c + √(d/c) T₁ with T₁ = ‖diag L‖₂/√d,
  T_B = Σ_l √d_l N_l/d, Δ_l = δ/N_l; diana+: A_l = √d_l + N_l/(nλ), T₁ = 1 + ‖diag L‖₂/(nλ√d),
  T_B = Σ_l √d_l A_l/d, δ = d T_B/(2c) + √(d² T_B²/(4c²) + d T₁²/c), Δ_l = δ/A_l; c = d/n.
  For λ = 0 the diana+ rule uses its λ → 0 limit (A_l = N_l/n, T₁ = ‖diag L‖₂/(n√d)).

Wire format and model bits: as ``dither`` with B norms (F·B + Σ_nonzero (|EO(gap)| + 1 +
|EO(level)|), gaps counted within each block).
"""
from __future__ import annotations

import copy
import math

import numpy as np

from ..errors import ConfigError, PayloadError
from .dither_plus import MATRIX_PARAMS, EODither, float32_up
from .params import FP64_PARAM, Param


def block_starts(d: int, B: int, who: str = "block quantization") -> np.ndarray:
    """Boundaries of B contiguous blocks: ⌊d/B⌋ coordinates each, the last block the remainder."""
    if B < 1:
        raise ConfigError(f"{who}: number of blocks must be >= 1, got {B}")
    if B > d:
        raise ConfigError(f"{who}: {B} blocks but only d = {d} coordinates (fewer coordinates than blocks); "
                          f"use at most {d} blocks (parameter blocks) or fewer workers")
    b = d // B
    starts = np.arange(B + 1, dtype=np.int64) * b
    starts[-1] = d
    return starts


def block_sizes(starts) -> np.ndarray:
    return np.diff(np.asarray(starts)).astype(np.float64)


def block_diag_norms(diag, starts) -> np.ndarray:
    """N_l = ‖diag(L)_[l]‖₂."""
    sq = np.asarray(diag, dtype=np.float64) ** 2
    return np.sqrt(np.add.reduceat(sq, np.asarray(starts[:-1])))


def block_budget(steps_l, starts, active_l=None) -> float:
    """Σ_l (Δ_l^{-2} + √d_l Δ_l^{-1}) over the (active) blocks."""
    s = np.asarray(steps_l, dtype=np.float64)
    dl = block_sizes(starts)
    terms = s ** -2 + np.sqrt(dl) / s
    return float(terms.sum() if active_l is None else terms[active_l].sum())


def block_constants(steps_l, starts, diag) -> tuple[float, float]:
    """(ω, L̃) = (max_l min(d_l Δ_l², √d_l Δ_l), max_l Δ_l N_l) over blocks with N_l > 0."""
    s = np.asarray(steps_l, dtype=np.float64)
    dl = block_sizes(starts)
    N = block_diag_norms(diag, starts)
    act = N > 0
    if not act.any():
        return 0.0, 0.0
    om = np.minimum(dl * s * s, np.sqrt(dl) * s)[act].max()
    return float(om), float((s * N)[act].max())


def uniform_block_step(starts, budget: float) -> float:
    """Δ with Δ^{-2} + √d_b Δ^{-1} = budget/B for the largest block d_b (so the total ≤ budget)."""
    B = len(starts) - 1
    db = float(block_sizes(starts).max())
    c = budget / B
    return (math.sqrt(db) + math.sqrt(db + 4.0 * c)) / (2.0 * c)


def block_steps_dcgd(diag, starts, budget: float) -> np.ndarray:
    """DCGD+ block steps Δ_l = δ/N_l (`spec/smoothness.md` §5.3); 1 on blocks with N_l = 0."""
    d = float(starts[-1])
    N = block_diag_norms(diag, starts)
    dl = block_sizes(starts)
    T1 = np.linalg.norm(diag) / math.sqrt(d)
    TB = float(np.sum(np.sqrt(dl) * N)) / d
    delta = d * TB / budget + math.sqrt(d / budget) * T1
    return np.where(N > 0, delta / np.where(N > 0, N, 1.0), 1.0)


def block_steps_diana(diag, starts, budget: float, n: int, mu: float) -> np.ndarray:
    """DIANA+ block steps Δ_l = δ/A_l (`spec/smoothness.md` §5.3; μ = 0: the μ → 0 limit)."""
    d = float(starts[-1])
    N = block_diag_norms(diag, starts)
    dl = block_sizes(starts)
    if mu > 0:
        A = np.sqrt(dl) + N / (n * mu)
        T1 = 1.0 + np.linalg.norm(diag) / (n * mu * math.sqrt(d))
    else:
        A = N / n
        T1 = np.linalg.norm(diag) / (n * math.sqrt(d))
    TB = float(np.sum(np.sqrt(dl) * A)) / d
    c = budget
    delta = d * TB / (2 * c) + math.sqrt(d * d * TB * TB / (4 * c * c) + d * T1 * T1 / c)
    return np.where(A > 0, delta / np.where(A > 0, A, 1.0), 1.0)


class _Blocks(EODither):
    """Common parts: the number of blocks (0 = the number of workers, resolved for a run)."""

    def _init(self) -> None:
        super()._init()
        self._B_run = None

    def n_blocks(self) -> int | None:
        return self._params["blocks"] or self._B_run

    def _validate(self, d: int) -> None:
        B = self.n_blocks()
        if B is not None and B > d:
            block_starts(d, B, self.name)

    def _resolve(self, d: int, n_workers: int) -> dict:
        B = self._params["blocks"] or int(n_workers)
        block_starts(int(d), B, self.name)           # ConfigError if B > d
        return {"_B_run": B}

    def for_run(self, *, d: int, n_workers: int):
        b = copy.copy(self)
        b._cache = {}
        for k, v in self._resolve(d, n_workers).items():
            setattr(b, k, v)
        return b

    def _starts(self, d: int, n: int | None = None) -> np.ndarray:
        return block_starts(d, self._params["blocks"] or n or self.n_blocks() or 1, self.name)

    def budget(self, d: int, n: int) -> float:
        return self._params.get("budget", 0.0) or d / n


class BlockDither(_Blocks):
    """Block quantization with a uniform step per block (the papers' "block quant")."""

    name = "block-dither"
    description = ("block quantization: B blocks (0 = n workers), uniform step 1/s, Elias-omega coded "
                   "(Wang et al. 2022 'block quant'); s=0: floor(sqrt(d)/n) with dcgd/diana, the budget-matched "
                   "uniform block step with dcgd+/diana+; omega = max_l min(d_l/s^2, sqrt(d_l)/s); "
                   "bits F*B + sum(|EO(gap)| + 1 + |EO(level)|)")
    PARAMS = (
        Param("blocks", int, 0, low=0, in_spec="nondefault", doc="number of blocks B; 0 = number of workers"),
        Param("s", int, 0, low=0, in_spec="nondefault",
              doc="levels per block (step 1/s); 0 = auto from d and the number of workers n"),
        Param("p", float, math.inf, choices=(2, math.inf), doc="norm used for each block's scale"),
        FP64_PARAM,
    )

    def _init(self) -> None:
        super()._init()
        self._s_run = None

    def _resolve(self, d, n_workers):
        out = super()._resolve(d, n_workers)
        out["_s_run"] = self._params["s"] or max(1, math.isqrt(int(d)) // int(n_workers))
        return out

    def levels(self) -> int | None:
        return self._params["s"] or self._s_run

    def omega(self, d: int) -> float:
        s, B = self.levels(), self.n_blocks()
        if s is None or B is None:
            raise ConfigError("block-dither with s=0 or blocks=0 (auto) needs the number of workers; it is "
                              "resolved inside a run; give s and blocks explicitly to use it alone")
        db = block_sizes(block_starts(d, B, self.name)).max()
        return float(min(db / s**2, math.sqrt(db) / s))

    def _default_layout(self, d: int):
        return self._starts(d), np.full(d, 1.0 / (self.levels() or 1))

    def uniform_step(self, starts, d: int, n: int) -> float:
        s = self._params["s"]
        return float(float32_up(1.0 / s if s else uniform_block_step(starts, self.budget(d, n)))[0])

    def smoothness_bind(self, diag, *, d, n, mu, method):
        starts = self._starts(d, n)
        step = self.uniform_step(starts, d, n)
        steps_l = np.full(len(starts) - 1, step)
        om, lt = block_constants(steps_l, starts, diag)
        return self._bind(d, starts, np.full(d, step), omega_i=om, ltilde_i=lt, setup_params=np.zeros(0),
                          block_steps=steps_l)

    def smoothness_from_setup(self, params, *, d, n):
        starts = self._starts(d, n)
        return self._bind(d, starts, np.full(d, self.uniform_step(starts, d, n)))


class BlockQuantPlus(_Blocks):
    """Block quantization with smoothness-aware block steps (the papers' "block quant+")."""

    name = "block-quant+"
    aware = True
    description = ("smoothness-aware block quantization (Wang et al. 2022 'block quant+'), only with dcgd+/diana+: "
                   "B blocks (0 = n workers), step delta/N_l (dcgd+) or delta/A_l (diana+) within the budget "
                   "sum_l(step_l^-2 + sqrt(d_l)/step_l) <= budget (0 = d/n); omega = max_l min(d_l step_l^2, "
                   "sqrt(d_l) step_l), L~ = max_l step_l N_l; bits F*B + sum(|EO(gap)| + 1 + |EO(level)|)")
    PARAMS = (
        Param("blocks", int, 0, low=0, in_spec="nondefault", doc="number of blocks B; 0 = number of workers"),
        Param("budget", float, 0.0, low=0.0, in_spec="nondefault",
              doc="sum_l(step_l^-2 + sqrt(d_l)/step_l) target; 0 = d/n"),
        Param("p", float, math.inf, choices=(2, math.inf), doc="norm used for each block's scale"),
        *MATRIX_PARAMS,
        FP64_PARAM,
    )

    def omega(self, d: int) -> float:
        if self._bound is None:
            raise self._not_bound()
        return self.omega_i

    def _default_layout(self, d: int):
        return self._starts(d), np.ones(d)

    def smoothness_bind(self, diag, *, d, n, mu, method):
        diag = np.asarray(diag, dtype=np.float64)
        starts = self._starts(d, n)
        c = self.budget(d, n)
        if method == "dcgd":
            steps_l = block_steps_dcgd(diag, starts, c)
        else:
            steps_l = block_steps_diana(diag, starts, c, n, mu)
        steps_l = float32_up(steps_l)
        om, lt = block_constants(steps_l, starts, diag)
        return self._bind(d, starts, np.repeat(steps_l, np.diff(starts)), omega_i=om, ltilde_i=lt,
                          setup_params=steps_l, block_steps=steps_l)

    def smoothness_from_setup(self, params, *, d, n):
        starts = self._starts(d, n)
        if params.shape != (len(starts) - 1,):
            raise PayloadError(f"{self.name}: set-up message has {params.size} block steps, "
                               f"expected {len(starts) - 1}")
        return self._bind(d, starts, np.repeat(params, np.diff(starts)))
