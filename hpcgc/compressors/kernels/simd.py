"""Explicit-SIMD row operations for the blocked field layout (:func:`.wire.pack_fields`).

A *row* is ``LANES`` = 32 consecutive uint32 values: two 512-bit (or four 256-bit) vectors. Each
function here is a numba ``@intrinsic`` that emits one LLVM ``<32 x i32>`` load/shift/or/store
sequence, inlined into the calling kernel. Written as plain numba loops over the 32 lanes, the
same operations ran 4–8× slower: numba types ``uint32 << uint32`` as 64-bit, and the short
loops between array slices kept per-row overhead (slice set-up, alias checks) that dominated.

The functions take an array, an element offset and values; they do **no bounds checks** (as
numba's own indexing). Callers guarantee ``offset + LANES ≤ len(array)``: :mod:`.wire` calls them
only on the full blocks of a field stream whose length it has already checked.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

LANES = 32
_I32 = ir.IntType(32)
_ROW = ir.VectorType(_I32, LANES)


def row_ptr(context, builder, arrty, arr, offset, vtype=_ROW):
    """Pointer to ``arr[offset:offset + LANES]`` as a ``<LANES x i32>*`` (or ``vtype*``)."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [offset]), vtype.as_pointer())



def _splat(context, builder, ty, value):
    """``value`` (numba type ``ty``) as uint32, broadcast to all lanes."""
    v = context.cast(builder, value, ty, types.uint32)
    vec = builder.insert_element(ir.Constant(_ROW, ir.Undefined), v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vec, ir.Constant(_ROW, ir.Undefined), ir.Constant(_ROW, None))


def _load(builder, ptr):
    return builder.load(ptr, align=4)


def _check_u32(*arrays):
    for a in arrays:
        if not (isinstance(a, types.Array) and a.dtype == types.uint32 and a.ndim == 1
                and a.layout == "C"):
            raise TypeError(f"simd rows need contiguous 1-D uint32 arrays, got {a}")


