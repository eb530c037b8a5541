"""DASHA: compressed gradient differences with a momentum on the compressed state — MARINA
without its dense rounds.

Tyurin, Richtárik, *DASHA: Distributed Nonconvex Optimization with Communication Compression and
Optimal Oracle Complexity*, ICLR 2023 (arXiv 2202.01268), Algorithm 1:

    worker i:  h_i⁺ = its gradient estimator at x^k (the variant, below)
               m_i = C(h_i⁺ − h_i − a·(g_i − h_i))   (the only message),   g_i ← g_i + m_i,  h_i ← h_i⁺
    server:    g ← g + Σ_i w_i m_i   (= Σ_i w_i g_i, from the same decoded messages),   x ← x − γ·g

with a = 1/(2ω + 1) (Theorem 6.1; the authors' code ``_estimate_momentum``, and Flower's baseline
``_get_momentum``). Variants (``run.dasha_variant``):

    full   h_i⁺ = ∇f_i(x^k)                                                   (DASHA)
    page   h_i⁺ = ∇f_i(x^k) with probability p (a shared coin), else
           h_i + (1/B)·Σ_{j∈I}(∇f_ij(x^k) − ∇f_ij(x^{k−1})),  |I| = B = run.batch   (DASHA-PAGE)
    mvr    h_i⁺ = ∇f_i(x^k; ξ) + (1 − b)·(h_i − ∇f_i(x^{k−1}; ξ)),  |ξ| = B = run.batch   (DASHA-MVR)

PAGE's p = ``run.probability``, default B/(B + m) with m the largest shard (the authors' code,
``ZeroMarinaPageMasterAlgorithm._estimate_prob``). MVR's b = 1 − ``run.momentum`` (``run.momentum``
keeps its meaning, the weight on the past: 0 = none, b = 1, h_i⁺ = the plain mini-batch gradient).

First iteration: g_i⁰ = h_i⁰ = ∇f_i(x⁰) (full local gradient for every variant), sent dense as
float64 (``identity:fp64=true``, 64·d model bits), as in Flower's DASHA baseline (``DashaClient.
_gradient_step``, "Line 2 from Alg 1") and hpcgc's EF21 and MARINA (whose iteration 0 is a dense
round); from the second iteration on only compressed messages travel.

Step (``run.step_rule = 'theory'``, default where L is known): γ = 1/(L + L̂·√(ω(4ω + 1)/n)) with
L̂ = √(mean_i L_i²) — the authors' code, mysteryresearcher/dasha @2fd42b7
``code/distributed_optimization_library/algorithm.py`` ``ZeroMarinaMasterAlgorithm._estimate_gamma``
(the DASHA paper's Theorem 6.1 text could not be read here, so its constants are UNCONFIRMED against
the paper; ``docs/methods.md``). n is the number of independent messages (1 with shared randomness).
For ``page`` and ``mvr`` the same γ is used (their theorems add mini-batch terms that make γ only
smaller; ``run.step_multiplier`` scales it). ``learning-rate``: γ = run.learning_rate.

Special case: with ``identity`` (ω = 0, a = 1), m_i = h_i⁺ − g_i, so g_i = ∇f_i(x^k) and DASHA is
gradient descent — ``dcgd`` with ``identity`` at the same γ, iterate for iterate up to float rounding
(g is accumulated from differences instead of summed afresh), tested under MPI.

Collectives: ``gather``, ``allgather``, ``reduce-scatter`` (the dense first message as float64
segments in both stages; the owner runs DASHA's own recursion on the aggregate: second stage (a, 1),
``docs/methods.md``). Not ``allreduce``: the dense first message and the compressed ones are two
codecs. Refused: biased compressors (the theory needs E C(x) = x), ``problem.l1``, ``run.alpha``,
``run.batch`` with ``full`` and its absence with ``page``/``mvr``, momentum outside ``mvr``,
``run.probability`` outside ``page``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import compressors as C
from ..errors import ConfigError
from .base import (
    LEARNING_RATE,
    NO_CONSTANT,
    SMOOTH,
    STRONGLY_CONVEX,
    Algorithm,
    coin_probability,
    learning_rate,
    shared_coin,
)
from .diana import composed_unbiased, independent_messages, unbiased_omega
from .ef21 import HEAD

VARIANTS = ("full", "page", "mvr")


@dataclass
class WorkerState:
    i: int
    h: np.ndarray          # h_i, the gradient estimator
    g: np.ndarray          # g_i, what the server knows of it
    msg: np.ndarray        # the vector compressed this iteration
    tmp: np.ndarray        # scratch
    x_prev: np.ndarray     # x^{k−1} (page, mvr)
    fresh: np.ndarray      # [1.0] until the dense first message is sent
    k: np.ndarray          # int64 (1,): iteration counter (PAGE's coin index)
    evals: np.ndarray      # single-sample gradient evaluations so far
    L_i: float = 0.0       # smoothness of f_i (recomputed, not checkpointed)
    m_i: float = 0.0       # samples of shard i (recomputed)


@dataclass
class ServerState:
    x: np.ndarray
    g: np.ndarray          # g = Σ_i w_i g_i
    m: np.ndarray          # scratch: the aggregated message
    fresh: np.ndarray      # [1.0] until the dense first messages arrive


def theory_step(L: float, L_hat: float, omega: float, n: int) -> float:
    """γ = 1/(L + L̂·√(ω(4ω + 1)/n)) (mysteryresearcher/dasha, ``_estimate_gamma``)."""
    return 1.0 / (L + L_hat * math.sqrt(omega * (4.0 * omega + 1.0) / n))


def momentum_a(omega: float) -> float:
    """a = 1/(2ω + 1) (DASHA Theorem 6.1)."""
    return 1.0 / (2.0 * omega + 1.0)


def variant_refusals(rc: dict) -> list[str]:
    """Plan-time (data-free) refusals of a DASHA grid point's settings, one line each."""
    r, out = rc["run"], []
    v = r.get("dasha_variant", "full")
    if v not in VARIANTS:
        return [f"run.dasha_variant must be one of {', '.join(VARIANTS)}; got {v!r}"]
    if v == "full" and r["batch"]:
        out.append("dasha (run.dasha_variant = 'full') uses full local gradients: set run.batch = 0, or "
                   "run.dasha_variant = 'page' or 'mvr' for mini-batches")
    if v != "full" and not r["batch"]:
        out.append(f"dasha with run.dasha_variant = {v!r} needs mini-batches: set run.batch > 0")
    if v != "mvr" and r["momentum"]:
        out.append(f"dasha (run.dasha_variant = {v!r}) has no momentum parameter (its a = 1/(2ω + 1) is fixed); "
                   "remove run.momentum, or use run.dasha_variant = 'mvr' (b = 1 − run.momentum)")
    if v != "page" and r.get("probability", "theory") != "theory":
        out.append(f"run.probability is DASHA-PAGE's coin; dasha with run.dasha_variant = {v!r} has none: "
                   "remove it")
    if r["alpha"] != "theory":
        out.append("dasha has no shifts (α); its momentum a = 1/(2ω + 1) is fixed: remove run.alpha")
    if rc["problem"]["l1"]:
        out.append("dasha has no prox step; set problem.l1 = 0")
    return out


