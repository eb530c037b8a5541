"""The collectives' floor of a run: ``python -m hpcgc.bench floor`` (and ``run --floor``).

After a run, every rank issues exactly the collectives one of the run's iterations issued — the
same kinds, in the same order, with the run's message sizes — and nothing else, back to back, on
buffers of their own (:meth:`hpcgc.transport.CollectiveTimer.sequence`, the machinery of
``python -m hpcgc.bench collectives``). The time per repetition is the *floor*: what an iteration
would cost if the method's own work (gradient, compression, server step) and hpcgc's bookkeeping
took no time. hpcgc's median iteration over the floor is the run's **floor ratio**.

Message sizes come from the run itself: the transport's sender ledger (bytes each rank handed to
each collective) divided by the iterations done, i.e. each rank's mean message per iteration,
turned into the collective sequence by the run's exchange (:meth:`hpcgc.exchange.base.Exchange.floor_ops`):

    gather      Gather of the 4-byte length + Gatherv of the rank's mean payload; Bcast of the
                d + 1 float64 (or, with a compressed downlink, of the 8-byte header and rank 0's
                mean downlink payload)
    allgather   Allgather of the length + Allgatherv of the rank's mean payload
    allreduce   one Allreduce per round of the message, of the round's planned length and dtype

No barrier is in the floor: it is the transfer alone (a run with ``run.wait_phases = true`` adds
one barrier per collective; its cost is in the run's ``wait_*`` phases, and so in the ratio).

Timing: ``warmup`` untimed repetitions, then ``batches`` batches of back-to-back repetitions, each
batch timed as a whole on every rank (a barrier before it, none inside: the rhythm of the
iteration loop); a rank's floor is the median of its batch means, the run's floor is the largest
over ranks (every rank of a synchronous iteration waits for the slowest). The batch length is
chosen from the warm-up (``seconds`` in all, agreed by all ranks). This traffic is measurement:
never in the bit ledger or the phase timers.

**Collectives + kernels** (``floor_kernels_seconds``, ``floor_ratio_kernels``; ``gather`` only):
the floor above plus the method's own kernels, each timed alone in a tight loop on copies of the
finished run's state — on every worker rank the gradient and the message (``worker_compute`` +
``worker_encode``: Δ = g − h, the encode, the worker's own decode into its shift), on rank 0 the
server step on the workers' real last messages (``server_step``: n decode-adds and the step, on
one receive buffer as the run's Gatherv delivers them, so the step takes the run's path: one
kernel call for the n decode-adds where the compressor has it, ``Prepared.add_many``). Per
iteration that is the slowest rank's worker kernels plus rank 0's server step (a synchronous
iteration waits for both). It is what a hand-written loop with the same kernels and collectives
could not go below (``scripts/handwritten-loop.py``); hpcgc's median iteration over it is the ratio
``docs/performance.md`` quotes. The copies leave the run's results untouched.

**Memory traffic** (:func:`traffic`; printed by ``floor``, not stored): rank 0's phases against the
bytes their mathematics must move at the copy bandwidth measured after the run — counted as
streams of the touched bytes (the byte floor) and again in 64-byte lines where the access is
scattered (the line floor; :mod:`hpcgc.traffic`) — a sparse message's lines those of the entries
each worker's next message carries (:func:`next_positions`, on copies of the run's state).
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np

from .exchange.base import Messages
from .transport import LEDGER, CollectiveTimer

SECONDS = 0.5
"""Default time spent measuring one run's floor (all batches)."""
BATCHES = 7
WARMUP = 20


def describe(ops) -> str:
    """``gather 24 B, bcast 248 B`` — this rank's sequence, for the results file and the table."""
    return ", ".join(f"{kind} {int(nbytes)} B" for kind, nbytes, *_ in ops)


def per_rank_ledger(transport, done: int) -> np.ndarray:
    """Every rank's mean bytes per iteration per collective (``LEDGER`` order), on every rank
    (collective)."""
    mine = np.asarray(transport.ledger, dtype=np.float64) / max(done, 1)
    every = transport.bcast_object(transport.gather_object(mine))
    return np.asarray(every).reshape(transport.size, len(LEDGER))


