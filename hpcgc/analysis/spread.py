"""The spread of repeated measurements: the median and a distribution-free 95 % interval of it.

One way, used by the summary table, the frames (:func:`hpcgc.results.frames.spread_frame`), ``hpcgc report``
and ``hpcgc breakeven``: the interval is the **order-statistics (binomial) confidence interval of
the median** — the pair of order statistics x₍ₗ₎ ≤ x₍ᵤ₎, symmetric in rank, closest around the
median whose coverage P(x₍ₗ₎ ≤ m ≤ x₍ᵤ₎) = Σ_{i=l}^{u−1} C(n, i) 2⁻ⁿ is at least 95 % (Conover,
*Practical Nonparametric Statistics*, 3rd ed., §3.2; the interval Le Boudec, *Performance
Evaluation of Computer and Communication Systems*, 2010, §2.2.1 recommends for benchmark medians).
No distribution is assumed and nothing is random (no bootstrap seed), so the same numbers give the
same interval.

For n < 6 no pair reaches 95 %: the interval is then [min, max] and its **actual** coverage
1 − 2·2⁻ⁿ is reported (n = 3: 75 %, n = 5: 93.75 %); n = 1 has no interval (coverage 0, bounds =
the value). Every result carries its coverage so a table can print it.

"Measurably different" (:func:`separated`): the two intervals do not overlap. Two non-overlapping
95 % median intervals mean the medians differ at well below the 5 % level (a conservative test).

Plain numpy and math only (no pandas, no scipy): the summary printed by ``hpcgc run`` uses it on rank 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
"""The interval's target coverage."""


@dataclass(frozen=True)
class Spread:
    """The median of ``n`` finite values and its interval [``lo``, ``hi``] with ``coverage`` (the
    actual probability, under any continuous distribution, that the interval holds the true median)."""

    median: float
    lo: float
    hi: float
    n: int
    coverage: float

    def __str__(self) -> str:
        return format_spread(self)


def _coverage(n: int, lo: int) -> float:
    """P(x₍lo₎ ≤ m ≤ x₍n−lo₎) for 1-based order statistics lo and n+1−lo: Σ_{i=lo}^{n−lo} C(n,i)/2ⁿ."""
    return sum(math.comb(n, i) for i in range(lo, n - lo + 1)) / 2.0 ** n


def order_ranks(n: int, level: float = LEVEL) -> tuple[int, int, float]:
    """(l, u, coverage): 1-based ranks of the narrowest symmetric order-statistics interval of the
    median of ``n`` values with coverage >= ``level``, or (1, n, its coverage) when none reaches it."""
    if n < 1:
        raise ValueError("no values")
    best = 1
    for lo in range(1, n // 2 + 1):
        if _coverage(n, lo) >= level:
            best = lo
        else:
            break
    return best, n + 1 - best, (_coverage(n, best) if n > 1 else 0.0)


def spread(values, level: float = LEVEL) -> Spread:
    """Median and order-statistics interval of the finite entries of ``values`` (NaN: a run that did
    not reach its target, left out; all NaN: every field NaN and n = 0)."""
    v = np.sort(np.asarray(values, dtype=float).ravel())
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return Spread(math.nan, math.nan, math.nan, 0, math.nan)
    lo, hi, cov = order_ranks(n, level)
    return Spread(float(np.median(v)), float(v[lo - 1]), float(v[hi - 1]), n, cov)


def separated(a: Spread, b: Spread) -> bool:
    """True when the two intervals do not overlap (both need n >= 2): measurably different."""
    if a.n < 2 or b.n < 2:
        return False
    return a.hi < b.lo or b.hi < a.lo


def ratio_interval(num: Spread, den: Spread) -> tuple[float, float]:
    """The interval of num/den from the intervals of positive num and den: [lo/hi, hi/lo]."""
    if not (den.lo > 0 and den.hi > 0):
        return math.nan, math.nan
    return num.lo / den.hi, num.hi / den.lo


def columns(prefix: str, s: Spread) -> dict:
    """``<prefix>_median``, ``_lo``, ``_hi``, ``_n``, ``_coverage``: a Spread as frame columns."""
    return {f"{prefix}_median": s.median, f"{prefix}_lo": s.lo, f"{prefix}_hi": s.hi,
            f"{prefix}_n": s.n, f"{prefix}_coverage": s.coverage}


def format_spread(s: Spread, fmt: str = ".4g") -> str:
    """``1.23 [1.20, 1.31]`` (n = 1: the value alone; n = 0: ``-``)."""
    if s.n == 0:
        return "-"
    if s.n == 1:
        return format(s.median, fmt)
    return f"{format(s.median, fmt)} [{format(s.lo, fmt)}, {format(s.hi, fmt)}]"


def describe(n: int) -> str:
    """One line saying which interval an n-sample column shows."""
    if n <= 1:
        return "one value per point: no interval"
    lo, hi, cov = order_ranks(n)
    if lo == 1:
        return (f"interval = [min, max] of {n} (order statistics; actual coverage {100 * cov:.3g} %: "
                f"fewer than 6 values cannot give 95 %)")
    return f"interval = order statistics {lo} and {hi} of {n} (coverage {100 * cov:.3g} % >= 95 %)"
