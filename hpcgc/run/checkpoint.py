"""Checkpoints: the whole state of a run at an evaluation point, so that ``--resume`` continues an
interrupted invocation with the iterates and bits it would have had uninterrupted.

What is saved, per rank (a typed tree of arrays and scalars, :mod:`hpcgc.typed_state` — no pickle:
results files travel, and resuming one must not run code; the file: :mod:`hpcgc.results.checkpoint`;
``docs/results.md`` "Resumed files and checkpoints"):

* the iterate x, the worker state and the server state (every numpy array of the algorithm's
  state dataclasses: DIANA's shifts h_i and h, momentum v, error-feedback memory e_i, local copies…),
* the exchange's persistent state (PowerSGD's warm-start Q; the compressed downlink's random stream),
* every random stream (the rank's generator and the shared one, ``bit_generator.state`` as plain values),
* the rank's phase timers, per-iteration timings so far and MPI byte ledger;

and on rank 0 also the bit ledger, the stop rules' reference value, the elapsed wall time of the
run (for ``run.max_seconds``) and the number of result rows written. Everything the set-up
recomputes deterministically (data shards, smoothness matrices, the allocation, the one-time
upload, step sizes) is recomputed on resume, not stored.

Checkpoints are taken at evaluation points: every ``run.checkpoint_every`` iterations (an integer)
or seconds (a string such as ``"600s"``; ``0`` = never), and always when a stop signal ends a run.
"""
from __future__ import annotations

import dataclasses
import math
import re
import time

import numpy as np

from ..errors import ConfigError
from ..typed_state import StateMismatch, conform, rng_state, set_rng_state


