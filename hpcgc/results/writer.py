"""Writing a results file (rank 0): :class:`ResultsWriter` (the file, ``<path>.partial`` until the
invocation completes) and :class:`RunWriter` (one run's group: series appended at evaluation points,
tables, the final iterate, checkpoints). Failures while writing are kept, not raised (:func:`guarded`).
Layout: :mod:`hpcgc.results` and ``docs/results.md``."""
from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import time
from pathlib import Path

import h5py
import numpy as np

from ..errors import UserError
from . import checkpoint
from .schema import (
    CHECKPOINT_SUFFIX,
    FLUSH_SECONDS,
    LEDGER,
    METADATA_MARGIN,
    NODE_BYTES,
    PARTIAL_SUFFIX,
    PHASES,
    SCALAR_SERIES,
    SCHEMA_VERSION,
    WORKER_SERIES,
    _attr,
    _py,
)


def refuse_existing(path) -> None:
    """FileExistsError if a results file or its ``.partial`` is at ``path`` (no silent overwrite)."""
    path = Path(path)
    for p in (path, path.with_name(path.name + PARTIAL_SUFFIX), path.with_name(path.name + CHECKPOINT_SUFFIX)):
        if p.exists():
            resume = "" if p == path else "pass --resume to continue the interrupted invocation, "
            raise FileExistsError(f"{p} exists; {resume}choose another -o, or pass --overwrite to replace it")


class WriteFailed(UserError):
    """Writing the results file failed (full disk, quota, vanished directory): names the file and the cause."""


def _cause(exc: BaseException) -> str:
    """The operating system's reason inside an HDF5 error (e.g. 'No space left on device')."""
    text = str(exc)
    m = re.search(r"error message = '([^']+)'", text)
    if m:
        return m.group(1)
    return getattr(exc, "strerror", None) or (text.splitlines()[0] if text else type(exc).__name__)


