"""Results files (HDF5): the writer used by rank 0 and the reader ``load``.

Layout (schema version 1; `docs/results.md` is the reference):

    /                attrs: schema_version, hpcgc_version, git_commit, git_dirty, created, command_line,
                            mpi_library_version, *_version, hostnames, world_size, slurm_* when present,
                            machine_start_*, machine_end_*, noise_* (hpcgc.machine)
    /runs/<run_id>/  attrs: config (resolved TOML), algorithm, compressor, allocation, gamma, alpha, beta,
                            seed, repeat, dataset, d, n_workers, f_star, status, stop_reason, ...
      iteration, loss, suboptimality, dist_to_opt, grad_norm_sq, accuracy        (T,)
      bits_up_model, bits_up_wire, bits_received_wire                             (T, n)
      bits_down_wire, bits_down_model                                             (T,)
      time/<phase>                                                                (T, world_size)
      mpi_bytes/<collective>                                                      (T, world_size)
      workers/...                                                                 (n,) tables
      per_iteration/<phase>                                                       (iterations, world_size)
      x_final                                                                     (d,) last iterate

Series are chunked and resizable; the file is flushed as the run goes (at most every
``FLUSH_SECONDS``) and at the end of every run, so a killed job leaves a readable file. It is
written as ``<path>.partial`` and renamed to ``<path>`` when the whole invocation completes.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from .errors import UserError

SCHEMA_VERSION = 1
FLUSH_SECONDS = 2.0
METADATA_MARGIN = 256 * 1024          # bytes kept free beyond a write's data (HDF5 metadata, chunk index)
PARTIAL_SUFFIX = ".partial"
CHECKPOINT_SUFFIX = ".checkpoint"     # a directory beside the results file: one <run_id>.h5 per interrupted run

SCALAR_SERIES = ("iteration", "loss", "suboptimality", "dist_to_opt", "grad_norm_sq", "accuracy", "train_accuracy",
                 "test_loss", "bits_down_wire", "bits_down_model", "grad_evals")
WORKER_SERIES = ("bits_up_model", "bits_up_wire", "bits_received_wire")
"""Per-worker cumulative series; ``bits_received_wire`` (bytes MPI delivered into the worker's
receive buffers from other ranks, ×8) is absent from files written before it existed."""
PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter")
"""= transport.PHASES; files written before ``wait_up``, ``wait_down`` and ``other`` existed lack them
(their ``comm_*`` include the waiting, their ``iter`` is the sum of the five others)."""
LEDGER = ("Gather", "Gatherv", "Bcast", "Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv")
"""= transport.LEDGER; files written before Alltoall/Alltoallv were appended lack those two."""


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
        from . import checkpoint_file
        return (_py(g.attrs.get("status", "")), checkpoint_file.iteration(ck))

    def drop_run(self, run_id: str):
        del self.f["runs"][run_id]

    def checkpoint_problem(self, run_id: str, ranks: int) -> str | None:
        """Why the run's checkpoint cannot be loaded at ``ranks`` ranks (:func:`hpcgc.checkpoint_file.problem`)."""
        from . import checkpoint_file
        return checkpoint_file.problem(self.checkpoints / f"{run_id}.h5", ranks)

    def load_checkpoint(self, run_id: str, ranks: int):
        """(iteration, rows, [per-rank state trees]) of the run's checkpoint (:func:`hpcgc.checkpoint_file.load`)."""
        from . import checkpoint_file
        return checkpoint_file.load(self.checkpoints / f"{run_id}.h5", ranks)

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
    def begin_run(self, run_id: str, attrs: dict, n_workers: int, world_size: int) -> RunWriter:
        return RunWriter(self, self.f["runs"].create_group(run_id), attrs, n_workers, world_size)

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
                 rows: int | None = None):
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
        for group, names in (("time", PHASES), ("mpi_bytes", LEDGER)):
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
        for group, names in (("time", PHASES), ("mpi_bytes", LEDGER)):
            out += [(group, j, self.g[group][name]) for j, name in enumerate(names) if name in self.g[group]]
        return out

    @guarded
    def save_checkpoint(self, iteration: int, trees: list) -> int:
        """The run's state at ``iteration`` (one typed tree per rank, :mod:`hpcgc.typed_state`) into
        ``<results>.checkpoint/<run_id>.h5`` (:func:`hpcgc.checkpoint_file.save`); returns its bytes."""
        from . import checkpoint_file
        self.write_rows()                        # the rows the checkpoint refers to are on disk first
        self.parent.f.flush()
        self.parent.require_space(sum(_tree_bytes(t) for t in trees))
        d = self.parent.checkpoints
        d.mkdir(exist_ok=True)
        return checkpoint_file.save(d / f"{self.run_id}.h5", iteration, self.rows, self.run_id, trees)

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


