"""Sparse messages: the index encoding shared by rand-k, top-k, hard threshold and C_nat ∘ rand-k.

A sparse message carries nnz values and their indices j_0 < j_1 < … < j_{nnz−1} in [0, d). The
indices travel in whichever of two encodings is smaller for this message, recorded in header flag
bit 1 (``wire.FLAG_ELIAS``):

* **fixed** (flag 0): nnz fields of ``w = ⌈log₂d⌉`` bits, LSB-first (``wire.pack_fixed_width``),
  nnz·w bits;
* **Elias-omega gaps** (flag 1): the gaps g_0 = j_0 + 1, g_i = j_i − j_{i−1} (all ≥ 1), each
  Elias-omega coded (Elias, *Universal codeword sets and representations of the integers*, IEEE
  Trans. IT 21(2), 1975), Σ_i |ω(g_i)| bits. The code of n ≥ 1 is R(n)·``0`` with R(1) empty
  and R(n) = R(⌊log₂n⌋)·binary(n). The stream is LSB-first like every bit stream here (stream
  bit b is bit b mod 8 of byte ⌊b/8⌋) and each code is written first bit first (the same layout
  as :mod:`.elias_omega`); the last byte is padded with zero bits.

Ties go to the fixed encoding. Both are bounds-checked on decode: a stream that runs past its
end, codes a gap that leaves [0, d), has a group longer than 32 bits, leaves whole bytes unused or
non-zero padding bits is rejected (PayloadError); the decoder never reads outside the payload.
Model bits of a sparse message count the encoding actually used: nnz·F + min(nnz·w, Σ|ω(g_i)|)
(the papers' k·(F + ⌈log₂d⌉) when the fixed encoding is smaller).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from . import wire
from .base import Compressor
from .norms import nonfinite_flag

# decode status codes (negative: error)
ERR_TRUNCATED = -1
ERR_RANGE = -2
ERR_TRAILING = -3
ERR_PADDING = -4

_MESSAGES = {
    ERR_TRUNCATED: "Elias-omega index stream truncated",
    ERR_RANGE: "Elias-omega index stream codes an index outside [0, d) or an over-long group",
    ERR_TRAILING: "Elias-omega index stream has trailing bytes",
    ERR_PADDING: "Elias-omega index stream has non-zero padding bits",
}


@njit(cache=True)
def bit_length(n):
    """Number of bits of n ≥ 0 (0 for n = 0), for n < 2^63."""
    n = np.int64(n)
    r = 0
    if n >= np.int64(1) << 32:
        n >>= 32
        r += 32
    if n >= 65536:
        n >>= 16
        r += 16
    if n >= 256:
        n >>= 8
        r += 8
    if n >= 16:
        n >>= 4
        r += 4
    if n >= 4:
        n >>= 2
        r += 2
    if n >= 2:
        n >>= 1
        r += 1
    return r + np.int64(n)


@njit(cache=True)
def elias_omega_length(n):
    """|ω(n)| in bits, n ≥ 1: 1 for n = 1, else bit_length(n) + |ω(bit_length(n) − 1)|."""
    length = 1
    while n > 1:
        b = bit_length(n)
        length += b
        n = b - 1
    return length


@njit(cache=True)
def elias_gap_bits(idx):
    """Σ_i |ω(g_i)| for the gaps of the increasing indices ``idx`` (g_0 = idx[0] + 1)."""
    total = 0
    prev = -1
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        total += elias_omega_length(j - prev)
        prev = j
    return total


@njit(cache=True)
def reverse_bits(v, n):
    """The low n bits of v (uint64, 1 ≤ n ≤ 64) in reverse order."""
    v = np.uint64(v)
    v = ((v >> np.uint64(1)) & np.uint64(0x5555555555555555)) | ((v & np.uint64(0x5555555555555555)) << np.uint64(1))
    v = ((v >> np.uint64(2)) & np.uint64(0x3333333333333333)) | ((v & np.uint64(0x3333333333333333)) << np.uint64(2))
    v = ((v >> np.uint64(4)) & np.uint64(0x0F0F0F0F0F0F0F0F)) | ((v & np.uint64(0x0F0F0F0F0F0F0F0F)) << np.uint64(4))
    v = ((v >> np.uint64(8)) & np.uint64(0x00FF00FF00FF00FF)) | ((v & np.uint64(0x00FF00FF00FF00FF)) << np.uint64(8))
    v = ((v >> np.uint64(16)) & np.uint64(0x0000FFFF0000FFFF)) | ((v & np.uint64(0x0000FFFF0000FFFF)) << np.uint64(16))
    v = (v >> np.uint64(32)) | (v << np.uint64(32))
    return v >> np.uint64(64 - n)


@njit(cache=True)
def elias_omega_encode_gaps(idx, out, offset):
    """Write the Elias-omega codes of the gaps of increasing ``idx`` into ``out[offset:]``
    (LSB-first stream, each code first bit first); returns the number of bytes written
    (= ⌈elias_gap_bits(idx)/8⌉). Unused high bits of the last byte are zero."""
    acc = np.uint64(0)
    nacc = 0
    pos = offset
    prev = -1
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        n = j - prev
        prev = j
        code = np.uint64(0)          # the code in natural order, built from its last group
        length = 1                   # the terminating 0
        while n > 1:
            b = bit_length(n)
            code |= np.uint64(n) << np.uint64(length)
            length += b
            n = b - 1
        acc |= reverse_bits(code, length) << np.uint64(nacc)
        nacc += length
        while nacc >= 8:
            out[pos] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            nacc -= 8
            pos += 1
    if nacc > 0:
        out[pos] = np.uint8(acc & np.uint64(0xFF))
        pos += 1
    return pos - offset


@njit(cache=True)
def elias_omega_decode_gaps(src, offset, end, d, idx):
    """Decode len(idx) Elias-omega gaps from ``src[offset:end]`` into increasing indices.

    Returns the number of bits consumed (≥ 0), or a negative status: ERR_TRUNCATED (the stream
    ends inside a code), ERR_RANGE (an index ≥ d or a group longer than 32 bits), ERR_TRAILING
    (whole unused bytes after the last code), ERR_PADDING (non-zero padding bits). Reads only
    ``src[offset:end]``.
    """
    buf = np.uint64(0)
    nbuf = 0                    # valid bits at the bottom of buf, next stream bit = bit 0
    pos = offset                # next byte to load
    prev = -1
    for i in range(idx.shape[0]):
        n = 1
        while True:
            if nbuf == 0:
                if pos >= end:
                    return ERR_TRUNCATED
                buf = np.uint64(src[pos])
                pos += 1
                nbuf = 8
            bit = buf & np.uint64(1)
            buf >>= np.uint64(1)
            nbuf -= 1
            if bit == 0:
                break
            if n > 31:          # a group of n + 1 > 32 bits: no valid gap (< 2^32) needs it
                return ERR_RANGE
            while nbuf < n:
                if pos >= end:
                    return ERR_TRUNCATED
                buf |= np.uint64(src[pos]) << np.uint64(nbuf)
                pos += 1
                nbuf += 8
            chunk = buf & ((np.uint64(1) << np.uint64(n)) - np.uint64(1))
            buf >>= np.uint64(n)
            nbuf -= n
            n = np.int64(reverse_bits(chunk, n) | (np.uint64(1) << np.uint64(n)))
        j = prev + n
        if j >= d:
            return ERR_RANGE
        idx[i] = j
        prev = j
    if pos < end:
        return ERR_TRAILING
    if nbuf > 0 and buf != 0:
        return ERR_PADDING
    return (pos - offset) * 8 - nbuf


@njit(cache=True)
def indices_valid(idx, d):
    """True if ``idx`` is strictly increasing and inside [0, d)."""
    prev = -1
    for i in range(idx.shape[0]):
        j = idx[i]
        if j <= prev or j >= d:
            return False
        prev = j
    return True


@njit(cache=True)
def gather_checked(x, idx, values):
    """values[i] = x[idx[i]] (cast to values' dtype); returns 0.0, or NaN if a value is non-finite."""
    chk = 0.0
    for i in range(idx.shape[0]):
        values[i] = x[idx[i]]
        chk += values[i] * 0.0
    return chk


@njit(cache=True)
def scatter_scaled(values, idx, scale, out, accumulate):
    """out[idx[i]] (+)= scale·values[i]; the caller zeroes ``out`` when not accumulating."""
    if accumulate:
        for i in range(idx.shape[0]):
            out[idx[i]] += scale * values[i]
    else:
        for i in range(idx.shape[0]):
            out[idx[i]] = scale * values[i]


# ------------------------------------------------------------------------------------------------
# Python helpers used by the sparse compressors
# ------------------------------------------------------------------------------------------------

def index_bits(idx: np.ndarray, d: int) -> tuple[bool, int]:
    """(use Elias-omega?, index bits) for increasing ``idx``: the smaller encoding, ties fixed."""
    fixed = idx.shape[0] * wire.bits_for(d)
    elias = int(elias_gap_bits(idx)) if idx.shape[0] else 0
    return (True, elias) if elias < fixed else (False, fixed)


def write_indices(idx: np.ndarray, d: int, use_elias: bool, out: np.ndarray, offset: int) -> None:
    """Write the index stream (sized by :func:`index_bits`) at ``out[offset:]``."""
    if use_elias:
        elias_omega_encode_gaps(idx, out, offset)
    else:
        wire.pack_fixed_width(idx, wire.bits_for(d), out, offset)


def fixed_stream_bytes(nnz: int, d: int) -> int:
    return wire.packed_bytes(nnz, wire.bits_for(d))


def read_indices(payload: np.ndarray, offset: int, nnz: int, d: int, use_elias: bool,
                 who: str) -> tuple[np.ndarray, int]:
    """Decode and validate the index stream at ``payload[offset:]``, which must end exactly at the
    end of the payload; returns (indices as int64, index bits as counted by the model)."""
    idx = np.empty(nnz, dtype=np.int64)
    end = payload.size
    if use_elias:
        status = int(elias_omega_decode_gaps(payload, offset, end, d, idx))
        if status < 0:
            raise PayloadError(f"{who}: corrupted payload: {_MESSAGES[status]}")
        if status >= nnz * wire.bits_for(d):
            raise PayloadError(f"{who}: corrupted payload: Elias-omega flag set but the stream is "
                               f"not shorter than fixed-width indices")
        return idx, status
    need = fixed_stream_bytes(nnz, d)
    if end - offset != need:
        what = "truncated" if end - offset < need else "has trailing bytes"
        raise PayloadError(f"{who}: payload {what}: {end} bytes, expected {offset + need} for d={d}")
    wire.unpack_fixed_width(payload, offset, wire.bits_for(d), idx)
    if not indices_valid(idx, d):
        raise PayloadError(f"{who}: corrupted payload: indices not strictly increasing in [0, {d})")
    tail = (nnz * wire.bits_for(d)) % 8
    if tail and payload[end - 1] >> tail:
        raise PayloadError(f"{who}: corrupted payload: non-zero padding bits after the last index")
    return idx, nnz * wire.bits_for(d)


class SparseCompressor(Compressor):
    """Shared layout of sparse messages (after the 8-byte header)::

        [nnz: uint32, only if the count varies (``VARIABLE_NNZ``)]
        values: nnz × float32 (float64 with ``fp64=true``), or the subclass's value encoding
        index stream: fixed ⌈log₂d⌉-bit fields or Elias-omega gaps (header flag bit 1)

    Subclasses set ``VARIABLE_NNZ`` and, for fixed-count formats, implement ``_nnz(d)``; a value
    encoding other than F-bit floats overrides ``_value_bytes``/``_value_bits``.
    """

    VARIABLE_NNZ: ClassVar[bool] = False

    def _nnz(self, d: int) -> int:
        raise NotImplementedError

    def _value_bytes(self, nnz: int) -> int:
        return nnz * self._scale_bytes

    def _value_bits(self, nnz: int) -> int:
        return nnz * self._float_bits

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    @property
    def _prefix(self) -> int:
        return 4 if self.VARIABLE_NNZ else 0

    def _new_sparse_payload(self, idx: np.ndarray, d: int) -> tuple[np.ndarray, int, int]:
        """Payload for these increasing indices; returns (payload, values offset, values bytes).
        Writes header, count and index stream; the caller writes the values."""
        nnz = idx.shape[0]
        use_elias, ibits = index_bits(idx, d)
        vbytes = self._value_bytes(nnz)
        flags = self._flags | (wire.FLAG_ELIAS if use_elias else 0)
        payload = wire.new_payload(self._prefix + vbytes + (ibits + 7) // 8, self.FORMAT_ID, flags,
                                   self._fingerprint, d)
        if self.VARIABLE_NNZ:
            payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<u4")[0] = nnz
        voff = wire.HEADER_BYTES + self._prefix
        write_indices(idx, d, use_elias, payload, voff + vbytes)
        return payload, voff, vbytes

    def _read_sparse(self, payload, d: int) -> tuple[np.ndarray, int, int, np.ndarray, int]:
        """Check header, count and index stream; returns (payload, values offset, nnz, indices,
        index bits)."""
        payload = self._as_payload(payload, d)
        flags = wire.check_header(payload, self.name, self.FORMAT_ID, self._flags, self._fingerprint,
                                  d, wire.HEADER_BYTES + self._prefix, free_flags=wire.FLAG_ELIAS,
                                  exact=False)
        if self.VARIABLE_NNZ:
            nnz = int.from_bytes(payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].tobytes(), "little")
            if nnz > d:
                raise PayloadError(f"{self.name}: corrupted payload: {nnz} nonzeros for d={d}")
        else:
            nnz = self._nnz(d)
        voff = wire.HEADER_BYTES + self._prefix
        vbytes = self._value_bytes(nnz)
        if payload.size < voff + vbytes:
            raise PayloadError(f"{self.name}: payload truncated: {payload.size} bytes, shorter than "
                               f"its {nnz} values")
        idx, ibits = read_indices(payload, voff + vbytes, nnz, d, bool(flags & wire.FLAG_ELIAS),
                                  self.name)
        return payload, voff, nnz, idx, ibits

    def _read_values(self, payload: np.ndarray, voff: int, nnz: int) -> np.ndarray:
        values = wire.read_array(payload, voff, nnz, self._dtype())
        if nonfinite_flag(values) != 0.0:
            raise PayloadError(f"{self.name}: corrupted payload: non-finite value")
        return values

    def model_bits(self, payload, d: int) -> int:
        """nnz·F + index bits of the encoding used (fixed nnz·⌈log₂d⌉ or Elias-omega gaps)."""
        _, _, nnz, _, ibits = self._read_sparse(payload, d)
        return self._value_bits(nnz) + ibits

    def _scale(self, d: int, nnz: int) -> float:
        """Factor applied to the decoded values (d/k for rand-k, 1 for top-k and threshold)."""
        return 1.0

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        payload, voff, nnz, idx, _ = self._read_sparse(payload, d)
        values = self._read_values(payload, voff, nnz)
        out = np.zeros(d)
        scatter_scaled(values, idx, self._scale(d, nnz), out, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        payload, voff, nnz, idx, _ = self._read_sparse(payload, d)
        values = self._read_values(payload, voff, nnz)
        scatter_scaled(values, idx, weight * self._scale(d, nnz), out, True)


class FixedKSparse(SparseCompressor):
    """A sparse format with exactly k ≤ d kept entries, k the parameter ``k`` (rand-k, top-k, …)."""

    def _init(self) -> None:
        self.k = self._params["k"]

    def _validate(self, d: int) -> None:
        if self.k > d:
            raise ConfigError(f"{self.name}: parameter k={self.k} is out of range for d={d}; "
                              f"allowed: 1 <= k <= d")

    def _nnz(self, d: int) -> int:
        return self.k

    def _check_k(self, d: int) -> None:
        if self.k > d:
            raise PayloadError(f"{self.name}: requested d={d} is smaller than k={self.k}")

    def _read_sparse(self, payload, d):
        self._check_k(d)
        return super()._read_sparse(payload, d)
