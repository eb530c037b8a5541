"""``run.wait`` under a real mpiexec -n 4: a run whose waiting ranks yield (the non-blocking
collectives completed by test-and-sleep, ``Transport.idle``) gives the same results file as the
spinning run — iterates, bits, byte ledgers, every series and attribute but the config text (which
names the setting) and ``wait_mode`` — under every collective, with the phases split or not, a
compressed downlink, a dedicated server, ``run.overlap`` and the hierarchical topology; and
``"auto"`` yields exactly when a host runs more of the job's ranks than the CPUs they may use."""
from __future__ import annotations

import os

import pytest
from mpi4py import MPI

from hpcgc.results.compare import compare
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
BASE = {"run.iterations": 20, "run.eval_every": 10, "problem.l2": 0.1, "run.checkpoint_every": 0}
MLP = {"data.dataset": "digits", "data.partition": "iid", "problem.kind": "mlp", "problem.hidden": 24,
       "problem.depth": 2, "problem.l2": 1e-4, "run.learning_rate": 0.05, "run.batch": 32, "run.iterations": 12,
       "run.eval_every": 4, "run.seed": 3, "run.overlap": True}
CASES = {
    "gather": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2"},
    "gather-one-bcast": {"run.algorithm": "dcgd", "run.compressor": "randk:k=6", "run.wait_phases": False},
    "gather-downlink": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.downlink": "randk:k=10"},
    "dedicated-server": {"run.algorithm": "diana", "run.compressor": "randk:k=6", "run.server": "dedicated"},
    "allgather": {"run.algorithm": "diana", "run.compressor": "randk:k=6", "run.collective": "allgather"},
    "allreduce": {"run.algorithm": "dcgd", "run.compressor": "identity", "run.collective": "allreduce"},
    "reduce-scatter": {"run.algorithm": "diana", "run.compressor": "qsgd:s=4", "run.collective": "reduce-scatter"},
    "overlap-allreduce": {**MLP, "run.algorithm": "dcgd", "run.compressor": "identity", "run.collective": "allreduce"},
    "overlap-gather": {**MLP, "run.algorithm": "diana", "run.compressor": "randk:k=200", "run.collective": "gather"},
    "hierarchical": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.topology": "hierarchical",
                     "data.partition": "contiguous"},
}


def differences(a, b) -> list[str]:
    """The results files' differences other than the config text (which names run.wait), on every rank."""
    diffs = compare(a, b) if comm.rank == 0 else None
    return [line for line in comm.bcast(diffs) if "attribute config:" not in line]


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_yield_gives_the_spinning_runs_results(shared_dir, case, monkeypatch):
    if case == "hierarchical":
        monkeypatch.setenv("HPCGC_TEST_RANKS_PER_NODE", "2")     # 2 nodes × 2 ranks (tests/test_hierarchical_mpi.py)
    over = {**BASE, **CASES[case]}
    spin, _, _, ts = run_experiment(shared_dir / "spin.h5", {**over, "run.wait": "spin"}, name="wait")
    assert not ts.yielding
    got, runs, _, ty = run_experiment(shared_dir / "yield.h5", {**over, "run.wait": "yield"}, name="wait")
    assert ty.yielding                                   # the run waited in the non-blocking collectives
    assert spin[0].status == got[0].status == "completed", (spin[0].attrs["stop_reason"], got[0].attrs["stop_reason"])
    assert spin[0].attrs["wait_mode"] == "spin" and got[0].attrs["wait_mode"] == "yield"
    assert 'wait = "yield"' in got[0].attrs["config"]
    assert differences(shared_dir / "spin.h5", shared_dir / "yield.h5") == []
    assert int(got[0].attrs["iterations_done"]) == int(spin[0].attrs["iterations_done"]) == over["run.iterations"]


def test_auto_yields_when_a_host_has_more_ranks_than_cpus(shared_dir):
    """The expected mode from this test's own count: ranks per kernel (boot id) against the union of
    their affinity masks."""
    with open("/proc/sys/kernel/random/boot_id") as fh:
        host = fh.read().strip()
    rows = comm.allgather((host, sorted(os.sched_getaffinity(0))))
    crowded = any(sum(h == host for h, _ in rows) > len({c for h, cpus in rows if h == host for c in cpus})
                  for host in {h for h, _ in rows})
    res, _, _, t = run_experiment(shared_dir / "auto.h5", {**BASE, "run.algorithm": "diana",
                                                          "run.compressor": "qsgd:s=2", "run.wait": "auto"},
                                  name="wait")
    assert res[0].attrs["wait_mode"] == ("yield" if crowded else "spin")
    assert t.yielding == crowded
    assert 'wait = "auto"' in res[0].attrs["config"]
