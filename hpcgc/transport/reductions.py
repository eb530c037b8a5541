"""The MPI datatype and operation of each Allreduce wire type (part of the transport: the only code
that calls MPI). float32/float64/int8 and float16 (``MPI_FLOAT16_T``: MPICH 5.0.2 reduces it
natively) are MPI's own; bfloat16 has no MPI datatype in MPICH 5.0.2 (``MPI.BFLOAT16_T`` is null),
so its SUM is a user-defined operation on 16-bit words that widens to float32, adds and rounds back
(a numba kernel, :mod:`hpcgc.compressors.kernels.casts`); ``float16-user`` is the same operation for
float16 words (only measured, ``scripts/casts_cost.py``).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..errors import UserError


def library_version() -> str:
    return MPI.Get_library_version().strip().splitlines()[0]


def _bf16_sum(inbuf, inoutbuf, datatype):
    """The bfloat16 SUM (commutative): inout = bf16(float32(in) + float32(inout)), by the numba
    kernel :func:`hpcgc.compressors.kernels.casts.bf16_sum_into` on the 16-bit words."""
    from ..compressors.kernels.casts import bf16_sum_into
    bf16_sum_into(np.frombuffer(inbuf, dtype=np.uint16), np.frombuffer(inoutbuf, dtype=np.uint16))


def _half_sum(inbuf, inoutbuf, datatype):
    """The same user-defined SUM for float16 words (``float16-user``: the measured alternative to
    MPICH's native MPI_FLOAT16_T SUM, same results: ``scripts/casts_cost.py``)."""
    from ..compressors.kernels.casts import half_sum_into
    half_sum_into(np.frombuffer(inbuf, dtype=np.uint16), np.frombuffer(inoutbuf, dtype=np.uint16))


_USER_SUMS = {"bfloat16": _bf16_sum, "float16-user": _half_sum}


_REDUCTIONS: dict = {}


def reduction(op: str, wire: str):
    """(MPI datatype, MPI operation) of an Allreduce of ``op`` ("sum" or "max") in wire type
    ``wire`` (float32, float64, float16 — MPICH's native SUM —, bfloat16 and float16-user — a
    user-defined SUM on uint16 words —, int8, int16, int32), made once per process; UserError naming what is missing when
    this MPI has no such reduction (e.g. a null ``MPI.FLOAT16_T``, or no user-defined operation)."""
    got = _REDUCTIONS.get((op, wire))
    if got is None:
        got = _REDUCTIONS[(op, wire)] = _make_reduction(op, wire)
    return got


def _make_reduction(op: str, wire: str):
    if wire in _USER_SUMS:
        if op != "sum":
            raise UserError(f"no {wire} {op.upper()} reduction (only SUM, a user-defined operation)")
        try:
            return MPI.UINT16_T, MPI.Op.Create(_USER_SUMS[wire], commute=True)     # local, created once
        except Exception as exc:  # noqa: BLE001 - any failure means: no such path in this MPI
            raise UserError(f"a {wire} Allreduce needs a user-defined MPI operation (MPI.BFLOAT16_T is null in "
                            f"{library_version()}); creating it failed: {exc}") from None
    types = {"float32": MPI.FLOAT, "float64": MPI.DOUBLE, "float16": getattr(MPI, "FLOAT16_T", MPI.DATATYPE_NULL),
             "int8": MPI.INT8_T, "int16": MPI.INT16_T, "int32": MPI.INT32_T}
    dt = types.get(wire, MPI.DATATYPE_NULL)
    if dt == MPI.DATATYPE_NULL:
        raise UserError(f"this MPI ({library_version()}) has no {wire} datatype to reduce "
                        f"(MPI.{'FLOAT16_T' if wire == 'float16' else wire} is null)")
    return dt, (MPI.SUM if op == "sum" else MPI.MAX)


