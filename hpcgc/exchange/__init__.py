"""Exchange strategies (``run.collective``): one file per collective + one line in ``REGISTRY``.

See :mod:`hpcgc.exchange.base` for the interface and each module for its cost model.
"""
from __future__ import annotations

from ..errors import ConfigError
from .allgather import Allgather
from .allreduce import Allreduce
from .gather import Gather
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
