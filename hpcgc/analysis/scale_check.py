"""The model checked at scale (issue 30 part 4, ``docs/scale-check.md``): measured against predicted
time to target, per setting, from a ``jobs/scale-check.sh`` campaign directory (its
``check-all.csv``, :mod:`hpcgc.analysis.campaign`: one row per run, report and target, written by
``hpcgc breakeven``'s model-vs-measured check, :func:`hpcgc.analysis.breakeven.check.check`).

One row per (setting, nodes, ranks per node, rate, topology, method, target): the iterations to the
target, the measured time to it — median [min, max] over the method's runs (``run.repeats``) —, the
predicted time (median over the runs: each run is predicted from its own iterations and rank 0's
measured non-transfer time, the collectives at the α, β that ``bench collectives`` measured on the
same cluster; a hierarchical run at the two levels), and measured / predicted (median [min, max] over
the runs). A run that missed the target is compared over all its iterations and marked
``not reached``; every ratio is shown, also where it misses (``OFF`` beyond ±25 %).

    python -m hpcgc.analysis.scale_check results/scale-check       # the table, Markdown
    python -m hpcgc.docs_tables regenerate --table scale-check/check --from results/scale-check
"""
from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from .verdict import markdown

COLUMNS = ("setting", "nodes", "ranks per node", "rate", "topology", "experiment", "target", "method",
           "collective", "iterations", "measured (s)", "predicted (s)", "measured / predicted", "mark",
           "ratio, one fit over all sizes", "ratio, measured collectives")
"""The last two: ``check.csv``'s ``ratio_global_fit`` (each collective priced by one α–β fit over every
size of the sweep, instead of the fit over the sizes within a factor 4 of the message) and
``ratio_measured_collectives`` (each collective at the sweep's measured time for its size, no fit):
where the main ratio misses, they say whether the fit or the model is what misses."""
TOLERANCE = 0.25      # as hpcgc.analysis.breakeven.check.CHECK_TOLERANCE


def _read(campaign: Path) -> list[dict]:
    path = Path(campaign) / "check-all.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run jobs/scale-check.sh (it writes check-all.csv in its "
                                "--out directory)")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _spread(values: list[float], digits: str = ".3g") -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:{digits}}"
    return f"{med:{digits}} [{min(values):{digits}}, {max(values):{digits}}]"


def _other(runs: list[dict], column: str) -> str:
    vals = [float(r[column]) for r in runs if r.get(column) not in (None, "")]
    vals = [v for v in vals if v == v]
    return _spread(vals, ".2f") if vals else "–"


def _order(r: dict) -> tuple:
    return (r.get("experiment", ""), int(r.get("cluster_nodes") or 0) * int(r.get("cluster_ranks_per_node") or 1),
            r.get("rate", ""), r.get("setting", ""), r.get("target", ""))


def rows(campaign) -> list[list[str]]:
    """The table (header first) of a ``jobs/scale-check.sh`` campaign directory."""
    groups: dict = {}
    for r in _read(campaign):
        key = (r.get("setting", ""), r.get("cluster_nodes", ""), r.get("cluster_ranks_per_node", ""),
               r.get("rate", ""), r.get("topology", "flat"), r.get("experiment", ""), r.get("target", ""))
        groups.setdefault(key, {}).setdefault((r["method"], r["collective"]), []).append(r)
    table = [list(COLUMNS)]
    for key in sorted(groups, key=lambda k: (k[5], int(k[1] or 0) * int(k[2] or 1), k[3], k[0], k[6])):
        for (method, collective), runs in groups[key].items():
            meas = [float(r["measured_s"]) for r in runs]
            pred = [float(r["predicted_s"]) for r in runs]
            ratio = [float(r["ratio"]) for r in runs]
            its = sorted({int(float(r["iterations"])) for r in runs})
            missed = any(r["up_to"] != "target" for r in runs)
            off = [x for x in ratio if x == x and abs(x - 1) > TOLERANCE]
            mark = "not reached" if missed else ""
            if off:
                mark = (mark + "; " if mark else "") + f"OFF ({len(off)}/{len(ratio)} runs beyond ±{TOLERANCE:.0%})"
            table.append([*key[:5], key[5], key[6], method, collective,
                          "/".join(map(str, its)) + (" (not reached)" if missed else ""),
                          _spread(meas), f"{statistics.median(pred):.3g}", _spread(ratio, ".2f"), mark or "ok",
                          _other(runs, "ratio_global_fit"), _other(runs, "ratio_measured_collectives")])
    return table


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        print(markdown(rows(Path(argv[0]))))
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"hpcgc.analysis.scale_check: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
