"""The model-against-measurement check (``check.csv``) of runs with ``run.topology = "hierarchical"``
(issue 30 part 4; hpcgc/analysis/breakeven/check.py, ``_two_level``): real runs and a real
``collectives`` file under ``mpiexec -n 4`` with the test-only node assignment
``HPCGC_TEST_RANKS_PER_NODE=2`` (2 nodes x 2 ranks on shared memory; the benchmark then measures
``levels/intra`` and ``levels/inter`` as on a cluster of two nodes).

A hierarchical run's predicted time is recomputed here from the two HDF5 files (h5py, not the
report's readers): iterations × (rank 0's measured non-transfer time + the leaders' Allreduce of the
run's wire bytes on the 2 leaders, priced at the local line t = α_c + β_c·s that ``levels/inter``
measured around that size + the node's two Bcasts, the control word (8 B) and the iterate (8·d B),
at ``levels/intra``'s local lines). With 2 leaders (the inter level's own n) and 2 ranks per node
(the intra level's) the local line is the price itself. A collectives file without levels: one
line, exit 2."""
from __future__ import annotations

import csv
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.conftest import ROOT, mpi_env, run_mpi, show

D = 4096
EXPERIMENT = f"""
name = "hier-check"
[data]
dataset = "synthetic:logreg,n=128,d={D},seed=0"
[problem]
kind = "logreg"
l2 = 0.1
[run]
iterations = 60
eval_every = 5
tolerance = 1e-2
topology = "hierarchical"

[[variant]]
label = "uncompressed allreduce"
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"

[[variant]]
label = "ef topk reduce-scatter"
run.algorithm = "ef"
run.compressor = "topk:k=512"
run.collective = "reduce-scatter"
"""
SPAN = 4.0                        # hpcgc.analysis.breakeven.check.LOCAL_SPAN


