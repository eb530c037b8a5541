"""Graceful stop: SIGTERM (scancel, a SLURM time limit), SIGINT (Ctrl-C) and SIGUSR1 (SLURM's
``--signal``) end the experiment at an iteration boundary with everything recorded so far.

Every rank notes the first signal it receives (mpiexec and SLURM signal every rank; one rank alone
is enough). The ranks agree without an extra message per iteration: under ``gather`` rank 0's own
request rides the iteration's broadcast like any stop decision; every rank's request travels with
the timers gathered at the next evaluation point (within ``run.eval_every`` iterations). Rank 0
records the running run as ``interrupted``, the results file stays ``<path>.partial`` with
``complete = false``, and every rank exits with 128 + the signal number. A second Ctrl-C aborts
every rank at once.
"""
from __future__ import annotations

import signal

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class Interrupted(Exception):
    """The experiment stopped on a signal: ``signum``; ``message`` says what was kept (rank 0)."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or signal.Signals(signum).name)
        self.signum = signum
        self.message = message


class StopRequest:
    """The first stop signal this process received (0 = none)."""

    def __init__(self):
        self.signum = 0
        self._previous = {}
        self.abort = None

    def install(self, abort=None):
        """Catch the stop signals; ``abort(code)`` is called on a second SIGINT."""
        self.abort = abort
        for s in SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def restore(self):
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()
        self.signum = 0

    def _handle(self, signum, frame):
        if self.signum and signum == signal.SIGINT:        # the second Ctrl-C: no more patience
            if self.abort is not None:
                self.abort(128 + signum)
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


REQUEST = StopRequest()
"""The process's one stop request (installed by the command line around an experiment)."""
