"""EF21: error feedback by compressed gradient differences.

Richtárik, Sokolov, Fatkhullin, *EF21: A New, Simpler, Theoretically Better, and Practically
Faster Error Feedback*, NeurIPS 2021 (arXiv 2106.05203), Algorithm 2:

    worker i:  c_i = C(∇f_i(x) − g_i)  (the only message),   g_i ← g_i + c_i
    server:    g ← g + Σ_i w_i c_i     (so g = Σ_i w_i g_i, from the same decoded messages),
               x ← x − γ·g

The worker adds its *decoded own message*, exactly what the server decodes, so g = Σ_i w_i g_i
holds to rounding. With ``run.batch`` the gradient is a mini-batch estimate (EF21-SGD; the step
below is then not covered by Theorem 1).

First iteration (g_i⁰): the paper's choice g_i⁰ = ∇f_i(x⁰), which makes the G⁰ term of Theorem 1
vanish. hpcgc sends it: in the first iteration every worker sends ∇f_i(x⁰) dense, as float64
(``identity:fp64=true``, 64·d model bits), and both ends set g_i, g from it; the compressor is used
from the second iteration on. Those bits are counted in the first iteration's uplink (model and
wire), like every other message. (flpytorch's EF21 computes the same first gradient but does not
count its communication.)

Compressors (:func:`hpcgc.algorithms.ef.contraction`): a biased C with contraction δ
(‖C(x) − x‖² ≤ (1 − δ)‖x‖², ``C.delta(d)``) is used as it is; an unbiased C with variance ω as
C/(1 + ω), δ = 1/(1 + ω) (both ends scale the decoded message; E‖C(x)/(1 + ω) − x‖² =
(ω/(1 + ω))‖x‖²; flpytorch's EF21 does the same). A compressor without δ (plain ``sign``) is refused at plan time.

Step (Theorem 1, nonconvex; the same formula is flpytorch's ``EF21.theoreticalStepSize``, "Th.1,
p.40"):

    γ = step_multiplier / (L + L̃·√(β/θ)),   θ = 1 − √(1 − δ),   β = (1 − δ)/(1 − √(1 − δ)),
    L̃ = √(mean_i L_i²)

with L the smoothness constant of f and L_i that of f_i; δ is the smallest over the workers'
compressors. Theorem 2 (under the PL condition, e.g. strong convexity) allows
min{1/(L + L̃·√(2β/θ)), θ/(2μ)}, smaller; hpcgc uses Theorem 1's step, which the paper's own
experiments use as the base step. With δ = 1 (identity) γ = 1/L: gradient descent. On problems
without a smoothness constant (or with ``run.step_rule = 'learning-rate'``)
γ = ``run.step_multiplier`` × ``run.learning_rate`` (required there).

Collectives: ``gather`` and ``allgather``. Not ``allreduce``: the first iteration's dense float64
message and the later compressed ones are two different codecs, and an Allreduce carries one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import compressors as C
from ..errors import ConfigError
from .base import LEARNING_RATE
from .ef import ErrorFeedback, composed_contraction, contraction, step_options

HEAD = 4
"""Header bytes that name a payload's codec: format id, flags, 16-bit spec fingerprint."""


@dataclass
class WorkerState:
    i: int                 # worker index
    g: np.ndarray          # g_i (float64)
    delta: np.ndarray      # ∇f_i(x) − g_i, the vector to compress
    fresh: np.ndarray      # [1.0] until the dense first message is sent, then [0.0]
    L_i: float = 0.0       # smoothness constant of f_i (recomputed, not checkpointed)


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    g: np.ndarray          # g = Σ_i w_i g_i
    fresh: np.ndarray      # [1.0] until the first (dense) messages arrive


def theory_step(L: float, L_tilde: float, delta: float) -> tuple[float, float, float]:
    """(γ, θ, β) of EF21 Theorem 1: γ = 1/(L + L̃·√(β/θ)), θ = 1 − √(1 − δ), β = (1 − δ)/(1 − √(1 − δ))."""
    root = math.sqrt(1.0 - delta)
    theta = 1.0 - root
    beta = (1.0 - delta) / theta
    return 1.0 / (L + L_tilde * math.sqrt(beta / theta)), theta, beta


