"""MPI transport: the only module of hpcgc that calls MPI.

The collectives a run uses (``run.collective``, :mod:`hpcgc.exchange`) are, per iteration:

* ``gather`` (parameter server): ``Gather`` of each rank's payload length (one 4-byte ``int32``)
  and ``Gatherv`` of the payloads (``uint8``, zero-length allowed) to rank 0, then ``Bcast`` of
  the new iterate (``float64``, plus one control word) from rank 0 — or, with a compressed
  downlink (``run.downlink``), ``Bcast`` of an 8-byte header (length, control word) and ``Bcast``
  of the downlink payload (``uint8``);
* ``allgather``: ``Allgather`` of the lengths and ``Allgatherv`` of the payloads to every rank;
* ``allreduce``: ``Allreduce`` (SUM) of a float32/float64 vector, once per round of the message;
  the 16-bit casts sum in their own type — float16 as ``MPI_FLOAT16_T`` (MPICH reduces it natively),
  bfloat16 with a user-defined SUM on 16-bit words (``MPI.BFLOAT16_T`` is the null datatype in
  MPICH 5.0.2: :func:`reduction`) — and ``int8`` sends one float32 MAX and an ``MPI_INT8_T`` SUM.
* ``reduce-scatter``: ``Alltoall`` of the per-destination payload lengths and ``Alltoallv`` of the
  compressed segments (``uint8``), then ``Allgather`` of the reduced segment's length and
  ``Allgatherv`` of the compressed reduced segments.

Only buffer (upper-case) mpi4py methods are used on these hot paths; pickling methods appear only
in set-up and tear-down helpers. The transport keeps a *sender-side* ledger, per collective, of
every byte this rank handed to MPI (``ledger``), so the bit counts in the results file can be
checked against what really went through the network rather than against a formula, and a
*receiver-side* ledger (``received``) of the bytes MPI delivered into this rank's receive buffers
from *other* ranks (a rank's own contribution to a Gatherv/Allgatherv/Alltoallv is not counted;
an Allreduce counts its result vector, a Bcast counts at the non-root ranks).

Also here: per-rank phase timers on ``MPI.Wtime`` and the error agreement that lets every rank
exit cleanly (non-zero, no hang) when any rank hits a user error during set-up. The package's other
modules are the transport too (the only code that calls MPI): :mod:`.reductions` (the MPI datatype and
operation of each Allreduce wire type, incl. the user-defined bfloat16 SUM), :mod:`.timer` (the
timed primitives of the ``collectives`` micro-benchmark and of ``bench floor``), :mod:`.waiting`
(test-and-sleep completion of a started request: ``quiet_barrier`` and ``run.wait = "yield"``, in
which the collectives where a rank waits for another's computation run in their non-blocking
form, ``Transport.yielding``) and :mod:`.nodes`
(:func:`split_by_node`: the node and node-leader communicators, ``MPI_Comm_split_type``; :class:`Nodes`:
``run.topology = "hierarchical"``'s node Reduce and Bcast, the leaders' transport, the test-only
node assignment ``HPCGC_TEST_RANKS_PER_NODE``).
"""
from __future__ import annotations

from .core import (
                   DOWN_HEADER_BYTES,
                   LEDGER,
                   LENGTH_BYTES,
                   PHASES,
                   ROOT,
                   RankOrderedJIT,
                   Transport,
                   processor_name,
                   wtime,
)
from .nodes import TEST_RANKS_PER_NODE, Nodes, NodeSplit, ranks_per_node_setting, split_by_node
from .reductions import library_version, reduction
from .timer import COLLECTIVES, MORE_COLLECTIVES, CollectiveTimer

__all__ = ["COLLECTIVES", "DOWN_HEADER_BYTES", "LEDGER", "LENGTH_BYTES", "MORE_COLLECTIVES", "PHASES", "ROOT",
           "TEST_RANKS_PER_NODE", "CollectiveTimer", "NodeSplit", "Nodes", "RankOrderedJIT", "Transport",
           "library_version", "processor_name", "ranks_per_node_setting", "reduction", "split_by_node", "wtime"]
