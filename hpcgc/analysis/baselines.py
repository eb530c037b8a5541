"""The baseline a user would run: the fastest uncompressed-equivalent Allreduce among float32, fp16
and bf16 (``identity``, ``identity:fp16``, ``identity:bf16`` under ``run.collective = "allreduce"``)
that reaches the target — the 16-bit casts by default (PyTorch DDP's ``fp16_compress_hook`` /
``bf16_compress_hook``, Horovod's ``Compression.fp16``; "Beyond Throughput", arXiv 2407.01378, on
the 32-bit baseline as an evaluation flaw), the float32 one shown as a second line.

Where the runs of a panel have no fp16/bf16 Allreduce, the 16-bit baseline is **modelled** from the
float32 run: its iterations to target, its measured non-transfer time per iteration, half its bytes
(the same α–β cost models), labelled "modelled" in every table. Used by ``hpcgc breakeven``
(:mod:`hpcgc.analysis.breakeven`) and, for the choice among measured runs, by ``hpcgc report``
(:func:`report_baseline`). ``docs/breakeven.md``, "The baseline".
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

SIXTEEN = ("fp16", "bf16")
WIDE = ("fp32", "fp64")
BITS = {"fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}
FP32_LINE = "fp32"          # the columns of the second line: ``break_even_*_fp32``


def precision_of(spec: str, collective: str) -> str | None:
    """The wire type of an uncompressed-equivalent Allreduce (``fp16``, ``bf16``, ``fp32``,
    ``fp64``), None for anything else (another compressor or collective, an 8-bit cast)."""
    if collective != "allreduce":
        return None
    name, _, params = str(spec).partition(":")
    if name != "identity":
        return None
    flags = {}
    for item in filter(None, params.lower().replace(" ", "").split(",")):
        key, eq, value = item.partition("=")
        flags[key] = (not eq) or value in ("true", "1", "yes")       # a bare key is a flag (identity:fp16)
    if any(k.startswith("int") for k in flags):    # an 8-bit integer cast: lossy, not uncompressed-equivalent
        return None
    for prec in ("bf16", "fp16", "fp64"):
        if flags.get(prec):
            return prec
    return "fp32"


def run_precision(ri) -> str | None:
    """:func:`precision_of` a run (``tables.RunInfo``)."""
    attrs = ri.attrs
    flat = getattr(ri, "flat", {}) or {}
    spec = attrs.get("compressor") or attrs.get("compressor_name") or flat.get("run.compressor", "")   # the spec, not the bare name
    coll = attrs.get("collective") or flat.get("run.collective", "gather")
    return precision_of(str(spec), str(coll))


def modelled_16bit(wide):
    """A 16-bit Allreduce baseline modelled from a float32 (or float64) one: the same iterations to
    target and non-transfer time per iteration, the bytes scaled to 16 bits per coordinate."""
    scale = 16.0 / BITS.get(wide.precision, 32)
    return dataclasses.replace(
        wide, label=f"allreduce identity:fp16 (modelled from {wide.label})",
        up_bytes=wide.up_bytes * scale, precision="fp16", modelled=True, baseline=True, runs=[])


@dataclass
class Choice:
    base: object                 # the baseline of the break-even columns (a MethodModel)
    wide: object | None          # the float32 Allreduce of the second line (None: no such run)
    how: str                     # one line: which baseline, why, measured or modelled

    def tag(self, m) -> str:
        """The label suffix of a baseline row."""
        if m is self.base:
            return f" [baseline: {m.precision}{', modelled' if m.modelled else ''}]"
        if m is self.wide:
            return f" [{m.precision} baseline: second line]"
        return ""


def choose(ms: list, target, beta_ref: float, alpha: float, gamma: float = 0.0, *, time_of) -> Choice:
    """The panel's baseline among its uncompressed-equivalent Allreduce methods that reach the
    target (``m.baseline`` and finite ``m.iterations``; the caller checks there is one): the fastest
    of the measured fp16/bf16 ones and the float32 one — by measured time to target (``time_of(m)``:
    :func:`hpcgc.analysis.breakeven.measure.measured_time`; a method without runs: modelled at
    β = ``beta_ref``); ties go to 16 bits.
    No 16-bit run at all (reached or not): the 16-bit baseline modelled from the float32 one (:func:`modelled_16bit`; under
    the model it is faster than the float32 one at every bandwidth: same compute, half the bytes)."""
    cands = [m for m in ms if m.baseline and math.isfinite(m.iterations)]
    sixteen = [m for m in cands if m.precision in SIXTEEN]
    wide = sorted((m for m in cands if m.precision in WIDE),
                  key=lambda m: (m.precision != "fp32", m.iterations))
    wide = wide[0] if wide else None

    def t(m):
        v = time_of(m) if m.runs else float("nan")
        return v if math.isfinite(v) else float(m.time(m.ranks, alpha, beta_ref, gamma))

    if not any(m.baseline and m.precision in SIXTEEN for m in ms):      # no 16-bit run at all: model one
        if wide is None:
            raise ValueError("no uncompressed-equivalent Allreduce reaches the target")
        base = modelled_16bit(wide)
        scale = base.up_bytes / wide.up_bytes if wide.up_bytes else 0.5
        return Choice(base, wide, f"{base.label}: no fp16/bf16 Allreduce run in this panel; modelled with the "
                                  f"{wide.precision} run's iterations and non-transfer time, {scale:g}× its bytes")
    pool = [*sixteen, *([wide] if wide is not None else [])]      # a 16-bit run that misses the target: not in it
    if not pool:
        raise ValueError("no uncompressed-equivalent Allreduce reaches the target")
    times = {id(m): t(m) for m in pool}
    base = min(pool, key=lambda m: (times[id(m)], m.precision not in SIXTEEN))
    shown = ", ".join(f"{m.precision} {times[id(m)]:.4g} s" for m in pool)
    what = "measured" if all(m.runs for m in pool) else f"modelled at {8 / beta_ref / 1e9:.3g} Gb/s"
    return Choice(base, wide, f"{base.label} ({base.precision}): the fastest to the target ({what}: {shown})")


def report_baseline(ms, time_to_eps: dict) -> dict:
    """``hpcgc report``'s default baseline per panel: the fastest (``time_to_eps[id(method)]``,
    finite = every seed reached ε) uncompressed-equivalent Allreduce among fp16, bf16 and float32
    methods, ties to 16 bits; panels without one are left out (the caller's default applies)."""
    out: dict = {}
    for m in ms:
        prec = run_precision(m.runs[0]) if m.runs else None
        if prec not in SIXTEEN + ("fp32",):
            continue
        tm = time_to_eps.get(id(m), float("nan"))
        if not math.isfinite(tm):
            continue
        key = (tm, prec not in SIXTEEN)
        if m.panel not in out or key < out[m.panel][0]:
            out[m.panel] = (key, m, prec)
    return {p: (m, prec) for p, (_, m, prec) in out.items()}
