"""signSGD with majority vote (and Signum, its momentum form).

Bernstein, Zhao, Azizzadenesheli, Anandkumar, *signSGD with Majority Vote is Communication Efficient
and Fault Tolerant*, ICLR 2019 (arXiv 1810.05291), Algorithm 1, over n workers:

    worker i:  v_i ← (1 − β)·g_i + β·v_i      (β = run.momentum; β = 0: v_i = g_i, signSGD)
               send sign(v_i)                 (1 bit per coordinate)
    server:    s = sign(Σ_i sign(v_i))        (the majority vote; every worker has one vote)
               x ← x − γ·s                    (broadcast: sign, 1 bit per coordinate)

g_i = ∇f_i(x) (or a ``run.batch`` mini-batch estimate); γ = ``run.step_multiplier`` ×
``run.learning_rate`` (required: the paper's theory step needs the smoothness vector ‖L‖₁ and the
horizon, and its experiments tune γ). With n = 1 this is signSGD (Bernstein et al., ICML 2018),
with β > 0 Signum. The compressor is ``sign`` (one bit cannot say "zero": sign(0) = +1); a tie of
the vote (n even) is broken to +1 as well, so the server's step is ±γ in every coordinate and
travels in one bit.

Collectives — the same votes, the same iterates under each (``tests/mpi/test_dgc_signsgd_mpi.py``):

* ``gather``: the signs are gathered (1 bit per coordinate) and rank 0 counts the votes; instead of
  the float64 iterate it broadcasts the vote's sign, 1 bit per coordinate, and every rank takes the
  step x ← x − γ·s from those bytes (``Algorithm.step_downlink``: the compressed-downlink path of
  :mod:`hpcgc.exchange.gather`), so the workers' x is the server's bit for bit;
* ``allreduce``: the vote rides ``MPI_Allreduce`` as a sum of ±1 in the smallest integer type that
  cannot wrap — int8 for n ≤ 127, int16, int32 (:class:`hpcgc.compressors.sign.SignSum`): d bytes
  per rank per iteration for int8 (8 wire bits per coordinate; 1 model bit);
* ``allgather``: every rank gathers every sign and counts the votes itself;
* ``reduce-scatter``: the owner of a segment sums its segment's signs and sends sign(sum) — the
  segment's vote, 1 bit per coordinate — in the Allgatherv (no error feedback on the owner). There
  the sum is weighted (1/n each), so a tie is broken by that sum's rounding: exact (+1) when n is a
  power of two.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Algorithm, learning_rate


@dataclass
class WorkerState:
    i: int                 # worker index
    v: np.ndarray          # v_i: the gradient (β = 0) or its exponential average (Signum)


@dataclass
class ServerState:
    x: np.ndarray          # iterate x^k
    vote: np.ndarray       # scratch: the decoded vote (count, or its 1/n multiple)
    u: np.ndarray          # the step's direction −s ∈ {±1}^d (the gather downlink's message)


class SignSgdMV(Algorithm):
    """signSGD / Signum with majority vote (Bernstein et al. 2019)."""

    name = "signsgd-mv"
    collectives = ("gather", "allreduce", "allgather", "reduce-scatter")
    takes_biased = False     # it takes one biased compressor, sign, named in its own refusal (not a general taker)
    takes_learning_rate = True

    @classmethod
    def plan_refusals(cls, rc: dict, compressor=None) -> list[str]:
        r, p = rc["run"], rc["problem"]
        out = []
        if compressor is not None and compressor.name != "sign":
            out.append(f"signsgd-mv sends sign(g_i) and steps by the sign of the vote: run.compressor must be 'sign', "
                       f"got {compressor.spec!r}")
        if not (r.get("learning_rate") or 0) > 0:
            out.append("run.learning_rate is required for signsgd-mv (x ← x − γ·sign(vote), γ = run.learning_rate): "
                       "set it > 0")
        if r.get("alpha", "theory") != "theory":
            out.append("signsgd-mv has no shifts to step (run.alpha); remove run.alpha")
        if p.get("l1", 0) != 0:
            out.append("signsgd-mv has no prox step for problem.l1; set problem.l1 = 0")
        return out

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        from ..errors import ConfigError
        for msg in self.plan_refusals({"run": options, "problem": {"l1": options.get("l1", 0.0)}}, compressors[0]):
            raise ConfigError(msg)
        self.gamma = float(options.get("step_multiplier", 1.0)) * learning_rate(options, "signsgd-mv")
        self._ones = np.ones(n_workers)           # one unweighted vote per worker (add_messages)
        self.beta = float(options.get("momentum", 0.0))
        self.batch = int(options.get("batch", 0))

    # -- worker side -----------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        return WorkerState(i=i, v=np.zeros(self.d))

    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        """v_i ← g_i (β = 0) or (1 − β)·g_i + β·v_i."""
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        g = problem.grad(x, rows)
        if self.beta == 0.0:
            state.v[:] = g
        else:
            state.v *= self.beta
            state.v += (1.0 - self.beta) * g

    def worker_message(self, state: WorkerState) -> np.ndarray:
        return state.v

    # -- server side -----------------------------------------------------------------------------
    def server_init(self, x0: np.ndarray) -> ServerState:
        d = self.d
        return ServerState(x=np.array(x0, dtype=np.float64), vote=np.zeros(d), u=np.zeros(d))

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        """Count the votes (one per worker, unweighted) and step."""
        state.vote[:] = 0.0
        self.add_messages(state.vote, messages, self._ones)
        return self._step(state)

    def server_reduced(self, state: ServerState, add_sum) -> np.ndarray:
        """The same step from the Allreduce's vote count (or reduce-scatter's per-segment votes)."""
        state.vote[:] = 0.0
        add_sum(state.vote)
        return self._step(state)

    def _step(self, state: ServerState) -> np.ndarray:
        """u = −sign(vote) (a tie: −1, i.e. sign(0) = +1); x ← x + γ·u."""
        np.copyto(state.u, np.where(state.vote < 0.0, 1.0, -1.0))
        state.x += self.gamma * state.u
        return state.x

    def step_downlink(self):
        """Under gather: broadcast sign(u) (1 bit per coordinate); every rank adds γ·sign(u) = γ·u."""
        return self.compressors[0], self.gamma

    def down_message(self, state: ServerState) -> np.ndarray:
        return state.u

    def describe(self) -> dict:
        from ..compressors.sign import vote_dtype
        return {"gamma": self.gamma, "alpha": 0.0, "beta": self.beta, "step_source": "learning_rate",
                "step_rule": "learning-rate", "vote_type": np.dtype(vote_dtype(self.n)).name,
                "vote_ties": "+1"}
