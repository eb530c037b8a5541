"""The iteration loop: compute → encode → exchange → step, and nothing else.

The exchange (:mod:`hpcgc.exchange`) carries the messages and runs the server step wherever the
collective puts it; the observers (:mod:`hpcgc.run.observers`) watch from the iteration
boundaries: ``lap`` after every iteration (progress), the clock's ``lap`` (phase timers; the
iteration's wall-clock ``iter`` runs from its start to just before the timers are written, so
everything hpcgc does in between — bit accounting, stop decisions, the observers — is in it, as
``other``), ``evaluate`` at evaluation points (metrics, recording, stop rules; collective;
outside every timer).
"""
from __future__ import annotations

from ..exchange.base import CONTINUE, DIVERGED, STOP
from ..transport import wtime


def iterate(alg, ex, ws, ss, x, local, rng, *, iterations: int, eval_every: int, watch,
            start: int = 0) -> tuple[int, bool]:
    """Run iterations start+1 … ``iterations`` (start > 0: resumed from a checkpoint taken at an
    evaluation point); returns (iterations done, diverged)."""
    k, stop = start, watch.evaluate(0) if start == 0 else False
    worker = ws is not None
    while not stop and k < iterations:
        t0 = wtime()
        if worker:
            ex.compute(ws, x, local, rng)                  # gradient (run.overlap: starts the buckets' exchanges)
        t1 = wtime()
        msg = ex.encode(ws)                                # compress
        t2 = wtime()
        extra, wait_up, up, server, wait_down, down = ex.exchange(msg, ss)   # communicate, step (x in place)
        k += 1
        control = ex.control()
        watch.lap(k)                                       # observers (rank 0: progress line)
        # a dedicated server has no gradient or compression; "other" = the rest of the wall-clock
        # run.overlap: the exchange's work inside compute (casts, MPI starts and tests) is in extra and up
        watch.clock.lap(k, t1 - t0 - ex.hooked if worker else 0.0, t2 - t1 + extra if worker else 0.0,
                        wait_up, up, server, wait_down, down, wtime() - t0, ex.hidden)
        if control == DIVERGED:
            return k, True
        if k % eval_every == 0 or k == iterations or control == STOP:
            stop = watch.evaluate(k) or control == STOP
    return k, False


def warm_up(alg, ex, ws, ss, x, local, rng, state) -> None:
    """One iteration before the timed loop, undone (``run.warm_up``): ``state`` (a
    :class:`~hpcgc.run.checkpoint.RunState`) is captured, the iteration runs — gradient, message,
    the run's collectives at their real sizes, the server step — untimed and unrecorded, and the
    state is restored, so the timed loop starts from the same iterate, shifts, random streams and
    ledgers. What it takes out of iteration 1: MPI's connection set-up between the ranks that
    exchange (0.1–4 s on TCP links: ``docs/breakeven.md``), the first touch of the receive
    buffers, lazy one-time initialisation. The stop rules and budgets do not see it."""
    saved = state.capture(0, 0)
    on_step, ex.on_step = ex.on_step, (lambda: CONTINUE)     # no bit accounting, no budget check
    try:
        if ws is not None:
            ex.compute(ws, x, local, rng)
        ex.exchange(ex.encode(ws), ss)
    finally:
        ex.on_step = on_step
    state.restore(saved)
