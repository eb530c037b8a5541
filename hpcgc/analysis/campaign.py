"""Every break-even report of a campaign directory in one CSV each: ``breakeven-all.csv`` and
``check-all.csv`` (``jobs/does-it-pay.sh``, ``jobs/scale-check.sh``).

A campaign writes one ``hpcgc breakeven`` report per setting, experiment and target into its own
directory ``DIR/<report>/`` (``breakeven.csv``, ``check.csv``) with a ``what.txt`` naming it: either
``key=value`` lines (``jobs/scale-check.sh``: setting, n, experiment, target, rate, cluster_nodes,
cluster_ranks_per_node) or, as ``jobs/does-it-pay.sh`` writes it, the four values setting, n,
experiment and target, one a line. :func:`combine` prefixes every report's rows with those columns
(a report column of the same name wins) and writes ``DIR/breakeven-all.csv`` and ``DIR/check-all.csv``
— what :mod:`hpcgc.analysis.verdict` and :mod:`hpcgc.analysis.scale_check` read.

    python -m hpcgc.analysis.campaign DIR
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

LEGACY = ("setting", "n", "experiment", "target")


def what(path: Path) -> dict:
    """The tags of one report from its ``what.txt`` (``key=value`` lines, or the four legacy values)."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    if lines and all("=" in ln for ln in lines):
        return dict(ln.split("=", 1) for ln in lines)
    return dict(zip(LEGACY, lines))


def combine(out) -> dict:
    """Write ``breakeven-all.csv`` and ``check-all.csv`` in ``out`` from its reports → {name: rows}."""
    out = Path(out)
    written = {}
    for name in ("breakeven", "check"):
        rows, cols = [], []
        for f in sorted(out.glob(f"*/{name}.csv")):
            tag = f.parent / "what.txt"
            if not tag.exists():
                continue
            tags = what(tag)
            cols += [c for c in tags if c not in cols]
            with open(f, newline="") as fh:
                for r in csv.DictReader(fh):
                    cols += [c for c in r if c not in cols]
                    rows.append({**tags, **r})
        if rows:
            with open(out / f"{name}-all.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, cols)
                w.writeheader()
                w.writerows(rows)
            written[name] = len(rows)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if not Path(argv[0]).is_dir():
        print(f"hpcgc.analysis.campaign: error: {argv[0]} is not a directory", file=sys.stderr)
        return 2
    for name, n in combine(argv[0]).items():
        print(f"campaign: {n} rows in {Path(argv[0]) / f'{name}-all.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
