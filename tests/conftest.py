"""Shared test helpers: where the real data lives, how to start a real mpiexec, what a test does when
a component it needs is missing (``need``); the plugins for the quick tier (``--quick``,
tests/quick.py) and the required-tests check (``--required``, tests/required.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# One code generation target for every test, in this process and in the mpiexec launches it starts:
# a kernel that reassociates a reduction (norms.sum_squares, fastmath={"reassoc"}) sums in another
# order with AVX-512's 8 lanes than with AVX2's 4, so golden payloads and golden results files would
# depend on the host (these machines are AMD Zen 3 or Intel Xeon with AVX-512). Before any numba
# import; a user's own NUMBA_CPU_NAME wins. Benchmarks are not tests: they compile for the host.
os.environ.setdefault("NUMBA_CPU_NAME", "haswell")

ROOT = Path(__file__).resolve().parents[1]
LIBSVM = ROOT.parent / "shared" / "data" / "libsvm"
MPI_TIMEOUT = int(os.environ.get("HPCGC_TEST_MPI_TIMEOUT", "300"))

pytest_plugins = ["tests.required", "tests.quick"]   # the required-tests check, the quick tier


def pytest_ignore_collect(collection_path, config):
    """tests/mpi runs under mpiexec (``--with-mpi``, launched by tests/test_cli_mpi.py): a serial run
    does not collect it (instead of 60-odd skips that would hide the skips that matter)."""
    if collection_path == ROOT / "tests" / "mpi" and not config.getoption("--with-mpi", default=False):
        return True
    return None


MPI_SUITE = "tests/test_cli_mpi.py::test_pytest_mpi_suite_on_4_ranks"


def pytest_collection_modifyitems(items):
    """The launch of tests/mpi (MPI_SUITE) runs last. On a clean clone numba's cache is empty, and
    each of its 4 ranks would compile every kernel it uses (4 compilers on 2 cores); after the serial
    tests it loads from the cache they wrote most of what it needs (the 24 files at load 2.5: 155-159 s
    from an empty cache, 118-119 s from a full one; docs/testing.md, "What the tiers cost")."""
    items.sort(key=lambda item: item.nodeid.startswith(MPI_SUITE))


def need(what: str, how: str):
    """A component the test needs is missing: under CI=true the test fails, elsewhere it is skipped;
    either way the message says what is missing and how to get it."""
    from tests.required import in_ci
    msg = f"{what}; {how}"
    if in_ci():
        pytest.fail(f"missing in CI (CI=true): {msg}", pytrace=False)
    pytest.skip(msg)


BOUNDSCHECK_FUZZ = {
    # tests/test_compressors_fuzz.py: every compressor's decoders
    "compressors": "import tests.compressor_checks as t; print(*t.fuzz_decode(t.load_fuzz_payloads(PAYLOADS / 'compressors.npz')))",
    # tests/test_qsgd_elias.py: the Elias-coded QSGD decoder, its parse kernel, a long stream
    "elias": ("import tests.test_qsgd_elias as t; from tests.compressor_checks import fuzz_decode, load_fuzz_payloads; "
              "a, r = fuzz_decode(load_fuzz_payloads(PAYLOADS / 'elias.npz')); k = t.fuzz_parse_kernel(4000, 1); "
              "import numpy as np; from hpcgc import compressors; c = compressors.make('qsgd:s=7,code=elias'); "
              "assert (c.decompress(np.load(PAYLOADS / 'elias-long.npy'), 100_000) != 0).any(); "
              "print(a, r, k)"),
}
"""The fuzzing that test_fuzz_with_numba_boundscheck runs recompiled with NUMBA_BOUNDSCHECK=1, by test;
``PAYLOADS``: the directory of the payloads it decodes (boundscheck_fuzz)."""


def boundscheck_payloads(d: Path) -> dict:
    """The payloads BOUNDSCHECK_FUZZ decodes, made here (kernels from the ordinary cache, no bounds
    checks) and written to ``d``: the bounds-checked process compiles the decoders it fuzzes, not
    the encoders (about two thirds of its compile time, measured). The same payloads as when it
    compressed them itself (same seeds, same order of draws). → {part: (accepted, rejected)} of
    decoding them here, which the bounds-checked decoding must equal."""
    import numpy as np

    from hpcgc import compressors
    from tests import compressor_checks as cc
    from tests.test_qsgd_elias import ELIAS_FUZZ_SPECS
    expected = {}
    for part, specs, trials in (("compressors", cc.FUZZ_SPECS, 200), ("elias", ELIAS_FUZZ_SPECS, 300)):
        cases = cc.fuzz_payloads(specs, trials=trials, seed=1)
        cc.save_fuzz_payloads(d / f"{part}.npz", cases)
        expected[part] = cc.fuzz_decode(cases)
    x = np.random.default_rng(0).standard_normal(100_000)
    np.save(d / "elias-long.npy", compressors.make("qsgd:s=7,code=elias").compress(x, np.random.default_rng(1)))
    return expected


@pytest.fixture(scope="session")
def boundscheck_fuzz(tmp_path_factory) -> dict:
    """Every part of BOUNDSCHECK_FUZZ in one process with NUMBA_BOUNDSCHECK=1 and a NUMBA_CACHE_DIR of
    its own (no kernel compiled without bounds checks is loaded, none compiled with them is left
    behind): one start of Python, numba and hpcgc, each decoder compiled once for both tests. Each
    part runs alone (its exception does not stop the other): {part: (ok, its stdout or traceback,
    (accepted, rejected) of the same payloads decoded without bounds checks)}."""
    import json
    payloads = tmp_path_factory.mktemp("boundscheck-payloads")
    expected = boundscheck_payloads(payloads)
    code = ("import contextlib, io, json, sys, traceback\n"
            "from pathlib import Path\n"
            "out = {}\n"
            "for name, part in json.loads(sys.argv[1]).items():\n"
            "    buf = io.StringIO()\n"
            "    try:\n"
            "        with contextlib.redirect_stdout(buf):\n"
            "            exec(part, {'PAYLOADS': Path(sys.argv[2])})\n"
            "        out[name] = (True, buf.getvalue())\n"
            "    except BaseException:\n"
            "        out[name] = (False, buf.getvalue() + traceback.format_exc())\n"
            "print(json.dumps(out))\n")
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path_factory.mktemp("numba-boundscheck"))}
    res = subprocess.run([sys.executable, "-c", code, json.dumps(BOUNDSCHECK_FUZZ), str(payloads)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return {part: (*got, expected[part]) for part, got in json.loads(res.stdout.strip().splitlines()[-1]).items()}


def libsvm_path(name: str) -> Path:
    p = LIBSVM / name
    if not p.exists():
        need(f"real data {p} not available", "put the LIBSVM files in ../shared/data/libsvm beside the project")
    return p


def mpiexec_cmd(n: int) -> list[str]:
    """mpiexec of the MPI that mpi4py uses (the venv's wheel, or the site's), with the flags it needs."""
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        need("no mpiexec found", "bash scripts/setup.sh installs MPICH into .venv")
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
