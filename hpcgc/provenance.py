"""Provenance of a results file: versions, git commit, MPI library, hosts, SLURM ids."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

from . import __version__


def _git(*cmd) -> str:
    try:
        return subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), *cmd], capture_output=True,
                              text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def collect(transport, argv) -> dict:
    """File-level attributes (collective: gathers host names).

    Only rank 0 writes the file, so only rank 0 looks up versions and asks git; the other ranks
    return the same keys with placeholders (enough for :func:`header`) and import nothing: at
    start-up 32 ranks importing h5py, scipy and scikit-learn just for version strings cost more
    than the rest of the set-up (``docs/performance.md``). Versions come from the installed
    distributions' metadata, so scikit-learn is not imported either.
    """
    from importlib.metadata import PackageNotFoundError, version

    from .transport import library_version, processor_name
    hosts = transport.gather_object(processor_name())
    root = transport.is_root

    def dist(name: str) -> str:
        if not root:
            return ""
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    commit = _git("rev-parse", "HEAD") if root else ""
    attrs = {
        "hpcgc_version": __version__,
        "git_commit": commit or "unknown",
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else False,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command_line": " ".join(["python -m hpcgc.bench", *argv]),
        "mpi_library_version": library_version(),
        "mpi4py_version": dist("mpi4py"), "numpy_version": dist("numpy"),
        "numba_version": dist("numba"), "h5py_version": dist("h5py"),
        "scipy_version": dist("scipy"), "sklearn_version": dist("scikit-learn"),
        "python_version": platform.python_version(),
        "hostnames": sorted(set(hosts)) if hosts else [],
        "world_size": transport.size,
        "numba_num_threads": int(os.environ.get("NUMBA_NUM_THREADS", "0") or 0),
    }
    for var in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME", "SLURM_NTASKS"):
        if var in os.environ:
            attrs[var.lower()] = os.environ[var]
    return attrs


def header(attrs: dict) -> str:
    """OSU-style header printed above the output."""
    dirty = "+dirty" if attrs["git_dirty"] else ""
    return (f"# hpcgc {attrs['hpcgc_version']} (git {attrs['git_commit'][:10]}{dirty})  {attrs['created']}\n"
            f"# {attrs['mpi_library_version']}  ranks: {attrs['world_size']}  hosts: {','.join(attrs['hostnames'])}\n"
            f"# {attrs['command_line']}")
