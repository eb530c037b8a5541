"""``python -m hpcgc.bench floor`` under a real ``mpiexec -n 2`` and ``-n 4`` at small sizes: it runs,
its table parses, its HDF5 file reads back with the floor attributes (a smoke test: no timings are
asserted beyond being positive)."""
from __future__ import annotations

import pytest

from hpcgc import results
from tests.conftest import run_mpi, show


def floor_rows(stdout: str) -> list[dict]:
    """The rows of the floor table (the block after its 'run  algorithm ... ratio' header)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run ") and " ratio " in line)
    rows = []
    for line in lines[start + 2:]:
        if not line or line.startswith("#"):
            break
        f = line.split()
        rows.append({"run": f[0], "algorithm": f[1], "compressor": f[2], "collective": f[3], "iters": int(f[4]),
                     "median_ms": float(f[5]), "floor_ms": float(f[6]), "ratio": float(f[7]),
                     "kernels_ms": float(f[8]), "ratio_kernels": float(f[9]), "collectives": " ".join(f[10:])})
    return rows


@pytest.mark.parametrize("n", [2, 4])
def test_floor_command_table_and_file(tmp_path, n):
    out = tmp_path / "floor.h5"
    p = run_mpi(n, ["-m", "hpcgc.bench", "floor", "--set", "run.iterations=30", "--set", "sweep.algorithm=[\"diana\"]",
                    "--set", "sweep.compressor=[\"qsgd:s=2\", \"randk:k=6\"]", "--floor-seconds", "0.05",
                    "-q", "-o", str(out)], timeout=300)
    assert p.returncode == 0, show(p)
    rows = floor_rows(p.stdout)
    runs = results.load(out)
    assert [r["run"] for r in rows] == [r.run_id[:3] for r in runs] and len(rows) == 2
    for row, run in zip(rows, runs):
        d = run.attrs["d"]
        assert row["collective"] == "gather" and row["iters"] == run.attrs["iterations_done"] == 30
        assert row["floor_ms"] > 0 and row["median_ms"] > 0
        assert row["ratio"] == pytest.approx(row["median_ms"] / row["floor_ms"], rel=0.02, abs=0.01)
        assert run.attrs["floor_ratio"] == pytest.approx(row["ratio"], abs=0.006)
        assert row["collectives"] == run.attrs["floor_collectives"]
        # collectives + the kernels' own time: the floor the documentation quotes, printed by the program
        assert row["kernels_ms"] > row["floor_ms"]
        assert row["ratio_kernels"] == pytest.approx(row["median_ms"] / row["kernels_ms"], rel=0.02, abs=0.01)
        assert run.attrs["floor_kernels_seconds"] == pytest.approx(1e-3 * row["kernels_ms"], rel=1e-3, abs=1e-7)
        assert run.attrs["floor_ratio_kernels"] == pytest.approx(row["ratio_kernels"], abs=0.006)
        assert row["collectives"].startswith("gather ") and row["collectives"].endswith(f"bcast 8 B, bcast {8 * d} B")
        assert set(run.time) >= {"wait_up", "wait_down", "other", "iter"}
    # the memory-traffic floor per phase (hpcgc.traffic): a copy bandwidth and every phase of every run
    traffic = [line.split() for line in p.stdout.splitlines() if line[:3] in {r["run"] for r in rows}
               and len(line.split()) > 4 and line.split()[4] in ("copy", "grad", "compress", "server", "other")]
    assert len(traffic) == 5 * len(rows), show(p)
    for f in traffic:
        if f[4] == "copy":
            assert float(f[6]) > 0                                  # GB/s
        elif f[4] != "other":
            mb, fl, med, ratio = map(float, f[5:9])       # (printed to 4 decimals of ms: no ratio check at this size)
            assert mb > 0 and fl > 0 and med > 0 and ratio > 0
            line_mb, line_fl, line_ratio = map(float, f[9:12])     # the same counted in 64-byte lines
            assert line_mb >= mb and line_fl >= fl and 0 < line_ratio <= ratio, show(p)
        else:
            assert len(f) == 12 and f[9] == "0", show(p)          # 'other': no bytes, in lines neither


def test_bad_floor_seconds_is_one_message_exit_2_no_file(tmp_path):
    out = tmp_path / "x.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "floor", "--floor-seconds", "0", "-o", str(out)], timeout=120)
    assert p.returncode == 2, show(p)
    assert p.stderr.count("hpcgc: error: --floor-seconds must be > 0, got 0.0") == 1, show(p)
    assert not list(tmp_path.glob("x.h5*"))
