"""Data set specifications: :func:`load`, :func:`check_spec`, :func:`available`, :func:`describe`."""

from __future__ import annotations

import os
from pathlib import Path

from hpcgc.errors import ConfigError, DataError

from .builtins import _BUILTINS, _load_builtin
from .dataset import Dataset
from .generators import SYNTHETIC_KINDS, SYNTHETIC_PREFIX, _load_synthetic
from .partitions import _parse_scheme
from .readers import LIBSVM_PREFIX, _display_path, _load_libsvm, _split_path_and_options
from .sparse import SPARSE_KIND, SparseGenerator, describe_row, parse_sparse_options

#: every ``synthetic:<kind>``: the dense generators and the sparse one
KINDS = (*SYNTHETIC_KINDS, SPARSE_KIND)


def _unknown(spec, extra=""):
    return ConfigError(
        f"unknown data set {spec!r}{extra}: built-in data sets are {', '.join(_BUILTINS)}; "
        f"or use {LIBSVM_PREFIX}<path> for a LIBSVM/svmlight file, or "
        f"{SYNTHETIC_PREFIX}<kind>[,key=value...] with kind {', '.join(KINDS)}"
    )


def _spec_text(spec) -> str:
    """The stripped specification string; ConfigError for a non-string or an empty one."""
    if not isinstance(spec, str):
        raise ConfigError(f"data set must be a name or a path, got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise ConfigError("empty data set name")
    return text


def check_spec(spec, partition_scheme=None) -> None:
    """Check a data set specification (and a partition scheme) without reading any data: a built-in
    name, a synthetic kind, or a LIBSVM file that exists and is a file. Raises what :func:`load`
    and :func:`partition` would raise for the same mistake."""
    if partition_scheme is not None:
        _parse_scheme(partition_scheme)
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    text = _spec_text(spec)
    low = text.lower()
    if low.startswith(SYNTHETIC_PREFIX):
        kind, *tokens = text[len(SYNTHETIC_PREFIX):].split(",")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise _unknown(text)
        if kind == SPARSE_KIND:              # cheap: bad options (nnz > d, ...) fail at validate
            parse_sparse_options(tokens)
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
    text = _spec_text(spec)
    low = text.lower()
    if low.startswith(LIBSVM_PREFIX):
        path_text, tokens = _split_path_and_options(text[len(LIBSVM_PREFIX) :])
        return _load_libsvm(path_text, tokens)
    gen = sparse_generator(text)
    if gen is not None:
        return gen.dataset()
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


def declared_features(spec) -> int | None:
    """The number of features a specification states without reading data — a ``synthetic:``
    spec's ``d`` (its default where not given) —, else None (LIBSVM files, built-ins)."""
    text = _spec_text(spec) if isinstance(spec, str) else ""
    if not text.lower().startswith(SYNTHETIC_PREFIX):
        return None
    kind, *tokens = text[len(SYNTHETIC_PREFIX):].split(",")
    kind = kind.strip().lower()
    if kind == SPARSE_KIND:
        return int(parse_sparse_options(tokens)["d"])
    if kind not in KINDS:
        return None
    from .generators import _parse_synthetic_options
    return int(_parse_synthetic_options(kind, tokens)["d"])


def available() -> list[str]:
    """Built-in names, then the ``libsvm:<path>`` template and the loadable synthetic kinds."""
    return [*_BUILTINS, LIBSVM_PREFIX + "<path>", *(SYNTHETIC_PREFIX + k for k in KINDS)]


def sparse_generator(spec) -> SparseGenerator | None:
    """The generator of a ``synthetic:sparse,...`` specification (options checked), else None:
    what lets every rank generate its own rows (:meth:`SparseGenerator.subset`)."""
    if not isinstance(spec, str):
        return None
    text = spec.strip()
    if not text.lower().startswith(SYNTHETIC_PREFIX):
        return None
    kind, *tokens = text[len(SYNTHETIC_PREFIX):].split(",")
    if kind.strip().lower() != SPARSE_KIND:
        return None
    return SparseGenerator.from_tokens(tokens)


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
    rows.append(describe_row())
    return rows
