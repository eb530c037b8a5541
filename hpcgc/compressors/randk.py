"""``randk``: random sparsification, keep k uniformly random coordinates scaled by d/k.

C(x) = (d/k) Σ_{j∈S} x_j e_j with S a uniformly random k-subset of {0, …, d−1}: unbiased with
E‖C(x) − x‖² = (d/k − 1)‖x‖² for every x, so ω = d/k − 1 exactly (`spec/compressors.md` Part C;
used as the unbiased sparsifier in DIANA and its successors, e.g. Mishchenko et al. 2019,
arXiv 1901.09269).

Sampling: Floyd's algorithm (exactly k uniform integers; every k-subset equally likely) on a
d-bit bitset, whose set bits, read off in order, are the indices (a hash set and a sort when
k ≪ d/64). Compression is one pass over x (:func:`gather_bitset`): per chunk, a vectorised
NaN/±Inf check, then the chunk's set bits give the indices and the values (just loaded).

Wire format (after the 8-byte header): k values x_j *unscaled* (float32, or
float64 with ``fp64=true``), then the k increasing indices, fixed ⌈log₂d⌉ bits each or
Elias-omega gaps, whichever is smaller (header flag bit 1; :mod:`.kernels.sparse`). The d/k scale is
applied in float64 at decode, so the wire carries exactly the coordinates of x.
Model bits: k·F + index bits of the encoding used (≤ k·(F + ⌈log₂d⌉)).

``shared_seed=true``: the indices are not sent. The sender writes the low 32 bits of its per-call
seed (one draw from its Generator, so different per worker and per iteration) after the header;
sender and server both sample the index set from ``mix64(seed32 ^ salt)``. Body: seed (uint32),
then the k values. Model bits: k·F (the 4-byte seed is header overhead: 12 bytes in all). Two
messages share an index set only if their 32-bit seeds collide (probability 2^-32 per pair).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import wire
from .kernels.prng import mix64, next_below
from .kernels.sparse import (
    FINITE_CHUNK,
    cast_finite,
    chunk_nonfinite,
    copy_stream_bytes,
    ctz64,
    elias_omega_words,
    float_bits,
    gather_finite,
    popcount64,
    scatter_scaled,
    scratch,
)
from .params import FP64_PARAM, Param
from .sparse_base import FixedKSparse
from .summable import IndexedSum

_SHARED_SALT = np.uint64(0x5EED5EED5EED5EED)


@njit(cache=True)
def shared_sampling_seed(seed32):
    """The 64-bit sampling seed both sides derive from the 32-bit seed sent in the payload."""
    return mix64(seed32 ^ _SHARED_SALT)


FLOYD_BATCH = 64
"""Draws per batch in :func:`floyd_bitset` (the draws first, then their insertions)."""


@njit(cache=True)
def floyd_bitset(d, seed, k):
    """:func:`floyd_fill` into a new bitset of ⌈d/64⌉ words."""
    words = np.empty((d + 63) >> 6, dtype=np.uint64)
    floyd_fill(d, seed, k, words)
    return words


@njit(cache=True)
def floyd_fill(d, seed, k, words):
    """Floyd's algorithm on a d-bit bitset: a uniformly random k-subset of range(d) as the set bits
    of the ⌈d/64⌉ uint64 ``words`` (cleared first; bit j of word j // 64 = j in the subset).

    For j = d − k, …, d − 1: t uniform on [0, j] (exact, :func:`~.kernels.prng.next_below`); insert t,
    or j if t is already in. Every k-subset is equally likely (Floyd; Bentley & Floyd, CACM 30(9),
    1987). The bitset is d/8 bytes (2 MB for d = 2^24: cache-resident, unlike a d-byte mask). The
    draws do not depend on the set, so they are made FLOYD_BATCH at a time, then inserted in order
    (the insertion loop's independent loads then overlap their cache misses).
    """
    state = np.uint64(seed)
    words[:] = 0
    one = np.uint64(1)
    m63 = np.int64(63)
    draws = np.empty(FLOYD_BATCH, dtype=np.int64)
    j0 = d - k
    while j0 < d:
        nb = min(FLOYD_BATCH, d - j0)
        for q in range(nb):
            state, t = next_below(state, j0 + q + 1)     # uniform in [0, j0 + q]
            draws[q] = t
        for q in range(nb):
            t = draws[q]
            bit = one << np.uint64(t & m63)
            w = np.uint64(t >> 6)
            if words[w] & bit:                           # t already in: insert j (never in)
                j = j0 + q
                bit = one << np.uint64(j & m63)
                w = np.uint64(j >> 6)
            words[w] |= bit
        j0 += nb


@njit(cache=True)
def bitset_to_sorted(words, idx):
    """The set bits of ``words`` in increasing order into ``idx`` (len(idx) = number of set bits).

    Branch-light: while 4 slots remain, every word writes its 4 lowest bit positions
    unconditionally (slots past its popcount are overwritten by the next words) and only words with
    more than 4 bits loop. Unsigned indices: no wrap-around fix-ups."""
    k = idx.shape[0]
    n = np.uint64(0)
    one = np.uint64(1)
    nw = words.shape[0]
    w = 0
    while w < nw and n + np.uint64(4) <= np.uint64(k):
        v = words[w]
        base = np.int64(w) << 6
        c = np.uint64(popcount64(v))
        for q in range(4):
            idx[n + np.uint64(q)] = base + ctz64(v)
            v &= v - one
        q = n + np.uint64(4)
        while v:
            idx[q] = base + ctz64(v)
            v &= v - one
            q += one
        n += c
        w += 1
    while w < nw:
        v = words[w]
        base = np.int64(w) << 6
        while v:
            idx[n] = base + ctz64(v)
            v &= v - one
            n += one
        w += 1


@njit(cache=True)
def gather_bitset(x, keys, mask, inf_bits, words, idx, values):
    """One pass over x: the set bits of ``words`` (:func:`floyd_bitset`) in increasing order into
    ``idx``, values[i] = x[idx[i]] (``values`` of x's dtype), and the check that every x_j is
    finite (``keys, mask, inf_bits`` = :func:`~.kernels.sparse.float_bits` (x)). Returns False if x holds
    NaN/±Inf.

    Per chunk of FINITE_CHUNK entries: the vectorised finiteness check, then the chunk's bitset
    words, each writing its 2 lowest set bits unconditionally (the next word overwrites slots
    past its popcount) and looping only over further ones; the gathered entries are in L1.
    """
    n = x.shape[0]
    k = idx.shape[0]
    nw = words.shape[0]
    p = np.uint64(0)
    one = np.uint64(1)
    uk = np.uint64(k)
    for c0 in range(0, n, FINITE_CHUNK):
        if chunk_nonfinite(keys, c0, mask, inf_bits):
            return False
        w0 = c0 >> 6
        for w in range(w0, min(w0 + FINITE_CHUNK // 64, nw)):
            v = words[np.uint64(w)]
            base = np.uint64(w) << np.uint64(6)
            if p + np.uint64(2) <= uk and w < nw - 1:   # 2 free slots; base + 63 < n
                c = np.uint64(popcount64(v))
                for q in range(2):
                    j = base + np.uint64(ctz64(v) & 63)
                    idx[p + np.uint64(q)] = np.int64(j)
                    values[p + np.uint64(q)] = x[j]
                    v &= v - one
                q = p + np.uint64(2)
                while v:
                    j = base + np.uint64(ctz64(v))
                    idx[q] = np.int64(j)
                    values[q] = x[j]
                    v &= v - one
                    q += one
                p += c
            else:
                while v:
                    j = base + np.uint64(ctz64(v))
                    idx[p] = np.int64(j)
                    values[p] = x[j]
                    v &= v - one
                    p += one
    return True


@njit(cache=True)
def floyd_hashed_sorted(d, seed, idx):
    """Floyd's algorithm (same draws and subset as :func:`floyd_bitset`) with an open-addressing
    hash set of ≥ 2k slots, then a sort: for k ≪ d/64, where a d-bit bitset would cost more to
    clear and scan than k log k."""
    k = idx.shape[0]
    state = np.uint64(seed)
    lg = 1
    while (1 << lg) < 2 * k:
        lg += 1
    table = np.zeros(1 << lg, dtype=np.int64)        # t + 1; 0 = empty
    tmask = (1 << lg) - 1
    sh = np.uint64(64 - lg)
    for n, j in enumerate(range(d - k, d)):
        state, t = next_below(state, j + 1)
        h = np.int64((np.uint64(t) * np.uint64(0x9E3779B97F4A7C15)) >> sh)
        while table[h] != 0 and table[h] != t + 1:
            h = (h + 1) & tmask
        if table[h] != 0:                             # t already drawn: insert j (never present)
            t = j
            h = np.int64((np.uint64(t) * np.uint64(0x9E3779B97F4A7C15)) >> sh)
            while table[h] != 0:
                h = (h + 1) & tmask
        table[h] = t + 1
        idx[n] = t
    idx.sort()


@njit(cache=True)
def use_bitset(d, k):
    """Read the subset off a d-bit bitset (~d/64 words to clear and scan) unless k log k is much
    cheaper (k ≲ d/4000: hash set and sort)."""
    logk = 1
    while (1 << logk) < k:
        logk += 1
    return d <= 64 * k * logk


@njit(cache=True)
def sample_k_of_d_sorted(d, seed, idx):
    """Uniformly random k-subset of range(d), k = len(idx), written to ``idx`` in increasing order.

    Floyd's algorithm (exactly k draws, :func:`floyd_bitset`); the subset depends only on
    (d, k, seed). Its set bits are read off in order (:func:`bitset_to_sorted`) or, when k is tiny
    next to d, it goes through a hash set and a sort instead (:func:`floyd_hashed_sorted`).
    """
    k = idx.shape[0]
    if k == 0:
        return
    if use_bitset(d, k):
        bitset_to_sorted(floyd_bitset(d, seed, k), idx)
    else:
        floyd_hashed_sorted(d, seed, idx)


def sample_sorted(d: int, seed, k: int) -> np.ndarray:
    """:func:`sample_k_of_d_sorted` with reused work arrays (:func:`~.kernels.sparse.scratch`): the
    indices are valid until the next call in this thread."""
    idx = scratch("randk-idx", k, np.int64)
    if use_bitset(d, k):
        words = scratch("randk-bitset", (d + 63) >> 6, np.uint64)
        floyd_fill(d, np.uint64(seed), k, words)
        bitset_to_sorted(words, idx)
    else:
        floyd_hashed_sorted(d, np.uint64(seed), idx)
    return idx


def sample_and_gather(x: np.ndarray, seed, k: int, reuse: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(idx, values, finite): the subset of :func:`sample_k_of_d_sorted` (d = len(x), 1 ≤ k ≤ d),
    x at those indices (x's dtype) and whether every x_j is finite, in one pass over x. With
    ``reuse``, idx and values are work arrays (:func:`~.kernels.sparse.scratch`), valid until the next
    call in this thread."""
    d = x.shape[0]
    keys, mask, inf_bits = float_bits(x)
    if reuse:
        idx = scratch("randk-idx", k, np.int64)
        values = scratch("randk-values", k, x.dtype)
    else:
        idx = np.empty(k, dtype=np.int64)
        values = np.empty(k, dtype=x.dtype)
    if use_bitset(d, k):
        words = scratch("randk-bitset", (d + 63) >> 6, np.uint64)
        floyd_fill(d, np.uint64(seed), k, words)
        ok = gather_bitset(x, keys, mask, inf_bits, words, idx, values)
    else:
        floyd_hashed_sorted(d, np.uint64(seed), idx)
        ok = gather_finite(x, keys, mask, inf_bits, idx, values)
    return idx, values, bool(ok)


@njit(cache=True)
def randk_encode(x, seed, k, bitset, head, fp64, width, work):
    """The whole rand-k payload of float64 ``x`` in one call, the bytes of the step-by-step path
    (:func:`sample_and_gather`, ``SparseCompressor._new_sparse_payload``, :func:`.kernels.sparse.cast_finite`):
    the k-subset of ``seed`` (Floyd on a bitset when ``bitset``, :func:`use_bitset` (d, k), else
    hashed) and x at it, checked finite in the same pass; the index stream in the smaller encoding
    (Elias-omega gaps if shorter than k·``width`` bits, else fixed fields); the header ``head`` (its
    Elias flag set for gaps); the values cast to the wire type. ``work``: uint64 work words
    (the bitset's ⌈d/64⌉ if ``bitset``, k for the values, k·width // 64 + 2 for the Elias stream).
    Returns (status, payload, indices): status 0; 1 x holds NaN/±Inf; 2 a value overflows float32
    (then the payload is not valid)."""
    d = x.shape[0]
    kept = np.empty(k, dtype=np.int64)
    keys = x.view(np.uint64)
    mask = np.uint64(0x7FFFFFFFFFFFFFFF)
    inf_bits = np.uint64(0x7FF0000000000000)
    nw = (d + 63) >> 6 if bitset else 0
    words = work[:nw]
    values = work[nw:nw + k].view(np.float64)
    ewords = work[nw + k:]
    if bitset:
        floyd_fill(d, seed, k, words)
        ok = gather_bitset(x, keys, mask, inf_bits, words, kept, values)
    else:
        floyd_hashed_sorted(d, seed, kept)
        ok = gather_finite(x, keys, mask, inf_bits, kept, values)
    if not ok:
        return 1, np.empty(0, dtype=np.uint8), kept
    fixed = k * width
    ibits = elias_omega_words(kept, ewords, fixed) if fixed > 0 else -1
    elias = ibits >= 0
    if not elias:
        ibits = fixed
    h = head.shape[0]
    nb = 8 if fp64 else 4
    voff = h
    ioff = voff + k * nb
    payload = np.empty(ioff + (ibits + 7) // 8, dtype=np.uint8)
    payload[:h] = head
    if elias:
        payload[wire.FLAGS_BYTE] |= np.uint8(wire.FLAG_ELIAS)
        copy_stream_bytes(ewords, ibits, payload, ioff)
    else:
        wire.pack_fixed_width(kept, width, payload, ioff)
    if fp64:
        ok = cast_finite(values, payload[voff:ioff].view(np.float64))
    else:
        ok = cast_finite(values, payload[voff:ioff].view(np.float32))
    return (0 if ok else 2), payload, kept


class RandK(FixedKSparse):
    """Rand-k sparsification: k uniform random coordinates scaled by d/k; ω = d/k − 1 (exact)."""
    collectives = ("gather", "allgather", "reduce-scatter")
    segment_wise = True

    name = "randk"
    description = ("rand-k: keep k uniformly random coordinates scaled by d/k; omega = d/k - 1; "
                   "bits k*F + min(k*ceil(log2 d), Elias-omega gaps), k*F with shared_seed=true")
    PARAMS = (
        Param("k", int, low=1, high=2**32 - 1, doc="number of coordinates kept, k <= d"),
        Param("shared_seed", bool, False, in_spec="nondefault",
              doc="every worker samples the same indices in an iteration (from the run's shared "
                  "generator); the payload carries the 32-bit seed instead of indices, and the "
                  "messages add up, so it rides Allreduce"),
        FP64_PARAM,
    )
    FORMAT_ID = 4
    unbiased = True
    BATCH_ADD = True

    def _init(self) -> None:
        super()._init()
        self.shared_seed = self._params["shared_seed"]
        if self.shared_seed:
            self.BATCH_ADD = False                                     # its own layout and decode
            self.collectives = ("gather", "allreduce", "allgather")   # not reduce-scatter: its second
            self.segment_wise = False                                  # stage draws on one rank only
            self.shared_randomness = True

    def sum_codec(self, d: int, shape=None):
        if not self.shared_seed:
            return super().sum_codec(d, shape)
        self.validate(d)
        k = self.k

        def sample(seed):
            return sample_sorted(d, shared_sampling_seed(seed & np.uint64(0xFFFFFFFF)), k)
        return IndexedSum(d, k, self._fp64, sample)

    def omega(self, d: int) -> float:
        return d / self.k - 1.0

    def _scale(self, d: int, nnz: int) -> float:
        return d / self.k

    # -- shared-seed layout: header | seed (uint32) | k values ------------------------------------
    def _shared_body(self) -> int:
        return 4 + self.k * self._scale_bytes

    def _read_shared(self, payload, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(values, indices) of a shared-seed payload: indices regenerated from its seed."""
        payload = self._as_payload(payload, d)
        self._check_k(d)
        self._check_payload(payload, d, self._shared_body())
        seed32 = int.from_bytes(payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].tobytes(), "little")
        values = self._read_values(payload, wire.HEADER_BYTES + 4, self.k)
        idx = sample_sorted(d, shared_sampling_seed(np.uint64(seed32)), self.k)
        return values, idx

    def model_bits(self, payload, d: int) -> int:
        if self.shared_seed:
            self._read_shared(payload, d)
            return self.k * self._float_bits
        return super().model_bits(payload, d)

    def sparse_layout(self, d: int) -> tuple[int, int, int]:
        """``shared_seed``: k values, no indices (their seed is header overhead; never Elias-flagged)."""
        if self.shared_seed:
            return self.k * self._float_bits, 0, wire.HEADER_BYTES + 4
        return super().sparse_layout(d)

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        if not self.shared_seed and x.dtype == np.float64:
            return self._codec_at(x.shape[0])[0](x, seed)
        return self._compress_steps(x, seed)

    def _make_codec(self, d: int) -> tuple:
        """Without a shared seed, an encoder of float64 x in one kernel call (:func:`randk_encode`;
        the same bytes as :meth:`_compress_steps`), which keeps the payload's indices for the
        worker's own decode-add (:meth:`_own_at`)."""
        add = super()._make_codec(d)[1]
        if self.shared_seed:
            return self._compress_steps, add
        k, bitset, head, fp64, width = self.k, bool(use_bitset(d, self.k)), self._header_array(d), self._fp64, \
            wire.bits_for(d)
        nwork = (((d + 63) >> 6) if bitset else 0) + k + (k * width) // 64 + 2

        def enc(x, seed):
            if x.dtype != np.float64:
                return self._compress_steps(x, seed)
            status, payload, kept = randk_encode(x, np.uint64(seed), k, bitset, head, fp64, width,
                                                 scratch("randk-work", nwork, np.uint64))
            if status == 1:
                raise self._nonfinite_error(x)
            if status == 2:
                raise self._nonfinite_error(x, "value range (float32)")
            self._kept = (payload, kept)
            return payload
        return enc, add

    def _own_at(self, d: int, add):
        """The worker's own payload, just encoded, added from the indices the encoder kept and the
        payload's wire values — the entries and products ``add`` would decode (top-k does the
        same) — without decoding its index stream again; any other payload: ``add``."""
        if self.shared_seed:
            return None
        scale, voff, vend, dtype = d / self.k, wire.HEADER_BYTES, wire.HEADER_BYTES + self._value_bytes(self.k), \
            self._dtype()

        def own(payload, out, weight):
            kept = self.__dict__.get("_kept")
            if kept is None or kept[0] is not payload:
                return add(payload, out, weight)
            scatter_scaled(payload[voff:vend].view(dtype), kept[1], weight * scale, out, True)
            return kept[1]
        return own

    def _compress_steps(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        seed32 = np.uint64(seed) & np.uint64(0xFFFFFFFF)
        idx, vals, finite = sample_and_gather(x, shared_sampling_seed(seed32) if self.shared_seed else seed,
                                              self.k, reuse=True)
        if not finite:
            raise self._nonfinite_error(x)
        if self.shared_seed:
            payload = self._new_payload(self._shared_body(), d)
            payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<u4")[0] = seed32
            voff, vbytes = wire.HEADER_BYTES + 4, self.k * self._scale_bytes
        else:
            payload, voff, vbytes = self._new_sparse_payload(idx, d)
        if not cast_finite(vals, payload[voff:voff + vbytes].view(self._dtype())):
            raise self._nonfinite_error(x, "value range (float32)")
        return payload

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        if not self.shared_seed:
            return super()._decompress(payload, d)
        values, idx = self._read_shared(payload, d)
        out = np.zeros(d)
        scatter_scaled(values, idx, d / self.k, out, False)
        return out

    def _entries_at(self, d: int):
        """No sparse entries with a shared seed (its indices are a work array of the decode)."""
        return None if self.shared_seed else super()._entries_at(d)

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> np.ndarray | None:
        """out[idx] += weight·(d/k)·values; returns the indices (a fresh array) when they were sent,
        None with a shared seed (its indices are a work array, overwritten by the next decode)."""
        if not self.shared_seed:
            return super()._decompress_add(payload, d, out, weight)
        values, idx = self._read_shared(payload, d)
        scatter_scaled(values, idx, weight * (d / self.k), out, True)
        return None
