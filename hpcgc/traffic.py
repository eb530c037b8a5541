"""The memory-traffic floor of a run's phases (``python -m hpcgc.bench floor``, issue 31 target 1).

At d = 2²⁰ the method's own phases are memory-bound: a pass over one float64 d-vector moves
8 MiB. For each phase of rank 0's iteration this module counts the bytes the *mathematics* of the
phase must read and write — from the data (the shard's nonzeros, the distinct columns it touches,
its rows), the d-vectors the recursion reads and updates, and the payloads that really went
through MPI (the transport's ledger) — and divides them by the copy bandwidth measured in the
same run (:func:`copy_bandwidth`). The measured phase median over that time is the phase's
**traffic ratio**: 1 is a kernel that moves nothing but what the step needs, at copy speed.

What "the mathematics needs" means here, per phase (rank 0; d coordinates, a CSR shard of m rows
with z nonzeros in u distinct columns, index width I bytes, payload P bytes, K entries decoded per
message — d for dense formats, k for top-k / rand-k):

    grad      the margins' pass over the nonzeros (z·(8 + I) + the row pointers (m + 1)·I), x at
              the u columns (8u), labels and weights (16m), the scatter's second pass over the
              nonzeros (z·(8 + I)) and its read-modify-write of the gradient at the u columns
              (16u), the ℓ2 term's read of x (8d, when l2 ≠ 0), the output written once (8d);
              DIANA reads its shift h (8d: Δ = g − h written in the same pass); EF reads and
              writes its memory e instead of writing a message (e ← e + γg in place: 16d)
    compress  the message read once per pass the compressor needs (``PASSES``: 2 for the
              norm-scaled quantizers, whose scale is known after a pass), the payload written
              (P); the worker's own decode where the recursion uses it (DIANA's h ← h + αC(Δ),
              EF's e ← e − sC(e)): P read and 16K (read-modify-write of K entries);
              ``allreduce``: the wire vector written (4d float32, 8d fp64); ``reduce-scatter``:
              also the owner's stage 2, which the clock records here (:func:`second_stage_items`):
              its segment's sum read per pass, the stage-2 payload written, and the second-stage
              state D read and written where the algorithm keeps one (α₂ ≠ 0: 16d/n)
    server    ``gather`` / ``allgather``: n payloads read and decoded into the aggregate
              (the first written, 8K, the others read-modify-write, 16K); ``allreduce``: the
              summed wire vector read once; ``reduce-scatter``: the owner's n stage-1 pieces of
              its segment (P₁ + 16d/n each), the n stage-2 payloads decoded into the aggregate
              (P₂ + 8d) —
              then the step: x read and written (16d), DIANA's h read and written (16d, α ≠ 0),
              the heavy-ball v (16d, β ≠ 0), the aggregate read (8d, when it is a d-vector of
              its own: not under ``allreduce``, whose sum is read in the step itself). For
              sparse messages (top-k) EF's step touches only the decoded entries: x at nK
              (16nK), no d-vector
    other     hpcgc's bookkeeping: no bytes (the measured figure is shown, no ratio)

Only DCGD, DIANA and EF with a sparse (CSR) or dense shard have a model; other methods print
``no model``. This **byte floor** counts every access as a stream of the touched bytes (8 per
float64) even where it is scattered — a lower bound, as a floor should be, but a loose one where
the entries are far apart: the memory system moves 64-byte lines (:data:`LINE`), and at d = 2²⁰
with k = d/64 entries per message nearly every entry is a line of its own (≈ 8× its bytes).

The **line floor** beside it counts the same items in lines. Each :class:`Item` is streamed
(counted as above) or scattered (:class:`Scatter`): a scattered item over N entries of a float64
vector of length L counts 64 bytes per distinct line it touches, and 64 more per line where it
writes (read-modify-write: a partly written line comes in first) — the lines counted where the
positions are known: x and the gradient at the shard's u columns (the distinct column // 8,
:func:`column_lines`), and under ``gather``/``allgather`` the entries of the workers' messages
(:func:`lines_of` the entries of each worker's next message, computed on copies of the finished
run's state by :func:`hpcgc.floor.next_positions`: one iteration's messages, where the byte counts
are the run's means); else the expectation for N uniformly random distinct positions,
(L/8)·(1 − C(L − 8, N)/C(L, N)), computed exactly (:func:`expected_lines`). Top-k's entries are
not random: where the data's frequent features are neighbours (``synthetic:sparse`` puts them at
the low indices) they share lines, and the expectation over-counts. The scattered items: ``grad``'s
x at the u columns and the gradient's read-modify-write there; ``compress``'s own decode of a sparse
message (k < d entries of e or h); ``server``'s decode of n sparse messages into the aggregate, or
EF's step at x (N = n·k; the counted lines are those of all n messages' entries, a line two share
once). Lines are 8 entries from the vector's start (a vector not 64-byte aligned can touch a few
more).
It is still a lower bound: lines visited at random also lose the hardware prefetcher (their
latency, not the bandwidth, then bounds the access), which neither floor charges.

``tests/test_traffic.py`` checks both counts against a hand count on small problems (the expected
lines also against an average over seeded random draws).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

PHASES = ("grad", "compress", "server", "other")
PASSES = {"qsgd": 2, "qsgd-elias": 2, "natural-dither": 2, "terngrad": 2, "quant": 2, "block-quant": 2}
"""Passes over the message a compressor needs (its scale — a norm — is known after one pass);
every other compressor: one."""
COPY_BYTES = 64 << 20
"""Bytes of each buffer of the copy-bandwidth measurement in one process; with a transport of n
ranks, COPY_BYTES / n (at least 8 MiB): together the ranks copy beyond the last-level cache
without 32 ranks allocating 4 GiB."""
MODELLED = ("dcgd", "diana", "ef")
LINE = 64
"""Bytes of a cache line — what the memory system moves (x86-64; Arm Neoverse): the line floor's unit."""
PER_LINE = LINE // 8
"""float64 entries per line; entry j of a vector is in line j // 8 (a vector taken as 64-byte aligned)."""


