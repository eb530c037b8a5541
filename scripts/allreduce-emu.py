"""Issue 31 target 2: the uncompressed Allreduce run's iteration against a bare Allreduce of the same buffer.

Two subcommands, driven by ``bash scripts/measure-performance.sh allreduce-emu`` (which brings up an
emulated 4-node 1 Gb/s cluster of its own, interleaves R rounds of both measurements on the same
links and calls ``report`` at the end; docs/performance.md, "The uncompressed Allreduce against a
bare Allreduce"):

    mpiexec -n 4 python scripts/allreduce-emu.py bare --out DIR/r1-bare.json [--calls 100] [--warmup 10]
    python scripts/allreduce-emu.py report DIR [--csv docs/data/performance/allreduce-emu.csv] [--note TEXT]

``bare``: the run's own Allreduce (:meth:`hpcgc.transport.Transport.allreduce`, the very MPI call of
a run: SUM of d = 2^20 float32 — 4 MiB —, and of d = 2^20 float16 words summed as ``MPI_FLOAT16_T``
— 2 MiB, ``identity:fp16``'s wire), ``--warmup`` untimed calls, then ``--calls`` calls, each after
a barrier (as a run with ``run.wait_phases`` issues its Allreduce: ``wait_up`` then ``comm_up``)
and timed alone (``time.perf_counter``); rank 0's median, min and max per call, the median of
barrier + call (``cycle_ms``: the run's ``wait_up`` + ``comm_up`` with nothing else), and the
back-to-back period (the calls without barriers, mean per call), into a JSON file (rank 0 writes it).
This script calls no MPI itself (the transport does).

``report``: reads the rounds of DIR — ``r<R>-bare.json`` and the run files ``r<R>-fp32.h5``,
``r<R>-fp16.h5`` (``python -m hpcgc.bench --config jobs/experiments/does-it-pay.toml --grid-index
0`` / ``5`` with a fixed number of iterations) — and prints per round and wire rank 0's median
iteration (the ``iter`` phase of ``per_iteration/``, the first iteration left out), the bare median,
their ratio and the run's phase medians; then the medians over rounds with [min, max], and the
verdict against the target's 1.25×. ``--csv`` writes that summary as a documented table
(docs/data/README.md: the CSV and its provenance sidecar; ``python -m hpcgc.docs_tables render``
puts it into docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 1.25
"""Issue 31 target 2: the run's median iteration within this factor of the bare Allreduce."""
WIRES = {"fp32": ("float32", np.float32, 0), "fp16": ("float16", np.uint16, 5)}
"""wire label → (the transport's wire type, buffer dtype, does-it-pay.toml grid point)."""
PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "other")
"""The run's phases the report shows (rank 0's medians over iterations, ms)."""
ROUND_FILE = re.compile(r"^r(\d+)-bare\.json$")


# -- bare: the run's Allreduce alone ----------------------------------------------------------------
VALUES = ("ones", "gradient")
"""What the bare buffers hold: ``ones`` (1.0, as ``bench collectives``), ``gradient`` (the run's own
message: the gradient of this rank's shard at x — x⁰ = 0, the first message, or with ``--x-from`` the
final iterate of a results file —, from the experiment file's grid point 0; at x⁰ 97.6 % of it is
zero and most of the rest float16 subnormals, and MPICH's float16 SUM is value-dependent)."""


def gradient_values(t, config_path: str, x_from: str | None) -> np.ndarray:
    """This rank's message of the run (float64) at x⁰ = 0 or at ``x_from``'s final iterate, built by
    the run's own set-up (:class:`hpcgc.run.setup.DataCache`: shard, objective)."""
    from hpcgc import config
    from hpcgc.run.setup import DataCache, plan
    rc = plan(config.load_file(config_path))[0].cfg
    s = DataCache(t).setup(rc)
    x = np.zeros(s.d)
    if x_from:
        from hpcgc.results import load
        xf = load(x_from)[0].x_final
        if xf is None or xf.size != s.d:
            raise SystemExit(f"allreduce-emu: error: {x_from} has no final iterate of d = {s.d}")
        x = np.asarray(xf, dtype=np.float64)
    return s.local.grad(x)


