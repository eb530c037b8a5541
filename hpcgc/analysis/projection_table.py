"""The rows of ``projection.csv`` / ``projection.md`` (``hpcgc report``, ``hpcgc project``): each
method's measured iteration and time-to-ε next to the same run projected onto other networks
(the α–β model of :mod:`hpcgc.analysis.projection`), and the ratio to the panel's baseline."""
from __future__ import annotations

import numpy as np

from . import projection as proj
from .tables import _all_reach, _mean_if_all, choose_baseline, methods


def projection_columns(nets) -> tuple:
    cols = ["method", "ranks", "reached", "iterations_to_eps", "up_bytes_per_iter", "down_bytes_per_iter",
            "compute_ms_per_iter", "measured_ms_per_iter", "measured_time_to_eps_s"]
    for n in nets:
        tag = n.name.replace(" ", "")
        cols += [f"ms_per_iter@{tag}", f"time_to_eps_s@{tag}", f"ratio@{tag}"]
    return tuple(cols)


def projection_rows(coll, eps, nets, gather="linear", metric="suboptimality", baseline_spec=None,
                    base=None) -> list[dict]:
    """``base``: the baseline per panel when the caller has chosen it (``hpcgc report``'s Allreduce
    baseline), else :func:`choose_baseline` of ``baseline_spec``."""
    ms = coll.methods if hasattr(coll, "methods") else methods(coll)
    if base is None:
        base = choose_baseline(ms, baseline_spec, lambda m: _all_reach(m, eps, metric))
    rows = []
    for m in ms:
        per = []
        for ri in m.runs:
            c = proj.costs(ri.run)
            t = proj.first_reached(ri.run.series.get(metric, []), eps)
            k = max(int(c.iterations[-1]), 1)
            d = {"it": c.iterations[t] if t is not None else np.nan,
                 "up": c.up_bytes[-1] / k, "down": c.down_bytes[-1] / k,
                 "compute": 1e3 * c.compute[-1] / k, "measured": 1e3 * c.measured[-1] / k,
                 "measured_eps": c.measured[t] if t is not None else np.nan}
            for n in nets:
                p = proj.project(c, n, gather)
                d[n.name] = (1e3 * p[-1] / k, p[t] if t is not None else np.nan)
            per.append(d)
        reached = sum(1 for d in per if np.isfinite(d["it"]))
        row = {"method": m.label, "ranks": m.ranks, "reached": f"{reached}/{len(per)}",
               "iterations_to_eps": _mean_if_all([d["it"] for d in per]),
               "up_bytes_per_iter": float(np.mean([d["up"] for d in per])),
               "down_bytes_per_iter": float(np.mean([d["down"] for d in per])),
               "compute_ms_per_iter": float(np.mean([d["compute"] for d in per])),
               "measured_ms_per_iter": float(np.mean([d["measured"] for d in per])),
               "measured_time_to_eps_s": _mean_if_all([d["measured_eps"] for d in per])}
        for n in nets:
            tag = n.name.replace(" ", "")
            row[f"ms_per_iter@{tag}"] = float(np.mean([d[n.name][0] for d in per]))
            row[f"time_to_eps_s@{tag}"] = _mean_if_all([d[n.name][1] for d in per])
        row["_panel"], row["_label"] = m.panel, m.label
        rows.append(row)
    by = {(r["_panel"], r["_label"]): r for r in rows}
    for m, row in zip(ms, rows):
        b = base.get(m.panel)
        brow = by.get((m.panel, b.label)) if b else None
        for n in nets:
            tag = n.name.replace(" ", "")
            bt = brow[f"time_to_eps_s@{tag}"] if brow else float("nan")
            row[f"ratio@{tag}"] = row[f"time_to_eps_s@{tag}"] / bt if bt and np.isfinite(bt) else float("nan")
    for r in rows:
        r.pop("_panel"), r.pop("_label")
    return rows
