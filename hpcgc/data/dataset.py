"""The :class:`Dataset`: a design matrix, its labels, shards (:meth:`Dataset.subset`) and a
stable fingerprint."""

from __future__ import annotations

import hashlib

import numpy as np

from hpcgc.errors import DataError
from hpcgc.matrix import issparse


class Dataset:
    """A design matrix ``X`` (n_samples × n_features) and raw labels/targets ``y`` (float64).

    ``X`` is a :class:`scipy.sparse.csr_matrix` (float64, sorted indices) for LIBSVM input and a
    C-contiguous float64 :class:`numpy.ndarray` for built-in and synthetic data.

    Attributes
    ----------
    name : str
        Short name: the built-in name, the LIBSVM file's base name, or the fully resolved
        ``synthetic:...`` string.
    source : str
        Canonical specification that reloads the same data (absolute path for LIBSVM files).
    groups : numpy.ndarray or None
        Per-row generator cluster (synthetic data only), carried over by :meth:`subset`.
    """

    def __init__(self, X, y, name, *, source=None, classes=None, groups=None):
        if issparse(X):
            import scipy.sparse as sp
            X = sp.csr_matrix(X, dtype=np.float64)
            if not X.has_sorted_indices:
                X.sort_indices()
        else:
            X = np.ascontiguousarray(X, dtype=np.float64)
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D, got shape {X.shape}")
        y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape != y.shape:
                raise ValueError("groups must have one entry per row")
        self.X = X
        self.y = y
        self.name = str(name)
        self.source = str(source) if source is not None else self.name
        self.groups = groups
        self._classes = None if classes is None else np.asarray(classes, dtype=np.float64)

    # -- shape ------------------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def is_sparse(self) -> bool:
        return issparse(self.X)

    def __len__(self) -> int:
        return self.n_samples

    def __repr__(self) -> str:
        kind = f"sparse, nnz={self.X.nnz}" if self.is_sparse else "dense"
        return f"Dataset({self.name!r}, {self.n_samples}×{self.n_features}, {kind})"

    # -- labels -----------------------------------------------------------------------------
    @property
    def classes(self) -> np.ndarray:
        """Sorted distinct label values of the *whole* data set (a subset keeps its parent's)."""
        if self._classes is None:
            self._classes = np.unique(self.y)
        return self._classes

    @property
    def n_classes(self) -> int:
        return int(self.classes.shape[0])

    def binary_labels(self) -> np.ndarray:
        """Labels mapped to ±1.0: the smaller of the two label values ↦ −1, the larger ↦ +1.

        Labels already in {−1, +1} stay as they are; mushrooms' 1/2 become −1/+1. Uses the
        classes of the whole data set, so a shard holding a single class is mapped consistently.
        Raises :class:`DataError` naming the data set unless there are exactly two classes.
        """
        classes = self.classes
        if classes.shape[0] != 2:
            shown = ", ".join(f"{c:g}" for c in classes[:5])
            if classes.shape[0] > 5:
                shown += ", ..."
            raise DataError(
                f"data set '{self.name}' has {classes.shape[0]} distinct label values ({shown}); "
                "a binary problem needs exactly two classes"
            )
        return np.where(self.y == classes[1], 1.0, -1.0)

    def label_counts(self, classes=None) -> np.ndarray:
        """Number of rows per class, in the order of ``classes`` (default: :attr:`classes`)."""
        classes = self.classes if classes is None else np.asarray(classes, dtype=np.float64)
        pos = np.searchsorted(classes, self.y)
        ok = (pos < classes.shape[0]) & (classes[np.minimum(pos, classes.shape[0] - 1)] == self.y)
        return np.bincount(pos[ok], minlength=classes.shape[0]).astype(np.int64)

    # -- geometry ---------------------------------------------------------------------------
    def row_norms(self, squared: bool = False) -> np.ndarray:
        """Euclidean norm of every row (float64)."""
        if self.is_sparse:
            sq = np.asarray(self.X.multiply(self.X).sum(axis=1), dtype=np.float64).reshape(-1)
        else:
            sq = np.einsum("ij,ij->i", self.X, self.X)
        return sq if squared else np.sqrt(sq)

    # -- identity ---------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Stable hash (16 hex digits of SHA-256) of the name, X and y.

        Sparse X is hashed in canonical CSR form (data, indices and indptr as little-endian
        float64/int64), dense X as its C-order float64 bytes. Independent of platform, process,
        index dtype and load path; recomputed on each access (milliseconds for typical data).
        """
        h = hashlib.sha256()
        h.update(b"hpcgc-dataset-v1\0")
        h.update(self.name.encode("utf-8") + b"\0")
        h.update(np.asarray(self.X.shape, dtype="<i8").tobytes())
        if self.is_sparse:
            X = self.X
            if not X.has_canonical_format:
                X = X.copy()
                X.sum_duplicates()
            h.update(b"csr\0")
            h.update(np.ascontiguousarray(X.indptr, dtype="<i8"))
            h.update(np.ascontiguousarray(X.indices, dtype="<i8"))
            h.update(np.ascontiguousarray(X.data, dtype="<f8"))
        else:
            h.update(b"dense\0")
            h.update(np.ascontiguousarray(self.X, dtype="<f8"))
        h.update(b"y\0")
        h.update(np.ascontiguousarray(self.y, dtype="<f8"))
        return h.hexdigest()[:16]

    # -- shards -----------------------------------------------------------------------------
    def subset(self, rows) -> Dataset:
        """The rows ``rows`` (integer indices, in the given order, or a boolean mask).

        Keeps the type of ``X`` (sparse stays CSR), the name, the source, the parent's classes
        and the synthetic groups.
        """
        rows = np.asarray(rows)
        if rows.dtype == bool:
            if rows.shape != (self.n_samples,):
                raise IndexError("boolean row mask must have one entry per row")
            rows = np.flatnonzero(rows)
        elif rows.size == 0:
            rows = np.zeros(0, dtype=np.int64)
        elif not np.issubdtype(rows.dtype, np.integer):
            raise TypeError(f"row indices must be integers, got dtype {rows.dtype}")
        rows = rows.reshape(-1)
        if rows.size and (rows.min() < -self.n_samples or rows.max() >= self.n_samples):
            raise IndexError(f"row index out of range for {self.n_samples} rows")
        X = self.X[rows]
        if not self.is_sparse:
            X = np.ascontiguousarray(X)
        return Dataset(
            X,
            self.y[rows],
            self.name,
            source=self.source,
            classes=self.classes,
            groups=None if self.groups is None else self.groups[rows],
        )
