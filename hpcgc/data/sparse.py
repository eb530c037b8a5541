"""The sparse high-dimensional generator (``synthetic:sparse``): rows in the spirit of the large
LIBSVM text sets (news20, url, kdd2010: d = 10⁶ … 10⁷, a few dozen nonzeros per row, power-law
feature frequencies) with a planted linear model so logistic regression has signal.

Model (``docs/data.md``), for a seed s:

* feature j (0-based) is drawn with probability p_j ∝ (j + 1)^(−zipf) (Zipf's law over the
  feature ranks: feature 0 is the most frequent); each row holds ``nnz`` *distinct* features,
  drawn from p without replacement (duplicates redrawn);
* values are log-normal(0, 0.5), each row scaled to unit Euclidean norm (as tf-idf rows are)
  and rounded to 6 decimals, so a LIBSVM file written with ``%.16g`` reads back bit for bit;
* a planted w* with iid N(0, 1) coordinates; y_i = +1 with probability σ(snr · ⟨x_i, w*⟩), else −1.

Rows are generated in blocks of :data:`BLOCK_ROWS`; block b draws from
``SeedSequence(seed, spawn_key=(SAMPLE_STREAM, b))`` and w* from
``SeedSequence(seed, spawn_key=(MODEL_STREAM,))``. Any rank can therefore produce exactly rows
i..j (or any row set) without producing the others; a block is always drawn whole, so the rows
do not depend on n.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hpcgc.errors import ConfigError, DataError

from .dataset import Dataset
from .options import _parse_float, _parse_int, _split_options

SPARSE_KIND = "sparse"
#: Rows per seeded block: the unit of generation (a block's rows come from one generator).
BLOCK_ROWS = 4096
MODEL_STREAM = 0x3A7
SAMPLE_STREAM = 0x5A3
#: Values are rounded to this many decimals (exact LIBSVM round trip).
DECIMALS = 6
#: Largest n × nnz the generator accepts (12 bytes per nonzero: 24 GB); catches typos.
MAX_SPARSE_NONZEROS = 2_000_000_000
#: Largest d (feature indices must fit in int32, as scipy's CSR uses).
MAX_SPARSE_FEATURES = 2**31 - 1
#: Rejection rounds before the (slow, exact) per-row fallback for the duplicate draws that remain.
REDRAW_ROUNDS = 64

SPARSE_DEFAULTS = {"n": 10000, "d": 2**20, "nnz": 40, "zipf": 1.1, "snr": 4.0, "seed": 0}
SPARSE_USAGE = "synthetic:sparse[,n=10000,d=1048576,nnz=40,zipf=1.1,snr=4,seed=0]"
CLASSES = np.array([-1.0, 1.0])


def parse_sparse_options(tokens) -> dict:
    """``['n=1000', 'd=65536', ...]`` → the full option dict (defaults filled in), or ConfigError."""
    context = f"synthetic:{SPARSE_KIND}"
    raw = _split_options(tokens, set(SPARSE_DEFAULTS), context)
    opts = dict(SPARSE_DEFAULTS)
    for key, text in raw.items():
        if key in ("n", "d", "nnz"):
            opts[key] = _parse_int(key, text, context, minimum=1)
        elif key == "seed":
            opts[key] = _parse_int(key, text, context, minimum=0)
        elif key == "zipf":
            opts[key] = _parse_float(key, text, context, lo=0.0, hi=10.0)
        else:  # snr
            opts[key] = _parse_float(key, text, context, lo=0.0)
    if opts["d"] > MAX_SPARSE_FEATURES:
        raise ConfigError(f"{context}: option d = {opts['d']} is too large (limit {MAX_SPARSE_FEATURES}: "
                          "feature indices are int32)")
    if opts["nnz"] > opts["d"]:
        raise ConfigError(f"{context}: option nnz = {opts['nnz']} nonzeros per row exceeds the number of "
                          f"features d = {opts['d']} (a row holds distinct features)")
    if opts["n"] * opts["nnz"] > MAX_SPARSE_NONZEROS:
        raise ConfigError(f"{context}: n×nnz = {opts['n']}×{opts['nnz']} nonzeros is too large "
                          f"(limit {MAX_SPARSE_NONZEROS:.0e})")
    return opts


class SparseGenerator:
    """The generator for one option set; :meth:`rows` / :meth:`subset` give any rows as a
    :class:`Dataset`, :meth:`dataset` all of them, :meth:`write_libsvm` a LIBSVM file.

    Holds one d-vector while alive (w*, built on first use).
    """

    def __init__(self, *, n, d, nnz, zipf, snr, seed):
        self.n, self.d, self.nnz = int(n), int(d), int(nnz)
        self.zipf, self.snr, self.seed = float(zipf), float(snr), int(seed)
        self.name = (f"synthetic:{SPARSE_KIND},n={self.n},d={self.d},nnz={self.nnz},zipf={self.zipf!r},"
                     f"snr={self.snr!r},seed={self.seed}")
        self._w = None

    @classmethod
    def from_tokens(cls, tokens) -> SparseGenerator:
        return cls(**parse_sparse_options(tokens))

    # the attributes data.partition reads for the content-free schemes (iid, contiguous)
    @property
    def n_samples(self) -> int:
        return self.n

    @property
    def n_features(self) -> int:
        return self.d

    def _planted(self) -> np.ndarray:
        """w* (one d-vector, kept while the generator lives)."""
        if self._w is None:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(MODEL_STREAM,)))
            self._w = rng.standard_normal(self.d)
        return self._w

    def _block(self, b: int):
        """Rows [b·BLOCK_ROWS, min(n, (b+1)·BLOCK_ROWS)): (indices (m, nnz) int32, sorted per row;
        values (m, nnz); labels (m,))."""
        lo = b * BLOCK_ROWS
        m = min(self.n, lo + BLOCK_ROWS) - lo
        w = self._planted()
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(SAMPLE_STREAM, b)))
        # a whole block is drawn even when n ends inside it: a row never depends on n
        idx = self._draw(rng, BLOCK_ROWS)
        vals = rng.lognormal(0.0, 0.5, size=(BLOCK_ROWS, self.nnz))
        u = rng.random(BLOCK_ROWS)
        idx, vals, u = idx[:m], vals[:m], u[:m]
        vals /= np.sqrt(np.einsum("ij,ij->i", vals, vals))[:, None]
        vals = np.maximum(np.round(vals, DECIMALS), 10.0 ** -DECIMALS)
        margin = self.snr * np.einsum("ij,ij->i", vals, w[idx])
        prob = 0.5 * (1.0 + np.tanh(0.5 * margin))          # σ(margin), overflow-free
        y = np.where(u < prob, 1.0, -1.0)
        return idx, vals, y

    def _draw(self, rng, m: int) -> np.ndarray:
        """(m, nnz) int32 feature indices, each row sorted and distinct, drawn from the Zipf law;
        duplicate draws are redrawn (vectorised rejection, then an exact per-row fallback)."""
        k, d = self.nnz, self.d
        zipf = ZipfSampler(d, self.zipf)
        idx = np.sort(zipf.sample(rng, (m, k)), axis=1)
        for _ in range(REDRAW_ROUNDS):
            dup = np.zeros((m, k), dtype=bool)
            dup[:, 1:] = idx[:, 1:] == idx[:, :-1]
            count = int(dup.sum())
            if count == 0:
                return idx
            idx[dup] = zipf.sample(rng, count)
            idx.sort(axis=1)
        bad = np.flatnonzero((idx[:, 1:] == idx[:, :-1]).any(axis=1))
        if bad.size:                                 # nnz close to d only (small d): exact, per row
            p = np.arange(1, d + 1, dtype=np.float64) ** -self.zipf
            p /= p.sum()
            for i in bad:
                idx[i] = np.sort(rng.choice(d, size=k, replace=False, p=p))
        return idx

    def _dataset(self, idx, vals, y) -> Dataset:
        import scipy.sparse as sp  # only where a sparse matrix is built (hpcgc/matrix.py)
        m, k = idx.shape
        X = sp.csr_matrix((vals.ravel(), idx.ravel(), np.arange(0, m * k + 1, k, dtype=np.int64)),
                          shape=(m, self.d))
        X.has_sorted_indices = True
        return Dataset(X, y, self.name, source=self.name, classes=CLASSES)

    def blocks(self, rows=None):
        """The blocks a row set touches (all blocks for None), in order."""
        if rows is None:
            return range(-(-self.n // BLOCK_ROWS))
        return np.unique(np.asarray(rows, dtype=np.int64) // BLOCK_ROWS)

    def subset(self, rows) -> Dataset:
        """Rows ``rows`` (integer indices into 0..n-1, in the given order), generating only the
        blocks they touch, one at a time (memory: the result plus one block)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"row index out of range for {self.n} rows")
        idx = np.empty((rows.size, self.nnz), dtype=np.int32)
        vals = np.empty((rows.size, self.nnz))
        y = np.empty(rows.size)
        contiguous = rows.size > 0 and rows[-1] - rows[0] == rows.size - 1 and bool(np.all(np.diff(rows) == 1))
        order = np.arange(rows.size) if contiguous else np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        for b in self.blocks(sorted_rows):
            lo, hi = np.searchsorted(sorted_rows, [b * BLOCK_ROWS, (b + 1) * BLOCK_ROWS])
            bi, bv, by = self._block(int(b))
            if contiguous:                           # slices, no gathers
                first = sorted_rows[lo] - b * BLOCK_ROWS
                local, dest = slice(first, first + hi - lo), slice(lo, hi)
            else:
                local, dest = sorted_rows[lo:hi] - b * BLOCK_ROWS, order[lo:hi]
            idx[dest], vals[dest], y[dest] = bi[local], bv[local], by[local]
        return self._dataset(idx, vals, y)

    def rows(self, start: int, stop: int) -> Dataset:
        """Rows start..stop-1."""
        return self.subset(np.arange(start, stop, dtype=np.int64))

    def dataset(self) -> Dataset:
        """All n rows."""
        return self.rows(0, self.n)

    def write_libsvm(self, path) -> int:
        """Write all rows as a LIBSVM file (1-based indices, values ``%.16g``, no header), one block
        at a time with scikit-learn's writer; returns the bytes written. Same options ⇒ same bytes."""
        from sklearn.datasets import dump_svmlight_file
        path = Path(path)
        try:
            with open(path, "wb") as f:
                for b in self.blocks():
                    block = self.rows(b * BLOCK_ROWS, min(self.n, (b + 1) * BLOCK_ROWS))
                    dump_svmlight_file(block.X, block.y, f, zero_based=False)
                return f.tell()
        except OSError as exc:
            raise DataError(f"cannot write {path}: {exc.strerror or exc}") from None


