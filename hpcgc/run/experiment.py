"""The experiment: prepare every run (validation and data set-up, before any file exists) and
execute them one after the other into one results file written by rank 0."""
from __future__ import annotations

import math
import signal
import time

import numpy as np

from .. import compressors, config
from ..errors import ConfigError, UserError
from ..transport import RankOrderedJIT, Transport
from .run import Run
from .setup import DataCache, plan
from .signals import REQUEST, Interrupted


def warm_jit(specs, transport: Transport, sizes=(), kernels=()):
    """Load every compressor's kernels (and the objective's ``expit``; ``kernels``: more warm-up
    functions, e.g. :func:`hpcgc.losses.warm`) from numba's cache on every rank at once; only if
    some rank misses one, compile on rank 0 first and then load on the others (RankOrderedJIT).

    Each spec is exercised at d = 64, then each ``(compressor, d)`` of ``sizes`` (the runs' own
    compressors at their dimensions): some kernels exist only at large d or large k (top-k's sampled
    threshold for d >= 2**16, a k that does not fit in 64), and a kernel first met inside a run's
    iteration would put its compilation or cache load into that iteration's time."""
    from ..compressors.kernels._numba_cache import WouldCompile, cache_only, init_target
    from ..compressors.kernels.elias_gaps import DECODE_TABLE, sparse_layout_bits
    from ..exchange.base import Messages
    from ..problems import expit

    at_size = list({(c.spec, int(d)): (c, int(d)) for c, d in sizes}.values())

    def exercise(c, d, rng):
        try:
            c.validate(d)
        except ConfigError:
            return
        x = rng.standard_normal(d)
        p = c.compress(x, rng)
        c.decompress(p, d)
        out = np.zeros(d)
        c.decompress_add(p, d, out, 1.0)
        c.model_bits(p, d)
        batch = Messages.of([p])                # rank 0's receive buffer: the transport's dtypes
        many = c.prepared(d).add_many
        if many is not None:                    # rank 0's decode-adds (Algorithm.add_messages)
            many(*batch.batch, np.ones(1), out)
        lay = c.sparse_layout(d)
        if lay is not None:                     # rank 0's bit accounting of such payloads (Exchange.account)
            one = np.ones(1, dtype=np.int64)
            sparse_layout_bits(*batch.batch, np.zeros(1), one, one * lay[2], np.zeros(1), d, np.empty(1),
                               DECODE_TABLE)
        entries = c.prepared(d).entries
        if entries is not None:                 # EF's sparse step: one message and a pair, x's lines asked for
            from ..compressors.sparse_base import decode_entries
            two = [entries(p, 1.0), entries(p, 1.0)]
            decode_entries(two[:1], np.empty(p.size, dtype=np.int64), np.empty(p.size), out)
            decode_entries(two, np.empty(p.size, dtype=np.int64), np.empty(p.size), out)

    def warm():
        expit(np.zeros(1))
        for kernel in kernels:
            kernel()
        rng = np.random.default_rng(0)
        for spec in specs:
            exercise(compressors.make(spec), 64, rng)
        for c, d in at_size:
            exercise(c, d, rng)
    missed = 0.0
    try:
        with cache_only():
            warm()
    except WouldCompile:
        missed = 1.0
    except Exception:  # noqa: BLE001 - reported collectively by the ordered pass below
        missed = 1.0
    transport.quiet_barrier()      # ranks done early sleep instead of spinning in MPI (oversubscribed nodes)
    if transport.allreduce_max(missed):
        init_target()               # the compile path's full target refresh, without the BLAS probe
        RankOrderedJIT(transport).run(warm)


def parse_selection(text: str, count: int) -> list[int]:
    """'3', '0,2,5', '4-7' (inclusive) → sorted grid indices, each checked against the grid size."""
    out = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a = int(lo)
            b = int(hi) if hi else a
            out.update(range(a, b + 1))
    except ValueError:
        raise ConfigError(f"--grid-index expects I, I,J or I-J (0-based), got {text!r}") from None
    bad = [i for i in out if not 0 <= i < count]
    if bad or not out:
        raise ConfigError(f"--grid-index {text!r} is outside the grid of {count} point(s) (0..{count - 1})")
    return sorted(out)


def check_world(plans, size: int) -> None:
    """The plan-time checks that need the number of workers (the MPI world's size, before any data
    is read): each compressor's :meth:`~hpcgc.compressors.Compressor.check_workers`, and under
    run.collective = 'reduce-scatter' d ≥ n (one segment per rank) where the data specification
    states d (synthetic data, linear problems; else the exchange refuses it when the data's d is
    known, on every rank alike); every problem at once, one line each."""
    from ..compressors.segments import bounds
    from ..data.specs import declared_features
    from ..problems import CONVEX_KINDS, NONCONVEX_KINDS
    problems = []
    for rp in plans:
        r = rp.cfg["run"]
        n = size - 1 if r["server"] == "dedicated" else size
        try:
            compressors.make(r["compressor"]).check_workers(n)
            if r["collective"] == "reduce-scatter" and rp.cfg["problem"]["kind"] in (*CONVEX_KINDS, *NONCONVEX_KINDS):
                d = declared_features(rp.cfg["data"]["dataset"])
                if d is not None:
                    bounds(d, size)
        except ConfigError as exc:
            if str(exc) not in problems:
                problems.append(str(exc))
    if problems:
        raise ConfigError("\n".join(problems))


