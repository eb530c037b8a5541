"""run.topology = "hierarchical" under a real mpiexec (docs/collectives.md, "Hierarchical").

Nodes are assigned by the test-only setting HPCGC_TEST_RANKS_PER_NODE=k (world rank r on node
r // k, hpcgc/transport/nodes.py), so that 2 nodes × 2 ranks run on one machine.

* one rank per node (k = 1) is the flat run: every dataset and attribute of the results file equal
  bit for bit (hpcgc.results.compare), except what names the topology — the config text, the
  ``topology``/``nodes``/``ranks_per_node``/``node_assignment`` attributes and the ``node_bytes``
  group, which flat runs do not have — under every collective;
* 2 nodes × 2 ranks equal a flat run over 2 ranks whose shards are the nodes' merged shards
  (contiguous partition, equal sizes): same γ, L_max, ω, f*, model bits; iterates to float rounding,
  |x_hier − x_flat| ≤ 1e-12·(1 + |x|) (the node's gradient is ½g₀ + ½g₁ summed by MPI_Reduce, the
  flat rank's is one sum over the merged rows: the order of the additions differs);
* the bytes: inter-node = what the leaders handed to MPI (the per-collective ledger), the other
  ranks none; intra-node = the node's Reduce (8d per iteration from a non-leader) and Bcast
  (8(d + 1) per iteration from the leader) exactly;
* bad input at plan time: one line, exit 2 on every rank, nothing written.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc.results import compare as rc
from hpcgc.results import load
from tests.conftest import run_mpi, show

ITERATIONS = 20
COMMON = f"""
[data]
partition = "contiguous"
sizes = SIZES
[run]
iterations = {ITERATIONS}
eval_every = 10
seed = 3
algorithm = "diana"
compressor = "qsgd:s=2"
topology = "TOPOLOGY"
"""
VARIANTS = """
[[variant]]
label = "diana-qsgd-gather"
run.collective = "gather"

[[variant]]
label = "diana-qsgd-allgather"
run.collective = "allgather"

[[variant]]
label = "diana-qsgd-reduce-scatter"
run.collective = "reduce-scatter"

[[variant]]
label = "dcgd-identity-allreduce"
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"

