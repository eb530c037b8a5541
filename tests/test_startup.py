"""Start-up: worker ranks import only what workers use, kernels load lazily (docs/performance.md).

A worker rank neither reads data files nor writes the results file, so it must not pay for
scikit-learn, scipy.optimize, h5py, matplotlib or pandas — nor, on a dense data set, for any of
scipy beyond what importing numba loads (the objective's ``expit`` is hpcgc's own, numba's BLAS
probe is skipped); and a run loads the kernels of its own compressors only. Checked on a real
``mpiexec -n 2`` run of ``python -m hpcgc.bench``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import ROOT, run_mpi

HEAVY = ("sklearn", "scipy.optimize", "scipy.stats", "h5py", "matplotlib", "pandas")
SCIPY_PARTS = ("scipy.sparse", "scipy.special", "scipy.linalg")
NUMBA_REGISTRIES = ("numba.np.arraymath", "numba.typed.typeddict", "numba.np.random.generator_core")
"""Imported by numba's target refresh: needed to compile a kernel, not to load a cached one."""
"""Not needed by a worker of a dense data set (the default experiment's breast-cancer)."""

_RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from mpi4py import MPI
    import hpcgc.bench
    out = sys.argv[1]
    rc = hpcgc.bench.main(["--set", "run.iterations=2", "--set", 'sweep.algorithm=["diana"]',
                           "--set", 'sweep.compressor=["qsgd:s=2"]', "-o", out, "-q"])
    from hpcgc.compressors.kernels import dither
    rank = MPI.COMM_WORLD.Get_rank()
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"rc": rc, "modules": sorted(sys.modules), "kernels": len(dither.qsgd_encode.overloads),
                   "cache_hits": sum(dither.qsgd_encode.stats.cache_hits.values())}, f)
""")


def test_worker_rank_imports_only_what_workers_use(tmp_path):
    """On a warm numba cache (the first run fills it if needed; the second is checked) a worker
    imports no heavy module and no compressor but its own, and every rank loads its kernels without
    numba's target refresh — none of numba's typing and lowering registries (``numba.np.arraymath``,
    ``numba.typed``, ``numba.np.random``), only its runtime (``_numba_cache.cache_only``)."""
    for name in ("warm.h5", "run.h5"):
        out = tmp_path / name
        p = run_mpi(2, ["-c", _RANK_SCRIPT, str(out)], timeout=240)
        assert p.returncode == 0, p.stdout + p.stderr
        assert out.exists()                                 # the run really ran and rank 0 wrote it
    ranks = [json.loads((tmp_path / f"run.h5.rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rc"] for r in ranks] == [0, 0]
    root, worker = (set(r["modules"]) for r in ranks)
    assert "h5py" in root                                   # rank 0 writes the file: the check can fail
    assert not [m for m in HEAVY if m in worker], sorted(m for m in HEAVY if m in worker)
    assert not [m for m in SCIPY_PARTS if m in worker], sorted(m for m in SCIPY_PARTS if m in worker)
    for r in ranks:                                         # kernels ran, loaded from the cache
        assert r["kernels"] > 0 and r["cache_hits"] > 0, (r["kernels"], r["cache_hits"])
        registries = [m for m in NUMBA_REGISTRIES if m in r["modules"]]
        assert not registries, registries
    # the run's compressor only (qsgd, with its code=elias half), not the catalogue
    loaded = {m.rsplit(".", 1)[-1] for m in worker if m.startswith("hpcgc.compressors.")}
    assert {"qsgd", "qsgd_elias", "base"} <= loaded
    assert not loaded & {"topk", "randk", "natural", "natural_dither", "quant", "sparsify_plus", "powersgd", "dither_plus",
                         "block_quant", "sign", "threshold", "bernoulli", "identity", "reference"}, loaded


def _python(code: str, env=None) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


def test_registry_imports_a_compressor_on_first_use():
    out = _python("""
        import sys
        from hpcgc import compressors
        before = sorted(m for m in sys.modules if m.startswith("hpcgc.compressors."))
        names = compressors.available()
        c = compressors.make("qsgd:s=2")
        after_make = "hpcgc.compressors.qsgd" in sys.modules, "hpcgc.compressors.topk" in sys.modules
        cls = compressors.REGISTRY["topk"]
        print(len(names), "hpcgc.compressors.qsgd" in before, after_make, cls.__name__, cls.name,
              "hpcgc.compressors.topk" in sys.modules)
    """)
    assert out == "23 False (True, False) TopK topk True"           # 23 compressors with int8, compose, hadamard, countsketch


def test_every_registry_line_names_its_class():
    from hpcgc import compressors
    assert len(compressors.REGISTRY) == len(compressors.available()) == 23
    for name, cls in compressors.REGISTRY.items():
        assert cls.name == name and compressors.get(name) is cls


def test_cache_only_refuses_to_compile_and_loads_a_cached_kernel(tmp_path):
    """A cache miss inside ``cache_only`` raises WouldCompile before compiling; once compiled (and
    cached), a new process loads the kernel inside ``cache_only`` without raising."""
    code = """
        import numpy as np
        from hpcgc import compressors
        from hpcgc.compressors.kernels._numba_cache import WouldCompile, cache_only
        g = np.random.default_rng(0)
        x = g.standard_normal(40)
        c = compressors.make("sign")
        try:
            with cache_only():
                p = c.compress(x, g)
            print("loaded", end=" ")
        except WouldCompile:
            p = c.compress(x, g)
            print("compiled", end=" ")
        print(np.array_equal(c.decompress(p, 40), np.where(x < 0, -1.0, 1.0)))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    assert _python(code, env) == "compiled True"
    assert _python(code, env) == "loaded True"


