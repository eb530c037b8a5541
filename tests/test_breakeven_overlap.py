"""The break-even report on overlapped runs (``run.overlap``), end to end: real MLP runs under
``mpiexec -n 2`` — the float32 Allreduce overlapped, EF + top-k under ``allgather`` overlapped (one
Iallgather per bucket), DIANA + rand-k under ``gather`` overlapped (one Igather per bucket, then the
iterate's Bcast) and EF + top-k per bucket blocking (``run.overlap_blocking``) — and a
real ``collectives`` file; ``hpcgc breakeven`` writes one check.csv row per run, and each row's
global-fit prediction pays only the exchange time beyond the run's window H (read back with h5py):
K·(c + max(0, comm − H)), comm the same run's exchange priced without overlap."""
from __future__ import annotations

import csv
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.conftest import ROOT, mpi_env, run_mpi, show

EXPERIMENT = """
name = "overlap-check"
[data]
dataset = "digits"
partition = "iid"
[problem]
kind = "mlp"
hidden = 24
depth = 2
l2 = 1e-4
[run]
learning_rate = 0.05
batch = 32
iterations = 20
eval_every = 5
overlap = true

[[variant]]
label = "fp32 overlapped"
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"

[[variant]]
label = "ef topk overlapped"
run.algorithm = "ef"
run.compressor = "topk:k=200"
run.collective = "allgather"

[[variant]]
label = "diana randk server overlapped"
run.algorithm = "diana"
run.compressor = "randk:k=200"
run.collective = "gather"

[[variant]]
label = "ef topk blocking"
run.algorithm = "ef"
run.compressor = "topk:k=200"
run.collective = "allgather"
run.overlap_blocking = true
"""


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlap-check")
    (d / "exp.toml").write_text(EXPERIMENT)
    res, coll, out = d / "runs.h5", d / "coll.h5", d / "out"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(d / "exp.toml"), "-o", str(res), "-q"], timeout=400)
    assert p.returncode == 0, show(p)
    p = run_mpi(2, ["-m", "hpcgc.bench", "collectives", "--max-size", "64K", "--max-seconds", "0.02",
                    "-o", str(coll)], timeout=400)
    assert p.returncode == 0, show(p)
    p = subprocess.run([sys.executable, "-m", "hpcgc", "breakeven", str(res), "--collectives", str(coll),
                        "--eps", "0.9", "-o", str(out)], cwd=ROOT, capture_output=True, text=True,
                       env=mpi_env(), timeout=300)
    assert p.returncode == 0, show(p)
    with open(out / "check.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return res, coll, rows


@pytest.mark.timeout(900)
def test_check_rows_of_overlapped_runs_pay_only_what_the_window_does_not_hide(produced):
    from hpcgc.analysis.breakeven import MethodModel, Target, latency_from_collectives, measure_run
    from hpcgc.analysis.breakeven.check import predicted_run_time
    from hpcgc.analysis.tables import collect
    res, coll, rows = produced
    assert sorted(r["collective"] for r in rows) == ["allgather", "allgather", "allreduce", "gather"]
    latency = latency_from_collectives(str(coll))
    runs = {ri.run.run_id: ri for ri in collect([res]).runs}
    with h5py.File(res, "r") as f:
        attrs = {k: dict(f["runs"][k].attrs) for k in f["runs"]}
    for r in rows:
        a = attrs[r["run_id"]]
        assert int(a["overlap_buckets"]) == 3
        H = float(a["overlap_window_seconds"])
        assert (H == 0.0) == ("blocking" in r["run_id"]) and H >= 0.0
        k = float(r["iterations"])
        c = float(r["compute_s"]) + float(r["idle_s"]) + float(r["other_s"])        # K·c
        p = measure_run(runs[r["run_id"]], Target("grad_ratio", 0.9))
        bare = MethodModel(r["method"], (), 2, r["collective"], k, "", p["workers"], p["server"], p["up"], p["down"],
                           p["rounds"], p["down_bcasts"], idle=p["idle"], other=p["other"])
        assert p["rounds"] == 3 and bare.messages()[0][2] == 3 and bare.messages()[0][0] == r["collective"]
        comm = (predicted_run_time(bare, latency, k) - c) / k                        # per iteration, no overlap
        assert comm > 0
        assert float(r["predicted_s_global_fit"]) == pytest.approx(c + k * max(0.0, comm - H), rel=1e-9, abs=1e-12)
        assert np.isfinite(float(r["ratio"])) and float(r["measured_s"]) > 0
