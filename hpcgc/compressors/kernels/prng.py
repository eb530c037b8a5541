"""A tiny counter-based PRNG for the kernels: SplitMix64 (Steele, Lea, Flood, OOPSLA 2014).

Why not numba's ``np.random``: its Mersenne Twister costs ~9 ns per double against ~1 ns here, which
made the RNG the dominant cost of dithering, and it only takes a 32-bit seed. SplitMix64 passes
BigCrush; its state is a 64-bit Weyl counter, so streams from two random 64-bit seeds overlap only
if the seeds are within ~(draws per message) steps of each other: probability ~2^-44 for d = 2^20.

Every compress call draws one 64-bit seed from the caller's ``numpy.random.Generator`` (see
``Compressor.compress``), so payloads are deterministic given the Generator state. Two interfaces
to the same stream (draw i of seed s is mix(s + (i+1)·γ)):

* sequential: ``next_u64``/``next_uniform``/``next_below`` take the state and return
  ``(new_state, value)``;
* counter-based: ``uniform_at(seed, i)`` is the i-th uniform directly (``word_at(seed, i)`` its
  64 bits), so loops over it have no loop-carried dependency and vectorise;
* 32-bit halves: :func:`uniforms32` splits each 64-bit word of the same stream into two 32-bit
  uniforms, one per coordinate. The dithering kernels use it with fixed-point probabilities
  (``P[up] = R/2^32``, R the probability rounded to 32 fractional bits), which halves the hashing
  per entry; a probability is then off by at most 2^-33 (plus float64 rounding), i.e. the
  dithered value's bias is at most 2^-33 of one quantization step.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO_M53 = 1.0 / 9007199254740992.0
TWO32 = 4294967296.0
"""2^32: scales a probability to the 32-bit fixed point of :func:`uniforms32`."""


@njit(cache=True)
def mix64(z):
    """SplitMix64 output function (a bijection of 64-bit words)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


GAMMA = _GAMMA
"""The Weyl step γ: word i of ``seed`` is mix64(w) for the state w = :func:`state_at` (seed, i);
a loop over consecutive words carries w += γ (an add per word instead of a multiply)."""


@njit(cache=True)
def state_at(seed, i):
    """The Weyl state of word i (i ≥ 0) of the stream of ``seed``: seed + (i+1)·γ."""
    return seed + np.uint64(i + 1) * _GAMMA


@njit(cache=True)
def word_at(seed, i):
    """The i-th 64-bit word (i ≥ 0) of the stream of ``seed`` (uint64): mix(seed + (i+1)·γ)."""
    return mix64(state_at(seed, i))


@njit(cache=True)
def uniform_at(seed, i):
    """The i-th uniform (i ≥ 0) of the stream of ``seed`` (uint64), on {0, 2^-53, …, 1 − 2^-53}:
    ⌊word_at(seed, i)/2^11⌋·2^-53, so ``uniform_at(seed, i) < p`` for p = m·2^-k (k ≤ 53) is
    ``word_at(seed, i) < m << (64 − k)``, an integer test that needs no conversion."""
    return np.float64(word_at(seed, i) >> _S11) * _TWO_M53


@njit(cache=True)
def uniforms32(seed, start, out):
    """Fill ``out`` (uint32, length m) with independent uniform 32-bit integers for the
    coordinates start, …, start + m − 1 of one message: word w = start + p of the stream of
    ``seed`` (the 64 bits ``uniform_at(seed, w)`` is made of), p < h = m // 2, gives its low half
    to out[p] and its high half to out[h + p]; an odd last entry takes the low half of word
    start + h. The words used lie in [start, start + m), so disjoint coordinate ranges of one
    message (its chunks) never share random bits. Two contiguous half-loops: both
    vectorise. The Weyl state is carried (w += γ) rather than formed as base + p·γ: the same
    words, but LLVM then steps a vector of states by an add instead of a 64-bit multiply per
    word (which AVX2 emulates with three 32-bit multiplies: −20 % instructions per entry)."""
    m = out.shape[0]
    h = m // 2
    lo = out[:h]
    hi = out[h:2 * h]
    w = state_at(seed, start)
    for p in range(h):
        z = mix64(w)
        lo[p] = np.uint32(z & _LOW32)
        hi[p] = np.uint32(z >> _S32)
        w += _GAMMA
    if m & 1:                               # w is now word start + h
        out[m - 1] = np.uint32(mix64(w) & _LOW32)


@njit(cache=True)
def next_u64(state):
    """(state', 64 random bits)."""
    state = state + _GAMMA
    return state, mix64(state)


@njit(cache=True)
def next_uniform(state):
    """(state', u) with u uniform on {0, 2^-53, …, 1 − 2^-53} ⊂ [0, 1)."""
    state, z = next_u64(state)
    return state, np.float64(z >> _S11) * _TWO_M53


@njit(cache=True)
def next_below(state, n):
    """(state', t) with t exactly uniform on [0, n), 1 ≤ n < 2^32 (Lemire's multiply-shift with
    rejection, *Fast Random Integer Generation in an Interval*, ACM TOMACS 2019)."""
    nn = np.uint64(n)
    state, z = next_u64(state)
    m = (z >> _S32) * nn
    low = m & _LOW32
    if low < nn:
        threshold = ((_LOW32 + np.uint64(1)) - nn) % nn     # 2^32 mod n
        while low < threshold:
            state, z = next_u64(state)
            m = (z >> _S32) * nn
            low = m & _LOW32
    return state, np.int64(m >> _S32)
