"""``python -m hpcgc.bench collectives`` under a real ``mpiexec -n 4``: the sweep, the file, the fit,
and bad size ranges (exit 2 on every rank, one line, no file)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import collectives, results
from tests.conftest import run_mpi, show

N = 4
KINDS = ("gather", "bcast", "allreduce", "allgather")




def test_small_sweep_file_and_fit(tmp_path):
    out = tmp_path / "coll.h5"
    p = run_mpi(N, ["-m", "hpcgc.bench", "collectives", "--max-size", "64K", "--iterations", "50",
                    "--iterations-large", "20", "--warmup", "5", "--max-seconds", "0.02", "-o", str(out)], timeout=120)
    assert p.returncode == 0, show(p)
    lines = p.stdout.splitlines()
    assert lines[0] == "# hpcgc collectives benchmark (OSU style)"         # once: rank 0 prints
    assert p.stdout.count("# hpcgc collectives benchmark") == 1
    assert lines[2].startswith("# MPICH") or "ranks: 4" in lines[2]
    assert "ranks: 4" in lines[2] and lines[3].startswith("# python -m hpcgc.bench collectives --max-size 64K")
    assert p.stdout.count(collectives.TABLE_HEAD) == 4 and p.stdout.count("# alpha = ") == 4
    assert not (tmp_path / "coll.h5.partial").exists()

    res = results.load_collectives(out)
    assert list(res) == list(KINDS)
    assert res.attrs["world_size"] == N and res.attrs["mpi_library_version"] and res.attrs["hostnames"]
    assert "collectives --max-size 64K" in res.attrs["command_line"]
    for kind, tb in res.items():
        first = 8 if kind == "bcast" else 4
        np.testing.assert_array_equal(tb.size, [1 << k for k in range(first.bit_length() - 1, 17)])
        assert np.all(tb.min <= tb.avg) and np.all(tb.avg <= tb.max) and np.all(tb.min > 0)
        assert np.all((tb.iterations >= 3) & (tb.iterations <= 50))
        assert tb.alpha >= 0 and tb.beta >= 0 and tb.fit_method == collectives.FIT_METHOD
        # the stored alpha, beta reproduce the stored table within the stored fit error
        rel = np.abs(tb.model(tb.size) - tb.avg) / tb.avg
        assert np.all(rel <= tb.fit_error * (1 + 1e-9)), (kind, rel, tb.fit_error)
        assert tb.fit_error_median <= tb.fit_error


def _too_big_for_memory() -> str:
    avail = collectives.available_memory()
    if avail is None:
        pytest.skip("available memory unknown: no memory guard")
    # one node, 4 ranks: allgather holds (n+1) x the message per rank
    if collectives.node_bytes(KINDS, 1 << 30, N, N, True) <= collectives.MEMORY_FRACTION * avail:
        pytest.skip("this node has room for 1 GiB messages on 4 ranks")
    return "1G"


BAD = [
    (["--min-size", "1M", "--max-size", "64K"], "empty message-size range"),
    (["--min-size", "5", "--max-size", "7"], "no power of two"),
    (["--max-size", "4G"], "< 2 GiB"),
    (["--max-size", "12Q"], "not a size in bytes"),
    ("memory", "available memory"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=["min>max", "no-power-of-two", "int32", "bad-size", "memory"])
def test_bad_size_range_exits_2_everywhere_one_line_no_file(tmp_path, args, needle):
    if args == "memory":
        args = ["--max-size", _too_big_for_memory()]
    out = tmp_path / "sub" / "bad.h5"
    p = run_mpi(N, ["-m", "hpcgc.bench", "collectives", *args, "-o", str(out)], timeout=120)
    assert p.returncode == 2, show(p)
    errors = [line for line in p.stderr.splitlines() if line.startswith("hpcgc: error:")]
    assert len(errors) == 1 and needle in errors[0], show(p)
    assert "Traceback" not in p.stderr and "# hpcgc collectives" not in p.stdout   # nothing ran
    assert list(tmp_path.iterdir()) == []


def test_listed_in_help():
    import subprocess
    import sys

    from tests.conftest import ROOT, mpi_env
    h = subprocess.run([sys.executable, "-m", "hpcgc.bench", "--help"], capture_output=True, text=True, cwd=ROOT, check=False,
                       env=mpi_env())
    assert h.returncode == 0 and "collectives" in h.stdout and "docs/collectives.md" in h.stdout
