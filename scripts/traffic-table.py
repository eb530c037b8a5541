#!/usr/bin/env python3
"""The memory-traffic table of issue 31 target 1 from logs of ``bash scripts/measure-performance.sh
traffic`` (``hpcgc floor``'s "memory-traffic floor" rows), several rounds and checkouts:

    python scripts/traffic-table.py LABEL=LOG [LABEL=LOG ...] [--csv OUT.csv]

e.g. ``before=traffic-before-r1.log before=traffic-before-r2.log after=traffic-after-r1.log ...``.
Per (label, run, phase): rank 0's median phase time and its ratio to the run's own floor, each over
the rounds given — the median and its interval (:mod:`hpcgc.analysis.spread`: [min, max] below six
rounds) — and the copy bandwidth the floors were taken at; then the ratios to the line floor (the
same items counted in 64-byte lines where the access is scattered: ``lratio``, docs/performance.md;
``-`` for logs from before the floor printed it).
A ratio is always against the floor of the same run (its copy bandwidth), so rounds measured at a
different bandwidth are compared by their ratios, and the time columns show what moved.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcgc.analysis.spread import format_spread, spread

ROW = re.compile(r"^(\d{3})\s+(\S+)\s+(\S+)\s+(\S+)\s+(grad|compress|server|copy)\s+(.*)$")


def parse(path: str) -> dict:
    """{(run, algorithm, compressor, collective): {phase: (median ms, ratio, line ratio) or copy GB/s}}
    (line ratio NaN in a log without the line columns)."""
    out: dict = defaultdict(dict)
    for line in open(path):
        m = ROW.match(line.strip())
        if not m:
            continue
        key, phase, rest = m.group(1, 2, 3, 4), m.group(5), m.group(6).split()
        if phase == "copy":
            out[key]["copy"] = float(rest[-1])
        elif len(rest) in (4, 7):                  # MB floor median ratio [lineMB lfloor lratio]
            out[key][phase] = (float(rest[2]), float(rest[3]), float(rest[6]) if len(rest) == 7 else float("nan"))
    return out


def cell(values) -> str:
    return format_spread(spread(values), ".3g")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", metavar="LABEL=LOG")
    ap.add_argument("--csv")
    a = ap.parse_args()
    data: dict = defaultdict(lambda: defaultdict(list))        # (label, run) -> phase -> [values]
    labels = []
    for item in a.logs:
        label, _, path = item.partition("=")
        if not path:
            print(f"traffic-table: {item!r}: give LABEL=LOG", file=sys.stderr)
            return 2
        labels += [label] if label not in labels else []
        for key, phases in parse(path).items():
            for ph, v in phases.items():
                data[(label, key)][ph].append(v)
    header = ["run", "checkout", "rounds", "copy GB/s", *(f"{p} ms" for p in ("grad", "compress", "server")),
              *(f"{p} / floor" for p in ("grad", "compress", "server")),
              *(f"{p} / line floor" for p in ("grad", "compress", "server"))]
    rows = []
    for key in sorted({k for _, k in data}):
        for label in labels:
            d = data.get((label, key))
            if not d:
                continue
            run = f"{key[0]} {key[1]} {key[2]} {key[3]}"
            rows.append([run, label, str(len(d["copy"])), cell(d["copy"]),
                         *(cell([t for t, _, _ in d[p]]) for p in ("grad", "compress", "server")),
                         *(cell([r for _, r, _ in d[p]]) for p in ("grad", "compress", "server")),
                         *(cell([lr for _, _, lr in d[p]]) for p in ("grad", "compress", "server"))])
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