class Dasha(Algorithm):
    """DASHA / DASHA-PAGE / DASHA-MVR (Tyurin & Richtárik 2023)."""

    name = "dasha"
    needs_unbiased = True
    nonconvex_ok = True
    steps_in_place = True
    step_rules = {"theory": SMOOTH, LEARNING_RATE: NO_CONSTANT}
    auto_rules = {STRONGLY_CONVEX: "theory", SMOOTH: "theory", NO_CONSTANT: LEARNING_RATE}
    collectives = ("gather", "allgather", "reduce-scatter")
    collectives_why = ("its first message is dense float64 and the later ones compressed (two codecs), "
                       "and an Allreduce carries one")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        rc = {"run": {"batch": int(options.get("batch", 0)), "momentum": options.get("momentum", 0.0),
                      "alpha": options.get("alpha", "theory"), "probability": options.get("probability", "theory"),
                      "dasha_variant": options.get("dasha_variant", "full")},
              "problem": {"l1": float(options.get("l1", 0.0))}}
        for msg in variant_refusals(rc):
            raise ConfigError(msg)
        self.variant = rc["run"]["dasha_variant"]
        self.batch = rc["run"]["batch"]
        self.omega = self.omega_a = unbiased_omega(self.name, compressors, d)
        if options.get("collective") == "reduce-scatter":
            self.omega_a, self.omega = composed_unbiased(self.name, compressors, d, n_workers)
        self.a = momentum_a(self.omega_a)
        beta = float(options.get("momentum", 0.0))
        if not 0.0 <= beta < 1.0:
            raise ConfigError(f"run.momentum must be in [0, 1) (dasha-mvr: b = 1 − momentum), got {beta!r}")
        self.b = 1.0 - beta
        self.independent = independent_messages(compressors, n_workers)
        self.seed = int(options.get("seed", 0))
        self.prob_option = rc["run"]["probability"]
        coin_probability(self.name, self.prob_option, 0.5)        # range check now; default when m is known
        self.p = math.nan
        mult = options.get("step_multiplier", 1.0)
        if not (mult > 0 and math.isfinite(mult)):
            raise ConfigError(f"run.step_multiplier must be > 0, got {mult!r}")
        self.mult = float(mult)
        kind = problem_info.get("kind", "logreg")
        refusal = self.check_problem(kind, {**options, "algorithm": self.name})
        if refusal is not None:
            raise ConfigError(refusal)
        self.step_rule = self.resolve_step_rule(kind, options.get("step_rule", "auto"))
        self.L = problem_info.get("L") if self.step_rule != LEARNING_RATE else None
        self.L_hat = math.nan
        if self.step_rule == LEARNING_RATE:
            self.gamma = self.mult * learning_rate(options, "dasha with step rule 'learning-rate'")
        else:
            self.gamma = math.nan             # set by set_agreed, once every worker's L_i is known
        self.dense = C.make("identity", fp64=True)
        self.dense_head = self.dense.compress(np.zeros(1), np.random.default_rng(0))[:HEAD].copy()

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        return variant_refusals(rc)

    # -- agreement: every L_i (for L̂) and the largest shard (PAGE's p), one max-reduce -------------
    def agree_values(self, state: WorkerState):
        out = np.full(self.n + 1, -np.inf)
        out[state.i] = state.L_i
        out[self.n] = state.m_i
        return out

    def set_agreed(self, maxima):
        v = np.asarray(maxima, dtype=np.float64)
        L_i, m_max = v[:self.n], float(v[self.n])
        if self.variant == "page":
            if self.batch > m_max:
                raise ConfigError(f"run.batch = {self.batch} exceeds the largest worker's sample count {int(m_max)}")
            self.p = coin_probability(self.name, self.prob_option, self.batch / (self.batch + m_max))
        if self.L:
            self.L_hat = float(np.sqrt(np.mean(L_i ** 2)))
            self.gamma = self.mult * theory_step(self.L, self.L_hat, self.omega, self.independent)

    # -- worker ----------------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        d = self.d
        L_i = float(problem.smoothness()) if (self.L and problem is not None) else 0.0
        m_i = float(problem.A.shape[0]) if problem is not None else 0.0
        return WorkerState(i=i, h=np.zeros(d), g=np.zeros(d), msg=np.zeros(d), tmp=np.zeros(d), x_prev=np.zeros(d),
                           fresh=np.ones(1), k=np.zeros(1, dtype=np.int64), evals=np.zeros(1), L_i=L_i, m_i=m_i)

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """h_i⁺ of the variant at x^k; the message vector h_i⁺ − h_i − a(g_i − h_i) (the first time:
        h_i⁰ = ∇f_i(x⁰), sent as it is)."""
        m = problem.A.shape[0]
        k = int(state.k[0])
        if state.fresh[0]:
            state.h[:] = problem.grad(x)
            state.evals += m
            state.msg[:] = state.h
        else:
            new = self._estimate(state, x, problem, rng, m, k)
            np.subtract(new, state.h, out=state.msg)          # h⁺ − h
            np.subtract(state.g, state.h, out=state.tmp)      # g − h
            state.tmp *= self.a
            state.msg -= state.tmp
            state.h[:] = new
        if self.variant != "full":
            state.x_prev[:] = x
        state.k += 1

    def _estimate(self, state: WorkerState, x, problem, rng, m: int, k: int) -> np.ndarray:
        if self.variant == "full":
            state.evals += m
            return problem.grad(x)
        if self.variant == "page" and shared_coin(self.seed, k, self.p):
            state.evals += m
            return problem.grad(x)
        rows = rng.choice(m, size=self.batch, replace=False)
        g = problem.grad(x, rows)
        if self.variant == "page":                              # h + ∇f_I(x^k) − ∇f_I(x^{k−1})
            g -= problem.grad(state.x_prev, rows)
            g += state.h
            state.evals += 2 * self.batch
            return g
        state.evals += self.batch
        if self.b != 1.0:                                       # MVR: + (1 − b)(h − ∇f_ξ(x^{k−1}))
            np.subtract(state.h, problem.grad(state.x_prev, rows), out=state.tmp)
            state.tmp *= 1.0 - self.b
            g += state.tmp
            state.evals += self.batch
        return g

    def _codec(self, i: int, fresh):
        return self.dense if fresh[0] else self.compressors[i]

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        """m_i = C(message) (the first time dense float64); g_i ← g_i + m_i, decoded."""
        codec = self._codec(state.i, state.fresh)
        payload = codec.compress(state.msg, rng)
        codec.decompress_add(payload, self.d, state.g, 1.0)
        state.fresh[0] = 0.0
        return payload

    # -- server ----------------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        d = self.d
        return ServerState(x=np.array(x0, dtype=np.float64), g=np.zeros(d), m=np.zeros(d), fresh=np.ones(1))

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        state.m[:] = 0.0
        if state.fresh[0]:
            for i, payload in messages:
                self.dense.decompress_add(payload, self.d, state.m, self.weights[i])
        else:
            self.add_messages(state.m, messages)
        return self._step(state)

    def _step(self, state: ServerState) -> np.ndarray:
        """g ← g + m (the first time g = m: the dense gradients); x ← x − γ g."""
        if state.fresh[0]:
            state.g[:] = state.m
        else:
            state.g += state.m
        state.fresh[0] = 0.0
        state.x -= self.gamma * state.g
        return state.x

    # -- under reduce-scatter ----------------------------------------------------------------------
    def rs_message(self, state: WorkerState) -> tuple:
        return state.msg, bool(state.fresh[0])

    def rs_sent(self, state: WorkerState, own_add, dense: bool) -> None:
        own_add(state.g, 1.0)
        state.fresh[0] = 0.0

    def rs_reduced(self, state: ServerState, add_sum, dense: bool) -> np.ndarray:
        state.m[:] = 0.0
        add_sum(state.m)
        return self._step(state)

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """(a, 1): the owner runs DASHA's recursion on its segment's aggregate — h = the exact
        aggregate G_true, g = the replicated G_rep — sending C₂(S − a(G_rep − G_true)); the exchange's
        D is a·(G_rep − G_true) (``docs/methods.md``)."""
        return self.a, 1.0

    def model_bits(self, i: int, payload) -> float:
        """The dense first message: 64·d; afterwards the compressor's formula."""
        if payload.size >= HEAD and np.array_equal(payload[:HEAD], self.dense_head):
            return self.dense.model_bits(payload, self.d)
        return self.compressors[i].model_bits(payload, self.d)

    def describe(self) -> dict:
        return {"gamma": self.gamma, "omega": self.omega, "dasha_a": self.a, "dasha_variant": self.variant,
                "dasha_b": self.b if self.variant == "mvr" else math.nan,
                "probability": self.p if self.variant == "page" else math.nan,
                "independent_messages": self.independent, "L_hat": self.L_hat, "step_rule": self.step_rule,
                "step_formula": ("step_multiplier * run.learning_rate" if self.step_rule == LEARNING_RATE else
                                 "step_multiplier / (L + L_hat sqrt(omega (4 omega + 1) / n))  (DASHA, authors' code)"),
                "first_message": "dense float64 gradient (identity:fp64=true)"}
