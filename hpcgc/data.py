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
* ``synthetic:<kind>[,key=value...]`` with kind ``logreg``, ``ridge`` or ``multiclass``.

User mistakes raise :class:`~hpcgc.errors.ConfigError` (bad name, option or value) or
:class:`~hpcgc.errors.DataError` (missing/unreadable/malformed file, impossible partition).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import math
import numbers
import os
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from hpcgc.errors import ConfigError, DataError

__all__ = [
    "Dataset",
    "available",
    "describe",
    "describe_partitions",
    "load",
    "partition",
    "partition_schemes",
    "skew_volumes",
]

LIBSVM_PREFIX = "libsvm:"
SYNTHETIC_PREFIX = "synthetic:"

#: Largest number of distinct label values a ``dirichlet`` partition accepts.
MAX_DIRICHLET_CLASSES = 1000
#: Largest n × d a synthetic generator accepts (8 GB of float64); catches typos such as n=1e12.
MAX_SYNTHETIC_VALUES = 1_000_000_000


# ---------------------------------------------------------------------------------------------
# Dataset
# ---------------------------------------------------------------------------------------------


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
        if sp.issparse(X):
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
        return sp.issparse(self.X)

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


# ---------------------------------------------------------------------------------------------
# Option parsing
# ---------------------------------------------------------------------------------------------


def _parse_int(key, text, context, minimum=None):
    t = text.strip()
    try:
        value = int(t)
    except ValueError:
        try:
            f = float(t)
        except ValueError:
            f = math.nan
        if not (math.isfinite(f) and f == int(f)):
            raise ConfigError(f"{context}: option {key} must be an integer, got {text!r}") from None
        value = int(f)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{context}: option {key} must be >= {minimum}, got {value}")
    return value


def _parse_float(key, text, context, lo=None, hi=None):
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{context}: option {key} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{context}: option {key} must be finite, got {text!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ConfigError(f"{context}: option {key} must be in {rng}, got {value:g}")
    return value


def _split_options(tokens, allowed, context):
    """``['k=v', ...]`` → dict, rejecting unknown or repeated keys and tokens without '='."""
    out = {}
    for tok in tokens:
        tok = tok.strip()
        if not tok:
            continue
        if "=" not in tok:
            raise ConfigError(f"{context}: expected key=value, got {tok!r}")
        key, value = tok.split("=", 1)
        key = key.strip().lower().replace("-", "_")
        if key not in allowed:
            raise ConfigError(
                f"{context}: unknown option {key!r} (valid options: {', '.join(sorted(allowed))})"
            )
        if key in out:
            raise ConfigError(f"{context}: option {key!r} given twice")
        out[key] = value.strip()
    return out


_ROWSCALE = ("none", "maxabs", "l2")


def _parse_rowscale(text, context):
    v = text.strip().lower()
    if v not in _ROWSCALE:
        raise ConfigError(
            f"{context}: option rowscale must be one of {', '.join(_ROWSCALE)}, got {text!r}"
        )
    return v


def _apply_rowscale(X, how):
    """Divide every row by its max |value| (``maxabs``) or Euclidean norm (``l2``); zero rows stay."""
    if how == "none":
        return X
    if sp.issparse(X):
        X = X.copy()
        if how == "maxabs":
            scale = np.asarray(abs(X).max(axis=1).todense(), dtype=np.float64).reshape(-1)
        else:
            scale = np.sqrt(np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).reshape(-1))
        scale[scale == 0] = 1.0
        X.data /= np.repeat(scale, np.diff(X.indptr))
        return X
    if how == "maxabs":
        scale = np.abs(X).max(axis=1) if X.shape[1] else np.ones(X.shape[0])
    else:
        scale = np.sqrt(np.einsum("ij,ij->i", X, X))
    scale = np.where(scale == 0, 1.0, scale)
    return np.ascontiguousarray(X / scale[:, None])


# ---------------------------------------------------------------------------------------------
# Built-in data sets (bundled with scikit-learn: work offline)
# ---------------------------------------------------------------------------------------------


def _minmax_scale(X):
    """Scale each column to [-1, 1] (min ↦ -1, max ↦ +1), like LIBSVM's ``svm-scale``; constant
    columns become 0."""
    X = np.asarray(X, dtype=np.float64)
    lo = X.min(axis=0)
    hi = X.max(axis=0)
    span = hi - lo
    const = span == 0
    out = 2.0 * (X - lo) / np.where(const, 1.0, span) - 1.0
    out[:, const] = 0.0
    return np.ascontiguousarray(np.clip(out, -1.0, 1.0))


