"""The machinery the compressors share: numba kernels, the wire format, the numpy references.

The catalogue (``hpcgc/compressors/*.py``, one file per compressor) states each operator's math,
bits and ω/δ and calls these modules; nothing here knows a compressor class.

    wire.py          the 8-byte header, payload checks, fixed-width and blocked bit packing
    simd.py          explicit-SIMD rows (LLVM ``<32 x i32>``) behind ``wire``'s blocked layout,
                     fused row decoders and encoders
    prng.py          SplitMix64, counter-based: ``uniform_at``, ``uniforms32``, ``next_below``
    norms.py         block ℓ2 / ℓ∞ norms and the all-finite test
    dither.py        bucketed dithering drivers (fused quantize+pack rows) and QSGD's rule
    sparse.py        sparse index codecs (fixed width or Elias-omega gaps), finite checks
    select.py        the selection passes (|x_j| ≥ a threshold; ascending for threshold,
                     descending for top-k) with the NaN/±Inf check
    topk_select.py   top-k's threshold sample and its order statistics (radix select)
    trits.py         ternary streams, 5 trits per byte (quant, terngrad)
    elias_omega.py   Elias-omega bit streams of the smoothness-aware compressors
    reference.py     plain numpy implementations: micro-benchmark baseline and test oracles
    _numba_cache.py  the guard that drops stale cached kernels when any source here changes

Nothing is imported here: a module is loaded when a compressor (or a test) imports it, so a run
loads only the kernels of its own compressors. Every kernel is a module-level
``@njit(cache=True)`` function (``docs/compressors.md``, Kernel notes).
"""
