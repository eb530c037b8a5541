"""numba kernels of the algorithms' server steps (the algorithms orchestrate; they call these).

:func:`shifted_step` is the step of DIANA, DCGD (Mishchenko et al. 2019, arXiv 1901.09269,
`spec/diana.md` §B.5) and DIANA+/DCGD+ (Wang, Safaryan, Richtárik 2022, Alg. 1–2), from the
aggregated message m:

    v = β·v + (h + m)   (β = 0: v = h + m),    x ← x − γ·v,    h ← h + α·m

one pass over the five vectors instead of five numpy passes (8 reads and 5 writes of d float64:
the server phase at d = 2²⁰ is memory-bound), with the numpy expressions' operations in the same
order — the same bits (``tests/test_step_kernels.py``). The ℓ1 prox, when any, follows it.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def shifted_step(x, h, v, m, gamma, alpha, beta):
    """In place: v = ((β·v) + h) + m when β ≠ 0, else h + m; x = x − v·γ; h = h + m·α when α ≠ 0."""
    for i in range(x.shape[0]):
        if beta != 0.0:
            vi = (v[i] * beta + h[i]) + m[i]
        else:
            vi = h[i] + m[i]
        v[i] = vi
        x[i] = x[i] - vi * gamma
        if alpha != 0.0:
            h[i] = h[i] + m[i] * alpha


def warm() -> None:
    """Load (or compile) the kernels before a run's timed loop (:func:`hpcgc.run.experiment.warm_jit`)."""
    a = np.zeros(1)
    shifted_step(a, a.copy(), a.copy(), a.copy(), 1.0, 1.0, 0.5)