def bare(args) -> int:
    from hpcgc.transport import Transport
    t = Transport()
    out = {"ranks": t.size, "d": args.d, "calls": args.calls, "warmup": args.warmup, "x_from": args.x_from or "x0",
           "wires": {}}
    grad = None
    if "gradient" in args.values:
        grad = gradient_values(t, args.config, args.x_from)
        if grad.size != args.d:
            raise SystemExit(f"allreduce-emu: error: the run's gradient has d = {grad.size}, not --d {args.d}")
        h = np.abs(grad.astype(np.float16))
        out["message"] = {"nonzero": float(np.mean(h > 0)), "fp16_subnormal": float(np.mean((h > 0) & (h < 2.0 ** -14))),
                          "fp16_nonzero_subnormal": float(np.sum((h > 0) & (h < 2.0 ** -14)) / max(np.count_nonzero(h), 1))}
        if t.is_root:
            m = out["message"]
            print(f"rank 0's message in float16: {100 * m['nonzero']:.2f} % non-zero, {100 * m['fp16_nonzero_subnormal']:.0f} % "
                  "of those subnormal (< 2^-14)", flush=True)
    for label in args.wires:
        wire, dtype, _ = WIRES[label]
        for values in args.values:
            if values == "ones":
                send = np.ones(args.d, dtype=dtype)
                if dtype is np.uint16:
                    send[:] = 0x3C00                      # 1.0 in float16
            else:
                send = grad.astype(np.float16).view(np.uint16) if dtype is np.uint16 else grad.astype(dtype)
            send = np.ascontiguousarray(send)
            recv = np.zeros(args.d, dtype=dtype)
            for _ in range(args.warmup):
                t.allreduce(send, recv, "sum", wire)
            per_call, cycle = np.empty(args.calls), np.empty(args.calls)
            for i in range(args.calls):
                t0 = time.perf_counter()
                t.barrier()
                t1 = time.perf_counter()
                t.allreduce(send, recv, "sum", wire)
                t2 = time.perf_counter()
                per_call[i], cycle[i] = t2 - t1, t2 - t0
            t.barrier()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                t.allreduce(send, recv, "sum", wire)
            period = (time.perf_counter() - t0) / args.calls
            t.reset_ledger()
            ms = 1e3 * per_call
            w = {"wire": wire, "values": values, "bytes": int(send.nbytes), "median_ms": float(np.median(ms)),
                 "min_ms": float(ms.min()), "max_ms": float(ms.max()), "p90_ms": float(np.percentile(ms, 90)),
                 "period_ms": 1e3 * period, "cycle_ms": 1e3 * float(np.median(cycle))}
            out["wires"][f"{label}-{values}"] = w
            if t.is_root:
                print(f"bare {label} ({values}): {w['bytes']} B per rank, median {w['median_ms']:.2f} ms per call "
                      f"[{w['min_ms']:.2f}, {w['max_ms']:.2f}], with the barrier before it {w['cycle_ms']:.2f} ms, "
                      f"back to back {w['period_ms']:.2f} ms", flush=True)
    if t.is_root:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


# -- report: rounds → medians ------------------------------------------------------------------------
def run_phases(path: Path, skip: int = 1) -> dict:
    """Rank 0's median ms per phase over the run's iterations (``per_iteration/``), the first
    ``skip`` left out; ``iterations``: how many were used."""
    from hpcgc.results import load
    runs = load(path)
    if len(runs) != 1:
        raise SystemExit(f"allreduce-emu: error: {path} holds {len(runs)} runs, expected 1 (one grid point)")
    pi = runs[0].per_iteration
    if "iter" not in pi or len(pi["iter"]) <= skip:
        raise SystemExit(f"allreduce-emu: error: {path} has no per-iteration times beyond the first {skip} "
                         "(run.per_iteration_times = false, or too few iterations)")
    out = {ph: 1e3 * float(np.median(np.asarray(pi[ph][skip:, 0], dtype=float))) for ph in ("iter", *PHASES)
           if ph in pi}
    out["iterations"] = int(len(pi["iter"]) - skip)
    return out


