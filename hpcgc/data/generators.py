"""Synthetic generators (``synthetic:<kind>``): dense Gaussian clusters with planted models.
See ``docs/data.md`` for the model."""

from __future__ import annotations

import numpy as np

from hpcgc.errors import ConfigError

from .dataset import Dataset
from .options import _parse_float, _parse_int, _split_options

SYNTHETIC_PREFIX = "synthetic:"
#: Largest n × d a synthetic generator accepts (8 GB of float64); catches typos such as n=1e12.
MAX_SYNTHETIC_VALUES = 1_000_000_000


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
            f"unknown synthetic kind {tokens[0].strip()!r} (valid kinds: {', '.join(SYNTHETIC_KINDS)}, sparse)"
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