def plan(exchange, transport, done: int, d: int) -> list:
    """The run's collective sequence on this rank (collective: every rank's ledger to every rank)."""
    return exchange.floor_ops(per_rank_ledger(transport, done), d)


def measure(transport, ops, seconds: float = SECONDS, batches: int = BATCHES, warmup: int = WARMUP) -> float:
    """Seconds per repetition of ``ops`` (see the module doc); the same value on every rank.
    Collective."""
    timer = CollectiveTimer(transport)
    op = timer.sequence(ops)
    est = transport.allreduce_max(timer.period(op, max(warmup, 1)))
    per_batch = max(1, int(seconds / batches / est)) if est > 0 else 1000
    means = [timer.period(op, per_batch) for _ in range(batches)]
    return float(transport.allreduce_max(float(np.median(means))))


def _per_call(f, seconds: float, batches: int = BATCHES) -> float:
    """Median over ``batches`` batches of the seconds per call of ``f(i)`` (``i``: the call's index in
    its batch; ``f(-1)`` before each batch, untimed, restores its inputs)."""
    f(-1)
    t0 = time.perf_counter()
    f(0)
    est = max(time.perf_counter() - t0, 1e-7)
    per_batch = max(1, min(10_000, int(seconds / batches / est)))
    means = []
    for _ in range(batches):
        f(-1)
        t0 = time.perf_counter()
        for i in range(per_batch):
            f(i)
        means.append((time.perf_counter() - t0) / per_batch)
    return float(np.median(means))


def kernels(run, transport, state, seconds: float = SECONDS) -> float:
    """Seconds per iteration of the run's own kernels alone (see the module doc): the slowest
    worker's gradient + message, plus rank 0's server step on the workers' last messages. NaN
    unless the run used ``gather``, and for a method whose step does not replay on copies (MARINA's
    rounds, whose message kind depends on a coin the copies do not share). Works on copies of ``state`` = (ws, ss, x, local, rng).
    Collective."""
    ws, ss, x, local, rng = state
    if run.r["collective"] != "gather":
        return math.nan
    alg = run.alg
    payload, worker = None, 0.0
    if ws is not None:
        box = {}

        def work(i):
            if i < 0:
                box.update(ws=copy.deepcopy(ws), x=np.array(x), rng=copy.deepcopy(rng))
                return
            alg.worker_compute(box["ws"], box["x"], local, box["rng"])
            box["p"] = alg.worker_encode(box["ws"], box["rng"])
        try:
            worker = _per_call(work, seconds / 2)
            payload = np.array(box["p"], copy=True)
        except Exception:       # noqa: BLE001 — a method whose copies do not replay (say so: NaN)
            worker = math.nan
    failed = transport.allreduce_max(0.0 if math.isfinite(worker) else 1.0)
    worker = transport.allreduce_max(worker if math.isfinite(worker) else 0.0)
    payloads = transport.gather_object(payload)                 # rank 0: every rank's (None: no worker)
    server = 0.0
    if failed:
        server = math.nan
    elif transport.is_root and ss is not None:
        me = {rk: i for i, rk in enumerate(run.s.worker_ranks)}
        msgs = [(me[rk], p) for rk, p in enumerate(payloads) if p is not None and rk in me]
        if [i for i, _ in msgs] == list(range(len(me))):     # as the run's Gatherv delivers them
            msgs = Messages.of([p for _, p in msgs])
        sbox = {}

        def step(i):
            if i < 0:
                sbox["ss"] = copy.deepcopy(ss)
                return
            alg.server_step(sbox["ss"], msgs)
        try:
            server = _per_call(step, seconds / 2)
        except Exception:       # noqa: BLE001 — e.g. MARINA: the copy's message is not the round's kind
            server = math.nan
    return float(worker + transport.bcast_object(server))


