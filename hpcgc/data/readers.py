"""LIBSVM/svmlight files: read with scikit-learn's parser; on a parse error the first bad line
is found and named (``<file>:<line>: <what>``)."""

from __future__ import annotations

import bz2
import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

from hpcgc.errors import ConfigError, DataError

from .dataset import Dataset
from .options import _apply_rowscale, _parse_int, _parse_rowscale, _split_options

LIBSVM_PREFIX = "libsvm:"


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

    import scipy.sparse as sp  # rank 0 only reads files: workers of a dense data set never import scipy
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