def prepare(cfg: dict, transport: Transport, select: str | None = None) -> list[Run]:
    """Validate every grid point and build every run's set-up on every rank, before any file exists.

    Any user error (bad name, parameter, data file, partition, batch size) is raised here on every
    rank alike, so a bad experiment fails before it has written anything. ``select`` restricts the
    grid to some points (``--grid-index``, e.g. one SLURM array task each); run ids keep their
    index in the full grid.
    """
    error, plans = None, []
    try:
        plans = plan(cfg)
        if select is not None:           # grid points, each with all its repeats
            chosen = set(parse_selection(select, len({p.index for p in plans})))
            plans = [p for p in plans if p.index in chosen]
        check_world(plans, transport.size)
        if any(p.cfg["run"]["topology"] == "hierarchical" for p in plans):
            from ..transport import ranks_per_node_setting
            ranks_per_node_setting(transport.size)        # the test-only node assignment must divide the ranks
    except UserError as exc:
        error = exc
    transport.agree(error)
    cache = DataCache(transport)
    runs = []
    for rp in plans:
        setup = cache.setup(rp.cfg)          # agrees on errors internally
        error = None
        try:
            runs.append(Run(rp, setup, transport))
        except UserError as exc:
            error = exc
        transport.agree(error)
    return runs


class Summaries(list):
    """The runs' summaries (rank 0), with ``warnings``: the machine-noise warnings of
    :class:`hpcgc.machine.Probe` (empty when the machine was quiet, and on other ranks)."""

    def __init__(self, *items):
        super().__init__(*items)
        self.warnings = []


def execute(runs: list[Run], transport: Transport, out, argv=(), log=print, t_start=None, name="experiment",
            progress=False, overwrite=False, resume=False):
    """Run prepared runs; rank 0 writes ``out`` (via ``out.partial``). Returns (path, summaries) on
    rank 0 and (None, []) elsewhere (summaries: a :class:`Summaries`). A run that diverges is recorded and the experiment goes on;
    an exception leaves the partial file readable and propagates. ``resume``: continue the
    interrupted invocation whose ``out.partial`` is there — finished runs are kept, an interrupted
    run continues from its checkpoint, the rest run as usual."""
    from .. import machine, provenance

    t = transport
    # each rank exercises its own worker's compressor at the run's d (the decoders are shared)
    # and only the objective and step kernels the runs use (each costs every rank a cache load)
    kernels = {k for r in runs for k in (*r.alg.kernels, *getattr(r.s.local, "kernels", ()), *r.comp.kernels)}
    sizes = [(r.comps[t.rank % len(r.comps)], r.s.d) for r in runs]
    for r in runs:                       # reduce-scatter compresses segments: their kernels at their lengths
        if r.r["collective"] == "reduce-scatter" and r.s.d >= t.size:
            from ..compressors.segments import bounds, segment_compressors
            comp = r.comps[t.rank % len(r.comps)]
            sizes += [(c, b - a) for c, (a, b) in zip(segment_compressors(comp, r.s.d, t.size), bounds(r.s.d, t.size))]
    warm_jit(sorted({r.comp.spec for r in runs}), t, sizes=sizes, kernels=sorted(kernels, key=lambda k: k.__module__))
    attrs = provenance.collect(t, list(argv))
    probe = machine.Probe(t)                   # the machine's load and CPU at the start, our CPU time from here
    writer, err = None, None
    if t.is_root:
        from ..results import ResultsWriter  # h5py: only rank 0 writes
        attrs.update(machine.file_attrs("machine_start", probe.start))
        log(provenance.header(attrs))
        log(machine.describe(probe.start))
        if t_start is not None:
            log(f"# experiment {name!r}: {len(runs)} run(s); set-up {time.perf_counter() - t_start:.2f} s "
                "(data, partitions, f*, JIT)")
        try:
            writer = ResultsWriter(out, attrs, overwrite=overwrite, resume=resume)
            err = resume_mismatch(writer, runs, attrs, t.size) if resume else None
            if err is not None:                     # refused: the partial file as it was
                writer.f.close()
            elif resume:
                writer.mark_resumed(attrs)
        except (FileExistsError, FileNotFoundError) as exc:
            err = UserError(str(exc))
        except OSError as exc:
            err = UserError(f"cannot create results file {out}: {exc.strerror or exc}")
    t.agree(err)
    summaries = Summaries()
    try:
        for i, run in enumerate(runs):
            stop_on_signal(t, summaries, run.rp.run_id, writer)
            t.agree(writer.free_space_error(run.rp.run_id, run.estimated_bytes()) if writer is not None else None)
            run.writer = writer
            run.show_progress = progress
            blob = None
            if resume:
                what = t.bcast_object(resume_plan(writer, run.rp.run_id) if t.is_root else None)
                if what == "keep":
                    log(f"[{i + 1}/{len(runs)}] {run.rp.run_id}: kept from {out}.partial")
                    continue
                if what == "checkpoint":
                    (k, rows, trees), err = (0, 0, None), None
                    if t.is_root:
                        try:
                            k, rows, trees = writer.load_checkpoint(run.rp.run_id, t.size)
                        except UserError as exc:
                            err = exc
                    t.agree(err)
                    # the trees rank 0 read as plain arrays and strings; each rank checks its own
                    blob, run.resume_rows = t.scatter_object(trees), rows
                    log(f"[{i + 1}/{len(runs)}] {run.rp.run_id}: resuming from its checkpoint at iteration {k}")
            s = run.execute(resume=blob)
            t.agree(writer.error if writer is not None else None)     # a write failure ends every rank
            if s is not None:
                summaries.append(s)
                measure = (f"|grad f|^2/|grad f(x0)|^2 = {s.grad_ratio:.3e}" if math.isfinite(s.grad_ratio)
                           else f"f - f* = {s.suboptimality:.3e}")
                log(f"[{i + 1}/{len(runs)}] {s.run_id}: {s.status} ({s.stop_reason}) after {s.iterations} it, "
                    f"{measure}, {s.mb_up:.4f} MB up, {s.median_iter_ms:.3f} ms/it (median)")
        stop_on_signal(t, summaries, None, writer)
    except BaseException:
        if writer is not None:
            writer.close(complete=False)
        raise
    noise, summaries.warnings = probe.finish()
    if writer is not None:
        writer.set_file_attrs(noise)
    path = writer.close(complete=True) if writer is not None else None
    t.agree(writer.error if writer is not None else None)
    return path, summaries