def parse_every(value) -> tuple[str, float]:
    """``run.checkpoint_every`` → ("iterations", n), ("seconds", s) or ("never", 0)."""
    if isinstance(value, bool):
        raise ConfigError(f"run.checkpoint_every must be a number of iterations or e.g. '600s', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"run.checkpoint_every must be >= 0, got {value}")
        return ("iterations", value) if value else ("never", 0)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|sec|seconds|m|min|h)\s*", str(value))
    if not m:
        raise ConfigError(f"run.checkpoint_every must be an integer (iterations) or a duration such as '600s', "
                          f"'10min', '1h'; got {value!r}")
    seconds = float(m.group(1)) * {"s": 1, "sec": 1, "seconds": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return ("seconds", seconds) if seconds > 0 else ("never", 0)


class Policy:
    """Rank 0: is a checkpoint due at evaluation point k?"""

    def __init__(self, every, outcome):
        self.kind, self.amount = parse_every(every)
        self.outcome = outcome
        self.last_k, self.last_t = 0, time.monotonic()

    def due(self, k: int) -> bool:
        if self.outcome.status == "interrupted":
            return True
        if self.kind == "iterations":
            return k - self.last_k >= self.amount
        if self.kind == "seconds":
            return time.monotonic() - self.last_t >= self.amount
        return False

    def taken(self, k: int):
        self.last_k, self.last_t = k, time.monotonic()


def arrays_of(state, copy: bool = True) -> dict:
    """Every numpy array field of a state dataclass (None → {}), copied unless ``copy=False``."""
    if state is None:
        return {}
    return {f.name: getattr(state, f.name).copy() if copy else getattr(state, f.name)
            for f in dataclasses.fields(state) if isinstance(getattr(state, f.name), np.ndarray)}


def restore_arrays(state, saved: dict) -> None:
    for name, value in saved.items():
        np.copyto(getattr(state, name), value)


class RunState:
    """References to everything that changes while a run iterates, on one rank: ``capture`` copies
    it into a typed tree (:mod:`hpcgc.typed_state`; collective-free), ``load`` checks a stored tree
    against this run and puts it back into the freshly set-up objects."""

    def __init__(self, transport, x, ws, ss, ex, rngs, clock, ledger=None, stop_rules=None, budgets=None):
        self.t, self.x, self.ws, self.ss, self.ex, self.rngs = transport, x, ws, ss, ex, rngs
        self.clock, self.ledger, self.stop_rules, self.budgets = clock, ledger, stop_rules, budgets

    def capture(self, k: int, rows: int, copy: bool = True) -> dict:
        """The state as a typed tree; ``copy=False`` (a checkpoint, sent and written at once): the
        live arrays themselves, no second copy of the state in memory."""
        c = np.copy if copy else (lambda a: a)
        pi = self.clock.per_iteration
        timers = {"totals": c(self.clock.totals), "mpi_ledger": c(self.t.ledger), "mpi_received": c(self.t.received),
                  "intra": c(self.t.intra)}
        if pi is not None:
            timers["per_iteration"] = c(pi[:k])
        st = {"iteration": int(k), "x": c(self.x), "worker": arrays_of(self.ws, copy),
              "server": arrays_of(self.ss, copy),
              "exchange": self.ex.state(), "rngs": {f"g{j}": rng_state(g) for j, g in enumerate(self.rngs)},
              "timers": timers}
        if self.ledger is not None:                 # rank 0
            start = self.stop_rules.start
            st["root"] = {"model": c(self.ledger.model), "wire": c(self.ledger.wire),
                          "down": float(self.ledger.down), "down_model": float(self.ledger.down_model),
                          "start": float("nan") if start is None else float(start), "rows": int(rows),
                          "elapsed": time.monotonic() - self.budgets.t0}
        return st

    def load(self, stored: dict, where: str = "checkpoint") -> int:
        """Check a tree read from a checkpoint (:func:`hpcgc.typed_state.read`) against this run —
        names, shapes, dtypes — and restore it; returns its iteration. StateMismatch (one line)
        if it does not fit; nothing is changed then."""
        k = stored.get("iteration")
        if not isinstance(k, np.ndarray) or k.shape != () or k.dtype.kind not in "iu" \
                or not 0 < int(k) <= self.clock.iterations:
            raise StateMismatch(f"{where}: no iteration between 1 and {self.clock.iterations}")
        try:
            tree = conform(self.capture(int(k), 0, copy=False), stored)     # the template: names, shapes, dtypes
            self.restore(tree)
        except StateMismatch as exc:
            raise StateMismatch(f"{where}: {exc}") from None
        return tree["iteration"]

    def restore(self, st: dict) -> int:
        """Put a captured (or conformed) tree back; returns the iteration it was taken at."""
        for j, g in enumerate(self.rngs):               # first: the one part numpy checks itself
            set_rng_state(g, st["rngs"][f"g{j}"], f"/rngs/g{j}")
        self.x[:] = st["x"]
        restore_arrays(self.ws, st["worker"])
        restore_arrays(self.ss, st["server"])
        if hasattr(self.ss, "restored"):                # scratch the algorithm's step expects clean
            self.ss.restored()
        self.ex.restore(st["exchange"])
        k = st["iteration"]
        timers = st["timers"]
        self.clock.totals[:] = timers["totals"]
        if self.clock.per_iteration is not None:
            self.clock.per_iteration[:k] = timers["per_iteration"]
        self.t.ledger[:] = timers["mpi_ledger"]
        self.t.received[:] = timers["mpi_received"]
        self.t.intra[:] = timers["intra"]
        if self.ledger is not None:
            root = st["root"]
            self.ledger.model[:], self.ledger.wire[:], self.ledger.down = root["model"], root["wire"], root["down"]
            self.ledger.down_model = root["down_model"]
            self.stop_rules.start = None if math.isnan(root["start"]) else root["start"]
            self.budgets.t0 = time.monotonic() - root["elapsed"]
        return k


class Checkpointer:
    """The collective save at an evaluation point: every rank's packed state to rank 0, which writes
    it beside the results file (``RunWriter.save_checkpoint``); rank 0's ``policy`` says when."""

    def __init__(self, transport, state: RunState, policy: Policy | None, writer):
        self.t, self.state, self.policy, self.w = transport, state, policy, writer
        self.cost = {"checkpoints": 0, "checkpoint_seconds": 0.0, "checkpoint_bytes": 0}

    def due(self, k: int) -> bool:
        return self.policy is not None and self.policy.due(k)

    def __call__(self, k: int):
        t0 = time.perf_counter()
        trees = self.t.gather_object(self.state.capture(k, self.w.rows if self.w is not None else 0, copy=False))
        if self.w is not None:
            nbytes = self.w.save_checkpoint(k, trees)
            self.policy.taken(k)
            self.cost.update(checkpoints=self.cost["checkpoints"] + 1, checkpoint_bytes=nbytes or 0,
                             checkpoint_seconds=self.cost["checkpoint_seconds"] + time.perf_counter() - t0)
