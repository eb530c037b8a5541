"""Nothing lost (real mpiexec): no silent overwrite, one writer per results file."""
from __future__ import annotations

import subprocess
import sys

from hpcgc import results
from tests.conftest import ROOT, mpi_env, mpiexec_cmd, run_mpi

SHORT = ["-m", "hpcgc.bench", "-q", "--set", "run.iterations=40", "--set", "sweep.algorithm=['diana']",
         "--set", "sweep.compressor=['qsgd:s=2']"]


def _errors(p):
    return [line for line in p.stderr.splitlines() if line.startswith("hpcgc: error:")]


def test_existing_file_is_refused_and_overwrite_replaces_it(tmp_path):
    out = tmp_path / "r.h5"
    assert run_mpi(2, [*SHORT, "-o", str(out)]).returncode == 0
    before = out.stat().st_mtime_ns
    p = run_mpi(2, [*SHORT, "-o", str(out)])
    assert p.returncode == 2, p.stderr
    (msg,) = _errors(p)
    assert str(out) in msg and "--overwrite" in msg
    assert out.stat().st_mtime_ns == before and results.load(out).complete
    (tmp_path / "r.h5.partial").write_bytes(b"left by a killed job")
    p = run_mpi(2, [*SHORT, "-o", str(out)])
    assert p.returncode == 2 and "r.h5" in _errors(p)[0]
    p = run_mpi(2, [*SHORT, "-o", str(out), "--overwrite"])
    assert p.returncode == 0, p.stderr
    assert results.load(out).complete and not (tmp_path / "r.h5.partial").exists()


def test_two_concurrent_writers_one_proceeds(tmp_path):
    out = tmp_path / "same.h5"
    cmd = mpiexec_cmd(2) + [sys.executable, *SHORT[:-4], "--set", "run.iterations=3000",
                            "--set", "sweep.algorithm=['diana']", "--set", "sweep.compressor=['qsgd:s=2']",
                            "-o", str(out)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    refused = outs[[p.returncode for p in procs].index(2)][1]
    assert "another invocation" in refused or "exists" in refused, refused
    assert results.load(out).complete and len(results.load(out)) == 1
