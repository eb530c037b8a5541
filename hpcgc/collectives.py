"""``python -m hpcgc.bench collectives``: an OSU-style sweep of exactly the collectives hpcgc uses.

For each collective a run can issue (:data:`hpcgc.transport.COLLECTIVES`) and each message size
s = 2^k bytes in ``--min-size`` … ``--max-size`` (default 4 B … 256 MiB), at the rank count of the
job, it measures — warm-up excluded, a barrier before each timed batch, every iteration timed alone
with ``MPI.Wtime`` — each rank's mean time per operation and reports min / avg / max over ranks
(as OSU does). The message size is **per rank**: the bytes each rank contributes (its Gatherv /
Allgatherv payload, its Allreduce vector; the Bcast buffer of the root). The operations are the
very MPI calls of a run (:class:`hpcgc.transport.CollectiveTimer`), not in the bit ledger.

Per collective, an α–β (Hockney) model t(s) = α + β·s is fitted to the avg column by
:func:`fit_alpha_beta` — one least-squares fit in *relative* error over all measured sizes — and
reported with its error (max and median relative deviation of the model from the avg column).

With several ranks per node (two or more nodes of two or more ranks each) the same collectives are
then measured on each node's communicator and on the node leaders' communicator — the intra-node and
inter-node α, β of a hierarchical exchange (:mod:`hpcgc.collective_levels`).

Output: an OSU-like header (:func:`hpcgc.provenance.header`), one aligned table per collective,
the fit lines; and one HDF5 file (:func:`hpcgc.results.write_collectives`, read back with
:func:`hpcgc.results.load_collectives`; layout in ``docs/collectives.md``).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

from .errors import ConfigError

DEFAULT_MIN, DEFAULT_MAX = 4, 256 << 20
MEMORY_FRACTION = 0.5
"""Largest fraction of a node's available memory the benchmark buffers of its ranks may take."""
MAX_MESSAGE = (1 << 31) - 1
"""Payload lengths travel as one int32 per rank (as in a run), so a message is < 2 GiB."""
FIT_METHOD = ("least squares in relative error over all sizes: min sum_i ((alpha + beta*s_i)/t_i - 1)^2, "
              "t_i = avg; alpha, beta >= 0")

DESCRIBE = {
    "gather": "MPI_Gather of the int32 length + MPI_Gatherv of uint8 payloads to rank 0 (uplink, parameter server)",
    "bcast": "MPI_Bcast of a float64 buffer from rank 0 (downlink: the new iterate)",
    "allreduce": "MPI_Allreduce (SUM) of a {dtype} vector (summable messages)",
    "allgather": "MPI_Allgather of the int32 length + MPI_Allgatherv of uint8 payloads (every rank decodes)",
    "alltoall": "MPI_Alltoall of the int32 lengths + MPI_Alltoallv of uint8 payloads split evenly over the other "
                "ranks (reduce-scatter's first stage)",
}

DESCRIBE_STAT = ("each rank's mean seconds per operation over the timed iterations (warm-up excluded); "
                 "avg/min/max over ranks")

_SUFFIX = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


# -- sizes ---------------------------------------------------------------------------------------

def parse_size(text: str, option: str = "size") -> int:
    """``"4"``, ``"1K"``, ``"64M"``, ``"256MiB"``, ``"1G"`` → bytes (binary suffixes: K = 1024)."""
    m = _SIZE.match(str(text))
    if m is None:
        raise ConfigError(f"collectives: {option} {text!r} is not a size in bytes "
                          "(an integer, optionally with K, M, G or T = 2^10, 2^20, 2^30, 2^40: 4, 1K, 64M)")
    return int(m.group(1)) << _SUFFIX[m.group(2).upper()]


def message_sizes(min_size: int, max_size: int) -> list[int]:
    """The powers of two s with min_size ≤ s ≤ max_size; a clear error if there are none."""
    if max_size > MAX_MESSAGE:
        raise ConfigError(f"collectives: --max-size {format_bytes(max_size)} is too large: a message must be "
                          f"< 2 GiB (hpcgc announces payload lengths as one int32 per rank)")
    sizes = [1 << k for k in range(32) if min_size <= (1 << k) <= max_size]
    if not sizes:
        raise ConfigError(f"collectives: the message-size range --min-size {format_bytes(min_size)} … "
                          f"--max-size {format_bytes(max_size)} contains no power of two: nothing to measure")
    return sizes


def format_bytes(n: float) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def item_bytes(kind: str, fp64: bool = False) -> int:
    """Element size of ``kind``'s buffer: a message of s bytes is s / item elements."""
    return {"gather": 1, "allgather": 1, "alltoall": 1, "bcast": 8, "allreduce": 8 if fp64 else 4}[kind]


