"""Segments of a vector under ``run.collective = "reduce-scatter"`` and the constants of the
two-stage compression (no MPI here: the algorithms compute their theory steps from these).

A d-vector is split into n contiguous, balanced segments (the first d mod n have ⌈d/n⌉
coordinates, the others ⌊d/n⌋); segment j belongs to rank j. Each segment is compressed alone by
``C.segment(d, d_seg)`` (:meth:`hpcgc.compressors.base.Compressor.segment`): stage 1 on every
worker, stage 2 on the owner after it summed its segment's n pieces (CGX, Markov et al. 2022;
DeepSpeed's compressed Allreduce for 1-bit Adam, Tang et al. 2021).

Constants (derivations: ``docs/methods.md``, "Compressed reduce-scatter"):

* one stage, segment-wise: independent segments give E‖C(x) − x‖² = Σ_j E‖C_j(x_j) − x_j‖² ≤
  max_j ω(d_j)·‖x‖², so ω_seg = max_j ω(d_j) (and δ_seg = min_j δ(d_j));
* two independent unbiased stages, S the weighted mean of the C₁(Δ_i), Δ̄ the mean of the Δ_i:
  E‖C₂(S) − Δ̄‖² ≤ ω₂‖Δ̄‖² + (1 + ω₂)(ω₁/n²)Σ_i‖Δ_i‖² ≤ (ω_c/n)·(1/n)Σ_i‖Δ_i‖² with
  ω_c = n·ω₂ + (1 + ω₂)·ω₁ (:func:`composed_omega`) — the ω that replaces "ω" in the ω/n of the
  unbiased methods' steps (DCGD, DIANA, MARINA);
* two contractive stages with error feedback at both: δ_c = δ₁·δ₂ (:func:`composed_delta`),
  exact for coordinate restrictions (top-k, threshold: ‖x − P₂P₁x‖² = ‖x‖² − ‖P₂P₁x‖² ≤
  (1 − δ₁δ₂)‖x‖²), used by EF and EF21.
"""
from __future__ import annotations

from ..errors import ConfigError


def bounds(d: int, n: int) -> list[tuple[int, int]]:
    """[(a_j, b_j)] of the n balanced contiguous segments of range(d); ConfigError if d < n."""
    if d < n:
        raise ConfigError(f"run.collective = 'reduce-scatter' splits the vector into one segment per rank: "
                          f"d = {d} is smaller than the {n} ranks; use fewer ranks or 'allgather'")
    q, r = divmod(d, n)
    out, a = [], 0
    for j in range(n):
        b = a + q + (1 if j < r else 0)
        out.append((a, b))
        a = b
    return out


def lengths(d: int, n: int) -> set[int]:
    """The distinct segment lengths (one or two)."""
    return {b - a for a, b in bounds(d, n)}


def segment_compressors(comp, d: int, n: int) -> list:
    """[C_j]: the compressor of each segment (ConfigError if ``comp`` has no segment-wise form)."""
    out = []
    for a, b in bounds(d, n):
        c = comp.segment(d, b - a)
        c.validate(b - a)
        out.append(c)
    return out


def segment_omega(comp, d: int, n: int) -> float | None:
    """ω of the segment-wise compressor of a d-vector: max_j ω(d_j) (None if biased)."""
    oms = [c.omega(b - a) for c, (a, b) in zip(segment_compressors(comp, d, n), bounds(d, n))]
    return None if any(o is None for o in oms) else float(max(oms))


def composed_omega(omega1: float, omega2: float, n: int) -> float:
    """ω_c with E‖C₂(S) − Δ̄‖² ≤ (ω_c/n)·(1/n)Σ‖Δ_i‖²: n·ω₂ + (1 + ω₂)·ω₁ (module doc)."""
    return n * omega2 + (1.0 + omega2) * omega1


def composed_delta(delta1: float, delta2: float) -> float:
    """δ_c = δ₁·δ₂ of two contractive stages with error feedback on both (module doc)."""
    return delta1 * delta2
