"""Tests for hpcgc.data: readers, built-ins, synthetic generators, partitions."""

import functools
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgc import data
from hpcgc.errors import ConfigError, DataError, UserError
from tests.conftest import need

LIBSVM_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "libsvm"


def _libsvm_file(name):
    path = LIBSVM_DIR / name
    if not path.is_file():
        need(f"real LIBSVM data not available: {path} is missing",
             "put the LIBSVM files in ../shared/data/libsvm beside the project")
    return path


@functools.cache
def _load_real(name):
    """Each real file is read once per test session (they take a fraction of a second each)."""
    return data.load(f"libsvm:{_libsvm_file(name)}")


@pytest.fixture(scope="module")
def a9a():
    return _load_real("a9a")


@pytest.fixture(scope="module")
def mushrooms():
    return _load_real("mushrooms")


@pytest.fixture(scope="module")
def cancer():
    return data.load("breast-cancer")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------------
# Real LIBSVM data
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, shape", [("a9a", (32561, 123)), ("mushrooms", (8124, 112)), ("w8a", (49749, 300))]
)
def test_real_libsvm_shapes(name, shape):
    ds = _load_real(name)
    assert (ds.n_samples, ds.n_features) == shape
    assert isinstance(ds.X, sp.csr_matrix) and ds.X.dtype == np.float64
    assert ds.X.has_sorted_indices
    assert ds.y.dtype == np.float64 and ds.y.shape == (shape[0],)
    assert ds.name == name


def test_mushrooms_labels_map_to_pm1(mushrooms):
    assert set(np.unique(mushrooms.y)) == {1.0, 2.0}  # raw labels as read
    b = mushrooms.binary_labels()
    assert b.dtype == np.float64 and set(np.unique(b)) == {-1.0, 1.0}
    np.testing.assert_array_equal(b == -1.0, mushrooms.y == 1.0)  # smaller label -> -1


def test_a9a_labels_already_pm1(a9a):
    assert set(np.unique(a9a.y)) == {-1.0, 1.0}
    np.testing.assert_array_equal(a9a.binary_labels(), a9a.y)


def test_prefix_optional_for_existing_path_relative_to_cwd(monkeypatch):
    path = _libsvm_file("mushrooms")
    monkeypatch.chdir(path.parent.parent)
    ds = data.load("libsvm/mushrooms")
    assert ds.n_samples == 8124
    assert data.load(Path("libsvm/mushrooms")).n_samples == 8124


def test_shard_binary_labels_use_parent_classes(mushrooms):
    only_twos = np.flatnonzero(mushrooms.y == 2.0)[:50]
    shard = mushrooms.subset(only_twos)
    np.testing.assert_array_equal(shard.binary_labels(), np.ones(50))


# ------------------------------------------------------------------------------------------------
# LIBSVM reader on temporary files
# ------------------------------------------------------------------------------------------------

GOOD = "+1 1:0.5 3:1\n-1 2:1.5\n"


def test_small_file_parsed_one_based(tmp_path):
    path = _write(tmp_path, "small.svm", "# header\n+1 1:0.5 3:1  # comment\n\n-1 2:1.5\n")
    ds = data.load(f"libsvm:{path}")
    np.testing.assert_array_equal(ds.X.toarray(), [[0.5, 0, 1], [0, 1.5, 0]])
    np.testing.assert_array_equal(ds.y, [1.0, -1.0])
    assert ds.source == f"libsvm:{path.resolve()}"


@pytest.mark.parametrize(
    "line3",
    [
        "abc 1:0.5",  # non-numeric label
        "+1 4:x",  # non-numeric value
        "+1 x:1",  # non-integer index
        "+1 4",  # token without a colon
        "+1 3:1 2:1",  # indices not increasing
        "+1 2:nan",  # not finite
        "inf 1:1",  # label not finite
    ],
)
def test_malformed_line_reports_file_and_line(tmp_path, line3):
    path = _write(tmp_path, "broken.svm", GOOD + line3 + "\n-1 1:1\n")
    with pytest.raises(DataError) as err:
        data.load(f"libsvm:{path}")
    msg = str(err.value)
    assert "broken.svm" in msg and ":3:" in msg, msg
    assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)


