"""Partitions: how the rows of a data set are split among the workers (schemes, sizes, volume
skew, Dirichlet class mixes)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from hpcgc.errors import ConfigError, DataError

from .dataset import Dataset

#: Largest number of distinct label values a ``dirichlet`` partition accepts.
MAX_DIRICHLET_CLASSES = 1000


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


def needs_rows(scheme: str) -> bool:
    """Whether a scheme looks at the rows (labels, norms): label-sorted, norm-sorted, dirichlet. The
    others (iid, contiguous, with skew or sizes) need only the row count, so every rank can compute
    them alone and generate its own rows (``problem.reference = "none"``)."""
    return _parse_scheme(scheme)[0] not in ("iid", "contiguous")


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
