"""ADIANA: accelerated DIANA (Nesterov-type acceleration of compressed gradient descent).

Li, Kovalev, Qian, Richtárik, *Acceleration for Compressed Gradient Descent in Distributed and
Federated Optimization*, ICML 2020 (arXiv 2002.11364), Algorithm 2 ("distributed ACGD", ADIANA).
x⁰ = y⁰ = z⁰ = w⁰, h_i⁰ = h⁰ = 0; per iteration k:

    x^k      = θ₁ z^k + θ₂ w^k + (1 − θ₁ − θ₂) y^k                 (the iterate every worker reads)
    worker i:  sends C(∇f_i(x^k) − h_i) and C(∇f_i(w^k) − h_i)      (two independent compressions)
               h_i ← h_i + α·C(∇f_i(w^k) − h_i)
    server:    g^k = h + mean_i C(∇f_i(x^k) − h_i);   h ← h + α·mean_i C(∇f_i(w^k) − h_i)
               y^{k+1} = x^k − η g^k
               z^{k+1} = β z^k + (1 − β) x^k + (γ/η)(y^{k+1} − x^k)
               w^{k+1} = y^k with probability p (one coin for all ranks), else w^k

Parameters, strongly convex theorem (Thm 3 of 2002.11364; L = L_max, every f_i is L-smooth,
μ = problem.l2, ω = variance parameter, n independent messages), term by term those of the public
implementation by the authors' group, ``Rustem-Islamov/FedNL-Public``, ``methods.py``, function
``adiana`` (α = 1/(1+ω); θ₂ = 1/2; p = min(1, max(α/2, (α/2)(√(n/(32ω)) − 1))), which is the p below;
η = min(1/(2L), n/(64ωL(2p(ω+1)+1)²)); θ₁ = min(1/4, √(ηλ/p)); γ = η/(2(θ₁ + ηλ)); β = 1 − γλ;
w ← the old y with probability p; with ω = 0: p = 1, η = 1/(2L), as here):

    α = 1/(1 + ω),   θ₂ = 1/2,
    p = min{1, max{1, √(n/(32ω)) − 1} / (2(1 + ω))},
    η = min{1/(2L), n / (64·ω·(2p(ω + 1) + 1)²·L)},
    θ₁ = min{1/4, √(ημ/p)},   γ = η / (2(θ₁ + ημ)),   β = 1 − γμ,

giving Õ(ω + √(L/μ) + √((ω/n + √(ω/n))·ωL/μ)) iterations. ``run.probability`` replaces p (η then
follows from it), ``run.step_multiplier`` scales η (≤ 1: the theorem's two bounds on η must hold),
``run.alpha`` replaces α (≤ 1/(1+ω)). A choice that breaks one of these inequalities is refused
at set-up, naming it. ADIANA+ (:mod:`.adiana_plus`) uses the same function with L̃ in place of ωL.

Gradient evaluations: ∇f_i(x^k) every iteration, ∇f_i(w^k) only when w moves (cached).

Collectives: ``gather`` and ``allgather``. The workers need w^k as well as x^k. Under ``allgather``
every rank holds the server state (x, y, z, w, h) and its worker reads w^k from it. Under ``gather``
(the parameter server) each worker keeps its own copy of w (w⁰ = x⁰) and rank 0 broadcasts w^{k+1}
(d float64, one more Bcast, :meth:`Adiana.down_extra`) at the iterations where it moves — the coin is
shared (:func:`~.base.shared_coin` of the run seed and k), so every rank knows when without a message;
those bytes are counted in the downlink ledger (≈ p·64d bits per iteration on average). ``allreduce``
would need two summed messages per iteration (not implemented).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, PayloadError
from .base import Algorithm, coin_probability, shared_coin
from .diana import independent_messages, unbiased_omega

COLLECTIVES_WHY = ("it sends two compressed messages per iteration (at x^k and at w^k), which do not add up in "
                   "one Allreduce; use run.collective = 'gather' (w broadcast when it moves) or 'allgather'")


@dataclass
class WorkerState:
    i: int
    h: np.ndarray          # shift h_i
    vx: np.ndarray         # ∇f_i(x^k) − h_i
    vw: np.ndarray         # ∇f_i(w^k) − h_i
    gw: np.ndarray         # ∇f_i(w) for w = wref (cached)
    wref: np.ndarray       # the w the cache belongs to
    fresh: np.ndarray      # bool (1,): the cache holds a gradient
    evals: np.ndarray      # single-sample gradient evaluations so far
    w: np.ndarray          # this worker's copy of w^k (gather, on ranks without the server state)
    k: np.ndarray          # int64 (1,): iterations computed (the shared coin's index)


@dataclass
class ServerState:
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    w: np.ndarray
    h: np.ndarray
    m1: np.ndarray         # scratch: mean of the x-messages
    m2: np.ndarray         # scratch: mean of the w-messages
    k: np.ndarray          # int64 (1,): the coin's index


def theory_parameters(name: str, *, L: float, mu: float, omega: float, n: int, prob="theory",
                      multiplier: float = 1.0, alpha="theory", ltilde: float | None = None) -> dict:
    """ADIANA's parameters (module doc); ``ltilde`` replaces ω·L (ADIANA+). Raises ConfigError
    naming the inequality a user's choice breaks."""
    if not (mu > 0):
        raise ConfigError(f"{name} implements ADIANA's strongly convex theorem: problem.l2 (μ) must be > 0, "
                          f"got {mu!r}")
    wl = omega * L if ltilde is None else float(ltilde)
    if wl > 0:
        p_theory = min(1.0, max(1.0, math.sqrt(n * L / (32.0 * wl)) - 1.0) / (2.0 * (1.0 + omega)))
    else:
        p_theory = 1.0
    p = coin_probability(name, prob, p_theory)
    a_max = 1.0 / (1.0 + omega)
    if alpha is None or alpha == "theory":
        a = a_max
    else:
        a = float(alpha)
        if not (0.0 < a <= a_max * (1 + 1e-12)):
            raise ConfigError(f"{name}: the theorem needs 0 < α ≤ 1/(1+ω) = {a_max:.4g} (ω = {omega:.4g}); "
                              f"run.alpha = {alpha!r} breaks it")
    bound1 = 1.0 / (2.0 * L)
    what = "ωL" if ltilde is None else "L̃"
    bound2 = n / (64.0 * wl * (2.0 * p * (omega + 1.0) + 1.0) ** 2) if wl > 0 else math.inf
    eta = multiplier * min(bound1, bound2)
    if eta > bound1 * (1 + 1e-12):
        raise ConfigError(f"{name}: η = {eta:.4g} breaks η ≤ 1/(2L) = {bound1:.4g} (L = {L:.4g}); "
                          f"run.step_multiplier = {multiplier:g} must be ≤ 1")
    if eta > bound2 * (1 + 1e-12):
        raise ConfigError(f"{name}: η = {eta:.4g} breaks η ≤ n/(64·{what}·(2p(ω+1)+1)²) = {bound2:.4g} "
                          f"(n = {n}, ω = {omega:.4g}, p = {p:.4g}); run.step_multiplier = {multiplier:g} must be ≤ 1")
    theta1 = min(0.25, math.sqrt(eta * mu / p))
    theta2 = 0.5
    gamma = eta / (2.0 * (theta1 + eta * mu))
    beta = 1.0 - gamma * mu
    return {"eta": eta, "alpha": a, "beta": beta, "gamma": gamma, "theta1": theta1, "theta2": theta2,
            "probability": p, "eta_bound_L": bound1, "eta_bound_omega": bound2}


