"""Parsing of ``key=value`` options in data set specifications, shared by every kind of spec."""

from __future__ import annotations

import math

import numpy as np

from hpcgc.errors import ConfigError
from hpcgc.matrix import issparse


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
    if issparse(X):
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
