"""Data sets and partitions: LIBSVM reader, built-in real data, synthetic generators, partitioners.

Everything here is deterministic and MPI-free: every rank calls :func:`load` and :func:`partition`
with the same arguments and gets the same result, then keeps its own shard with
:meth:`Dataset.subset`. See ``docs/data.md`` for the user-facing description.

>>> from hpcgc import data
>>> ds = data.load("breast-cancer")
>>> parts = data.partition(ds, 4, "label-sorted")
>>> shard = ds.subset(parts[rank])

Data set specifications accepted by :func:`load`:

* a built-in name (``breast-cancer``, ``digits``), read from the data bundled with scikit-learn,
  every feature min-max scaled to [-1, 1];
* ``libsvm:<path>[,key=value...]`` (or just an existing path): a LIBSVM/svmlight file, read with
  :func:`sklearn.datasets.load_svmlight_file`; ``.gz``/``.bz2`` files are decompressed;
* ``synthetic:<kind>[,key=value...]`` with kind ``logreg``, ``ridge`` or ``multiclass`` (dense),
  or ``sparse`` (sparse high-dimensional, Zipf feature frequencies: :mod:`hpcgc.data.sparse`).

User mistakes raise :class:`~hpcgc.errors.ConfigError` (bad name, option or value) or
:class:`~hpcgc.errors.DataError` (missing/unreadable/malformed file, impossible partition).
"""

from __future__ import annotations

# test_startup compares these with scikit-learn's loaders
from .builtins import _load_breast_cancer as _load_breast_cancer
from .builtins import _load_digits as _load_digits
from .dataset import Dataset
from .generators import MAX_SYNTHETIC_VALUES, SYNTHETIC_KINDS, SYNTHETIC_PREFIX, generate_synthetic
from .partitions import (
    MAX_DIRICHLET_CLASSES,
    describe_partitions,
    needs_rows,
    partition,
    partition_schemes,
    skew_volumes,
)
from .readers import LIBSVM_PREFIX
from .sparse import SparseGenerator, zipf_exponent
from .specs import available, check_spec, describe, load, sparse_generator

__all__ = [
    "LIBSVM_PREFIX",
    "MAX_DIRICHLET_CLASSES",
    "MAX_SYNTHETIC_VALUES",
    "SYNTHETIC_KINDS",
    "SYNTHETIC_PREFIX",
    "Dataset",
    "SparseGenerator",
    "available",
    "check_spec",
    "describe",
    "describe_partitions",
    "generate_synthetic",
    "load",
    "needs_rows",
    "partition",
    "partition_schemes",
    "skew_volumes",
    "sparse_generator",
    "zipf_exponent",
]