def rounds(directory: Path) -> list[int]:
    found = sorted(int(m.group(1)) for f in directory.iterdir() if (m := ROUND_FILE.match(f.name)))
    if not found:
        raise SystemExit(f"allreduce-emu: error: no r<R>-bare.json in {directory}")
    return found


def spread(values) -> tuple[float, float, float]:
    """(median, min, max) of the rounds' values."""
    v = list(values)
    return statistics.median(v), min(v), max(v)


def collect(directory: Path) -> dict:
    """{wire: [one dict per round: the run's phases, bare medians per buffer content, ratios]} from
    DIR's rounds. ``bare_ms``/``ratio``: against the bare Allreduce of the run's own values (the
    gradient), else of ones; ``bare_ones_ms``/``ratio_ones``: against ones."""
    table: dict = {w: [] for w in WIRES}
    for r in rounds(directory):
        b = json.loads((directory / f"r{r}-bare.json").read_text())["wires"]
        ranks = json.loads((directory / f"r{r}-bare.json").read_text())["ranks"]
        for w in WIRES:
            h5 = directory / f"r{r}-{w}.h5"
            same = b.get(f"{w}-gradient") or b.get(f"{w}-ones")
            if same is None or not h5.exists():
                continue
            ph = run_phases(h5)
            ones = b.get(f"{w}-ones", {}).get("median_ms", float("nan"))
            table[w].append({"round": r, "ranks": ranks, "bare_ms": same["median_ms"], "values": same["values"],
                             "period_ms": same["period_ms"], "cycle_ms": same.get("cycle_ms", float("nan")),
                             "bare_ones_ms": ones, "ratio": ph["iter"] / same["median_ms"],
                             "ratio_ones": ph["iter"] / ones, **ph})
    return {w: rows for w, rows in table.items() if rows}


def fmt(m: tuple[float, float, float], digits: int = 1) -> str:
    return f"{m[0]:.{digits}f} [{m[1]:.{digits}f}, {m[2]:.{digits}f}]"


def summary(table: dict) -> list[list[str]]:
    """The documented table: one row per wire, medians over rounds [min, max]."""
    head = ["run (grid point)", "rounds", "iteration (ms)", "bare, run's values (ms)", "ratio", "target 1.25x",
            "bare, ones (ms)", "ratio to ones", "bare barrier + call (ms)", "ratio to barrier + call", *(f"{p} (ms)" for p in PHASES)]
    out = [head]
    for w, rows in table.items():
        ratio = spread(r["ratio"] for r in rows)
        out.append([f"{w} Allreduce ({WIRES[w][2]})", str(len(rows)), fmt(spread(r["iter"] for r in rows)),
                    fmt(spread(r["bare_ms"] for r in rows)), fmt(ratio, 2), "met" if ratio[0] <= TARGET else "not met",
                    fmt(spread(r["bare_ones_ms"] for r in rows)), fmt(spread(r["ratio_ones"] for r in rows), 2),
                    fmt(spread(r["cycle_ms"] for r in rows)), fmt(spread(r["iter"] / r["cycle_ms"] for r in rows), 2),
                    *(fmt(spread(r.get(p, float("nan")) for r in rows)) for p in PHASES)])
    return out


