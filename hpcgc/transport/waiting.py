"""How a rank waits without spinning (part of the transport: the only code that calls MPI):
:func:`sleep_until` completes a started request by testing it and sleeping in between — the
set-up's ``Transport.quiet_barrier`` and, with ``run.wait = "yield"``, the iteration's waiting
collectives (``Transport.idle``, ``YIELD_POLL``)."""
from __future__ import annotations

import time

from mpi4py import MPI

YIELD_POLL = (1e-4, 1e-4)
"""``run.wait = "yield"``: the first and the longest sleep (seconds) between two tests of a started
collective (:meth:`Transport.idle`): a fixed 100 µs (≈ 150 µs with Linux's timer slack). Measured
at -n 32 on 2 cores (``docs/performance.md``, "Waiting ranks that yield"): a longer or growing sleep
delays every hop of the collective's tree (sleeps doubling up to 1 ms made the iteration several
times slower than spinning), a shorter one costs more wake-ups (≈ 10–15 µs of CPU each, under
load), and ``sched_yield`` in place of the sleep leaves the waiting ranks runnable and was no faster
than spinning (measured under load)."""


def sleep_until(req, first_poll: float, max_poll: float) -> None:
    """Complete the started request ``req`` (or ``Testall`` of a list of them) by testing it and
    sleeping between tests — the sleeps double from ``first_poll`` up to ``max_poll`` — instead of
    spinning in MPI's progress loop: a sleeping rank is not runnable, so on an oversubscribed node
    its core goes to a rank that computes. Each test also progresses the request (MPICH progresses
    a non-blocking collective only inside MPI calls)."""
    test = (lambda: MPI.Request.Testall(req)) if isinstance(req, list) else req.Test
    poll = first_poll
    while not test():
        time.sleep(poll)
        poll = min(2.0 * poll, max_poll)