def test_malformed_line_counts_blank_and_comment_lines(tmp_path):
    path = _write(tmp_path, "c.svm", "# c\n\n+1 1:x\n")
    with pytest.raises(DataError, match=r"c\.svm:3: .*'x'"):
        data.load(f"libsvm:{path}")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="data file not found: .*nothere"):
        data.load(f"libsvm:{tmp_path / 'nothere'}")


def test_directory_is_an_error(tmp_path):
    with pytest.raises(DataError, match="directory"):
        data.load(f"libsvm:{tmp_path}")


def test_unreadable_file(tmp_path):
    """A file without read permission. Root reads anything (CAP_DAC_OVERRIDE), so as root (as CI
    runs) the load runs in a child that ``setpriv`` has stripped of the capabilities that bypass
    file permissions — still root, still the file's owner, but mode 000 now refuses it."""
    path = _write(tmp_path, "secret.svm", GOOD)
    path.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(DataError, match="cannot read data file"):
            data.load(f"libsvm:{path}")
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        need("running as root and no setpriv to drop CAP_DAC_OVERRIDE", "apt-get install util-linux")
    code = ("import sys; from hpcgc import data; from hpcgc.errors import DataError\n"
            "try:\n    data.load(sys.argv[1])\nexcept DataError as e:\n    print(e); sys.exit(7)\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all",
                        sys.executable, "-c", code, f"libsvm:{path}"], capture_output=True, text=True,
                       cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert p.returncode == 7, (p.returncode, p.stdout, p.stderr)
    assert "cannot read data file" in p.stdout and "secret.svm" in p.stdout, p.stdout


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_empty_file(tmp_path, text):
    path = _write(tmp_path, "empty.svm", text)
    with pytest.raises(DataError, match="empty.*empty.svm"):
        data.load(f"libsvm:{path}")


def test_gzip_file_and_bad_gzip(tmp_path):
    path = tmp_path / "small.svm.gz"
    with gzip.open(path, "wt") as f:
        f.write(GOOD)
    ds = data.load(f"libsvm:{path}")
    assert ds.X.shape == (2, 3)
    bad = _write(tmp_path, "bad.gz", "not gzip at all")
    with pytest.raises(DataError, match="bad.gz"):
        data.load(f"libsvm:{bad}")


def test_n_features_option(tmp_path):
    path = _write(tmp_path, "small.svm", GOOD)
    ds = data.load(f"libsvm:{path},n_features=10")
    assert ds.X.shape == (2, 10)
    with pytest.raises(DataError, match=r"small\.svm:1: .*n_features=2"):
        data.load(f"libsvm:{path},n_features=2")
    with pytest.raises(ConfigError, match="n_features"):
        data.load(f"libsvm:{path},n_features=zero")


def test_unknown_libsvm_option_named(tmp_path):
    path = _write(tmp_path, "small.svm", GOOD)
    with pytest.raises(ConfigError, match="colour"):
        data.load(f"libsvm:{path},colour=red")


def test_zero_based_and_path_with_comma(tmp_path):
    folder = tmp_path / "a,b"
    folder.mkdir()
    path = _write(folder, "z.svm", "+1 0:1 2:3\n-1 1:2\n")
    ds = data.load(f"libsvm:{path}")  # auto-detects 0-based
    np.testing.assert_array_equal(ds.X.toarray(), [[1, 0, 3], [0, 2, 0]])
    with pytest.raises(DataError, match=r"z\.svm:1: invalid feature index 0"):
        data.load(f"libsvm:{path},zero_based=false")


def test_home_is_expanded(tmp_path, monkeypatch):
    _write(tmp_path, "h.svm", GOOD)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data.load("libsvm:~/h.svm").n_samples == 2


def test_rowscale_option(tmp_path):
    path = _write(tmp_path, "r.svm", "+1 1:2 2:-4\n-1 3:0.5\n")
    ds = data.load(f"libsvm:{path},rowscale=maxabs")
    np.testing.assert_allclose(ds.X.toarray(), [[0.5, -1, 0], [0, 0, 1]])
    ds = data.load(f"libsvm:{path},rowscale=l2")
    np.testing.assert_allclose(ds.row_norms(), [1.0, 1.0])


