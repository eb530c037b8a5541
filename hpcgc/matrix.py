"""Design matrices are dense numpy arrays or scipy.sparse matrices: :func:`issparse` tells them
apart without importing scipy.

A worker rank of a dense data set never needs scipy (``docs/performance.md``, start-up: importing
scipy costs a rank about as much CPU as importing numba). An object can only be a scipy.sparse
matrix once scipy.sparse is imported (unpickling a sparse shard imports it), so scipy is asked only
then; code that builds sparse matrices imports ``scipy.sparse`` where it builds them.
"""
from __future__ import annotations

import sys


def issparse(A) -> bool:
    """``scipy.sparse.issparse(A)``, without importing scipy when no sparse matrix can exist."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(A)