def _sklearn_bundled(name: str) -> Path | None:
    """A data file shipped with scikit-learn (``sklearn/datasets/data/<name>``), found without
    importing scikit-learn: importing it takes longer than reading the file (``docs/performance.md``).
    None if scikit-learn is not installed or the file has moved."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("sklearn")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(loc) / "datasets" / "data" / name
        if path.is_file():
            return path
    return None


def _load_breast_cancer():
    """scikit-learn's ``load_breast_cancer(return_X_y=True)``, read from its bundled CSV (a header
    ``569,30,malignant,benign``, then 30 features and the 0/1 target per row)."""
    path = _sklearn_bundled("breast_cancer.csv")
    if path is None:
        from sklearn.datasets import load_breast_cancer
        return load_breast_cancer(return_X_y=True)
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, encoding="utf-8")
    return np.ascontiguousarray(table[:, :-1]), table[:, -1].astype(int)


def _load_digits():
    """scikit-learn's ``load_digits(return_X_y=True)``, read from its bundled ``digits.csv.gz``
    (64 pixel values and the target per row)."""
    path = _sklearn_bundled("digits.csv.gz")
    if path is None:
        from sklearn.datasets import load_digits
        return load_digits(return_X_y=True)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float64)
    return table[:, :-1], table[:, -1].astype(int)


_BUILTINS = {
    "breast-cancer": (
        _load_breast_cancer,
        (
            "Wisconsin diagnostic breast cancer (scikit-learn bundled): 569 × 30, labels 0/1 "
            "(malignant/benign), features min-max scaled to [-1, 1]"
        ),
    ),
    "digits": (
        _load_digits,
        (
            "UCI handwritten digits 8×8 (scikit-learn bundled): 1797 × 64, labels 0-9, "
            "features min-max scaled to [-1, 1]"
        ),
    ),
}


def _load_builtin(key, tokens):
    context = f"data set {key!r}"
    opts = _split_options(tokens, {"rowscale"}, context)
    rowscale = _parse_rowscale(opts.get("rowscale", "none"), context)
    loader, _ = _BUILTINS[key]
    X, y = loader()
    X = _apply_rowscale(_minmax_scale(X), rowscale)
    source = key if rowscale == "none" else f"{key},rowscale={rowscale}"
    return Dataset(X, np.asarray(y, dtype=np.float64), key, source=source)


# ---------------------------------------------------------------------------------------------
# LIBSVM / svmlight files
# ---------------------------------------------------------------------------------------------

_LIBSVM_OPTIONS = {"n_features", "zero_based", "rowscale"}


def _open_data_file(path):
    """Open like scikit-learn does: by extension, binary mode."""
    suffix = Path(path).suffix
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.BZ2File(path, "rb")
    return open(path, "rb")


def _short(token, limit=40):
    text = token.decode("utf-8", "replace") if isinstance(token, bytes) else str(token)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _data_tokens(raw):
    """The whitespace-separated tokens of one line with its '#' comment removed (as sklearn)."""
    hash_pos = raw.find(b"#")
    if hash_pos >= 0:
        raw = raw[:hash_pos]
    return raw.split()


def _check_line(parts, zero_based):
    """What is wrong with one non-empty data line, or None. Mirrors sklearn's parser, plus
    finiteness checks."""
    label = parts[0]
    try:
        value = float(label)
    except ValueError:
        return f"label {_short(label)} is not a number"
    if not math.isfinite(value):
        return f"label {_short(label)} is not finite"
    feats = parts[1:]
    if feats and feats[0].startswith(b"qid"):
        if b":" not in feats[0]:
            return f"bad query id token {_short(feats[0])} (expected qid:<int>)"
        feats = feats[1:]
    prev = -1
    for tok in feats:
        if b":" not in tok:
            return f"feature token {_short(tok)} is not of the form index:value"
        idx_s, val_s = tok.split(b":", 1)
        try:
            idx = int(idx_s)
        except ValueError:
            return f"feature index {_short(idx_s)} in {_short(tok)} is not an integer"
        if idx < 0 or (not zero_based and idx == 0):
            return f"invalid feature index {idx} in {_short(tok)}"
        if idx >= 2**31:
            return f"feature index {idx} is too large"
        if idx <= prev:
            return f"feature indices must be increasing and unique: {idx} after {prev}"
        try:
            v = float(val_s)
        except ValueError:
            return f"feature value {_short(val_s)} in {_short(tok)} is not a number"
        if not math.isfinite(v):
            return f"feature value in {_short(tok)} is not finite"
        prev = idx
    return None


def _first_bad_line(path, zero_based):
    """(line number, message) of the first malformed line, or (None, None). Error path only."""
    with _open_data_file(path) as f:
        for lineno, raw in enumerate(f, 1):
            parts = _data_tokens(raw)
            if not parts:
                continue
            what = _check_line(parts, zero_based)
            if what is not None:
                return lineno, what
    return None, None


def _line_of_row(path, row):
    """1-based line number of data row ``row`` (0-based; blank and comment lines skipped)."""
    seen = -1
    with _open_data_file(path) as f:
        for lineno, raw in enumerate(f, 1):
            if _data_tokens(raw):
                seen += 1
                if seen == row:
                    return lineno
    return None


def _display_path(given, path):
    shown = str(given)
    if not os.path.isabs(shown):
        shown += f" (resolved to {path.resolve()})"
    return shown


def _split_path_and_options(rest):
    """Split ``<path>[,key=value...]``: a path may itself contain commas."""
    if os.path.exists(os.path.expanduser(rest)):
        return rest, []
    parts = rest.split(",")
    fallback = None
    for i in range(1, len(parts)):
        tail = parts[i:]
        if all("=" in t for t in tail):
            head = ",".join(parts[:i])
            if os.path.exists(os.path.expanduser(head)):
                return head, tail
            if fallback is None:
                fallback = (head, tail)
    return fallback if fallback is not None else (rest, [])


def _load_libsvm(path_text, tokens):
    given = os.path.expanduser(path_text.strip())
    context = f"libsvm:{path_text}"
    if not given:
        raise ConfigError("libsvm: needs a file path, e.g. libsvm:data/a9a")
    opts = _split_options(tokens, _LIBSVM_OPTIONS, context)
    n_features = (
        _parse_int("n_features", opts["n_features"], context, minimum=1)
        if "n_features" in opts
        else None
    )
    zb_text = opts.get("zero_based", "auto").lower()
    zb_map = {
        "auto": "auto",
        "true": True,
        "1": True,
        "yes": True,
        "false": False,
        "0": False,
        "no": False,
    }
    if zb_text not in zb_map:
        raise ConfigError(
            f"{context}: option zero_based must be auto, true or false, got {zb_text!r}"
        )
    zero_based = zb_map[zb_text]
    rowscale = _parse_rowscale(opts.get("rowscale", "none"), context)

    path = Path(given)
    shown = _display_path(given, path)
    if not path.exists():
        raise DataError(f"data file not found: {shown}")
    if path.is_dir():
        raise DataError(f"data file is a directory, not a file: {shown}")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise DataError(f"cannot read data file {shown}: {exc.strerror or exc}") from None

    from sklearn.datasets import load_svmlight_file

    parser_zero_based = zero_based is not False  # sklearn's parser sees bool("auto") == True
    try:
        X, y = load_svmlight_file(str(path), dtype=np.float64, zero_based=zero_based)
    except (ValueError, OverflowError, TypeError, IndexError) as exc:
        try:
            lineno, what = _first_bad_line(path, parser_zero_based)
        except (OSError, EOFError, zlib.error):
            lineno, what = None, None
        if lineno is not None:
            raise DataError(f"{shown}:{lineno}: {what}") from None
        raise DataError(f"cannot parse LIBSVM file {shown}: {exc}") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"cannot read data file {shown}: {exc}") from None

    if X.shape[0] == 0:
        raise DataError(f"data file is empty (no data rows): {shown}")
    X = sp.csr_matrix(X)
    y = np.asarray(y, dtype=np.float64)

    # Non-finite values (nan/inf parse as floats): report the first offending line.
    bad_rows = np.flatnonzero(~np.isfinite(y))
    bad_data = np.flatnonzero(~np.isfinite(X.data))
    if bad_data.size:
        row_of_data = np.searchsorted(X.indptr, bad_data[0], side="right") - 1
        bad_rows = np.append(bad_rows, row_of_data)
    if bad_rows.size:
        row = int(bad_rows.min())
        lineno, what = _first_bad_line(path, parser_zero_based)
        if lineno is None:
            lineno, what = _line_of_row(path, row), "value is not finite"
        raise DataError(f"{shown}:{lineno}: {what}")

    if n_features is not None:
        if X.shape[1] > n_features:
            cols_ok = X.indices < n_features
            bad = np.flatnonzero(~cols_ok)[0]
            row = int(np.searchsorted(X.indptr, bad, side="right") - 1)
            lineno = _line_of_row(path, row)
            raise DataError(
                f"{shown}:{lineno}: feature index beyond n_features={n_features} "
                f"(the file has {X.shape[1]} features)"
            )
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))

    # int32 indices when they fit (what scipy picks for new matrices; saves memory).
    if X.nnz < 2**31 and X.shape[1] < 2**31:
        X = sp.csr_matrix(
            (X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape
        )
    X.sort_indices()
    X = _apply_rowscale(X, rowscale)

    source = LIBSVM_PREFIX + str(path.resolve())
    for key in ("n_features", "zero_based", "rowscale"):
        if key in opts:
            source += f",{key}={opts[key]}"
    return Dataset(X, y, path.name, source=source)


# ---------------------------------------------------------------------------------------------
# Synthetic generators
# ---------------------------------------------------------------------------------------------

SYNTHETIC_KINDS = ("logreg", "ridge", "multiclass")

# name -> (default, parser) ; parser(key, text, context) -> value
_SYN_COMMON = {
    "n": 2000,
    "d": 100,
    "hetero": 0.0,
    "seed": 0,
    "clusters": 10,
}
_SYN_EXTRA = {
    "logreg": {"snr": 2.0},
    "ridge": {"noise": 0.1},
    "multiclass": {"classes": 10, "snr": 2.0},
}
#: Cluster scales are 4**(hetero * u_k), u_k ~ U(-1, 1): row norms vary by up to 16x at hetero=1.
SYNTHETIC_SCALE_BASE = 4.0


def _parse_synthetic_options(kind, tokens):
    context = f"synthetic:{kind}"
    allowed = dict(_SYN_COMMON)
    allowed.update(_SYN_EXTRA[kind])
    raw = _split_options(tokens, set(allowed), context)
    opts = {}
    for key, default in allowed.items():
        if key not in raw:
            opts[key] = default
            continue
        text = raw[key]
        if key in ("n", "d", "clusters", "classes"):
            opts[key] = _parse_int(key, text, context, minimum=1)
        elif key == "seed":
            opts[key] = _parse_int(key, text, context, minimum=0)
        elif key == "hetero":
            opts[key] = _parse_float(key, text, context, lo=0.0, hi=1.0)
        else:  # snr, noise
            opts[key] = _parse_float(key, text, context, lo=0.0)
    if "clusters" not in raw:
        opts["clusters"] = min(opts["clusters"], opts["n"])
    if opts["clusters"] > opts["n"]:
        raise ConfigError(
            f"{context}: option clusters={opts['clusters']} exceeds the number of samples n={opts['n']}"
        )
    if kind == "logreg" and opts["n"] < 2:
        raise ConfigError(f"{context}: option n must be >= 2 for two classes, got {opts['n']}")
    if kind == "multiclass" and opts["classes"] < 2:
        raise ConfigError(f"{context}: option classes must be >= 2, got {opts['classes']}")
    if opts["n"] * opts["d"] > MAX_SYNTHETIC_VALUES:
        raise ConfigError(
            f"{context}: n×d = {opts['n']}×{opts['d']} values is too large "
            f"(limit {MAX_SYNTHETIC_VALUES:.0e})"
        )
    return opts


def _synthetic_name(kind, opts):
    parts = []
    for key in ("n", "d", "hetero", "seed", "clusters", *_SYN_EXTRA[kind]):
        v = opts[key]
        parts.append(f"{key}={v!r}" if isinstance(v, float) else f"{key}={v}")
    return SYNTHETIC_PREFIX + kind + "," + ",".join(parts)


def _unit_rows(A):
    norms = np.linalg.norm(A, axis=-1, keepdims=True)
    return A / np.where(norms == 0, 1.0, norms)


def _load_synthetic(rest):
    tokens = rest.split(",")
    kind = tokens[0].strip().lower()
    if kind not in SYNTHETIC_KINDS:
        raise ConfigError(
            f"unknown synthetic kind {tokens[0].strip()!r} (valid kinds: {', '.join(SYNTHETIC_KINDS)})"
        )
    opts = _parse_synthetic_options(kind, tokens[1:])
    X, y, groups = generate_synthetic(kind, **opts)
    name = _synthetic_name(kind, opts)
    return Dataset(X, y, name, source=name, groups=groups)


def generate_synthetic(kind, *, n, d, hetero, seed, clusters, snr=2.0, noise=0.1, classes=10):
    """The synthetic generators (see ``docs/data.md`` for the model). Returns (X, y, cluster).

    Model randomness (cluster means, scales, true weights) comes from the first child of
    ``SeedSequence(seed)`` and sample randomness from the second, so the model does not change
    with n, and the same seed at different ``hetero`` uses the same underlying draws.
    """
    model_ss, sample_ss = np.random.SeedSequence(seed).spawn(2)
    rm = np.random.default_rng(model_ss)
    rs = np.random.default_rng(sample_ss)
    K, h = clusters, hetero

    # Cluster k: mean mu_k = h * g_k, scale s_k = 4**(h * u_k).
    G = rm.standard_normal((K, d))
    U = rm.uniform(-1.0, 1.0, K)
    mu = h * G
    scale = SYNTHETIC_SCALE_BASE ** (h * U)
    # True weights: a shared direction mixed with a per-cluster one, unit norm.
    if kind == "multiclass":
        W0 = _unit_rows(rm.standard_normal((classes, d)))
        V = _unit_rows(rm.standard_normal((K, classes, d)))
        W = _unit_rows((1.0 - h) * W0[None, :, :] + h * V)  # (K, C, d)
    else:
        w0 = _unit_rows(rm.standard_normal(d))
        V = _unit_rows(rm.standard_normal((K, d)))
        W = _unit_rows((1.0 - h) * w0[None, :] + h * V)  # (K, d)

    cluster = (np.arange(n, dtype=np.int64) * K) // n  # rows in cluster order, sizes differ by <= 1
    Z = rs.standard_normal((n, d))
    latent = mu[cluster] + Z  # unscaled features
    X = np.ascontiguousarray(scale[cluster, None] * latent)

    if kind == "logreg":
        margin = snr * np.einsum("ij,ij->i", W[cluster], latent)
        prob = 0.5 * (1.0 + np.tanh(0.5 * margin))  # sigmoid, overflow-free
        u = rs.uniform(size=n)
        y = np.where(u < prob, 1.0, -1.0)
        if np.all(y == y[0]):  # guarantee two classes: flip the least certain sample
            i = int(np.argmin(np.abs(margin)))
            y[i] = -y[i]
    elif kind == "ridge":
        y = np.einsum("ij,ij->i", W[cluster], X) + noise * rs.standard_normal(n)
    else:
        logits = snr * np.einsum("icd,id->ic", W[cluster], latent)
        gumbel = -np.log(-np.log(rs.uniform(np.finfo(float).tiny, 1.0, size=(n, classes))))
        y = np.argmax(logits + gumbel, axis=1).astype(np.float64)
    return X, np.asarray(y, dtype=np.float64), cluster


# ---------------------------------------------------------------------------------------------
# load / available / describe
# ---------------------------------------------------------------------------------------------


def _unknown(spec, extra=""):
    return ConfigError(
        f"unknown data set {spec!r}{extra}: built-in data sets are {', '.join(_BUILTINS)}; "
        f"or use {LIBSVM_PREFIX}<path> for a LIBSVM/svmlight file, or "
        f"{SYNTHETIC_PREFIX}<kind>[,key=value...] with kind {', '.join(SYNTHETIC_KINDS)}"
    )


def check_spec(spec, partition_scheme=None) -> None:
    """Check a data set specification (and a partition scheme) without reading any data: a built-in
    name, a synthetic kind, or a LIBSVM file that exists and is a file. Raises what :func:`load`
    and :func:`partition` would raise for the same mistake."""
    if partition_scheme is not None:
        _parse_scheme(partition_scheme)
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise ConfigError(f"data set must be a name or a path, got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise ConfigError("empty data set name")
    low = text.lower()
    if low.startswith(SYNTHETIC_PREFIX):
        kind = text[len(SYNTHETIC_PREFIX):].split(",")[0].strip().lower()
        if kind not in SYNTHETIC_KINDS:
            raise _unknown(text)
        return
    if low.startswith(LIBSVM_PREFIX):
        path_text, _ = _split_path_and_options(text[len(LIBSVM_PREFIX):])
    else:
        key = text.split(",")[0].strip().lower().replace("_", "-")
        if key in _BUILTINS:
            return
        path_text, _ = _split_path_and_options(text)
        if not os.path.exists(os.path.expanduser(path_text)):
            raise _unknown(text, " (and no file at that path)" if any(c in text for c in "/\\.~") else "")
    given = os.path.expanduser(path_text.strip())
    if not given:
        raise ConfigError("libsvm: needs a file path, e.g. libsvm:data/a9a")
    path = Path(given)
    if not path.exists():
        raise DataError(f"data file not found: {_display_path(given, path)}")
    if path.is_dir():
        raise DataError(f"data file is a directory, not a file: {_display_path(given, path)}")


def load(spec) -> Dataset:
    """Load a data set from a specification string (see the module docstring) or a path."""
    if isinstance(spec, os.PathLike):
        return _load_libsvm(os.fspath(spec), [])
    if not isinstance(spec, str):
        raise ConfigError(f"data set must be a name or a path, got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise ConfigError("empty data set name")
    low = text.lower()
    if low.startswith(LIBSVM_PREFIX):
        path_text, tokens = _split_path_and_options(text[len(LIBSVM_PREFIX) :])
        return _load_libsvm(path_text, tokens)
    if low.startswith(SYNTHETIC_PREFIX):
        return _load_synthetic(text[len(SYNTHETIC_PREFIX) :])
    head, *tokens = text.split(",")
    key = head.strip().lower().replace("_", "-")
    if key in _BUILTINS:
        return _load_builtin(key, tokens)
    path_text, tokens = _split_path_and_options(text)
    if os.path.exists(os.path.expanduser(path_text)):
        return _load_libsvm(path_text, tokens)
    looks_like_path = any(c in text for c in "/\\.~")
    raise _unknown(text, " (and no file at that path)" if looks_like_path else "")


def available() -> list[str]:
    """Built-in names, then the ``libsvm:<path>`` template and the loadable synthetic kinds."""
    return [*_BUILTINS, LIBSVM_PREFIX + "<path>", *(SYNTHETIC_PREFIX + k for k in SYNTHETIC_KINDS)]


def describe() -> list[tuple[str, str]]:
    """(name, one-line description) pairs for ``python -m hpcgc.bench list``."""
    rows = [(name, desc) for name, (_, desc) in _BUILTINS.items()]
    rows.append(
        (
            LIBSVM_PREFIX
            + "<path>[,n_features=D,zero_based=auto|true|false,rowscale=none|maxabs|l2]",
            (
                "any LIBSVM/svmlight file (.gz/.bz2 ok), sparse, labels as read "
                "(e.g. a9a, w8a, mushrooms from the LIBSVM data page)"
            ),
        )
    )
    rows.append(
        (
            "synthetic:logreg[,n=2000,d=100,hetero=0,seed=0,clusters=10,snr=2]",
            "binary ±1 labels from per-cluster logistic models; hetero in [0,1] separates clusters",
        )
    )
    rows.append(
        (
            "synthetic:ridge[,n=2000,d=100,hetero=0,seed=0,clusters=10,noise=0.1]",
            "real targets y = <w_k, x> + noise with per-cluster w_k",
        )
    )
    rows.append(
        (
            "synthetic:multiclass[,n=2000,d=100,classes=10,hetero=0,seed=0,clusters=10,snr=2]",
            "labels 0..classes-1 from per-cluster softmax models",
        )
    )
    return rows


# ---------------------------------------------------------------------------------------------
# Partitions
# ---------------------------------------------------------------------------------------------

_ORDER_SCHEMES = ("iid", "contiguous", "label-sorted", "norm-sorted")
_SCHEME_DESCRIPTIONS = [
    ("iid", "random permutation (seed), then contiguous chunks"),
    ("contiguous", "rows in data order, contiguous chunks (synthetic: one cluster per chunk)"),
    ("label-sorted", "stable sort by label, contiguous chunks (DIANA group's heterogeneous split)"),
    ("norm-sorted", "rows sorted by Euclidean norm, contiguous chunks (smoothness papers' split)"),
    ("dirichlet:<alpha>", "per-worker label proportions ~ Dirichlet(alpha) (DAGC's class mix)"),
    ("skew:<s>", "volume skew: sizes log-spaced from s down to 1, two smallest equal (DAGC)"),
]


def partition_schemes() -> list[str]:
    """Names of the partition schemes (parameterized ones with a placeholder)."""
    return [name for name, _ in _SCHEME_DESCRIPTIONS]


def describe_partitions() -> list[tuple[str, str]]:
    """(scheme, one-line description) pairs; schemes combine as ``<order>+skew:<s>``."""
    return list(_SCHEME_DESCRIPTIONS) + [
        ("<scheme>+skew:<s>", "any ordering or dirichlet combined with the volume skew"),
    ]


def _scheme_error(scheme, why):
    return ConfigError(
        f"partition {scheme!r}: {why} (valid schemes: iid, contiguous, label-sorted, norm-sorted, "
        "dirichlet:<alpha>, skew:<s>, or <scheme>+skew:<s>)"
    )


def _parse_scheme(scheme):
    """→ (order, alpha, skew). order in _ORDER_SCHEMES or 'dirichlet'."""
    if not isinstance(scheme, str) or not scheme.strip():
        raise _scheme_error(scheme, "expected a non-empty string")
    order = alpha = skew = None
    for part in scheme.strip().lower().split("+"):
        name, sep, param = part.strip().partition(":")
        name = name.strip().replace("_", "-")
        param = param.strip()
        if name in _ORDER_SCHEMES or name == "dirichlet":
            if order is not None:
                raise _scheme_error(scheme, f"two orderings given ({order} and {name})")
            order = name
            if name == "dirichlet":
                if not sep or not param:
                    raise _scheme_error(
                        scheme, "dirichlet needs a concentration, e.g. dirichlet:0.5"
                    )
                try:
                    alpha = float(param)
                except ValueError:
                    raise _scheme_error(
                        scheme, f"dirichlet alpha {param!r} is not a number"
                    ) from None
                if not (math.isfinite(alpha) and alpha > 0):
                    raise _scheme_error(scheme, f"dirichlet alpha must be > 0, got {param}")
            elif sep:
                raise _scheme_error(scheme, f"{name} takes no parameter")
        elif name == "skew":
            if skew is not None:
                raise _scheme_error(scheme, "skew given twice")
            if not sep or not param:
                raise _scheme_error(scheme, "skew needs a ratio s >= 1, e.g. skew:10")
            try:
                skew = float(param)
            except ValueError:
                raise _scheme_error(scheme, f"skew ratio {param!r} is not a number") from None
            if not (math.isfinite(skew) and skew >= 1):
                raise _scheme_error(scheme, f"skew ratio must be >= 1, got {param}")
        else:
            raise _scheme_error(scheme, f"unknown scheme {name!r}")
    return order or "iid", alpha, skew


def skew_volumes(n_workers: int, s: float) -> np.ndarray:
    """DAGC's intended volume fractions: ``logspace(log10 s, 0, n-1)`` with its last value repeated,
    normalized to sum 1 (decreasing; the two smallest equal; s = 1 ⇒ equal; n ≤ 2 ⇒ equal)."""
    if n_workers < 1:
        raise ConfigError(f"number of workers must be >= 1, got {n_workers}")
    if not (math.isfinite(s) and s >= 1):
        raise ConfigError(f"skew ratio must be >= 1, got {s}")
    if n_workers == 1:
        return np.ones(1)
    v = np.logspace(math.log10(s), 0.0, n_workers - 1)
    v = np.append(v, v[-1])
    return v / v.sum()


def _apportion(total, weights):
    """Integers summing to ``total`` proportional to ``weights`` (largest remainder; ties go to
    the lower index)."""
    w = np.asarray(weights, dtype=np.float64)
    quota = total * w / w.sum()
    base = np.floor(quota).astype(np.int64)
    rest = int(total - base.sum())
    if rest > 0:
        order = np.argsort(-(quota - base), kind="stable")
        base[order[:rest]] += 1
    return base


def _equal_counts(total, n):
    counts = np.full(n, total // n, dtype=np.int64)
    counts[: total % n] += 1
    return counts


def _skew_counts(total, n, s):
    if s == 1 or n <= 2:
        return _equal_counts(total, n)
    counts = _apportion(total, skew_volumes(n, s))
    # Keep DAGC's "two smallest are equal" exactly: move a rounding unit to the largest worker.
    if counts[-2] != counts[-1]:
        diff = counts[-2] - counts[-1]
        counts[-2] -= diff
        counts[0] += diff
    return counts


def _sizes_spec(sizes, n_workers, total):
    """User ``sizes`` → ('counts', int array) or ('fractions', float array). ``total=None``
    skips the check that counts fit in the data."""
    if isinstance(sizes, (str, bytes)):
        raise ConfigError(f"sizes must be a list of numbers, got {sizes!r}")
    try:
        values = list(sizes)
    except TypeError:
        raise ConfigError(f"sizes must be a list of numbers, got {sizes!r}") from None
    if len(values) != n_workers:
        raise ConfigError(f"sizes has {len(values)} entries but there are {n_workers} workers")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise ConfigError(f"sizes[{i}] = {v!r} is not a finite number")
        if v < 0:
            raise ConfigError(f"sizes[{i}] = {v!r} is negative")
    all_int_typed = all(isinstance(v, numbers.Integral) for v in values)
    integral = all(float(v).is_integer() for v in values)
    if all_int_typed or (integral and sum(float(v) for v in values) > 1):
        counts = np.asarray([int(v) for v in values], dtype=np.int64)
        if total is not None and counts.sum() > total:
            raise DataError(
                f"sizes sum to {int(counts.sum())} but the data set has only {total} samples"
            )
        return "counts", counts
    frac = np.asarray([float(v) for v in values], dtype=np.float64)
    if abs(frac.sum() - 1.0) > 1e-6:
        raise ConfigError(
            f"sizes must be integer counts or fractions summing to 1 (they sum to {frac.sum():g})"
        )
    return "fractions", frac


def _check_nonempty(counts, what):
    empty = np.flatnonzero(counts < 1)
    if empty.size:
        raise DataError(
            f"partition {what} leaves worker {int(empty[0])} empty "
            f"(sizes {counts.tolist() if counts.size <= 16 else '...'}); "
            "every worker needs at least one sample"
        )


def partition(ds: Dataset, n_workers: int, scheme: str = "iid", seed: int = 0, sizes=None):
    """Split the rows of ``ds`` among ``n_workers``; returns one int64 index array per worker.

    Schemes (combine an ordering with ``+skew:<s>``, e.g. ``label-sorted+skew:10``,
    ``dirichlet:1+skew:10``):

    * ``iid``: random permutation from ``seed``, then contiguous chunks;
    * ``contiguous``: data order, contiguous chunks;
    * ``label-sorted``: stable sort by raw label, contiguous chunks;
    * ``norm-sorted``: stable sort by increasing Euclidean row norm, contiguous chunks;
    * ``dirichlet:α``: worker j's class proportions ~ Dirichlet(α·1) (seeded); each class is
      split across workers in proportion to them; the whole data set is used;
    * ``skew:s`` (alone = ``iid+skew:s``): chunk sizes from :func:`skew_volumes`.

    Chunk sizes are equal by default (the first ``n mod n_workers`` workers get one more), or
    given by ``sizes``: integer counts (summing to at most n; rows past the last chunk are left
    out) or fractions summing to 1. With ``dirichlet`` the sizes/skew are the intended relative
    volumes (DAGC's row-rescaled ratio matrix). Each array keeps the scheme's order (iid: random;
    label-/norm-sorted: ascending; dirichlet: grouped by class); ``np.sort`` it if needed.
    """
    if isinstance(n_workers, bool) or not isinstance(n_workers, numbers.Integral):
        raise ConfigError(f"number of workers must be an integer, got {n_workers!r}")
    n_workers = int(n_workers)
    if n_workers < 1:
        raise ConfigError(f"number of workers must be >= 1, got {n_workers}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"partition seed must be a non-negative integer, got {seed!r}")
    order_kind, alpha, skew = _parse_scheme(scheme)
    total = ds.n_samples
    if n_workers > total:
        raise DataError(
            f"cannot split data set '{ds.name}' ({total} samples) among {n_workers} workers: "
            "more workers than samples"
        )
    if skew is not None and sizes is not None:
        raise ConfigError(f"partition {scheme!r}: give either skew:<s> or sizes, not both")
    rng = np.random.default_rng(int(seed))

    if order_kind == "dirichlet":
        if sizes is not None:
            # Relative volumes here: integer sizes may sum to more than n.
            _, vals = _sizes_spec(sizes, n_workers, None)
            vals = np.asarray(vals, dtype=np.float64)
            if np.any(vals <= 0):
                raise DataError("sizes: every worker needs a positive volume")
            volumes = vals / vals.sum()
        elif skew is not None:
            volumes = skew_volumes(n_workers, skew)
        else:
            volumes = np.full(n_workers, 1.0 / n_workers)
        return _dirichlet_partition(ds, n_workers, alpha, volumes, rng)

    if order_kind == "iid":
        order = rng.permutation(total)
    elif order_kind == "contiguous":
        order = np.arange(total, dtype=np.int64)
    elif order_kind == "label-sorted":
        order = np.argsort(ds.y, kind="stable")
    else:  # norm-sorted
        order = np.argsort(ds.row_norms(squared=True), kind="stable")

    if sizes is not None:
        kind, vals = _sizes_spec(sizes, n_workers, total)
        counts = vals if kind == "counts" else _apportion(total, vals)
    elif skew is not None:
        counts = _skew_counts(total, n_workers, skew)
    else:
        counts = _equal_counts(total, n_workers)
    _check_nonempty(counts, f"{scheme!r} of {total} samples among {n_workers} workers")
    bounds = np.concatenate(([0], np.cumsum(counts)))
    order = np.asarray(order, dtype=np.int64)
    return [order[bounds[j] : bounds[j + 1]].copy() for j in range(n_workers)]


def _dirichlet_partition(ds, n_workers, alpha, volumes, rng):
    classes, inverse = np.unique(ds.y, return_inverse=True)
    n_cls = classes.shape[0]
    if n_cls > MAX_DIRICHLET_CLASSES:
        raise DataError(
            f"dirichlet partition needs class labels, but data set '{ds.name}' has {n_cls} "
            "distinct label values (regression targets?)"
        )
    ratio = rng.dirichlet(np.full(n_cls, alpha), size=n_workers)  # (workers, classes)
    ratio = np.nan_to_num(ratio, nan=0.0, posinf=0.0, neginf=0.0)
    row = ratio.sum(axis=1)
    ratio[row <= 0] = 1.0 / n_cls
    ratio *= (volumes / ratio.sum(axis=1))[:, None]  # DAGC: rows rescaled to the volumes

    pieces = [[None] * n_cls for _ in range(n_workers)]
    counts = np.zeros((n_workers, n_cls), dtype=np.int64)
    for c in range(n_cls):
        members = np.flatnonzero(inverse == c)
        members = members[rng.permutation(members.shape[0])]
        share = ratio[:, c]
        if not share.sum() > 0:
            share = volumes
        cnt = _apportion(members.shape[0], share)
        bounds = np.concatenate(([0], np.cumsum(cnt)))
        for j in range(n_workers):
            pieces[j][c] = members[bounds[j] : bounds[j + 1]]
        counts[:, c] = cnt

    # Rounding can leave a worker empty: move single samples from the largest worker, taking the
    # class the empty worker was meant to hold most of. Deterministic; n_workers <= n guarantees
    # a donor with at least two samples.
    totals = counts.sum(axis=1)
    for j in range(n_workers):
        while totals[j] == 0:
            donor = int(np.argmax(totals))
            have = np.flatnonzero(counts[donor] > 0)
            c = int(have[np.argmax(ratio[j, have])])
            moved = pieces[donor][c][-1:]
            pieces[donor][c] = pieces[donor][c][:-1]
            pieces[j][c] = np.concatenate((pieces[j][c], moved))
            counts[donor, c] -= 1
            counts[j, c] += 1
            totals[donor] -= 1
            totals[j] += 1
    return [np.concatenate(pieces[j]).astype(np.int64) for j in range(n_workers)]
