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


# -- fused row encoders (quantize + pack) ----------------------------------------------------------

SUB = 8
"""Lanes of the encoders' vectors: a row is quantized as LANES/SUB sub-rows of ``<SUB x i32>``
(one AVX2 register of 32-bit lanes; their float64 intermediates are two)."""
SUB_I32 = ir.VectorType(_I32, SUB)
SUB_F64 = ir.VectorType(ir.DoubleType(), SUB)


class RowFields:
    """A dithering rule in LLVM IR, registered with :func:`register_row_fields`:

    * ``param(builder, scale, b)``: the per-bucket double the rule uses, from the bucket's scale
      as sent (a double) and the rule's integer parameter ``b`` (an i64), e.g. 2^32·s/scale;
    * ``fields(builder, v, u, p, b)``: the ``<SUB x i32>`` fields of SUB entries, from their values
      ``v`` (``<SUB x double>``), their uniform 32-bit integers ``u`` (``<SUB x i32>``,
      :func:`.prng.uniforms32`), ``p = param(…)`` and ``b``.
    """

    def __init__(self, param, fields):
        self.param, self.fields = param, fields


ROW_FIELDS: dict = {}
"""kind → :class:`RowFields` of a dithering rule (kind = the compressor's FORMAT_ID), used by
:func:`row_param`, :func:`fields_row` and :func:`pack_row` (and so by :mod:`.dither`)."""


def register_row_fields(kind: int, param, fields) -> None:
    """Make ``kind``'s dithering rule available to the row encoders."""
    if kind in ROW_FIELDS:
        raise ValueError(f"row fields kind {kind} registered twice")
    ROW_FIELDS[kind] = RowFields(param, fields)


def _row_fields(kind):
    if not isinstance(kind, types.IntegerLiteral):
        return None                     # numba retries with the literal (numba.literally)
    return ROW_FIELDS[kind.literal_value]


def splat_sub(builder, value, vtype):
    """IR: a scalar ``value`` broadcast to a vector of type ``vtype`` (the element type's)."""
    vec = builder.insert_element(ir.Constant(vtype, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vec, ir.Constant(vtype, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, vtype.count), None))


def vector_call(builder, name, v, *more):
    """IR: the overloaded LLVM intrinsic ``name`` (``llvm.floor``, ``llvm.fabs``; with ``more``
    operands of the same type, e.g. ``llvm.fmuladd``) on ``v``, a vector of doubles or floats."""
    vt = v.type
    suffix = f"v{vt.count}f64" if vt.element == ir.DoubleType() else f"v{vt.count}f32"
    fn = builder.module.declare_intrinsic(f"{name}.{suffix}", (), ir.FunctionType(vt, [vt] * (1 + len(more))))
    return builder.call(fn, [v, *more])


def _check_x(x):
    if not (isinstance(x, types.Array) and x.dtype in (types.float32, types.float64) and x.ndim == 1
            and x.layout == "C"):
        raise TypeError(f"row encoders need a contiguous 1-D float32/float64 x, got {x}")


def _sub_fields(context, builder, rule, xty, x, xoff, uty, u, uoff, p, b):
    """IR: the fields of the LANES entries x[xoff:+LANES] (as ``LANES/SUB`` ``<SUB x i32>``)."""
    f32 = xty.dtype == types.float32
    xvec = ir.VectorType(ir.FloatType() if f32 else ir.DoubleType(), SUB)
    out = []
    for j in range(0, LANES, SUB):
        xo = builder.add(xoff, ir.Constant(xoff.type, j))
        v = builder.load(row_ptr(context, builder, xty, x, xo, xvec), align=4 if f32 else 8)
        if f32:
            v = builder.fpext(v, SUB_F64)
        uo = builder.add(uoff, ir.Constant(uoff.type, j))
        uv = builder.load(row_ptr(context, builder, uty, u, uo, SUB_I32), align=4)
        out.append(rule.fields(builder, v, uv, p, b))
    return out


