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
the decoded payload — one recursion, whatever carries it.

Algorithms know nothing of MPI or HDF5.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError

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
    """True for methods with a nonconvex theory (VR-DIANA, MARINA); used once nonconvex problems run."""

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

    @classmethod
    def check_plan(cls, rc: dict) -> list[str]:
        """Plan-time refusals of this algorithm's settings (no data): one message each."""
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
    def worker_encode(self, state, rng) -> np.ndarray:
        """Compress ``worker_message`` into the payload bytes, then ``worker_sent`` with it decoded."""
        c = self.compressors[state.i]
        payload = c.compress(self.worker_message(state), rng)
        self.worker_sent(state, lambda out, a: c.decompress_add(payload, self.d, out, a))
        return payload

    def worker_message(self, state) -> np.ndarray:
        raise NotImplementedError(f"{self.name} does not define worker_message")

    def worker_sent(self, state, own_add) -> None:
        return None

    def sum_codec(self, i: int):
        return self.compressors[i].sum_codec(self.d)

    def server_reduced(self, state, add_sum):
        raise NotImplementedError(f"{self.name} cannot take an Allreduce sum")

    def model_bits(self, i: int, payload) -> float:
        return self.compressors[i].model_bits(payload, self.d)

    def grad_evals(self, state) -> float:
        """Single-sample gradient evaluations worker ``state`` has made (NaN where not counted);
        recorded per worker at the end of a run (``workers/grad_evals``)."""
        ev = getattr(state, "evals", None)
        return float(ev[0]) if ev is not None else float("nan")

    def describe(self) -> dict:
        return {}