@intrinsic
def shl_row(typingctx, dst, doff, src, soff, sh, into):
    """``dst[doff:+LANES] = src[soff:+LANES] << sh``, OR-ed into the old contents if ``into``
    (0 ≤ sh < 32)."""
    _check_u32(dst, src)
    sig = types.void(dst, doff, src, soff, sh, into)

    def codegen(context, builder, sig, args):
        dp = row_ptr(context, builder, sig.args[0], args[0], args[1])
        sp = row_ptr(context, builder, sig.args[2], args[2], args[3])
        v = builder.shl(_load(builder, sp), _splat(context, builder, sig.args[4], args[4]))
        flag = context.cast(builder, args[5], sig.args[5], types.boolean)
        with builder.if_else(flag) as (merge, store):
            with merge:
                builder.store(builder.or_(_load(builder, dp), v), dp, align=4)
            with store:
                builder.store(v, dp, align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def shr_row(typingctx, dst, doff, src, soff, sh):
    """``dst[doff:+LANES] = src[soff:+LANES] >> sh`` (0 ≤ sh < 32)."""
    _check_u32(dst, src)
    sig = types.void(dst, doff, src, soff, sh)

    def codegen(context, builder, sig, args):
        dp = row_ptr(context, builder, sig.args[0], args[0], args[1])
        sp = row_ptr(context, builder, sig.args[2], args[2], args[3])
        v = builder.lshr(_load(builder, sp), _splat(context, builder, sig.args[4], args[4]))
        builder.store(v, dp, align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def extract_row(typingctx, dst, doff, src, soff, soff_next, sh, mask):
    """``dst[doff:+LANES] = ((src[soff:+LANES] >> sh) | (src[soff_next:+LANES] << (32 − sh))) & mask``;
    without the second term when ``soff_next < 0`` (0 ≤ sh < 32; 0 < sh when soff_next ≥ 0)."""
    _check_u32(dst, src)
    sig = types.void(dst, doff, src, soff, soff_next, sh, mask)

    def codegen(context, builder, sig, args):
        dp = row_ptr(context, builder, sig.args[0], args[0], args[1])
        sp = row_ptr(context, builder, sig.args[2], args[2], args[3])
        shift = context.cast(builder, args[5], sig.args[5], types.uint32)
        lo = builder.lshr(_load(builder, sp), _splat(context, builder, types.uint32, shift))
        m = _splat(context, builder, sig.args[6], args[6])
        nxt = args[4]
        with builder.if_else(builder.icmp_signed(">=", nxt, ir.Constant(nxt.type, 0))) as (two, one):
            with two:
                np_ = row_ptr(context, builder, sig.args[2], args[2], nxt)
                back = _splat(context, builder, types.uint32, builder.sub(ir.Constant(_I32, 32), shift))
                hi = builder.shl(_load(builder, np_), back)
                builder.store(builder.and_(builder.or_(lo, hi), m), dp, align=4)
            with one:
                builder.store(builder.and_(lo, m), dp, align=4)
        return context.get_dummy_value()

    return sig, codegen


# -- fused row decoders ---------------------------------------------------------------------------

F64ROW = ir.VectorType(ir.DoubleType(), LANES)


def extract_fields(context, builder, sig_words, words, woff, wnext, sh, mask):
    """IR: the ``<LANES x i32>`` fields of one row (:func:`extract_row`'s value, not stored)."""
    sp = row_ptr(context, builder, sig_words, words, woff)
    lo = builder.lshr(_load(builder, sp), _splat(context, builder, types.uint32, sh))
    m = _splat(context, builder, types.uint32, mask)
    with builder.if_else(builder.icmp_signed(">=", wnext, ir.Constant(wnext.type, 0))) as (two, one):
        with two:
            np_ = row_ptr(context, builder, sig_words, words, wnext)
            back = _splat(context, builder, types.uint32, builder.sub(ir.Constant(_I32, 32), sh))
            v_two = builder.and_(builder.or_(lo, builder.shl(_load(builder, np_), back)), m)
            bb_two = builder.block
        with one:
            v_one = builder.and_(lo, m)
            bb_one = builder.block
    phi = builder.phi(_ROW)
    phi.add_incoming(v_two, bb_two)
    phi.add_incoming(v_one, bb_one)
    return phi


def splat_f64(builder, value):
    """IR: a double broadcast to all lanes."""
    vec = builder.insert_element(ir.Constant(F64ROW, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vec, ir.Constant(F64ROW, ir.Undefined), ir.Constant(_ROW, None))


def splat_i(builder, vtype, value):
    """IR: an integer constant broadcast to a vector of type ``vtype``."""
    return ir.Constant(vtype, [ir.Constant(vtype.element, value)] * vtype.count)


def check_f64_out(out):
    if not (isinstance(out, types.Array) and out.dtype == types.float64 and out.ndim == 1
            and out.layout == "C"):
        raise TypeError(f"row decoders need a contiguous 1-D float64 out, got {out}")


def put_f64_row(context, builder, out_ty, out, ooff, v, accumulate):
    """IR: ``out[ooff:ooff + LANES] = v``, or ``+= v`` when the i1 ``accumulate`` is set."""
    op = row_ptr(context, builder, out_ty, out, ooff, F64ROW)
    with builder.if_else(accumulate) as (add, store):
        with add:
            builder.store(builder.fadd(builder.load(op, align=8), v), op, align=8)
        with store:
            builder.store(v, op, align=8)


ROW_VALUES: dict = {}
"""kind → IR builder ``values(builder, fields, a, b)`` of a blocked field format: ``fields`` is
``<LANES x i32>``, ``a`` a double, ``b`` an i64; returns ``<LANES x double>``. Filled by the
compressor modules with :func:`register_row_values` (kind = their FORMAT_ID)."""


def register_row_values(kind: int, values) -> None:
    """Make ``kind`` decodable by :func:`decode_row` / :func:`values_row` (and so by
    :func:`.wire.blocked_decode`)."""
    if ROW_VALUES.get(kind, values) is not values:
        raise ValueError(f"row values kind {kind} registered twice")
    ROW_VALUES[kind] = values


def _row_values(kind):
    if not isinstance(kind, types.IntegerLiteral):
        return None                     # numba retries with the literal (numba.literally)
    return ROW_VALUES[kind.literal_value]


@intrinsic
def decode_row(typingctx, out, ooff, words, woff, wnext, sh, mask, a, b, accumulate, kind):
    """Fused decode of one row of a blocked field stream of format ``kind`` (a literal):
    extract the row's LANES fields (as :func:`extract_row`), turn them into LANES doubles with
    ``ROW_VALUES[kind]`` and store them to ``out[ooff:ooff + LANES]`` (float64), added to its old
    contents when ``accumulate``. Row by row, the unpacking then interleaves with the
    memory-bound ``out +=`` instead of running as a separate pass over a chunk."""
    values = _row_values(kind)
    if values is None:
        return None
    _check_u32(words)
    check_f64_out(out)
    sig = types.void(out, ooff, words, woff, wnext, sh, mask, types.float64, types.int64, accumulate, kind)

    def codegen(context, builder, sig, args):
        shift = context.cast(builder, args[5], sig.args[5], types.uint32)
        msk = context.cast(builder, args[6], sig.args[6], types.uint32)
        nxt = context.cast(builder, args[4], sig.args[4], types.int64)
        f = extract_fields(context, builder, sig.args[2], args[2], args[3], nxt, shift, msk)
        v = values(builder, f, args[7], args[8])
        flag = context.cast(builder, args[9], sig.args[9], types.boolean)
        put_f64_row(context, builder, sig.args[0], args[0], args[1], v, flag)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def values_row(typingctx, out, ooff, fields, foff, a, b, kind):
    """``out[ooff:ooff + LANES] = ROW_VALUES[kind](fields[foff:foff + LANES], a, b)``: the same
    values from unpacked fields (a uint32 array)."""
    values = _row_values(kind)
    if values is None:
        return None
    _check_u32(fields)
    check_f64_out(out)
    sig = types.void(out, ooff, fields, foff, types.float64, types.int64, kind)

    def codegen(context, builder, sig, args):
        f = _load(builder, row_ptr(context, builder, sig.args[2], args[2], args[3]))
        v = values(builder, f, args[4], args[5])
        put_f64_row(context, builder, sig.args[0], args[0], args[1], v, ir.Constant(ir.IntType(1), 0))
        return context.get_dummy_value()

    return sig, codegen
