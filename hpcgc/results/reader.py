"""Reading results files: :func:`load` (a file, also an unfinished ``.partial`` one, or a directory
of them) into :class:`Results`, a list of :class:`Run`; pandas frames of them in
:mod:`hpcgc.results.frames`. Layout: :mod:`hpcgc.results` and ``docs/results.md``."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from . import frames
from .schema import PARTIAL_SUFFIX, SCALAR_SERIES, SCHEMA_VERSION, WORKER_SERIES, _py


class ResultsFormatError(ValueError):
    """The file is not an hpcgc results file, or has an unsupported schema version."""


@dataclass
class Run:
    run_id: str
    attrs: dict
    config: dict
    series: dict
    time: dict
    workers: dict
    per_iteration: dict = field(default_factory=dict)
    x_final: np.ndarray | None = None
    mpi_bytes: dict = field(default_factory=dict)
    path: Path | None = None                              # the file it was read from
    file_attrs: dict = field(default_factory=dict)        # that file's root attributes (provenance)
    node_bytes: dict = field(default_factory=dict)        # run.topology = "hierarchical" only (NODE_BYTES)

    @property
    def status(self) -> str:
        return self.attrs.get("status", "")

    def __repr__(self):
        return f"Run({self.run_id!r}, status={self.status!r}, rows={len(self.series.get('iteration', []))})"


class Results(list):
    """A list of :class:`Run` with the file-level attributes in ``.attrs``.

    ``to_frame()``, ``runs_frame()`` and ``phases_frame()`` give the same values as pandas frames
    (:mod:`hpcgc.results.frames`; pandas comes with the ``analysis`` extra)."""

    attrs: dict
    path: Path
    complete: bool
    unreadable: list          # run ids whose data a failure cut off (the file's other runs are intact)
    files: list

    def to_frame(self, workers: bool = False):
        """One row per run × recorded iteration (``workers=True``: × rank), run attributes as columns."""
        return frames.to_frame(self, workers=workers)

    def runs_frame(self):
        """One row per run: its attributes, status and final values."""
        return frames.runs_frame(self)

    def spread_frame(self, eps: float | None = None, metric: str = "suboptimality", over: str = "auto"):
        """One row per configuration: median and 95 % interval over its repeats and/or seeds."""
        return frames.spread_frame(self, eps=eps, metric=metric, over=over)

    def phases_frame(self):
        """One row per run × rank × phase: cumulative seconds and ms per iteration at the last row."""
        return frames.phases_frame(self)


def find_files(path) -> list[Path]:
    """The results files in a directory (recursively, natural order), a finished ``x.h5``
    superseding a ``x.h5.partial`` beside it."""
    key = lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]
    found = sorted({*Path(path).rglob("*.h5"), *Path(path).rglob("*.h5.partial")}, key=key)
    names = {str(f) for f in found}
    return [f for f in found if not (f.name.endswith(PARTIAL_SUFFIX) and str(f)[: -len(PARTIAL_SUFFIX)] in names)]


def _open_for_reading(path: Path, what: str) -> h5py.File:
    try:
        return h5py.File(path, "r", locking=False)     # a running job holds its .partial open: read it anyway
    except FileNotFoundError:
        raise ResultsFormatError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ResultsFormatError(f"{path}: not a readable HDF5 file ({exc})") from None


def load(path) -> Results:
    """Read a results file (also an unfinished ``.partial`` one) into memory; a directory: every
    results file in it (recursively), their runs in one :class:`Results` (``.files``; each run's
    ``.path`` and ``.file_attrs`` say where it came from; ``.attrs`` is then empty)."""
    path = Path(path)
    if path.is_dir():
        files = find_files(path)
        if not files:
            raise ResultsFormatError(f"{path}: no results files (*.h5, *.h5.partial) in this directory")
        out = Results()
        out.attrs, out.path, out.files = {}, path, files
        parts = [_load_file(f) for f in files]
        out.complete = all(p.complete for p in parts)
        out.unreadable = [u for p in parts for u in p.unreadable]
        for p in parts:
            out.extend(p)
        return out
    return _load_file(path)


#: a reader racing the writer's flush (HDF5 without SWMR: a file being written may show metadata
#: past its current end for a moment) retries this many times, this far apart, before it gives up
TORN_READ_RETRIES, TORN_READ_PAUSE_S = 5, 0.2


def _load_file(path: Path) -> Results:
    path = Path(path)
    for attempt in range(TORN_READ_RETRIES + 1):
        try:
            return _read_file(path)
        except RuntimeError as exc:      # h5py's error for inconsistent metadata ("addr overflow", ...)
            if attempt == TORN_READ_RETRIES:
                raise ResultsFormatError(
                    f"{path}: inconsistent HDF5 metadata ({exc}); if a job is still writing this file, "
                    f"read it again after its next flush (every 2 s)") from None
            time.sleep(TORN_READ_PAUSE_S)


def _read_file(path: Path) -> Results:
    from ..config import tomllib

    with _open_for_reading(path, "results file") as f:
        version = f.attrs.get("schema_version")
        if version is None or "runs" not in f:
            raise ResultsFormatError(f"{path}: not an hpcgc results file (no schema_version / runs)")
        if int(version) != SCHEMA_VERSION:
            raise ResultsFormatError(f"{path}: results schema version {int(version)}; this hpcgc reads "
                                     f"version {SCHEMA_VERSION}")
        out = Results()
        out.attrs = {k: _py(v) for k, v in f.attrs.items()}
        out.path = path
        out.files = [path]
        out.complete = bool(out.attrs.get("complete", False))
        out.unreadable = []
        for run_id in f["runs"]:
            try:
                out.append(_read_run(run_id, f["runs"][run_id], tomllib, path, out.attrs))
            except (OSError, KeyError, ValueError, AttributeError, TypeError):
                # a run cut off by a failure while it was written (e.g. a full disk): the runs
                # flushed before it stay readable
                out.unreadable.append(run_id)
        return out


def _read_run(run_id: str, g, tomllib, path: Path, file_attrs: dict) -> Run:
    attrs = {k: _py(v) for k, v in g.attrs.items()}
    attrs.setdefault("collective", "gather")        # files written before run.collective existed
    attrs.setdefault("repeat", 0)                   # files written before run.repeats existed
    attrs.setdefault("topology", "flat")            # flat runs (and files before run.topology) have none
    try:
        config = tomllib.loads(attrs.get("config", ""))
    except tomllib.TOMLDecodeError:
        config = {}

    def group(name):
        return {k: v[()] for k, v in g[name].items()} if name in g else {}
    series = {k: g[k][()] for k in (*SCALAR_SERIES, *WORKER_SERIES) if k in g}
    x_final = g["x_final"][()] if "x_final" in g else None
    return Run(run_id, attrs, config, series, group("time"), group("workers"), group("per_iteration"), x_final,
               group("mpi_bytes"), path, file_attrs, group("node_bytes"))

