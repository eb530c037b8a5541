"""The break-even report's model-against-measurement check (``check.csv``): real runs under
``mpiexec -n 2`` (the uncompressed Allreduce baseline and DIANA + QSGD through the parameter server)
and a real ``collectives`` file at 2 ranks; every row's measured time, predicted time and ratio are
recomputed here by hand from the two HDF5 files (h5py, not the report's readers), with the cost
models written out for n = 2 (Thakur, Rabenseifner & Gropp 2005; docs/cost-models.md)."""
from __future__ import annotations

import csv
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.conftest import ROOT, mpi_env, run_mpi, show

D = 4096                          # float32 message 16 KiB > 2 KiB: Rabenseifner's Allreduce
EXPERIMENT = f"""
name = "check"
[data]
dataset = "synthetic:logreg,n=64,d={D},seed=0"
[problem]
kind = "logreg"
l2 = 0.1
[run]
iterations = 100
eval_every = 5
tolerance = 1e-2

[[variant]]
label = "uncompressed allreduce"
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"

[[variant]]
label = "diana qsgd gather"
run.algorithm = "diana"
run.compressor = "qsgd:s=16"
run.collective = "gather"
"""




@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    d = tmp_path_factory.mktemp("check")
    (d / "exp.toml").write_text(EXPERIMENT)
    res, coll = d / "runs.h5", d / "coll.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(d / "exp.toml"), "-o", str(res), "-q"], timeout=400)
    assert p.returncode == 0, show(p)
    p = run_mpi(2, ["-m", "hpcgc.bench", "collectives", "--max-size", "64K", "--max-seconds", "0.02",
                    "-o", str(coll)], timeout=400)
    assert p.returncode == 0, show(p)
    out = d / "out"
    p = subprocess.run([sys.executable, "-m", "hpcgc", "breakeven", str(res), "--collectives", str(coll),
                        "-o", str(out)], cwd=ROOT, capture_output=True, text=True, env=mpi_env(), timeout=300)
    assert p.returncode == 0, show(p)
    with open(out / "check.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return res, coll, out, p.stdout, rows


def _medians(coll):
    """The fallback where an operation's fit is 0 (on a loaded machine small sweeps often fit β = 0):
    the median over the file's collectives of α_c / (model latency at 0 B) and β_c / (model slope),
    at n = 2 with sizes up to 64 KiB — gather: 2 latencies (length Gather + Gatherv), slope 1;
    allgather: Allgather of the length + Allgatherv, recursive doubling, 1 + 1 latencies, slope 1;
    bcast, allreduce: 1 latency, slope 1."""
    lat = {"gather": 2, "allgather": 2, "bcast": 1, "allreduce": 1}
    with h5py.File(coll, "r") as f:
        a = [float(f[op].attrs["alpha"]) / lat[op] for op in lat if f[op].attrs["alpha"] > 0]
        b = [float(f[op].attrs["beta"]) for op in lat if f[op].attrs["beta"] > 0]
    return float(np.median(a)), float(np.median(b))


def _fit(coll, op, latencies):
    """α, β point to point from operation ``op``'s own fit t = α_c + β_c·s (model latency
    ``latencies``·α at s → 0, slope 1 at n = 2), or the medians where the fit is 0."""
    with h5py.File(coll, "r") as f:
        a, b = float(f[op].attrs["alpha"]), float(f[op].attrs["beta"])
    ma, mb = _medians(coll)
    return (a / latencies if a > 0 else ma), (b if b > 0 else mb)


def _by_hand(res, run_id, coll):
    """(iterations to target, measured s, predicted s) of one run, from the files alone."""
    with h5py.File(res, "r") as f:
        g = f["runs"][run_id]
        it = g["iteration"][()]
        gn = g["grad_norm_sq"][()]
        sub = g["suboptimality"][()]
        assert np.isfinite(sub).all()                  # f* solved: the target is f − f* ≤ 1e-2
        hit = np.flatnonzero(sub <= 1e-2)
        row = int(hit[0]) if hit.size else len(it) - 1  # not reached: all its iterations
        k = int(it[row])
        measured = float(g["time/iter"][row, 0])       # rank 0's summed per-iteration wall-clock
        # rank 0's non-transfer time per iteration: means over the iterations after the first
        pi = {ph: g["per_iteration"][ph][()].astype(float)[1:, 0].mean()
              for ph in ("grad", "compress", "server", "wait_up", "wait_down", "other")}
        collective = g.attrs["collective"]
        last = int(it[-1])
        up = float(g["bits_up_wire"][-1].mean()) / 8 / last          # bytes per worker per iteration
        down = float(g["bits_down_wire"][-1]) / 8 / last
        assert gn.shape == it.shape
    busy = pi["grad"] + pi["compress"] + pi["server"] + pi["wait_up"] + pi["wait_down"] + pi["other"]
    if collective == "allreduce":
        # fit t = α_c + β_c·s of MPI_Allreduce at n = 2: the model's latency at s → 0 is recursive
        # doubling's lg 2 = 1 α, its slope at 64 KiB Rabenseifner's 2(2 − 1)/2 = 1: α = α_c, β = β_c.
        a, b = _fit(coll, "allreduce", 1)
        assert up == 4 * D                              # float32 d-vector
        comm = 2 * a + up * b                           # Rabenseifner: 2 lg 2·α + 2(1/2)·m·β
    else:
        # gather at n = 2 = MPI_Gather of the 4-byte length (binomial: α + 4β) + MPI_Gatherv of one
        # payload (α + Pβ): fit latency 2α, slope 1 ⇒ α = α_c/2, β = β_c.
        ag, bg = _fit(coll, "gather", 2)
        payload = up - 4
        # MPI_Bcast of the float64 iterate at n = 2: binomial (p < 8), ⌈lg 2⌉ = 1: α + mβ; fit: α = α_c, β = β_c
        ab, bb = _fit(coll, "bcast", 1)
        comm = (ag + 4 * bg) + (ag + payload * bg) + (ab + down * bb)
    # the primary prediction: each message priced by the line fitted (relative least squares) over the
    # sizes the file measured within a factor 4 of it; at the file's own n the model is that line
    if collective == "allreduce":
        local = _local(coll, "allreduce", up)
    else:
        local = _local(coll, "gather", up - 4) + _local(coll, "bcast", down)
    return k, measured, k * (busy + comm), k * (busy + local), bool(hit.size)


def _local(coll, op, nbytes):
    """The line through the sizes within a factor 4 of the message; a line with α_c ≤ 0 or β_c ≤ 0
    (noisy latency-bound sizes) is widened by 4× at a time until it is physical (as local_fit
    documents); NaN when no window gives one (the code then prices with the global α, β)."""
    with h5py.File(coll, "r") as f:
        size, avg = f[op]["size"][()].astype(float), f[op]["avg"][()].astype(float)
    span = 4.0
    while True:
        sel = (size >= nbytes / span) & (size <= nbytes * span)
        if sel.sum() < 2:
            sel = np.argsort(np.abs(np.log(size / nbytes)))[:2]
        s, t = size[sel], avg[sel]
        (ac, bc), *_ = np.linalg.lstsq(np.stack([1 / t, s / t], axis=1), np.ones(len(t)), rcond=None)
        if ac > 0 and bc > 0:
            return ac + bc * nbytes
        if np.size(s) >= size.size:
            return float("nan")
        span *= 4


@pytest.mark.timeout(900)
def test_check_rows_recomputed_by_hand(produced):
    res, coll, out, stdout, rows = produced
    assert "Model against measurement" in stdout and "Model against measurement" in (out / "breakeven.md").read_text()
    assert {r["collective"] for r in rows} == {"allreduce", "gather"} and len(rows) == 2
    assert any(r["up_to"] == "target" for r in rows)
    for r in rows:
        k, measured, predicted, local, reached = _by_hand(res, r["run_id"], coll)
        assert r["up_to"] == ("target" if reached else "last row (target not reached)")
        assert int(r["iterations"]) == k
        assert float(r["measured_s"]) == pytest.approx(measured, rel=1e-6)
        assert float(r["predicted_s_global_fit"]) == pytest.approx(predicted, rel=1e-6)
        if not np.isfinite(local):            # no physical local line: the row says it used the global fit
            assert "global" in r["alpha_beta"], r
            local = float(r["predicted_s"])
        assert float(r["predicted_s"]) == pytest.approx(local, rel=1e-6)
        ratio = measured / local
        assert float(r["ratio"]) == pytest.approx(ratio, rel=1e-6)
        assert r["mark"] == ("ok" if abs(ratio - 1) <= 0.25 else f"OFF {100 * (ratio - 1):+.0f} %")
        if r["collective"] == "allreduce":
            # priced at the collectives file's own mean time for a 16 KiB Allreduce (a measured size)
            with h5py.File(coll, "r") as f:
                size, avg = f["allreduce/size"][()], f["allreduce/avg"][()]
            t16k = float(avg[list(size).index(4 * D)])
            alpha, beta = _fit(coll, "allreduce", 1)
            table = predicted - k * (2 * alpha + 4 * D * beta) + k * t16k
            assert float(r["predicted_s_measured_collectives"]) == pytest.approx(table, rel=1e-6)
            assert float(r["ratio_measured_collectives"]) == pytest.approx(measured / table, rel=1e-6)
        # the measured time is the iteration loop only: it is at most the run's whole wall-clock
        with h5py.File(res, "r") as f:
            wall = float(f["runs"][r["run_id"]]["time/iter"][-1, 0])
        assert 0 < measured <= wall


def test_help_mentions_the_check():
    p = subprocess.run([sys.executable, "-m", "hpcgc", "breakeven", "--help"], cwd=ROOT, capture_output=True,
                       text=True, env=mpi_env(), timeout=120)
    assert p.returncode == 0 and "check.csv" in p.stdout and "measured/predicted" in p.stdout
