"""run.topology = "hierarchical" without MPI: the plan-time refusals, the test-only node assignment's
parsing, and the summary / report columns of inter- and intra-node bytes. The runs themselves:
tests/test_hierarchical_mpi.py (real mpiexec)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import algorithms, config
from hpcgc.analysis.tables import node_bytes
from hpcgc.errors import UserError
from hpcgc.run.finish import RunSummary
from hpcgc.run.setup import check
from hpcgc.summary import summary_table
from hpcgc.transport import TEST_RANKS_PER_NODE, ranks_per_node_setting


def _cfg(**run):
    cfg = config.defaults()
    cfg["run"].update(topology="hierarchical", **run)
    return cfg


def test_two_level_algorithms_are_exactly_those_with_one_gradient_at_x():
    two = sorted(k for k, (c, _) in algorithms.REGISTRY.items() if c.two_level)
    assert two == ["dcgd", "dgc", "diana", "ef", "ef21", "ef21-sgdm"]


@pytest.mark.parametrize("collective,alg,spec", [("gather", "diana", "qsgd:s=2"), ("allgather", "dcgd", "qsgd:s=2"),
                                                 ("allreduce", "diana", "identity"),
                                                 ("reduce-scatter", "ef21", "topk:k=3"), ("gather", "ef", "topk:k=3")])
def test_every_collective_runs_in_two_levels(collective, alg, spec):
    assert check(_cfg(collective=collective, algorithm=alg, compressor=spec)) == []


@pytest.mark.parametrize("alg,spec", [("marina", "qsgd:s=2"), ("vr-diana", "qsgd:s=2"), ("adiana", "qsgd:s=2"),
                                      ("local-sgd", "topk:k=3"), ("diana+", "qsgd:s=2"),
                                      ("diloco", "identity"), ("dasha", "randk:k=3")])
def test_other_algorithms_refused_in_one_line_naming_those_that_can(alg, spec):
    extra = {"batch": 8} if alg == "vr-diana" else {}
    msgs = [m for m in check(_cfg(algorithm=alg, compressor=spec, **extra)) if "topology" in m]
    assert msgs and f"cannot run algorithm {alg!r}" in msgs[0] and "dcgd, dgc, diana, ef, ef21, ef21-sgdm" in msgs[0]
    assert "\n" not in msgs[0]


def test_batch_and_dedicated_server_refused():
    (msg,) = check(_cfg(algorithm="diana", compressor="qsgd:s=2", batch=4))
    assert "run.batch = 0" in msg
    (msg,) = check(_cfg(algorithm="diana", compressor="qsgd:s=2", server="dedicated"))
    assert "run.server = 'worker'" in msg


def test_unknown_topology_is_a_config_error():
    with pytest.raises(UserError, match="run.topology"):
        config.merge(config.defaults(), {"run": {"topology": "ring"}}, "test")


def test_the_test_only_ranks_per_node_setting(monkeypatch):
    monkeypatch.delenv(TEST_RANKS_PER_NODE, raising=False)
    assert ranks_per_node_setting(4) is None
    monkeypatch.setenv(TEST_RANKS_PER_NODE, "2")
    assert ranks_per_node_setting(4) == 2
    for bad in ("3", "0", "two"):
        monkeypatch.setenv(TEST_RANKS_PER_NODE, bad)
        with pytest.raises(UserError, match="must be a whole number >= 1 that divides the number of MPI ranks"):
            ranks_per_node_setting(4)


def test_summary_shows_inter_and_intra_node_megabytes():
    s = RunSummary(run_id="000-x", algorithm="diana", compressor="qsgd:s=2", collective="gather",
                   status="completed", stop_reason="iterations", iterations=10, suboptimality=0.1, mb_up=0.5,
                   phase_ms={}, median_iter_ms=1.0, wire_over_model=1.5, mb_inter=1.25, mb_intra=2.5,
                   topology="hierarchical")
    table = summary_table([s])
    head = next(line for line in table.splitlines() if line.startswith("run "))
    row = table.splitlines()[table.splitlines().index(head) + 2].split()
    assert head.split()[-2:] == ["inter(MB)", "intra(MB)"] and row[-2:] == ["1.2500", "2.5000"]


class _Run:
    def __init__(self, mpi_bytes, node=None):
        self.mpi_bytes, self.node_bytes = mpi_bytes, node or {}


def test_report_columns_flat_is_all_inter_hierarchical_reads_node_bytes():
    flat = _Run({"Gatherv": np.array([[0.0, 0.0], [10.0, 5.0]]), "Bcast": np.array([[0.0, 0.0], [7.0, 0.0]])})
    assert node_bytes(flat) == (22.0, 0.0)
    nb = {k: np.array([[0.0] * 4, v]) for k, v in (("inter_sent", [3.0, 0, 4, 0]), ("inter_received", [1.0, 0, 1, 0]),
                                                   ("intra_sent", [5.0, 6, 5, 6]), ("intra_received", [6.0, 5, 6, 5]))}
    assert node_bytes(_Run({}, nb)) == (7.0, 22.0)
    assert math.isnan(node_bytes(_Run({}))[0])
