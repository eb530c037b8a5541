"""Per-entry cost of the compressor kernels, load-independent: instruction counts under callgrind,
or the minimum of many timed calls on a cache-resident vector (docs/performance.md, "Compressor
kernels").

    # instructions per entry (kernel i is called 4 + 4i times; callgrind's call counts name it)
    valgrind --tool=callgrind --toggle-collect='*call_cfunc*' --callgrind-out-file=/tmp/cg.out \
        python scripts/kernel_cost.py calls 65536 norm prng pack:qsgd:s=4 pack:terngrad
    python scripts/kernel_cost.py parse /tmp/cg.out 65536 norm prng pack:qsgd:s=4 pack:terngrad
    # the assembly of a pack kernel (the hot row loops: count the instructions of one row by hand);
    # numba keeps no listing for a kernel loaded from its cache, so compile into a fresh cache dir
    NUMBA_CACHE_DIR=$(mktemp -d) python scripts/kernel_cost.py asm 4096 pack:qsgd:s=4 > /tmp/qsgd.s
    # minimum wall time per entry over ~2 s of calls (a cycles proxy that survives load)
    python scripts/kernel_cost.py time 65536 copy norm prng pack:qsgd:s=4 qsgd:s=4

Kinds: ``copy`` (np.copyto), ``norm`` (block ℓ2 norm), ``linf`` (ℓ∞ bits), ``prng`` (uniforms32),
``prng:hash32`` (a *hypothetical* cheaper stream, not used by any compressor: one keyed 32-bit
integer hash per entry, see :func:`hash32_fill` — what a change of the random stream would cost),
``pack:SPEC`` (the quantize+pack kernel of SPEC alone, fixed scale), or a compressor SPEC (the
whole ``compress``). Input: float32 standard normal, seed 1.
"""
from __future__ import annotations

import re
import sys
import time

import numpy as np

REP = 3


def _hash32_kernel():
    from llvmlite import ir
    from numba import njit, types
    from numba.core.extending import intrinsic

    from hpcgc.compressors.kernels import simd

    i32, v8 = ir.IntType(32), ir.VectorType(ir.IntType(32), 8)

    @intrinsic
    def hash32_row(typingctx, out, off, ctr, k0, k1):
        """out[off:off + 8] = h(ctr + t), t = 0..7, in <8 x i32> lanes (vpmulld on AVX2)."""
        sig = types.void(out, types.int64, types.uint32, types.uint32, types.uint32)

        def codegen(context, builder, sig, args):
            def splat(v):
                return simd.splat_sub(builder, v, v8)
            z = builder.add(splat(args[2]), ir.Constant(v8, [ir.Constant(i32, t) for t in range(8)]))
            z = builder.xor(z, splat(args[3]))
            for sh, mul in ((16, 0x7FEB352D), (15, 0x846CA68B)):
                z = builder.xor(z, builder.lshr(z, simd.splat_i(builder, v8, sh)))
                z = builder.mul(z, simd.splat_i(builder, v8, mul))
            z = builder.xor(z, builder.lshr(z, simd.splat_i(builder, v8, 16)))
            z = builder.xor(z, splat(args[4]))
            builder.store(z, simd.row_ptr(context, builder, sig.args[0], args[0], args[1], v8), align=4)
            return context.get_dummy_value()
        return sig, codegen

    @njit(cache=True)
    def hash32_fill(seed, start, out):
        """out[i] = h(start + i) for a keyed 32-bit integer hash h (Wellons' "lowbias32" finaliser:
        xor-shift/multiply twice, on the counter xor the seed's low word, then xor its high word),
        8 lanes at a time (m a multiple of 8): counter-based like uniforms32, one 32-bit word per
        entry, 32-bit multiplies only. A cost probe — a new stream would need its own quality
        argument and a change of every payload."""
        k0 = np.uint32(np.uint64(seed) & np.uint64(0xFFFFFFFF))
        k1 = np.uint32(np.uint64(seed) >> np.uint64(32))
        for i in range(0, out.shape[0], 8):
            hash32_row(out, i, np.uint32(start + i), k0, k1)
    return hash32_fill