def test_unknown_name_lists_choices():
    with pytest.raises(ConfigError) as err:
        data.load("no-such-data")
    msg = str(err.value)
    for word in ("breast-cancer", "digits", "libsvm:", "synthetic:"):
        assert word in msg


# ------------------------------------------------------------------------------------------------
# Built-ins
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, shape, n_classes", [("breast-cancer", (569, 30), 2), ("digits", (1797, 64), 10)]
)
def test_builtins_offline_scaled(name, shape, n_classes):
    ds = data.load(name)
    assert ds.X.shape == shape and ds.n_classes == n_classes
    assert isinstance(ds.X, np.ndarray) and ds.X.dtype == np.float64 and ds.X.flags.c_contiguous
    assert ds.X.min() >= -1.0 and ds.X.max() <= 1.0
    span = ds.X.max(axis=0) - ds.X.min(axis=0)
    varying = span > 0
    assert np.all(ds.X[:, varying].min(axis=0) == -1.0)
    assert np.all(ds.X[:, varying].max(axis=0) == 1.0)
    assert np.all(ds.X[:, ~varying] == 0.0)  # constant columns become 0


def test_builtin_labels(cancer):
    assert set(np.unique(cancer.binary_labels())) == {-1.0, 1.0}
    with pytest.raises(DataError, match="digits.*10 distinct label"):
        data.load("digits").binary_labels()


def test_available_and_describe():
    names = data.available()
    assert names[:2] == ["breast-cancer", "digits"]
    assert "libsvm:<path>" in names and "synthetic:logreg" in names
    for name in names:
        if "<" not in name:
            data.load(name)
    rows = data.describe()
    assert all(isinstance(a, str) and isinstance(b, str) for a, b in rows)
    assert len(rows) >= len(names)


# ------------------------------------------------------------------------------------------------
# Fingerprints and subsets
# ------------------------------------------------------------------------------------------------


def test_fingerprint_stable_and_content_sensitive(cancer):
    fp = cancer.fingerprint
    assert isinstance(fp, str) and len(fp) == 16
    assert data.load("breast-cancer").fingerprint == fp
    assert cancer.subset(np.arange(100)).fingerprint != fp
    assert data.load("digits").fingerprint != fp
    y2 = cancer.y.copy()
    y2[0] = 1 - y2[0]
    assert data.Dataset(cancer.X, y2, cancer.name).fingerprint != fp
    assert data.Dataset(cancer.X, cancer.y, "other").fingerprint != fp


def test_fingerprint_real_data_and_index_dtype(a9a, mushrooms):
    assert data.load(f"libsvm:{_libsvm_file('mushrooms')}").fingerprint == mushrooms.fingerprint
    assert a9a.fingerprint != mushrooms.fingerprint
    X64 = sp.csr_matrix(
        (a9a.X.data, a9a.X.indices.astype(np.int64), a9a.X.indptr.astype(np.int64)),
        shape=a9a.X.shape,
    )
    assert data.Dataset(X64, a9a.y, a9a.name).fingerprint == a9a.fingerprint


def test_subset_keeps_type_and_order(a9a, cancer):
    rows = np.array([5, 2, 7])
    s = a9a.subset(rows)
    assert isinstance(s.X, sp.csr_matrix) and s.X.shape == (3, 123)
    np.testing.assert_array_equal(s.X.toarray(), a9a.X[rows].toarray())
    np.testing.assert_array_equal(s.y, a9a.y[rows])
    d = cancer.subset(rows)
    assert d.X.flags.c_contiguous and d.name == cancer.name
    np.testing.assert_array_equal(d.X, cancer.X[rows])
    assert cancer.subset(cancer.y == 1).n_samples == int((cancer.y == 1).sum())


