"""DIANA and DCGD: compressed gradient differences with learned shifts.

Mishchenko, Gorbunov, Takáč, Richtárik, *Distributed Learning with Compressed Gradient
Differences*, arXiv 1901.09269 (2019); recursion as in `spec/diana.md` §B.5:

    worker i:  Δ_i = g_i − h_i,   m_i = C(Δ_i)  (the only message),   h_i ← h_i + α·m_i
    server:    m = Σ_i w_i m_i,   ĝ = h + m,   v = β·v + ĝ,   x ← prox_{γR}(x − γ·v),   h ← h + α·m

DCGD (distributed compressed gradient descent) is the same recursion with α = 0 and h = 0: with
QSGD it is QSGD (Alistarh et al. 2017), with ℓ∞ ternary quantization TernGrad (Wen et al. 2017),
with full local gradients DQGD (Khirirat et al. 2018) — one implementation (`spec/decisions.md`).

Step size γ = run.step_multiplier × a named rule (``run.step_rule``, :data:`STEP_RULES`, each citing
its theorem or code line): strongly convex rules on logreg/ridge (default ``flpytorch``), the
nonconvex Thm 4 of Horváth et al. on the sigmoid loss, ``run.learning_rate`` on softmax/mlp — both
methods set ``nonconvex_ok`` (the DIANA abstract claims rates in the nonconvex setting too).

Interface: :class:`hpcgc.algorithms.base.Algorithm`. The worker updates its shift with the
*decoded own payload*, i.e. exactly what the server decodes, so h = Σ_i w_i h_i holds to rounding.
Worker i may have its own compressor (per-worker ratios); ω is then the largest of the ω_i.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..losses import MINUS
from ..problems import local_grad, prox_l1
from .base import LEARNING_RATE, NO_CONSTANT, SMOOTH, STRONGLY_CONVEX, Algorithm, learning_rate
from .kernels import shifted_step, step_from_sum
from .kernels import warm as warm_step


@dataclass
class WorkerState:
    i: int                 # worker index
    h: np.ndarray          # shift h_i (float64)
    delta: np.ndarray      # g − h_i, the vector to compress
    problem: object = None  # f_i (read by the step rule's agreement only; not checkpointed)


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    h: np.ndarray          # server shift h = Σ w_i h_i
    v: np.ndarray          # heavy-ball buffer
    m: np.ndarray          # scratch: aggregated message


def theory_step(L_max: float, omega: float, n: int) -> float:
    """γ = 1/(L_max·(1 + 4ω/n)): DIANA, strongly convex case (`spec/diana.md` B.6, flpytorch)."""
    return 1.0 / (L_max * (1.0 + 4.0 * omega / n))


# -- step rules (run.step_rule) ------------------------------------------------------------------
# Each takes c = dict(L_max, L, mu, omega, n, alpha, A_sgd) and returns γ (before run.step_multiplier).
# n is the number of independent messages (1 under shared randomness), alpha the shift step DIANA
# uses (DCGD: the 1/(1+ω) it would use, so both are compared at the same γ), A_sgd the expected
# smoothness of the workers' gradient estimators (L_max with full gradients).

def _flpytorch(c):
    """γ = 1/(L_max(1 + 4ω/n)): burlachenkok/flpytorch @23a201b `fl_pytorch/utils/algorithms.py` l.1342,
    `DIANA.theoreticalStepSize` ("SGD-CTRL analysis for strongly-convex case"); hpcgc's default."""
    return theory_step(c["L_max"], c["omega"], c["n"])


def _paper9107(c):
    """γ = 1/(L_max(1 + 2ω/n)): the DIANA baseline of the smoothness-aware paper (Wang, Safaryan,
    Richtárik, NeurIPS 2022), bokun-wang/Paper_9107_code @144c6f3 `algorithms/SD-DIANA.py` l.101
    (`lr0 = 1 / (max_Li * (1 + 2 * omega_sd / n_workers))`, its strongly convex runs)."""
    return 1.0 / (c["L_max"] * (1.0 + 2.0 * c["omega"] / c["n"]))


