"""``python -m hpcgc.bench micro``: the compressor micro-benchmark (OSU style).

For each compressor and each d = 2^min … 2^max (float32 standard-normal input, one thread), it
measures, warm-up runs excluded, the median over repeats of:

* ``compress`` and ``decompress_add`` (the server's fused decode into a float64 accumulator) and
  ``decompress`` (decode into a new array) — throughput in GB/s of *input* (4·d bytes) and in
  entries per second;
* two references measured the same way in the same run: ``np.copyto`` of the same float32 array
  (the memory-copy roofline, bytes of the source per second) and the straightforward numpy
  implementation of the same compressor (:mod:`hpcgc.compressors.reference`), giving
  hpcgc/numpy speed-ups and throughput as a fraction of copy bandwidth;
* model bits and wire bits per entry (mean over the timed payloads) and their ratio;
* the measured ω (unbiased: mean ‖C(x) − x‖²/‖x‖² over a few draws) or δ (biased:
  1 − ‖C(x) − x‖²/‖x‖²) against the theory value ``omega(d)``/``delta(d)``. On a Gaussian vector
  the measured ω is typically far below the worst case.

It prints a header (version, date, machine, numba, command line) and one table per compressor,
and stores everything in an HDF5 file (layout in ``docs/micro.md``). Serial: under mpirun only
rank 0 runs.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from .errors import ConfigError, UserError

DEFAULT_SPECS = (
    "identity", "qsgd:s=4", "qsgd:s=4,code=elias", "qsgd:s=15,bucket=512,p=inf", "quant:p=2", "quant:p=inf,block=32", "terngrad",
    "natural", "natural-dither:s=8", "bernoulli:p=0.1", "randk:k=1%", "randk:k=1%,shared_seed=true",
    "natural-randk:k=1%", "topk:k=1%", "threshold:lam=2.576", "sign", "scaled-sign", "powersgd",
)
"""The default catalogue run (``k=P%`` is expanded to ⌈P·d/100⌉ for each d; lam = 2.576 keeps ≈ 1 %
of standard-normal entries)."""

QUICK = {"min_log2": 10, "max_log2": 14, "repeat": 3, "warmup": 1, "budget": 0.05}
SCHEMA_VERSION = 1

COLUMNS = (
    # key, header, width, format
    ("d", "d", 9, "d"),
    ("comp_gbps", "comp GB/s", 9, ".3f"),
    ("comp_meps", "comp Me/s", 9, ".1f"),
    ("dec_add_gbps", "dec+= GB/s", 10, ".3f"),
    ("dec_gbps", "dec GB/s", 8, ".3f"),
    ("copy_gbps", "copy GB/s", 9, ".3f"),
    ("comp_over_copy", "comp/copy", 9, ".3f"),
    ("dec_add_over_copy", "dec+=/copy", 10, ".3f"),
    ("dec_add_over_acc", "dec+=/acc", 9, ".3f"),
    ("np_comp_gbps", "np comp GB/s", 12, ".4f"),
    ("np_dec_gbps", "np dec GB/s", 11, ".4f"),
    ("speedup_comp", "x np comp", 9, ".1f"),
    ("speedup_dec", "x np dec", 8, ".1f"),
    ("model_bpe", "model b/e", 9, ".4f"),
    ("wire_bpe", "wire b/e", 9, ".4f"),
    ("wire_over_model", "wire/model", 10, ".4f"),
    ("param_measured", "meas", 9, ".4g"),
    ("param_theory", "theory", 9, ".4g"),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpcgc.bench micro",
        description="Compressor micro-benchmark: throughput vs memory-copy bandwidth and vs a numpy "
                    "implementation, model and wire bits per entry, measured omega/delta vs theory.",
        epilog="Compressor specs are as in the experiment files; k=P%% sets k = ceil(P*d/100) for each d "
               "(e.g. topk:k=1%%). Output: one table per compressor, and an HDF5 file (docs/micro.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compressors", "-c", nargs="+", metavar="SPEC",
                   help="compressor specs (default: the whole catalogue, see docs/micro.md)")
    p.add_argument("--min-log2", type=int, default=10, help="smallest d = 2^N (default 10)")
    p.add_argument("--max-log2", type=int, default=24, help="largest d = 2^N (default 24)")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per measurement, at most (default 7)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before each measurement (default 1)")
    p.add_argument("--budget", type=float, default=0.25,
                   help="seconds per measurement: stop repeating after this once 3 runs are done "
                        "(numpy references: 1 run) (default 0.25)")
    p.add_argument("--draws", type=int, default=32,
                   help="most draws for the measured omega/delta (fewer at large d: about 2^20/d) (default 32)")
    p.add_argument("--no-numpy", action="store_true", help="skip the numpy reference implementations")
    p.add_argument("--seed", type=int, default=0, help="seed of the input and of the compressors' Generator")
    p.add_argument("--quick", action="store_true",
                   help="small run for tests: d = 2^10..2^14, 3 repeats (explicit options still apply)")
    p.add_argument("--out", "-o", metavar="PATH", help="HDF5 file (default results/micro-<UTC time>.h5)")
    p.add_argument("--no-save", action="store_true", help="do not write the HDF5 file")
    return p


# -- helpers -------------------------------------------------------------------------------------

_PCT = re.compile(r"\bk\s*=\s*([0-9.eE+-]+)\s*%")


def expand_spec(spec: str, d: int) -> str:
    """Replace ``k=P%`` by k = max(1, ⌈P·d/100⌉) (at most d)."""
    def sub(m):
        frac = float(m.group(1)) / 100.0
        if not 0.0 < frac <= 1.0:
            raise ConfigError(f"micro: {spec!r}: k={m.group(1)}% must be in (0, 100]")
        return f"k={min(d, max(1, math.ceil(frac * d - 1e-9)))}"
    return _PCT.sub(sub, spec)


def _timed(fn, repeat: int, warmup: int, budget: float, min_runs: int, after=None) -> np.ndarray:
    """Run ``fn`` warm-up times untimed, then up to ``repeat`` timed runs (fewer once ``budget``
    seconds have passed and ``min_runs`` are done); the seconds of each timed run. ``after`` is
    called, untimed, with the result of each timed run."""
    return _timed_with(fn, (), repeat, warmup, budget, min_runs, after)[0]


def _timed_with(fn, refs, repeat: int, warmup: int, budget: float, min_runs: int, after=None):
    """:func:`_timed`, with reference functions ``refs`` (the copy/acc rooflines) each run and
    timed right before every run of ``fn``, so that a kernel and its roofline see the same machine
    state (a neighbour VM's burst moves both). Returns (times of fn, [times of each ref])."""
    for _ in range(warmup):
        for ref in refs:
            ref()
        fn()
    times: list[float] = []
    ref_times: list[list[float]] = [[] for _ in refs]
    start = time.perf_counter()
    for _ in range(max(1, repeat)):
        for ref, rt in zip(refs, ref_times):
            t0 = time.perf_counter()
            ref()
            rt.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = fn()
        times.append(time.perf_counter() - t0)
        if after is not None:
            after(r)
        if len(times) >= min_runs and time.perf_counter() - start > budget:
            break
    return np.array(times), [np.array(rt) for rt in ref_times]


def _paired_ratio(ref_times: np.ndarray, times: np.ndarray) -> float:
    """Median over runs of (reference time / kernel time), each pair measured back to back."""
    return float(np.median(ref_times / times))


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cpus, {platform.system()} {platform.release()})"


