"""One command from results files to figures and tables.

    hpcgc report RESULTS... -o OUTDIR [--baseline ALG:COMPRESSOR] [--eps 1e-8]

``RESULTS`` are hpcgc results files (``.h5``; unfinished ``.h5.partial`` too) and/or directories
that hold them (searched recursively, e.g. the ``task-<id>.h5`` files of a job array). Writes, as
PNG and PDF:

- ``convergence[-<panel>]``: f(x)−f* and ‖x−x*‖²/‖x⁰−x*‖² against model bits per worker,
  iterations and wall-clock; one line per method, the median over its runs (seeds and/or repeats)
  with a band of the median's 95 % interval (order statistics, ``hpcgc.analysis.spread``: [min, max]
  below 6 runs);
- ``accuracy[-<panel>]``: accuracy against iterations (communication rounds), for classifiers;
- ``phases``: time per iteration split into grad / compress / wait_up / comm_up / server / wait_down / comm_down / other, per
  method and rank count;
- ``scaling``: time per iteration, time-to-ε and uplink bytes against the rank count (only when
  the same method was run on several rank counts);
- ``projection[-<panel>]``: convergence against the wall-clock projected onto 1, 10, 100 Gb/s
  networks (α–β model, ``hpcgc.analysis.projection``);

and the tables ``table.csv`` / ``table.md`` (one row per method: final values, bits-, iterations-
and time-to-ε, ratios to the baseline), ``runs.csv`` (one row per run), ``projection.csv`` /
``projection.md``, and ``report.md`` that ties everything together with the notes about the inputs
(truncated files, skipped files). A panel is one (data set, partition, problem, ℓ2, ℓ1, rank
count); a method is one resolved config up to the seed. ``docs/analysis.md`` documents every
figure and column.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from . import projection as proj
from .figures import (
    _RENDERED,
    _All,
    _has_series,
    _style,
    fig_accuracy,
    fig_convergence,
    fig_convergence_column,
    fig_phases,
    fig_projection,
    fig_scaling,
)
from .html import write_html
from .projection_table import projection_columns, projection_rows
from .tables import (  # the report's tables and inputs; re-exported for `report.collect` etc.
    METHOD_COLUMNS,
    RUN_COLUMNS,
    AnalysisError,
    _all_reach,
    choose_baseline,
    collect,
    markdown_table,
    method_rows,
    methods,
    panel_title,
    run_metrics,
    write_csv,
)


# -- the report ---------------------------------------------------------------------------------------
def allreduce_baselines(ms, per_run: dict, base: dict, notes: list, log=None) -> dict:
    """The default baseline of each panel that has an uncompressed-equivalent Allreduce reaching ε:
    the fastest (mean time to ε over seeds) among its fp16, bf16 and float32 runs, ties to 16 bits
    (:func:`hpcgc.analysis.baselines.report_baseline`; docs/analysis.md); other panels keep ``base``.
    Says which in ``notes``, and when there was no 16-bit run to compare."""
    from .baselines import SIXTEEN, report_baseline, run_precision
    times = {}
    for m in ms:
        v = [per_run[id(ri)]["time_to_eps_s"] for ri in m.runs]
        times[id(m)] = float(np.mean(v)) if v and all(np.isfinite(v)) else float("nan")
    out = dict(base)
    for panel, (m, prec) in report_baseline(ms, times).items():
        out[panel] = m
        has16 = any(m2.panel == panel and m2.runs and run_precision(m2.runs[0]) in SIXTEEN for m2 in ms)
        note = (f"{panel_title(panel)}: baseline {m.label} ({prec}), the fastest uncompressed-equivalent Allreduce "
                f"to ε" + ("" if has16 else "; no fp16/bf16 run to compare (`hpcgc breakeven` models one)"))
        notes.append(note)
        (log or (lambda t: print(t, file=sys.stderr)))(f"# note: {note}")
    return out


def report(paths, out, eps=1e-8, baseline=None, metric="suboptimality", logx=False, nets=None,
           gather="linear", strict=False, formats=("png", "pdf"), log=None) -> dict:
    out = Path(out)
    coll = collect(paths, strict=strict)
    if metric == "suboptimality" and coll.runs and not _has_series([_All(coll.runs)], "suboptimality"):
        metric = "grad_norm_sq"
        coll.notes.append("no run has a reference optimum f* (nonconvex problems): ε applies to ‖∇f(x)‖²")
    ms = methods(coll)
    _style(ms)
    coll.methods = ms
    base = choose_baseline(ms, baseline, lambda m: _all_reach(m, eps, metric))
    nets = nets or [proj.PRESETS[k] for k in proj.PRESETS]
    out.mkdir(parents=True, exist_ok=True)
    _RENDERED.clear()
    for note in coll.notes:
        (log or (lambda t: print(t, file=sys.stderr)))(f"# note: {note}")

    from hpcgc.results.frames import runs_frame
    summaries = runs_frame([ri.run for ri in coll.runs]).to_dict("records")     # the runs as pandas reads them
    per_run = {id(ri): run_metrics(ri, eps, metric, sm) for ri, sm in zip(coll.runs, summaries)}
    if baseline is None:
        base = allreduce_baselines(ms, per_run, base, coll.notes, log)
    mrows = method_rows(ms, per_run, base)
    prow = projection_rows(coll, eps, nets, gather, metric, baseline, base=base)
    figures = []
    panels = list(dict.fromkeys(m.panel for m in ms))
    for panel in panels:
        figures += fig_convergence(ms, panel, out, formats, eps, metric, logx)
        for which in ("bits", "wall"):
            figures += fig_convergence_column(ms, panel, out, formats, eps, metric, which, logx)
        figures += fig_accuracy(ms, panel, out, formats)
        figures += fig_projection(ms, panel, out, formats, nets, gather, eps, metric)
    figures += fig_phases(ms, out, formats)
    figures += fig_scaling(ms, per_run, out, formats)

    write_csv(out / "runs.csv", [per_run[id(ri)] for ri in coll.runs], RUN_COLUMNS)
    write_csv(out / "table.csv", mrows, METHOD_COLUMNS)
    pcols = projection_columns(nets)
    write_csv(out / "projection.csv", prow, pcols)
    eps_txt = f"{metric} ≤ {eps:g}"
    base_txt = "; ".join(f"{panel_title(p)}: {b.label}" for p, b in base.items())
    table_md = markdown_table(mrows, METHOD_COLUMNS, title=f"Methods (ε: {eps_txt}; baseline: {base_txt})")
    (out / "table.md").write_text(table_md + "\n")
    proj_md = markdown_table(prow, pcols, title=f"Projected time to {eps_txt}: " +
                             "; ".join(n.describe() for n in nets) + f"; {gather} gather, binomial broadcast")
    (out / "projection.md").write_text(proj_md + "\n")

    lines = ["# hpcgc report", "",
             (f"{len(coll.runs)} run(s) from {len(coll.files) - len(coll.skipped)} file(s), "
              f"{len(ms)} method(s), ε: {eps_txt}."), ""]
    if coll.notes:
        lines += ["## Notes on the inputs", ""] + [f"- {n}" for n in coll.notes] + [""]
    lines += ["## Tables", "", table_md, "", proj_md, "",
              ("Per-run values: `runs.csv`; the same tables as CSV: `table.csv`, `projection.csv`. "
               "Empty / — : not reached by every seed (see `reached`) or not applicable."), "",
              "## Figures", ""]
    lines += [f"- [{p.name}]({p.name})" for p in figures if p.suffix == ".png"]
    lines += ["", "## Inputs", ""] + [f"- {f}" for f in coll.files]
    lines += ["", "Everything above in one self-contained file, figures included: [report.html](report.html)."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    write_html(out / "report.html", coll=coll, ms=ms, mrows=mrows, prow=prow,
               run_rows=[per_run[id(ri)] for ri in coll.runs], pcols=pcols, eps_txt=eps_txt, base_txt=base_txt)
    return {"collection": coll, "methods": ms, "method_rows": mrows, "run_rows": [per_run[id(ri)] for ri in coll.runs],
            "projection_rows": prow, "figures": figures, "out": out}


def build_parser():
    p = argparse.ArgumentParser(
        prog="hpcgc report",
        description="Figures and tables from hpcgc results files (docs/analysis.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="spread: a method's runs are its seeds and its repeats (run.repeats); the method table gives the\n"
               "median and 95 % interval of time to ε, ms per iteration and iterations to ε over them\n"
               "(order statistics of the median; [min, max] below 6 runs, with its actual coverage), says over\n"
               "what (spread_over), and compares with the baseline by non-overlapping intervals\n"
               "(time_to_eps_vs_baseline); convergence figures draw the median with that interval as band.\n\n"
               "examples:\n  hpcgc report results/default-20261122T054155Z.h5 -o report/\n"
               "  hpcgc report results/diana-vs-dcgd-a9a/ -o report/a9a --baseline dcgd:qsgd:s=4")
    p.add_argument("results", nargs="+", help="results files (.h5, .h5.partial) and/or directories of them")
    p.add_argument("-o", "--out", required=True, metavar="OUTDIR", help="output directory (created)")
    p.add_argument("--baseline", metavar="ALG:COMPRESSOR",
                   help="method the ratios refer to, e.g. dcgd:qsgd:s=2 (default: the fastest uncompressed "
                        "fp16/bf16/fp32 Allreduce that reaches eps, else the first method of each panel that does)")
    p.add_argument("--eps", type=float, default=1e-8, help="target ε for the *-to-ε columns (default 1e-8)")
    p.add_argument("--metric", default="suboptimality", choices=("suboptimality", "dist_to_opt", "grad_norm_sq"),
                   help="series compared against ε (default suboptimality = f(x) − f*)")
    p.add_argument("--logx", action="store_true", help="log scale also on the bits and wall-clock axes")
    p.add_argument("--network", nargs="+", default=list(proj.PRESETS), metavar="GBPS",
                   help="networks for the projection, Gb/s (presets 1 10 100)")
    p.add_argument("--latency-us", type=float, default=None, help="α [µs] for every projected network")
    p.add_argument("--gather", choices=("linear", "tree"), default="linear", help="gather model of the projection")
    p.add_argument("--format", default="png,pdf", help="figure formats, comma-separated (default png,pdf)")
    p.add_argument("--strict", action="store_true", help="fail if any file cannot be read (default: skip it, say so)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        nets = [proj.network(s, args.latency_us) for s in args.network]
        r = report(args.results, args.out, eps=args.eps, baseline=args.baseline, metric=args.metric,
                   logx=args.logx, nets=nets, gather=args.gather, strict=args.strict,
                   formats=tuple(f.strip() for f in args.format.split(",") if f.strip()))
    except (AnalysisError, ValueError) as exc:
        print(f"analysis: error: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(r["method_rows"], METHOD_COLUMNS))
    print(f"# wrote {len(r['figures'])} figure file(s), table.csv/.md, runs.csv, projection.csv/.md, "
          f"report.md and report.html to {r['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
