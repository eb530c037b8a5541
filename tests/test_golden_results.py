"""Same iterates and bits as the kept golden file, and the comparison that says so.

A small experiment (tests/golden/experiment.toml: DCGD and DIANA × qsgd:s=2 and randk:k=6, 2 ranks,
30 iterations) runs under a real mpiexec; every non-timing dataset and attribute of its results file
must equal tests/golden/experiment.h5 (``hpcgc.results.compare``, the logic of
scripts/compare-results.py). A change meant to alter iterates or bits regenerates the golden file
deliberately: ``HPCGC_REGENERATE_GOLDEN=1 python -m pytest -q tests/test_golden_results.py``.

The run compiles its kernels for one fixed CPU, ``NUMBA_CPU_NAME=haswell`` (AVX2), as every test
does (tests/conftest.py), so that the file does not depend on the host: ``sum_squares`` reassociates
its reduction, and an AVX-512 host would otherwise sum the norms in another order than an AVX2 one
and draw other QSGD levels. (OpenBLAS is already pinned on these machines by their
``OPENBLAS_CORETYPE=Haswell``, which the tests leave alone.)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgc.results import compare as rc
from tests.conftest import ROOT, run_mpi, show

GOLDEN_DIR = ROOT / "tests" / "golden"
EXPERIMENT = GOLDEN_DIR / "experiment.toml"
GOLDEN = GOLDEN_DIR / "experiment.h5"
SCRIPT = ROOT / "scripts" / "compare-results.py"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "run.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(EXPERIMENT), "-o", str(out)])
    assert p.returncode == 0, show(p)
    if os.environ.get("HPCGC_REGENERATE_GOLDEN") == "1":
        rc.strip(out, GOLDEN)
    return out


def test_fresh_run_equals_the_golden_file(fresh):
    assert GOLDEN.exists(), f"{GOLDEN} missing: regenerate it (see {EXPERIMENT})"
    diffs = rc.compare(fresh, GOLDEN)
    assert diffs == [], "results differ from the golden file:\n" + "\n".join(diffs[:30])
    with h5py.File(GOLDEN) as g:                     # the golden file holds what it is meant to
        assert len(g["runs"]) == 4
        assert {g["runs"][r].attrs["algorithm"] for r in g["runs"]} == {"dcgd", "diana"}
        assert int(g.attrs["world_size"]) == 2
        assert all("time" not in g["runs"][r] and "per_iteration" not in g["runs"][r] for r in g["runs"])


def _copy(tmp_path, name="b.h5"):
    dst = tmp_path / name
    shutil.copy(GOLDEN, dst)
    return dst


def test_compare_finds_one_changed_bit(tmp_path):
    b = _copy(tmp_path)
    with h5py.File(b, "r+") as f:
        run = sorted(f["runs"])[1]
        x = f["runs"][run]["x_final"][()]
        x[3] = np.nextafter(x[3], np.inf)             # one ulp
        f["runs"][run]["x_final"][...] = x
    diffs = rc.compare(GOLDEN, b)
    assert len(diffs) == 1 and f"runs/{run}/x_final" in diffs[0] and "[3]" in diffs[0], diffs


def test_compare_finds_attributes_runs_and_ignores_timing(tmp_path):
    b = _copy(tmp_path)
    with h5py.File(b, "r+") as f:
        runs = sorted(f["runs"])
        f["runs"][runs[0]].attrs["gamma"] = f["runs"][runs[0]].attrs["gamma"] * 2
        del f["runs"][runs[2]]
        # timing and provenance may differ freely
        f["runs"][runs[1]].create_dataset("time/iter", data=np.ones((4, 2)))
        f["runs"][runs[1]].attrs["setup_seconds"] = 123.0
        f.attrs["created"] = "another day"
        f.attrs["hostnames"] = np.array(["elsewhere"], dtype=object)
    diffs = rc.compare(GOLDEN, b)
    assert len(diffs) == 2, diffs
    assert any(f"runs/{runs[0]} attribute gamma" in d for d in diffs)
    assert any(f"runs/{runs[2]}: only in A" in d for d in diffs)


def test_cli_exit_status(tmp_path):
    b = _copy(tmp_path)
    run = [sys.executable, str(SCRIPT)]
    p = subprocess.run(run + [str(GOLDEN), str(b)], capture_output=True, text=True)
    assert p.returncode == 0 and "equal" in p.stdout, p.stdout + p.stderr
    with h5py.File(b, "r+") as f:
        r = sorted(f["runs"])[0]
        f["runs"][r]["bits_up_wire"][-1, 0] += 8
    p = subprocess.run(run + [str(GOLDEN), str(b)], capture_output=True, text=True)
    assert p.returncode == 1 and f"runs/{r}/bits_up_wire" in p.stdout and "[3, 0]" in p.stdout, p.stdout
    p = subprocess.run(run + [str(GOLDEN), str(tmp_path / "missing.h5")], capture_output=True, text=True)
    assert p.returncode == 2 and "missing.h5" in p.stdout, p.stdout
    (tmp_path / "text.h5").write_text("not hdf5")
    p = subprocess.run(run + [str(GOLDEN), str(tmp_path / "text.h5")], capture_output=True, text=True)
    assert p.returncode == 2 and "text.h5" in p.stdout
    p = subprocess.run(run + [str(GOLDEN)], capture_output=True, text=True)
    assert p.returncode == 2
