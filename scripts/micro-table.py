"""One documented table from `micro` result files: compress ÷ paired copy at one d, per compressor,
for rounds grouped under labels (e.g. the host's code and AVX2 code, interleaved), with the load of
each round (docs/performance.md, "Compressor kernels on AVX2").

    python scripts/micro-table.py --d 16777216 --name performance/quantizers-micro \\
        "host code=results/m-host-1.h5,results/m-host-2.h5" "AVX2 code=results/m-avx2-1.h5,results/m-avx2-2.h5"

writes docs/data/<name>.csv (compressor, then per label: the rounds' comp/copy, their median, the
paired copy's GB/s range) and its sidecar .json (provenance: commit, CPU, the kernels' targets, the
load at the start and end of every round, the command); then `python -m hpcgc.docs_tables render`
puts it into the documents that mark it.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def read_round(path: str, d: int) -> dict:
    with h5py.File(path, "r") as f:
        a = dict(f.attrs)
        rows = {}
        for g in f["compressors"].values():
            k = list(g["d"][()]).index(d)
            rows[str(g.attrs["spec"])] = (float(g["comp_over_copy"][k]), float(g["copy_gbps"][k]))
    return {"attrs": a, "rows": rows, "path": path}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int, default=2**24)
    p.add_argument("--name", required=True, help="table name under docs/data/ (no suffix)")
    p.add_argument("--specs", nargs="+", help="the compressors to show (default: the first file's)")
    p.add_argument("groups", nargs="+", metavar="LABEL=FILE[,FILE...]")
    args = p.parse_args(argv)
    groups = []
    for g in args.groups:
        label, _, files = g.partition("=")
        groups.append((label, [read_round(f, args.d) for f in files.split(",")]))
    specs = args.specs or list(groups[0][1][0]["rows"])
    head = ["compressor"]
    for label, rounds in groups:
        head += [f"{label}: comp/copy per round", f"{label}: median", f"{label}: paired copy GB/s"]
    table = [head]
    for spec in specs:
        row = [spec]
        for _, rounds in groups:
            vals = [r["rows"][spec][0] for r in rounds]
            copies = [r["rows"][spec][1] for r in rounds]
            row += [" / ".join(f"{v:.2f}" for v in vals), f"{np.median(vals):.2f}",
                    f"{min(copies):.1f}–{max(copies):.1f}"]
        table.append(row)
    out = ROOT / "docs" / "data" / f"{args.name}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    import csv
    with open(out, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(table)
    every = [r for _, rounds in groups for r in rounds]
    a0 = every[0]["attrs"]
    loads = []
    for label, rounds in groups:
        for r in rounds:
            a = r["attrs"]
            loads.append(f"{label} {a.get('created', '?')}: {a.get('machine_start_load1', float('nan')):.1f} → "
                         f"{a.get('machine_end_load1', float('nan')):.1f}")
    targets = sorted({f"{r['attrs']['kernel_cpu']} {r['attrs']['kernel_isa']}" if "kernel_cpu" in r["attrs"]
                      else "the host (a file from before micro recorded its target)" for r in every})
    commits = sorted({str(r["attrs"].get("git_commit", "?"))[:10] for r in every})
    meta = {
        "source": "results", "commit": ", ".join(commits),
        "date": f"{min(str(r['attrs'].get('created')) for r in every)} – {max(str(r['attrs'].get('created')) for r in every)}",
        "cpu": f"{a0.get('machine', '?')}; kernels compiled for {', '.join(targets)}",
        "cores": int(a0.get("machine_start_cores", 0)) or "?", "ranks": 1, "mpi": "none (serial)",
        "load": "load average (1 min) at the start → end of each round: " + "; ".join(loads),
        "command": ("python -m hpcgc.bench micro -c <specs> --min-log2 24 --max-log2 24 --no-numpy --draws 1 "
                    "--repeat 7 (AVX2 code: after `source scripts/avx2-env.sh`), rounds interleaved; then "
                    f"python scripts/micro-table.py --d {args.d} --name {args.name} "
                    + ("--specs " + " ".join(args.specs) + " -- " if args.specs else "")
                    + " ".join(shlex.quote(g) for g in args.groups)),
        "note": "comp/copy = median over the runs of (paired copy time / compress time); under load the "
                "paired copy itself varies, see the copy column",
    }
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
