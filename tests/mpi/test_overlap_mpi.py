"""``run.overlap`` under a real mpiexec -n 4: the MLP's per-layer Iallreduce started inside the
backward pass gives the same iterates, bits and ledgers as the blocking Allreduce of the whole
vector — the two results files compared field by field (hpcgc.results.compare), every difference
but the config text and ``overlap_buckets`` a failure — for DCGD (float32), DIANA (fp16) and EF
(bf16); the bytes handed to MPI are the buckets' sizes; the phases record the hidden time; a
one-layer problem warns and runs as without overlap."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.results.compare import compare
from hpcgc.transport import LEDGER
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD
BASE = {"data.dataset": "digits", "data.partition": "iid", "problem.kind": "mlp", "problem.hidden": 24,
        "problem.depth": 2, "problem.l2": 1e-4, "run.collective": "allreduce", "run.learning_rate": 0.05,
        "run.batch": 32, "run.iterations": 12, "run.eval_every": 4, "run.seed": 3}
EXPECTED = {"config", "overlap_buckets"}
"""The only attributes that may differ: the run's config text (run.overlap) and the bucket count."""


@pytest.mark.parametrize("alg, spec", [("dcgd", "identity"), ("diana", "identity:fp16"), ("ef", "identity:bf16")])
def test_overlap_gives_the_same_iterates_bits_and_ledgers(shared_dir, alg, spec):
    over = {**BASE, "run.algorithm": alg, "run.compressor": spec}
    off, _, s_off, _ = run_experiment(shared_dir / "off.h5", {**over, "run.overlap": False}, name="overlap")
    on, runs, s_on, t = run_experiment(shared_dir / "on.h5", {**over, "run.overlap": True}, name="overlap")
    assert off[0].status == on[0].status == "completed"
    assert on[0].attrs["overlap_buckets"] == 3 and off[0].attrs["overlap_buckets"] == 0
    diffs = compare(shared_dir / "off.h5", shared_dir / "on.h5") if comm.rank == 0 else None
    unexpected = [line for line in comm.bcast(diffs) if not any(f"attribute {a}:" in line for a in EXPECTED)]
    assert not unexpected, "\n".join(unexpected)
    # the bytes this rank handed to MPI: one Iallreduce per layer of the cast buckets, per iteration
    width = 4 if spec == "identity" else 2
    d = runs[0].s.d
    assert t.ledger[LEDGER.index("Allreduce")] == 12 * d * width
    hidden = on[0].time["comm_hidden"][-1]
    assert np.all(hidden >= 0) and np.all(hidden <= on[0].time["grad"][-1] + 1e-9)
    assert np.all(off[0].time["comm_hidden"][-1] == 0)
    # the break-even model's window H: rank 0's backward time after the first bucket's start, per iteration
    window = on[0].attrs["overlap_window_seconds"]
    assert 0 < window <= on[0].time["grad"][-1][0] / 12 + 1e-6 and "overlap_window_seconds" not in off[0].attrs


def test_one_layer_problem_warns_and_runs_as_without(shared_dir, capfd):
    over = {"data.dataset": "digits", "problem.kind": "softmax", "problem.l2": 1e-3, "run.collective": "allreduce",
            "run.algorithm": "dcgd", "run.compressor": "identity", "run.learning_rate": 0.1,
            "run.iterations": 5, "run.eval_every": 5}
    on, *_ = run_experiment(shared_dir / "soft.h5", {**over, "run.overlap": True}, name="overlap")
    assert on[0].status == "completed" and on[0].attrs["overlap_buckets"] == 0
    err = capfd.readouterr().err
    assert comm.bcast("warning: run.overlap = true on problem.kind = 'softmax'" in err if comm.rank == 0 else None)
