"""Per-worker compression ratios (fraction of coordinates kept, δ_i) under a communication budget.

This slice implements ``uniform`` (δ_i = δ̄ for every worker). The data-aware allocations of DAGC
(Lu et al., INFOCOM 2023) — ``dagc``, ``dagc-reference``, ``dagc-a`` — register here as well.
"""
from __future__ import annotations

import numpy as np

from .errors import ConfigError


def _uniform(volumes: np.ndarray, budget: float) -> np.ndarray:
    return np.full(volumes.shape, float(budget))


REGISTRY = {
    "uniform": (_uniform, "every worker keeps the same fraction δ̄ = budget of coordinates"),
}


def available() -> list[str]:
    return sorted(REGISTRY)


def describe(name: str) -> str:
    return REGISTRY[name][1]


def check_name(name: str):
    if name not in REGISTRY:
        raise ConfigError(f"unknown allocation {name!r}; available: {', '.join(available())}")


def allocate(name: str, volumes, budget: float) -> np.ndarray:
    """δ_i for workers holding ``volumes`` samples, mean kept fraction ``budget`` ∈ (0, 1]."""
    check_name(name)
    volumes = np.asarray(volumes, dtype=np.float64)
    if volumes.ndim != 1 or volumes.size == 0 or np.any(volumes <= 0):
        raise ConfigError("allocation needs a positive sample count for every worker")
    if not (0.0 < budget <= 1.0):
        raise ConfigError(f"run.budget (mean kept fraction) must be in (0, 1], got {budget!r}")
    return REGISTRY[name][0](volumes, budget)