def guarded(method):
    """A writer method that never raises: the first failure is kept as ``error`` (a WriteFailed naming the
    file and the cause) and every later call does nothing, so the ranks can stop together."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        top = getattr(self, "parent", self)
        if top.error is not None:
            return None
        try:
            return method(self, *args, **kwargs)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            top.error = WriteFailed(f"cannot write {top.partial}: {_cause(exc)}")
            return None
    return wrapper


def estimate_run_bytes(rows: int, n: int, world: int, per_iteration_rows: int, d: int) -> int:
    """An upper estimate of one run's size in the file: series (chunks of 256 rows), per-iteration
    timings, tables, the final iterate and attributes."""
    cols = len(SCALAR_SERIES) + len(WORKER_SERIES) * n + (len(PHASES) + len(LEDGER)) * world
    series = 8 * cols * 256 * (rows // 256 + 1)
    return int(1.5 * (series + 4 * len(PHASES) * world * per_iteration_rows + 8 * d + 64 * n + 2**16))


class ResultsWriter:
    """Creates ``<path>.partial``; :meth:`close` renames it to ``path``. Failures while writing are
    kept in ``error`` (see :func:`guarded`) instead of raised."""

    def __init__(self, path: str | os.PathLike, attrs: dict, overwrite: bool = False, resume: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        self.checkpoints = self.path.with_name(self.path.name + CHECKPOINT_SUFFIX)
        if resume:
            self._reopen()
            return
        if not overwrite:
            refuse_existing(self.path)
        try:   # exclusive creation; with overwrite, HDF5's file lock still refuses a file another writer holds
            self.f = h5py.File(self.partial, "w" if overwrite else "x")
        except (FileExistsError, BlockingIOError) as exc:
            raise FileExistsError(f"{self.partial} is being written by another invocation") from exc
        except OSError as exc:
            if "lock" in str(exc).lower() or "exist" in str(exc).lower():
                raise FileExistsError(f"{self.partial} is being written by another invocation") from exc
            raise
        if overwrite:                            # this invocation owns the path now: no stale checkpoints
            shutil.rmtree(self.checkpoints, ignore_errors=True)
        self.error = None
        self.active = None              # the RunWriter of the run being written
        self.f.attrs["schema_version"] = SCHEMA_VERSION
        for k, v in attrs.items():
            self.f.attrs[k] = _attr(v)
        self.f.create_group("runs")
        self.f.flush()

    def _reopen(self):
        """Open ``<path>.partial`` of an interrupted invocation for appending (``--resume``; nothing
        is written before :meth:`mark_resumed`)."""
        if self.path.exists() and not self.partial.exists():
            raise FileExistsError(f"{self.path} is complete: there is nothing to resume")
        if not self.partial.exists():
            raise FileNotFoundError(f"--resume: {self.partial} not found (nothing to resume)")
        try:
            self.f = h5py.File(self.partial, "r+")
        except (BlockingIOError, OSError) as exc:
            raise FileExistsError(f"{self.partial} cannot be opened for resuming ({_cause(exc)}): "
                                  "is another invocation writing it?") from exc
        self.error = None
        self.active = None              # the RunWriter of the run being written

    def mark_resumed(self, attrs: dict):
        """Once the resuming invocation is accepted: count it and keep its provenance."""
        self.f.attrs["resumed"] = self.f.attrs.get("resumed", 0) + 1
        for k, v in attrs.items():       # the provenance of the resuming invocation beside the original's
            if k in ("created", "command_line") or k.startswith("slurm_"):
                self.f.attrs[f"resumed_{k}"] = _attr(v)

    def run_state(self, run_id: str):
        """(status, checkpoint iteration or None) of a run already in the file, or None if absent."""
        if run_id not in self.f["runs"]:
            return None
        g = self.f["runs"][run_id]
        if g is None:
            return ("unreadable", None)
        ck = self.checkpoints / f"{run_id}.h5"
        if not ck.exists():
            return (_py(g.attrs.get("status", "")), None)
        return (_py(g.attrs.get("status", "")), checkpoint.iteration(ck))

    def drop_run(self, run_id: str):
        del self.f["runs"][run_id]

    def checkpoint_problem(self, run_id: str, ranks: int) -> str | None:
        """Why the run's checkpoint cannot be loaded at ``ranks`` ranks (:func:`hpcgc.results.checkpoint.problem`)."""
        return checkpoint.problem(self.checkpoints / f"{run_id}.h5", ranks)

    def load_checkpoint(self, run_id: str, ranks: int):
        """(iteration, rows, [per-rank state trees]) of the run's checkpoint (:func:`hpcgc.results.checkpoint.load`)."""
        return checkpoint.load(self.checkpoints / f"{run_id}.h5", ranks)

    @guarded
    def resume_run(self, run_id: str, rows: int, iteration: int, eval_every: int, iterations: int) -> RunWriter:
        """The writer of an interrupted run, its rows cut back to the checkpoint's: the ``rows``
        written when it was taken, less a row the interruption wrote off the evaluation grid (a
        stop between evaluation points records where it stopped; the resumed run passes that
        iteration without evaluating, as the uninterrupted run did)."""
        it = self.f["runs"][run_id]["iteration"][:rows]
        on_grid = (it < iteration) | ((it == iteration) & ((it % eval_every == 0) | (it == iterations)))
        keep = int(np.argmin(on_grid)) if not on_grid.all() else it.size
        return RunWriter(self, self.f["runs"][run_id], {}, 0, 0, rows=keep)

    def require_space(self, nbytes: int):
        """Before a write of about ``nbytes``: an OSError (ENOSPC) if the file system has less free
        than that plus ``METADATA_MARGIN``. HDF5 cannot recover from a write the disk refuses —
        releasing the file's objects afterwards crashes the process (HDF5 1.14, h5py 3.16) —, so a
        full disk must be seen before HDF5 writes; a disk another process fills during the write
        is the case left."""
        short = self._shortage(int(nbytes) + METADATA_MARGIN)
        if short:
            raise OSError(errno.ENOSPC, f"not enough free space: {short}")

    def free_space_error(self, run_id: str, needed: int):
        """A WriteFailed if the file system holding the file has less than ``needed`` bytes free."""
        short = self._shortage(needed)
        return WriteFailed(f"not enough free space for run {run_id} in {self.partial.parent}: {short}") if short else None

    def _shortage(self, needed: int) -> str | None:
        """'about X MB needed, Y MB free' if the file's file system has less than ``needed`` bytes free."""
        free = shutil.disk_usage(self.partial.parent).free
        return f"about {needed / 1e6:.3g} MB needed, {free / 1e6:.3g} MB free" if free < needed else None

    @guarded
    def begin_run(self, run_id: str, attrs: dict, n_workers: int, world_size: int,
                  node_bytes: bool = False) -> RunWriter:
        """``node_bytes``: the run also records ``node_bytes/`` (``run.topology = "hierarchical"``)."""
        return RunWriter(self, self.f["runs"].create_group(run_id), attrs, n_workers, world_size,
                         node_bytes=node_bytes)

    @guarded
    def set_file_attrs(self, attrs: dict):
        """Root attributes written after creation (the machine's state at the end: ``hpcgc.machine``)."""
        for k, v in attrs.items():
            self.f.attrs[k] = _attr(v)

    @guarded
    def flush(self):
        self.require_space(0)
        self.f.flush()

    def close(self, complete: bool = True):
        if self.active is not None:
            self.active.write_rows()             # rows still in memory (an interruption, an error elsewhere)
        try:
            if self.error is None:               # after a write failure, write nothing more
                self.f.attrs["complete"] = bool(complete)
            self.f.close()
        except (OSError, RuntimeError, ValueError) as exc:
            self.error = self.error or WriteFailed(f"cannot write {self.partial}: {_cause(exc)}")
            try:
                self.f.close()
            except (OSError, RuntimeError, ValueError):
                pass
        if complete and self.error is None:
            os.replace(self.partial, self.path)
            shutil.rmtree(self.checkpoints, ignore_errors=True)
            return self.path
        return self.partial


