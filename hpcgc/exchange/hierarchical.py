"""``run.topology = "hierarchical"``: the run's collective between nodes, shared memory inside them.

Per iteration (the node structure: :class:`hpcgc.transport.Nodes`):

1. every rank computes the gradient of its shard; the node's ranks sum them, each scaled by its
   share of the node's aggregation weight, uncompressed in an ``MPI_Reduce`` onto the node's leader
   (:class:`hpcgc.run.nodes.NodeProblem`, inside the ``grad`` phase);
2. the leaders alone run the algorithm's worker half on the node's gradient (DIANA's shift, EF's
   memory: one per node) and the chosen collective (``run.collective``) with the chosen compressor
   among themselves — the *inner* exchange, any of ``gather``, ``allgather``, ``allreduce``,
   ``reduce-scatter`` on the leaders' communicator; under ``gather`` the server is world rank 0,
   node 0's leader;
3. each leader broadcasts the iterate the workers read (and the control word) inside its node
   (``MPI_Bcast``, added to ``comm_down``; the other ranks wait in the control word's Bcast,
   ``wait_down``, and receive the iterate, ``comm_down``).

With one rank per node steps 1 and 3 issue nothing and the run is the flat run, bit for bit. The
inner exchange's bytes are the per-collective ledgers (``mpi_bytes``, ``bits_*_wire``: the
inter-node traffic, handed to MPI by the leaders only); the node's Reduce and Bcast are counted
apart (``Transport.intra``, the results' ``node_bytes``). ``docs/collectives.md``, "Hierarchical".
"""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..transport import wtime
from .base import CONTINUE, Exchange


class Hierarchical(Exchange):
    """Wraps the inner exchange (built on the leaders only) and the node's broadcast."""

    def __init__(self, inner_cls, nodes, alg, me, x, encode_rng, downlink=None, downlink_rng=None):
        self.nodes, self.alg = nodes, alg
        self.t = nodes.world
        self.name = inner_cls.name
        self.summary = inner_cls.summary
        self.server_everywhere = inner_cls.server_everywhere
        self.carries_control = inner_cls.carries_control
        self.n = nodes.count
        self.me = me
        self.inner = None
        self.alone = nodes.size == 1                     # a node of one rank: nothing moves inside it
        d = x.shape[0]
        self.buf = np.zeros(d + 1)                       # the node's broadcast: iterate, control word
        if nodes.is_leader:
            self.inner = inner_cls(nodes.leaders, alg, list(range(nodes.count)), me, x, encode_rng,
                                   downlink=downlink, downlink_rng=downlink_rng)
            self.x = self.inner.x
        else:
            self.buf[:-1] = x
            self.x = self.buf[:-1]
        self.holds_server = self.inner is not None and self.inner.holds_server
        self.follower = None             # a non-leader's gradient into the node's Reduce (set by the run:
        #                                  hpcgc.run.nodes.NodeRank)
        self._split, self._on_step = True, (lambda: CONTINUE)

    # the run sets these after construction: they belong to the inner exchange
    @property
    def split(self):
        return self._split

    @split.setter
    def split(self, value):
        self._split = value
        if self.inner is not None:
            self.inner.split = value

    @property
    def on_step(self):
        return self._on_step

    @on_step.setter
    def on_step(self, f):
        self._on_step = f
        if self.inner is not None:
            self.inner.on_step = f

    # -- per iteration -----------------------------------------------------------------------------
    def compute(self, ws, x, local, rng) -> None:
        """A leader: the algorithm's worker half on the node's gradient (``local`` is its
        :class:`~hpcgc.run.nodes.NodeProblem`); another rank: its shard's gradient into the Reduce."""
        if self.inner is not None:
            self.inner.compute(ws, x, local, rng)
        else:
            self.follower.worker_compute(ws, x, local, rng)

    def encode(self, ws):
        return self.inner.encode(ws) if self.inner is not None else None

    def exchange(self, msg, ss):
        zero = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        phases = self.inner.exchange(msg, ss) if self.inner is not None else zero
        if self.alone:
            return phases
        buf, nodes = self.buf, self.nodes
        if self.inner is not None:
            buf[:-1] = self.inner.x
            buf[-1] = self.inner.control()
        t0 = wtime()
        if self._split:
            nodes.bcast(buf[-1:])                        # the other ranks wait here for the leaders' exchange
            t1 = wtime()
            nodes.bcast(buf[:-1])
        else:
            t1 = t0
            nodes.bcast(buf)
        t2 = wtime()
        extra, wait_up, up, server, wait_down, down = phases
        if self.inner is not None:                       # the leader's own Bcasts: transfer (it is the root)
            return extra, wait_up, up, server, wait_down, down + (t2 - t0)
        return extra, wait_up, up, server, wait_down + (t1 - t0), down + (t2 - t1)

    def control(self) -> float:
        if self.inner is not None:
            return self.inner.control()
        return float(self.buf[-1])

    # -- everything else belongs to the inner exchange (the leaders) ---------------------------------
    def place_server_state(self, ss) -> None:
        if self.inner is not None:
            self.inner.place_server_state(ss)

    def iterate(self):
        return self.inner.iterate() if self.inner is not None else self.x

    def account(self, bits_model, bits_wire) -> float:
        return self.inner.account(bits_model, bits_wire)

    def down_model_bits(self) -> float:
        return self.inner.down_model_bits()

    def one_time(self, payload, ss) -> dict:
        if self.inner is not None:
            return self.inner.one_time(payload, ss)
        return {"model": np.zeros(self.n), "wire": np.zeros(self.n)}

    def state(self) -> dict:
        return self.inner.state() if self.inner is not None else {}

    def restore(self, state: dict) -> None:
        if self.inner is not None:
            self.inner.restore(state)

    def floor_ops(self, per_iteration, d: int) -> list:
        raise UserError("--floor (hpcgc floor) times the flat collectives; it does not model run.topology = "
                        "'hierarchical' (its two levels): run the floor with run.topology = 'flat'")