class ZipfSampler:
    """Exact draws from the bounded Zipf law P(j) ∝ (j + 1)^(−s), j = 0 … d−1, s ≥ 0, in O(1) per
    draw without a d-sized table: rejection-inversion (W. Hörmann, G. Derflinger, *Rejection-
    inversion to generate variates from monotone discrete distributions*, ACM TOMACS 6(3), 1996),
    as in Apache Commons Math's ``ZipfDistribution.ZipfRejectionInversionSampler``, vectorised
    (the rejected draws, a few percent, are drawn again)."""

    def __init__(self, d: int, s: float):
        self.d, self.s = int(d), float(s)
        self.h_x1 = self._H(1.5) - 1.0
        self.h_n = self._H(self.d + 0.5)
        self.shortcut = 2.0 - self._H_inv(self._H(2.5) - self._h(2.0))

    @staticmethod
    def _ratio(t, f):
        """f(t)/t with the limit 1 at t = 0 (f = log1p or expm1)."""
        t = np.asarray(t, dtype=np.float64)
        small = np.abs(t) < 1e-8
        return np.where(small, 1.0, f(t) / np.where(small, 1.0, t))

    def _H(self, x):             # ∫ h = ((x^(1−s)) − 1)/(1 − s), log x at s = 1
        log_x = np.log(x)
        return self._ratio((1.0 - self.s) * log_x, np.expm1) * log_x

    def _h(self, x):
        return np.exp(-self.s * np.log(x))

    def _H_inv(self, y):
        t = np.maximum(y * (1.0 - self.s), -1.0)
        return np.exp(self._ratio(t, np.log1p) * y)

    def sample(self, rng, size) -> np.ndarray:
        """int32 draws of shape ``size`` (0-based ranks)."""
        n = int(np.prod(size))
        out = np.empty(n, dtype=np.int32)
        todo = np.arange(n)
        while todo.size:
            u = self.h_n + rng.random(todo.size) * (self.h_x1 - self.h_n)
            x = self._H_inv(u)
            k = np.clip(np.floor(x + 0.5), 1, self.d)
            ok = k - x <= self.shortcut                  # most draws: accepted without H and h
            rest = np.flatnonzero(~ok)
            kr = k[rest]
            ok[rest] = u[rest] >= self._H(kr + 0.5) - self._h(kr)
            out[todo[ok]] = (k[ok] - 1).astype(np.int32)
            todo = todo[~ok]
        return out.reshape(size)


def describe_row() -> tuple[str, str]:
    return (SPARSE_USAGE, "sparse high-dimensional logreg data: nnz distinct features per row with "
                          "Zipf(zipf) frequencies, unit-norm rows, labels from a planted model (docs/data.md)")


def zipf_exponent(X, lo_rank: int = 10, min_count: int = 50) -> float:
    """The feature-frequency exponent fitted to a matrix: least squares of log(document frequency)
    on log(rank) over ranks lo_rank … the last with at least ``min_count`` rows (the head, where
    a feature cannot appear more than once per row, and the noisy tail are left out)."""
    import scipy.sparse as sp
    counts = np.sort(np.bincount(sp.csr_matrix(X).indices, minlength=X.shape[1]))[::-1]
    hi = int(np.searchsorted(-counts, -min_count, side="right"))
    if hi - lo_rank < 10:
        raise ValueError(f"too few frequent features to fit an exponent ({max(hi - lo_rank, 0)} ranks)")
    r = np.arange(lo_rank, hi, dtype=np.float64) + 1.0
    slope = np.polyfit(np.log(r), np.log(counts[lo_rank:hi]), 1)[0]
    return float(-slope) if math.isfinite(slope) else math.nan
