"""The interface every algorithm implements (one file per algorithm + one registry line).

State is explicit (optax style): ``*_init`` creates it, the other methods take and update it;
nothing hides in globals, so a test can run one step by hand. The runner calls, per iteration:

    worker:  worker_compute(ws, x, problem, rng)   -> timed as "grad"
             worker_encode(ws, rng) -> payload      -> timed as "compress"   (uint8 bytes sent)
    server:  server_step(ss, [(i, payload_i)...])   -> timed as "server"     (returns new x)

Before the first iteration, in this order (all optional):

    worker_init(i, problem) -> ws            worker i's state; may analyse its local problem
    agree_values(ws) -> 1-D float array      values to max-reduce over all workers (e.g. ω_i, L̃_i);
    set_agreed(maxima)                       every rank (also a dedicated server) gets the maxima
    server_init(x0) -> ss
    worker_setup_message(ws) -> bytes|None   one-time upload, same Gatherv as every payload,
    server_setup(ss, [(i, bytes)...])        recorded as workers/one_time_bits (model and wire)

At plan time (no data) the classmethod ``plan_refusals(rc, compressor)`` lists why a grid point
cannot run (one line each): e.g. EF21 with a compressor that has no contraction δ, MARINA with a
mini-batch, ADIANA with λ = 0.

Collectives (``run.collective``, :mod:`hpcgc.exchange`): under ``gather`` rank 0 alone holds the
server state; under ``allgather`` every rank does and runs ``server_step`` on all messages. An
algorithm that can ride ``allreduce`` (``collectives`` lists it) also implements

    worker_message(ws) -> vector             what worker i compresses this iteration
    worker_sent(ws, own_add)                 update ws with its own decoded message:
                                             own_add(out, a) does out += a·C(message)
    server_reduced(ss, add_sum) -> x         the step from the aggregate: add_sum(out) does
                                             out += Σ_i w_i C_i(message_i) (decoded from one sum)
    sum_codec(i)                             worker i's :class:`~hpcgc.compressors.summable.SumCodec`

and ``worker_encode`` is then, by default, ``compress(worker_message)`` + ``worker_sent`` with
the decoded payload — one recursion, whatever carries it. Under ``reduce-scatter`` the exchange
calls ``rs_message`` / ``rs_sent`` / ``rs_reduced`` (by default the three above; EF21 and MARINA
add their dense rounds) and ``second_stage`` (the owner's state of the aggregate); the theory
steps then use the composed constants of :mod:`hpcgc.compressors.segments`.

Problems and step sizes (checked at plan time by :meth:`Algorithm.check_problem`, before any data
is read). Every problem kind falls in one class (:func:`problem_class`):

    STRONGLY_CONVEX   logreg, ridge         L_i, L, μ = l2 and f* known
    SMOOTH            sigmoid-loss          L_i, L known; nonconvex: no μ, no f*
    NO_CONSTANT       softmax, mlp          no smoothness constant: γ = run.learning_rate

An algorithm runs on STRONGLY_CONVEX problems only, unless it sets

    nonconvex_ok = True      it also runs on SMOOTH and NO_CONSTANT problems (DIANA, DCGD; the
                             error-feedback methods opt in the same way). Its ``step_rules`` should
                             then include 'learning-rate' (the only rule NO_CONSTANT problems admit)
                             and, where the theory has one, a SMOOTH rule; ``auto_rules`` names the
                             default per class (a class without one needs an explicit run.step_rule).

``step_rules`` maps each name ``run.step_rule`` may take to the problem class it needs (a
STRONGLY_CONVEX rule needs μ or strong-convexity theory, a SMOOTH rule needs L, NO_CONSTANT rules —
'learning-rate' — run anywhere); ``auto_rules`` maps a problem class to the rule 'auto' (the
default) resolves to. ``resolve_step_rule(kind, name)`` gives the rule a run uses; the algorithm
computes its γ from it (and records it in ``describe()`` as ``step_rule``). 'learning-rate' takes
γ = run.learning_rate (0 = not set: an error for that rule). An algorithm with no ``step_rules``
(local SGD, DIANA+) accepts only 'auto'. ``takes_learning_rate = True`` (local SGD) means the
algorithm steps with run.learning_rate on every problem kind and needs no rule at all.

Algorithms know nothing of MPI or HDF5.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ConfigError
from ..models import MODEL_KINDS
from ..problems import CONVEX_KINDS, NONCONVEX_KINDS

STRONGLY_CONVEX, SMOOTH, NO_CONSTANT = "strongly convex", "smooth nonconvex", "no smoothness constant"
LEARNING_RATE = "learning-rate"
_NEEDS = {STRONGLY_CONVEX: "a strongly convex problem (logreg, ridge)",
          SMOOTH: "a smoothness constant (logreg, ridge, sigmoid-loss)"}
_IS = {STRONGLY_CONVEX: "is strongly convex", SMOOTH: "is nonconvex", NO_CONSTANT: "has no smoothness constant"}


def problem_class(kind: str) -> str:
    """STRONGLY_CONVEX (logreg, ridge), SMOOTH (sigmoid-loss) or NO_CONSTANT (softmax, mlp)."""
    if kind in CONVEX_KINDS:
        return STRONGLY_CONVEX
    if kind in NONCONVEX_KINDS:
        return SMOOTH
    if kind in MODEL_KINDS:
        return NO_CONSTANT
    raise ConfigError(f"unknown problem.kind {kind!r}")


def learning_rate(options: dict, who: str) -> float:
    """run.learning_rate, which must be set (> 0) when ``who`` steps with it."""
    lr = options.get("learning_rate") or 0.0
    if not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"run.learning_rate is required for {who} (γ = run.learning_rate): set it > 0, "
                          f"got {options.get('learning_rate')!r}")
    return float(lr)

COIN_STREAM = 0xC014
"""First word of the entropy of the shared coins (distinct from every rank's stream and the
shared-seed compressors' stream)."""


def shared_coin(seed: int, k: int, p: float) -> bool:
    """The Bernoulli(p) coin of iteration k, identical on every rank: a pure function of (run seed, k),
    drawn from ``default_rng([COIN_STREAM, seed, k])``. Used by VR-DIANA (reference-point refresh),
    ADIANA (w-update) and MARINA (dense round). Nothing but k is state, so a checkpoint that saves the
    iteration counter resumes the coin sequence exactly."""
    if p >= 1.0:
        return True
    return bool(np.random.default_rng([COIN_STREAM, int(seed), int(k)]).random() < p)


def coin_probability(name: str, value, default: float) -> float:
    """``run.probability`` ('theory' → the method's default) checked to lie in (0, 1]."""
    if value is None or value == "theory":
        return float(default)
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"run.probability must be a number in (0, 1] or 'theory', got {value!r}") from None
    if not (0.0 < p <= 1.0):
        raise ConfigError(f"run.probability must be in (0, 1] for {name} (theory default: {default:.4g}), got {value!r}")
    return p