# ------------------------------------------------------------------------------------------------
# Synthetic
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["logreg", "ridge", "multiclass"])
def test_synthetic_shapes_and_determinism(kind):
    spec = f"synthetic:{kind},n=300,d=7,hetero=0.5,seed=4"
    a, b = data.load(spec), data.load(spec)
    assert a.X.shape == (300, 7) and isinstance(a.X, np.ndarray) and a.X.flags.c_contiguous
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.fingerprint == b.fingerprint
    c = data.load(f"synthetic:{kind},n=300,d=7,hetero=0.5,seed=5")
    assert not np.array_equal(a.X, c.X) and a.fingerprint != c.fingerprint
    assert a.name.startswith(f"synthetic:{kind},n=300,d=7,hetero=0.5,seed=4")
    np.testing.assert_array_equal(data.load(a.name).X, a.X)  # the name reloads the same data


def test_synthetic_defaults_and_labels():
    lr = data.load("synthetic:logreg")
    assert lr.X.shape == (2000, 100)
    assert set(np.unique(lr.y)) == {-1.0, 1.0}
    mc = data.load("synthetic:multiclass,n=500,d=5,classes=4")
    assert set(np.unique(mc.y)) <= {0.0, 1.0, 2.0, 3.0} and mc.n_classes >= 3
    rd = data.load("synthetic:ridge,n=200,d=5,noise=0")
    assert len(np.unique(rd.y)) == 200
    assert data.load("synthetic:logreg,n=2,d=1,seed=9").n_classes == 2


@pytest.mark.parametrize(
    "spec, word",
    [
        ("synthetic:logreg,n=abc", "n"),
        ("synthetic:logreg,hetero=1.5", "hetero"),
        ("synthetic:logreg,hetero=-0.1", "hetero"),
        ("synthetic:logreg,d=0", "d"),
        ("synthetic:logreg,wat=1", "wat"),
        ("synthetic:ridge,classes=3", "classes"),
        ("synthetic:multiclass,classes=1", "classes"),
        ("synthetic:logreg,n=10,clusters=11", "clusters"),
        ("synthetic:logreg,seed=-1", "seed"),
        ("synthetic:logreg,n", "key=value"),
        ("synthetic:lasso", "lasso"),
    ],
)
def test_synthetic_bad_options(spec, word):
    with pytest.raises(ConfigError, match=word):
        data.load(spec)


def _spread(ds, scheme, n_workers=10):
    parts = data.partition(ds, n_workers, scheme)
    means = np.array([ds.X[p].mean(axis=0) for p in parts])
    return float(np.linalg.norm(means - ds.X.mean(axis=0), axis=1).mean())


def test_synthetic_heterogeneity_changes_workers():
    base = "synthetic:logreg,n=2000,d=20,seed=1"
    homo = data.load(base + ",hetero=0")
    het = data.load(base + ",hetero=1")
    # contiguous = one generator cluster per worker: far apart when hetero=1
    assert _spread(het, "contiguous") > 4 * _spread(homo, "contiguous")
    # norm-sorted groups clusters of different scale
    norms = [het.row_norms()[p].mean() for p in data.partition(het, 10, "norm-sorted")]
    assert max(norms) / min(norms) > 3
    # iid stays homogeneous whatever hetero is
    assert _spread(het, "iid") < 0.5 * _spread(het, "contiguous")
    # label proportions differ between clusters
    pos = [np.mean(het.y[p] > 0) for p in data.partition(het, 10, "contiguous")]
    assert max(pos) - min(pos) > 0.2
    np.testing.assert_array_equal(het.groups, np.repeat(np.arange(10), 200))


# ------------------------------------------------------------------------------------------------
# Partitions
# ------------------------------------------------------------------------------------------------

SCHEMES = [
    "iid",
    "contiguous",
    "label-sorted",
    "norm-sorted",
    "dirichlet:0.5",
    "dirichlet:0.01",
    "skew:10",
    "skew:1",
    "label-sorted+skew:5",
    "dirichlet:1+skew:10",
]


def _check_cover(parts, n, n_workers):
    assert len(parts) == n_workers
    assert all(p.dtype == np.int64 and p.ndim == 1 and p.size >= 1 for p in parts)
    allrows = np.concatenate(parts)
    assert allrows.size == n
    np.testing.assert_array_equal(np.sort(allrows), np.arange(n))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_workers", [1, 3, 8])