def report(args) -> int:
    directory = Path(args.dir)
    table = collect(directory)
    if not table:
        raise SystemExit(f"allreduce-emu: error: no round in {directory} has both a bare JSON and a run file")
    print(f"{'wire':<5} {'round':>5} {'iter(ms)':>9} {'bare(ms)':>9} {'b2b(ms)':>8} {'cycle(ms)':>9} {'ratio':>6} {'ones(ms)':>9} "
          f"{'ratio1':>6} " + " ".join(f"{p + '(ms)':>13}" for p in PHASES))
    for w, rows in table.items():
        for r in rows:
            print(f"{w:<5} {r['round']:>5} {r['iter']:>9.2f} {r['bare_ms']:>9.2f} {r['period_ms']:>8.2f} "
                  f"{r['cycle_ms']:>9.2f} {r['ratio']:>6.3f} {r['bare_ones_ms']:>9.2f} {r['ratio_ones']:>6.3f} "
                  + " ".join(f"{r.get(p, float('nan')):>13.2f}" for p in PHASES))
    print("# iter: rank 0's median iteration (first left out); bare: rank 0's median per Allreduce call (barrier "
          "before each) of the run's own values (its message at the final iterate), b2b: those calls back to back (mean); "
          "cycle: barrier + call (median: the run's wait_up + comm_up with nothing else); ones: "
          "the same call on buffers of 1.0; ratio = iter / bare, ratio1 = iter / ones")
    print("# medians over rounds [min, max]:")
    rows = summary(table)
    for row in rows[1:]:
        print("  " + "; ".join(f"{h}: {c}" for h, c in zip(rows[0], row)))
    if args.csv:
        write_csv(rows, Path(args.csv), table, args)
    return 0


def write_csv(rows, out: Path, table: dict, args) -> None:
    """The documented table (docs/data/README.md) and its provenance sidecar."""
    import csv
    import datetime
    import os
    import subprocess

    from hpcgc.machine import snapshot
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    snap = snapshot()
    from hpcgc.results import load
    first = next(iter(table.values()))[0]
    attrs = load(Path(args.dir) / f"r{first['round']}-{next(iter(table))}.h5").attrs
    meta = {"source": "script", "commit": commit, "cpu": snap.get("cpu_model", "unknown"), "cores": os.cpu_count(),
            "ranks": first["ranks"], "mpi": " ".join(str(attrs.get("mpi_library_version", "unknown")).split()[:3]),
            "load": args.note or "not recorded",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "bash scripts/measure-performance.sh allreduce-emu (ROUNDS, ITERS, CALLS as in the note); "
                       f"python scripts/allreduce-emu.py report DIR --csv {out}",
            "note": "emulated 4-node 1 Gb/s cluster (scripts/emulated-cluster.sh, one rank per node); per wire: "
                    "rank 0's median iteration of does-it-pay.toml's grid point (first iteration left out) and "
                    "rank 0's median bare Allreduce per call of the same buffer on the same links (the run's message at "
                    "the fp16 run's final iterate, and buffers of 1.0), interleaved rounds; medians over rounds [min, max]"
                    + (f"; {args.note}" if args.note else "")}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {out} and its sidecar; render: python -m hpcgc.docs_tables render")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/allreduce-emu.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bare", help="time the run's Allreduce alone (under mpiexec)")
    b.add_argument("--out", required=True, help="JSON file (rank 0 writes it)")
    b.add_argument("--calls", type=_positive, default=100, help="timed calls per wire (default 100)")
    b.add_argument("--warmup", type=_nonneg, default=10, help="untimed calls first (default 10)")
    b.add_argument("--d", type=_positive, default=1 << 20, help="elements per buffer (default 2^20, the run's d)")
    b.add_argument("--wires", nargs="+", choices=list(WIRES), default=list(WIRES))
    b.add_argument("--values", nargs="+", choices=VALUES, default=list(VALUES),
                   help="what the buffers hold (default both): 1.0, or the run's message (its gradient at x)")
    b.add_argument("--config", default="jobs/experiments/does-it-pay.toml",
                   help="experiment file whose grid point 0 gives the gradient (default does-it-pay.toml)")
    b.add_argument("--x-from", metavar="H5", help="the gradient at this results file's final iterate (default x0 = 0)")
    r = sub.add_parser("report", help="medians over the rounds of a directory")
    r.add_argument("dir")
    r.add_argument("--csv", help="write the documented table here (and its .json sidecar)")
    r.add_argument("--note", default="", help="stored in the sidecar (e.g. the load average)")
    return p


def _positive(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not > 0")
    return v


def _nonneg(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not >= 0")
    return v


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    return bare(args) if args.command == "bare" else report(args)


if __name__ == "__main__":
    sys.exit(main())