class Algorithm:
    name = "?"
    collectives = ("gather", "allgather")
    collectives_why = "its messages are decoded per worker, so they do not add up in an Allreduce"
    needs_unbiased = False
    """True for methods whose theory needs E[C(x)] = x (DIANA, DCGD): refused at plan time."""
    takes_biased = False
    """True for methods built for biased (contractive) compressors, e.g. with error feedback."""
    nonconvex_ok = False
    """True: also runs on problems without μ and f* — sigmoid-loss (its SMOOTH step rule) and the
    classifiers softmax, mlp (γ = run.learning_rate). See the module doc."""
    takes_learning_rate = False
    """True: steps with run.learning_rate on every problem kind (local SGD); no step rules."""
    step_rules: dict = {}
    """run.step_rule name -> the problem class it needs (STRONGLY_CONVEX, SMOOTH or NO_CONSTANT)."""
    auto_rules: dict = {}
    """problem class -> the rule run.step_rule = 'auto' resolves to."""
    steps_in_place = False
    """True when ``server_step`` updates its state's ``x`` in place and returns that array: an exchange
    may then put ``state.x`` in its own broadcast buffer (``gather``), so that the step writes the
    iterate where the broadcast reads it, with no copy per iteration."""
    kernels: tuple = ()
    """Warm-up functions of the numba kernels the algorithm's steps call (e.g.
    :func:`hpcgc.algorithms.kernels.warm`), run before the timed loop (``warm_jit``)."""
    two_level = False
    """True when a node can stand in for a worker (``run.topology = "hierarchical"``,
    :mod:`hpcgc.run.nodes`): ``worker_compute`` evaluates exactly one gradient of its ``problem``, at
    the iterate it is given, and reads nothing else of it but ``smoothness()`` — so the node's
    ranks can sum their shards' gradients into it (DCGD, DIANA, EF, EF21 and their subclasses DGC, EF21-SGDM). Not: methods that
    evaluate at other points or several times (VR-DIANA, ADIANA, MARINA), take local steps (local
    SGD) or ship smoothness matrices of their shard (DCGD+/DIANA+)."""
    downlink_ok = False
    """True for methods whose workers only read the broadcast model, so that the parameter server can
    compress its broadcast with EF21-P (``run.downlink``, :mod:`hpcgc.exchange.downlink`): the
    workers then evaluate at w, the server keeps stepping its own x."""

    overlaps = False
    """True when :meth:`worker_compute_layers` exists: the worker's message is final coordinate by
    coordinate as the backward pass completes each layer, so ``run.overlap`` can start each layer's
    exchange before the pass ends (:mod:`hpcgc.exchange.overlap`): DCGD, DIANA, EF."""

    def worker_compute_layers(self, state, x, problem, rng, ready) -> None:
        """``worker_compute`` on a problem of several tensors, calling ``ready(a, b)`` as soon as
        ``worker_message(state)[a:b]`` is final (one layer). Same operations, same bits."""
        raise NotImplementedError(f"{self.name} cannot overlap its exchange with the backward pass")

    def step_downlink(self):
        """Under ``gather`` with ``run.downlink = 'dense'``: (compressor C, scale s) when the server step
        is x ← x + s·C(u) for a message u that ``down_message(ss)`` returns, with C(u) = u exactly — the
        exchange then broadcasts C(u) instead of the float64 iterate and every rank applies it, so the
        workers' x is the server's bit for bit (signSGD with majority vote: the 1-bit vote, s = γ).
        Default: None (the iterate is broadcast)."""
        return None

    def down_extra(self, ss) -> np.ndarray | None:
        """Under ``gather``, right after the iterate's Bcast, every rank: an array that one more Bcast
        from rank 0 fills this iteration (rank 0 passes the server's, ``ss`` not None; a worker rank its
        own receive buffer), or None. Every rank must agree without communicating (a shared coin):
        ADIANA's reference point w when it moves. Counted in the downlink's bits. Default: None."""
        return None

    def __init__(self, compressors: list, *, d: int, n_workers: int, weights, problem_info: dict,
                 options: dict):
        """``compressors[i]`` is worker i's compressor (per-worker ratios from an allocation);
        ``problem_info`` has L_max, mu, L (global, rank 0 only may be None) and the like;
        ``options`` is the resolved ``[run]`` table (step_multiplier, alpha, momentum, batch, ...)
        plus ``l1``."""
        self.compressors = compressors
        self.d = d
        self.n = n_workers
        self.weights = np.asarray(weights, dtype=np.float64)

    # problems and step rules (plan time: no data, no instance)
    @classmethod
    def resolve_step_rule(cls, kind: str, name: str = "auto") -> str | None:
        """The step rule a run of this algorithm uses on ``kind`` ('auto' → ``auto_rules``)."""
        return cls.auto_rules.get(problem_class(kind)) if name == "auto" else name

    @classmethod
    def check_problem(cls, kind: str, r: dict) -> str | None:
        """Why this algorithm cannot run problem.kind ``kind`` with the [run] table ``r`` (one line),
        or None. Called at plan time for every grid point."""
        from . import REGISTRY
        name, rule = r["algorithm"], r.get("step_rule", "auto")
        if rule != "auto" and rule not in cls.step_rules:
            names = ", ".join(["auto", *cls.step_rules])
            return (f"unknown run.step_rule {rule!r} for algorithm {name!r}; available: {names}" if cls.step_rules
                    else f"algorithm {name!r} has no named step rules: run.step_rule must be 'auto', got {rule!r}")
        if cls.takes_learning_rate:
            return None
        pclass = problem_class(kind)
        if pclass != STRONGLY_CONVEX and not cls.nonconvex_ok:
            takers = sorted(k for k, (c, _) in REGISTRY.items() if c.nonconvex_ok or c.takes_learning_rate)
            why = ("has no smoothness constant" if pclass == NO_CONSTANT else "is nonconvex (no μ, no f*)")
            return (f"algorithm {name!r} needs a strongly convex problem with smoothness constants; problem.kind "
                    f"= {kind!r} {why}. Algorithms that run on it: {', '.join(takers)}")
        rule = cls.resolve_step_rule(kind, rule)
        needs = cls.step_rules.get(rule, STRONGLY_CONVEX)
        order = (STRONGLY_CONVEX, SMOOTH, NO_CONSTANT)
        fits = [k for k, v in cls.step_rules.items() if order.index(v) >= order.index(pclass)]
        if rule is None and not cls.step_rules:      # its own step (DIANA+), on strongly convex problems
            return None
        if rule is None:                             # 'auto' has no default for this problem class
            return (f"algorithm {name!r} has no default step rule on problem.kind = {kind!r}: set run.step_rule "
                    f"to {' or '.join(repr(f) for f in fits) or 'a rule'}")
        if order.index(needs) < order.index(pclass):
            return (f"run.step_rule = {rule!r} needs {_NEEDS[needs]}; problem.kind = {kind!r} {_IS[pclass]}: "
                    f"use {' or '.join(repr(f) for f in ['auto', *fits])}")
        if rule == LEARNING_RATE and not (r.get("learning_rate") or 0) > 0:
            return (f"run.learning_rate is required for {name!r} on problem.kind = {kind!r} with step rule "
                    f"'learning-rate' (no theory step): set run.learning_rate > 0")
        return None

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        """Plan-time refusals of this algorithm's settings (no data; ``rc`` one grid point's resolved
        config, ``compressor`` its compressor or None when the spec itself is bad): one message each.
        Default: none."""
        return []

    # agreement across workers (default: nothing to agree on)
    def agree_values(self, state):
        return None

    def set_agreed(self, maxima):
        return None

    # one-time set-up (default: none)
    def worker_setup_message(self, state):
        return None

    def server_setup(self, state, messages):
        return None

    def one_time_model_bits(self, i: int, payload) -> float:
        return 8.0 * payload.size

    # the message (every collective)
    @functools.cached_property
    def codecs(self) -> list:
        """``codecs[i]``: worker i's compressor prepared at d (:meth:`Compressor.prepared`, made
        once): the loop's encode and add without per-call argument checks — ``worker_message``
        and the states' arrays are contiguous float64 vectors of length d by construction."""
        return [c.prepared(self.d) for c in self.compressors]

    @functools.cached_property
    def _add_many(self):
        """The workers' ``Prepared.add_many`` when they all share one compressor that has it, else None."""
        first = self.compressors[0] if self.compressors else None
        if first is None or any(c is not first for c in self.compressors):
            return None
        return self.codecs[0].add_many

    def add_messages(self, out, messages, weights=None) -> None:
        """out += Σ_i w_i·C_i(payload_i) over ``messages`` [(worker i, payload)], added one after
        another in their order (out_j = ((out_j + a_0j) + a_1j) + …): in one kernel call when
        ``messages`` carries the receive buffer (:class:`hpcgc.exchange.base.Messages`, worker i =
        the i-th message) and every worker's compressor declares ``Prepared.add_many``, else one
        ``add`` per message — the same bits either way. A payload the kernel refuses is added (its
        error raised) by its own ``add``, after the ones before it, as without the kernel.
        ``weights``: w_i (float64, one per worker; default the workers' ``weights``) — EF, EF21 and
        signSGD pass their own (w_i·s_i, 1)."""
        codecs = self.codecs
        weights = self.weights if weights is None else weights
        batch = getattr(messages, "batch", None)
        many = self._add_many if batch is not None else None
        if many is not None and len(batch[1]) == len(weights):
            done = many(*batch, weights, out)
            if done == len(weights):
                return
            messages = messages[done:]
        for i, payload in messages:
            codecs[i].add(payload, out, weights[i])

    def worker_encode(self, state, rng) -> np.ndarray:
        """Compress ``worker_message`` into the payload bytes, then ``worker_sent`` with it decoded."""
        codec = self.codecs[state.i]
        payload = codec.encode(self.worker_message(state), rng)
        add = codec.add_own
        self.worker_sent(state, lambda out, a: add(payload, out, a))
        return payload

    def worker_message(self, state) -> np.ndarray:
        raise NotImplementedError(f"{self.name} does not define worker_message")

    def worker_sent(self, state, own_add) -> None:
        return None

    def sum_codec(self, i: int):
        return self.compressors[i].sum_codec(self.d)

    def server_reduced(self, state, add_sum):
        raise NotImplementedError(f"{self.name} cannot take an Allreduce sum")

    def step_norm_sq(self, state):
        """‖x‖² of the iterate the last server step returned, when the step knows it without a
        pass over x (EF's sparse step); None — the default — and the exchange's divergence test
        (:func:`hpcgc.exchange.base.exploded`) computes it."""
        return None

    # under reduce-scatter (hpcgc.exchange.reduce_scatter): the allreduce interface, plus dense rounds
    def rs_message(self, state) -> tuple:
        """(the vector worker ``state`` compresses segment-wise, dense): dense = this iteration's
        message travels uncompressed (float64 segments in both stages: EF21's first message,
        MARINA's dense rounds); the flag is the same on every rank. Default: (worker_message, False)."""
        return self.worker_message(state), False

    def rs_sent(self, state, own_add, dense: bool) -> None:
        """``worker_sent`` with the worker's own decoded stage-1 message."""
        self.worker_sent(state, own_add)

    def rs_reduced(self, state, add_sum, dense: bool):
        """``server_reduced`` from the decoded second stage (every rank)."""
        return self.server_reduced(state, add_sum)

    def second_stage(self, d: int, n: int) -> tuple[float, float]:
        """(α₂, s₂) of the owner's second stage under reduce-scatter: it sends s₂·C₂(S − D) and
        updates D ← D + α₂(m − S) (``docs/methods.md``, "Compressed reduce-scatter"). Default (0, 1):
        plain C₂(S), for unbiased methods whose aggregate carries no state (DCGD, MARINA)."""
        return 0.0, 1.0

    def model_bits(self, i: int, payload) -> float:
        """Model bits of worker i's message, accounted right after the server step decoded it."""
        return self.compressors[i].decoded_model_bits(payload, self.d)

    def stream_bits(self, messages):
        """The bits of each of ``messages``' Elias-omega index streams (int64, −1 for fixed-width
        indices), as this rank's last server step decoded them — when that step decoded exactly
        ``messages`` (the same :class:`~hpcgc.exchange.base.Messages`) —, else None: rank 0's bit
        accounting of sparse payloads then decodes the streams itself (``Exchange._sparse_bits``).
        EF's sparse step has them (:func:`~hpcgc.compressors.sparse_base.decode_entries`)."""
        return None

    def grad_evals(self, state) -> float:
        """Single-sample gradient evaluations worker ``state`` has made (NaN where not counted);
        recorded per worker at the end of a run (``workers/grad_evals``)."""
        ev = getattr(state, "evals", None)
        return float(ev[0]) if ev is not None else float("nan")

    def describe(self) -> dict:
        return {}
