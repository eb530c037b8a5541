"""The iteration loop: compute → encode → exchange → step, and nothing else.

The exchange (:mod:`hpcgc.exchange`) carries the messages and runs the server step wherever the
collective puts it; the observers (:mod:`hpcgc.run.observers`) watch from the iteration
boundaries: ``lap`` after every iteration (timers, progress), ``evaluate`` at evaluation points
(metrics, recording, stop rules; collective).
"""
from __future__ import annotations

from ..exchange.base import DIVERGED, STOP
from ..transport import wtime


def iterate(alg, ex, ws, ss, x, local, rng, *, iterations: int, eval_every: int, watch,
            start: int = 0) -> tuple[int, bool]:
    """Run iterations start+1 … ``iterations`` (start > 0: resumed from a checkpoint taken at an
    evaluation point); returns (iterations done, diverged)."""
    k, stop = start, watch.evaluate(0) if start == 0 else False
    while not stop and k < iterations:
        t0 = wtime()
        if ws is not None:
            alg.worker_compute(ws, x, local, rng)          # gradient (or local steps)
        t1 = wtime()
        msg = ex.encode(ws)                                # compress
        t2 = wtime()
        extra, up, server, down = ex.exchange(msg, ss)     # communicate, step (x updated in place)
        k += 1
        work = (t1 - t0, t2 - t1 + extra) if ws is not None else (0.0, 0.0)   # a dedicated server has none
        watch.lap(k, (*work, up, server, down))
        control = ex.control()
        if control == DIVERGED:
            return k, True
        if k % eval_every == 0 or k == iterations or control == STOP:
            stop = watch.evaluate(k) or control == STOP
    return k, False
