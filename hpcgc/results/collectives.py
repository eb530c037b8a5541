"""The file of the collectives benchmark (``python -m hpcgc.bench collectives``, ``docs/collectives.md``):
:func:`write_collectives` (rank 0) and :func:`load_collectives`, one :class:`CollectiveTable` per
collective (its size sweep and α–β fit)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from .reader import ResultsFormatError, _open_for_reading
from .schema import PARTIAL_SUFFIX, _attr, _py

COLLECTIVES_SCHEMA = "hpcgc-collectives"
COLLECTIVES_SCHEMA_VERSION = 1
COLLECTIVE_ARRAYS = ("size", "avg", "min", "max", "iterations")
COLLECTIVE_FIT = ("alpha", "beta", "fit_error", "fit_error_median", "fit_method")


@dataclass
class CollectiveTable:
    """One collective's sweep: ``size`` (bytes per rank), ``avg``/``min``/``max`` (seconds: over ranks
    of each rank's mean per operation), ``iterations`` (timed, per size), and the fit
    t(s) = ``alpha`` + ``beta``·s (seconds, seconds per byte) with its max / median relative error."""

    kind: str
    size: np.ndarray
    avg: np.ndarray
    min: np.ndarray
    max: np.ndarray
    iterations: np.ndarray
    alpha: float
    beta: float
    fit_error: float
    fit_error_median: float
    fit_method: str
    attrs: dict = field(default_factory=dict)

    def model(self, size) -> np.ndarray:
        """The fitted time α + β·s (seconds) at ``size`` bytes per rank."""
        return self.alpha + self.beta * np.asarray(size, dtype=np.float64)

    def __repr__(self):
        return (f"CollectiveTable({self.kind!r}, sizes={len(self.size)}, alpha={self.alpha * 1e6:.3g} us, "
                f"beta={self.beta * 1e9:.3g} ns/B, fit_error={self.fit_error:.3g})")


class CollectivesResults(dict):
    """``{collective name: CollectiveTable}`` in measurement order; file attributes in ``.attrs``;
    ``.levels``: ``{"intra": CollectivesResults, "inter": ...}`` when the job had several ranks per
    node (each level's ``.attrs["ranks"]``: the ranks of its communicator), else ``{}``."""

    attrs: dict
    path: Path
    levels: dict


LEVELS_GROUP = "levels"
"""Where the per-level sweeps of a job with several ranks per node live: ``levels/intra/<collective>``
and ``levels/inter/<collective>`` (``docs/collectives.md``)."""


def _write_tables(group, tables):
    group.attrs["collectives"] = _attr([tb.kind for tb in tables]) if tables else ""
    for tb in tables:
        g = group.create_group(tb.kind)
        for k in COLLECTIVE_ARRAYS:
            g.create_dataset(k, data=np.asarray(getattr(tb, k)))
        for k in COLLECTIVE_FIT:
            g.attrs[k] = getattr(tb, k)
        for k, v in tb.attrs.items():
            g.attrs[k] = _attr(v)


def _read_tables(group, out):
    kinds = _py(group.attrs.get("collectives")) or []
    for kind in ([kinds] if isinstance(kinds, str) and kinds else kinds):
        g = group[kind]
        arrays = {k: g[k][()] for k in COLLECTIVE_ARRAYS}
        fit = {k: _py(g.attrs[k]) for k in COLLECTIVE_FIT}
        extra = {k: _py(v) for k, v in g.attrs.items() if k not in COLLECTIVE_FIT}
        out[kind] = CollectiveTable(kind=kind, **arrays, **fit, attrs=extra)
    return out


def write_collectives(path, attrs: dict, tables, levels: dict | None = None) -> Path:
    """Write a collectives file (rank 0 only): provenance ``attrs`` at the root, one group per
    :class:`CollectiveTable`; ``levels`` (``{"intra" | "inter": (attrs, [CollectiveTable])}``) under
    ``levels/<level>/``; created as ``<path>.partial`` and renamed when complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    with h5py.File(partial, "w") as f:
        f.attrs["schema"] = COLLECTIVES_SCHEMA
        f.attrs["schema_version"] = COLLECTIVES_SCHEMA_VERSION
        f.attrs["units"] = "seconds, bytes (size: bytes contributed by each rank); beta in seconds per byte"
        for k, v in attrs.items():
            f.attrs[k] = _attr(v)
        _write_tables(f, tables)
        for level, (level_attrs, level_tables) in (levels or {}).items():
            g = f.require_group(LEVELS_GROUP).create_group(level)
            for k, v in level_attrs.items():
                g.attrs[k] = _attr(v)
            _write_tables(g, level_tables)
        f.attrs["complete"] = True
    os.replace(partial, path)
    return path


def load_collectives(path) -> CollectivesResults:
    """Read a file of ``python -m hpcgc.bench collectives``: ``res["gather"].avg``, ``.alpha``, ...;
    ``res.attrs`` holds the provenance (MPI library, hosts, ranks, command line)."""
    path = Path(path)
    with _open_for_reading(path, "collectives file") as f:
        if _py(f.attrs.get("schema")) != COLLECTIVES_SCHEMA:
            raise ResultsFormatError(f"{path}: not an hpcgc collectives file (schema attribute is not "
                                     f"{COLLECTIVES_SCHEMA!r})")
        version = int(f.attrs.get("schema_version", -1))
        if version != COLLECTIVES_SCHEMA_VERSION:
            raise ResultsFormatError(f"{path}: collectives schema version {version}; this hpcgc reads "
                                     f"version {COLLECTIVES_SCHEMA_VERSION}")
        out = CollectivesResults()
        out.attrs = {k: _py(v) for k, v in f.attrs.items()}
        out.path = path
        _read_tables(f, out)
        out.levels = {}
        for level, g in (f[LEVELS_GROUP].items() if LEVELS_GROUP in f else ()):
            lv = CollectivesResults()
            lv.attrs = {k: _py(v) for k, v in g.attrs.items()}
            lv.path, lv.levels = path, {}
            out.levels[level] = _read_tables(g, lv)
        return out
