"""Per-worker compression ratios δ_i (fraction of coordinates kept) or thresholds λ_i under a budget.

DAGC — Lu, Jiang et al., *DAGC: Data-Aware Adaptive Gradient Compression*, IEEE INFOCOM 2023
(extended: IEEE TMC 2024, arXiv 2311.07324); rules as in `spec/dagc.md` §A.5 and
`spec/decisions.md`. p_i = N_i / Σ N_j is worker i's share of the samples.

- ``uniform``        δ_i = δ̄.
- ``dagc``           δ_i = min(1, c·p_i^{2/3}), c by water-filling so that Σ δ_i = n·δ̄: the KKT
                     solution of min Σ p_i²/δ_i² s.t. Σ δ_i = n·δ̄, 0 < δ_i ≤ 1 (§A.5.2).
- ``dagc-reference`` the authors' ``MFL/algo.py: DAGC_R`` exactly as transcribed in §A.5.1 (sort by
                     decreasing p, one "demoted" client chosen by the score φ; no cap at 1).
- ``dagc-a``         thresholds λ_i = λ̄·mean(p^{2/3})/p_i^{2/3} for the hard-threshold compressor,
                     so that mean(1/λ_i) = 1/λ̄ (``DAGC_A``).

The budget is the mean kept fraction δ̄ ∈ (0, 1] (or the mean threshold λ̄ > 0 for ``dagc-a``).
``coordinates_budget`` converts a total number of coordinates per round into δ̄.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError


def _shares(volumes) -> np.ndarray:
    v = np.asarray(volumes, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ConfigError("allocation needs one sample count per worker")
    if np.any(~np.isfinite(v)) or np.any(v <= 0):
        bad = int(np.flatnonzero(~(v > 0))[0]) if np.any(~(v > 0)) else 0
        raise ConfigError(f"allocation needs a positive sample count for every worker; worker {bad} has {v[bad]!r}")
    return v / v.sum()


def uniform(p: np.ndarray, budget: float) -> np.ndarray:
    return np.full(p.shape, float(budget))


def waterfill(p: np.ndarray, budget: float) -> np.ndarray:
    """δ_i = min(1, c·p_i^{2/3}) with Σ δ_i = n·budget (exactly, up to rounding)."""
    n = p.size
    w = p ** (2.0 / 3.0)
    capped = np.zeros(n, dtype=bool)
    total = n * budget
    while True:
        free = ~capped
        c = (total - capped.sum()) / w[free].sum()
        newly = free & (c * w > 1.0)
        if not newly.any():
            break
        capped |= newly
    delta = np.where(capped, 1.0, c * w)
    return delta


def dagc_reference(p: np.ndarray, budget: float) -> np.ndarray:
    """Port of the authors' ``DAGC_R`` (spec §A.5.1), returned in the workers' original order."""
    n = p.size
    if n == 1:
        return np.array([float(budget)])
    order = np.argsort(-p, kind="stable")          # clients sorted by decreasing p
    ps = p[order]
    w = ps ** (2.0 / 3.0)
    W = w.sum()
    # candidate j = n (0-based n-1), reference r = n-1 (0-based n-2)
    j_best, r_best = n - 1, n - 2
    Q_best = (W - w[n - 1]) / w[n - 2]
    phi_best = ps[n - 1] * (1 + Q_best) + ps[n - 2] * Q_best * (1 + Q_best)
    # candidates j = n-1 ... 1 (0-based n-2 ... 0), reference r = n (0-based n-1)
    for j in range(n - 2, -1, -1):
        if ps[j] == ps[j + 1]:
            continue                                # φ = φ_best never wins: strict comparison
        Q = (W - w[j]) / w[n - 1]
        phi = ps[j] * (1 + Q) + ps[n - 1] * Q * (1 + Q)
        if phi < phi_best:
            j_best, r_best, Q_best, phi_best = j, n - 1, Q, phi
    delta_sorted = w / (w[r_best] * (1 + Q_best))
    delta_sorted[j_best] = 1.0 / (1 + Q_best)
    delta_sorted *= n * budget
    out = np.empty(n)
    out[order] = delta_sorted
    return out


def dagc_a(p: np.ndarray, budget: float) -> np.ndarray:
    """Thresholds λ_i = λ̄·mean(p^{2/3}) / p_i^{2/3} (harmonic mean of λ equals λ̄)."""
    w = p ** (2.0 / 3.0)
    return budget * w.mean() / w


REGISTRY = {
    "uniform": (uniform, "ratio", "every worker keeps the same fraction δ̄ = budget"),
    "dagc": (waterfill, "ratio", "DAGC-R, KKT form: δ_i = min(1, c·p_i^(2/3)), Σδ_i = n·δ̄ (water-filling)"),
    "dagc-reference": (dagc_reference, "ratio", "DAGC-R exactly as the authors' code (MFL/algo.py DAGC_R)"),
    "dagc-a": (dagc_a, "threshold", "DAGC-A: thresholds λ_i = λ̄·mean(p^(2/3))/p_i^(2/3) for hard threshold"),
}


def available() -> list[str]:
    return sorted(REGISTRY)


def describe(name: str) -> str:
    return REGISTRY[name][2]


def kind(name: str) -> str:
    """'ratio' (δ_i, for top-k/rand-k) or 'threshold' (λ_i, for the hard-threshold compressor)."""
    check_name(name)
    return REGISTRY[name][1]


def check_name(name: str):
    if name not in REGISTRY:
        raise ConfigError(f"unknown allocation {name!r}; available: {', '.join(available())}")


def check_budget(name: str, budget: float):
    if kind(name) == "threshold":
        if not (budget > 0 and math.isfinite(budget)):
            raise ConfigError(f"allocation {name!r}: run.budget is the mean threshold λ̄ and must be > 0, "
                              f"got {budget!r}")
    elif not (0.0 < budget <= 1.0):
        raise ConfigError(f"allocation {name!r}: run.budget (mean kept fraction δ̄) must be in (0, 1], "
                          f"got {budget!r}")


def allocate(name: str, volumes, budget: float) -> np.ndarray:
    """δ_i (or λ_i for ``dagc-a``) for workers holding ``volumes`` samples."""
    check_budget(name, budget)
    p = _shares(volumes)
    return REGISTRY[name][0](p, float(budget))


def coordinates_budget(total_coordinates: float, n_workers: int, d: int) -> float:
    """Mean kept fraction δ̄ equivalent to ``total_coordinates`` kept per round over all workers."""
    return float(total_coordinates) / (n_workers * d)


def kept_counts(ratios, d: int) -> np.ndarray:
    """k_i = max(1, ⌈δ_i·d⌉), capped at d (a ratio above 1 sends the tensor whole, as DAGC does)."""
    return np.array([min(d, max(1, math.ceil(r * d - 1e-9))) for r in ratios], dtype=np.int64)