def resume_mismatch(writer, runs, attrs, size):
    """Rank 0: why this invocation cannot continue the file's (None if it can)."""
    f = writer.f
    diffs = []
    if int(f.attrs.get("world_size", -1)) != size:
        diffs.append(f"{int(f.attrs.get('world_size', -1))} MPI ranks then, {size} now")
    for key in ("hpcgc_version", "git_commit"):
        then = f.attrs.get(key)
        then = then.decode() if isinstance(then, bytes) else then
        if then != attrs.get(key):
            diffs.append(f"{key} {then} then, {attrs.get(key)} now")
    planned = {r.rp.run_id: config.to_toml(r.rp.cfg) for r in runs}
    for run_id, g in f["runs"].items():
        text = g.attrs.get("config", "") if g is not None else ""
        text = text.decode() if isinstance(text, bytes) else text
        if run_id not in planned:
            diffs.append(f"run {run_id} is in the file but not in this experiment")
        elif text != planned[run_id]:
            diffs.append(f"run {run_id} has another configuration")
    for run_id in planned:                  # before anything runs: a checkpoint this version cannot load
        problem = writer.checkpoint_problem(run_id, size) if run_id in f["runs"] else None
        if problem:
            return UserError(f"--resume: {problem}")
    if diffs:
        return UserError(f"--resume: {writer.partial} was written by a different invocation: " + "; ".join(diffs[:5]))
    return None


def resume_plan(writer, run_id: str) -> str:
    """Rank 0: 'keep' a finished run, continue from a 'checkpoint', or run it 'fresh' (dropping what an
    interruption before its first checkpoint left)."""
    state = writer.run_state(run_id)
    if state is None:
        return "fresh"
    status, ck = state
    if status in ("completed", "diverged", "overflow", "stopped"):
        return "keep"
    if ck is not None and status != "unreadable":
        return "checkpoint"
    writer.drop_run(run_id)
    return "fresh"


def stop_on_signal(t: Transport, summaries, next_run, writer):
    """Between runs (collective, one scalar): if any rank received a stop signal, end the
    experiment with :class:`Interrupted`, saying on rank 0 what the partial file keeps."""
    signum = int(t.allreduce_max(float(REQUEST.signum)))
    if not signum:
        return
    msg = ""
    if t.is_root:
        done = [s for s in summaries if s.status != "interrupted"]
        cut = [s for s in summaries if s.status == "interrupted"]
        kept = f"{len(done)} finished run(s)" + (f" and {cut[0].run_id} up to iteration {cut[0].iterations}"
                                                 if cut else "")
        where = writer.partial if writer is not None else "no results file"
        msg = (f"interrupted by {signal.Signals(signum).name}: {kept} kept in {where} (complete = false)"
               + (f"; {next_run} and later runs not started" if next_run else "")
               + ("; to continue, run the same command with --resume" if writer is not None else ""))
    raise Interrupted(signum, msg)
