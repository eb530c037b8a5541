"""VR-DIANA: DIANA with loopless-SVRG (L-SVRG) variance reduction of the workers' mini-batch gradients.

Horváth, Kovalev, Mishchenko, Stich, Richtárik, *Stochastic Distributed Learning with Gradient
Quantization and Variance Reduction*, arXiv 1904.05115 (2019); the L-SVRG flavour as in
`spec/diana.md` §B.7 (burlachenkok/marina ``experiment_vr_all.py``). Worker i keeps a reference
point w_i and its full local gradient ∇f_i(w_i); per iteration k:

    worker i:  S ⊂ shard i, |S| = b (uniform, without replacement)
               g_i = ∇f_{i,S}(x^k) − ∇f_{i,S}(w_i) + ∇f_i(w_i)        (unbiased, variance → 0 at x*)
               m_i = C(g_i − h_i)  (the only message),   h_i ← h_i + α·m_i
               if u_k = 1:  w_i ← x^k, ∇f_i(w_i) recomputed           (u_k ~ Bernoulli(p), shared)
    server:    exactly DIANA's step (:class:`~hpcgc.algorithms.diana.Diana`)

The coin u_k is one for all workers (:func:`~hpcgc.algorithms.base.shared_coin`, a pure function of
the run seed and k), so every worker refreshes on the same iterations. Default p = b/m with m the
largest shard (one p for all); ``run.probability`` overrides it.

ω convention: ω is the *variance* parameter, E‖C(x) − x‖² ≤ ω‖x‖² (`spec/decisions.md`), as in the
group's code that ports Thm 4 (`spec/diana.md` §B.6); where the paper means the second moment 1 + ω,
the difference is one unit of ω.

Step sizes (times ``run.step_multiplier``), α = 1/(1+ω):

* strongly convex (used for logreg / ridge): γ = 1/(6·L_b·(1 + 4ω/n)), where
  L_b = L_1/b + (1 − 1/b)·L_max is the expected smoothness of a b-sample mini-batch (L_1 = the
  largest single-sample smoothness over all workers; Gower et al. 2019, "SGD: general analysis and
  improved rates", Prop. 3.8, as in Sokolov's ``A_sgd``). It composes L-SVRG's 1/(6L) (Kovalev,
  Horváth, Richtárik 2020, "Don't jump through hoops", Thm 5) with DIANA's 1 + 4ω/n factor (the
  ``diana`` rule, `spec/diana.md` §B.6). The VR-DIANA paper's own strongly convex constants could not
  be read (UNCONFIRMED), so this is our documented choice, tested to converge linearly to x*.
* nonconvex (Thm 4 of 1904.05115, `spec/diana.md` §B.6): :func:`nonconvex_theory_step`,
  γ = 1/(10·L·√(1 + ω/n)·(m^{2/3} + ω + 1)) with m = N_i/b and p = 1/m; wired once nonconvex
  problems run gradient methods.

Gradient evaluations (single-sample gradients) are counted in the worker state ``evals``: 2b per
iteration, plus N_i when the reference point moves (and N_i once at set-up).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..matrix import issparse
from .base import LEARNING_RATE, NO_CONSTANT, SMOOTH, STRONGLY_CONVEX, coin_probability, shared_coin
from .diana import Diana, WorkerState


@dataclass
class VrWorkerState(WorkerState):      # defaults only because WorkerState ends with one; all are set
    w: np.ndarray = None          # reference point w_i
    gw: np.ndarray = None         # ∇f_i(w_i), full local gradient
    k: np.ndarray = None          # iteration counter (int64, shape (1,)): the coin's index
    evals: np.ndarray = None      # single-sample gradient evaluations so far (shape (1,))


def nonconvex_theory_step(L: float, omega: float, n: int, m: float) -> float:
    """Horváth et al. 2019, Thm 4: γ = 1/(10·L·√(1 + ω/n)·(m^{2/3} + ω + 1)), m = N_i/b (1 for DIANA)."""
    return 1.0 / (10.0 * L * math.sqrt(1.0 + omega / n) * (m ** (2.0 / 3.0) + omega + 1.0))


def strongly_convex_theory_step(L_b: float, omega: float, n: int) -> float:
    """γ = 1/(6·L_b·(1 + 4ω/n)) (module doc: L-SVRG's 1/(6L) with DIANA's 1 + 4ω/n)."""
    return 1.0 / (6.0 * L_b * (1.0 + 4.0 * omega / n))


VR_FORMULAS = {
    "vr-strongly-convex": "step_multiplier / (6 L_b (1 + 4 omega/n)), L_b = L_1/b + (1 - 1/b) L_max",
    "horvath-thm4": "step_multiplier / (10 L_max sqrt(1 + (1+omega)/n) ((m_max/b)^(2/3) + (1+omega) + 1))",
    LEARNING_RATE: "step_multiplier * run.learning_rate",
}


def batch_smoothness(L_one: float, L_max: float, b: int) -> float:
    """L_b = L_1/b + (1 − 1/b)·L_max: expected smoothness of a b-sample mini-batch (Gower et al. 2019)."""
    return L_one / b + (1.0 - 1.0 / b) * L_max


def sample_smoothness(problem) -> float:
    """The largest single-sample smoothness c·‖a_j‖² + l2 of a linear-model shard (c = 1/4 logistic)."""
    A = problem.A
    sq = np.asarray(A.multiply(A).sum(axis=1)).ravel() if issparse(A) else np.einsum("ij,ij->i", A, A)
    c = 0.25 if problem.kind == "logreg" else 1.0
    return c * float(sq.max(initial=0.0)) + problem.l2


NO_BATCH = ("vr-diana needs mini-batches: set run.batch (e.g. 1/20 of a worker's samples); "
            "with full local gradients use 'diana'")


class VrDiana(Diana):
    """VR-DIANA (L-SVRG flavour): DIANA's messages and server, variance-reduced worker gradients."""

    name = "vr-diana"
    two_level = False                  # its reference-point gradients: not one gradient at x per iteration
    nonconvex_ok = True
    overlaps = False            # its gradient is a variance-reduced combination, not one backward pass
    step_rules = {"vr-strongly-convex": STRONGLY_CONVEX, "horvath-thm4": SMOOTH, LEARNING_RATE: NO_CONSTANT}
    auto_rules = {STRONGLY_CONVEX: "vr-strongly-convex", SMOOTH: "horvath-thm4", NO_CONSTANT: LEARNING_RATE}
    """'vr-strongly-convex': γ = 1/(6 L_b (1 + 4ω/n)) (module doc); 'horvath-thm4': Thm 4 with
    m = m_max/b and the ω' = 1 + ω convention of DIANA's rule (docs/methods.md); 'learning-rate'."""

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        if self.batch <= 0:
            raise ConfigError(NO_BATCH)
        self.seed = int(options.get("seed", 0))
        self.prob_option = options.get("probability", "theory")
        coin_probability(self.name, self.prob_option, 0.5)       # range check now; default set when m is known
        self.multiplier = float(options.get("step_multiplier", 1.0))
        self.L_max = float(problem_info["L_max"])
        self.p = self.L_b = self.L_one = self.m_max = float("nan")

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        return [] if rc["run"]["batch"] > 0 else [NO_BATCH]

    def worker_init(self, i: int, problem=None) -> VrWorkerState:
        d = self.d
        ws = VrWorkerState(i=i, h=np.zeros(d), delta=np.empty(d), w=np.zeros(d), gw=np.zeros(d),
                           k=np.zeros(1, dtype=np.int64), evals=np.zeros(1))
        self._local = problem
        return ws

    def agree_values(self, state: VrWorkerState):
        prob = self._local
        return np.array([float(prob.A.shape[0]), sample_smoothness(prob)])

    def set_agreed(self, maxima):
        self.m_max, self.L_one = float(maxima[0]), float(maxima[1])
        if self.batch > self.m_max:
            raise ConfigError(f"run.batch = {self.batch} exceeds the largest worker's sample count {int(self.m_max)}")
        self.p = coin_probability(self.name, self.prob_option, self.batch / self.m_max)
        self.L_b = batch_smoothness(self.L_one, self.L_max, self.batch)
        if self.step_rule == "horvath-thm4":
            self.gamma = self.multiplier * nonconvex_theory_step(self.L_max, 1.0 + self.omega, self.independent,
                                                                 self.m_max / self.batch)
        elif self.step_rule != LEARNING_RATE:           # learning-rate: γ set by DIANA's constructor
            self.gamma = self.multiplier * strongly_convex_theory_step(self.L_b, self.omega, self.independent)

    def worker_compute(self, state: VrWorkerState, x: np.ndarray, problem, rng):
        """g_i = ∇f_{i,S}(x) − ∇f_{i,S}(w_i) + ∇f_i(w_i); Δ_i = g_i − h_i; then the shared coin."""
        m = problem.A.shape[0]
        if state.k[0] == 0:                                   # w_i^0 = x^0, its full gradient once
            state.w[:] = x
            state.gw[:] = problem.grad(x)
            state.evals += m
        rows = rng.choice(m, size=self.batch, replace=False)
        g = problem.grad(x, rows)
        g -= problem.grad(state.w, rows)
        g += state.gw
        np.subtract(g, state.h, out=state.delta)
        state.evals += 2 * self.batch
        if shared_coin(self.seed, int(state.k[0]), self.p):  # w_i ← x^k for the next iteration
            state.w[:] = x
            state.gw[:] = problem.grad(x)
            state.evals += m
        state.k += 1

    def describe(self) -> dict:
        return {**super().describe(), "probability": self.p, "L_batch": self.L_b, "L_sample_max": self.L_one,
                "step_rule": self.step_rule, "step_formula": VR_FORMULAS[self.step_rule]}