_ISAS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4.2", "SSE4.2"))


def vector_isa(features: str) -> str:
    """The widest x86 vector instruction set an LLVM feature string (``+avx2,-avx512f,...``)
    enables: AVX-512, AVX2, AVX, SSE4.2, or SSE2 (the x86-64 base)."""
    on = {f[1:] for f in features.split(",") if f.startswith("+")}
    return next((name for feat, name in _ISAS if feat in on), "SSE2")


def kernel_target() -> dict:
    """What numba compiles the kernels for (its JIT target machine, ``numba.core.codegen``): the
    CPU name — ``NUMBA_CPU_NAME`` if set, else llvmlite's ``get_host_cpu_name()`` — and the feature
    list — ``NUMBA_CPU_FEATURES`` if set, else ``get_host_cpu_features()`` (``NUMBA_CPU_NAME``
    alone changes the tuning, not the instructions: the host's features still apply; an empty one
    leaves the CPU name's defaults); the vector instruction set those features enable; and the
    host's own CPU name and instruction set."""
    import llvmlite.binding as ll
    from numba import config
    host_name = ll.get_host_cpu_name()
    try:
        host_features = ll.get_host_cpu_features().flatten()
    except RuntimeError:                    # llvmlite cannot read them on this platform
        host_features = ""
    name = config.CPU_NAME or host_name
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else host_features
    # an empty feature list leaves the CPU name's own defaults (LLVM's), which llvmlite does not list
    isa = vector_isa(features) if "+" in features else f"{name}'s default features"
    return {"cpu": name, "isa": isa,
            "cpu_source": "NUMBA_CPU_NAME" if config.CPU_NAME else "host",
            "features_source": "NUMBA_CPU_FEATURES" if config.CPU_FEATURES is not None else "host",
            "host_cpu": host_name, "host_isa": vector_isa(host_features)}


