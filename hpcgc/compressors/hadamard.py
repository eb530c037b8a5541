"""``hadamard``: randomized-Hadamard-rotated quantization (DRIVE/EDEN, THC).

Vargaftik, Ben-Basat, Portnoy, Mendelson, Ben-Itzhak, Mitzenmacher, *DRIVE: One-bit Distributed Mean
Estimation*, NeurIPS 2021, and *EDEN: Communication-Efficient and Robust Distributed Mean Estimation
for Federated Learning*, ICML 2022; Li, Hu, Moshref, et al., *THC: Accelerating Distributed Deep
Learning Using Tensor Homomorphic Compression*, NSDI 2024. x (length d) is zero-padded to n = 2^⌈log₂d⌉
and rotated, y = R x_pad with R = (1/√n)·H_n·D, D a seeded random diagonal of ±1 and H_n the
Walsh–Hadamard matrix (:mod:`.kernels.hadamard`: numba, in place, O(n log n)); y is quantized by
QSGD's unbiased stochastic quantizer with s levels (:mod:`.qsgd`; max-norm scale by default, ``p=2``
for the ℓ2 norm; ``bucket`` as in qsgd, in the rotated space), and the decoder applies Rᵀ and keeps
the first d entries: C(x) = (Rᵀ Q_s(R x_pad))[:d].

Unbiased: E C(x) = Rᵀ E Q_s(y) = Rᵀ R x_pad = x (for every rotation). Variance (b = bucket size in
the rotated space, n for ``bucket=0``): R is orthogonal, so E‖C(x) − x‖² ≤ E‖Q_s(y) − y‖²
≤ min(b/s², √b/s)·‖x‖² for every rotation (QSGD's bound on y). With the max-norm scale the rotation
also helps on average: each y_i = Σ_j ±x_j/√n is a Rademacher sum, sub-Gaussian with σ² = ‖x‖²/n
(Hoeffding), so E max_{i in a bucket} y_i² ≤ 2σ²(ln(2b) + 1), and the per-entry variance
≤ (‖y_bucket‖_∞/s)²/4 summed over the n entries gives, in expectation over D (drawn independently of x),

    ω = min(b/s², √b/s, (ln(2b) + 1)/(2s²))        (p = inf; the first two alone for p = 2).

Rotation seed: drawn from the run's *shared* generator when the runner passes one (``rng.shared``,
see :func:`with_shared`): every worker uses the same rotation in an iteration, as THC does, while the
quantization draws stay independent per worker (so the n messages' errors are uncorrelated given the
rotation and the ω/n of the theory steps holds). Without one (a plain Generator: tests, ``micro``,
the downlink) the rotation seed is derived from the compressor's own seed. Either way the payload
carries it, so decoding never depends on the sharing.

Wire format (after the 8-byte header, format 21): rotation seed (uint64) | qsgd payload of dimension n
(its own header, n/b' norms, n fields of 1 + ⌈log₂(s+1)⌉ bits). Model bits: QSGD's formula at n,
F·m + n·(1 + ⌈log₂(s+1)⌉) (the shared rotation seed and the headers are overhead). Collectives:
gather and allgather. It does not ride Allreduce: a shared rotation makes the *dequantized* rotated
vectors summable, but they are floats (no saving over identity); THC's integer sums need a scale
agreed by all workers first (a max-norm round), not implemented.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import PayloadError
from .base import Compressor, Prepared, draw_seed
from .kernels import wire
from .kernels.hadamard import padded, rotate, unrotate_add
from .kernels.prng import mix64
from .params import FP64_PARAM, Param
from .qsgd import QSGD

_SALT = np.uint64(0x0DDBA11CAFEF00D5)


class _WithShared(np.random.Generator):
    """A Generator (the worker's own stream) that also carries the run's shared one as ``shared``."""


def with_shared(rng: np.random.Generator, shared: np.random.Generator) -> np.random.Generator:
    """``rng``'s stream (the same bit generator object: checkpoints restore it) plus ``shared`` as an
    attribute: what the runner hands to compressors with ``shared_rotation``."""
    g = _WithShared(rng.bit_generator)
    g.shared = shared
    return g


class Hadamard(Compressor):
    """Randomized-Hadamard rotation, then QSGD with s levels; unbiased, ω = min(b/s², √b/s,
    (ln 2b + 1)/(2s²)) (max-norm scale; the last term in expectation over the rotation)."""

    name = "hadamard"
    description = ("randomized Hadamard rotation (shared seed) then QSGD with s levels, max-norm scale (DRIVE/EDEN, "
                   "Vargaftik et al. 2021-22; THC, Li et al. 2024); omega = min(b/s^2, sqrt(b)/s, (ln(2b)+1)/(2s^2)), "
                   "b = bucket or n = 2^ceil(log2 d); bits F*m + n*(1+ceil(log2(s+1)))")
    PARAMS = (
        Param("s", int, 4, low=1, high=2**31 - 1, doc="number of quantization levels"),
        Param("bucket", int, 0, low=0, doc="bucket size in the rotated space, 0 = whole vector"),
        Param("p", float, math.inf, choices=(2, math.inf), in_spec="nondefault",
              doc="norm of the scale: inf (max-norm, the rotation's point) or 2"),
        FP64_PARAM,
    )
    FORMAT_ID = 21
    unbiased = True
    shared_rotation = True

    def _init(self) -> None:
        self.s = self._params["s"]
        self.q = QSGD(s=self.s, bucket=self._params["bucket"], p=self._params["p"], fp64=self._fp64)

    def _bucket(self, d: int) -> int:
        return self.q.bucket_size(padded(d))

    def omega(self, d: int) -> float:
        b, s = self._bucket(d), self.s
        om = min(b / s**2, math.sqrt(b) / s)
        if self._params["p"] == math.inf:
            om = min(om, (math.log(2 * b) + 1.0) / (2.0 * s**2))
        return om

    def model_bits(self, payload, d: int) -> int:
        payload = self._as_payload(payload, d)
        return self.q.model_bits(self._inner(payload, d)[1], padded(d))

    def kernel_probe(self, x: np.ndarray):
        """the rotation (sign flip, zero pad, in-place FWHT, 1/√n)
        :mod:`hpcgc.micro` times it alone against copy bandwidth: returns a no-argument callable."""
        y = np.empty(padded(x.shape[0]))
        seed = np.uint64(12345)
        return lambda: rotate(x, seed, y)

    # -- compress --------------------------------------------------------------------------------
    def compress(self, x, rng):
        shared = getattr(rng, "shared", None)
        self._rotation = None if shared is None else draw_seed(shared)
        return super().compress(x, rng)

    def prepared(self, d: int) -> Prepared:
        self.validate(d)
        enc, add = self._codec_at(d)

        def encode(x, rng):
            shared = getattr(rng, "shared", None)
            return enc(x, draw_seed(rng), None if shared is None else draw_seed(shared))
        return Prepared(encode, add)

    def _compress(self, x: np.ndarray, seed) -> np.ndarray:
        rot, self._rotation = self.__dict__.get("_rotation"), None
        return self._codec_at(x.shape[0])[0](x, seed, rot)

    def _make_codec(self, d: int) -> tuple:
        n = padded(d)
        qenc = self.q._codec_at(n)[0]
        self.q.validate(n)

        def enc(x, seed, rot=None):
            rot = np.uint64(mix64(np.uint64(seed) ^ _SALT) if rot is None else rot)
            y = np.empty(n)
            if not rotate(x, rot, y):
                raise self._nonfinite_error(x)
            try:
                pq = qenc(y, np.uint64(seed))
            except ValueError:
                raise self._nonfinite_error(x) from None
            out = self._new_payload(8 + pq.size, d)
            out[wire.HEADER_BYTES:wire.HEADER_BYTES + 8].view("<u8")[0] = rot
            out[wire.HEADER_BYTES + 8:] = pq
            return out

        def add(payload, out, weight):
            self._decode(payload, d, out, weight, True)
        return enc, add

    # -- decompress ------------------------------------------------------------------------------
    def _inner(self, payload: np.ndarray, d: int) -> tuple[np.uint64, np.ndarray]:
        wire.check_header(payload, self.name, self.FORMAT_ID, self._flags, self._fingerprint, d,
                          wire.HEADER_BYTES + 8, exact=False)
        rot = payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 8].view("<u8")[0]
        return np.uint64(rot), payload[wire.HEADER_BYTES + 8:]

    def _decode(self, payload, d, out, weight, accumulate) -> None:
        n = padded(d)
        rot, pq = self._inner(payload, d)
        y = np.empty(n)
        try:
            self.q._codec_at(n)[1](pq, y, 1.0, False)
        except PayloadError as exc:
            raise PayloadError(f"{self.name}: {exc}") from None
        unrotate_add(y, rot, out, float(weight), accumulate)

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        out = np.empty(d)
        self._decode(payload, d, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        self._decode(payload, d, out, weight, True)