[[variant]]
label = "ef21-topk-gather-down"
run.algorithm = "ef21"
run.compressor = "topk:k=5"
run.downlink = "topk:k=10"
"""
TOPOLOGY_ONLY = rc.TIMING + ("runs/*@config", "runs/*@topology", "runs/*@nodes", "runs/*@ranks_per_node",
                             "runs/*@node_assignment", "runs/*/node_bytes", "runs/*/node_bytes/*")
"""What a hierarchical file has and a flat one has not (or has otherwise: the config text names the topology)."""


def _experiment(tmp_path, name, topology, sizes, variants=VARIANTS):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'name = "{name}"\n' + COMMON.replace("SIZES", str(sizes)).replace("TOPOLOGY", topology)
                   + variants)
    return cfg


def _run(tmp_path, n, name, topology, sizes, k=None, variants=VARIANTS):
    out = tmp_path / f"{name}.h5"
    env = {"HPCGC_TEST_RANKS_PER_NODE": str(k)} if k else None
    p = run_mpi(n, ["-m", "hpcgc.bench", "--config", str(_experiment(tmp_path, name, topology, sizes, variants)),
                    "-o", str(out)], extra_env=env)
    assert p.returncode == 0, show(p)
    return out


@pytest.fixture(scope="module")
def one_per_node(tmp_path_factory):
    d = tmp_path_factory.mktemp("one_per_node")
    return (_run(d, 2, "flat", "flat", [280, 280]),
            _run(d, 2, "hier", "hierarchical", [280, 280], k=1))


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory):
    d = tmp_path_factory.mktemp("two_by_two")
    return (_run(d, 4, "hier", "hierarchical", [140, 140, 140, 140], k=2),
            _run(d, 2, "flat", "flat", [280, 280]))


def test_one_rank_per_node_is_the_flat_run_bit_for_bit(one_per_node):
    flat, hier = one_per_node
    assert rc.compare(flat, hier, TOPOLOGY_ONLY) == []
    diffs = rc.compare(flat, hier)                  # and the exclusions hide nothing else
    assert diffs and all(any(w in line for w in ("config", "topology", "nodes", "ranks_per_node", "node_assignment",
                                                 "node_bytes")) for line in diffs), diffs
    for run in load(hier):
        assert run.attrs["topology"] == "hierarchical" and run.attrs["nodes"] == 2
        assert np.all(run.node_bytes["intra_sent"] == 0) and np.all(run.node_bytes["intra_received"] == 0)
    assert all(run.attrs["topology"] == "flat" and not run.node_bytes for run in load(flat))


def test_two_nodes_of_two_ranks_equal_flat_over_merged_shards(two_by_two):
    hier, flat = two_by_two
    H = {r.attrs["label"]: r for r in load(hier)}
    F = {r.attrs["label"]: r for r in load(flat)}
    assert set(H) == set(F) and len(H) == 5
    for label, h in H.items():
        f = F[label]
        assert h.status == f.status == "completed", label
        assert h.attrs["n_workers"] == f.attrs["n_workers"] == 2 and h.attrs["nodes"] == 2
        for key in ("gamma", "L_max", "omega", "alpha", "f_star"):   # the theory step counts nodes
            if key in f.attrs:
                assert h.attrs[key] == f.attrs[key], (label, key, h.attrs[key], f.attrs[key])
        np.testing.assert_array_equal(h.workers["samples"], f.workers["samples"])
        np.testing.assert_array_equal(h.workers["rank"], [0, 2])
        tol = 1e-12 * (1.0 + np.abs(f.x_final))
        assert np.all(np.abs(h.x_final - f.x_final) <= tol), (label, np.max(np.abs(h.x_final - f.x_final)))
        np.testing.assert_allclose(h.series["loss"], f.series["loss"], rtol=1e-12)
        np.testing.assert_array_equal(h.series["bits_up_model"], f.series["bits_up_model"])
        np.testing.assert_array_equal(h.series["bits_up_wire"], f.series["bits_up_wire"])


def test_inter_node_bytes_are_the_leaders_and_intra_node_counted_apart(two_by_two):
    hier, _ = two_by_two
    for run in load(hier):
        nb, d = run.node_bytes, int(run.attrs["d"])
        uplink = ("Gather", "Gatherv", "Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv")
        sent = sum(np.asarray(v) for v in run.mpi_bytes.values())
        np.testing.assert_array_equal(nb["inter_sent"], sent)          # = the per-collective ledger
        assert np.all(nb["inter_sent"][:, [1, 3]] == 0) and np.all(nb["inter_received"][:, [1, 3]] == 0)
        assert np.all(nb["inter_sent"][-1, [0, 2]] > 0)
        # the node's bits: what its leader handed to the uplink collectives
        up = sum(np.asarray(run.mpi_bytes[c]) for c in uplink if c in run.mpi_bytes)
        np.testing.assert_array_equal(run.series["bits_up_wire"], 8 * up[:, [0, 2]])
        np.testing.assert_array_equal(run.series["bits_received_wire"], 8 * nb["inter_received"][:, [0, 2]])
        np.testing.assert_array_equal(run.workers["sender_bytes_up"], up[-1, [0, 2]])
        it = np.asarray(run.series["iteration"], dtype=float)[:, None]
        np.testing.assert_array_equal(nb["intra_sent"], it * [8 * (d + 1), 8 * d, 8 * (d + 1), 8 * d])
        np.testing.assert_array_equal(nb["intra_received"], it * [8 * d, 8 * (d + 1), 8 * d, 8 * (d + 1)])


BAD = [
    (["--set", "run.algorithm=marina", "--set", "run.topology=hierarchical"], {},
     "run.topology = 'hierarchical' cannot run algorithm 'marina'"),
    (["--set", "run.topology=hierarchical"], {"HPCGC_TEST_RANKS_PER_NODE": "3"},
     "HPCGC_TEST_RANKS_PER_NODE=3 (the test-only node assignment) must be a whole number >= 1 that divides"),
]


@pytest.mark.parametrize("args,env,needle", BAD, ids=["algorithm", "ranks-per-node"])
def test_bad_input_one_line_every_rank_nothing_written(tmp_path, args, env, needle):
    p = run_mpi(2, ["-m", "hpcgc.bench", *args, "-o", str(tmp_path / "bad.h5")], timeout=180, extra_env=env)
    assert p.returncode == 2, show(p)
    errors = [line for line in p.stderr.splitlines() if line.startswith("hpcgc: error:")]
    assert len(errors) == 1 and needle in errors[0], show(p)
    assert "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []
