"""``countsketch``: a count sketch of the vector (FetchSGD), linear, so sketches add up under Allreduce.

Rothchild, Panda, Ullah, Ivkin, Stoica, Braverman, Gonzalez, Arora, *FetchSGD: Communication-Efficient
Federated Learning with Sketching*, ICML 2020; the sketch of Charikar, Chen, Farach-Colton (2002).
The message is S = Σ_j x_j s_r(j) e_{r, h_r(j)}, an R×C table (``rows`` × ``cols``) of hashed, signed
sums (:mod:`.kernels.sketch`); the hashes come from one 64-bit seed drawn from the run's *shared*
generator (``shared_randomness``), so every worker uses the same hashes in an iteration and the
sketches of the workers sum to the sketch of the sum.

Decoding (``decode``):

* ``mean`` (default): x̂_j = (1/R) Σ_r s_r(j)·S[r, h_r(j)]. Unbiased (E s_r(i)s_r(j) = 0 for i ≠ j), and
  per row E(x̂^r_j − x_j)² = Σ_{i≠j} x_i²/C, the rows independent, so E‖x̂ − x‖² = (d − 1)/(R·C)·‖x‖²:
  ω = (d − 1)/(R·C) (ideal hashes; ours are SplitMix64 words). It is linear: unsketching the summed
  table equals summing the unsketched messages.
* ``topk``: FetchSGD's unsketch — the median of the R row estimates per coordinate, then its k largest
  |x̂_j| kept (the heavy hitters). The median is *not* unbiased, and the heavy-hitter recovery holds with
  high probability for vectors that have heavy hitters, not for every x: no ω and no δ (error feedback,
  which FetchSGD uses, refuses it for want of δ; ``local-sgd`` takes it). Under Allreduce the top-k is
  taken on the unsketched *aggregate* (FetchSGD's server), under gather/allgather on each message
  before the sum: the two differ. A sketch whose rows have fewer buckets than the k it must recover
  (cols < k) is refused.

Wire format (after the 8-byte header, format 22): the hash seed (uint64), then the R·C table entries,
row-major, float32 (float64 with ``fp64=true``). Model bits: R·C·F (the shared seed is overhead).
Allreduce: the R·C table itself (:class:`SketchSum`), wire bytes = the table's bytes.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import wire
from .kernels.sketch import sketch_add, unsketch
from .params import FP64_PARAM, Param
from .summable import SumCodec


def _top_k(est: np.ndarray, k: int) -> np.ndarray:
    """est with all but its k largest |entries| zeroed (in place; ties by argpartition)."""
    if k < est.shape[0]:
        drop = np.argpartition(np.abs(est), est.shape[0] - k)[:est.shape[0] - k]
        est[drop] = 0.0
    return est


class CountSketch(Compressor):
    """Count sketch, R rows × C columns, shared hashes; decode=mean: unbiased, ω = (d − 1)/(R·C);
    decode=topk: FetchSGD's median estimate and top-k (biased, no δ)."""

    name = "countsketch"
    description = ("count sketch rows x cols, hashes from the shared seed, sums under Allreduce (FetchSGD, "
                   "Rothchild et al. 2020); decode=mean: unbiased, omega = (d-1)/(rows*cols); decode=topk: "
                   "median estimate then top-k (biased, no delta); bits rows*cols*F")
    PARAMS = (
        Param("rows", int, 1, low=1, high=64, doc="hash rows R"),
        Param("cols", int, low=1, high=2**28, doc="buckets per row C"),
        Param("decode", str, "mean", choices=("mean", "topk"), in_spec="nondefault",
              doc="mean (unbiased row mean) or topk (FetchSGD: median estimate, k heavy hitters)"),
        Param("k", int, 0, low=0, high=2**32 - 1, in_spec="nondefault",
              doc="heavy hitters recovered with decode=topk (1 <= k <= cols)"),
        FP64_PARAM,
    )
    FORMAT_ID = 22
    shared_randomness = True
    collectives = ("gather", "allreduce", "allgather")

    def _init(self) -> None:
        p = self._params
        self.rows, self.cols, self.k = p["rows"], p["cols"], p["k"]
        self.topk = p["decode"] == "topk"
        if self.topk and not 1 <= self.k <= self.cols:
            raise ConfigError(f"{self.spec}: decode=topk recovers k heavy hitters and needs 1 <= k <= cols "
                              f"(a sketch row of {self.cols} buckets cannot separate {self.k}); got k={self.k}")
        if not self.topk and self.k:
            raise ConfigError(f"{self.spec}: k is the number of heavy hitters of decode=topk; remove it or "
                              "set decode=topk")
        self.unbiased = not self.topk

    def omega(self, d: int) -> float | None:
        return None if self.topk else (d - 1) / (self.rows * self.cols)

    def delta(self, d: int) -> float | None:
        return None if self.topk else super().delta(d)

    def _validate(self, d: int) -> None:
        if self.topk and self.k > d:
            raise ConfigError(f"{self.name}: parameter k={self.k} is out of range for d={d}; allowed: 1 <= k <= d")

    def _cells(self) -> int:
        return self.rows * self.cols

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    def model_bits(self, payload, d: int) -> int:
        self._check_payload(self._as_payload(payload, d), d, 8 + self._cells() * self._scale_bytes)
        return self._cells() * self._float_bits

    def _table(self, x: np.ndarray, seed, weight: float = 1.0) -> np.ndarray:
        table = np.zeros((self.rows, self.cols))
        if not sketch_add(x, np.uint64(seed), float(weight), table):
            raise self._nonfinite_error(x)
        return table

    def _compress(self, x: np.ndarray, seed) -> np.ndarray:
        table = self._table(x, seed)
        out = self._new_payload(8 + self._cells() * self._scale_bytes, x.shape[0])
        out[wire.HEADER_BYTES:wire.HEADER_BYTES + 8].view("<u8")[0] = np.uint64(seed)
        vals = out[wire.HEADER_BYTES + 8:].view(self._dtype())
        vals[:] = table.ravel()
        if not np.isfinite(vals).all():
            raise self._nonfinite_error(x, "sketch (float32)")
        return out

    def estimate(self, table: np.ndarray, seed, d: int) -> np.ndarray:
        """The decoded vector of a (summed) table: the row mean, or the median and top-k."""
        est = np.empty(d)
        unsketch(np.ascontiguousarray(table, dtype=np.float64), np.uint64(seed), self.topk, est)
        return _top_k(est, self.k) if self.topk else est

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        self._check_payload(payload, d, 8 + self._cells() * self._scale_bytes)
        seed = payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 8].view("<u8")[0]
        vals = wire.read_array(payload, wire.HEADER_BYTES + 8, self._cells(), self._dtype())
        if not np.isfinite(vals).all():
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        return self.estimate(vals.astype(np.float64).reshape(self.rows, self.cols), seed, d)

    def sum_codec(self, d: int, shape=None):
        self.validate(d)
        return SketchSum(self, d)


