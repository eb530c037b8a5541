"""The job's ranks grouped by node (part of the transport: the only code that calls MPI).

:func:`split_by_node` — the node communicator of every rank (``MPI_Comm_split_type`` with
``MPI.COMM_TYPE_SHARED``: the ranks that can share memory, which MPICH decides from its launcher's
placement — one hydra proxy per host; on the emulated cluster one per network namespace,
``docs/emulated-cluster.md``) and the node leaders' communicator (rank 0 of each node). Used by the
collectives benchmark to measure the intra-node and inter-node α, β apart (``docs/collectives.md``),
and by ``run.topology = "hierarchical"`` (:class:`Nodes`).

:class:`Nodes` — a run's node structure under ``run.topology = "hierarchical"``: the leaders' run
collective goes through a :class:`~.core.Transport` on the leaders' communicator (world rank 0 is
leader 0, the root of ``gather``; nodes are numbered by their leader's world rank), and inside a
node only two operations move bytes, both uncompressed, both in the node's own ledger
(``Transport.intra``: bytes sent, bytes received), never in the per-collective ledgers of the
inter-node traffic:

* :meth:`Nodes.reduce_sum` — ``MPI_Reduce`` (SUM) of a float64 vector onto the leader (a non-leader
  sends its vector; the leader receives the sum, counted once, as an Allreduce result is);
* :meth:`Nodes.bcast` — ``MPI_Bcast`` from the leader (counted at the leader as sent, at every other
  rank as received).

With one rank per node neither is issued: a node of one rank is the flat run's rank.

**Test-only node assignment** (``HPCGC_TEST_RANKS_PER_NODE=k``): :class:`Nodes` splits the world
by ``rank // k`` instead of by shared memory, so that CI can run 2 nodes × 2 ranks on one machine
without an emulated cluster. It is for tests: on a real cluster the nodes are the hosts.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..errors import UserError
from .core import Transport

TEST_RANKS_PER_NODE = "HPCGC_TEST_RANKS_PER_NODE"
"""Environment variable of the test-only node assignment (world rank r on node r // k)."""
SENT, RECEIVED = 0, 1


@dataclass
class NodeSplit:
    """This rank's place in the job's nodes.

    ``node``: the communicator of this rank's node (ranks ordered as in the parent communicator);
    ``leaders``: the communicator of the node leaders (node rank 0 of each node, ordered by their
    rank in the parent, so the parent's rank 0 is leader 0), ``None`` on the other ranks;
    ``node_index``: this rank's node, 0 … nodes − 1 (the leaders' order); ``sizes``: the ranks of
    each node, by node index."""

    node: object
    leaders: object | None
    node_index: int
    sizes: tuple

    @property
    def nodes(self) -> int:
        return len(self.sizes)

    @property
    def ranks_per_node(self) -> int:
        """The ranks of every node when all nodes have the same number, else 0."""
        return self.sizes[0] if len(set(self.sizes)) == 1 else 0

    @property
    def is_leader(self) -> bool:
        return self.leaders is not None

    def wait_node(self, poll_s: float = 0.002):
        """A barrier of the node's ranks in which a waiting rank sleeps between tests of a
        non-blocking barrier (``MPI_Ibarrier``) instead of spinning in MPI's progress loop: the ranks
        that have nothing to do while their leader works leave the (shared) cores to it."""
        req = self.node.Ibarrier()
        while not req.Test():
            time.sleep(poll_s)

    def free(self):
        """Release the two communicators (collective over the parent's ranks' node communicators)."""
        if self.leaders is not None:
            self.leaders.Free()
            self.leaders = None
        if self.node is not None:
            self.node.Free()
            self.node = None


def split_by_node(comm=None, ranks_per_node: int | None = None) -> NodeSplit:
    """Split ``comm`` (default ``MPI.COMM_WORLD``) by shared-memory node; collective over ``comm``.
    ``ranks_per_node = k`` (tests only, :data:`TEST_RANKS_PER_NODE`): rank r on node r // k instead."""
    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()
    node = (comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank) if ranks_per_node is None
            else comm.Split(rank // ranks_per_node, key=rank))
    leader = node.Get_rank() == 0
    leaders = comm.Split(0 if leader else MPI.UNDEFINED, key=rank)
    if leaders == MPI.COMM_NULL:
        leaders = None
    index = node.bcast(leaders.Get_rank() if leader else None, root=0)
    table = comm.allgather((index, node.Get_size()))
    sizes = tuple(size for _, size in sorted(set(table)))
    return NodeSplit(node, leaders, int(index), sizes)


def ranks_per_node_setting(size: int) -> int | None:
    """k of ``HPCGC_TEST_RANKS_PER_NODE`` (None when unset or empty); UserError (one line) when it
    is not a whole number ≥ 1 that divides the world's ``size``."""
    text = os.environ.get(TEST_RANKS_PER_NODE, "").strip()
    if not text:
        return None
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 1 or size % k:
        raise UserError(f"{TEST_RANKS_PER_NODE}={text} (the test-only node assignment) must be a whole number "
                        f">= 1 that divides the number of MPI ranks ({size})")
    return k


class Nodes:
    """This rank's node, its leader and the leaders' transport (collective: every rank builds it)."""

    def __init__(self, world: Transport):
        k = ranks_per_node_setting(world.size)
        split = split_by_node(world.comm, k)
        self.assignment = ("shared memory (MPI_COMM_TYPE_SHARED)" if k is None else
                           f"test-only: world rank // {k} ({TEST_RANKS_PER_NODE})")
        self.world, self.local = world, split.node
        self.size = self.local.Get_size()                # ranks on this node
        self.is_leader = split.is_leader
        self.leaders = None
        if self.is_leader:
            self.leaders = Transport(split.leaders)
            self.leaders.ledger, self.leaders.received = world.ledger, world.received   # one ledger per rank
        self.index, self.count = split.node_index, split.nodes
        self.node_of = np.asarray(world.comm.allgather(self.index))    # world rank → node (set-up)
        self.leader_ranks = [int(np.flatnonzero(self.node_of == i)[0]) for i in range(self.count)]
        self.ranks_per_node = np.asarray(split.sizes, dtype=np.int64)

    @classmethod
    def of(cls, world: Transport) -> Nodes:
        """The world's node structure, made once per process (collective the first time)."""
        got = getattr(world, "_nodes", None)
        if got is None:
            got = world._nodes = cls(world)
        return got

    def reduce_sum(self, vec: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
        """``MPI_Reduce`` (SUM) of the contiguous float64 ``vec`` onto the leader (``out``, the
        leader's; None elsewhere). Intra-node ledger: a non-leader's ``vec.nbytes`` sent, the
        leader's ``out.nbytes`` received."""
        intra = self.world.intra
        if self.is_leader:
            self.local.Reduce(vec, out, op=MPI.SUM, root=0)
            intra[RECEIVED] += out.nbytes
            return out
        self.local.Reduce(vec, None, op=MPI.SUM, root=0)
        intra[SENT] += vec.nbytes
        return None

    def bcast(self, buf: np.ndarray) -> np.ndarray:
        """``MPI_Bcast`` of ``buf`` from the leader to the node's ranks (intra-node ledger); the world
        transport yielding (``run.wait``): ``MPI_Ibcast`` completed by :meth:`Transport.idle` — a
        non-leader waits here for its leader's exchange."""
        self.world.waiting(self.local, "Bcast", buf, root=0)
        self.world.intra[SENT if self.is_leader else RECEIVED] += buf.nbytes
        return buf

    def gather_object(self, obj):
        """Set-up only (pickled, not in any ledger): every rank's ``obj`` to the leader, in node order."""
        return self.local.gather(obj, root=0)
