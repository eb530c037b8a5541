"""What watches a run from the iteration boundaries (the loop itself never changes for them).

:class:`Watch` is the loop's one contact: ``lap`` after every iteration (every rank: phase timers;
rank 0: each observer's ``lap``) and ``evaluate`` at evaluation points — a collective: the ranks'
cumulative timers and MPI byte ledgers go to rank 0, rank 0 evaluates the metrics into one row,
every observer sees it and may vote to stop, and the decision is broadcast (measurement traffic,
outside the ledger and the timers). Observers run on rank 0 and implement any of

    lap(k)                      after iteration k (cheap: progress)
    evaluate(k, row) -> code    at an evaluation point: CONTINUE or STOP (recording, stop rules)

Adding a stop rule, a recorder or a checkpoint = one observer, appended to the run's list.
"""
from __future__ import annotations

import math
import signal
import time

import numpy as np

from ..exchange.base import CONTINUE, STOP
from ..progress import Progress
from ..transport import LEDGER, PHASES
from .signals import REQUEST


class Outcome:
    """How the run ended: status (completed | diverged | stopped | interrupted) and a reason."""

    def __init__(self):
        self.status, self.reason = "completed", "iterations"

    def end(self, status: str, reason: str) -> float:
        self.status, self.reason = status, reason
        return STOP


class Clock:
    """Every rank: cumulative seconds per phase (``PHASES``), and every iteration's phases when kept.

    ``lap(k, grad, compress, wait_up, comm_up, server, wait_down, comm_down, wall)``: ``wall`` is
    the iteration's wall-clock (``iter``); ``other`` = ``wall`` minus the seven measured phases (hpcgc's
    own bookkeeping between them). The lap itself is the one thing after ``wall`` was read. ``hidden``
    (``comm_hidden``, ``run.overlap``) is the part of ``grad`` with a collective in flight: not in
    the sum."""

    def __init__(self, iterations: int, keep: bool):
        self.totals = np.zeros(len(PHASES))
        self.iterations = iterations
        self.per_iteration = np.zeros((iterations, len(PHASES))) if keep else None
        self._row = np.zeros(len(PHASES))      # the lap's row when iterations are not kept

    def lap(self, k: int, grad, compress, wait_up, comm_up, server, wait_down, comm_down, wall, hidden=0.0):
        other = wall - (grad + compress + wait_up + comm_up + server + wait_down + comm_down)
        row = self._row if self.per_iteration is None else self.per_iteration[k - 1]
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9] = \
            grad, compress, wait_up, comm_up, server, wait_down, comm_down, other, wall, hidden
        np.add(self.totals, row, out=self.totals)       # item stores + one add: no tuple → array conversion


class Ledger:
    """Rank 0: cumulative model and wire bits per worker (uplink) and downlink wire and model bits,
    accounted by the exchange from the messages that really went through MPI."""

    def __init__(self, n: int, ranks=None):
        self.ranks = list(range(n)) if ranks is None else list(ranks)   # worker i's MPI rank
        self.model = np.zeros(n)
        self.wire = np.zeros(n)
        self.down = 0.0
        self.down_model = 0.0

    def account(self, ex):
        self.down += ex.account(self.model, self.wire)
        self.down_model += ex.down_model_bits()


class Budgets:
    """Rank 0: the bit and wall-time budgets (``run.max_bits``, ``run.max_seconds``) and rank 0's
    own stop signal (:mod:`.signals`)."""

    def __init__(self, r: dict, ledger: Ledger, outcome: Outcome):
        self.max_bits, self.max_seconds = r["max_bits"], r["max_seconds"]
        self.ledger, self.outcome = ledger, outcome
        self.t0 = time.monotonic()

    def check(self) -> float:
        if REQUEST.signum:
            return self.outcome.end("interrupted", f"{REQUEST.name} received (rank 0)")
        if self.max_bits > 0 and self.ledger.model.max() >= self.max_bits:
            return self.outcome.end("stopped", f"bit budget {self.max_bits:g} reached")
        if self.max_seconds > 0 and time.monotonic() - self.t0 >= self.max_seconds:
            return self.outcome.end("stopped", f"wall-time budget {self.max_seconds:g} s reached")
        return CONTINUE


class StopRules:
    """Rank 0, at evaluation points: a stop signal on any rank, divergence (non-finite loss, or the progress measure above
    ``divergence_factor`` × its start), the tolerance — on f − f* when the problem has an optimum,
    else (sigmoid-loss, softmax, mlp) on ‖∇f(x)‖²/‖∇f(x⁰)‖², ``grad0`` = ‖∇f(x⁰)‖² —, and the budgets
    when the collective has no per-iteration downlink to carry them (``allreduce``, ``allgather``)."""

    def __init__(self, r: dict, has_optimum: bool, outcome: Outcome, budgets: Budgets | None,
                 grad0: float | None = None):
        self.r, self.has_opt, self.outcome, self.budgets = r, has_optimum, outcome, budgets
        self.grad0 = grad0
        self.start = None

    def evaluate(self, k: int, row: dict) -> float:
        if row["stop_signal"]:
            name = signal.Signals(int(row["stop_signal"])).name
            return self.outcome.end("interrupted", f"{name} received; stopped at iteration {k}")
        gap = row["suboptimality"] if self.has_opt else row["loss"]
        if self.start is None:
            self.start = max(abs(gap), 1e-300)
        if not math.isfinite(row["loss"]) or gap > self.r["divergence_factor"] * self.start:
            what = "f - f*" if self.has_opt else "loss"
            return self.outcome.end("diverged", f"{what} = {gap:.3g} at iteration {k}")
        tol = self.r["tolerance"]
        if tol > 0 and self.has_opt and gap <= tol:
            return self.outcome.end("completed", f"tolerance {tol:g} reached")
        if tol > 0 and not self.has_opt and self.grad0 and row["grad_norm_sq"] <= tol * self.grad0:
            return self.outcome.end("completed", f"tolerance {tol:g} on |grad f|^2 / |grad f(x0)|^2 reached")
        return self.budgets.check() if self.budgets is not None else CONTINUE


