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


@njit(cache=True)
def shifted_step_sum(x, h, v, total, scale, one, gamma, alpha, beta):
    """:func:`shifted_step` from an Allreduce's dense sum instead of the aggregate m: in place, with
    m_i = 0.0 + scale·total_i (numpy's ``m[:] = 0; m += scale * total``, the product in the sum's
    own type — float32 for the float32 wire, as numpy multiplies a float32 array by a Python
    float; ``one``: scale is 1 and numpy adds the sum itself), without writing m: one pass reads
    the sum, x, h, v and writes x, v, h — instead of zeroing m, adding the sum into it and the
    five-vector step. The same bits as numpy + :func:`shifted_step` (``tests/test_step_kernels.py``)."""
    for i in range(x.shape[0]):
        if one:
            mi = 0.0 + float(total[i])
        else:
            mi = 0.0 + float(scale * total[i])
        if beta != 0.0:
            vi = (v[i] * beta + h[i]) + mi
        else:
            vi = h[i] + mi
        v[i] = vi
        x[i] = x[i] - vi * gamma
        if alpha != 0.0:
            h[i] = h[i] + mi * alpha


@njit(cache=True)
def plain_step_sum(x, total, scale, one, gamma):
    """DCGD's step from an Allreduce's dense sum (α = 0, β = 0: h ≡ +0.0, v unread): x_i ←
    x_i − (h_i + m_i)·γ = x_i − m_i·γ with m_i = 0.0 + scale·total_i as in :func:`shifted_step_sum`
    (h_i + m_i = m_i exactly: m_i is never −0.0, since 0.0 + (±0) = +0.0). Reads the sum and x,
    writes x: 20 bytes per coordinate on a float32 wire, the mathematics' own (``hpcgc.traffic``)."""
    for i in range(x.shape[0]):
        if one:
            mi = 0.0 + float(total[i])
        else:
            mi = 0.0 + float(scale * total[i])
        x[i] = x[i] - mi * gamma


def warm() -> None:
    """Load (or compile) the kernels before a run's timed loop (:func:`hpcgc.run.experiment.warm_jit`)."""
    a = np.zeros(1)
    shifted_step(a, a.copy(), a.copy(), a.copy(), 1.0, 1.0, 0.5)
    for dt in (np.float32, np.float64):
        step_from_sum(a, a.copy(), a.copy(), np.zeros(1, dtype=dt), 0.5, 1.0, 1.0, 0.5, True)
        step_from_sum(a, a.copy(), a.copy(), np.zeros(1, dtype=dt), 0.5, 1.0, 0.0, 0.0, False)


def step_from_sum(x, h, v, total, scale: float, gamma: float, alpha: float, beta: float, shifts: bool) -> None:
    """The DIANA/DCGD step from an Allreduce's dense sum (the scale in the sum's type, as numpy's
    ``scale * total``): :func:`plain_step_sum` for DCGD without momentum (``shifts`` False, β = 0:
    neither h nor v is read or written — v is read only when β ≠ 0), else :func:`shifted_step_sum`."""
    s, one = total.dtype.type(scale), scale == 1.0
    if not shifts and alpha == 0.0 and beta == 0.0:
        plain_step_sum(x, total, s, one, gamma)
    else:
        shifted_step_sum(x, h, v, total, s, one, gamma, alpha, beta)


@njit(cache=True)
def step_at(x, m, idx):
    """x_j ← x_j − m_j, then m_j ← 0, at the indices ``idx`` only (repeats allowed: a second visit
    subtracts +0.0, which changes no float64's bits): EF's step from sparse messages (Karimireddy
    et al. 2019, Alg. 2, x ← x − Σ_i w_i C(e_i)) decoded into the zero scratch m. Elsewhere m_j is
    +0.0 and x_j − 0.0 = x_j bit for bit, so this is the dense ``x -= m; m[:] = 0`` at the touched
    entries only (``tests/test_step_kernels.py``)."""
    for i in range(idx.shape[0]):
        j = idx[i]
        x[j] = x[j] - m[j]
        m[j] = 0.0
