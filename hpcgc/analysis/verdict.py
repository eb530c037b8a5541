"""The does-it-pay verdict: measured time to target of every method against the baseline a user
would run, with the spread over repeats — built from a campaign directory of ``jobs/does-it-pay.sh``
(its ``check-all.csv``: one row per run and report, rank 0's measured time to the target; its
``breakeven-all.csv``: which Allreduce each report chose as the baseline).

Per setting × rank count × experiment × target × method: the iterations to the target, the median
measured time to the target and its 95 % interval over the method's runs (``run.repeats``;
:mod:`hpcgc.analysis.spread`: order statistics of the median, [min, max] below 6 runs), the ratio of
medians to the chosen baseline (fp16 / bf16 / fp32, the fastest that reaches the target) and to the
float32 Allreduce, and the verdict: **faster** / **slower** when the method's interval and the
baseline's do not overlap, **not measurably different** when they do. A method whose runs missed the
target shows ``not reached``.

    python -m hpcgc.analysis.verdict results/dip                    # the tables, Markdown
    python -m hpcgc.docs_tables regenerate --table does-it-pay/verdict --from results/dip
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

from .spread import separated, spread

COLUMNS = ("experiment", "setting", "n", "target", "method", "collective", "iterations", "time_to_target_s",
           "vs_baseline", "vs_fp32", "verdict")
_TAG = re.compile(r"\s*\[(?:baseline: (?P<base>[a-z0-9]+)[^\]]*|(?P<wide>fp32) baseline: second line)\]")


def _read(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run jobs/does-it-pay.sh (it writes check-all.csv and "
                                "breakeven-all.csv in its --out directory)")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _key(r: dict) -> tuple:
    return (r["setting"], int(r["n"]), r["experiment"], r["target"])


def baselines(rows: list[dict]) -> dict:
    """{report key: (baseline label, precision, fp32 label or None)} from breakeven-all.csv's tags."""
    out: dict = {}
    for r in rows:
        m = _TAG.search(r["method"])
        if not m:
            continue
        label = _TAG.sub("", r["method"]).strip()
        base, wide, prec = out.get(_key(r), (None, None, ""))
        if m.group("base"):
            base, prec = label, m.group("base") + (" (modelled)" if "modelled" in r["method"] else "")
        else:
            wide = label
        out[_key(r)] = (base, wide, prec)
    return {k: (b, w if w is not None or not p.startswith("fp32") else b, p) for k, (b, w, p) in out.items()}


def _fmt(s) -> str:
    if s is None:
        return "not reached"
    return f"{s.median:.3g} [{s.lo:.3g}, {s.hi:.3g}]" if s.n > 1 else f"{s.median:.3g}"


def _time(runs: list[dict]):
    """The spread of the runs' measured time to the target; None when a run missed it (or no runs)."""
    if not runs or any(r["up_to"] != "target" for r in runs):
        return None
    return spread([float(r["measured_s"]) for r in runs])


def _ratio(t, ref) -> str:
    return f"{t.median / ref.median:.2f}" if t is not None and ref is not None and ref.median > 0 else ""


def _verdict(t, t_base) -> str:
    if t is None:
        return "not reached"
    if t_base is None:
        return "no measured baseline"
    if t.n < 2 or t_base.n < 2:
        return "one run: no interval"
    if not separated(t, t_base):
        return "not measurably different"
    return "faster" if t.hi < t_base.lo else "slower"