class Recorder:
    """Rank 0: one results row per evaluation point (``hpcgc.results.RunWriter``); a write failure
    (full disk, quota) stops the run as ``failed`` — the experiment then ends on every rank."""

    def __init__(self, file, writer, outcome: Outcome):
        self.file, self.w, self.outcome = file, writer, outcome

    def evaluate(self, k: int, row: dict) -> float:
        if self.w is not None:
            self.w.append(row)
        if self.file is not None and self.file.error is not None:
            return self.outcome.end("failed", str(self.file.error))
        return CONTINUE


class ProgressLine:
    """Rank 0: the live progress line (iteration, f − f* — or ‖∇f‖² where there is no f*, nonconvex
    kinds and ``problem.reference = "none"`` —, MB sent, ETA)."""

    def __init__(self, label: str, iterations: int, enabled: bool, crossed: np.ndarray, ledger: Ledger):
        self.bar = Progress(label, iterations, enabled=enabled)
        self.crossed, self.ledger, self.last, self.measure = crossed, ledger, np.nan, "f-f*"

    def lap(self, k: int):
        bar = self.bar                  # the MB sum only when the line is due (the lap is in every iteration)
        if bar.enabled and time.monotonic() - bar.last >= bar.interval:
            bar.update(k, self.last, self.ledger.wire[self.crossed].sum() / 8e6, self.measure)

    def evaluate(self, k: int, row: dict) -> float:
        sub = row.get("suboptimality", np.nan)
        if np.isfinite(sub) or "grad_norm_sq" not in row:
            self.last, self.measure = sub, "f-f*"
        else:
            self.last, self.measure = row["grad_norm_sq"], "|grad f|^2"
        return CONTINUE

    def close(self):
        self.bar.close()


class Watch:
    """The loop's observer hub (see the module doc). ``metrics(x)`` → dict is rank 0's evaluation."""

    def __init__(self, transport, clock: Clock, ledger: Ledger | None, metrics, observers, checkpoint=None,
                 evals=None, node_bytes: bool = False):
        self.t, self.clock, self.ledger = transport, clock, ledger
        self.evals = evals or (lambda: np.nan)   # this rank's gradient evaluations so far (NaN: not counted)
        self.metrics, self.observers = metrics, observers
        self.checkpoint = checkpoint          # a checkpoint.Checkpointer (due(k) on rank 0; call = collective save)
        self.ctrl = np.zeros(2)               # stop decision, checkpoint now
        self._lappers = [o for o in observers if hasattr(o, "lap")]
        self.last_row = {}
        self.node_bytes = node_bytes          # run.topology = "hierarchical": the row's node_bytes too

    def lap(self, k: int):
        """After iteration k, before its timers are written (the loop calls ``clock.lap`` next)."""
        for o in self._lappers:
            o.lap(k)

    def evaluate(self, k: int) -> bool:
        t = self.t
        intra = [t.intra] if self.node_bytes else []
        rows = t.gather_rows(np.concatenate([self.clock.totals, t.ledger, t.received, *intra,
                                             [self.evals(), REQUEST.signum]]))
        if t.is_root:
            row = self.metrics()
            nl, np_ = len(LEDGER), len(PHASES)
            if self.node_bytes:               # per rank: inter-node sent, received; intra-node sent, received
                j = np_ + 2 * nl
                row["node_bytes"] = np.column_stack([rows[:, np_:np_ + nl].sum(axis=1),
                                                     rows[:, np_ + nl:j].sum(axis=1), rows[:, j], rows[:, j + 1]])
            received = rows[:, np_ + nl:np_ + 2 * nl].sum(axis=1)[self.ledger.ranks]
            row.update(iteration=k, bits_up_model=self.ledger.model, bits_up_wire=self.ledger.wire,
                       bits_received_wire=8.0 * received, bits_down_wire=self.ledger.down,
                       bits_down_model=self.ledger.down_model, time=rows[:, :len(PHASES)],
                       mpi_bytes=rows[:, len(PHASES):len(PHASES) + len(LEDGER)], stop_signal=rows[:, -1].max(),
                       grad_evals=float(np.nansum(rows[:, -2])) if np.isfinite(rows[:, -2]).any() else np.nan)
            self.last_row = row
            votes = [o.evaluate(k, row) for o in self.observers if hasattr(o, "evaluate")]
            self.ctrl[0] = max(votes, default=CONTINUE)
            self.ctrl[1] = self.checkpoint is not None and k > 0 and self.checkpoint.due(k)
        if k in (0, self.clock.iterations):
            t.quiet_barrier()   # rank 0 creates the results datasets, or ends the run: the others sleep meanwhile
        t.bcast_control(self.ctrl)
        if self.ctrl[1]:
            self.checkpoint(k)
        return self.ctrl[0] != CONTINUE
