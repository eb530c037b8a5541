"""Reductions shared by the compressors: block norms (QSGD buckets, DIANA Quant_p blocks) and
the cheap all-finite test.

Block ``l`` is ``x[l*b : min((l+1)*b, d)]``; the caller sizes ``norms`` as ceil(d/b). A NaN or
±Inf anywhere in a block makes that block's norm non-finite, so callers detect bad input from the
m norms alone (no extra pass over x).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_ABS32 = np.uint32(0x7FFFFFFF)
_ABS64 = np.uint64(0x7FFFFFFFFFFFFFFF)
_INF32_BITS = 0x7F800000
_INF64_BITS = 0x7FF0000000000000


@njit(cache=True)
def max_abs_bits32(u):
    """max of (u_i & 0x7FFFFFFF) over the bit patterns of float32 values: the bits of max |x_i|,
    ≥ 0x7F800000 iff some x_i is ±Inf or NaN (IEEE order of non-negative floats = integer order).
    An integer max reduction, which vectorises (a float max with NaN semantics does not)."""
    m = np.uint32(0)
    for i in range(u.shape[0]):
        m = max(m, u[i] & _ABS32)
    return m


@njit(cache=True)
def max_abs_bits64(u):
    """:func:`max_abs_bits32` for float64 bit patterns (≥ 0x7FF0000000000000 iff non-finite)."""
    m = np.uint64(0)
    for i in range(u.shape[0]):
        m = max(m, u[i] & _ABS64)
    return m


def nonfinite_flag(x: np.ndarray) -> float:
    """0.0 if every x_i (a contiguous float32/float64 array) is finite, NaN otherwise; one
    vectorised read of x."""
    if x.dtype == np.float32:
        return 0.0 if max_abs_bits32(x.view(np.uint32)) < _INF32_BITS else math.nan
    if x.dtype == np.float64:
        return 0.0 if max_abs_bits64(x.view(np.uint64)) < _INF64_BITS else math.nan
    return 0.0 if np.isfinite(x).all() else math.nan


@njit(cache=True, fastmath={"reassoc"})
def sum_squares(x):
    """Σ x_i² in float64. ``reassoc`` lets LLVM split the sum over vector lanes (no other
    fast-math: NaN and Inf still propagate); the order is fixed by the compiled code, so results
    are reproducible on one machine and differ across vector widths only in the last bits."""
    s = 0.0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        s += v * v
    return s


@njit(cache=True)
def block_norms_l2(x, block, norms):
    """norms[l] = ‖x(l)‖₂, accumulated in float64.

    When the plain sum of squares leaves [1e-280, 1e280] (zero, tiny, huge or non-finite blocks)
    the block is recomputed scaled by its max, as BLAS dnrm2 does, so tiny vectors do not
    underflow to a zero norm and finite huge ones do not overflow.
    """
    d = x.shape[0]
    for l in range(norms.shape[0]):
        xb = x[l * block:min((l + 1) * block, d)]
        acc = sum_squares(xb)
        if acc >= 1e-280 and acc <= 1e280:
            norms[l] = np.sqrt(acc)
            continue
        m = max_abs(xb)                            # NaN if the block holds NaN/Inf
        if m > 0.0 and m < np.inf:
            acc = 0.0
            for i in range(xb.shape[0]):
                v = np.float64(xb[i]) / m
                acc += v * v
            norms[l] = m * np.sqrt(acc)
        else:
            norms[l] = m                           # 0, or non-finite


@njit(cache=True)
def max_abs(x):
    """max |x_i| (0 for an empty slice), NaN if x holds NaN or ±Inf (the rare rescaling path of
    :func:`block_norms_l2`)."""
    m = 0.0
    flag = 0.0
    for i in range(x.shape[0]):
        a = abs(np.float64(x[i]))
        m = max(m, a)
        flag += a * 0.0                            # NaN iff some entry is NaN or ±Inf
    return m + flag


@njit(cache=True)
def block_max_bits32(u, block, out):
    """out[l] = :func:`max_abs_bits32` of block l of the float32 bit patterns ``u``."""
    d = u.shape[0]
    for l in range(out.shape[0]):
        out[l] = max_abs_bits32(u[l * block:min((l + 1) * block, d)])


@njit(cache=True)
def block_max_bits64(u, block, out):
    """out[l] = :func:`max_abs_bits64` of block l of the float64 bit patterns ``u``."""
    d = u.shape[0]
    for l in range(out.shape[0]):
        out[l] = max_abs_bits64(u[l * block:min((l + 1) * block, d)])


def block_norms_linf(x: np.ndarray, block: int, norms: np.ndarray) -> None:
    """norms[l] = ‖x(l)‖_∞; NaN or Inf if the block holds NaN or ±Inf (integer max of the bit
    patterns, see :func:`max_abs_bits32`)."""
    if x.dtype == np.float32:
        bits = np.empty(norms.shape[0], dtype=np.uint32)
        block_max_bits32(x.view(np.uint32), block, bits)
    else:
        bits = np.empty(norms.shape[0], dtype=np.uint64)
        block_max_bits64(x.view(np.uint64), block, bits)
    norms[:] = bits.view(x.dtype)


def n_blocks(d: int, block: int) -> int:
    return -(-d // block)


OK, NONFINITE, OVERFLOW = 0, 1, 2
"""What :func:`write_scales` reports: written; a block norm is non-finite (NaN/Inf in x);
a finite norm overflows float32 on rounding up (only without ``fp64``)."""


@njit(cache=True)
def write_scales(x, block, norms, l2, fp64, head, payload):
    """The front half of a block-scaled compressor in one call: with ``l2`` the m block ℓ2 norms of
    x (:func:`block_norms_l2`; else ``norms`` holds the caller's), each rounded up to the smallest
    float32 ≥ it (kept as is with ``fp64``) *in place* — the scales as sent, so every probability
    |x_i|/scale ≤ 1 —, written into ``payload`` after the header bytes ``head`` (little-endian
    float32, or float64); the rest of the payload is left to the caller. Returns OK, NONFINITE or
    OVERFLOW (then the payload holds nothing valid). The rounding is
    :func:`hpcgc.compressors.base.round_up_float32`'s: round to nearest, then the next float32 up
    if that fell below."""
    if l2:
        block_norms_l2(x, block, norms)
    m = norms.shape[0]
    for l in range(m):
        if not np.isfinite(norms[l]):
            return NONFINITE
    nb = 8 if fp64 else 4
    bits = np.empty(m, dtype=np.uint64)
    if fp64:
        bits[:] = norms.view(np.uint64)
    else:
        f32 = norms.astype(np.float32)             # round to nearest (inf above the float32 range)
        u32 = f32.view(np.uint32)
        for l in range(m):
            if np.float64(f32[l]) < norms[l]:      # v ≥ 0: the next float32 up is the bit pattern + 1
                u32[l] += np.uint32(1)
            norms[l] = np.float64(f32[l])
            if not np.isfinite(norms[l]):
                return OVERFLOW
            bits[l] = np.uint64(u32[l])
    h = head.shape[0]
    payload[:h] = head
    for l in range(m):
        w = bits[l]
        for t in range(nb):
            payload[h + nb * l + t] = np.uint8((w >> np.uint64(8 * t)) & np.uint64(0xFF))
    return OK


@intrinsic
def float32_from_bits(typingctx, u):
    """The float32 whose IEEE-754 bit pattern is the uint32 ``u`` (a register bitcast: no array)."""
    if u != types.uint32:
        return None
    return types.float32(u), lambda context, builder, sig, args: builder.bitcast(args[0], ir.FloatType())


@intrinsic
def float64_from_bits(typingctx, u):
    """The float64 whose IEEE-754 bit pattern is the uint64 ``u``."""
    if u != types.uint64:
        return None
    return types.float64(u), lambda context, builder, sig, args: builder.bitcast(args[0], ir.DoubleType())


BAD_SCALE, BAD_HEADER = 1, 3
"""What :func:`checked_scales` returns for an invalid payload (0: valid); the block-scaled decoders
number their own checks around these (``qsgd``: 2, a level above s; ``quant``: 2, a trit byte)."""


@njit(cache=True)
def checked_scales(src, head, length, m, fp64):
    """(status, scales, offset) of a block-scaled payload, the receiving side of :func:`write_scales`:
    it must be ``length`` bytes long and start with the header bytes ``head`` (else BAD_HEADER: the
    caller names the mismatch); the m scales after the header (little-endian float32, or float64
    with ``fp64``) must be finite and ≥ 0 (else BAD_SCALE). With status 0: the scales as float64 (a
    new array) and the offset after them. The scales are assembled from their bytes (any alignment)
    and reinterpreted in registers (:func:`float32_from_bits`): one allocation per call."""
    scales = np.empty(m)
    if src.shape[0] != length:
        return BAD_HEADER, scales[:0], 0
    h = head.shape[0]
    for t in range(h):
        if src[t] != head[t]:
            return BAD_HEADER, scales[:0], 0
    nb = 8 if fp64 else 4
    for l in range(m):
        w = np.uint64(0)
        for t in range(nb):
            w |= np.uint64(src[h + nb * l + t]) << np.uint64(8 * t)
        u = float64_from_bits(w) if fp64 else np.float64(float32_from_bits(np.uint32(w)))
        if not (np.isfinite(u) and u >= 0.0):
            return BAD_SCALE, scales[:0], 0
        scales[l] = u
    return 0, scales, h + nb * m