def rows(campaign: Path, n: int | None = None) -> list[list[str]]:
    """The verdict table (header first) of a campaign directory (only rank count ``n`` if given)."""
    campaign = Path(campaign)
    checks = [r for r in _read(campaign / "check-all.csv") if n is None or int(r["n"]) == n]
    bases = baselines(_read(campaign / "breakeven-all.csv"))
    groups: dict = {}
    for r in checks:
        groups.setdefault(_key(r), {}).setdefault(r["method"], []).append(r)
    table = [list(COLUMNS)]
    for key in sorted(groups, key=lambda k: (k[2], k[0] != "shm", k[0], k[1], k[3])):
        methods = groups[key]
        base, wide, prec = bases.get(key, (None, None, ""))
        t_base = _time(methods.get(base, [])) if base else None
        t_wide = _time(methods.get(wide, [])) if wide else None
        for label, runs in methods.items():
            t = _time(runs)
            its = sorted({int(float(r["iterations"])) for r in runs})
            verdict = f"baseline ({prec})" if label == base else _verdict(t, t_base)
            table.append([key[2], key[0], str(key[1]), key[3], label, runs[0]["collective"],
                          "/".join(map(str, its)) if t is not None else f"> {its[-1]}",
                          _fmt(t), _ratio(t, t_base), _ratio(t, t_wide), verdict])
    return table


BREAKEVEN_COLUMNS = ("experiment", "setting", "n", "target", "method", "collective", "baseline", "break-even at the runs' n",
                     "at n = 128", "at n = 1024", "at the runs' n, against fp32")


def breakeven_rows(campaign: Path, n: int | None = None) -> list[list[str]]:
    """The campaign's break-even table (header first): per report and method (baselines left out), the
    modelled break-even bandwidth against the chosen baseline at the runs' n, 128 and 1024 (the
    compressed collectives projected with their cost models, ``docs/cost-models.md``) and against the
    float32 Allreduce at the runs' n — from ``breakeven-all.csv``."""
    table = [list(BREAKEVEN_COLUMNS)]
    got = [r for r in _read(Path(campaign) / "breakeven-all.csv") if n is None or int(r["n"]) == n]
    for r in sorted(got, key=lambda r: (r["experiment"], r["setting"] != "shm", r["setting"], int(r["n"]),
                                         r["target"])):
        if _TAG.search(r["method"]) or "modelled from" in r["method"]:
            continue
        table.append([r["experiment"], r["setting"], r["n"], r["target"], r["method"], r["collective"], r["baseline"],
                      r["break_even_run_n"], r["break_even_n128"], r["break_even_n1024"],
                      r["break_even_run_n_fp32"]])
    return table


PHASE_ORDER = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter")


def phases_rows(campaign: Path, setting: str = "emu-1gbit", n: int = 4,
                experiment: str = "does-it-pay") -> list[list[str]]:
    """Per-iteration phase times (ms) of every method of one results file of the campaign
    (``DIR/<setting>-n<n>-<experiment>.h5``): rank 0's median over iterations (the first left out:
    connections and caches), then the median over the method's repeats and their [min, max]."""
    import numpy as np

    from .. import results
    path = Path(campaign) / f"{setting}-n{n}-{experiment}.h5"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run jobs/does-it-pay.sh with that setting")
    per: dict = {}
    for r in results.load(path):
        if not r.per_iteration:
            raise ValueError(f"{path}: run {r.run_id} has no per-iteration times (run.per_iteration_times)")
        label = r.attrs.get("label") or r.run_id
        row = {ph: 1e3 * float(np.median(np.asarray(r.per_iteration[ph])[1:, 0])) for ph in PHASE_ORDER
               if ph in r.per_iteration}
        per.setdefault(label, (r.attrs.get("collective", ""), []))[1].append(row)
    table = [["method", "collective", *PHASE_ORDER]]
    for label, (coll, reps) in per.items():
        cells = []
        for ph in PHASE_ORDER:
            v = spread([rep.get(ph, float("nan")) for rep in reps])
            cells.append(f"{v.median:.3g}" if v.n < 2 else f"{v.median:.3g} [{v.lo:.3g}, {v.hi:.3g}]")
        table.append([label, coll, *cells])
    return table


def markdown(table: list[list[str]]) -> str:
    head, *body = table
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        print(markdown(rows(Path(argv[0]))))
        print()
        print(markdown(breakeven_rows(Path(argv[0]))))
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"verdict: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["BREAKEVEN_COLUMNS", "COLUMNS", "baselines", "breakeven_rows", "markdown", "rows"]
