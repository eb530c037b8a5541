"""Independent reference for the Elias-omega tests (no package helpers but the bit reversal and
the status codes)."""
import numpy as np
from numba import njit

from hpcgc.compressors.kernels.sparse import ERR_PADDING, ERR_RANGE, ERR_TRAILING, ERR_TRUNCATED, reverse_bits


def omega_string(n: int) -> str:
    """Elias-omega code of n ≥ 1 as a '0'/'1' string, first bit first: R(n)·'0' with R(1) empty
    and R(n) = R(⌊log₂n⌋)·binary(n) (Elias 1975)."""
    code = "0"
    while n > 1:
        b = bin(n)[2:]
        code = b + code
        n = len(b) - 1
    return code


@njit(cache=False)
def old_decode_gaps(src, offset, end, d, idx):
    """The bit-by-bit decoder hpcgc used before the table-driven one (from
    hpcgc.compressors.kernels.sparse at 57b16b5): the oracle of its tests. Decode len(idx)
    Elias-omega gaps from ``src[offset:end]`` into increasing indices.

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
