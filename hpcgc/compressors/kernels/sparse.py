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

The encoder writes the Elias stream once, 64 bits at a time (gaps < 4096: a table; longer: a table
of prefixes, a bit reversal), and gives up as soon as it cannot beat the fixed width. The sparse
compressors read x once: a vectorised integer test of the IEEE-754 bit patterns (:func:`float_bits`)
rejects NaN/±Inf and, for threshold and top-k, builds 64-entry hit masks whose set bits are the kept
indices (:func:`~.select.select_at_least`, :mod:`.select`); rand-k gathers from the chunk just checked (:func:`gather_finite`).
"""
from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import wire

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


# -- reusable work arrays -------------------------------------------------------------------------

SCRATCH_MAX_BYTES = 64 << 20
"""Largest work array :func:`scratch` keeps between calls (larger ones are allocated per call)."""
_SCRATCH = threading.local()


def scratch(key: str, n: int, dtype) -> np.ndarray:
    """An uninitialised work array of n entries that this thread reuses from call to call.

    The compress paths keep their temporaries (Floyd bitset, index and value buffers, Elias words)
    here: fresh memory costs one page fault per 4 KB page on first touch (~2 µs in a VM, ~1 ms
    for the 2 MB bitset of d = 2^24), often more than the kernel itself. Only for temporaries that
    do not outlive the call, one ``key`` per live array; thread-local, so concurrent calls from
    several threads do not share buffers.
    """
    dtype = np.dtype(dtype)
    if n * dtype.itemsize > SCRATCH_MAX_BYTES:
        return np.empty(n, dtype=dtype)
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    a = bufs.get((key, dtype.str))
    if a is None or a.size < n:
        a = np.empty(max(n, 2 * a.size if a is not None else n), dtype=dtype)
        bufs[(key, dtype.str)] = a
    return a[:n]


# -- bit intrinsics: one instruction each (lzcnt, tzcnt, popcnt; bitreverse is a few) -------------

def _int_intrinsic(llvm_op, result):
    """An intrinsic applying ``builder.<llvm_op>`` to an integer argument widened to 64 bits."""
    def typer(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], sig.args[0], types.uint64)
            if llvm_op in ("ctlz", "cttz"):
                return getattr(builder, llvm_op)(v, ir.Constant(ir.IntType(1), 0))
            return getattr(builder, llvm_op)(v)
        return result(x), codegen
    typer.__name__ = f"_{llvm_op}64"
    return intrinsic(typer)


clz64 = _int_intrinsic("ctlz", types.int64)
"""Leading zero bits of the 64-bit pattern of a non-negative integer (64 for 0)."""
ctz64 = _int_intrinsic("cttz", types.int64)
"""Trailing zero bits of the 64-bit pattern of an integer (64 for 0)."""
popcount64 = _int_intrinsic("ctpop", types.int64)
"""Set bits of the 64-bit pattern of an integer."""
bitreverse64 = _int_intrinsic("bitreverse", types.uint64)
"""The 64-bit pattern of an integer in reverse bit order (uint64)."""


@intrinsic
def prefetch(typingctx, arr, i):
    """Ask for the cache line of arr[i] (``llvm.prefetch``: a read, into all cache levels); a hint,
    no fault for any i. For gathers and scatters at known indices, issued some entries ahead."""
    if not (isinstance(arr, types.Array) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [context.cast(builder, args[1], sig.args[1], types.intp)])
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.none(arr, i), codegen


@njit(cache=True)
def bit_length(n):
    """Number of bits of n ≥ 0 (0 for n = 0), for n < 2^63."""
    return 64 - clz64(np.int64(n))


def _omega_prefixes() -> tuple[np.ndarray, np.ndarray]:
    """For b = bit_length(n) of a gap n ≥ 2: the bits R(b − 1) that precede binary(n) in ω(n),
    as an LSB-first pattern (first code bit = bit 0), and their number (0 for b ≤ 2)."""
    bits = np.zeros(65, dtype=np.uint64)
    lens = np.zeros(65, dtype=np.int64)
    for b in range(3, 65):
        r, m = "", b - 1                       # R(m) = R(⌊log₂m⌋)·binary(m), R(1) empty
        while m > 1:
            r = bin(m)[2:] + r
            m = m.bit_length() - 1
        bits[b] = sum(1 << i for i, c in enumerate(r) if c == "1")
        lens[b] = len(r)
    return bits, lens


_EO_PREFIX, _EO_PREFIX_LEN = _omega_prefixes()

EO_TABLE_BITS = 12
"""Gaps below 2^EO_TABLE_BITS take their code from a table (:data:`_EO_TABLE`)."""


def _omega_table() -> np.ndarray:
    """_EO_TABLE[g] = ω(g) as an LSB-first pattern | |ω(g)| << 56, for 1 ≤ g < 2^EO_TABLE_BITS."""
    g = np.arange(1 << EO_TABLE_BITS, dtype=np.uint64)
    b = np.array([int(v).bit_length() for v in g], dtype=np.int64)
    rev = np.zeros_like(g)                       # binary(g), MSB first = bit 0
    for i in range(EO_TABLE_BITS):
        bit = (g >> np.uint64(i)) & np.uint64(1)
        rev |= np.where(i < b, bit << np.maximum(b - 1 - i, 0).astype(np.uint64), np.uint64(0))
    lp = _EO_PREFIX_LEN[b]
    big = g > 1
    code = np.where(big, _EO_PREFIX[b] | (rev << lp.astype(np.uint64)), np.uint64(0))
    length = np.where(big, lp + b + 1, 1).astype(np.uint64)
    table = code | (length << np.uint64(56))
    table[0] = 0
    return table


_EO_TABLE = _omega_table()
_LOW56 = np.uint64((1 << 56) - 1)


@njit(cache=True)
def elias_omega_length(n):
    """|ω(n)| in bits, n ≥ 1: 1 for n = 1, else |R(bit_length(n) − 1)| + bit_length(n) + 1."""
    n = np.int64(n)
    b = bit_length(n)
    return _EO_PREFIX_LEN[b] + (b if n > 1 else 0) + 1


@njit(cache=True)
def elias_gap_bits(idx):
    """Σ_i |ω(g_i)| for the gaps of the increasing indices ``idx`` (g_0 = idx[0] + 1)."""
    total = 0
    prev = np.int64(-1)
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        n = j - prev
        prev = j
        b = bit_length(n)
        total += _EO_PREFIX_LEN[b] + (b if n > 1 else 0) + 1
    return total


@njit(cache=True)
def reverse_bits(v, n):
    """The low n bits of v (uint64, 1 ≤ n ≤ 64) in reverse order."""
    return bitreverse64(np.uint64(v)) >> np.uint64(64 - n)


@njit(cache=True)
def elias_omega_words(idx, words, limit):
    """The Elias-omega codes of the gaps of increasing ``idx`` as an LSB-first bit stream in
    ``words`` (stream bit b = bit b mod 64 of words[b // 64]; unused high bits of the last word 0).

    Returns the number of stream bits, or −1 as soon as it is certain to reach ``limit`` (the
    caller then uses the fixed-width encoding); ``words`` must hold ``limit // 64 + 2`` words.
    Gaps < 2^32 (d ≤ 2^32): every code is ≤ 43 bits, so it straddles at most two words. Codes of
    gaps < 2^EO_TABLE_BITS come from a table; the code of a larger g with b = bit_length(g) is
    R(b − 1) (a table of 64 prefixes), binary(g) MSB first (a bit reversal) and a 0. The word
    flush is branch-free (its pattern is irregular), indices are unsigned.
    """
    acc = np.uint64(0)        # stream bits [64·w, 64·w + nacc)
    nacc = np.uint64(0)
    w = np.uint64(0)
    wlimit = np.uint64(limit // 64)
    one = np.uint64(1)
    m63 = np.uint64(63)
    prev = np.int64(-1)
    for i in range(idx.shape[0]):
        j = np.int64(idx[i])
        n = j - prev
        prev = j
        if np.uint64(n) < np.uint64(1 << EO_TABLE_BITS):    # unsigned: never reads outside
            e = _EO_TABLE[np.uint64(n)]
            code = e & _LOW56
            length = e >> np.uint64(56)
        else:
            b = bit_length(n)
            lp = _EO_PREFIX_LEN[b]
            code = _EO_PREFIX[b] | (reverse_bits(n, b) << np.uint64(lp))
            length = np.uint64(lp + b + 1)
        acc |= code << nacc
        words[w] = acc
        t = nacc + length
        spill = t >> np.uint64(6)                 # 1 if the code ran past the word
        high = (code >> one) >> (m63 - nacc)      # its bits past the word (0 if none)
        acc = high if spill else acc
        w += spill
        nacc = t & m63
        if w > wlimit:
            return -1
    words[w] = acc
    total = np.int64(64 * w + nacc)
    return total if total < limit else -1


@njit(cache=True)
def copy_stream_bytes(words, nbits, out, offset):
    """out[offset : offset + ⌈nbits/8⌉] ← the first ⌈nbits/8⌉ bytes of the LSB-first word stream."""
    nbytes = (nbits + 7) // 8
    nfull = nbytes // 8
    o = out[offset:offset + nbytes]
    for q in range(nfull):
        v = words[q]
        for t in range(8):
            o[8 * q + t] = np.uint8((v >> np.uint64(8 * t)) & np.uint64(0xFF))
    if nbytes > 8 * nfull:
        v = words[nfull]
        for t in range(nbytes - 8 * nfull):
            o[8 * nfull + t] = np.uint8((v >> np.uint64(8 * t)) & np.uint64(0xFF))
    return nbytes


@njit(cache=True)
def elias_omega_encode_gaps(idx, out, offset):
    """Write the Elias-omega codes of the gaps of increasing ``idx`` into ``out[offset:]``
    (LSB-first stream, each code first bit first); returns the number of bytes written
    (= ⌈elias_gap_bits(idx)/8⌉). Unused high bits of the last byte are zero."""
    nbits = elias_gap_bits(idx)
    words = np.empty(nbits // 64 + 2, dtype=np.uint64)
    elias_omega_words(idx, words, nbits + 1)
    return copy_stream_bytes(words, nbits, out, offset)


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


FINITE_CHUNK = 1024
"""Entries per chunk of the fused finiteness-check-and-gather passes: the chunk's vectorised
check loads it into L1, where the gather of its kept entries finds it."""


@njit(cache=True)
def chunk_nonfinite(keys, c0, mask, inf_bits):
    """True if x[c0 : c0 + FINITE_CHUNK] holds NaN/±Inf (``keys, mask, inf_bits`` =
    :func:`float_bits` (x)): an integer max of ``key & mask``, which vectorises."""
    kb = keys[c0:c0 + FINITE_CHUNK]
    m = kb[0] & mask
    for i in range(kb.shape[0]):
        m = max(m, kb[i] & mask)
    return m >= inf_bits


@njit(cache=True)
def gather_finite(x, keys, mask, inf_bits, idx, values):
    """One pass over x: values[i] = x[idx[i]] for the increasing ``idx`` (``values`` of x's
    dtype), and the check that every x_j is finite; ``keys, mask, inf_bits`` = :func:`float_bits`
    (x). Returns False if x holds NaN/±Inf (``values`` then incomplete)."""
    n = x.shape[0]
    k = idx.shape[0]
    p = 0
    for c0 in range(0, n, FINITE_CHUNK):
        if chunk_nonfinite(keys, c0, mask, inf_bits):
            return False
        end = c0 + FINITE_CHUNK
        while p < k and idx[p] < end:
            values[p] = x[idx[p]]
            p += 1
    return True


@njit(cache=True)
def cast_finite(src, dst):
    """dst[i] = src[i] (cast to dst's dtype); True if every dst[i] is finite."""
    bad = False
    for i in range(src.shape[0]):
        dst[i] = src[i]
        bad |= abs(dst[i]) == np.inf
        bad |= dst[i] != dst[i]
    return not bad


def float_bits(x: np.ndarray) -> tuple[np.ndarray, np.unsignedinteger, np.unsignedinteger]:
    """(keys, mask, inf_bits) of a contiguous float32/float64 ``x``: x viewed as unsigned integers
    of its width, the mask clearing the sign bit and the pattern of +Inf. ``key & mask`` orders
    like |x_j| (IEEE-754), and is ≥ ``inf_bits`` exactly when x_j is NaN or ±Inf."""
    if x.dtype == np.float32:
        return x.view(np.uint32), np.uint32(0x7FFFFFFF), np.uint32(0x7F800000)
    return x.view(np.uint64), np.uint64(0x7FFFFFFFFFFFFFFF), np.uint64(0x7FF0000000000000)


SCATTER_AHEAD = 128
"""Entries ahead at which :func:`scatter_scaled` asks for out's cache line: from memory, a bare scatter
at 32 768 entries of a 2²⁰ vector took 99–119 µs at 128 ahead against 162–179 at 32
(``scripts/ef-server-parts.py --evict``); EF + top-k's compress phase, whose own update is this
scatter, 0.504 → 0.437 ms in the run (docs/performance.md, issue 31 target 1, sixth round)."""


@njit(cache=True)
def scatter_scaled(values, idx, scale, out, accumulate):
    """out[idx[i]] (+)= scale·values[i]; the caller zeroes ``out`` when not accumulating. The line
    of out[idx[i + SCATTER_AHEAD]] is asked for first (:func:`prefetch`): a new line per index."""
    top = idx.shape[0] - 1
    if accumulate:
        for i in range(idx.shape[0]):
            prefetch(out, idx[min(i + SCATTER_AHEAD, top)])
            out[idx[i]] += scale * values[i]
    else:
        for i in range(idx.shape[0]):
            prefetch(out, idx[min(i + SCATTER_AHEAD, top)])
            out[idx[i]] = scale * values[i]


# ------------------------------------------------------------------------------------------------
# Python helpers used by the sparse compressors
# ------------------------------------------------------------------------------------------------

def encode_indices(idx: np.ndarray, d: int) -> tuple[bool, int, np.ndarray | None]:
    """(use Elias-omega?, index bits, the Elias stream words or None) for increasing ``idx``: the
    smaller encoding, ties fixed. The Elias stream is encoded once, into work words (stopping as
    soon as it cannot beat the fixed width); :func:`write_index_stream` copies it into the
    payload (before the next call in this thread reuses the words)."""
    nnz = idx.shape[0]
    fixed = nnz * wire.bits_for(d)
    if fixed == 0:
        return False, 0, None
    words = scratch("elias-words", fixed // 64 + 2, np.uint64)
    bits = int(elias_omega_words(idx, words, fixed))
    if bits < 0:
        return False, fixed, None
    return True, bits, words


def write_index_stream(idx: np.ndarray, d: int, words: np.ndarray | None, bits: int, out: np.ndarray,
                       offset: int) -> None:
    """Write the index stream chosen by :func:`encode_indices` at ``out[offset:]``."""
    if words is not None:
        copy_stream_bytes(words, bits, out, offset)
    else:
        wire.pack_fixed_width(idx, wire.bits_for(d), out, offset)


def fixed_stream_bytes(nnz: int, d: int) -> int:
    return wire.packed_bytes(nnz, wire.bits_for(d))
