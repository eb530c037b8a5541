"""DIANA and DCGD: compressed gradient differences with learned shifts.

Mishchenko, Gorbunov, Takáč, Richtárik, *Distributed Learning with Compressed Gradient
Differences*, arXiv 1901.09269 (2019); recursion as in `spec/diana.md` §B.5:

    worker i:  Δ_i = g_i − h_i,   m_i = C(Δ_i)  (the only message),   h_i ← h_i + α·m_i
    server:    m = Σ_i w_i m_i,   ĝ = h + m,   v = β·v + ĝ,   x ← prox_{γR}(x − γ·v),   h ← h + α·m

DCGD (distributed compressed gradient descent) is the same recursion with α = 0 and h = 0: with
QSGD it is QSGD (Alistarh et al. 2017), with ℓ∞ ternary quantization TernGrad (Wen et al. 2017),
with full local gradients DQGD (Khirirat et al. 2018) — one implementation (`spec/decisions.md`).

Interface: :class:`hpcgc.algorithms.base.Algorithm`. The worker updates its shift with the
*decoded own payload*, i.e. exactly what the server decodes, so h = Σ_i w_i h_i holds to rounding.
Worker i may have its own compressor (per-worker ratios); ω is then the largest of the ω_i.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..problems import prox_l1
from .base import Algorithm


@dataclass
class WorkerState:
    i: int                 # worker index
    h: np.ndarray          # shift h_i (float64)
    delta: np.ndarray      # g − h_i, the vector to compress


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    h: np.ndarray          # server shift h = Σ w_i h_i
    v: np.ndarray          # heavy-ball buffer
    m: np.ndarray          # scratch: aggregated message


def theory_step(L_max: float, omega: float, n: int) -> float:
    """γ = 1/(L_max·(1 + 4ω/n)): DIANA, strongly convex case (`spec/diana.md` B.6, flpytorch)."""
    return 1.0 / (L_max * (1.0 + 4.0 * omega / n))


class Diana(Algorithm):
    """DIANA (α = 1/(1+ω) by default). ``Dcgd`` is the α = 0 special case."""

    name = "diana"
    learns_shifts = True
    needs_unbiased = True
    downlink_ok = True
    """Takes a compressed downlink (``run.downlink``, EF21-P + DIANA / + DCGD, Gruntkowska et al.
    2023, Algs. 2–3): the workers evaluate at the broadcast w, the server step is unchanged."""
    collectives = ("gather", "allreduce", "allgather")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        omegas = [c.omega(d) for c in compressors]
        if any(w is None for w in omegas):
            bad = next(c for c in compressors if c.omega(d) is None)
            raise ConfigError(biased_refusal(self.name, bad.spec))
        mult = options.get("step_multiplier", 1.0)
        if not (mult > 0 and np.isfinite(mult)):
            raise ConfigError(f"run.step_multiplier must be > 0, got {mult!r}")
        beta = options.get("momentum", 0.0)
        if not (0.0 <= beta < 1.0):
            raise ConfigError(f"run.momentum must be in [0, 1), got {beta!r}")
        self.omega = float(max(omegas))
        # shared randomness (shared-seed rand-k): the n messages are correlated, so their mean's
        # variance is bounded by ω·mean‖Δ_i‖², not (ω/n)·mean‖Δ_i‖² — the step uses n = 1
        self.independent = n_workers if not any(c.shared_randomness for c in compressors) else 1
        self.gamma = mult * theory_step(problem_info["L_max"], self.omega, self.independent)
        self.alpha = self._alpha(options.get("alpha"))
        self.beta = float(beta)
        self.l1 = float(options.get("l1", 0.0))
        self.batch = int(options.get("batch", 0))

    def _alpha(self, alpha) -> float:
        if not self.learns_shifts:
            if alpha not in (None, "theory", 0, 0.0):
                raise ConfigError(f"{self.name} has no shifts (α = 0); remove run.alpha or use 'diana'")
            return 0.0
        if alpha is None or alpha == "theory":
            return 1.0 / (1.0 + self.omega)
        a = float(alpha)
        if not (0.0 < a <= 1.0):
            raise ConfigError(f"run.alpha must be in (0, 1] (theory: 1/(1+ω) = {1 / (1 + self.omega):.4g}), got {alpha!r}")
        return a

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        return WorkerState(i=i, h=np.zeros(self.d), delta=np.empty(self.d))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """g_i = ∇f_i(x) (or a mini-batch estimate); keeps Δ_i = g_i − h_i."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        np.subtract(problem.grad(x, rows), state.h, out=state.delta)

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
        state.m[:] = 0.0
        for i, payload in messages:
            self.compressors[i].decompress_add(payload, self.d, state.m, self.weights[i])
        return self._step(state)

    def server_reduced(self, state: ServerState, add_sum) -> np.ndarray:
        """The same step from the aggregate m = Σ_i w_i C(Δ_i) decoded from an Allreduce sum."""
        state.m[:] = 0.0
        add_sum(state.m)
        return self._step(state)

    def _step(self, state: ServerState) -> np.ndarray:
        # v = β v + (h + m);  x = prox(x − γ v);  h += α m
        if self.beta:
            state.v *= self.beta
            state.v += state.h
            state.v += state.m
            step = state.v
        else:
            np.add(state.h, state.m, out=state.v)
            step = state.v
        state.x -= self.gamma * step
        if self.l1:
            prox_l1(state.x, self.gamma * self.l1)
        if self.alpha:
            state.h += self.alpha * state.m
        return state.x

    def describe(self) -> dict:
        return {"gamma": self.gamma, "alpha": self.alpha, "beta": self.beta, "omega": self.omega,
                "independent_messages": self.independent}


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