class RunWriter:
    def __init__(self, parent: ResultsWriter, g: h5py.Group, attrs: dict, n: int, world: int,
                 rows: int | None = None, node_bytes: bool = False):
        self.parent = parent
        self.g = g
        self.run_id = g.name.rsplit("/", 1)[-1]
        self._last_flush = time.monotonic()
        self.pending = []               # rows not yet written (see append)
        parent.active = self
        if rows is not None:            # resuming: the series as they were at the checkpoint
            self.rows = rows
            self.series = self._series()
            for _, _, ds in self.series:
                ds.resize((rows, *ds.shape[1:]))
            self.g.attrs["status"] = "running"
            return
        self.rows = 0
        self.set_attrs(attrs)
        self.g.attrs["status"] = "running"
        self.g.attrs["stop_reason"] = ""
        for name in SCALAR_SERIES:
            dt = np.int64 if name == "iteration" else np.float64
            g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dt, chunks=(256,))
        for name in WORKER_SERIES:
            g.create_dataset(name, shape=(0, n), maxshape=(None, n), dtype=np.float64, chunks=(256, n))
        groups = (("time", PHASES), ("mpi_bytes", LEDGER)) + ((("node_bytes", NODE_BYTES),) if node_bytes else ())
        for group, names in groups:
            tg = g.create_group(group)
            for name in names:
                tg.create_dataset(name, shape=(0, world), maxshape=(None, world), dtype=np.float64,
                                  chunks=(256, world))
        self.series = self._series()

    def _series(self) -> list:
        """(row key, column or None, dataset) of every series in the group, opened once: the handles
        stay open while the run is written (none is released, and flushed, per write)."""
        out = [(name, None, self.g[name]) for name in (*SCALAR_SERIES, *WORKER_SERIES)
               if name in self.g]    # a file begun by an older version, resumed, lacks some series
        for group, names in (("time", PHASES), ("mpi_bytes", LEDGER), ("node_bytes", NODE_BYTES)):
            if group in self.g:
                out += [(group, j, self.g[group][name]) for j, name in enumerate(names) if name in self.g[group]]
        return out

    @guarded
    def save_checkpoint(self, iteration: int, trees: list) -> int:
        """The run's state at ``iteration`` (one typed tree per rank, :mod:`hpcgc.typed_state`) into
        ``<results>.checkpoint/<run_id>.h5`` (:func:`hpcgc.results.checkpoint.save`); returns its bytes."""
        self.write_rows()                        # the rows the checkpoint refers to are on disk first
        self.parent.f.flush()
        self.parent.require_space(sum(_tree_bytes(t) for t in trees))
        d = self.parent.checkpoints
        d.mkdir(exist_ok=True)
        return checkpoint.save(d / f"{self.run_id}.h5", iteration, self.rows, self.run_id, trees)

    @guarded
    def set_attrs(self, attrs: dict):
        for k, v in attrs.items():
            self.g.attrs[k] = _attr(v)

    @guarded
    def append(self, row: dict):
        """One evaluation point: scalars, per-worker vectors, ``time`` → (world, phases) array and
        ``mpi_bytes`` → (world, collectives) array (the transport's cumulative sender ledger).
        Rows are kept in memory and written to the file together (:meth:`write_rows`) at the
        periodic flush (every ``FLUSH_SECONDS``), a checkpoint, the run's end or the file's close:
        one resize and one slice write per series instead of 28 small writes per row."""
        # a snapshot: the caller's arrays (the ledger's cumulative bits, gathered timers) change in place
        self.pending.append({k: v.copy() if isinstance(v, np.ndarray) else v for k, v in row.items()})
        self.rows += 1
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_SECONDS:
            self.write_rows()
            self.parent.flush()
            self._last_flush = now

    @guarded
    def write_rows(self):
        """Write the rows kept in memory to their series."""
        rows, self.pending = self.pending, []
        if not rows:
            return
        t0, k = self.rows - len(rows), len(rows)
        self.parent.require_space(sum((k // ds.chunks[0] + 2) * ds.chunks[0] * ds.dtype.itemsize
                                      * int(np.prod(ds.shape[1:])) for _, _, ds in self.series))
        blocks = {}
        for key, j, ds in self.series:
            if key not in blocks:
                blocks[key] = np.array([r.get(key, np.nan) for r in rows])   # (k,), (k, n), (k, world, cols)
            ds.resize((t0 + k, *ds.shape[1:]))
            ds[t0:t0 + k] = blocks[key] if j is None else blocks[key][:, :, j]

    @guarded
    def write_table(self, group: str, columns: dict):
        self.parent.require_space(sum(np.asarray(v).nbytes for v in columns.values()))
        g = self.g.require_group(group)
        for k, v in columns.items():
            if k in g:
                del g[k]
            g.create_dataset(k, data=np.asarray(v))

    @guarded
    def finish(self, status: str, stop_reason: str, attrs: dict | None = None, arrays: dict | None = None):
        self.write_rows()
        self.parent.require_space(sum(np.asarray(v).nbytes for v in (arrays or {}).values()))
        if attrs:
            self.set_attrs(attrs)
        for k, v in (arrays or {}).items():
            if k in self.g:             # a resumed run replaces what its interruption wrote
                del self.g[k]
            self.g.create_dataset(k, data=np.asarray(v))
        self.g.attrs["status"] = status
        self.g.attrs["stop_reason"] = stop_reason
        self.parent.f.flush()
        if status != "interrupted":              # only an interrupted run resumes
            (self.parent.checkpoints / f"{self.run_id}.h5").unlink(missing_ok=True)


def _tree_bytes(tree: dict) -> int:
    return sum(_tree_bytes(v) if isinstance(v, dict) else getattr(v, "nbytes", 64) for v in tree.values())