def _sadiev(c):
    """γ = min{α/(2μ), 1/(L_max(1 + 6ω/n))}: Sadiev et al., *Federated Optimization Algorithms with
    Random Reshuffling and Gradient Compression*, arXiv 2206.07021, Thm 2.2 (DIANA-RR) read with one
    local function per worker (an RR epoch of length 1 is DIANA with full local gradients), so μ̃ = μ."""
    cap = c["alpha"] / (2.0 * c["mu"]) if c["mu"] > 0 and c["alpha"] > 0 else math.inf
    return min(cap, 1.0 / (c["L_max"] * (1.0 + 6.0 * c["omega"] / c["n"])))


def _unified(c):
    """γ = min{1/μ, 1/(A + M·C)} of the unified SGD theory (Gorbunov, Hanzely, Richtárik, AISTATS
    2020) as coded in IgorSokoloff/rr_with_compression_experiments_source_code @6fbb013
    `logistic_regression/diana.py` l.197–203: A = A_sgd(ω + 1)/n + (ω − 1)L_max/n + L, B = 2ω/n,
    ρ = α/2, M = 1.0001·B/ρ, C = α(A_sgd + L_max) — α cancels in M·C = 1.0001·(4ω/n)(A_sgd + L_max).
    A_sgd = max_i A_i, the expected smoothness of worker i's estimator: L_i with full gradients;
    with b-row batches drawn without replacement from m_i rows (τ-nice sampling, Gower et al. 2019,
    *SGD: General Analysis and Improved Rates*, Prop. 3.8) A_i = m_i(b − 1)/(b(m_i − 1))·L_i +
    (m_i − b)/(b(m_i − 1))·L_i^{max,1} (the code uses the with-replacement form (1/b)L_i^{max,1} +
    (1 − 1/b)L_i)."""
    om, n, a_sgd = c["omega"], c["n"], c["A_sgd"]
    A = a_sgd * (om + 1.0) / n + (om - 1.0) * c["L_max"] / n + c["L"]
    MC = 1.0001 * (4.0 * om / n) * (a_sgd + c["L_max"])
    cap = 1.0 / c["mu"] if c["mu"] > 0 else math.inf
    return min(cap, 1.0 / (A + MC))


def _horvath_thm4(c):
    """γ = 1/(10·L_max·√(1 + ω'/n)·(m^{2/3} + ω' + 1)) with m = 1 (DIANA, no VR) and ω' = 1 + ω:
    Horváth, Kovalev, Mishchenko, Stich, Richtárik, *Stochastic Distributed Learning with Gradient
    Quantization and Variance Reduction*, arXiv 1904.05115, Thm 4 (nonconvex), as coded in
    flpytorch @23a201b `fl_pytorch/utils/algorithms.py` l.1333 and burlachenkok/marina
    `experiment_vr_all.py` (`# Th.4`). Convention (`spec/diana.md` §B.6 flags it): the paper's
    abstract speaks of "variance ω ≥ 1", i.e. a second-moment constant E‖Q(x)‖² ≤ ω'‖x‖², which is
    1 + ω for hpcgc's variance ω — plugging ω' = 1 + ω is valid under either reading (it can only
    shrink γ); the codes plug the variance ω. L_max (each f_i is L_max-smooth) where flpytorch
    uses the global L ≤ L_max: again the smaller, safe γ."""
    w = 1.0 + c["omega"]
    return 1.0 / (10.0 * c["L_max"] * math.sqrt(1.0 + w / c["n"]) * (1.0 + w + 1.0))


