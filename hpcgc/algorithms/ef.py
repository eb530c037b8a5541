"""EF ("EF14"): compressed gradient steps with error feedback.

Seide, Fu, Droppo, Li, Yu, *1-Bit Stochastic Gradient Descent and its Application to
Data-Parallel Distributed Training of Speech DNNs*, Interspeech 2014; as EF-SGD in Karimireddy,
Rebjock, Stich, Jaggi, *Error Feedback Fixes SignSGD and other Gradient Compression Schemes*,
ICML 2019 (arXiv 1901.09847), Algorithm 2, distributed over n workers:

    worker i:  e_i ← e_i + γ·g_i,   m_i = C(e_i)  (the only message),   e_i ← e_i − m_i
    server:    x ← x − Σ_i w_i m_i                (w_i = 1/n, as in DIANA)

g_i = ∇f_i(x) (or a ``run.batch`` mini-batch estimate). The worker subtracts its *decoded own
message*, exactly what the server decodes, so x⁰ − x^k = Σ_i w_i (γ Σ_t g_i^t − e_i^k) holds to
rounding. e_i starts at 0.

Compressors (:func:`contraction`): a biased C is used as it is; an unbiased C with variance ω as
C/(1 + ω) (the worker sends C's payload, both ends decode it scaled by 1/(1 + ω)), which is
contractive with δ = 1/(1 + ω) — without the scaling rand-k (ω = d/k − 1 ≥ 1) would not be, and
the memory would grow. Plain ``sign`` is refused: its message has no scale (‖sign(e)‖² = d
whatever e), so no δ exists; ``scaled-sign`` (Karimireddy et al.'s EF-signSGD) has δ = 1/d.

Step γ: EF has no step from δ that this project could confirm for n heterogeneous workers, so γ is
the step of uncompressed gradient descent, γ = ``run.step_multiplier``/L with L the smoothness
constant of f (with C = identity EF *is* gradient descent with that step): ``run.step_rule =
'theory'``, the default where L is known; with ``run.step_rule = 'learning-rate'`` (the default on
problems without a smoothness constant, where ``run.learning_rate`` is required)
γ = ``run.step_multiplier`` × ``run.learning_rate``. See ``docs/methods.md`` "EF".

Collectives: ``gather``, ``allgather``, and ``allreduce`` when the compressor's messages add up
(identity, shared-seed rand-k): the server step only needs Σ_i w_i m_i, and the memory update only
the worker's own decoded message.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..compressors.sparse_base import decode_entries
from ..errors import ConfigError
from ..losses import ACCUMULATE
from ..problems import local_grad
from .base import LEARNING_RATE, NO_CONSTANT, SMOOTH, STRONGLY_CONVEX, Algorithm
from .kernels import sparse_step
from .kernels import warm as warm_step

PLAN_D = 2**20
"""A dimension to ask a compressor at plan time whether it has a contraction δ at all (before the
data, and so d, is known): only whether δ is None matters there."""


@dataclass
class WorkerState:
    i: int                 # worker index
    e: np.ndarray          # error-feedback memory e_i (float64); before worker_encode: e_i + γ g_i


EXACT_EVERY = 64
"""Sparse steps between two exact ‖x‖² of the divergence test (:meth:`ServerState.track`)."""


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    m: np.ndarray          # scratch: Σ_i w_i m_i, zero between steps
    # not fields (not checkpointed): ‖x‖² kept across sparse steps, and the steps since it was exact
    sq = None
    since = 0

    def restored(self) -> None:
        """After a checkpoint is put back: m is zero between steps (the sparse step relies on it);
        a checkpoint written before 2026-11-27 stored the last step's sum there. x changed: the
        kept ‖x‖² is recomputed at the next step."""
        self.m[:] = 0.0
        self.sq = None

    def track(self, dsq) -> None:
        """‖x‖² after a step that changed it by ``dsq`` (None: unknown, e.g. a dense step): kept by
        adding the sparse steps' changes, exact (one pass over x) at the first step, after a
        restore and every EXACT_EVERY steps — the divergence test's input (a threshold at 1e200 and
        finiteness: a non-finite or huge entry makes the kept sum so at once; the rounding of the
        additions between exact passes is far below the threshold)."""
        if dsq is None:
            self.sq = None
        elif self.sq is None or self.since >= EXACT_EVERY:
            self.sq, self.since = float(np.dot(self.x, self.x)), 0
        else:
            self.sq += dsq
            self.since += 1


def contraction(comp, d: int) -> tuple[float | None, float]:
    """(δ, s): the contraction δ of s·C and the scale s error feedback applies to C's decoded
    message. Unbiased C with variance ω: s = 1/(1 + ω), δ = 1/(1 + ω), since
    E‖sC(x) − x‖² = (s²(1 + ω) − 2s + 1)‖x‖² = (1 − s)‖x‖² (`spec/compressors.md`, "scaled
    unbiased"; flpytorch's EF21 does the same). Biased C: s = 1,
    δ = ``C.delta(d)`` (None where no δ exists, e.g. plain sign)."""
    if comp.unbiased:
        s = 1.0 / (1.0 + comp.omega(d))
        return s, s
    return comp.delta(d), 1.0


def plan_refusal(name: str, rc: dict, comp, *, needs_delta: bool) -> str | None:
    """The plan-time (data-free) refusals shared by ``ef`` and ``ef21``; None if the run is fine."""
    r, p = rc["run"], rc["problem"]
    biased_none = not comp.unbiased and comp.delta(max(PLAN_D, comp.params.get("k", 1))) is None
    if biased_none and (needs_delta or not hasattr(comp, "error_bound")):
        why = ("its step and its recursion need the contraction δ of ‖C(x) − x‖² ≤ (1 − δ)‖x‖²"
               if needs_delta else "error feedback needs a contractive compressor")
        return (f"{name} cannot use {comp.spec}: {why}, and {comp.spec} has none (its error is not a fixed "
                "fraction of ‖x‖² for every x); use scaled-sign (δ = 1/d), topk (δ = k/d), or an unbiased "
                "compressor (used as C/(1+ω), δ = 1/(1+ω))")
    if r["momentum"] != 0:
        return f"{name} has no momentum; remove run.momentum (or use 'diana')"
    if r["alpha"] != "theory":
        return f"{name} has no shifts to step (run.alpha); remove run.alpha (or use 'diana')"
    if p["l1"] != 0:
        return f"{name} has no prox step for problem.l1; set problem.l1 = 0 (or use 'diana' / 'dcgd')"
    return None


# run.step_rule of ef / ef21 (the framework of hpcgc.algorithms.base): 'theory' (EF: 1/L; EF21:
# Theorem 1) needs a smoothness constant; 'learning-rate' takes run.learning_rate, the only choice
# on problems without one (softmax, mlp), where it is required (checked at plan time).
EF_STEP_RULES = {"theory": SMOOTH, LEARNING_RATE: NO_CONSTANT}
EF_AUTO_RULES = {STRONGLY_CONVEX: "theory", SMOOTH: "theory", NO_CONSTANT: LEARNING_RATE}


def step_options(alg, options: dict, problem_info: dict) -> tuple[float, float, str]:
    """(step_multiplier, learning_rate, rule) from the resolved ``[run]`` table: the rule
    ``run.step_rule`` resolves to on this problem, and its parameters checked > 0."""
    mult = options.get("step_multiplier", 1.0)
    if not (mult > 0 and math.isfinite(mult)):
        raise ConfigError(f"run.step_multiplier must be > 0, got {mult!r}")
    kind = problem_info.get("kind", "logreg")
    refusal = alg.check_problem(kind, {**options, "algorithm": alg.name})
    if refusal:
        raise ConfigError(refusal)
    rule = alg.resolve_step_rule(kind, options.get("step_rule", "auto"))
    lr = float(options.get("learning_rate", 0.0) or 0.0)
    if rule == LEARNING_RATE and not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"run.learning_rate must be > 0 for {alg.name} with step rule 'learning-rate', got {lr!r}")
    return float(mult), lr, rule


class ErrorFeedback(Algorithm):
    """What ``ef`` and ``ef21`` share: biased compressors, nonconvex problems, their step rules and
    their refusals (at plan time and, for direct users of the class, at construction)."""

    takes_biased = True
    nonconvex_ok = True
    two_level = True          # one gradient at x per iteration (and L_i): a node can be the worker
    step_rules = EF_STEP_RULES
    auto_rules = EF_AUTO_RULES
    needs_delta = False
    """True when the step and the recursion need the compressor's contraction δ (EF21)."""

    @functools.cached_property
    def scaled_weights(self) -> np.ndarray:
        """w_i·s_i: the factor the server adds worker i's decoded message with (``scales`` is set at
        construction and does not change)."""
        return self.weights * self.scales

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        msg = plan_refusal(cls.name, rc, compressor, needs_delta=cls.needs_delta) if compressor is not None else None
        return [msg] if msg else []

    def refuse_options(self, options: dict, compressor) -> None:
        """The same refusals from the resolved ``[run]`` options (ConfigError)."""
        for msg in self.plan_refusals({"run": {"momentum": options.get("momentum", 0.0),
                                               "alpha": options.get("alpha", "theory")},
                                       "problem": {"l1": options.get("l1", 0.0)}}, compressor):
            raise ConfigError(msg)


def composed_contraction(comp, d: int, n: int) -> tuple[float | None, float]:
    """(δ_c, s_seg) under reduce-scatter: the segments' contraction δ_seg (min over segments, with
    its scale s_seg) composed over the two stages, δ_c = δ_seg² (:mod:`hpcgc.compressors.segments`)."""
    from ..compressors.segments import bounds, composed_delta, segment_compressors
    pairs = [contraction(c, b - a) for c, (a, b) in zip(segment_compressors(comp, d, n), bounds(d, n))]
    if any(dl is None for dl, _ in pairs):
        return None, 1.0
    dl, s = min(pairs)
    return composed_delta(dl, dl), s


class EF(ErrorFeedback):
    """EF14 / EF-SGD: compress γ·g_i plus the memory of what was not sent."""

    name = "ef"
    kernels = (warm_step,)             # sparse_step loaded before the timed loop
    steps_in_place = True              # server_step / server_reduced: state.x -= …, return state.x
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.refuse_options(options, compressors[0])
        mult, lr, self.step_rule = step_options(self, options, problem_info)
        pairs = [contraction(c, d) for c in compressors]
        if options.get("collective") == "reduce-scatter":
            pairs = [composed_contraction(c, d, n_workers) for c in compressors]
        self.scales = np.array([s for _, s in pairs])
        deltas = [dl for dl, _ in pairs]
        self.delta = None if any(dl is None for dl in deltas) else float(min(deltas))
        L = problem_info.get("L")
        theory = self.step_rule != LEARNING_RATE and L
        self.step_source = "1/L" if theory else "learning_rate"
        self.gamma = mult / L if theory else mult * lr
        self.batch = int(options.get("batch", 0))

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        return WorkerState(i=i, e=np.zeros(self.d))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """e_i ← e_i + γ·g_i with g_i = ∇f_i(x) (or a mini-batch estimate)."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        local_grad(problem, x, rows, state.e, ACCUMULATE, gamma=self.gamma)   # one pass: e + γ·g

    overlaps = True

    def worker_compute_layers(self, state: WorkerState, x: np.ndarray, problem, rng, ready):
        """``worker_compute`` with e_i[a:b] += γ·g_i[a:b] as each layer's gradient is final, then
        ``ready(a, b)`` (``run.overlap``; the gradient goes to a scratch vector of the state)."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        if getattr(state, "g", None) is None:
            state.g = np.empty(self.d)
        e, g, gamma = state.e, state.g, self.gamma

        def done(a, b):
            e[a:b] += gamma * g[a:b]
            ready(a, b)
        problem.grad(x, rows, out=g, ready=done)

    def worker_message(self, state: WorkerState) -> np.ndarray:
        return state.e

    def worker_sent(self, state: WorkerState, own_add) -> None:
        """e_i ← e_i − s_i·C(e_i), with exactly the message the server decodes."""
        own_add(state.e, -self.scales[state.i])

    # -- server side -----------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), m=np.zeros(self.d))

    STEP_BLOCK = 4096
    """Coordinates per block of the sparse step (:func:`~.kernels.sparse_step`): 32 KiB of float64."""

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        """x ← x − Σ_i w_i s_i C(e_i); ``messages``: (worker index, payload bytes).

        When every codec hands out a message's decoded entries (``Prepared.entries``: top-k,
        rand-k with sent indices, threshold), all messages are decoded first — an invalid payload
        raises before x changes — and :func:`~.kernels.sparse_step` applies them block by block:
        x is touched at the n·k entries, ascending, with no aggregate vector. Otherwise they are
        decoded into m (zero between steps), x −= m and m is zeroed over all d. Each coordinate's
        sum is formed in message order either way (the same bits)."""
        codecs = self.codecs
        self._bits_for = None
        if all(codecs[i].entries is not None for i, _ in messages):
            idx, vals, starts = self._entries(messages, state.x)
            self._bits_for = messages         # the index streams' bits below are these messages' (stream_bits)
            state.track(sparse_step(state.x, idx, vals, starts, self._block))
            return state.x
        state.track(None)
        m = state.m
        try:
            self.add_messages(m, messages, self.scaled_weights)
        except BaseException:
            m[:] = 0.0                        # an invalid payload: m back to zero, x untouched
            raise
        state.x -= m
        m[:] = 0.0
        return state.x

    def step_norm_sq(self, state: ServerState):
        """‖x‖² after the last sparse step (:meth:`ServerState.track`); None after a dense one, and
        for a subclass with a server state of its own (DGC)."""
        return getattr(state, "sq", None)

    def _entries(self, messages, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every message's decoded entries (``Prepared.entries``, :func:`~hpcgc.compressors.sparse_base.decode_entries`),
        one after the other in two work arrays of the server's, and where each message starts;
        x's lines at the entries are asked for while decoding."""
        sw = self.scaled_weights
        parts = [self.codecs[i].entries(payload, sw[i]) for i, payload in messages]
        need = sum(p.nnz for p in parts)
        if getattr(self, "_idx", None) is None or self._idx.shape[0] < need:
            self._idx, self._vals = np.empty(need, dtype=np.int64), np.empty(need)
            self._block = np.zeros(self.STEP_BLOCK)
        if getattr(self, "_bits", None) is None or self._bits.shape[0] < len(parts):
            self._bits = np.empty(len(parts), dtype=np.int64)
        starts = decode_entries(parts, self._idx, self._vals, x, self._bits)
        return self._idx[:need], self._vals[:need], starts

    def stream_bits(self, messages):
        """The index streams' bits of ``messages`` as this rank's last server step decoded them, when
        that step decoded exactly these (their entries, :meth:`_entries`); else None."""
        return self._bits[:len(messages)] if getattr(self, "_bits_for", None) is messages else None

    def server_reduced(self, state: ServerState, add_sum) -> np.ndarray:
        """The same step from Σ_i w_i C(e_i) decoded from an Allreduce sum (one compressor, one s);
        m zero before and after (``server_step``)."""
        add_sum(state.m)
        state.x -= self.scales[0] * state.m
        state.m[:] = 0.0
        state.track(None)
        return state.x

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """Error feedback on the owner under reduce-scatter (CGX, 1-bit Adam): (1, s_seg)."""
        return 1.0, float(self.scales[0])

    def describe(self) -> dict:
        return {"gamma": self.gamma, "alpha": 0.0, "beta": 0.0, "step_source": self.step_source,
                "step_rule": self.step_rule,
                "contraction_delta": np.nan if self.delta is None else self.delta,
                "compressor_scale": float(self.scales.min())}
