"""The sparse high-dimensional generator (``synthetic:sparse``) and ``hpcgc generate``."""
from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgc import data
from hpcgc.data.sparse import BLOCK_ROWS, ZipfSampler
from hpcgc.errors import ConfigError
from tests.conftest import ROOT

SPEC = "synthetic:sparse,n=6000,d=65536,nnz=30,zipf=1.1,seed=3"


def _generate(spec, out, *extra):
    return subprocess.run([sys.executable, "-m", "hpcgc.bench", "generate", spec, "-o", str(out), *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_same_seed_same_file_bytes_and_the_file_reads_back_as_the_generated_rows(tmp_path):
    a, b, c = tmp_path / "a.svm", tmp_path / "b.svm", tmp_path / "c.svm"
    for out, spec in ((a, SPEC), (b, SPEC), (c, SPEC.replace("seed=3", "seed=4"))):
        p = _generate(spec, out)
        assert p.returncode == 0, p.stderr
    digest = [hashlib.sha256(f.read_bytes()).hexdigest() for f in (a, b, c)]
    assert digest[0] == digest[1] and digest[0] != digest[2]
    ds = data.load(SPEC)
    back = data.load(f"libsvm:{a},n_features=65536")
    # bit for bit: values are rounded to 6 decimals, written %.16g, parsed by scikit-learn
    assert np.array_equal(back.X.indptr, ds.X.indptr) and np.array_equal(back.X.indices, ds.X.indices)
    assert np.array_equal(back.X.data, ds.X.data) and np.array_equal(back.y, ds.y)
    assert _generate(SPEC, a).returncode == 2                        # refuses to overwrite ...
    assert _generate(SPEC, a, "--overwrite").returncode == 0         # ... unless asked


def test_rows_are_generated_alone_in_any_order_and_do_not_depend_on_n():
    gen = data.sparse_generator(SPEC)
    full = gen.dataset()
    rng = np.random.default_rng(0)
    for rows in (np.arange(BLOCK_ROWS - 5, BLOCK_ROWS + 7),          # across a block boundary
                 rng.permutation(gen.n)[:500],                       # an iid shard, unsorted
                 np.array([5999, 0, 17, 17])):                       # repeats and the last row
        shard = gen.subset(rows)
        assert (shard.X != full.X[rows]).nnz == 0 and np.array_equal(shard.y, full.y[rows])
    shard = gen.rows(100, 200)
    assert (shard.X != full.X[100:200]).nnz == 0
    longer = data.load(SPEC.replace("n=6000", "n=9000"))             # rows do not depend on n
    assert (longer.X[:6000] != full.X).nnz == 0 and np.array_equal(longer.y[:6000], full.y)


def test_shape_rows_and_labels():
    ds = data.load(SPEC)
    X = ds.X
    assert sp.issparse(X) and X.shape == (6000, 65536) and X.indices.dtype == np.int32
    assert np.all(np.diff(X.indptr) == 30)                           # exactly nnz distinct features per row
    rows = np.split(X.indices, X.indptr[1:-1])
    assert all(np.all(np.diff(r) > 0) for r in rows[:200])          # sorted and distinct
    assert np.allclose(np.sqrt(X.multiply(X).sum(axis=1)), 1.0, atol=1e-4)   # unit-norm rows (rounded)
    assert np.all(X.data > 0)
    assert set(np.unique(ds.y)) == {-1.0, 1.0} and ds.n_classes == 2
    # the planted model gives logistic regression signal: labels agree with sign(<x, w*>) far above chance
    w = data.sparse_generator(SPEC)._planted()
    agree = np.mean(np.sign(X @ w) == ds.y)
    assert agree > 0.75, agree


@pytest.mark.parametrize("zipf", [0.9, 1.1, 1.5])
def test_fitted_frequency_exponent_within_10_percent(zipf):
    ds = data.load(f"synthetic:sparse,n=20000,d=65536,nnz=40,zipf={zipf},seed=1")
    fitted = data.zipf_exponent(ds.X)
    assert abs(fitted - zipf) <= 0.10 * zipf, (zipf, fitted)


@pytest.mark.parametrize("d,s", [(10, 1.1), (1000, 2.0), (50, 0.0), (7, 0.5)])
def test_zipf_sampler_matches_the_pmf(d, s):
    """Rejection-inversion against the exact pmf (j+1)^-s / H: max deviation within 5 standard errors."""
    x = ZipfSampler(d, s).sample(np.random.default_rng(0), 400_000)
    p = np.arange(1, d + 1, dtype=np.float64) ** -s
    p /= p.sum()
    f = np.bincount(x, minlength=d) / x.size
    assert x.min() >= 0 and x.max() < d
    assert np.all(np.abs(f - p) <= 5 * np.sqrt(p * (1 - p) / x.size) + 1e-12)


def test_nnz_close_to_d_still_gives_distinct_features():
    ds = data.load("synthetic:sparse,n=40,d=45,nnz=44,zipf=1.5")
    assert all(len(set(r)) == 44 for r in np.split(ds.X.indices, ds.X.indptr[1:-1]))


@pytest.mark.parametrize("spec,needle", [
    ("synthetic:sparse,d=10,nnz=40", "nnz = 40 nonzeros per row exceeds the number of features d = 10"),
    ("synthetic:sparse,nnz=0", "nnz must be >= 1"),
    ("synthetic:sparse,zipf=-1", "zipf must be in"),
    ("synthetic:sparse,zipf=nan", "zipf must be finite"),
    ("synthetic:sparse,snr=-2", "snr must be in"),
    ("synthetic:sparse,d=3000000000", "too large"),
    ("synthetic:sparse,n=100000000,nnz=100", "too large"),
    ("synthetic:sparse,hetero=0.5", "unknown option 'hetero'"),
    ("synthetic:sparse,n=abc", "n must be an integer"),
])
def test_bad_options_are_refused_by_load_and_check_spec(spec, needle):
    for fn in (data.load, data.check_spec):
        with pytest.raises(ConfigError, match="synthetic:sparse") as e:
            fn(spec)
        assert needle in str(e.value)


def test_generate_refuses_bad_input_with_exit_2(tmp_path):
    p = _generate("synthetic:sparse,d=10,nnz=40", tmp_path / "x.svm")
    assert p.returncode == 2 and "exceeds the number of features" in p.stderr
    p = _generate("breast-cancer", tmp_path / "x.svm")
    assert p.returncode == 2 and "synthetic" in p.stderr
    assert not (tmp_path / "x.svm").exists()


def test_listed_and_partitioned_by_row_count_only():
    assert "synthetic:sparse" in data.available()
    assert any(name.startswith("synthetic:sparse[") for name, _ in data.describe())
    gen = data.sparse_generator(SPEC)
    ds = data.load(SPEC)
    for scheme in ("iid", "contiguous", "iid+skew:4"):
        assert not data.needs_rows(scheme)
        for a, b in zip(data.partition(gen, 4, scheme, seed=2), data.partition(ds, 4, scheme, seed=2)):
            assert np.array_equal(a, b)
    assert data.needs_rows("label-sorted") and data.needs_rows("dirichlet:0.5")
