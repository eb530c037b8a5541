"""A run under ``run.topology = "hierarchical"``: the algorithm's workers are the nodes.

The data stay split among the ranks as in the flat run (same shards, same objective
f = Σ_r w_r f_r, same f*); what changes is who makes the messages. Node j's leader is worker j of
the algorithm, with

* aggregation weight W_j = Σ_{r ∈ node j} w_r (w_r: the flat run's weight of rank r — 1/P, or
  DAGC's m_r/M), so that Σ_j W_j g_j = Σ_r w_r g_r: the same aggregate as the flat run;
* gradient g_j = Σ_{r ∈ node j} (w_r / W_j)·∇f_r(x), summed uncompressed by the node's ranks in an
  ``MPI_Reduce`` onto the leader (:class:`NodeProblem`; the other ranks: :class:`NodeRank`) — the
  gradient of the node's merged shard whenever the weights are proportional to the rows (equal
  shards, or DAGC's m_r/M);
* smoothness L_j of that merged objective (the leader gathers the node's shards once at set-up
  and computes it as a flat worker holding the merged shard would), samples Σ m_r, and the node's
  label histogram.

So everything the theory steps and allocations count per worker counts per node: n = the number
of nodes in ω/n, L_max = max_j L_j, DAGC's allocation over the nodes' sample counts
(``docs/methods.md``, "Hierarchical exchanges").
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import UserError
from ..models import MODEL_KINDS
from ..problems import Objective


class NodeProblem:
    """The leader's view of its node's objective: ``grad`` sums the node's scaled shard gradients
    (the other ranks call :meth:`NodeRank.worker_compute` at the same time); ``smoothness`` is the
    merged shard's constant, computed at set-up."""

    def __init__(self, local, nodes, share: float, L: float):
        self.local, self.nodes, self.share, self.L = local, nodes, float(share), float(L)
        self.kind, self.d = local.kind, local.d

    def grad(self, x, rows=None):
        g = self.local.grad(x, rows)
        if self.share != 1.0:
            np.multiply(g, self.share, out=g)
        return self.nodes.reduce_sum(g, np.empty_like(g))

    def smoothness(self) -> float:
        return self.L


class NodeRank:
    """What the exchange computes on a node's non-leader rank (``Hierarchical.compute``): the gradient
    of its shard at the broadcast iterate, scaled by its share, sent into the node's Reduce."""

    FOLLOWER = object()
    """The loop's worker state on such a rank (it has none: the node's state is on its leader)."""

    def __init__(self, local, nodes, share: float):
        self.local, self.nodes, self.share = local, nodes, float(share)

    def worker_compute(self, ws, x, local, rng):
        g = self.local.grad(x)
        if self.share != 1.0:
            np.multiply(g, self.share, out=g)
        self.nodes.reduce_sum(g, None)


def node_setup(setup, nodes, rank_weights: np.ndarray, kind: str):
    """(the node-level Setup, this rank's share w_r / W_j, node weights W) — collective. The Setup's
    workers are the nodes (``worker_ranks``: the leaders' world ranks); on a leader ``local`` is its
    :class:`NodeProblem`, on another rank its own shard's objective."""
    if setup.worker_ranks != list(range(nodes.world.size)):
        raise UserError("run.topology = 'hierarchical' needs every rank to be a worker (run.server = 'worker')")
    node_of = nodes.node_of
    W = np.bincount(node_of, weights=rank_weights, minlength=nodes.count)
    me = nodes.world.rank
    share = float(rank_weights[me] / W[node_of[me]])
    L_node, error = 0.0, None
    local = setup.local
    parts = None
    try:
        if kind not in MODEL_KINDS and local is not None:
            parts = nodes.gather_object((local.A, local.y, local.w * share)) if nodes.size > 1 else None
            L_node = _merged(kind, local, parts).smoothness() if nodes.is_leader else 0.0
    except (UserError, ValueError, ArithmeticError, MemoryError) as exc:
        error = exc if not isinstance(exc, MemoryError) else UserError("not enough memory for a node's merged shard")
    parts = None
    nodes.world.agree(error)
    L_max = nodes.world.allreduce_max(L_node)
    L_all = nodes.world.gather_rows(np.array([L_node]))
    hist = None
    if setup.label_hist is not None:
        hist = np.array([setup.label_hist[node_of == j].sum(axis=0) for j in range(nodes.count)])
    if nodes.is_leader:
        local = NodeProblem(local, nodes, share, L_node) if nodes.size > 1 else local
    view = dataclasses.replace(
        setup, n_workers=nodes.count, worker_ranks=list(nodes.leader_ranks),
        samples=np.bincount(node_of, weights=setup.samples, minlength=nodes.count).astype(setup.samples.dtype),
        label_hist=hist, local=local, L_max=L_max,
        L_local=None if L_all is None else L_all[nodes.leader_ranks, 0])
    return view, share, W


def _merged(kind: str, local, parts) -> Objective:
    """The node's merged objective (leader): its ranks' rows in rank order, each row weighted by
    its rank's share times its weight in the rank's shard."""
    if parts is None:
        return local
    As, ys, ws = zip(*parts)
    if hasattr(As[0], "tocsr"):
        import scipy.sparse as sp
        A = sp.vstack(As, format="csr")
    else:
        A = np.vstack(As)
    return Objective(kind, A, np.concatenate(ys), np.concatenate(ws), local.l2, local.l1)