def sizes_for(kind: str, sizes: list[int], fp64: bool = False) -> list[int]:
    """The sizes ``kind`` can send: whole elements only (bcast from 8 B, allreduce from 4 or 8 B)."""
    return [s for s in sizes if s >= item_bytes(kind, fp64)]


# -- memory guard ----------------------------------------------------------------------------------

def buffer_bytes(kind: str, size: int, n: int, root: bool) -> int:
    """Bytes of benchmark buffers one rank holds for ``kind`` at ``size`` bytes per rank on n ranks."""
    if kind == "gather":
        return size * (n + 1) if root else size
    if kind == "allgather":
        return size * (n + 1)
    if kind in ("allreduce", "alltoall"):
        return 2 * size
    return size


def node_bytes(kinds, size: int, n: int, ranks_here: int, root_here: bool) -> int:
    """Largest total of the buffers of the ``ranks_here`` ranks of one node at ``size`` (collectives
    run one after the other, each freeing its buffers)."""
    need = 0
    for kind in kinds:
        others = ranks_here - 1 if root_here else ranks_here
        total = others * buffer_bytes(kind, size, n, False)
        if root_here:
            total += buffer_bytes(kind, size, n, True)
        need = max(need, total)
    return need


def available_memory() -> int | None:
    """This node's available memory in bytes (``MemAvailable``), None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def largest_fitting(kinds, sizes, n, ranks_here, root_here, avail) -> int | None:
    """Largest size in ``sizes`` whose buffers fit in ``MEMORY_FRACTION`` of ``avail``."""
    fits = [s for s in sizes if node_bytes(kinds, s, n, ranks_here, root_here) <= MEMORY_FRACTION * avail]
    return max(fits) if fits else None


def memory_error(kinds, max_size, n, ranks_here, root_here, avail, host) -> str | None:
    """The message refusing ``max_size`` on this node, or None if its buffers fit."""
    need = node_bytes(kinds, max_size, n, ranks_here, root_here)
    if avail is None or need <= MEMORY_FRACTION * avail:
        return None
    worst = max(kinds, key=lambda k: node_bytes([k], max_size, n, ranks_here, root_here))
    fit = largest_fitting(kinds, [1 << k for k in range(32) if 1 << k < max_size], n, ranks_here, root_here, avail)
    hint = f"use --max-size {format_bytes(fit).replace(' ', '').replace('iB', '')} or less" if fit else \
        "use fewer ranks per node"
    return (f"collectives: --max-size {format_bytes(max_size)} needs {format_bytes(need)} of buffers on node "
            f"{host} ({ranks_here} rank(s) there, {worst} on {n} ranks holds up to (n+1) x the message per rank), "
            f"more than {MEMORY_FRACTION:.0%} of its available memory ({format_bytes(avail)}); {hint}")


# -- the alpha-beta fit ----------------------------------------------------------------------------

def fit_alpha_beta(size, t):
    """Fit t(s) = α + β·s to measured times → ``(alpha, beta, max_rel_error, median_rel_error)``.

    Method (:data:`FIT_METHOD`): one least-squares fit in *relative* error over all sizes,
    minimising Σ_i ((α + β·s_i) / t_i − 1)², with α, β ≥ 0 (if the unconstrained optimum has a
    negative component, that component is 0 and the other is refitted). Weighting every size by its
    own time makes each size count equally: the small-message end, where t ≈ α, determines α, and
    the large-message end, where t ≈ β·s, determines β — the two-ends Hockney fit as a single
    problem, and the maximum-likelihood fit when timing noise is proportional to the time, as it is.
    Noiseless t = α + β·s gives α and β back exactly (to rounding).

    The error is the relative deviation |α + β·s_i − t_i| / t_i of the model from the data, max and
    median over the sizes used. Fewer than two distinct sizes: α, β and the errors are NaN.
    """
    s = np.asarray(size, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    if s.shape != t.shape or s.ndim != 1:
        raise ValueError("size and t must be 1-D arrays of one length")
    if np.unique(s).size < 2 or np.any(t <= 0) or not np.all(np.isfinite(t)):
        return math.nan, math.nan, math.nan, math.nan
    scale = s.max()
    a = np.column_stack([1.0 / t, (s / scale) / t])       # columns scaled: s up to 2^31
    b = np.ones_like(t)
    (alpha, beta_scaled), *_ = np.linalg.lstsq(a, b, rcond=None)
    beta = beta_scaled / scale
    if alpha < 0 or beta < 0:
        u, v = a[:, 0], a[:, 1]
        alpha, beta = (0.0, float(v @ b / (v @ v)) / scale) if alpha < 0 else (float(u @ b / (u @ u)), 0.0)
    rel = np.abs(alpha + beta * s - t) / t
    return float(alpha), float(beta), float(rel.max()), float(np.median(rel))


# -- output ----------------------------------------------------------------------------------------

TABLE_HEAD = f"# {'Size(B)':>10} {'Avg(us)':>12} {'Min(us)':>12} {'Max(us)':>12} {'Iterations':>10}"


def table_row(size: int, tmin: float, tavg: float, tmax: float, iterations: int) -> str:
    return f"  {size:>10d} {tavg * 1e6:>12.2f} {tmin * 1e6:>12.2f} {tmax * 1e6:>12.2f} {iterations:>10d}"


def fit_line(alpha: float, beta: float, err_max: float, err_median: float, nsizes: int) -> str:
    if not math.isfinite(alpha):
        return "# alpha, beta: not fitted (fewer than 2 message sizes)"
    gbps = f"{1.0 / beta / 1e9:.3f} GB/s" if beta > 0 else "inf GB/s"
    return (f"# alpha = {alpha * 1e6:.3f} us, beta = {beta * 1e9:.4f} ns/B ({gbps}), fit error "
            f"{err_max:.1%} (max; median {err_median:.1%}) over {nsizes} sizes")


# -- command line ------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """Option errors become one ``hpcgc: error:`` line on rank 0 (exit 2 everywhere), not a usage
    message on every rank."""

    def error(self, message):
        raise ConfigError(f"collectives: {message} (see python -m hpcgc.bench collectives --help)")


def build_parser() -> argparse.ArgumentParser:
    from .transport import COLLECTIVES, MORE_COLLECTIVES
    p = _Parser(
        prog="python -m hpcgc.bench collectives",
        description="OSU-style latency/bandwidth sweep of exactly the MPI collectives hpcgc runs issue, at "
                    "the job's rank count, with the fitted latency alpha and inverse bandwidth beta of each.",
        epilog="Message size = bytes each rank contributes (as in OSU). Times: each rank's mean over the "
               "timed iterations (warm-up excluded); Avg/Min/Max over ranks. alpha, beta: least squares in "
               "relative error over all sizes of t(s) = alpha + beta*s. Docs: docs/collectives.md.\n"
               "example: mpiexec -n 4 python -m hpcgc.bench collectives --max-size 64M",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collectives", "-c", nargs="+", choices=COLLECTIVES + MORE_COLLECTIVES,
                   default=list(COLLECTIVES), metavar="NAME",
                   help=f"which ({' '.join(COLLECTIVES + MORE_COLLECTIVES)}; default {' '.join(COLLECTIVES)}; "
                        "alltoall = Alltoall of the lengths + Alltoallv, reduce-scatter's first stage)")
    p.add_argument("--min-size", default=str(DEFAULT_MIN), metavar="BYTES",
                   help="smallest message per rank, bytes; suffixes K M G = 2^10 2^20 2^30 (default 4)")
    p.add_argument("--max-size", default=None, metavar="BYTES",
                   help="largest message per rank (default 256M, lowered to what fits in half the memory of "
                        "each node; an explicit size that does not fit is an error)")
    p.add_argument("--iterations", "-i", type=int, default=1000,
                   help="timed iterations per size up to --large-threshold (default 1000)")
    p.add_argument("--iterations-large", type=int, default=100,
                   help="timed iterations per size above --large-threshold (default 100)")
    p.add_argument("--warmup", "-x", type=int, default=100,
                   help="untimed warm-up iterations per size up to --large-threshold (default 100)")
    p.add_argument("--warmup-large", type=int, default=10, help="warm-up iterations above the threshold (default 10)")
    p.add_argument("--large-threshold", default="8K", metavar="BYTES",
                   help="sizes above this use the -large counts (default 8K, as OSU)")
    p.add_argument("--max-seconds", type=float, default=1.0,
                   help="about this many seconds of timed iterations per size and collective, at least 3 "
                        "iterations (0: no cap; default 1)")
    p.add_argument("--fp64", action="store_true", help="allreduce float64 vectors (default float32)")
    p.add_argument("--out", "-o", metavar="PATH", help="HDF5 file (default results/collectives-<UTC time>.h5)")
    return p


def parse_args(argv):
    """Options, validated identically on every rank before MPI is used (errors: ConfigError)."""
    args = build_parser().parse_args(argv)
    args.min_bytes = parse_size(args.min_size, "--min-size")
    args.max_given = args.max_size is not None
    args.max_bytes = parse_size(args.max_size, "--max-size") if args.max_given else DEFAULT_MAX
    args.threshold = parse_size(args.large_threshold, "--large-threshold")
    if args.min_bytes > args.max_bytes:
        raise ConfigError(f"collectives: empty message-size range: --min-size {format_bytes(args.min_bytes)} > "
                          f"--max-size {format_bytes(args.max_bytes)}")
    args.sizes = message_sizes(args.min_bytes, args.max_bytes)
    args.collectives = list(dict.fromkeys(args.collectives))
    for kind in args.collectives:
        if not sizes_for(kind, args.sizes, args.fp64):
            raise ConfigError(f"collectives: empty message-size range for {kind}: its messages are whole "
                              f"{item_bytes(kind, args.fp64)}-byte elements, and --max-size is "
                              f"{format_bytes(args.max_bytes)}")
    if min(args.iterations, args.iterations_large) < 1 or min(args.warmup, args.warmup_large) < 0:
        raise ConfigError("collectives: --iterations and --iterations-large must be >= 1, "
                          "--warmup and --warmup-large >= 0")
    if not (args.max_seconds >= 0 and math.isfinite(args.max_seconds)):
        raise ConfigError(f"collectives: --max-seconds must be >= 0 (got {args.max_seconds})")
    return args


def fit_memory(args, t, hosts) -> str | None:
    """Apply the memory guard on this rank's node: lower a default --max-size to what fits, or
    return the error refusing an explicit one (or when even the smallest size does not fit)."""
    me = hosts[t.rank]
    ranks_here, root_here = hosts.count(me), hosts[0] == me
    avail = available_memory()
    if avail is None:
        return None
    if not args.max_given:
        fit = largest_fitting(args.collectives, args.sizes, t.size, ranks_here, root_here, avail)
        if fit is not None:
            args.node_max = fit
            return None
    from .transport import processor_name
    return memory_error(args.collectives, max(args.sizes), t.size, ranks_here, root_here, avail, processor_name())


def _check_out(path: Path) -> str | None:
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK) or path.is_dir():
        return f"collectives: cannot write the results file {path} (directory {parent} is not writable)"
    return None


def setup(args, t):
    """Collective set-up checks (memory per machine, output path); every rank raises alike on error."""
    from .machine import machine_id
    hosts = t.bcast_object(t.gather_object(machine_id()))
    error = None
    try:
        args.node_max = max(args.sizes)
        error = fit_memory(args, t, hosts)
        if error is None and t.is_root:
            error = _check_out(args.out_path)
    except Exception as exc:  # noqa: BLE001 - reported collectively
        error = exc
    t.agree(ConfigError(error) if isinstance(error, str) else error)
    top = -t.allreduce_max(-float(args.node_max))          # the smallest node's limit, on every rank
    reduced = int(top) < max(args.sizes)
    args.sizes = [s for s in args.sizes if s <= top]
    return reduced


def sweep_one(timer, kind, sizes, args, say):
    """Measure one collective over ``sizes`` → dict of arrays (seconds), printing rows as they come."""
    rows = []
    timer.allocate(kind, max(sizes), np.float64 if args.fp64 else np.float32)
    try:
        for s in sizes:
            large = s > args.threshold
            it = args.iterations_large if large else args.iterations
            wu = args.warmup_large if large else args.warmup
            tmin, tavg, tmax, n_it = timer.measure(kind, s, it, wu, args.max_seconds)
            rows.append((s, tavg, tmin, tmax, n_it))
            say(table_row(s, tmin, tavg, tmax, n_it))
    finally:
        timer.release()
    size, avg, tmin, tmax, iters = (np.array(c) for c in zip(*rows))
    return {"size": size.astype(np.int64), "avg": avg, "min": tmin, "max": tmax, "iterations": iters.astype(np.int64)}


def print_header(say, attrs, args, n: int, reduced: bool):
    """The OSU-style header: what, provenance (version, date, MPI library, ranks, hosts, command line),
    conventions."""
    from . import provenance
    say("# hpcgc collectives benchmark (OSU style)")
    say(provenance.header(attrs))
    say(f"# message size = bytes each rank contributes; time = each rank's mean over the timed iterations "
        f"(MPI_Wtime, warm-up excluded,\n#   barrier before each batch and after each iteration, untimed); "
        f"Avg/Min/Max over the {n} ranks")
    if reduced:
        say(f"# --max-size lowered to {format_bytes(max(args.sizes))}: 256 MiB would need more than "
            f"{MEMORY_FRACTION:.0%} of a node's available memory")


def options_attrs(args) -> dict:
    """The options of the sweep, stored beside the provenance in the file."""
    return {"iterations": args.iterations, "iterations_large": args.iterations_large, "warmup": args.warmup,
            "warmup_large": args.warmup_large, "large_threshold": args.threshold,
            "max_seconds": args.max_seconds, "allreduce_dtype": "float64" if args.fp64 else "float32",
            "size_convention": "bytes contributed by each rank", "statistic": DESCRIBE_STAT}


def make_table(kind, cols, fit, args):
    """The :class:`hpcgc.results.CollectiveTable` of one sweep and its fit."""
    from .results import CollectiveTable
    desc = DESCRIBE[kind].format(dtype="float64" if args.fp64 else "float32")
    alpha, beta, err, err_med = fit
    return CollectiveTable(kind=kind, **cols, alpha=alpha, beta=beta, fit_error=err, fit_error_median=err_med,
                           fit_method=FIT_METHOD, attrs={"mpi_calls": desc, "item_bytes": item_bytes(kind, args.fp64)})


def measure_all(timer, args, say) -> list:
    """Sweep every selected collective; print its table and fit → list of CollectiveTable."""
    tables = []
    for kind in args.collectives:
        sizes = sizes_for(kind, args.sizes, args.fp64)
        if not sizes:            # only if the memory guard lowered the range below one element
            continue
        desc = DESCRIBE[kind].format(dtype="float64" if args.fp64 else "float32")
        say(f"\n# {kind}: {desc}")
        say(TABLE_HEAD)
        cols = sweep_one(timer, kind, sizes, args, say)
        fit = fit_alpha_beta(cols["size"], cols["avg"])
        say(fit_line(*fit, len(sizes)))
        tables.append(make_table(kind, cols, fit, args))
    return tables


def level_tables(t, args, say) -> dict:
    """With several ranks per node, the sweep on each node's and on the leaders' communicator
    (:func:`hpcgc.collective_levels.measure_levels`), printed and fitted → on rank 0 ``{None: the
    node shape, level: (attrs, [CollectiveTable])}``."""
    from .collective_levels import DESCRIBE_LEVEL, measure_levels
    from .transport import CollectiveTimer
    kinds = [k for k in args.collectives if sizes_for(k, args.sizes, args.fp64)]
    quiet = (lambda *a: None)
    out = measure_levels(t, kinds, lambda lt, kind: sweep_one(CollectiveTimer(lt), kind,
                                                              sizes_for(kind, args.sizes, args.fp64), args, quiet))
    for level, value in list(out.items()):
        if level is None:
            continue
        attrs, swept = value
        say(f"\n# level {level} ({attrs['ranks']} ranks): {DESCRIBE_LEVEL[level]}")
        tables = []
        for kind, cols in swept:
            say(f"# {level} {kind}")
            say(TABLE_HEAD)
            for row in zip(cols["size"], cols["min"], cols["avg"], cols["max"], cols["iterations"]):
                say(table_row(int(row[0]), *row[1:4], int(row[4])))
            fit = fit_alpha_beta(cols["size"], cols["avg"])
            say(fit_line(*fit, len(cols["size"])))
            tables.append(make_table(kind, cols, fit, args))
        out[level] = (attrs, tables)
    return out


def main(argv) -> int:
    """Every rank: validate, check memory collectively, sweep; rank 0 prints and writes the file."""
    import datetime

    from . import machine, provenance
    from .results import write_collectives
    from .transport import CollectiveTimer, Transport

    args = parse_args(argv)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.out_path = Path(args.out) if args.out else Path("results") / f"collectives-{stamp}.h5"
    t = Transport()
    reduced = setup(args, t)
    attrs = provenance.collect(t, ["collectives", *argv])
    say = (lambda *a: (print(*a), sys.stdout.flush())) if t.is_root else (lambda *a: None)
    print_header(say, attrs, args, t.size, reduced)
    probe = machine.Probe(t)                # the machine's load and CPU around the sweep (collective)
    if t.is_root:
        say(machine.describe(probe.start))
    tables = measure_all(CollectiveTimer(t), args, say)
    levels = level_tables(t, args, say)
    noise, warnings = probe.finish()
    for w in warnings:
        say(w)
    if t.is_root:
        shape = levels.pop(None)
        path = write_collectives(args.out_path, {**attrs, **options_attrs(args), **noise, **shape}, tables,
                                 levels)
        say(f"\n# results: {path}")
    return 0
