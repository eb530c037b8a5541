"""DGC: Deep Gradient Compression — top-k with momentum correction, momentum factor masking, local
gradient clipping and a warm-up of the sparsity.

Lin, Han, Mao, Wang, Dally, *Deep Gradient Compression: Reducing the Communication Bandwidth for
Distributed Training*, ICLR 2018 (arXiv 1712.01887), Algorithm 1 with Sect. 3.1–3.2, over n workers:

    worker i:  g_i ← ∇f_i(x) (or a ``run.batch`` mini-batch),  clipped to norm c/√n   (local clipping)
               u_i ← m·u_i + γ·g_i                                   (momentum correction: the
               v_i ← v_i + u_i                                        velocity is accumulated)
               send top-k(v_i);  v_i ← v_i − top-k(v_i),  u_i ← 0 where sent  (momentum factor masking)
    server:    x ← x − Σ_i w_i top-k(v_i)                            (w_i = 1/n)

m = ``run.momentum``; c = ``run.dgc_clip`` (0: no clipping) — the paper clips each worker's gradient
by the global threshold scaled by N^{-1/2}; γ is the step (below). The step γ is folded into the
velocity (the paper's u ← m·u + g with x ← x − γ·Σ sparse(v) is the same recursion for a constant
γ): with m = 0, c = 0 and no warm-up, DGC *is* EF (``ef``) with top-k, bit for bit — e_i = v_i,
the same message, the same step (``tests/mpi/test_dgc_signsgd_mpi.py``). The worker subtracts its
own *decoded* message, so the float32 rounding of the sent values stays in v_i, as in EF (with
``topk:...,fp64=true`` the sent coordinates are cleared exactly); the momentum is masked on the
coordinates whose decoded value is non-zero (a coordinate sent with the value 0 — only when fewer
than k entries of v_i are non-zero — keeps its velocity, which is then 0 in v's terms anyway).

Warm-up of the sparsity (Sect. 3.3, "exponentially increasing the sparsity 75 %, 93.75 %,
98.4375 %, 99.6 %, 99.9 %"): ``run.dgc_warmup`` = W > 0 iterations split in four equal stages
that keep ⌈d/4^s⌉ coordinates in stage s = 1 … 4 (never fewer than the run's k, never more than
d), then k. Every rank derives the stage from the iteration counter it keeps (checkpointed), so
worker and server use the same top-k without a message; each stage's payloads carry their own k.

Step: as EF's (``run.step_rule``: 'theory' = ``step_multiplier``/L where L is known, the step of
uncompressed gradient descent; 'learning-rate' = ``step_multiplier`` × ``run.learning_rate``, the
default — and required — on softmax/mlp). The paper analyses no step; ``docs/methods.md`` "DGC".

Collectives: ``gather``, ``allgather`` and ``reduce-scatter`` (top-k per segment, error feedback on
the owner, as ``ef`` + ``topk``; without the warm-up, whose k changes during the run while the
segments' compressors are fixed). Not ``allreduce``: top-k messages of different workers keep
different coordinates and do not add up.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .ef import EF

STAGES = 4
"""Warm-up stages: keep 1/4, 1/16, 1/64, 1/256 of the coordinates (75 %, 93.75 %, 98.4375 %, 99.6 %)."""


@dataclass
class WorkerState:
    i: int                 # worker index
    u: np.ndarray          # velocity u_i (momentum correction), γ folded in
    v: np.ndarray          # accumulated velocity v_i, what top-k reads
    sent: np.ndarray       # scratch: the decoded own message
    t: np.ndarray          # [iterations done] (int64): the warm-up stage


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    m: np.ndarray          # scratch: Σ_i w_i top-k(v_i)
    t: np.ndarray          # [iterations done] (int64): the warm-up stage of the messages


def warmup_stage(t: int, warmup: int) -> int:
    """The warm-up stage of iteration t (0-based): 1 … 4 during the first ``warmup`` iterations, 0 after."""
    return 1 + (STAGES * t) // warmup if t < warmup else 0


def stage_k(k: int, d: int, stage: int) -> int:
    """Coordinates kept in ``stage``: ⌈d/4^stage⌉ clamped to [k, d] (stage 0: k)."""
    return k if stage == 0 else min(d, max(k, -(-d // 4 ** stage)))


class DGC(EF):
    """Deep Gradient Compression (Lin et al. 2018)."""

    name = "dgc"
    takes_biased = False     # it takes one biased compressor, topk, named in its own refusal (not a general taker)
    collectives = ("gather", "allgather", "reduce-scatter")
    collectives_why = ("its top-k messages keep different coordinates on every worker, so they do not add up in an "
                       "Allreduce; collectives it can use: gather, allgather, reduce-scatter")

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        r, p = rc["run"], rc["problem"]
        out = []
        if compressor is not None and compressor.name != "topk":
            out.append(f"dgc sparsifies by top-k: run.compressor must be 'topk:k=K' (or topk:ratio via a budget), "
                       f"got {compressor.spec!r}")
        if r.get("alpha", "theory") != "theory":
            out.append("dgc has no shifts to step (run.alpha); remove run.alpha")
        if p.get("l1", 0) != 0:
            out.append("dgc has no prox step for problem.l1; set problem.l1 = 0")
        if r.get("dgc_warmup", 0) > 0 and r.get("collective") == "reduce-scatter":
            out.append("dgc's sparsity warm-up (run.dgc_warmup) changes k during the run, and run.collective = "
                       "'reduce-scatter' fixes its segments' top-k for the run: set run.dgc_warmup = 0 or use "
                       "'gather' / 'allgather'")
        return out

    def refuse_options(self, options: dict, compressor) -> None:
        from ..errors import ConfigError
        for msg in self.plan_refusals({"run": options, "problem": {"l1": options.get("l1", 0.0)}}, compressor):
            raise ConfigError(msg)

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.momentum = float(options.get("momentum", 0.0))
        self.clip = float(options.get("dgc_clip", 0.0) or 0.0)
        self.local_clip = self.clip / math.sqrt(n_workers) if self.clip > 0 else 0.0
        self.warmup = int(options.get("dgc_warmup", 0) or 0)
        # per stage (0 = the run's top-k, 1 … 4 = warm-up), per worker: its compressor and codec
        self.stage_comps = [list(compressors)]
        for s in range(1, STAGES + 1 if self.warmup else 1):
            self.stage_comps.append([c if stage_k(c.k, d, s) == c.k else type(c)(**{**c.params, "k": stage_k(c.k, d, s)})
                                     for c in compressors])
        self.bits_stage = 0          # the stage of the messages the last server step decoded (bit accounting)

    def _codec(self, i: int, stage: int):
        if stage == 0:
            return self.codecs[i]
        cache = self.__dict__.setdefault("_stage_codecs", {})
        if (stage, i) not in cache:
            cache[(stage, i)] = self.stage_comps[stage][i].prepared(self.d)
        return cache[(stage, i)]

    def _stage(self, t) -> int:
        return warmup_stage(int(t[0]), self.warmup) if self.warmup else 0

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        d = self.d
        return WorkerState(i=i, u=np.zeros(d), v=np.zeros(d), sent=np.zeros(d), t=np.zeros(1, dtype=np.int64))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """Clip g_i to c/√n; u_i ← m·u_i + γ·g_i; v_i ← v_i + u_i."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        g = problem.grad(x, rows)
        if self.local_clip > 0:
            norm = math.sqrt(float(np.dot(g, g)))
            if norm > self.local_clip:
                g = g * (self.local_clip / norm)
        if self.momentum == 0.0:
            np.multiply(g, self.gamma, out=state.u)
        else:
            state.u *= self.momentum
            state.u += self.gamma * g
        state.v += state.u

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        """top-k(v_i) with the stage's k, then :meth:`worker_sent` with it decoded."""
        codec = self._codec(state.i, self._stage(state.t))
        payload = codec.encode(state.v, rng)
        self.worker_sent(state, lambda out, a: codec.add(payload, out, a))
        return payload

    def worker_message(self, state: WorkerState) -> np.ndarray:
        return state.v

    def worker_sent(self, state: WorkerState, own_add) -> None:
        """v_i ← v_i − top-k(v_i) (decoded, as the server sees it); u_i ← 0 where sent (masking)."""
        sent = state.sent
        sent[:] = 0.0
        own_add(sent, 1.0)
        state.v -= sent
        if self.momentum != 0.0:
            state.u[sent != 0.0] = 0.0
        state.t[0] += 1

    # -- server side -----------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), m=np.zeros(self.d), t=np.zeros(1, dtype=np.int64))

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        """x ← x − Σ_i w_i top-k(v_i), decoded with the stage's codecs."""
        stage = self.bits_stage = self._stage(state.t)
        state.m[:] = 0.0
        if stage == 0:
            self.add_messages(state.m, messages)
        else:
            for i, payload in messages:
                self._codec(i, stage).add(payload, state.m, self.weights[i])
        state.x -= state.m
        state.t[0] += 1
        return state.x

    def server_reduced(self, state: ServerState, add_sum) -> np.ndarray:
        """The same step from the decoded aggregate (reduce-scatter: its second stage)."""
        state.m[:] = 0.0
        add_sum(state.m)
        state.x -= state.m
        state.t[0] += 1
        return state.x

    def model_bits(self, i: int, payload) -> float:
        return self.stage_comps[self.bits_stage][i].decoded_model_bits(payload, self.d)

    def describe(self) -> dict:
        return {**super().describe(), "dgc_momentum": self.momentum, "dgc_clip": self.clip,
                "dgc_local_clip": self.local_clip, "dgc_warmup": self.warmup}
