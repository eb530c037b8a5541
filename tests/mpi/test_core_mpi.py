"""The core benchmark under a real mpiexec (pytest-mpi): run with ``mpiexec -n 4 python -m pytest
--with-mpi tests/mpi`` — ``tests/test_mpi_launch.py`` does this from the ordinary test session."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.transport import Transport
from tests.conftest import libsvm_path
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD


def run_cfg(out: Path, overrides: dict, sweep: dict | None = None):
    res, _, summaries, t = run_experiment(out, overrides, sweep=sweep)
    return res, summaries, t


A9A = {"data.partition": "label-sorted", "problem.kind": "logreg", "problem.l2": 0.05,
       "run.compressor": "quant:p=inf,block=16", "run.eval_every": 50}


def test_diana_converges_dcgd_stalls_on_a9a(shared_dir):
    """DIANA's central claim on real data through real MPI: with ℓ∞ block quantization DIANA
    reaches f − f* ≤ 1e-10·max(1,|f*|) while DCGD with the same compressor and step stalls ≥ 1000× higher."""
    cfg = dict(A9A, **{"data.dataset": f"libsvm:{libsvm_path('a9a')}", "run.iterations": 2000,
                     "run.tolerance": 1e-11})
    res, _, _ = run_cfg(shared_dir / "a9a.h5", cfg, sweep={"run.algorithm": ["diana", "dcgd"]})
    diana, dcgd = res
    fstar = diana.attrs["f_star"]
    target = 1e-10 * max(1.0, abs(fstar))
    assert diana.attrs["algorithm"] == "diana" and dcgd.attrs["algorithm"] == "dcgd"
    assert diana.attrs["gamma"] == dcgd.attrs["gamma"]           # same step size
    assert diana.status == "completed"
    assert diana.series["suboptimality"][-1] <= target, diana.series["suboptimality"][-10:]
    tail = dcgd.series["suboptimality"][-20:]
    assert np.all(tail >= 1000 * target), tail


def test_wire_bits_are_the_bytes_that_went_through_mpi(shared_dir):
    res, _, t = run_cfg(shared_dir / "bits.h5", {"run.iterations": 37, "run.eval_every": 5,
                                                  "run.compressor": "randk:k=5", "run.algorithm": "diana"})
    run = res[0]
    n = comm.size
    # sender-side ledger of this rank (bytes it handed to Gather + Gatherv), independent of rank 0's count
    mine = t.up_bytes
    assert run.series["bits_up_wire"].shape == (len(run.series["iteration"]), n)
    assert run.series["bits_up_wire"][-1, comm.rank] == 8 * mine
    assert np.array_equal(run.workers["sender_bytes_up"] * 8, run.series["bits_up_wire"][-1])
    # downlink: the Bcast buffer (d + 1 float64) once per iteration, as counted by the root's transport
    down = comm.bcast(t.down_bytes, root=0)
    assert run.series["bits_down_wire"][-1] == 8 * down == 8 * 37 * 8 * (run.attrs["d"] + 1)
    # rank 0's own message did not cross the network
    assert list(run.workers["crossed_network"]) == [False] + [True] * (n - 1)


def test_gatherv_delivers_variable_and_empty_payloads():
    t = Transport()
    rng = np.random.default_rng(comm.rank)
    size = 0 if comm.rank == 1 else int(rng.integers(1, 5000))
    payload = rng.integers(0, 256, size=size, dtype=np.uint8)
    got = t.gather_payloads(payload)
    everything = comm.gather(payload, root=0)     # reference path (pickled), test only
    if comm.rank == 0:
        buf, counts, displs = got
        for r, ref in enumerate(everything):
            assert counts[r] == ref.size
            assert np.array_equal(buf[displs[r]:displs[r] + counts[r]], ref)
    else:
        assert got is None
    assert t.up_bytes == 4 + size


def test_same_seed_same_iterates_and_bits(shared_dir):
    over = {"run.iterations": 60, "run.eval_every": 10, "run.compressor": "qsgd:s=2", "run.seed": 7,
            "run.algorithm": "diana"}
    a, _, _ = run_cfg(shared_dir / "a.h5", over)
    b, _, _ = run_cfg(shared_dir / "b.h5", over)
    c, _, _ = run_cfg(shared_dir / "c.h5", dict(over, **{"run.seed": 8}))
    assert np.array_equal(a[0].x_final, b[0].x_final)
    for key in ("loss", "bits_up_model", "bits_up_wire", "bits_down_wire"):
        assert np.array_equal(a[0].series[key], b[0].series[key]), key
    assert not np.array_equal(a[0].x_final, c[0].x_final)


def test_results_file_has_every_field(shared_dir):
    res, _, _ = run_cfg(shared_dir / "schema.h5", {"run.iterations": 25, "run.eval_every": 10,
                                                    "run.compressor": "quant:p=2,block=8"})
    n = comm.size
    assert res.complete and res.attrs["world_size"] == n
    for key in ("schema_version", "hpcgc_version", "git_commit", "git_dirty", "created", "command_line",
                "mpi_library_version", "mpi4py_version", "numpy_version", "numba_version", "h5py_version",
                "hostnames"):
        assert key in res.attrs, key
    run = res[0]
    for key in ("config", "algorithm", "compressor", "allocation", "gamma", "alpha", "beta", "seed", "dataset",
                "d", "n_workers", "f_star", "status", "stop_reason"):
        assert key in run.attrs, key
    assert run.config["run"]["compressor"] == "quant:p=2,block=8"
    T = len(run.series["iteration"])
    assert list(run.series["iteration"]) == [0, 10, 20, 25]          # first, every eval_every, last
    for key in ("loss", "suboptimality", "dist_to_opt", "grad_norm_sq", "accuracy", "bits_down_wire"):
        assert run.series[key].shape == (T,), key
        assert np.all(np.isfinite(run.series[key])), key
    assert np.all(run.series["suboptimality"] >= -1e-12)
    assert run.series["dist_to_opt"][0] == pytest.approx(1.0)
    for key in ("bits_up_model", "bits_up_wire"):
        assert run.series[key].shape == (T, n)
        assert np.all(np.diff(run.series[key], axis=0) > 0)           # cumulative
    for ph in ("grad", "compress", "comm_up", "server", "comm_down", "iter"):
        assert run.time[ph].shape == (T, n), ph
        assert np.all(run.time[ph] >= 0)
        assert run.per_iteration[ph].shape == (25, n)
    assert np.all(run.time["server"][:, 1:] == 0) and run.time["server"][-1, 0] > 0
    assert run.workers["samples"].sum() == 569 and run.workers["label_histogram"].shape == (n, 2)
    for key in ("compression_ratio", "threshold", "one_time_bits"):
        assert run.workers[key].shape == (n,)
