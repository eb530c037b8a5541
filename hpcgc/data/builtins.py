"""Built-in data sets, bundled with scikit-learn (work offline), min-max scaled to [-1, 1]."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from .dataset import Dataset
from .options import _apply_rowscale, _parse_rowscale, _split_options


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
