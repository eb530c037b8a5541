"""``report.html`` of ``hpcgc report`` (:mod:`hpcgc.analysis.report`): one self-contained page with the
tables, the figures and the inputs' provenance."""
from __future__ import annotations

from pathlib import Path

from .figures import _RENDERED
from .tables import METHOD_COLUMNS, RUN_COLUMNS, _md_value

HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0 1.5em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; } code { font-size: 0.9em; }
.note { color: #8a4b00; }
"""

FIGURE_CAPTIONS = {
    "convergence": "f(x) − f* and ‖x − x*‖²/‖x⁰ − x*‖² against model bits per worker, iterations and "
                   "wall-clock; colour: compressor, line style: algorithm; median over runs (seeds and/or repeats), "
                   "band: the median's 95 % interval (order statistics; [min, max] below 6 runs).",
    "convergence_bits": "The same against model bits per worker alone, sized for one journal column.",
    "convergence_wall": "The same against the wall-clock of the iteration loop, sized for one journal column.",
    "accuracy": "Accuracy against iterations; median over runs, band: its 95 % interval ([min, max] below 6 runs).",
    "projection": "Convergence against the wall-clock measured here and projected onto other networks "
                  "(α–β model, docs/projection.md).",
    "phases": "Time per iteration by phase, for rank 0 (0) and the mean worker rank (W); each stack is "
              "that rank's own iteration. wait: idle, waiting for other "
              "ranks (late senders) before a transfer; comm: the collective's transfer; other: hpcgc's bookkeeping (docs/results.md, Phases).",
    "scaling": "Time per iteration, time to ε and uplink bytes per iteration against the rank count.",
}


def _esc(v) -> str:
    import html
    return html.escape(str(v))


def html_table(rows, columns) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(_md_value(r.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def provenance_rows(coll) -> list[dict]:
    """One row per input file: where and with what it was produced (the file's root attributes)."""
    out, seen = [], set()
    for ri in coll.runs:
        if ri.path in seen:
            continue
        seen.add(ri.path)
        a = ri.run.file_attrs
        hosts = a.get("hostnames", "")
        out.append({"file": str(ri.path), "runs": sum(1 for x in coll.runs if x.path == ri.path),
                    "complete": a.get("complete", ""), "created": a.get("created", ""),
                    "hpcgc": a.get("hpcgc_version", ""),
                    "git commit": str(a.get("git_commit", ""))[:12] + ("+dirty" if a.get("git_dirty") else ""),
                    "MPI library": a.get("mpi_library_version", ""), "ranks": a.get("world_size", ""),
                    "hosts": ",".join(map(str, hosts)) if isinstance(hosts, list) else hosts,
                    "command line": a.get("command_line", ""),
                    "SLURM job": a.get("slurm_job_id", "")})
    return out


PROVENANCE_COLUMNS = ("file", "runs", "complete", "created", "hpcgc", "git commit", "MPI library", "ranks", "hosts",
                      "command line", "SLURM job")


def write_html(path: Path, *, coll, ms, mrows, prow, run_rows, pcols, eps_txt, base_txt, sections=()) -> Path:
    """``report.html``: one self-contained file (figures as embedded PNG data, no external resource)
    with the tables, the notes and the provenance of every input file. ``sections``: extra
    (title, html) pairs, e.g. a break-even analysis when one is present."""
    import base64
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>hpcgc report</title>", f"<style>{HTML_STYLE}</style></head><body>",
             "<h1>hpcgc report</h1>",
             f"<p>{len(coll.runs)} run(s) from {len(coll.files) - len(coll.skipped)} file(s), {len(ms)} method(s); "
             f"ε: <code>{_esc(eps_txt)}</code>; baseline: {_esc(base_txt)}.</p>"]
    if coll.notes:
        parts += ["<h2>Notes on the inputs</h2><ul>"] + [f'<li class="note">{_esc(n)}</li>' for n in coll.notes] + \
                 ["</ul>"]
    parts += ["<h2>Methods</h2>", html_table(mrows, METHOD_COLUMNS),
              "<p>Empty / — : not reached by every seed (see <code>reached</code>) or not applicable. "
              "Ratios: the method's value over the baseline's (&lt; 1: better).</p>",
              "<h2>Figures</h2>"]
    for stem, (png, dpi) in _RENDERED.items():
        cap = FIGURE_CAPTIONS.get(stem.split("-")[0], "")
        data = base64.b64encode(png).decode("ascii")
        width = int.from_bytes(png[16:20], "big") * 130 // dpi      # every figure at the same scale
        parts.append(f'<figure id="{_esc(stem)}"><img alt="{_esc(stem)}" width="{width}" '
                     f'src="data:image/png;base64,{data}">'
                     f"<figcaption><b>{_esc(stem)}</b>. {_esc(cap)}</figcaption></figure>")
    parts += ["<h2>Projected time to ε on other networks</h2>", html_table(prow, pcols)]
    for title, body in sections:
        parts += [f"<h2>{_esc(title)}</h2>", body]
    parts += ["<h2>Runs</h2>", html_table(run_rows, RUN_COLUMNS),
              "<h2>Provenance of the inputs</h2>", html_table(provenance_rows(coll), PROVENANCE_COLUMNS)]
    parts += ["<p>Written by <code>hpcgc report</code>; the same tables as CSV beside this file "
              "(<code>table.csv</code>, <code>runs.csv</code>, <code>projection.csv</code>).</p></body></html>"]
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
