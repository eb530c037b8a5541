"""The -n 32 measurement scripts of issue 31 target 3, run for real at -n 2 (docs/performance.md):
``scripts/rank-cpu.py`` (each rank's CPU time per iteration outside MPI, around an hpcgc run) and
``scripts/handwritten-loop.py --cpu`` (the same figures for the hand-written loop) print one row
per rank and the workers' mean, and the CPU outside MPI includes the gradient and message; the run
under ``rank-cpu.py`` completes and writes its results. Timing values are not checked
(benchmarks, not tests): only that they are finite, positive and consistent."""
from __future__ import annotations

import re

import h5py
import numpy as np

from tests.conftest import run_mpi, show

ROW = re.compile(r"^(\d+|workers)\s+([0-9.]+)\s+([0-9.]+)", re.M)


def _cpu_table(out: str, ranks: int) -> dict:
    assert "# CPU µs per iteration outside MPI" in out, out
    rows = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in ROW.finditer(out.split("# CPU µs")[1])}
    assert set(rows) == {*(str(r) for r in range(ranks)), "workers"}, rows
    for outside, work in rows.values():
        assert np.isfinite(outside) and np.isfinite(work) and 0 < work <= outside * 1.5, rows
    return rows


def test_rank_cpu_around_an_hpcgc_run(tmp_path):
    h5 = tmp_path / "r.h5"
    p = run_mpi(2, ["scripts/rank-cpu.py", "run", "--set", "run.iterations=40", "--set", "run.tolerance=0",
                    "--set", 'sweep.algorithm=["diana"]', "--set", 'sweep.compressor=["qsgd:s=2"]', "--set", 'problem.reference="none"', "-q",
                    "-o", str(h5)], mpi_timeout=120)
    assert p.returncode == 0, show(p)
    _cpu_table(p.stdout, 2)
    with h5py.File(h5, "r") as f:          # the wrapped run finished and wrote its iterations
        runs = list(f["runs"].values())
        assert len(runs) == 1 and int(runs[0].attrs["iterations_done"]) == 40


def test_handwritten_loop_cpu():
    p = run_mpi(2, ["scripts/handwritten-loop.py", "--iterations", "60", "--cpu"], mpi_timeout=120)
    assert p.returncode == 0, show(p)
    _cpu_table(p.stdout, 2)
    assert "kernels alone on rank 0" in p.stdout