def server_update(par: dict, seed: int, ss: ServerState) -> np.ndarray:
    """One ADIANA server step from ss.m1 = mean C(∇f_i(x) − h_i), ss.m2 = mean C(∇f_i(w) − h_i)."""
    eta, gamma, beta = par["eta"], par["gamma"], par["beta"]
    t1, t2 = par["theta1"], par["theta2"]
    g = ss.h + ss.m1                                       # g^k
    ss.h += par["alpha"] * ss.m2
    y_new = ss.x - eta * g                                 # y^{k+1}
    ss.z *= beta
    ss.z += (1.0 - beta) * ss.x
    ss.z += (gamma / eta) * (y_new - ss.x)                 # z^{k+1}
    if shared_coin(seed, int(ss.k[0]), par["probability"]):
        ss.w[:] = ss.y                                     # w^{k+1} = y^k
    ss.y[:] = y_new
    np.multiply(t1, ss.z, out=ss.x)
    ss.x += t2 * ss.w
    ss.x += (1.0 - t1 - t2) * ss.y                         # x^{k+1}
    ss.k += 1
    return ss.x


def new_server_state(x0: np.ndarray) -> ServerState:
    x = np.array(x0, dtype=np.float64)
    d = x.shape[0]
    return ServerState(x=x, y=x.copy(), z=x.copy(), w=x.copy(), h=np.zeros(d), m1=np.zeros(d), m2=np.zeros(d),
                       k=np.zeros(1, dtype=np.int64))


def local_gradients(state, w: np.ndarray, x: np.ndarray, problem) -> np.ndarray:
    """∇f_i(x) (returned) and the cached ∇f_i(w), recomputed when w moved; counts evaluations."""
    m = problem.A.shape[0]
    if not state.fresh[0] or not np.array_equal(state.wref, w):
        state.gw[:] = problem.grad(w)
        state.wref[:] = w
        state.fresh[0] = True
        state.evals += m
    state.evals += m
    return problem.grad(x)


def worker_w(alg, state, x: np.ndarray) -> np.ndarray:
    """w^k as a worker reads it (counts the iteration): the server state's where this rank holds it
    (allgather; rank 0 under gather), else its own copy, w⁰ = x⁰, moved by :func:`down_extra`."""
    state.k[0] += 1
    if alg._ss is not None:
        return alg._ss.w
    if state.k[0] == 1:
        state.w[:] = x
    return state.w