class EF21(ErrorFeedback):
    """EF21 (Richtárik, Sokolov, Fatkhullin 2021)."""

    name = "ef21"
    needs_delta = True
    downlink_ok = True       # EF21-P (run.downlink): workers evaluate at the broadcast w, the server steps x
    collectives = ("gather", "allgather", "reduce-scatter")
    collectives_why = ("its first message is dense float64 and the later ones compressed (two codecs), "
                       "and an Allreduce carries one")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.refuse_options(options, compressors[0])
        self.mult, self.lr, self.step_rule = step_options(self, options, problem_info)
        pairs = [contraction(c, d) for c in compressors]
        if options.get("collective") == "reduce-scatter":
            pairs = [composed_contraction(c, d, n_workers) for c in compressors]
        if any(dl is None or not dl > 0 for dl, _ in pairs):
            bad = next(c for c, (dl, _) in zip(compressors, pairs) if dl is None or not dl > 0)
            raise ConfigError(f"ef21 needs a compressor with a contraction δ > 0; {bad.spec} has none")
        self.scales = np.array([s for _, s in pairs])
        self.delta = float(min(dl for dl, _ in pairs))
        self.L = problem_info.get("L") if self.step_rule != LEARNING_RATE else None
        self.batch = int(options.get("batch", 0))
        self.dense = C.make("identity", fp64=True)
        self.dense_head = self.dense.compress(np.zeros(1), np.random.default_rng(0))[:HEAD].copy()
        self.L_tilde = self.theta = self.beta_ef21 = math.nan
        if self.L:
            self.gamma = None                # set by set_agreed, once every worker's L_i is known
            self.step_source = "theorem1"
        else:
            self.gamma = self.mult * self.lr
            self.step_source = "learning_rate"

    # -- agreement: every rank learns every L_i (max-reduce of a vector with L_i at position i) ----
    def agree_values(self, state):
        if not self.L:
            return None
        out = np.full(self.n, -np.inf)
        out[state.i] = state.L_i
        return out

    def set_agreed(self, maxima):
        """From all L_i: L̃ = √(mean L_i²) and the Theorem 1 step."""
        L_i = np.asarray(maxima, dtype=np.float64)
        self.L_tilde = float(np.sqrt(np.mean(L_i ** 2)))
        gamma, self.theta, self.beta_ef21 = theory_step(self.L, self.L_tilde, self.delta)
        self.gamma = self.mult * gamma

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        L_i = float(problem.smoothness()) if (self.L and problem is not None) else 0.0
        return WorkerState(i=i, g=np.zeros(self.d), delta=np.empty(self.d), fresh=np.ones(1), L_i=L_i)

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """Δ_i = ∇f_i(x) − g_i (or a mini-batch estimate of ∇f_i(x))."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        np.subtract(problem.grad(x, rows), state.g, out=state.delta)

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        """c_i = C(Δ_i) (the first time: Δ_i = ∇f_i(x⁰) dense); g_i ← g_i + s_i·c_i, decoded."""
        codec, s = self._codec(state.i, state.fresh)
        payload = codec.compress(state.delta, rng)
        codec.decompress_add(payload, self.d, state.g, s)
        state.fresh[0] = 0.0
        return payload

    def _codec(self, i: int, fresh) -> tuple:
        return (self.dense, 1.0) if fresh[0] else (self.compressors[i], float(self.scales[i]))

    # -- server side -----------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), g=np.zeros(self.d), fresh=np.ones(1))

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        """g ← g + Σ_i w_i s_i c_i;  x ← x − γ g. ``messages``: (worker index, payload bytes)."""
        if state.fresh[0]:
            for i, payload in messages:
                self.dense.decompress_add(payload, self.d, state.g, self.weights[i])
        else:
            self.add_messages(state.g, messages, self.scaled_weights)
        state.fresh[0] = 0.0
        state.x -= self.gamma * state.g
        return state.x

    # -- under reduce-scatter: the first message dense, then g_i += s·C(Δ_i); the owner sends the
    #    compressed difference of the exact aggregate g and the replicated one (second_stage) -------
    def rs_message(self, state: WorkerState) -> tuple:
        return state.delta, bool(state.fresh[0])

    def rs_sent(self, state: WorkerState, own_add, dense: bool) -> None:
        own_add(state.g, 1.0 if dense else float(self.scales[state.i]))
        state.fresh[0] = 0.0

    def rs_reduced(self, state: ServerState, add_sum, dense: bool) -> np.ndarray:
        """g ← g + s·m (m: the decoded second stage, in units of the stage-1 messages); x ← x − γ g."""
        if dense:
            add_sum(state.g)
        else:
            m = self.__dict__.setdefault("_rs_m", np.zeros(self.d))
            m[:] = 0.0
            add_sum(m)
            m *= float(self.scales[0])
            state.g += m
        state.fresh[0] = 0.0
        state.x -= self.gamma * state.g
        return state.x

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """EF21 on the aggregate (α₂ = 1): the owner keeps the exact Σ w_i g_i of its segment."""
        return 1.0, float(self.scales[0])

    def model_bits(self, i: int, payload) -> float:
        """The dense first message: 64·d; afterwards the compressor's formula."""
        if payload.size >= HEAD and np.array_equal(payload[:HEAD], self.dense_head):
            return self.dense.model_bits(payload, self.d)
        return self.compressors[i].model_bits(payload, self.d)

    def describe(self) -> dict:
        return {"gamma": self.gamma, "alpha": 0.0, "beta": 0.0, "step_source": self.step_source,
                "step_rule": self.step_rule,
                "contraction_delta": self.delta, "compressor_scale": float(self.scales.min()),
                "ef21_theta": self.theta, "ef21_beta": self.beta_ef21, "L_tilde": self.L_tilde,
                "first_message": "dense float64 gradient (identity:fp64=true)"}
