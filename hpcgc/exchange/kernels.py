"""numba kernels of the exchanges' own state (the exchanges orchestrate; they call these).

:func:`second_stage_update` is the owner's update of the aggregate's state under
``run.collective = "reduce-scatter"`` (:mod:`.reduce_scatter`, ``docs/methods.md``, "Compressed
reduce-scatter"): D ← D + α₂·(m − S), with m = s₂·C₂(S − D) decoded — one pass over the segment
instead of numpy's three with two temporaries (the same operations in the same order: the same
bits, ``tests/test_reduce_scatter_kernels.py``).
"""
from __future__ import annotations

from numba import njit


@njit(cache=True)
def second_stage_update(D, m, S, alpha):
    """In place: D_i = D_i + α·(m_i − S_i) (numpy's ``D += alpha * (m - S)``), and m_i = 0.0: m is
    all zeros again for the next decode into it (the pass that zeroed it before each decode)."""
    for i in range(D.shape[0]):
        D[i] = D[i] + alpha * (m[i] - S[i])
        m[i] = 0.0