def test_partition_covers_all_rows_once(cancer, scheme, n_workers):
    _check_cover(data.partition(cancer, n_workers, scheme, seed=3), cancer.n_samples, n_workers)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_partition_deterministic(scheme):
    ds = data.load("synthetic:multiclass,n=400,d=3,classes=5,hetero=0.5")
    a = data.partition(ds, 6, scheme, seed=7)
    b = data.partition(ds, 6, scheme, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_equal_sizes_differ_by_at_most_one(cancer):
    for scheme in ("iid", "label-sorted", "norm-sorted", "contiguous", "skew:1"):
        sizes = [p.size for p in data.partition(cancer, 7, scheme)]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 569


def test_iid_depends_on_seed(cancer):
    a = data.partition(cancer, 4, "iid", seed=0)
    b = data.partition(cancer, 4, "iid", seed=1)
    assert not np.array_equal(a[0], b[0])


def test_label_sorted_is_sorted(mushrooms):
    parts = data.partition(mushrooms, 20, "label-sorted")
    labels = np.concatenate([mushrooms.y[p] for p in parts])
    assert np.all(np.diff(labels) >= 0)
    # within a label, the original order is kept (stable sort)
    first = parts[0]
    assert np.all(np.diff(first) > 0)
    # heterogeneous: the first and last workers hold a single, different, class
    assert set(mushrooms.y[parts[0]]) == {1.0} and set(mushrooms.y[parts[-1]]) == {2.0}


def test_norm_sorted_is_monotone(a9a, cancer):
    for ds in (a9a, cancer):
        parts = data.partition(ds, 6, "norm-sorted")
        norms = np.concatenate([ds.row_norms()[p] for p in parts])
        assert np.all(np.diff(norms) >= 0)


def test_dirichlet_deterministic_and_skewed(mushrooms):
    a = data.partition(mushrooms, 10, "dirichlet:0.3", seed=5)
    b = data.partition(mushrooms, 10, "dirichlet:0.3", seed=5)
    c = data.partition(mushrooms, 10, "dirichlet:0.3", seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    _check_cover(a, mushrooms.n_samples, 10)
    frac = np.array([np.mean(mushrooms.y[p] == 1.0) for p in a])
    assert frac.max() - frac.min() > 0.5  # strong label skew at small alpha
    wide = data.partition(mushrooms, 10, "dirichlet:1000", seed=5)
    frac = np.array([np.mean(mushrooms.y[p] == 1.0) for p in wide])
    assert frac.max() - frac.min() < 0.1  # large alpha -> close to iid label mix


def test_dirichlet_never_leaves_a_worker_empty():
    ds = data.load("synthetic:multiclass,n=60,d=2,classes=6")
    for seed in range(5):
        _check_cover(data.partition(ds, 50, "dirichlet:0.01", seed=seed), 60, 50)


def test_dirichlet_rejects_regression_targets():
    ds = data.load("synthetic:ridge,n=2000,d=2")
    with pytest.raises(DataError, match="distinct label"):
        data.partition(ds, 4, "dirichlet:1")


def test_skew_sizes(a9a):
    sizes = np.array([p.size for p in data.partition(a9a, 10, "skew:10")])
    assert sizes.sum() == a9a.n_samples
    assert np.all(np.diff(sizes) <= 0)  # decreasing volumes, worker 0 largest
    assert sizes[-1] == sizes[-2]  # the two smallest are equal (DAGC)
    assert sizes[0] / sizes[-1] == pytest.approx(10, rel=0.01)
    np.testing.assert_allclose(sizes / sizes.sum(), data.skew_volumes(10, 10), atol=2e-4)
    ratios = sizes[:-2] / sizes[1:-1]
    np.testing.assert_allclose(ratios, 10 ** (1 / 8), rtol=0.01)  # geometric


@pytest.mark.parametrize("n_workers", [3, 4, 7, 12, 32])
@pytest.mark.parametrize("s", [1.5, 10, 100])
def test_skew_two_smallest_equal_after_rounding(cancer, n_workers, s):
    sizes = [p.size for p in data.partition(cancer, n_workers, f"skew:{s}")]
    assert sizes[-1] == sizes[-2] and sum(sizes) == 569 and min(sizes) >= 1


def test_skew_one_is_equal(cancer):
    a = data.partition(cancer, 5, "skew:1", seed=2)
    b = data.partition(cancer, 5, "iid", seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_user_sizes(cancer):
    parts = data.partition(cancer, 3, "label-sorted", sizes=[100, 200, 50])
    assert [p.size for p in parts] == [100, 200, 50]
    order = np.argsort(cancer.y, kind="stable")
    np.testing.assert_array_equal(np.concatenate(parts), order[:350])  # rest left out
    parts = data.partition(cancer, 2, "iid", sizes=[0.25, 0.75])
    assert [p.size for p in parts] == [142, 427]
    parts = data.partition(cancer, 2, "iid", sizes=np.array([10.0, 20.0]))
    assert [p.size for p in parts] == [10, 20]
    parts = data.partition(cancer, 2, "dirichlet:1", sizes=[1, 3])
    _check_cover(parts, 569, 2)


@pytest.mark.parametrize(
    "sizes, exc, word",
    [
        ([100, 0, 50], DataError, "empty"),
        ([400, 200, 50], DataError, "569"),
        ([0.5, 0.4, 0.3], ConfigError, "sum"),
        ([100, 200], ConfigError, "3 workers"),
        ([100, -5, 50], ConfigError, "negative"),
        ("100,200,50", ConfigError, "list"),
        ([100, float("nan"), 5], ConfigError, "finite"),
    ],
)
def test_bad_sizes(cancer, sizes, exc, word):
    with pytest.raises(exc, match=word):
        data.partition(cancer, 3, "iid", sizes=sizes)


def test_skew_and_sizes_conflict(cancer):
    with pytest.raises(ConfigError, match="not both"):
        data.partition(cancer, 3, "skew:3", sizes=[1, 1, 1])


@pytest.mark.parametrize(
    "scheme, word",
    [
        ("random", "valid schemes"),
        ("dirichlet:0", "> 0"),
        ("dirichlet:-1", "> 0"),
        ("dirichlet", "concentration"),
        ("dirichlet:abc", "not a number"),
        ("skew:0.5", ">= 1"),
        ("skew:inf", ">= 1"),
        ("skew", "ratio"),
        ("iid:3", "no parameter"),
        ("iid+label-sorted", "two orderings"),
        ("skew:2+skew:3", "twice"),
        ("", "non-empty"),
    ],
)
def test_bad_schemes(cancer, scheme, word):
    with pytest.raises(ConfigError, match=word):
        data.partition(cancer, 3, scheme)


def test_impossible_partitions(cancer):
    with pytest.raises(DataError, match="more workers than samples"):
        data.partition(cancer, 570, "iid")
    tiny = cancer.subset(np.arange(10))
    with pytest.raises(DataError, match="empty"):
        data.partition(tiny, 8, "skew:100")
    with pytest.raises(ConfigError, match="workers"):
        data.partition(cancer, 0, "iid")
    with pytest.raises(ConfigError, match="workers"):
        data.partition(cancer, 2.5, "iid")
    with pytest.raises(ConfigError, match="seed"):
        data.partition(cancer, 2, "iid", seed=-1)


def test_partition_schemes_listed():
    names = data.partition_schemes()
    for name in ("iid", "label-sorted", "norm-sorted", "dirichlet:<alpha>", "skew:<s>"):
        assert name in names
    assert all(isinstance(a, str) and b for a, b in data.describe_partitions())


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    n_workers=st.integers(1, 40),
    scheme=st.sampled_from(SCHEMES),
    seed=st.integers(0, 2**32),
)
def test_partition_property(n, n_workers, scheme, seed):
    ds = data.load(f"synthetic:multiclass,n={max(n, 1)},d=2,classes=3,seed=1")
    if n_workers > n:
        with pytest.raises(DataError):
            data.partition(ds, n_workers, scheme, seed=seed)
        return
    try:
        parts = data.partition(ds, n_workers, scheme, seed=seed)
    except DataError as exc:  # only a skew too steep for the data may fail
        assert "skew" in scheme and "empty" in str(exc)
        return
    _check_cover(parts, n, n_workers)


def test_module_does_not_import_mpi4py():
    code = "import sys, hpcgc.data; assert 'mpi4py' not in sys.modules, 'mpi4py imported'"
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1]
    )
