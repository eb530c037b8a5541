"""ADIANA+: ADIANA with smoothness-aware compression C_i⁺(v) = S_i Q_i(S_i^- v).

Safaryan, Hanzely, Richtárik, *Smoothness Matrices Beat Smoothness Constants*, NeurIPS 2021
(arXiv 2102.07245), which names ADIANA among the methods its compressors improve; `spec/smoothness.md`
§4.4: ADIANA (:mod:`.adiana`, Li et al. 2020) with the ωL-type terms replaced by L̃. Everything
about the smoothness matrices — L_i, S_i = L_i^{1/2}, the bound compressors (quant+, rand-τ+,
block-quant+, or any unbiased compressor whitened with L̃_i = ω_i λ_max(L_i)), the one-time upload of
S_i, the server's stacked S̃_i — is DIANA+'s (:class:`~hpcgc.algorithms.smoothness.DianaPlus`).
Both of ADIANA's messages are whitened and compressed, C_i⁺(∇f_i(x^k) − h_i) and C_i⁺(∇f_i(w^k) − h_i),
and the shift moves by α S̃_i Q_i(…) of the second, as the server decodes it.

Parameters (our reading of "replace ωL by L̃", documented choice): ADIANA's with
ω·L → L̃_max = max_i L̃_i, i.e.

    p = min{1, max{1, √(nL/(32 L̃)) − 1} / (2(1 + ω))},   η = min{1/(2L), n/(64·L̃·(2p(ω+1)+1)²)},

θ₁, θ₂, γ, β, α = 1/(1 + ω_max) as in ADIANA; L = L_max. With an unwhitened bound (L̃ = ωL) this is
ADIANA's choice exactly.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from . import smoothness as plus
from .adiana import (
    COLLECTIVES_WHY,
    down_extra,
    frame,
    local_gradients,
    new_server_state,
    plan_refusals,
    refuse_extras,
    server_update,
    theory_parameters,
    unframe,
    worker_w,
)
from .diana import independent_messages
from .smoothness import DianaPlus


@dataclass
class WorkerState(plus.WorkerState):
    vw: np.ndarray         # ∇f_i(w^k) − h_i   (delta holds ∇f_i(x^k) − h_i)
    gw: np.ndarray         # cached ∇f_i(w)
    wref: np.ndarray
    fresh: np.ndarray      # bool (1,)
    evals: np.ndarray
    w: np.ndarray          # this worker's copy of w^k (gather)
    k: np.ndarray          # int64 (1,): iterations computed


class AdianaPlus(DianaPlus):
    """ADIANA+ = ADIANA (Li et al. 2020) with DIANA+'s smoothness-aware compressors."""

    name = "adiana+"
    kernels = ()                       # its own step (server_update), not DIANA+'s kernel
    method = "diana"
    collectives = ("gather", "allgather")
    collectives_why = COLLECTIVES_WHY

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        refuse_extras(self.name, options)
        self.L_max = float(problem_info["L_max"])
        self.options = {"prob": options.get("probability", "theory"), "multiplier": self.multiplier,
                        "alpha": options.get("alpha", "theory")}
        theory_parameters(self.name, L=self.L_max, mu=self.mu, omega=1.0, n=n_workers, ltilde=1.0,
                          prob=self.options["prob"], alpha="theory")          # μ > 0 and p at plan of the run
        self.independent = independent_messages(compressors, n_workers)
        self.par = {}
        self.seed = int(options.get("seed", 0))
        self._ss = self._ws = None

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        return plan_refusals(cls.name, rc)

    def set_agreed(self, maxima):
        super().set_agreed(maxima)
        o = self.options
        self.par = theory_parameters(self.name, L=self.L_max, mu=self.mu, omega=self.omega, n=self.independent,
                                     prob=o["prob"], multiplier=o["multiplier"], alpha=o["alpha"],
                                     ltilde=self.ltilde_max)
        self.alpha, self.gamma = self.par["alpha"], self.par["eta"]

    def _alpha(self) -> float:
        return 1.0 / (self.omega + 1.0)       # a user's run.alpha is checked by theory_parameters

    def worker_init(self, i: int, problem=None) -> WorkerState:
        base = super().worker_init(i, problem)
        d = self.d
        self._ws = WorkerState(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                               vw=np.zeros(d), gw=np.zeros(d), wref=np.zeros(d), fresh=np.zeros(1, dtype=bool),
                               evals=np.zeros(1), w=np.zeros(d), k=np.zeros(1, dtype=np.int64))
        return self._ws

    def down_extra(self, ss):
        return down_extra(self, ss)

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        g = local_gradients(state, worker_w(self, state, x), x, problem)
        np.subtract(g, state.h, out=state.delta)
        np.subtract(state.gw, state.h, out=state.vw)

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        p1 = self.compress_whitened(state, state.delta, rng)
        p2 = self.compress_whitened(state, state.vw, rng, state.h, self.par["alpha"])
        return frame(p1, p2)

    def server_init(self, x0: np.ndarray):
        self._ss = new_server_state(x0)
        return self._ss

    def server_step(self, state, messages) -> np.ndarray:
        parts = [(i, *unframe(payload)) for i, payload in messages]
        state.m1[:], bits1 = self.aggregate([(i, p1) for i, p1, _ in parts])
        state.m2[:], bits2 = self.aggregate([(i, p2) for i, _, p2 in parts])
        self._bits = {i: (payload, bits1[i] + bits2[i]) for i, payload in messages}
        return server_update(self.par, self.seed, state)

    def model_bits(self, i: int, payload) -> float:
        got = self._bits.get(i)
        if got is not None and got[0] is payload:
            return got[1]
        p1, p2 = unframe(payload)
        return plus.decode(self.decoders[i], p1, self.d)[2] + plus.decode(self.decoders[i], p2, self.d)[2]

    def describe(self) -> dict:
        out = super().describe()
        out.update({k: float(v) for k, v in self.par.items()})
        out.update(L_max=self.L_max, independent_messages=self.independent,
                   step_rule="ADIANA Thm 3 with omega*L -> L~max: eta = step_multiplier * min(1/(2L), "
                             "n/(64 L~max (2p(omega+1)+1)^2))")
        return out