def _attr(v):
    if v is None:
        return ""
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return np.array(v, dtype=h5py.string_dtype())
    return v


# -- reading ------------------------------------------------------------------------------------
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

    @property
    def status(self) -> str:
        return self.attrs.get("status", "")

    def __repr__(self):
        return f"Run({self.run_id!r}, status={self.status!r}, rows={len(self.series.get('iteration', []))})"


class Results(list):
    """A list of :class:`Run` with the file-level attributes in ``.attrs``.

    ``to_frame()``, ``runs_frame()`` and ``phases_frame()`` give the same values as pandas frames
    (:mod:`hpcgc.frames`; pandas comes with the ``analysis`` extra)."""

    attrs: dict
    path: Path
    complete: bool
    unreadable: list          # run ids whose data a failure cut off (the file's other runs are intact)
    files: list

    def to_frame(self, workers: bool = False):
        """One row per run × recorded iteration (``workers=True``: × rank), run attributes as columns."""
        from .frames import to_frame
        return to_frame(self, workers=workers)

    def runs_frame(self):
        """One row per run: its attributes, status and final values."""
        from .frames import runs_frame
        return runs_frame(self)

    def spread_frame(self, eps: float | None = None, metric: str = "suboptimality", over: str = "auto"):
        """One row per configuration: median and 95 % interval over its repeats and/or seeds."""
        from .frames import spread_frame
        return spread_frame(self, eps=eps, metric=metric, over=over)

    def phases_frame(self):
        """One row per run × rank × phase: cumulative seconds and ms per iteration at the last row."""
        from .frames import phases_frame
        return phases_frame(self)


def find_files(path) -> list[Path]:
    """The results files in a directory (recursively, natural order), a finished ``x.h5``
    superseding a ``x.h5.partial`` beside it."""
    import re
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
    from .config import tomllib

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
    try:
        config = tomllib.loads(attrs.get("config", ""))
    except tomllib.TOMLDecodeError:
        config = {}

    def group(name):
        return {k: v[()] for k, v in g[name].items()} if name in g else {}
    series = {k: g[k][()] for k in (*SCALAR_SERIES, *WORKER_SERIES) if k in g}
    x_final = g["x_final"][()] if "x_final" in g else None
    return Run(run_id, attrs, config, series, group("time"), group("workers"), group("per_iteration"), x_final,
               group("mpi_bytes"), path, file_attrs)


def _py(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.dtype.kind in "OS":
        return [x.decode() if isinstance(x, bytes) else x for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v


# -- the collectives benchmark (python -m hpcgc.bench collectives) -------------------------------------
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
    """``{collective name: CollectiveTable}`` in measurement order; file attributes in ``.attrs``."""

    attrs: dict
    path: Path


def write_collectives(path, attrs: dict, tables) -> Path:
    """Write a collectives file (rank 0 only): provenance ``attrs`` at the root, one group per
    :class:`CollectiveTable`; created as ``<path>.partial`` and renamed when complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    with h5py.File(partial, "w") as f:
        f.attrs["schema"] = COLLECTIVES_SCHEMA
        f.attrs["schema_version"] = COLLECTIVES_SCHEMA_VERSION
        f.attrs["units"] = "seconds, bytes (size: bytes contributed by each rank); beta in seconds per byte"
        for k, v in attrs.items():
            f.attrs[k] = _attr(v)
        f.attrs["collectives"] = _attr([tb.kind for tb in tables]) if tables else ""
        for tb in tables:
            g = f.create_group(tb.kind)
            for k in COLLECTIVE_ARRAYS:
                g.create_dataset(k, data=np.asarray(getattr(tb, k)))
            for k in COLLECTIVE_FIT:
                g.attrs[k] = getattr(tb, k)
            for k, v in tb.attrs.items():
                g.attrs[k] = _attr(v)
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
        kinds = out.attrs.get("collectives") or []
        for kind in ([kinds] if isinstance(kinds, str) and kinds else kinds):
            g = f[kind]
            arrays = {k: g[k][()] for k in COLLECTIVE_ARRAYS}
            fit = {k: _py(g.attrs[k]) for k in COLLECTIVE_FIT}
            extra = {k: _py(v) for k, v in g.attrs.items() if k not in COLLECTIVE_FIT}
            out[kind] = CollectiveTable(kind=kind, **arrays, **fit, attrs=extra)
        return out
