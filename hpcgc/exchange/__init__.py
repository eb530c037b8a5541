"""Exchange strategies (``run.collective``): one file per collective + one line in ``REGISTRY``.

See :mod:`hpcgc.exchange.base` for the interface and each module for its cost model.
:class:`Hierarchical` (``run.topology = "hierarchical"``) is not a collective of its own: it runs
one of these among the node leaders and broadcasts inside each node.
"""
from __future__ import annotations

from ..errors import ConfigError
from .allgather import Allgather
from .allreduce import Allreduce
from .gather import Gather
from .hierarchical import Hierarchical as Hierarchical
from .reduce_scatter import ReduceScatter

REGISTRY = {
    "gather": Gather,
    "allreduce": Allreduce,
    "allgather": Allgather,
    "reduce-scatter": ReduceScatter,
}


def available() -> list[str]:
    return list(REGISTRY)


def get(name: str):
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown run.collective {name!r}; available: {', '.join(REGISTRY)}") from None