STEP_RULES = {
    "flpytorch": (STRONGLY_CONVEX, _flpytorch, "1/(L_max (1 + 4 omega/n))"),
    "paper9107": (STRONGLY_CONVEX, _paper9107, "1/(L_max (1 + 2 omega/n))"),
    "sadiev": (STRONGLY_CONVEX, _sadiev, "min(alpha/(2 mu), 1/(L_max (1 + 6 omega/n)))"),
    "unified": (STRONGLY_CONVEX, _unified, "min(1/mu, 1/(A + M C)) [Sokolov diana.py]"),
    "horvath-thm4": (SMOOTH, _horvath_thm4, "1/(10 L_max sqrt(1 + (1+omega)/n) ((1+omega) + 2))"),
    LEARNING_RATE: (NO_CONSTANT, None, "run.learning_rate"),
}
"""run.step_rule name -> (problem class it needs, γ(c), formula recorded as ``step_formula``).
The DIANA paper's own theorem (arXiv 1901.09269) stays UNCONFIRMED (`spec/diana.md` §B.6): its
text could not be read, so it is not offered under a name."""


class Diana(Algorithm):
    """DIANA (α = 1/(1+ω) by default). ``Dcgd`` is the α = 0 special case."""

    name = "diana"
    learns_shifts = True
    needs_unbiased = True
    two_level = True                   # one gradient at x per iteration: a node can be the worker
    downlink_ok = True
    """Takes a compressed downlink (``run.downlink``, EF21-P + DIANA / + DCGD, Gruntkowska et al.
    2023, Algs. 2–3): the workers evaluate at the broadcast w, the server step is unchanged."""
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")
    nonconvex_ok = True
    steps_in_place = True              # _step: state.x -= …, returns state.x
    kernels = (warm_step,)
    step_rules = {k: v[0] for k, v in STEP_RULES.items()}
    auto_rules = {STRONGLY_CONVEX: "flpytorch", SMOOTH: "horvath-thm4", NO_CONSTANT: LEARNING_RATE}

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.omega = self.omega_shift = unbiased_omega(self.name, compressors, d)
        if options.get("collective") == "reduce-scatter":
            # the workers' shifts see stage 1 only (ω₁ = ω_seg); the step sees both stages (ω_c)
            self.omega_shift, self.omega = composed_unbiased(self.name, compressors, d, n_workers)
        mult = options.get("step_multiplier", 1.0)
        if not (mult > 0 and np.isfinite(mult)):
            raise ConfigError(f"run.step_multiplier must be > 0, got {mult!r}")
        beta = options.get("momentum", 0.0)
        if not (0.0 <= beta < 1.0):
            raise ConfigError(f"run.momentum must be in [0, 1), got {beta!r}")
        self.independent = independent_messages(compressors, n_workers)
        self.alpha = self._alpha(options.get("alpha"))
        self.beta = float(beta)
        self.l1 = float(options.get("l1", 0.0))
        self.batch = int(options.get("batch", 0))
        kind = problem_info.get("kind", "logreg")
        self.step_rule = self.resolve_step_rule(kind, options.get("step_rule", "auto"))
        refusal = self.check_problem(kind, {"algorithm": self.name, **options})
        if refusal is not None:
            raise ConfigError(refusal)
        self.mult = float(mult)
        self.constants = {"L_max": problem_info["L_max"], "L": problem_info.get("L"),
                          "mu": float(problem_info.get("mu") or 0.0), "omega": self.omega, "n": self.independent,
                          "alpha": self.alpha if self.learns_shifts else 1.0 / (1.0 + self.omega_shift),
                          "A_sgd": problem_info["L_max"]}
        if self.step_rule == LEARNING_RATE:
            self.gamma = mult * learning_rate(options, f"{self.name} with step rule 'learning-rate'")
        elif (self.step_rule == "unified" and self.batch) or self.step_rule not in STEP_RULES:
            self.gamma = math.nan        # set by set_agreed before the first step: the unified rule needs every
            #                              worker's A_i; a subclass's own rule (VR-DIANA) its agreed constants
        else:
            self.gamma = mult * STEP_RULES[self.step_rule][1](self.constants)

    # the unified rule with mini-batches needs every worker's expected smoothness A_i (max-reduced)
    def agree_values(self, state):
        if self.step_rule != "unified" or not self.batch:
            return None
        return np.array([expected_smoothness(state.problem, self.batch)])

    def set_agreed(self, maxima):
        if self.step_rule == "unified" and self.batch:
            self.constants["A_sgd"] = float(maxima[0])
            self.gamma = self.mult * _unified(self.constants)

    def _alpha(self, alpha) -> float:
        if not self.learns_shifts:
            if alpha not in (None, "theory", 0, 0.0):
                raise ConfigError(f"{self.name} has no shifts (α = 0); remove run.alpha or use 'diana'")
            return 0.0
        if alpha is None or alpha == "theory":
            return 1.0 / (1.0 + self.omega_shift)
        a = float(alpha)
        if not (0.0 < a <= 1.0):
            raise ConfigError(f"run.alpha must be in (0, 1] (theory: 1/(1+ω) = {1 / (1 + self.omega_shift):.4g}), "
                              f"got {alpha!r}")
        return a

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        return WorkerState(i=i, h=np.zeros(self.d), delta=np.empty(self.d), problem=problem)

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """g_i = ∇f_i(x) (or a mini-batch estimate); keeps Δ_i = g_i − h_i."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        if self.alpha == 0.0:           # DCGD: h_i stays 0 and g − 0 = g bit for bit: h is not read
            local_grad(problem, x, rows, state.delta)
        else:
            local_grad(problem, x, rows, state.delta, MINUS, state.h)

    overlaps = True

    def worker_compute_layers(self, state: WorkerState, x: np.ndarray, problem, rng, ready):
        """``worker_compute`` with Δ_i[a:b] = g_i[a:b] − h_i[a:b] formed as each layer's gradient is
        final, then ``ready(a, b)`` (``run.overlap``): the gradient is written into Δ_i itself."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        delta, h = state.delta, state.h
        if self.alpha == 0.0:           # DCGD: h_i stays 0, not read (as in worker_compute)
            problem.grad(x, rows, out=delta, ready=ready)
            return

        def done(a, b):
            np.subtract(delta[a:b], h[a:b], out=delta[a:b])
            ready(a, b)
        problem.grad(x, rows, out=delta, ready=done)

    def worker_message(self, state: WorkerState) -> np.ndarray:
        """Δ_i = g_i − h_i: the vector worker i compresses."""
        return state.delta

    def worker_sent(self, state: WorkerState, own_add) -> None:
        """h_i ← h_i + α·C(Δ_i), with exactly the message the server decodes."""
        if self.alpha != 0.0:
            own_add(state.h, self.alpha)

    # -- server side -----------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), h=np.zeros(self.d), v=np.zeros(self.d),
                           m=np.zeros(self.d))

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        """``messages``: iterable of (worker index, payload bytes). Updates and returns state.x."""
        m = state.m
        m[:] = 0.0
        self.add_messages(m, messages)          # m = ((0 + w_0 C(Δ_0)) + w_1 C(Δ_1)) + …
        return self._step(state)

    def server_reduced(self, state: ServerState, add_sum) -> np.ndarray:
        """The same step from the aggregate m = Σ_i w_i C(Δ_i) decoded from an Allreduce sum; when
        the aggregate is the sum itself times a scale (``add_sum.dense``, the uncompressed
        Allreduce), one fused pass reads the sum (:func:`~.kernels.step_from_sum`, same bits)."""
        dense = getattr(add_sum, "dense", None)
        if dense is not None and type(self)._step is Diana._step:
            total, scale = dense
            step_from_sum(state.x, state.h, state.v, total, scale, self.gamma, self.alpha, self.beta,
                          self.alpha != 0.0)
            if self.l1:
                prox_l1(state.x, self.gamma * self.l1)
            return state.x
        state.m[:] = 0.0
        add_sum(state.m)
        return self._step(state)

    def _step(self, state: ServerState) -> np.ndarray:
        # v = β v + (h + m);  x = prox(x − γ v);  h += α m  (one kernel pass, the prox after it)
        shifted_step(state.x, state.h, state.v, state.m, self.gamma, self.alpha, self.beta)
        if self.l1:
            prox_l1(state.x, self.gamma * self.l1)
        return state.x

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """Under reduce-scatter the owner keeps its segment's exact shift h_true = mean h_i and sends
        C₂(S + h_true − h_rep): (α, 1) — see the exchange and ``docs/methods.md``. DCGD: (0, 1)."""
        return self.alpha, 1.0

    def describe(self) -> dict:
        return {"gamma": self.gamma, "alpha": self.alpha, "beta": self.beta, "omega": self.omega,
                "independent_messages": self.independent, "step_rule": self.step_rule,
                "step_formula": f"{self.mult:g} * {STEP_RULES[self.step_rule][2]}" if self.step_rule in STEP_RULES else ""}