def describe_target(t: dict) -> str:
    """One header line: the kernels' CPU and instruction set, where they came from, the host's."""
    how = ("the host's" if t["cpu_source"] == "host" and t["features_source"] == "host"
           else f"CPU from {t['cpu_source']}, features from {t['features_source']}")
    return (f"# kernels compiled for: {t['cpu']}, {t['isa']} ({how}; host: {t['host_cpu']}, "
            f"{t['host_isa']})")


def _mpi_rank() -> int:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        v = os.environ.get(var)
        if v is not None and v.isdigit():
            return int(v)
    return 0


def _fmt(v, width: int, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return f"{'-':>{width}}"
    return f"{v:>{width}{fmt}}"


# -- one measurement -----------------------------------------------------------------------------

def measure(c, x: np.ndarray, args, rng: np.random.Generator, draws: int) -> dict:
    """All numbers of one table row for compressor ``c`` on input ``x``. The copy and acc
    rooflines are re-measured here, each run right before a run of the kernel (:func:`_timed_with`);
    the ``/copy`` and ``/acc`` ratios are medians of those back-to-back pairs."""
    from .compressors.identity import scaled_add
    from .compressors.kernels import reference
    d = x.shape[0]
    nbytes = 4.0 * d
    wire_bits: list[float] = []
    model_bits: list[float] = []
    last = []
    dst = np.empty_like(x)
    acc = np.zeros(d)

    def copy():
        np.copyto(dst, x)

    def accumulate():
        scaled_add(x, 1.0, acc)

    def record(p):
        # untimed; only the last payload is kept, so each compress allocates its payload the way
        # a real iteration does (the previous one freed), not into fresh pages
        wire_bits.append(8.0 * p.size)
        model_bits.append(float(c.model_bits(p, d)))
        last[:] = [p]

    t_comp, (t_copy1,) = _timed_with(lambda: c.compress(x, rng), (copy,), args.repeat, args.warmup,
                                     args.budget, 3, record)
    p0 = last[0]
    out = np.zeros(d)
    t_add, (t_copy2, t_acc) = _timed_with(lambda: c.decompress_add(p0, d, out, 1.0), (copy, accumulate),
                                          args.repeat, args.warmup, args.budget, 3)
    t_dec = _timed(lambda: c.decompress(p0, d), args.repeat, args.warmup, args.budget, 3)
    copy_s = float(np.median(np.concatenate([t_copy1, t_copy2])))
    acc_s = float(np.median(t_acc))
    wire = np.array(wire_bits)
    model = np.array(model_bits)

    row = {"d": d, "compress_s": float(np.median(t_comp)), "decompress_add_s": float(np.median(t_add)),
           "decompress_s": float(np.median(t_dec)), "compress_runs": len(t_comp),
           "compress_min_s": float(t_comp.min()), "decompress_add_min_s": float(t_add.min()),
           "decompress_min_s": float(t_dec.min()), "copy_s": copy_s, "acc_s": acc_s,
           "wire_bits": float(wire.mean()), "model_bits": float(model.mean())}
    row["np_compress_s"] = row["np_decompress_s"] = math.nan
    if not args.no_numpy and reference.has_reference(c):
        msgs = []
        nrng = np.random.default_rng(args.seed + 1)
        t_np = _timed(lambda: msgs.append(reference.compress(c, x, nrng)), args.repeat, min(args.warmup, 1),
                      args.budget, 1)
        t_npd = _timed(lambda: reference.decompress(c, msgs[-1], d), args.repeat, min(args.warmup, 1),
                       args.budget, 1)
        row["np_compress_s"] = float(np.median(t_np))
        row["np_decompress_s"] = float(np.median(t_npd))

    # a compressor's core kernel alone (``kernel_probe``: hadamard's rotation, sign flip + FWHT)
    row["kernel_s"] = math.nan
    probe = getattr(c, "kernel_probe", None)
    if probe is not None:
        t_k, (t_copy3,) = _timed_with(probe(x), (copy,), args.repeat, args.warmup, args.budget, 3)
        row["kernel_s"] = float(np.median(t_k))
        row["kernel_over_copy"] = _paired_ratio(t_copy3, t_k)

    # measured ω (unbiased) or δ (biased) on the same x
    x64 = x.astype(np.float64)
    nx2 = float(x64 @ x64)
    errs = []
    for _ in range(draws):
        y = c.decompress(c.compress(x, rng), d)
        errs.append(float(np.sum((y - x64) ** 2)) / nx2)
    if c.unbiased:
        row["param_kind"], row["param_measured"], row["param_theory"] = "omega", float(np.mean(errs)), c.omega(d)
    else:
        dl = c.delta(d)
        row["param_kind"], row["param_measured"] = "delta", 1.0 - float(np.mean(errs))
        row["param_theory"] = math.nan if dl is None else dl
    row["draws"] = draws

    comp_s, add_s, dec_s = row["compress_s"], row["decompress_add_s"], row["decompress_s"]
    row.update({
        "comp_gbps": nbytes / comp_s / 1e9, "comp_meps": d / comp_s / 1e6,
        "dec_add_gbps": nbytes / add_s / 1e9, "dec_gbps": nbytes / dec_s / 1e9,
        "copy_gbps": nbytes / copy_s / 1e9, "comp_over_copy": _paired_ratio(t_copy1, t_comp),
        "dec_add_over_copy": _paired_ratio(t_copy2, t_add), "dec_add_over_acc": _paired_ratio(t_acc, t_add),
        "np_comp_gbps": nbytes / row["np_compress_s"] / 1e9, "np_dec_gbps": nbytes / row["np_decompress_s"] / 1e9,
        "speedup_comp": row["np_compress_s"] / comp_s, "speedup_dec": row["np_decompress_s"] / dec_s,
        "model_bpe": row["model_bits"] / d, "wire_bpe": row["wire_bits"] / d,
        "wire_over_model": row["wire_bits"] / row["model_bits"] if row["model_bits"] > 0 else math.nan,
        "kernel_gbps": nbytes / row["kernel_s"] / 1e9,
    })
    row.setdefault("kernel_over_copy", math.nan)
    return row


def table_header() -> str:
    return " ".join(f"{h:>{w}}" for _, h, w, _ in COLUMNS)


def table_row(row: dict) -> str:
    return " ".join(_fmt(row.get(k), w, f) for k, _, w, f in COLUMNS)


# -- HDF5 ----------------------------------------------------------------------------------------

ROW_FIELDS = ("d", "compress_s", "compress_min_s", "decompress_add_s", "decompress_add_min_s", "decompress_s",
              "decompress_min_s", "compress_runs", "copy_s", "acc_s", "np_compress_s", "np_decompress_s", "wire_bits",
              "model_bits", "param_measured", "param_theory", "draws", "comp_gbps", "comp_meps",
              "dec_add_gbps", "dec_gbps", "copy_gbps", "comp_over_copy", "dec_add_over_copy", "dec_add_over_acc",
              "np_comp_gbps",
              "np_dec_gbps", "speedup_comp", "speedup_dec", "model_bpe", "wire_bpe", "wire_over_model",
              "kernel_s", "kernel_gbps", "kernel_over_copy")


def write_h5(path: Path, attrs: dict, copy_rows: list, results: list) -> Path:
    import h5py
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with h5py.File(partial, "w") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
        g = f.create_group("copy")
        g.attrs["what"] = "np.copyto(dst, src) of the float32 input; bytes of src per second"
        g["d"] = np.array([r["d"] for r in copy_rows], dtype=np.int64)
        g["seconds"] = np.array([r["copy_s"] for r in copy_rows])
        g["seconds_min"] = np.array([r["copy_min_s"] for r in copy_rows])
        g["gbps"] = 4.0 * g["d"][()] / g["seconds"][()] / 1e9
        g = f.create_group("accumulate")
        g.attrs["what"] = ("out += x, float32 x into a float64 out (the fused decode's memory traffic "
                           "with no decoding); bytes of x per second")
        g["d"] = np.array([r["d"] for r in copy_rows], dtype=np.int64)
        g["seconds"] = np.array([r["acc_s"] for r in copy_rows])
        g["seconds_min"] = np.array([r["acc_min_s"] for r in copy_rows])
        g["gbps"] = 4.0 * g["d"][()] / g["seconds"][()] / 1e9
        cg = f.create_group("compressors")
        for i, (spec, rows, meta) in enumerate(results):
            h = cg.create_group(f"{i:02d}")
            h.attrs["spec"] = spec
            for k, v in meta.items():
                h.attrs[k] = v
            h.attrs["specs_per_d"] = np.array([r["spec"] for r in rows], dtype=h5py.string_dtype())
            for k in ROW_FIELDS:
                vals = [r.get(k, math.nan) for r in rows]
                dt = np.int64 if k in ("d", "compress_runs", "draws") else np.float64
                h[k] = np.array([math.nan if v is None else v for v in vals], dtype=dt)
    os.replace(partial, path)
    return path


# -- main ----------------------------------------------------------------------------------------

def main(argv) -> int:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    if args.quick:
        for k, v in QUICK.items():
            if "--" + k.replace("_", "-") not in given:
                setattr(args, k, v)
    if not 0 <= args.min_log2 <= args.max_log2 <= 31:
        raise UserError(f"micro: need 0 <= --min-log2 ({args.min_log2}) <= --max-log2 ({args.max_log2}) <= 31")
    if args.repeat < 1 or args.warmup < 0 or args.draws < 1 or args.budget < 0:
        raise UserError("micro: --repeat and --draws must be >= 1, --warmup and --budget >= 0")
    if _mpi_rank() != 0:
        return 0

    import numba

    from . import compressors
    from .compressors.identity import scaled_add
    from .compressors.kernels import reference
    from .provenance import _git

    specs = list(args.compressors or DEFAULT_SPECS)
    sizes = [2**n for n in range(args.min_log2, args.max_log2 + 1)]
    # validate every spec for every d before measuring anything
    for spec in specs:
        for d in sizes:
            compressors.make(expand_spec(spec, d)).validate(d)

    from . import machine
    probe = machine.Probe()                 # the machine's load and CPU around the measurements
    now = datetime.datetime.now(datetime.timezone.utc)
    commit = _git("rev-parse", "HEAD")
    attrs = {
        "schema": "hpcgc-micro", "schema_version": SCHEMA_VERSION, "hpcgc_version": __version__,
        "git_commit": commit or "unknown", "created": now.isoformat(timespec="seconds"),
        "machine": machine_info(), "numba_version": numba.__version__, "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "numba_num_threads": int(numba.config.NUMBA_NUM_THREADS),
        "command_line": " ".join(["python -m hpcgc.bench micro", *argv]),
        "input": "float32 standard normal", "seed": args.seed, "repeat": args.repeat, "warmup": args.warmup,
        "budget_s": args.budget, "min_log2": args.min_log2, "max_log2": args.max_log2,
        "statistic": "median over timed runs",
    }
    target = kernel_target()
    attrs.update({f"kernel_{k}": v for k, v in target.items()})
    print("# hpcgc compressor micro-benchmark")
    print(f"# hpcgc {__version__} (git {attrs['git_commit'][:10]})  numba {numba.__version__}  "
          f"numpy {np.__version__}  python {platform.python_version()}")
    print(f"# {attrs['created']}  {attrs['machine']}  NUMBA_NUM_THREADS={attrs['numba_num_threads']}")
    print(f"# {attrs['command_line']}")
    print(machine.describe(probe.start))
    print(describe_target(target))
    print(f"# input: float32 standard normal (seed {args.seed}); time = median of <= {args.repeat} runs "
          f"after {args.warmup} warm-up run(s), <= {args.budget:g} s per measurement")
    print("# GB/s = input bytes (4 d) per second; Me/s = 1e6 entries per second; copy = np.copyto of the "
          "same array (roofline)")
    print("# dec+= = decompress_add into a float64 accumulator (server's fused decode); dec = decompress "
          "into a new array; np = numpy reference (x np = hpcgc speed-up)")
    print("# acc = out += x (float32 x, float64 out): the fused decode's memory traffic (16 B of out + the "
          "payload per entry, vs 8 B for copy) with no decoding, its roofline")
    print("# model/wire b/e = bits per entry (paper formula / bytes sent incl. header); meas/theory = "
          "omega (unbiased) or delta (biased) measured on x vs omega(d)/delta(d)")
    sys.stdout.flush()

    rng = np.random.default_rng(args.seed)
    xs = {d: rng.standard_normal(d).astype(np.float32) for d in sizes}
    copy_rows = []
    for d in sizes:
        x = xs[d]
        dst = np.empty_like(x)
        t = _timed(lambda dst=dst, x=x: np.copyto(dst, x), max(args.repeat, 5), max(args.warmup, 1),
                   args.budget, 5)
        acc = np.zeros(d)
        ta = _timed(lambda acc=acc, x=x: scaled_add(x, 1.0, acc), max(args.repeat, 5), max(args.warmup, 1),
                    args.budget, 5)
        copy_rows.append({"d": d, "copy_s": float(np.median(t)), "copy_min_s": float(t.min()),
                          "acc_s": float(np.median(ta)), "acc_min_s": float(ta.min())})

    results = []
    t_start = time.perf_counter()
    for spec in specs:
        base = compressors.make(expand_spec(spec, sizes[0]))
        meta = {"name": base.name, "unbiased": bool(base.unbiased)}
        kind = "omega" if base.unbiased else "delta"
        print(f"\n# {spec}  ({'unbiased' if base.unbiased else 'biased'}; meas/theory = {kind})"
              + ("" if args.no_numpy or reference.has_reference(base) else "  [no numpy reference]"))
        print(table_header())
        rows = []
        crng = np.random.default_rng([args.seed, len(results)])
        for d in sizes:
            c = compressors.make(expand_spec(spec, d))
            draws = int(min(args.draws, max(1, 2**20 // d)))
            row = measure(c, xs[d], args, crng, draws)
            row["spec"] = c.spec
            rows.append(row)
            print(table_row(row))
            if not math.isnan(row["kernel_s"]):
                print(f"#   {c.kernel_probe.__doc__.splitlines()[0]} alone: {row['kernel_gbps']:.3f} GB/s of input, "
                      f"{row['kernel_over_copy']:.3f} x copy")
            sys.stdout.flush()
        results.append((spec, rows, meta))
    print(f"\n# total {time.perf_counter() - t_start:.1f} s")
    noise, warnings = probe.finish()
    attrs.update(noise)
    for w in warnings:
        print(w)
    if not args.no_save:
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        path = write_h5(Path(args.out) if args.out else Path("results") / f"micro-{stamp}.h5",
                        attrs, copy_rows, results)
        print(f"# results: {path}")
    return 0
