"""The base classes of sparse messages: :class:`SparseCompressor` (values + indices after the header,
fixed-width or Elias-omega gap indices), :class:`FixedKSparse` (k entries, k a parameter) and the
:class:`DecodeSparse` mixin. Subclassed by top-k, rand-k, threshold, natural-randk, sparsify+ and
dither+ (:mod:`hpcgc.compressors`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numpy as np

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import wire
from .kernels.elias_gaps import DECODE_TABLE, check_elias_status, decode_entries_pair, read_indices, sparse_add_many
from .kernels.elias_gaps import decode_entries as decode_entries_kernel
from .kernels.norms import nonfinite_flag
from .kernels.sparse import encode_indices, scatter_scaled, write_index_stream


class DecodeSparse:
    """Mixin for a compressor whose decoder ``decode_sparse(payload, d)`` returns (indices, values,
    model bits): derives ``model_bits``, ``_decompress`` and ``_decompress_add`` from it."""

    def model_bits(self, payload, d: int) -> int:
        return self.decode_sparse(payload, d)[2]

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        idx, vals, _ = self.decode_sparse(payload, d)
        out = np.zeros(d)
        out[idx] = vals
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        idx, vals, _ = self.decode_sparse(payload, d)
        out[idx] += weight * vals


class Entries(NamedTuple):
    """A sparse message (plain float values) whose header and count are checked and whose entries
    :func:`decode_entries` decodes: (indices, weight·scale·values as float64) — what
    ``_decompress_add`` adds at the indices, the same products (the wire value widened, then
    multiplied), checked the same way and in the same order (index stream, then values).
    ``Prepared.entries(payload, weight)`` of the sparse formats (top-k, rand-k with sent indices,
    threshold): EF's server step."""
    payload: np.ndarray
    ioff: int               # the index stream: payload[ioff:]
    nnz: int
    values: np.ndarray      # the wire values (a view of the payload)
    scale: float            # weight · the format's scale
    elias: bool             # Elias-omega gaps (else fixed-width indices)
    who: str
    d: int

    def decode(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, scaled values) in new arrays."""
        idx, vals = np.empty(self.nnz, dtype=np.int64), np.empty(self.nnz)
        decode_entries([self], idx, vals)
        return idx, vals


def decode_entries(messages, idx: np.ndarray, vals: np.ndarray, near: np.ndarray | None = None,
                   bits: np.ndarray | None = None) -> np.ndarray:
    """Decode the :class:`Entries` ``messages`` one after another into idx (int64) and vals
    (float64), which have room for Σ nnz; returns where each starts (n + 1 offsets). Elias-omega
    streams are decoded two at a time in lockstep (:func:`~.kernels.elias_gaps.decode_entries_pair`:
    two independent chains), each with its values in the same kernel call; ``near``: a float64
    array whose cache lines at the decoded indices are asked for while decoding (the vector the
    entries will update); ``bits``: an int64 array of room n, given the length in bits of each
    message's Elias-omega index stream as the decoder consumed it (−1 for a fixed-width index
    message) — what rank 0's bit accounting would decode the streams again for
    (:meth:`hpcgc.algorithms.base.Algorithm.stream_bits`). Raises PayloadError for the first
    invalid message, in message order."""
    if bits is not None:
        bits[:len(messages)] = -1
    starts = np.zeros(len(messages) + 1, dtype=np.int64)
    for q, m in enumerate(messages):
        starts[q + 1] = starts[q] + m.nnz

    def decoded(q, status, finite):
        m = messages[q]
        _decoded(m, status, finite)
        if bits is not None and m.elias:
            bits[q] = int(status)
    waiting = None                 # (q, the kernel's arguments) of an Elias message waiting for a pair
    for q, m in enumerate(messages):
        a, b = starts[q], starts[q + 1]
        if not m.elias:
            if waiting is not None:
                decoded(waiting[0], *decode_entries_kernel(*waiting[1:], m.d, DECODE_TABLE, near))
                waiting = None
            got, _ = read_indices(m.payload, m.ioff, m.nnz, m.d, False, m.who)
            idx[a:b] = got
            decoded(q, 0, not nonfinite_flag(m.values))
            np.multiply(m.values, m.scale, out=vals[a:b], dtype=np.float64)
        elif waiting is None:
            waiting = (q, m.payload, m.ioff, idx[a:b], m.values, m.scale, vals[a:b])
        else:
            w = waiting
            sa, fa, sb, fb = decode_entries_pair(*w[1:], m.payload, m.ioff, idx[a:b], m.values, m.scale, vals[a:b],
                                                 m.d, DECODE_TABLE, near)
            decoded(w[0], sa, fa)
            decoded(q, sb, fb)
            waiting = None
    if waiting is not None:
        decoded(waiting[0], *decode_entries_kernel(*waiting[1:], messages[waiting[0]].d, DECODE_TABLE, near))
    return starts


def _decoded(m: Entries, status: int, finite: bool) -> None:
    if m.elias:
        check_elias_status(int(status), m.nnz, m.d, m.who)
    if not finite:
        raise PayloadError(f"{m.who}: corrupted payload: non-finite value")


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
        use_elias, ibits, words = encode_indices(idx, d)
        vbytes = self._value_bytes(nnz)
        flags = self._flags | (wire.FLAG_ELIAS if use_elias else 0)
        payload = wire.new_payload(self._prefix + vbytes + (ibits + 7) // 8, self.FORMAT_ID, flags,
                                   self._fingerprint, d)
        if self.VARIABLE_NNZ:
            payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<u4")[0] = nnz
        voff = wire.HEADER_BYTES + self._prefix
        write_index_stream(idx, d, words, ibits, payload, voff + vbytes)
        return payload, voff, vbytes

    def _sparse_head(self, payload, d: int) -> tuple[np.ndarray, int, int, int]:
        """Check header and count; returns (payload, values offset, nnz, flags) — the index
        stream starts after the values (``_value_bytes(nnz)``)."""
        payload = self._as_payload(payload, d)
        head = payload[:wire.HEADER_BYTES].tobytes()
        if payload.size >= wire.HEADER_BYTES + self._prefix and head == self._header(d, self._flags):
            flags = self._flags         # the two headers check_header accepts, as bytes (rank 0's hot path)
        elif payload.size >= wire.HEADER_BYTES + self._prefix and head == self._header(d, self._flags | wire.FLAG_ELIAS):
            flags = self._flags | wire.FLAG_ELIAS
        else:
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
        if payload.size < voff + self._value_bytes(nnz):
            raise PayloadError(f"{self.name}: payload truncated: {payload.size} bytes, shorter than "
                               f"its {nnz} values")
        return payload, voff, nnz, flags

    def _read_sparse(self, payload, d: int) -> tuple[np.ndarray, int, int, np.ndarray, int]:
        """Check header, count and index stream; returns (payload, values offset, nnz, indices,
        index bits)."""
        payload, voff, nnz, flags = self._sparse_head(payload, d)
        idx, ibits = read_indices(payload, voff + self._value_bytes(nnz), nnz, d,
                                  bool(flags & wire.FLAG_ELIAS), self.name)
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

    PLAIN_VALUES: ClassVar[bool] = True
    """The values are nnz floats of the wire type (False: natural-randk's encoded values)."""

    def _entries_at(self, d: int) -> Callable | None:
        return (lambda payload, weight: self._entries(payload, d, weight)) if self.PLAIN_VALUES else None

    def _entries(self, payload: np.ndarray, d: int, weight: float) -> Entries:
        """The message's header and count checked, its entries not decoded yet (:class:`Entries`)."""
        payload, voff, nnz, flags = self._sparse_head(payload, d)
        return Entries(payload, voff + self._value_bytes(nnz), nnz, wire.read_array(payload, voff, nnz, self._dtype()),
                       weight * self._scale(d, nnz), bool(flags & wire.FLAG_ELIAS), self.name, d)

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> np.ndarray:
        """out[idx] += weight·scale·values; returns idx (increasing: the only entries of out it
        changed, a fresh array — the prepared codec's ``add`` hands it on, for steps at those
        entries only; a subclass returns None when it cannot say)."""
        payload, voff, nnz, idx, _ = self._read_sparse(payload, d)
        values = self._read_values(payload, voff, nnz)
        scatter_scaled(values, idx, weight * self._scale(d, nnz), out, True)
        return idx


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

    def segment(self, d: int, d_seg: int) -> Compressor:
        """k scaled to the segment: k_seg = min(d_seg, ⌈k·d_seg/d⌉), so k_seg/d_seg ≥ k/d — rand-k's
        ω = d_seg/k_seg − 1 ≤ d/k − 1 and top-k's δ = k_seg/d_seg ≥ k/d (top-k per segment is
        gTop-k's per-worker selection, Shi et al. 2019). The same compressor when k_seg = k."""
        super().segment(d, d_seg)
        k_seg = min(d_seg, -(-self.k * d_seg // d))
        if k_seg == self.k:
            return self
        return type(self)(**{**self._params, "k": k_seg})

    def sparse_layout(self, d: int) -> tuple[int, int, int]:
        """k values (``_value_bits``), k indices after them (fixed-count format: no nnz prefix)."""
        return self._value_bits(self.k), self.k, wire.HEADER_BYTES + self._prefix + self._value_bytes(self.k)

    def payload_bound(self, d: int) -> int | None:
        """Header, k values and k fixed ⌈log₂d⌉-bit indices: the index stream is Elias-omega gaps
        only when those are shorter (:func:`~.kernels.sparse.encode_indices`). None for a layout
        without indices (rand-k's shared seed) or with a variable count."""
        if self.VARIABLE_NNZ or getattr(self, "shared_seed", False):
            return None
        return wire.HEADER_BYTES + self._value_bytes(self.k) + wire.packed_bytes(self.k, wire.bits_for(d))

    BATCH_ADD: ClassVar[bool] = False
    """True when ``_decompress_add`` is :class:`SparseCompressor`'s on this layout (k plain values,
    no count prefix): ``Prepared.add_many`` is then one kernel call for many payloads
    (:func:`~.kernels.elias_gaps.sparse_add_many`, the same checks, products and sums). Rand-k
    (without a shared seed) and top-k declare it."""

    def _add_many_at(self, d: int) -> Callable | None:
        if not self.BATCH_ADD or self.VARIABLE_NNZ or not self.PLAIN_VALUES:
            return None
        head, k, fp64, width, factor = (self._header_array(d), self.k, self._fp64, wire.bits_for(d),
                                        float(self._scale(d, self.k)))

        def add_many(buf, starts, lengths, weights, out):
            return sparse_add_many(buf, starts, lengths, weights, out, head, k, fp64, width, d, factor, DECODE_TABLE)
        return add_many

    def _check_k(self, d: int) -> None:
        if self.k > d:
            raise PayloadError(f"{self.name}: requested d={d} is smaller than k={self.k}")

    def _sparse_head(self, payload, d):
        self._check_k(d)
        return super()._sparse_head(payload, d)