class SketchSum(SumCodec):
    """``countsketch`` under Allreduce: the R×C table (float32, or float64), hashes from the iteration's
    shared seed; the summed table is unsketched once (decode=topk: FetchSGD's top-k of the aggregate)."""

    def __init__(self, comp: CountSketch, d: int):
        self.c, self.d = comp, d
        self.dtype = np.float64 if comp._fp64 else np.float32
        self._v = np.empty(comp._cells(), dtype=self.dtype)

    def lengths(self):
        return (self._v.shape[0],)

    def begin(self, x, weight, rng):
        self._seed = rng.integers(0, 2**64, dtype=np.uint64)          # as compress() draws it
        own = self.c._table(x, self._seed)
        self._own = own.ravel().astype(self.dtype)
        if weight == 1.0:
            self._v[:] = self._own
        else:
            np.multiply(own.ravel(), weight, out=self._v, casting="unsafe")
        if not (np.isfinite(self._v).all() and np.isfinite(self._own).all()):
            raise ValueError("countsketch: the sketch exceeds the float32 range (use fp64=true)")
        return self._v

    def _decoded(self, table_flat) -> np.ndarray:
        return self.c.estimate(table_flat.astype(np.float64).reshape(self.c.rows, self.c.cols), self._seed, self.d)

    def decode_add(self, total, out, scale=1.0):
        out += scale * self._decoded(total) if scale != 1.0 else self._decoded(total)

    def own_add(self, out, weight):
        out += weight * self._decoded(self._own)

    def model_bits(self):
        return float(self.c._cells() * 8 * np.dtype(self.dtype).itemsize)