def down_extra(alg, ss):
    """Under gather: w^{k+1} (rank 0: the server's, a worker: its copy to receive into) when the shared
    coin of iteration k moved it, else None — the same decision on every rank."""
    if ss is not None:
        k, buf = int(ss.k[0]) - 1, ss.w
    elif alg._ws is not None:
        k, buf = int(alg._ws.k[0]) - 1, alg._ws.w
    else:
        return None
    return buf if shared_coin(alg.seed, k, alg.par["probability"]) else None


def frame(p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    """Two payloads as one message: 4-byte little-endian length of the first, then both."""
    return np.concatenate([np.frombuffer(np.uint32(p1.size).tobytes(), dtype=np.uint8), p1, p2])


def unframe(payload) -> tuple[np.ndarray, np.ndarray]:
    payload = np.asarray(payload, dtype=np.uint8)
    if payload.size < 4:
        raise PayloadError(f"ADIANA message truncated ({payload.size} bytes)")
    n1 = int.from_bytes(payload[:4].tobytes(), "little")
    if 4 + n1 > payload.size:
        raise PayloadError(f"ADIANA message: first part of {n1} bytes does not fit in {payload.size} bytes")
    return payload[4:4 + n1], payload[4 + n1:]


def plan_refusals(name: str, rc: dict) -> list[str]:
    """What :func:`refuse_extras` and the μ > 0 requirement refuse, at plan time."""
    out = []
    try:
        refuse_extras(name, {**rc["run"], "l1": rc["problem"]["l1"]})
    except ConfigError as exc:
        out.append(str(exc))
    if not rc["problem"]["l2"] > 0:
        out.append(f"{name} implements ADIANA's strongly convex theorem: problem.l2 (μ) must be > 0, "
                   f"got {rc['problem']['l2']!r}")
    return out


def refuse_extras(name: str, options: dict) -> None:
    if int(options.get("batch", 0)):
        raise ConfigError(f"{name} uses full local gradients; set run.batch = 0")
    if float(options.get("l1", 0.0)):
        raise ConfigError(f"{name} has no prox step; set problem.l1 = 0")
    if float(options.get("momentum", 0.0)):
        raise ConfigError(f"{name} is accelerated already; set run.momentum = 0")


class Adiana(Algorithm):
    name = "adiana"
    needs_unbiased = True
    collectives = ("gather", "allgather")
    collectives_why = COLLECTIVES_WHY

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        omega = unbiased_omega(self.name, compressors, d)
        refuse_extras(self.name, options)
        self.omega = omega
        self.independent = independent_messages(compressors, n_workers)
        self.L = float(problem_info["L_max"])
        self.par = theory_parameters(self.name, L=self.L, mu=float(problem_info.get("mu") or 0.0), omega=self.omega,
                                     n=self.independent, prob=options.get("probability", "theory"),
                                     multiplier=float(options.get("step_multiplier", 1.0)),
                                     alpha=options.get("alpha", "theory"))
        self.seed = int(options.get("seed", 0))
        self._ss = self._ws = None

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        return plan_refusals(cls.name, rc)

    def worker_init(self, i: int, problem=None) -> WorkerState:
        d = self.d
        self._ws = WorkerState(i=i, h=np.zeros(d), vx=np.zeros(d), vw=np.zeros(d), gw=np.zeros(d),
                               wref=np.zeros(d), fresh=np.zeros(1, dtype=bool), evals=np.zeros(1), w=np.zeros(d),
                               k=np.zeros(1, dtype=np.int64))
        return self._ws

    def down_extra(self, ss):
        return down_extra(self, ss)

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        g = local_gradients(state, worker_w(self, state, x), x, problem)
        np.subtract(g, state.h, out=state.vx)
        np.subtract(state.gw, state.h, out=state.vw)

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        c = self.compressors[state.i]
        p1 = c.compress(state.vx, rng)
        p2 = c.compress(state.vw, rng)
        c.decompress_add(p2, self.d, state.h, self.par["alpha"])       # h_i += α C(∇f_i(w) − h_i)
        return frame(p1, p2)

    def server_init(self, x0: np.ndarray) -> ServerState:
        self._ss = new_server_state(x0)
        return self._ss

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        state.m1[:] = 0.0
        state.m2[:] = 0.0
        for i, payload in messages:
            p1, p2 = unframe(payload)
            c = self.compressors[i]
            c.decompress_add(p1, self.d, state.m1, self.weights[i])
            c.decompress_add(p2, self.d, state.m2, self.weights[i])
        return server_update(self.par, self.seed, state)

    def model_bits(self, i: int, payload) -> float:
        p1, p2 = unframe(payload)
        c = self.compressors[i]
        return c.model_bits(p1, self.d) + c.model_bits(p2, self.d)

    def describe(self) -> dict:
        return {**{k: float(v) for k, v in self.par.items()}, "omega": self.omega, "L_max": self.L,
                "independent_messages": self.independent,
                "step_rule": "ADIANA Thm 3 (Li et al. 2020): eta = step_multiplier * min(1/(2L), n/(64 omega "
                             "(2p(omega+1)+1)^2 L))"}