@intrinsic
def row_param(typingctx, scale, b, kind):
    """The per-bucket parameter of ``kind``'s dithering rule (``ROW_FIELDS[kind].param``)."""
    rule = _row_fields(kind)
    if rule is None:
        return None
    sig = types.float64(types.float64, types.int64, kind)

    def codegen(context, builder, sig, args):
        return rule.param(builder, args[0], args[1])

    return sig, codegen


@intrinsic
def fields_row(typingctx, fields, foff, x, xoff, u, uoff, p, b, kind):
    """``fields[foff:+LANES]`` = the fields of ``x[xoff:+LANES]`` under ``kind``'s dithering
    rule, with the uniforms ``u[uoff:+LANES]`` (uint32) and the rule's parameter ``p``
    (:func:`row_param`) and ``b``. No bounds checks (as the other rows)."""
    rule = _row_fields(kind)
    if rule is None:
        return None
    _check_u32(fields, u)
    _check_x(x)
    sig = types.void(fields, foff, x, xoff, u, uoff, types.float64, types.int64, kind)

    def codegen(context, builder, sig, args):
        fs = _sub_fields(context, builder, rule, sig.args[2], args[2], args[3], sig.args[4], args[4],
                         args[5], args[6], args[7])
        for j, f in zip(range(0, LANES, SUB), fs):
            fo = builder.add(args[1], ir.Constant(args[1].type, j))
            builder.store(f, row_ptr(context, builder, sig.args[0], args[0], fo, SUB_I32), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def pack_row(typingctx, words, woff, wnext, sh, x, xoff, u, uoff, p, b, kind):
    """Fused quantize + pack of one row of the blocked layout (:func:`.wire.pack_fields`): the
    fields of ``x[xoff:+LANES]`` (as :func:`fields_row`, never stored) shifted left by ``sh`` into
    ``words[woff:+LANES]`` (stored when sh = 0, else OR-ed into the row's earlier fields), and their
    bits beyond the word, ``>> (32 − sh)``, stored to ``words[wnext:+LANES]`` when ``wnext ≥ 0``."""
    rule = _row_fields(kind)
    if rule is None:
        return None
    _check_u32(words, u)
    _check_x(x)
    sig = types.void(words, woff, wnext, sh, x, xoff, u, uoff, types.float64, types.int64, kind)

    def codegen(context, builder, sig, args):
        fs = _sub_fields(context, builder, rule, sig.args[4], args[4], args[5], sig.args[6], args[6],
                         args[7], args[8], args[9])
        shift = context.cast(builder, args[3], sig.args[3], types.uint32)
        left = splat_sub(builder, shift, SUB_I32)
        wty, w = sig.args[0], args[0]

        def ptr(off, j):
            return row_ptr(context, builder, wty, w, builder.add(off, ir.Constant(off.type, j)), SUB_I32)

        into = builder.icmp_unsigned("!=", shift, ir.Constant(_I32, 0))
        with builder.if_else(into) as (merge, store):
            with merge:
                for j, f in zip(range(0, LANES, SUB), fs):
                    dp = ptr(args[1], j)
                    builder.store(builder.or_(builder.load(dp, align=4), builder.shl(f, left)), dp, align=4)
            with store:
                for j, f in zip(range(0, LANES, SUB), fs):
                    builder.store(f, ptr(args[1], j), align=4)
        nxt = context.cast(builder, args[2], sig.args[2], types.int64)
        with builder.if_then(builder.icmp_signed(">=", nxt, ir.Constant(nxt.type, 0))):
            right = splat_sub(builder, builder.sub(ir.Constant(_I32, 32), shift), SUB_I32)
            for j, f in zip(range(0, LANES, SUB), fs):
                builder.store(builder.lshr(f, right), ptr(nxt, j), align=4)
        return context.get_dummy_value()

    return sig, codegen
