"""DAGC comparison table: rounds and bits to a target test accuracy, final accuracy.

    python -m analysis.dagc_table results/dagc-comparison-*.h5 [--target 0.9] [-o table.md]

Groups runs by (partition, method label) — the label of the experiment file's [[variant]] — and
reports, over seeds: the median number of rounds and of uplink model bits (all workers, cumulative)
until test accuracy first reaches the target (n/a if a seed never does; the count says how many
did), the final accuracy (mean ± std), and the ratio of bits to the uniform top-k of the same
budget and skew.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from hpcgc import results


def first_reach(run, target):
    acc = run.series["accuracy"]
    hit = np.flatnonzero(acc >= target)
    if hit.size == 0:
        return None, None
    t = hit[0]
    return int(run.series["iteration"][t]), float(run.series["bits_up_model"][t].sum())


def collect(paths, target):
    groups = defaultdict(list)
    for p in paths:
        for run in results.load(p):
            key = (run.config["data"]["partition"], run.attrs.get("label") or run.attrs["compressor"])
            rounds, bits = first_reach(run, target)
            groups[key].append((rounds, bits, float(run.series["accuracy"][-1])))
    return groups


def table(groups, target) -> str:
    lines = [f"| partition | method | reached {target:.0%} | rounds (median) | Mbit up (median) | "
             "bits vs uniform top-k | final accuracy |", "|---|---|---|---|---|---|---|"]
    med_bits = {}
    for (part, label), rows in groups.items():
        bits = [b for _, b, _ in rows if b is not None]
        med_bits[(part, label)] = np.median(bits) if len(bits) == len(rows) else None
    for (part, label), rows in sorted(groups.items()):
        rounds = [r for r, _, _ in rows if r is not None]
        bits = med_bits[(part, label)]
        budget = label.rsplit("-", 1)[-1]
        base = med_bits.get((part, f"uniform-topk-{budget}"))
        ratio = f"{bits / base:.2f}" if bits is not None and base else "n/a"
        acc = np.array([a for _, _, a in rows])
        lines.append(f"| {part} | {label} | {len(rounds)}/{len(rows)} | "
                     f"{np.median(rounds):.0f} | " if rounds else f"| {part} | {label} | 0/{len(rows)} | n/a | ")
        lines[-1] += (f"{bits / 1e6:.3f} | " if bits is not None else "n/a | ") + \
            f"{ratio} | {acc.mean():.4f} ± {acc.std():.4f} |"
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.dagc_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--target", type=float, default=0.9, help="test accuracy target (default 0.9)")
    ap.add_argument("-o", "--out", type=Path, help="write the Markdown table here too")
    args = ap.parse_args(argv)
    text = table(collect(args.files, args.target), args.target)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