def expected_smoothness(problem, b: int) -> float:
    """A_i of b-row batches drawn without replacement from worker i's m rows (τ-nice sampling,
    Gower et al. 2019, Prop. 3.8): m(b − 1)/(b(m − 1))·L_i + (m − b)/(b(m − 1))·L_i^{max,1}."""
    m = problem.A.shape[0]
    L_i = problem.smoothness()
    if b >= m or m <= 1:
        return L_i
    return m * (b - 1) / (b * (m - 1)) * L_i + (m - b) / (b * (m - 1)) * problem.row_smoothness()


def unbiased_omega(name: str, compressors, d: int) -> float:
    """ω = max_i ω_i of the workers' compressors for an unbiased-only method (DIANA, DCGD, MARINA,
    ADIANA); a biased one is refused with :func:`biased_refusal`."""
    for c in compressors:
        if c.omega(d) is None:
            raise ConfigError(biased_refusal(name, c.spec))
    return float(max(c.omega(d) for c in compressors))


def composed_unbiased(name: str, compressors, d: int, n: int) -> tuple[float, float]:
    """(ω_seg, ω_c) under reduce-scatter: the segment-wise ω of the workers' compressors (both stages
    use it) and the composed ω_c = n·ω_seg + (1 + ω_seg)·ω_seg that replaces ω in the steps' ω/n
    (:mod:`hpcgc.compressors.segments`)."""
    from ..compressors.segments import composed_omega, segment_omega
    oms = [segment_omega(c, d, n) for c in compressors]
    if any(o is None for o in oms):
        raise ConfigError(biased_refusal(name, next(c.spec for c, o in zip(compressors, oms) if o is None)))
    om = float(max(oms))
    return om, composed_omega(om, om, n)


def independent_messages(compressors, n_workers: int) -> int:
    """The n in the ω/n of the theory steps. With shared randomness (shared-seed rand-k) the n
    messages are correlated, so their mean's variance is bounded by ω·mean‖Δ_i‖², not
    (ω/n)·mean‖Δ_i‖²: the steps then use n = 1."""
    return n_workers if not any(c.shared_randomness for c in compressors) else 1


def biased_refusal(name: str, spec: str) -> str:
    """The message of an unbiased-only method given a biased compressor: names the methods that take it."""
    from . import REGISTRY
    takers = sorted(k for k, (cls, _) in REGISTRY.items() if cls.takes_biased)
    return (f"{name} needs an unbiased compressor; {spec} is biased. Algorithms that take biased compressors: "
            f"{', '.join(takers)}")


class Dcgd(Diana):
    """DCGD = DIANA with α = 0: QSGD / TernGrad / DQGD depending on the compressor."""

    name = "dcgd"
    learns_shifts = False
