"""EF21-SGDM: EF21 with Polyak momentum on the workers' stochastic gradients.

Fatkhullin, Tyurin, Richtárik, *Momentum Provably Improves Error Feedback!*, NeurIPS 2023
(arXiv 2305.15155), Algorithm 1 (EF21-SGDM):

    worker i:  v_i ← (1 − η)·v_i + η·∇f_i(x; ξ_i)        (momentum on the stochastic gradient)
               c_i = C(v_i − g_i)  (the only message),   g_i ← g_i + c_i
    server:    g ← g + Σ_i w_i c_i,   x ← x − γ·g

η = 1 − ``run.momentum`` (``run.momentum`` keeps its meaning: 0 = no momentum), so
``run.momentum = 0`` (η = 1, v_i = the fresh gradient) is EF21 exactly — the same arithmetic, the
same random draws, bit for bit (``tests/mpi/test_ef21sgdm_dasha_mpi.py``). ``run.batch`` sets the
mini-batch of ξ_i (0 = full local gradients: then the momentum only averages exact gradients).

Everything else is :class:`~hpcgc.algorithms.ef21.EF21`'s: the first message g_i⁰ = v_i⁰ =
∇f_i(x⁰; ξ) dense float64, biased compressors with δ used as they are and unbiased ones as
C/(1 + ω), the collectives (``gather``, ``allgather``, ``reduce-scatter`` with EF21's owner-side
second stage; not ``allreduce``: two codecs), EF21-P downlinks, and the step rules.

Step (``run.step_rule``): ``theory`` = EF21's Theorem 1 step γ = 1/(L + L̃·√(β/θ)) — the step
EF21-SGDM reduces to at η = 1 with exact gradients, and the one under which momentum alone is
compared with EF21 at equal γ. EF21-SGDM's own stochastic theorem (γ bounded by a δ/L̃ and an η/L
term) is not offered under a name: its constants could not be read from the stored sources
(UNCONFIRMED, ``docs/methods.md``); with ``run.step_multiplier`` or ``learning-rate`` a user sets
any γ. Refused: ``run.momentum`` outside [0, 1) (plan time, every algorithm), ``run.alpha``,
``problem.l1``, compressors without a contraction δ (plain ``sign``, ``threshold``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .ef import plan_refusal
from .ef21 import EF21
from .ef21 import WorkerState as EF21WorkerState


@dataclass
class WorkerState(EF21WorkerState):
    v: np.ndarray = None    # momentum v_i (float64); set by worker_init


class EF21SGDM(EF21):
    """EF21-SGDM (Fatkhullin, Tyurin, Richtárik 2023): EF21 on v_i, the momentum of ∇f_i(x; ξ)."""

    name = "ef21-sgdm"

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        beta = options.get("momentum", 0.0)
        if not (isinstance(beta, (int, float)) and 0.0 <= beta < 1.0):
            raise ConfigError(f"run.momentum must be in [0, 1) for ef21-sgdm (η = 1 − momentum), got {beta!r}")
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.beta = float(beta)
        self.eta = 1.0 - self.beta

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        """EF21's refusals but for momentum, which is this method's η = 1 − run.momentum (its range,
        [0, 1), is checked at plan time for every algorithm)."""
        if compressor is None:
            return []
        rc = {**rc, "run": {**rc["run"], "momentum": 0.0}}
        msg = plan_refusal(cls.name, rc, compressor, needs_delta=True)
        return [msg] if msg else []

    def worker_init(self, i: int, problem=None) -> WorkerState:
        base = super().worker_init(i, problem)
        return WorkerState(i=base.i, g=base.g, delta=base.delta, fresh=base.fresh, L_i=base.L_i, v=np.zeros(self.d))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """v_i ← (1 − η)v_i + η∇f_i(x; ξ) (v_i⁰ = the first gradient; η = 1: v_i = the gradient);
        Δ_i = v_i − g_i."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        grad = problem.grad(x, rows)
        v = state.v
        if self.eta == 1.0 or state.fresh[0]:
            v[:] = grad
        else:
            v *= self.beta
            v += self.eta * grad
        np.subtract(v, state.g, out=state.delta)

    def describe(self) -> dict:
        return {**super().describe(), "beta": self.beta, "momentum_eta": self.eta}
