"""Shared test helpers: where the real data lives, and how to start a real mpiexec."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBSVM = ROOT.parent / "shared" / "data" / "libsvm"
MPI_TIMEOUT = int(os.environ.get("HPCGC_TEST_MPI_TIMEOUT", "300"))


def libsvm_path(name: str) -> Path:
    p = LIBSVM / name
    if not p.exists():
        pytest.skip(f"real data {p} not available (expects ../shared/data/libsvm beside the project)")
    return p


def mpiexec_cmd(n: int) -> list[str]:
    """mpiexec of the MPI that mpi4py uses (the venv's wheel, or the site's), with the flags it needs."""
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec found")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    cmd = [exe, "-n", str(n)]
    if "Open MPI" in version or "OpenRTE" in version:
        cmd.insert(1, "--oversubscribe")
    return cmd


def mpi_env(mpi_timeout: int | None = None) -> dict:
    env = dict(os.environ)
    env.setdefault("NUMBA_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MPIEXEC_TIMEOUT"] = str(mpi_timeout or MPI_TIMEOUT)   # MPICH hydra and Open MPI both honour it
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if os.geteuid() == 0:  # Open MPI refuses root unless told; MPICH ignores these
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_btl", "^ofi")
    return env


def run_mpi(n: int, args: list[str], cwd=None, timeout=None, mpi_timeout=None,
            extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python <args>`` on n ranks; a hung job is killed by MPIEXEC_TIMEOUT (``mpi_timeout``,
    default MPI_TIMEOUT) and by ``timeout``. ``extra_env`` overrides variables of the environment."""
    cmd = mpiexec_cmd(n) + [sys.executable, *args]
    return subprocess.run(cmd, cwd=cwd or ROOT, env={**mpi_env(mpi_timeout), **(extra_env or {})},
                          capture_output=True, text=True,
                          timeout=timeout or (mpi_timeout or MPI_TIMEOUT) + 30)


def show(p: subprocess.CompletedProcess) -> str:
    """A finished process for an assertion message: exit status and the tails of stdout/stderr."""
    return f"exit {p.returncode}\n--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-4000:]}"