def build(kind: str, d: int):
    from hpcgc import compressors
    from hpcgc.compressors.kernels import norms, prng, trits
    x = np.random.default_rng(1).standard_normal(d).astype(np.float32)
    seed = np.uint64(12345)
    sc = np.array([float(np.linalg.norm(x.astype(np.float64)))])
    if kind == "copy":
        dst = np.empty_like(x)
        return lambda: np.copyto(dst, x)
    if kind == "norm":
        nr = np.empty(1)
        return lambda: norms.block_norms_l2(x, d, nr)
    if kind == "linf":
        bits = np.empty(1, np.uint32)
        return lambda: norms.block_max_bits32(x.view(np.uint32), d, bits)
    if kind == "prng":
        u = np.empty(d, np.uint32)
        return lambda: prng.uniforms32(seed, 0, u)
    if kind == "prng:hash32":
        u = np.empty(d, np.uint32)
        fill = _hash32_kernel()
        return lambda: fill(seed, 0, u)
    if kind.startswith("pack:"):
        spec = kind[5:]
        c = compressors.make(spec)
        if spec.startswith(("qsgd", "natural-dither")):
            from hpcgc.compressors.kernels.dither import qsgd_pack
            from hpcgc.compressors.natural_dither import natural_dither_pack
            pack = qsgd_pack if spec.startswith("qsgd") else natural_dither_pack
            out = np.empty(8 + c._body_bytes(d)[1], np.uint8)
            return lambda: pack(x, d, sc, c.s, c._width, seed, out, 12)
        if spec.startswith("natural"):
            from hpcgc.compressors.natural import natural_encode_f32
            out = np.empty(8 + d + (d + 7) // 8, np.uint8)
            return lambda: natural_encode_f32(x.view(np.uint32), seed, out[8:8 + d], out[8 + d:])
        from hpcgc.compressors.quant import ternary_dither_pack
        out = np.empty(12 + trits.trit_bytes(d), np.uint8)
        return lambda: ternary_dither_pack(x, d, sc, seed, out, 12)
    c = compressors.make(kind)
    g = np.random.default_rng(0)
    return lambda: c.compress(x, g)


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "parse":
        path, d, kinds = argv[1], int(argv[2]), argv[3:]
        text = open(path).read()
        fid = re.search(r"\((\d+)\) call_cfunc\(", text).group(1)       # callgrind names it once
        block = text.split(f"\nfn=({fid})", 1)[1].split("\nfn=")[0]
        by_calls: dict[int, int] = {}
        for calls, ir in re.findall(r"cfn=\(\d+\)[^\n]*\ncalls=(\d+) \S*\s*\n\S+ (\d+)", block):
            by_calls[int(calls)] = by_calls.get(int(calls), 0) + int(ir)
        for i, k in enumerate(kinds):
            n = 1 + REP + 4 * i
            ir = by_calls.get(n)
            print(f"{k:28s} d={d} " + (f"{ir / n / d:.2f} instructions/entry" if ir else "not found "
                                          "(compressor specs: run one per callgrind)"))
        return
    d, kinds = int(argv[1]), argv[2:]
    fns = [build(k, d) for k in kinds]
    for f in fns:
        f()                                          # load or compile
    if mode == "asm":
        from hpcgc.compressors import natural, natural_dither, quant
        from hpcgc.compressors.kernels import dither
        for k in kinds:
            spec = k[5:] if k.startswith("pack:") else k
            fn = (dither.qsgd_pack if spec.startswith("qsgd") else natural_dither.natural_dither_pack
                  if spec.startswith("natural-dither") else natural.natural_encode_f32
                  if spec.startswith("natural") else quant.ternary_dither_pack)
            for sig, asm in fn.inspect_asm().items():
                print(f"# {k}: {fn.__name__}{sig}\n{asm}")
        return
    if mode == "calls":
        for i, f in enumerate(fns):
            for _ in range(REP + 4 * i):
                f()
        return
    for k, f in zip(kinds, fns):
        best, n, end = float("inf"), 0, time.perf_counter() + 2.0
        while time.perf_counter() < end or n < 30:
            t0 = time.perf_counter_ns()
            f()
            best = min(best, time.perf_counter_ns() - t0)
            n += 1
        print(f"{k:28s} d={d} min {best / d:.3f} ns/entry ({n} calls)")


if __name__ == "__main__":
    main(sys.argv[1:])
