"""DiLoCo: local SGD rounds whose averaged, compressed pseudo-gradient drives an outer Nesterov step.

Douillard, Feng, Rusu, Chhaparia, Donchev, Kuncoro, Ranzato, Szlam, Shen, *DiLoCo: Distributed
Low-Communication Training of Language Models*, arXiv 2311.08105 (2023), Algorithm 1:

    round t:  worker i: x_i ← x; H inner steps x_i ← x_i − η_in·g_i(x_i)      (run.local_steps = H,
                        Δ_i = x − x_i  (the pseudo-gradient)                    run.learning_rate = η_in)
                        with error feedback: e_i ← e_i + Δ_i; m_i = C(e_i); e_i ← e_i − m_i
                        (else m_i = C(Δ_i))
              server:   Δ = Σ_i w_i m_i   (w_i = 1/n: the paper's plain average)
                        v ← μ·v + Δ;  x ← x − η_out·(Δ + μ·v)                   (run.outer_learning_rate = η_out,
                                                                                 run.outer_momentum = μ)

The outer step is Nesterov momentum in the form of ``torch.optim.SGD(nesterov=True)``, the paper's
outer optimizer (η_out = 0.7, μ = 0.9, the defaults here). Deviation from the paper: its inner
optimizer is AdamW; here it is plain mini-batch SGD (``run.batch`` rows per step, the whole shard
when 0), the inner optimizer of :class:`~hpcgc.algorithms.local_sgd.LocalSGD` — run.momentum (the
inner momentum of the other methods) must stay 0. The paper sends Δ_i in full precision; the
compression of the pseudo-gradient follows INTELLECT-1 (int8, Jaghouar et al. 2024) and DeMo
(top-k of a transform, Peng et al. 2024). Decision (``docs/methods.md``, "DiLoCo"): an unbiased
compressor may run with or without error feedback; a biased one (top-k, sign, …) needs
``run.error_feedback = true`` — without it the same mass is dropped from every round's Δ_i.

Everything but the pseudo-gradient's sign and the server step is local SGD's: the per-tensor
compressors (:class:`~hpcgc.algorithms.local_sgd.LocalSGD`: top-k/rand-k per tensor, PowerSGD on
matrices, per-worker ratios), the framed payload, the Allreduce codec, error feedback. Δ_i is
accumulated as Σ_h η_in·g_h (the same vector as x − x_i in exact arithmetic): with H = 1 it is
η_in·g exactly, so that H = 1, μ = 0, η_out = 1 is DCGD with γ = η_in — bit for bit when η_in is a
power of two (scaling by 2^k commutes with every compressor's rounding), to rounding otherwise.

Collectives: ``gather``, ``allgather`` (local SGD's per-tensor messages), ``allreduce`` (summable
compressors; the whole vector through one codec, :meth:`sum_codec` — PowerSGD per matrix) and
``reduce-scatter`` — the compressed Allreduce INTELLECT-1 ran the pseudo-gradient through: there
the exchange compresses Δ_i (or e_i) segment-wise with the run's compressor (not per tensor), and
a segment's owner re-compresses the sum plainly for an unbiased compressor, with error feedback
for a biased one (:meth:`second_stage`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .local_sgd import LocalSGD

PLAN_D = 2**20
"""A dimension to ask a compressor at plan time whether it is unbiased (before d is known)."""


@dataclass
class WorkerState:
    i: int
    problem: object
    u: np.ndarray                 # the pseudo-gradient Δ_i = Σ_h η_in·g_h of this round
    e: np.ndarray | None          # error-feedback memory (Δ_i + residual before the message)
    local: np.ndarray             # the worker's inner iterate x_i


@dataclass
class ServerState:
    x: np.ndarray                 # outer iterate
    v: np.ndarray                 # outer (Nesterov) momentum buffer
    m: np.ndarray                 # scratch: the aggregate Σ_i w_i m_i


def refusals(r: dict, comp) -> list[str]:
    """DiLoCo's plan-time refusals from a grid point's [run] table (one line each)."""
    out = []
    if int(r.get("local_steps") or 0) < 1:
        out.append("diloco needs run.local_steps = H >= 1, the inner SGD steps per round (the paper's H is "
                   f"500; H = 1 with run.outer_momentum = 0 is compressed SGD), got {r.get('local_steps')!r}")
    mu = r.get("outer_momentum", 0.9)
    if not 0.0 <= mu < 1.0:
        out.append(f"run.outer_momentum must be in [0, 1) for diloco (the paper's 0.9), got {mu!r}")
    if r.get("momentum", 0.0) != 0:
        out.append("diloco's inner optimizer is plain SGD: remove run.momentum (its momentum is "
                   "run.outer_momentum, on the outer step)")
    if comp is not None and not comp.unbiased and not r.get("error_feedback", False):
        out.append(f"diloco with the biased compressor {comp.spec} needs run.error_feedback = true (error feedback "
                   "on the pseudo-gradient); unbiased compressors run with or without it")
    return out


class DiLoCo(LocalSGD):
    """Local SGD's rounds and messages, with the pseudo-gradient's sign and an outer Nesterov step."""

    name = "diloco"
    aggregation = "mean"          # Δ = (1/n) Σ_i Δ_i, the paper's average (local-sgd: sample counts)
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        for msg in refusals(options, compressors[0]):
            raise ConfigError(msg)
        self.outer_lr = float(options.get("outer_learning_rate", 0.7))
        self.outer_mu = float(options.get("outer_momentum", 0.9))
        if not (self.outer_lr > 0 and np.isfinite(self.outer_lr)):
            raise ConfigError(f"run.outer_learning_rate must be > 0, got {self.outer_lr!r}")
        self.unbiased = all(c.unbiased for c in compressors)

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        refused = refusals(rc["run"], compressor)
        if rc["problem"].get("l1", 0.0) != 0:
            refused.append("diloco has no prox step for problem.l1; set problem.l1 = 0 (or use 'diana' / 'dcgd')")
        return refused

    def describe(self) -> dict:
        return {**super().describe(), "outer_learning_rate": self.outer_lr, "outer_momentum": self.outer_mu}

    # -- worker --------------------------------------------------------------------------------------
    def worker_init(self, i, problem=None) -> WorkerState:
        return WorkerState(i=i, problem=problem, u=np.zeros(self.d), e=np.zeros(self.d) if self.ef else None,
                           local=np.empty(self.d))

    def worker_compute(self, ws: WorkerState, x, problem, rng):
        """H inner SGD steps from x; Δ_i = Σ_h η_in·g_h (= x − x_i) accumulated step by step."""
        ws.local[:] = x
        ws.u[:] = 0.0
        m = problem.A.shape[0]
        for _ in range(self.steps):
            rows = rng.choice(m, size=self.batch, replace=False) if self.batch and self.batch < m else None
            step = problem.grad(ws.local, rows)          # a new array
            step *= self.lr
            ws.local -= step
            ws.u += step
        if ws.e is not None:
            ws.e += ws.u

    def sum_codec(self, i: int):
        """Under Allreduce the whole pseudo-gradient rides one codec of the run's compressor (one
        int8 scale for the model, as INTELLECT-1's int8 all-reduce; local SGD's per-tensor
        Allreduce takes float vectors only); PowerSGD, whose codec works per weight matrix, keeps
        local SGD's per-tensor form."""
        if getattr(self.compressors[i], "matrices_only", False):
            return super().sum_codec(i)
        return self.compressors[i].sum_codec(self.d)

    # -- server --------------------------------------------------------------------------------------
    def server_init(self, x0) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), v=np.zeros(self.d), m=np.zeros(self.d))

    def server_step(self, ss: ServerState, messages):
        ss.m[:] = 0.0
        for i, payload in messages:
            for (a, b, p), comp in zip(self._split(payload), self.tensor_comps[i]):
                comp.decompress_add(p, b - a, ss.m[a:b], self.weights[i])
        return self._outer(ss)

    def server_reduced(self, ss: ServerState, add_sum):
        ss.m[:] = 0.0
        add_sum(ss.m)
        return self._outer(ss)

    def _outer(self, ss: ServerState):
        """v ← μv + Δ; x ← x − η_out(Δ + μv) (Nesterov, torch.optim.SGD's form); with μ = 0 and
        η_out = 1 exactly x ← x − Δ."""
        m, mu = ss.m, self.outer_mu
        if mu != 0.0:
            ss.v *= mu
            ss.v += m
            m += mu * ss.v
        if self.outer_lr != 1.0:
            m *= self.outer_lr
        ss.x -= m
        return ss.x

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """Under reduce-scatter: an unbiased compressor's owner sends plain C₂(S) (0, 1), as DCGD's;
        a biased one keeps error feedback on the owner too (1, 1), as the workers do."""
        return (0.0, 1.0) if self.unbiased else (1.0, 1.0)