def test_bundled_data_sets_equal_scikit_learns_loaders():
    """breast-cancer and digits are read from scikit-learn's bundled files without importing it;
    the arrays are exactly those of its loaders."""
    datasets = pytest.importorskip("sklearn.datasets")
    from hpcgc import data
    for ours, theirs in ((data._load_breast_cancer, datasets.load_breast_cancer),
                         (data._load_digits, datasets.load_digits)):
        X, y = ours()
        X2, y2 = theirs(return_X_y=True)
        assert X.dtype == X2.dtype and y.dtype == y2.dtype
        np.testing.assert_array_equal(X, X2)
        np.testing.assert_array_equal(y, y2)


def test_expit_is_scipys_bit_for_bit():
    """problems.expit (numba, no scipy import) gives exactly scipy.special.expit's bits, over the
    whole float64 range and the special values."""
    from scipy.special import expit as scipy_expit

    from hpcgc.problems import expit
    g = np.random.default_rng(5)
    x = np.concatenate([g.standard_normal(200_000), 40.0 * g.standard_normal(200_000),
                        g.uniform(-800.0, 800.0, 100_000),
                        np.ldexp(g.uniform(-1.0, 1.0, 50_000), g.integers(-1074, 1024, 50_000)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 709.8, -709.8, 745.2, -745.2]])
    with np.errstate(over="ignore"):
        want = scipy_expit(x)
    got = expit(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    two_d = x[:1000].reshape(40, 25)[:, ::2]                  # non-contiguous, 2-D
    assert np.array_equal(expit(two_d), scipy_expit(two_d))


def test_init_target_skips_numbas_scipy_probe_and_blas_still_works():
    """_numba_cache.init_target initialises numba without importing scipy.linalg; a kernel that
    calls BLAS (np.dot) still compiles and is right, and numba's BLAS flag is what its probe says."""
    out = _python("""
        import sys
        import numpy as np
        from numba import njit
        from hpcgc.compressors.kernels._numba_cache import init_target
        init_target()
        from numba.np import arraymath
        print("scipy.linalg" in sys.modules, arraymath._HAVE_BLAS, end=" ")

        @njit
        def dot(a, b):
            return np.dot(a, b)
        a = np.arange(1.0, 6.0)
        print(dot(a, a) == float(a @ a), "scipy.linalg.cython_blas" in sys.modules)
    """)
    assert out == "False True True True"
