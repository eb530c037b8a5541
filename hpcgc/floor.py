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
"""
from __future__ import annotations

import math

import numpy as np

from .transport import LEDGER, CollectiveTimer

SECONDS = 0.5
"""Default time spent measuring one run's floor (all batches)."""
BATCHES = 7
WARMUP = 20


def describe(ops) -> str:
    """``gather 24 B, bcast 248 B`` — this rank's sequence, for the results file and the table."""
    return ", ".join(f"{kind} {int(nbytes)} B" for kind, nbytes, _ in ops)


def plan(exchange, transport, done: int, d: int) -> list:
    """The run's collective sequence on this rank (collective: every rank's ledger to every rank)."""
    mine = np.asarray(transport.ledger, dtype=np.float64) / max(done, 1)
    every = transport.bcast_object(transport.gather_object(mine))
    return exchange.floor_ops(np.asarray(every).reshape(transport.size, len(LEDGER)), d)


def measure(transport, ops, seconds: float = SECONDS, batches: int = BATCHES, warmup: int = WARMUP) -> float:
    """Seconds per repetition of ``ops`` (see the module doc); the same value on every rank.
    Collective."""
    timer = CollectiveTimer(transport)
    op = timer.sequence(ops)
    est = transport.allreduce_max(timer.period(op, max(warmup, 1)))
    per_batch = max(1, int(seconds / batches / est)) if est > 0 else 1000
    means = [timer.period(op, per_batch) for _ in range(batches)]
    return float(transport.allreduce_max(float(np.median(means))))


def run_floor(run, transport, done: int, **kw) -> dict:
    """The floor of a finished run: ``{"floor_seconds", "floor_collectives"}`` (NaN and '' when no
    iteration was done). Collective."""
    if done < 1:
        return {"floor_seconds": math.nan, "floor_collectives": ""}
    ops = plan(run.ex, transport, done, run.s.d)
    text = transport.bcast_object(describe(ops))            # rank 0's sequence names the run's
    return {"floor_seconds": measure(transport, ops, **kw), "floor_collectives": text}


def table(summaries) -> str:
    """The floor table printed by ``python -m hpcgc.bench floor``."""
    from .bench import RUN_HEAD, floor_columns, floor_head, run_columns
    head = f"{RUN_HEAD} {'iters':>6} {floor_head('ratio')}  collectives per iteration (rank 0)"
    lines = ["# floor: the run's collectives with its message sizes and nothing else, back to back "
             "(median of batches, slowest rank); median: hpcgc's median iteration (wall-clock, over ranks "
             "and iterations); ratio = median / floor",
             head, "-" * len(head)]
    for s in summaries:
        lines.append(f"{run_columns(s)} {s.iterations:>6} {floor_columns(s)}  {s.floor_collectives}")
    return "\n".join(lines)
