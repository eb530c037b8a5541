"""The job's ranks grouped by node (part of the transport: the only code that calls MPI).

:func:`split_by_node` — the node communicator of every rank (``MPI_Comm_split_type`` with
``MPI.COMM_TYPE_SHARED``: the ranks that can share memory, which MPICH decides from its launcher's
placement — one hydra proxy per host; on the emulated cluster one per network namespace,
``docs/emulated-cluster.md``) and the node leaders' communicator (rank 0 of each node). Used by the
collectives benchmark to measure the intra-node and inter-node α, β apart (``docs/collectives.md``).
Set-up only (pickling collectives are fine here); nothing on a hot path.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from mpi4py import MPI


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


def split_by_node(comm=None) -> NodeSplit:
    """Split ``comm`` (default ``MPI.COMM_WORLD``) by shared-memory node; collective over ``comm``."""
    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    leader = node.Get_rank() == 0
    leaders = comm.Split(0 if leader else MPI.UNDEFINED, key=rank)
    if leaders == MPI.COMM_NULL:
        leaders = None
    index = node.bcast(leaders.Get_rank() if leader else None, root=0)
    table = comm.allgather((index, node.Get_size()))
    sizes = tuple(size for _, size in sorted(set(table)))
    return NodeSplit(node, leaders, int(index), sizes)