def next_positions(run, transport, state) -> list | None:
    """The positions each worker's next message carries — its gradient and message computed once on
    copies of the finished run's state (as :func:`kernels` does), decoded — on rank 0, in worker
    order, for the line floor's message items (:mod:`hpcgc.traffic`: the distinct lines of the
    entries really sent, not of random ones; top-k's cluster where the data's frequent features are
    neighbours). None off rank 0, and where the messages are not one sparse payload per worker
    (``gather``/``allgather``, DCGD/DIANA/EF, a format of k < d entries) or do not replay. Collective."""
    from . import traffic as tr
    d = run.s.d
    if not (run.r["collective"] in ("gather", "allgather") and run.r["algorithm"] in tr.MODELLED
            and all(tr.kept_entries(c, d) < d for c in run.comps)):
        return None
    ws, _, x, local, rng = state
    payload = None
    if ws is not None:
        try:
            ws, rng = copy.deepcopy(ws), copy.deepcopy(rng)
            run.alg.worker_compute(ws, np.array(x), local, rng)
            payload = np.array(run.alg.worker_encode(ws, rng), copy=True)
        except Exception:       # noqa: BLE001 — a method whose copies do not replay: the expectation instead
            payload = None
    payloads = transport.gather_object(payload)                 # rank 0: every rank's (None: no worker)
    if not transport.is_root:
        return None
    out = []
    for i, rk in enumerate(run.s.worker_ranks):
        if payloads[rk] is None:
            return None
        dense = np.zeros(d)
        run.comps[i].decompress_add(payloads[rk], d, dense)
        out.append(np.flatnonzero(dense))                    # (an entry of value 0 moves nothing)
    return out


def traffic(run, transport, done: int, state, clock) -> dict:
    """Rank 0's memory-traffic floor per phase (:mod:`hpcgc.traffic`): ``{"bandwidth": bytes/s,
    "rows": [(phase, bytes, floor seconds, median seconds)], "line_rows": [(phase, bytes counted in
    64-byte lines, floor seconds)], "items": phase → [Item]}``, the copy bandwidth measured now on
    every rank at once (:func:`hpcgc.traffic.copy_bandwidth`: 64 MiB buffers shared among the ranks,
    beyond the last-level cache); {} off rank 0. ``state`` = (ws, ss, x, local, rng): the sparse
    messages' lines from :func:`next_positions`. Collective."""
    from . import traffic as tr
    every = per_rank_ledger(transport, done)
    positions = next_positions(run, transport, state)
    bw = tr.copy_bandwidth(transport)
    if not transport.is_root:
        return {}
    items = tr.rank0_items(run, state[3], every, positions)
    med = tr.phase_medians(clock.per_iteration, clock.totals, done)
    return {"bandwidth": bw, "rows": tr.traffic_rows(items, med, bw), "line_rows": tr.line_rows(items, bw),
            "items": items}


def run_floor(run, transport, done: int, state=None, clock=None, **kw) -> dict:
    """The floor of a finished run: ``{"floor_seconds", "floor_collectives"}`` and, given the run's
    ``state`` = (ws, ss, x, local, rng), ``floor_kernels_seconds`` (collectives + kernels; NaN and ''
    when no iteration was done); given its ``clock`` too, ``floor_traffic`` (rank 0: :func:`traffic`,
    printed, not stored). Collective."""
    if done < 1:
        return {"floor_seconds": math.nan, "floor_collectives": "", "floor_kernels_seconds": math.nan,
                "floor_traffic": {}}
    ops = plan(run.ex, transport, done, run.s.d)
    text = transport.bcast_object(describe(ops))            # rank 0's sequence names the run's
    out = {"floor_seconds": measure(transport, ops, **kw), "floor_collectives": text}
    if state is not None:
        out["floor_kernels_seconds"] = out["floor_seconds"] + kernels(run, transport, state,
                                                                     kw.get("seconds", SECONDS))
        if clock is not None:
            out["floor_traffic"] = traffic(run, transport, done, state, clock)
    return out