def _breakeven(res, coll, out):
    return subprocess.run([sys.executable, "-m", "hpcgc", "breakeven", str(res), "--collectives", str(coll),
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True, env=mpi_env(), timeout=300)


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    d = tmp_path_factory.mktemp("hier_check")
    (d / "exp.toml").write_text(EXPERIMENT)
    res, coll, flat_coll = d / "runs.h5", d / "coll.h5", d / "coll-flat.h5"
    env = {"HPCGC_TEST_RANKS_PER_NODE": "2"}
    p = run_mpi(4, ["-m", "hpcgc.bench", "--config", str(d / "exp.toml"), "-o", str(res), "-q"], timeout=400,
                extra_env=env)
    assert p.returncode == 0, show(p)
    sweep = ["-m", "hpcgc.bench", "collectives", "-c", "allreduce", "bcast", "--max-size", "64K",
             "--max-seconds", "0.02", "--warmup", "5", "--iterations", "50"]
    p = run_mpi(4, [*sweep, "-o", str(coll)], timeout=400, extra_env=env)
    assert p.returncode == 0, show(p)
    p = run_mpi(2, [*sweep, "-o", str(flat_coll)], timeout=400)          # one rank per node: no levels
    assert p.returncode == 0, show(p)
    out = d / "out"
    p = _breakeven(res, coll, out)
    assert p.returncode == 0, show(p)
    with open(out / "check.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return res, coll, flat_coll, rows, d


def _line(group, size):
    """The local line of one measured sweep around ``size`` (least squares in relative error over the
    sizes within a factor SPAN), as the check fits it; None when it is not physical (α_c, β_c ≤ 0:
    the check then widens the window, not repeated here)."""
    s = np.asarray(group["size"], dtype=float)
    t = np.asarray(group["avg"], dtype=float)
    sel = np.flatnonzero((s >= size / SPAN) & (s <= size * SPAN))
    if sel.size < 2:
        sel = np.sort(np.argsort(np.abs(np.log(s / size)))[:2])
    A = np.stack([np.ones(sel.size), s[sel]], axis=1) / t[sel, None]
    (a, b), *_ = np.linalg.lstsq(A, np.ones(sel.size), rcond=None)
    return (a + b * size) if a > 0 and b > 0 else None


def test_hierarchical_run_is_predicted_at_the_two_levels(produced):
    res, coll, _, rows, _ = produced
    assert len(rows) == 2
    assert all((r["topology"], r["nodes"], r["ranks_per_node"]) == ("hierarchical", "2", "2") for r in rows)
    row = next(r for r in rows if r["collective"] == "allreduce")
    assert (row["topology"], row["nodes"], row["ranks_per_node"], row["ranks"]) == ("hierarchical", "2", "2", "4")
    with h5py.File(res) as f:
        run = next(r for r in f["runs"].values() if r.attrs["collective"] == "allreduce")
        assert run.attrs["topology"] == "hierarchical"
        it = np.asarray(run["iteration"])
        sub = np.asarray(run["suboptimality"], dtype=float)           # the stop measure: f − f* ≤ 1e-2
        first = int(np.flatnonzero(sub <= 1e-2)[0])
        k = int(it[first])
        wire = np.asarray(run["bits_up_wire"], dtype=float)
        up = float(wire[-1].mean() / 8 / it[-1])                       # bytes per leader per iteration
        d = int(run.attrs["d"])
    assert row["up_to"] == "target" and int(row["iterations"]) == k
    assert up == pytest.approx(4 * D)                                  # float32 d on the leaders' Allreduce
    with h5py.File(coll) as f:
        assert int(f.attrs["ranks_per_node"]) == 2 and int(f["levels/inter"].attrs["ranks"]) == 2
        inter = _line(f["levels/inter/allreduce"], up)
        intra = [_line(f["levels/intra/bcast"], s) for s in (8.0, 8.0 * d)]
    c = float(row["compute_s"]) + float(row["idle_s"]) + float(row["other_s"])
    if None not in intra:
        assert float(row["intra_node_s"]) == pytest.approx(k * sum(intra), rel=1e-6)
    assert float(row["intra_node_s"]) > 0
    if inter is not None:
        assert float(row["predicted_s"]) == pytest.approx(c + float(row["intra_node_s"]) + k * inter, rel=1e-6)
    assert float(row["ratio"]) == pytest.approx(float(row["measured_s"]) / float(row["predicted_s"]), rel=1e-9)
    assert "allreduce" in row["alpha_beta"]


def test_breakeven_table_says_it_models_hierarchical_runs_flat(produced):
    md = (produced[4] / "out" / "breakeven.md").read_text()
    assert "run.topology = 'hierarchical'" in md and "modelled in this table as flat" in md
    assert "uncompressed allreduce" in md.split("modelled in this table as flat")[0].rsplit("run.topology", 1)[1]


def test_hierarchical_run_without_levels_is_refused(produced):
    res, _, flat_coll, _, d = produced
    p = _breakeven(res, flat_coll, d / "refused")
    assert p.returncode == 2, show(p)
    last = p.stderr.strip().splitlines()[-1]
    assert "hierarchical" in last and "levels/intra" in last and "Traceback" not in p.stderr


def test_reduce_scatter_bytes_are_the_leaders(produced):
    """Under reduce-scatter the stages' bytes come from the per-collective ledger (one column per world
    rank): a hierarchical run's are its node leaders' (world ranks 0 and 2), not diluted by the other
    ranks' zeros."""
    from hpcgc.analysis import tables
    from hpcgc.analysis.breakeven import measure as me
    from hpcgc.analysis.breakeven import model as mo
    res = produced[0]
    (ri,) = [r for r in tables.collect([res]).runs if r.run.attrs["collective"] == "reduce-scatter"]
    with h5py.File(res) as f:
        run = next(r for r in f["runs"].values() if r.attrs["collective"] == "reduce-scatter")
        ledger = np.asarray(run["mpi_bytes/Alltoallv"], dtype=float)[-1]
        k = int(np.asarray(run["iteration"])[-1])
        assert list(np.asarray(run["workers/rank"])) == [0, 2]
    assert ledger[1] == ledger[3] == 0 and ledger[0] > 0
    first = (ledger[0] + ledger[2]) / 2 / k * 2 / (2 - 1)                # × n/(n − 1), n = 2 nodes
    p = mo.measure_run(ri, me.Target("suboptimality", 1e-2))
    assert p["up"] == pytest.approx(first, rel=1e-12)
