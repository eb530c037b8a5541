"""hpcgc.transport.split_by_node under mpiexec -n 4 on one machine: MPI's shared-memory split gives one
node of every rank, whose leader is rank 0 (the emulated cluster's 2 nodes x 2 ranks are checked in
tests/test_emulated_cluster.py)."""
from __future__ import annotations

import pytest
from mpi4py import MPI

from hpcgc.transport import split_by_node

pytestmark = pytest.mark.mpi(min_size=2)
comm = MPI.COMM_WORLD


def test_one_machine_is_one_node():
    s = split_by_node()
    try:
        assert s.nodes == 1 and s.sizes == (comm.size,) and s.ranks_per_node == comm.size
        assert s.node_index == 0 and s.node.Get_size() == comm.size and s.node.Get_rank() == comm.rank
        assert s.is_leader == (comm.rank == 0)
        if s.is_leader:
            assert s.leaders.Get_size() == 1
        s.wait_node()
    finally:
        s.free()
    assert s.node is None and s.leaders is None
