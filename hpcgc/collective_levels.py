"""The two levels of ``python -m hpcgc.bench collectives`` on a job with several ranks per node.

When the job's ranks sit on two or more nodes with two or more ranks each (MPI's shared-memory
split, :func:`hpcgc.transport.split_by_node`), the benchmark measures, after the sweep on all ranks,
the same collectives at each level of a hierarchical exchange (``docs/collectives.md``):

* ``intra``: on each node's communicator (its K ranks, shared memory), every node at once — as the
  intra-node reduce and broadcast of a hierarchical exchange run; min / avg / max over all ranks of
  all nodes (every node's ranks time their own communicator);
* ``inter``: on the node leaders' communicator (one rank per node, the network), the other ranks
  idle.

Each level gets its own α–β fit (:func:`hpcgc.collectives.fit_alpha_beta`); the file stores them
under ``levels/intra`` and ``levels/inter`` (:func:`hpcgc.results.write_collectives`), and
``hpcgc breakeven`` turns them into the α, β of the hierarchical cost model
(``docs/cost-models.md``).
"""
from __future__ import annotations

import numpy as np

LEVELS = ("intra", "inter")
DESCRIBE_LEVEL = {
    "intra": "each node's communicator (MPI_Comm_split_type COMM_TYPE_SHARED: its ranks share memory), "
             "every node at once; min/avg/max over all ranks of all nodes",
    "inter": "the node leaders' communicator (node rank 0 of each node: one rank per node, over the network); "
             "the other ranks idle",
}


def wanted(split) -> bool:
    """Two levels to measure: at least 2 nodes, every node with the same number (≥ 2) of ranks."""
    return split.nodes >= 2 and split.ranks_per_node >= 2


def combine(per_rank: list) -> dict:
    """The intra-node sweep of every node → one table: ``per_rank`` is every rank's (node index,
    columns) with columns as :func:`hpcgc.collectives.sweep_one` returns them (the node's min / avg /
    max over its ranks, the same on each of its ranks). min = the smallest node min, max = the largest
    node max, avg = the mean of the node averages (nodes have equal rank counts: the mean over all
    ranks), iterations = the fewest any node timed."""
    nodes = {}
    for index, cols in per_rank:
        nodes.setdefault(index, cols)
    tabs = [nodes[i] for i in sorted(nodes)]
    size = tabs[0]["size"]
    for tb in tabs[1:]:
        if not np.array_equal(tb["size"], size):
            raise RuntimeError("collectives: the nodes measured different message sizes")
    stack = {k: np.stack([tb[k] for tb in tabs]) for k in ("avg", "min", "max", "iterations")}
    return {"size": size, "avg": stack["avg"].mean(axis=0), "min": stack["min"].min(axis=0),
            "max": stack["max"].max(axis=0), "iterations": stack["iterations"].min(axis=0).astype(np.int64)}


def measure_levels(t, kinds, sweep) -> dict:
    """Every rank: split by node (MPI's shared-memory split; the test-only ``HPCGC_TEST_RANKS_PER_NODE=k``
    assigns rank r to node r // k, as it does for runs); when :func:`wanted`, sweep each of ``kinds`` on each level with
    ``sweep(transport, kind)`` (the benchmark's own sweep of one collective on a
    :class:`hpcgc.transport.Transport`, returning its columns) → on rank 0 ``{None: {nodes,
    ranks_per_node, node_sizes}, level: ({ranks, communicator}, [(kind, columns)])}``, where the
    intra-node columns are every node's combined (:func:`combine`); ``{}`` on the other ranks."""
    from .transport import Transport, ranks_per_node_setting, split_by_node
    split = split_by_node(t.comm, ranks_per_node_setting(t.size))    # HPCGC_TEST_RANKS_PER_NODE: tests only
    out = {None: {"nodes": split.nodes, "ranks_per_node": split.ranks_per_node,
                  "node_sizes": list(split.sizes)}}
    if not wanted(split):
        split.free()
        return out if t.is_root else {}
    levels = {"intra": (Transport(split.node), split.ranks_per_node),
              "inter": (Transport(split.leaders) if split.is_leader else None, split.nodes)}
    try:
        for level in LEVELS:
            lt, ranks = levels[level]
            swept = []
            for kind in kinds:
                cols = sweep(lt, kind) if lt is not None else None
                if level == "intra":
                    gathered = t.gather_object((split.node_index, cols))
                    cols = combine(gathered) if t.is_root else None
                swept.append((kind, cols))
            if t.is_root:
                out[level] = ({"ranks": ranks, "communicator": DESCRIBE_LEVEL[level]}, swept)
        split.wait_node()          # the idle ranks sleep (not spin in MPI) until their leader is done
    finally:
        split.free()
    return out if t.is_root else {}
