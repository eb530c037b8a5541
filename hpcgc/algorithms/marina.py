"""MARINA: compressed gradient differences with rare dense rounds.

Gorbunov, Burlachenko, Li, Richtárik, *MARINA: Faster Non-Convex Distributed Learning with
Compression*, ICML 2021 (arXiv 2102.07845), Algorithm 1. With probability p (one coin for all ranks,
:func:`~hpcgc.algorithms.base.shared_coin`) every worker sends its full gradient, otherwise a
compressed gradient *difference*:

    iteration k (x^k known to every worker; iteration 0 is always a dense round: g^0 = ∇f(x^0)):
    worker i:  c_k = 1:  send ∇f_i(x^k)                          dense, the identity compressor's format
               c_k = 0:  send C(∇f_i(x^k) − ∇f_i(x^{k−1}))       compressed difference
    server:    g^k = mean_i ∇f_i(x^k)   (c_k = 1)   or   g^k = g^{k−1} + mean_i C(…)   (c_k = 0)
               x^{k+1} = x^k − γ·g^k

Both kinds of round are counted in both ledgers: a dense round as ``identity`` (32·d model bits,
the float32 payload on the wire), a compressed one as the run's compressor.

Parameters: p = ``run.probability``, default 1/(1+ω) (= ζ_C/d, the paper's choice, for rand-k, whose
expected density ζ_C = k = d/(1+ω)); step (Thm 2.1, the nonconvex theorem)
γ = 1/(L·(1 + √((1 − p)·ω/(p·n)))) times ``run.step_multiplier``, with L = L_max (the largest local
smoothness bounds both the paper's L of f and its mean-square L̃ of the f_i), also used on the
strongly convex problems. With p = 1 MARINA is gradient descent with γ = 1/L_max, i.e. ``dcgd`` with
``identity``, iterate for iterate.

Collectives: ``gather`` and ``allgather``. Not ``allreduce``: dense and compressed rounds have
different codecs, while an Allreduce run sums one codec fixed at set-up.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import compressors as catalogue
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


@dataclass
class WorkerState:
    i: int
    g_prev: np.ndarray     # ∇f_i(x^{k−1})
    msg: np.ndarray        # the vector sent this iteration (full gradient or difference)
    dense: np.ndarray      # bool (1,): this iteration is a dense round
    k: np.ndarray          # int64 (1,): iteration counter (the coin's index)
    evals: np.ndarray      # single-sample gradient evaluations so far


@dataclass
class ServerState:
    x: np.ndarray
    g: np.ndarray          # the server's gradient estimate g^k
    m: np.ndarray          # scratch: aggregated message
    k: np.ndarray          # int64 (1,)
    dense: np.ndarray      # bool (1,): the last step was a dense round (bit accounting)


NO_BATCH = ("marina uses full local gradients (VR-MARINA's mini-batches are not implemented); set run.batch = 0, "
            "or use 'vr-diana' for mini-batches")


def theory_step(L: float, omega: float, n: int, p: float) -> float:
    """MARINA Thm 2.1: γ = 1/(L·(1 + √((1 − p)·ω/(p·n))))."""
    return 1.0 / (L * (1.0 + math.sqrt((1.0 - p) * omega / (p * n))))


class Marina(Algorithm):
    name = "marina"
    needs_unbiased = True
    nonconvex_ok = True
    step_rules = {"marina-thm2.1": SMOOTH, LEARNING_RATE: NO_CONSTANT}
    auto_rules = {STRONGLY_CONVEX: "marina-thm2.1", SMOOTH: "marina-thm2.1", NO_CONSTANT: LEARNING_RATE}
    collectives = ("gather", "allgather", "reduce-scatter")
    collectives_why = ("its dense rounds and its compressed rounds use different codecs, and an Allreduce sums "
                       "one codec fixed at set-up; use 'gather' or 'allgather'")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        omega = unbiased_omega(self.name, compressors, d)
        if options.get("collective") == "reduce-scatter":
            omega = composed_unbiased(self.name, compressors, d, n_workers)[1]     # ω_c of both stages
        if int(options.get("batch", 0)):
            raise ConfigError(NO_BATCH)
        if float(options.get("l1", 0.0)):
            raise ConfigError("marina has no prox step; set problem.l1 = 0")
        if float(options.get("momentum", 0.0)):
            raise ConfigError("marina has no momentum; set run.momentum = 0")
        if options.get("alpha") not in (None, "theory"):
            raise ConfigError("marina has no shifts (α); remove run.alpha")
        self.omega = omega
        self.independent = independent_messages(compressors, n_workers)
        self.p = coin_probability(self.name, options.get("probability", "theory"), 1.0 / (1.0 + self.omega))
        kind = problem_info.get("kind", "logreg")
        refusal = self.check_problem(kind, {**options, "algorithm": self.name})
        if refusal is not None:
            raise ConfigError(refusal)
        self.step_rule = self.resolve_step_rule(kind, options.get("step_rule", "auto"))
        mult = float(options.get("step_multiplier", 1.0))
        if self.step_rule == LEARNING_RATE:
            self.gamma = mult * learning_rate(options, "marina with step rule 'learning-rate'")
        else:
            self.gamma = mult * theory_step(problem_info["L_max"], self.omega, self.independent, self.p)
        self.seed = int(options.get("seed", 0))
        self.dense = catalogue.make("identity").for_run(d=d, n_workers=n_workers)
        self._ss = None                     # the server state (bit accounting reads its round kind)

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        return [NO_BATCH] if rc["run"]["batch"] else []

    def _dense_round(self, k: int) -> bool:
        return k == 0 or shared_coin(self.seed, k, self.p)

    # -- worker ----------------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        d = self.d
        return WorkerState(i=i, g_prev=np.zeros(d), msg=np.zeros(d), dense=np.ones(1, dtype=bool),
                           k=np.zeros(1, dtype=np.int64), evals=np.zeros(1))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        g = problem.grad(x)
        state.evals += problem.A.shape[0]
        state.dense[0] = self._dense_round(int(state.k[0]))
        if state.dense[0]:
            state.msg[:] = g
        else:
            np.subtract(g, state.g_prev, out=state.msg)
        state.g_prev[:] = g
        state.k += 1

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        c = self.dense if state.dense[0] else self.compressors[state.i]
        return c.compress(state.msg, rng)

    # -- under reduce-scatter (dense rounds travel as float64 segments, both stages exact) ----------
    def rs_message(self, state: WorkerState) -> tuple:
        return state.msg, bool(state.dense[0])

    def rs_sent(self, state: WorkerState, own_add, dense: bool) -> None:
        return None

    def rs_reduced(self, state: ServerState, add_sum, dense: bool) -> np.ndarray:
        state.m[:] = 0.0
        add_sum(state.m)
        return self._step(state, dense)

    # -- server ----------------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        d = self.d
        self._ss = ServerState(x=np.array(x0, dtype=np.float64), g=np.zeros(d), m=np.zeros(d),
                               k=np.zeros(1, dtype=np.int64), dense=np.ones(1, dtype=bool))
        return self._ss

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        dense = self._dense_round(int(state.k[0]))
        state.m[:] = 0.0
        if dense:
            for i, payload in messages:
                self.dense.decompress_add(payload, self.d, state.m, self.weights[i])
        else:
            self.add_messages(state.m, messages)
        return self._step(state, dense)

    def _step(self, state: ServerState, dense: bool) -> np.ndarray:
        """g = m (dense round) or g += m (the aggregated compressed differences), then x −= γg: the
        server step of every collective, from the aggregate already summed into ``state.m``."""
        if dense:
            state.g[:] = state.m
        else:
            state.g += state.m
        state.x -= self.gamma * state.g
        state.k += 1
        state.dense[0] = dense
        return state.x

    def model_bits(self, i: int, payload) -> float:
        """This iteration's message (accounted right after the step): identity's bits in a dense round."""
        dense = self._ss is None or bool(self._ss.dense[0])
        return (self.dense if dense else self.compressors[i]).model_bits(payload, self.d)

    def describe(self) -> dict:
        return {"gamma": self.gamma, "omega": self.omega, "probability": self.p,
                "independent_messages": self.independent,
                "step_rule": self.step_rule,
                "step_formula": ("step_multiplier * run.learning_rate" if self.step_rule == LEARNING_RATE else
                                 "step_multiplier / (L_max (1 + sqrt((1-p) omega / (p n))))  (MARINA Thm 2.1)")}