def expected_lines(entries: int, length: int) -> float:
    """Expected distinct lines touched by ``entries`` uniformly random distinct positions among the
    ``length`` entries of a float64 vector: Σ over its lines of 1 − C(length − s, N)/C(length, N), s
    the line's entries (8; ``length`` mod 8 for a last, partial line) — exact, with
    C(L − s, N)/C(L, N) = Π_{i<s} (L − N − i)/(L − i); = (L/8)·(1 − C(L − 8, N)/C(L, N)) when 8 divides
    L. ``entries`` ≥ ``length``: every line."""
    n, length = int(entries), int(length)
    if n <= 0 or length <= 0:
        return 0.0
    full, rest = divmod(length, PER_LINE)
    if n >= length:
        return float(full + (rest > 0))

    def untouched(s: int) -> float:
        p = 1.0
        for i in range(s):
            p *= (length - n - i) / (length - i)
        return p
    return full * (1.0 - untouched(PER_LINE)) + ((1.0 - untouched(rest)) if rest else 0.0)


def column_lines(A) -> int | None:
    """Distinct lines of a d-vector at a CSR shard's columns (distinct column // 8), or None for a
    shard that is not CSR."""
    if A is None or not hasattr(A, "indptr"):
        return None
    z = int(A.indptr[-1])
    return int(np.unique(A.indices[:z] // PER_LINE).size) if z else 0


def lines_of(positions) -> int:
    """Distinct lines of a float64 vector at the entries of the index arrays ``positions`` (all of
    them: a line two messages share is counted once)."""
    every = np.concatenate([np.asarray(p, dtype=np.int64) for p in positions]) if positions else np.zeros(0, np.int64)
    return int(np.unique(every // PER_LINE).size)


@dataclass(frozen=True)
class Scatter:
    """A scattered access to ``entries`` positions of a float64 vector of ``length`` entries, which
    reads them (``writes`` False) or also writes them. ``lines``: the distinct lines it touches where
    the positions are known from the data, else None: :func:`expected_lines` (uniformly random
    distinct positions)."""
    entries: int
    length: int
    writes: bool
    lines: int | None = None

    def line_bytes(self) -> float:
        """64 bytes per line read, and 64 more per line where it writes (a line partly written comes
        in first: its other entries are kept)."""
        lines = self.lines if self.lines is not None else expected_lines(self.entries, self.length)
        return float(LINE * lines * (2 if self.writes else 1))


@dataclass(frozen=True)
class Item:
    """One term of a phase's traffic: ``what``, the bytes the byte floor counts (``nbytes``: 8 per
    float64 touched) and how it is accessed — ``scatter`` None for a stream, else a :class:`Scatter`.
    Unpacks as the pair (what, bytes)."""
    what: str
    nbytes: float
    scatter: Scatter | None = None

    def __iter__(self):
        return iter((self.what, self.nbytes))


def line_bytes(item) -> float:
    """The bytes of ``item`` counted in lines: a stream's bytes as counted (a plain (what, bytes)
    pair is a stream), a scattered item's lines (:meth:`Scatter.line_bytes`) — never below its byte
    count (more entries than the vector has: positions repeat, the byte count stands)."""
    _, nbytes = item
    sc = getattr(item, "scatter", None)
    return float(nbytes) if sc is None else max(float(nbytes), sc.line_bytes())


def copy_bandwidth(transport=None, nbytes: int | None = None, batches: int = 15) -> float:
    """Bytes per second of ``np.copyto`` between two buffers of ``nbytes`` (default
    :data:`COPY_BYTES`, divided among a transport's ranks; read + write counted, STREAM's
    convention), from the fastest of ``batches`` copies (STREAM's "best rate": a copy slowed by
    another process's traffic or a page fault says nothing about the machine; the median of 7
    copies used before varied by up to 2× from run to run on a quiet 2-core host). With a
    transport every rank copies at the same time (as they compute in a run: they share the
    memory system) and every rank gets rank 0's figure (collective)."""
    if nbytes is None:
        nbytes = COPY_BYTES if transport is None else max(8 << 20, COPY_BYTES // transport.size)
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)                      # first touch
    if transport is not None:
        transport.sync()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    bw = 2.0 * src.nbytes / float(min(times))
    return float(transport.bcast_object(bw)) if transport is not None else bw


def shard_counts(A, lines: bool = False) -> dict:
    """The data side of the gradient's count: rows m, nonzeros z, distinct columns u, index width I
    (CSR), or None for a shard that is not a matrix (models); with ``lines``, also (CSR) the distinct
    lines of a d-vector at its columns (``lines``: :func:`column_lines`)."""
    if A is None:
        return None
    if hasattr(A, "indptr"):
        z = int(A.indptr[-1])
        u = int(np.unique(A.indices[:z]).size) if z else 0
        out = {"sparse": True, "m": int(A.shape[0]), "z": z, "u": u, "I": int(A.indices.dtype.itemsize)}
        return {**out, "lines": column_lines(A)} if lines else out
    m, d = A.shape
    return {"sparse": False, "m": int(m), "z": int(m * d), "u": int(d), "I": 0}


def grad_items(algorithm: str, d: int, shard: dict, l2: float) -> list:
    """[:class:`Item`] of one full gradient of the shard and the algorithm's use of it (module doc):
    x and the gradient at a CSR shard's u columns scattered, at ``shard["lines"]`` lines where the
    shard's counts have them (:func:`shard_counts`), else at u random columns' expected lines."""
    m, z, u, ix = shard["m"], shard["z"], shard["u"], shard["I"]
    if shard["sparse"]:
        cols = Scatter(u, d, writes=False, lines=shard.get("lines"))
        items = [Item("nonzeros, margins pass", z * (8 + ix) + (m + 1) * ix), Item("x at the shard's columns", 8 * u, cols),
                 Item("labels and weights", 16 * m), Item("nonzeros, scatter pass", z * (8 + ix)),
                 Item("gradient at the shard's columns (read-modify-write)", 16 * u, replace(cols, writes=True))]
    else:
        items = [Item("matrix, margins pass", 8 * z), Item("x", 8 * d), Item("labels and weights", 16 * m),
                 Item("matrix, transposed product", 8 * z)]
    if l2:
        items.append(Item("x for the l2 term", 8 * d))
    if algorithm == "ef":
        items.append(Item("memory e read and written (e + γg in place)", 16 * d))
    else:
        items.append(Item("message written (g, or g - h)", 8 * d))
        if algorithm == "diana":
            items.append(Item("shift h read", 8 * d))
    return items


def kept_entries(comp, d: int) -> int:
    """Entries a payload of ``comp`` decodes into: k for a fixed-k sparse format, else d."""
    from .compressors.sparse_base import FixedKSparse
    return int(comp.params["k"]) if isinstance(comp, FixedKSparse) and "k" in comp.params else d


def compress_items(algorithm: str, comp, collective: str, d: int, payload: float, own_decode: bool,
                   own_lines: int | None = None) -> list:
    """[:class:`Item`] of the worker's message (module doc): ``payload`` = this rank's mean payload
    bytes per iteration (``allreduce``: the wire vector's); a sparse own decode (k < d entries) is
    scattered, at ``own_lines`` lines (its message's, counted) or else at k random entries' expected."""
    passes = PASSES.get(comp.name, 1)
    items = [Item(f"message read ({passes} pass{'es' if passes > 1 else ''})", 8 * d * passes),
             Item("payload written" if collective != "allreduce" else "wire vector written", payload)]
    if own_decode:
        k = kept_entries(comp, d)
        items += [Item("own payload read (own decode)", payload),
                  Item("own decode: state read-modify-write", 16 * k,
                       Scatter(k, d, writes=True, lines=own_lines) if k < d else None)]
    return items


def second_stage_items(comp, seg: int, payload: float, alpha2: float) -> list:
    """[:class:`Item`] of the owner's stage 2 under ``reduce-scatter`` (module doc): its segment's sum
    read once per pass of the compressor, the stage-2 payload written, and — where the algorithm
    keeps a second-stage state (α₂ ≠ 0: DIANA's shift D, EF's error; ``Algorithm.second_stage``) —
    that state read and written (16 bytes per coordinate of the segment)."""
    passes = PASSES.get(comp.name, 1)
    items = [Item(f"segment re-compression: sum read ({passes} pass{'es' if passes > 1 else ''})", 8 * seg * passes),
             Item("stage-2 payload written", payload)]
    if alpha2:
        items.append(Item("second-stage state D read and written (α₂ ≠ 0)", 16 * seg))
    return items


def server_items(algorithm: str, comp, collective: str, d: int, n: int, payloads, wire: float,
                 alpha: float, beta: float, rs: dict | None = None, lines: int | None = None) -> list:
    """[:class:`Item`] of rank 0's server phase (module doc): ``payloads`` = the n workers' mean
    payload bytes (gather, allgather), ``wire`` = the summed wire vector's bytes (allreduce), ``rs`` =
    reduce-scatter's stage sizes (``p1``: rank 0's received stage-1 bytes, ``p2``: all stage-2 bytes,
    ``seg``: its segment's length, ``p2_own``: its own stage-2 payload). A sparse format's n·k decoded
    entries (into the aggregate, or EF's x) are scattered: at ``lines`` lines (the messages', counted:
    the distinct lines of all their entries) or else at n·k random distinct positions' expected."""
    k = kept_entries(comp, d)
    sparse = k < d
    entries = Scatter(n * k, d, writes=True, lines=lines) if sparse else None
    items = []
    if collective == "allreduce":
        items.append(Item("summed wire vector read", wire))
    elif collective == "reduce-scatter":
        seg = rs["seg"]
        items += [Item("stage-1 pieces read", rs["p1"]),
                  Item("segment sum (first written, others read-modify-write)", 8 * seg + 16 * seg * (n - 1)),
                  Item("stage-2 payloads read", rs["p2"]), Item("aggregate written", 8 * d)]
    else:
        items.append(Item("payloads read", float(sum(payloads))))
        if not (sparse and algorithm == "ef"):
            items.append(Item("aggregate (first written, others read-modify-write)", 8 * k + 16 * k * (n - 1),
                              entries))
    if sparse and algorithm == "ef" and collective in ("gather", "allgather"):
        items.append(Item("x at the decoded entries (read-modify-write)", 16 * k * n, entries))
        return items
    items.append(Item("x read and written", 16 * d))
    if collective != "allreduce":
        items.append(Item("aggregate read by the step", 8 * d))
    if algorithm == "diana" and alpha:
        items.append(Item("shift h read and written", 16 * d))
    if beta:
        items.append(Item("heavy-ball v read and written", 16 * d))
    return items


def rank0_items(run, local, ledger_per_rank: np.ndarray, positions: list | None = None) -> dict | None:
    """Phase → [:class:`Item`] of rank 0's iteration, or None when the run has no model (module doc).
    ``ledger_per_rank``: every rank's mean bytes per iteration per collective (``LEDGER`` order);
    ``positions``: the entries of each worker's message (:func:`hpcgc.floor.next_positions`), whose
    lines the sparse message items count, or None (the expectation for random positions)."""
    from .transport import LEDGER
    alg, r = run.alg, run.r
    name, coll = r["algorithm"], r["collective"]
    shard = shard_counts(getattr(local, "A", None), lines=True)
    if name not in MODELLED or shard is None or 0 not in run.s.worker_ranks:
        return None
    d, n = run.s.d, run.s.n_workers
    comp = run.comps[0]
    alpha = float(getattr(alg, "alpha", 0.0))
    beta = float(getattr(alg, "beta", 0.0))
    col = {c: ledger_per_rank[:, LEDGER.index(c)] for c in LEDGER}
    own_decode = (name == "diana" and alpha != 0.0) or name == "ef"
    rs = None
    if coll == "allreduce":
        mine = wire = float(col["Allreduce"][0])
        payloads = []
    elif coll == "reduce-scatter":
        from .compressors import segments as seg
        bounds = seg.bounds(d, n)
        mine = float(col["Alltoallv"][0]) * n / max(n - 1, 1)          # all n segments, own included
        rs = {"seg": bounds[0][1] - bounds[0][0], "p1": mine, "p2": float(col["Allgatherv"].sum()),
              "p2_own": float(col["Allgatherv"][0])}
        payloads, wire = [], 0.0
    else:
        kind = "Gatherv" if coll == "gather" else "Allgatherv"
        payloads = [float(col[kind][rk]) for rk in run.s.worker_ranks]
        mine, wire = payloads[run.s.worker_ranks.index(0)], 0.0
    own_lines = all_lines = None
    if positions is not None:
        own_lines, all_lines = lines_of([positions[run.s.worker_ranks.index(0)]]), lines_of(positions)
    comp_items = compress_items(name, comp, coll, d, mine, own_decode, own_lines)
    if coll == "reduce-scatter":
        comp_items += second_stage_items(comp, rs["seg"], rs["p2_own"], float(alg.second_stage(d, n)[0]))
    return {"grad": grad_items(name, d, shard, float(getattr(local, "l2", 0.0))),
            "compress": comp_items,
            "server": server_items(name, comp, coll, d, n, payloads, wire, alpha, beta, rs, all_lines),
            "other": []}


def phase_medians(per_iteration: np.ndarray | None, totals: np.ndarray, done: int) -> dict:
    """Rank 0's median seconds per phase (``compress`` includes the exchange's extra compress time,
    as the clock records it); the means when iterations were not kept."""
    from .run.observers import PHASES as CLOCK
    if per_iteration is not None and done:
        rows = per_iteration[:done]
        return {ph: float(np.median(rows[:, CLOCK.index(ph)])) for ph in PHASES}
    return {ph: float(totals[CLOCK.index(ph)]) / max(done, 1) for ph in PHASES}


def traffic_rows(items: dict | None, medians: dict, bandwidth: float) -> list:
    """[(phase, bytes, floor seconds, measured median seconds)] — bytes NaN where the run has no
    model, floor NaN for ``other`` (no bytes)."""
    rows = []
    for ph in PHASES:
        b = float(sum(v for _, v in items[ph])) if items is not None else np.nan
        rows.append((ph, b, b / bandwidth if ph != "other" else np.nan, medians[ph]))
    return rows


def line_rows(items: dict | None, bandwidth: float) -> list:
    """[(phase, bytes counted in lines, floor seconds)] — the line floor (:func:`line_bytes`) beside
    :func:`traffic_rows`' byte floor, at the same bandwidth: bytes NaN where the run has no model,
    floor NaN for ``other``."""
    rows = []
    for ph in PHASES:
        b = float(sum(line_bytes(it) for it in items[ph])) if items is not None else np.nan
        rows.append((ph, b, b / bandwidth if ph != "other" else np.nan))
    return rows


def ratio(median: float, floor: float) -> float:
    """median / floor; NaN where the floor is 0 or unknown."""
    return median / floor if np.isfinite(floor) and floor > 0 else np.nan
