"""Documented tables from kept data: ``python -m hpcgc.docs_tables`` (``docs/data/README.md``).

Every table of measured numbers in README.md and docs/*.md sits between markers

    <!-- table: does-it-pay/phases -->
    | ... the rendered table ... |
    <!-- /table -->

and is rendered from ``docs/data/<name>.csv`` (the cells as shown: the header row, then one row per
table row) with the sidecar ``docs/data/<name>.json`` (its provenance: ``commit``, ``cpu``,
``cores``, ``ranks``, ``mpi``, ``load``, ``date``, ``command``, ``source``; optionally ``align``,
one markdown alignment per column, and ``builder``, how to rebuild the CSV from results files).

    python -m hpcgc.docs_tables render            # rewrite every marked table from docs/data/
    python -m hpcgc.docs_tables check             # exit 1 when a marked table differs from its data
    python -m hpcgc.docs_tables regenerate --table diana-experiments/baselines --from results/x.h5
    python -m hpcgc.docs_tables list              # every table: where it is shown, where it came from

``regenerate`` rebuilds a table's CSV from results files with its sidecar's ``builder`` (one row per
run, columns from the runs' values: see :data:`FIELDS`; or ``{"kind": "dagc", "target": 0.9}``: the
table of :mod:`hpcgc.analysis.dagc_table`; or ``{"kind": "verdict"}`` / ``{"kind": "breakeven"}`` / ``{"kind": "phases", "setting":
"emu-1gbit", "n": 4, "file": "does-it-pay"}`` with ``--from`` a ``jobs/does-it-pay.sh`` campaign
directory: :mod:`hpcgc.analysis.verdict`; or ``{"kind": "scale-check"}`` with ``--from`` a
``jobs/scale-check.sh`` campaign directory: :mod:`hpcgc.analysis.scale_check`), refuses results of another experiment
(the sidecar's ``experiment`` against the runs' config ``name``) and warns, naming both, when the
results were written by another commit than the checkout's (or a dirty tree); it records the new
provenance from the results file (commit, date, ranks, MPI library, command, and the machine's CPU
and load where the file recorded them — :mod:`hpcgc.machine` when present — else from this machine
now, said so). ``tests/test_docs_tables.py`` renders every marked table and fails on a difference.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/*.md")
MARKER = re.compile(r"<!-- table: (?P<name>[A-Za-z0-9_./-]+) -->\n(?P<body>.*?)<!-- /table -->\n", re.S)
REQUIRED = ("source", "commit", "cpu", "cores", "ranks", "mpi", "load", "date", "command")
"""Provenance every sidecar carries (``"unknown"`` where it was not recorded, said so in ``note``)."""


class TableError(Exception):
    """Bad input for the tables command (unknown table, missing data, results of another experiment)."""


# -- files ----------------------------------------------------------------------------------------
def data_dir(root: Path = ROOT) -> Path:
    return Path(root) / "docs" / "data"


def doc_files(root: Path = ROOT) -> list[Path]:
    root = Path(root)
    out = []
    for pattern in DOCS:
        out += sorted(root.glob(pattern))
    return out


def read_table(name: str, root: Path = ROOT) -> tuple[list[list[str]], dict]:
    """(rows, meta) of table ``name``: the CSV's rows (header first) and its sidecar."""
    base = data_dir(root) / name
    csv_path, meta_path = base.with_suffix(".csv"), base.with_suffix(".json")
    if not csv_path.is_file():
        raise TableError(f"table {name!r}: no data file {csv_path}")
    if not meta_path.is_file():
        raise TableError(f"table {name!r}: no provenance sidecar {meta_path}")
    with open(csv_path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.reader(fh)]
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TableError(f"{meta_path}: not JSON ({exc})") from None
    if not rows:
        raise TableError(f"{csv_path}: empty")
    width = len(rows[0])
    for i, r in enumerate(rows[1:], 2):
        if len(r) != width:
            raise TableError(f"{csv_path}:{i}: {len(r)} cells, the header has {width}")
    return rows, meta


def write_table(name: str, rows, meta: dict, root: Path = ROOT) -> Path:
    base = data_dir(root) / name
    base.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    base.with_suffix(".csv").write_text(buf.getvalue(), encoding="utf-8")
    base.with_suffix(".json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return base.with_suffix(".csv")


def tables(root: Path = ROOT) -> list[str]:
    """Every table with a data file under docs/data/."""
    d = data_dir(root)
    return sorted(str(p.relative_to(d).with_suffix("")) for p in d.rglob("*.csv"))


# -- rendering ------------------------------------------------------------------------------------
def _cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def render(name: str, root: Path = ROOT) -> str:
    """The markdown between table ``name``'s markers: the table and one provenance line."""
    rows, meta = read_table(name, root)
    align = meta.get("align") or ["---"] * len(rows[0])
    if len(align) != len(rows[0]):
        raise TableError(f"table {name!r}: 'align' has {len(align)} entries for {len(rows[0])} columns")
    def line(cells):
        return "|" + "|".join(f" {_cell(c)} " if c else " " for c in cells) + "|"
    lines = [line(rows[0]), "|" + "|".join(align) + "|"] + [line(r) for r in rows[1:]]
    lines.append("")
    lines.append(f"<sub>{provenance_line(name, meta)}</sub>")
    return "\n".join(lines) + "\n"


def provenance_line(name: str, meta: dict) -> str:
    where = f"`docs/data/{name}.csv`"
    if meta.get("source") == "placeholder":       # a table whose campaign has not run yet (header only)
        b = meta.get("builder") or {}
        return (f"Data: {where} — no data yet ({meta.get('note', 'the campaign has not run')}); "
                f"regenerate: `python -m hpcgc.docs_tables regenerate --table {name} --from "
                f"{b.get('from', 'DIR')}` (docs/data/README.md).")
    if meta.get("source") == "transcribed":
        at = f" at commit {meta['measured_commit']}" if meta.get("measured_commit") else ""
        what = (f"transcribed from the doc at commit {meta['commit']}; measured {meta['date']}{at} on {meta['cpu']}, "
                f"{meta['ranks']} ranks, load {meta['load']} (per the doc)")
    else:
        what = (f"measured {meta['date']} on {meta['cpu']} ({meta['cores']} cores), {meta['ranks']} ranks, "
                f"{meta['mpi']}, load {meta['load']}, commit {str(meta['commit'])[:10]}")
    return f"Data: {where} — {what}; regenerate: `python -m hpcgc.docs_tables` (docs/data/README.md)."


def rewrite(text: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """``text`` with every marked table rendered from its data; and the names that changed."""
    changed = []

    def sub(m):
        body = render(m.group("name"), root)
        if body != m.group("body"):
            changed.append(m.group("name"))
        return f"<!-- table: {m.group('name')} -->\n{body}<!-- /table -->\n"
    return MARKER.sub(sub, text), changed


def markers(root: Path = ROOT) -> dict[str, list[Path]]:
    """Table name -> the documents that show it."""
    out: dict[str, list[Path]] = {}
    for p in doc_files(root):
        for m in MARKER.finditer(p.read_text(encoding="utf-8")):
            out.setdefault(m.group("name"), []).append(p)
    return out


def check(root: Path = ROOT) -> list[str]:
    """Problems: marked tables whose text differs from their data, data files no document shows,
    sidecars without the required provenance. Empty: every documented table is regenerated."""
    problems = []
    for p in doc_files(root):
        text = p.read_text(encoding="utf-8")
        if text.count("<!-- table: ") != text.count("<!-- /table -->"):
            problems.append(f"{p.relative_to(root)}: unbalanced table markers")
        try:
            _, changed = rewrite(text, root)
        except TableError as exc:
            problems.append(f"{p.relative_to(root)}: {exc}")
            continue
        problems += [f"{p.relative_to(root)}: table {n} differs from docs/data/{n}.csv (run: python -m "
                     f"hpcgc.docs_tables render)" for n in changed]
    shown = markers(root)
    for name in tables(root):
        if name not in shown:
            problems.append(f"docs/data/{name}.csv: shown by no document (no '<!-- table: {name} -->' marker)")
        _, meta = read_table(name, root)
        missing = [k for k in REQUIRED if k not in meta]
        if missing:
            problems.append(f"docs/data/{name}.json: missing {', '.join(missing)}")
    return problems


def render_all(root: Path = ROOT) -> list[str]:
    out = []
    for p in doc_files(root):
        text = p.read_text(encoding="utf-8")
        new, changed = rewrite(text, root)
        if changed:
            p.write_text(new, encoding="utf-8")
            out += [f"{p.relative_to(root)}: {n}" for n in changed]
    return out


# -- regenerating from results files --------------------------------------------------------------
def _method(run) -> str:
    a = run.attrs
    return a.get("label") or f"{a.get('algorithm', '')} + {a.get('compressor', '')}"


def _field(run, spec: dict):
    """A run's value for a column spec: {"field": ..., "eps": ..., "metric": ...}."""
    import numpy as np

    from .analysis import tables as tb
    from .analysis.projection import first_reached
    f = spec["field"]
    it = np.asarray(run.series["iteration"])
    if f in FIELDS_TO_EPS:
        if "eps" not in spec:
            raise TableError(f"column {spec.get('head', f)!r}: field {f} needs 'eps'")
        t = first_reached(run.series.get(spec.get("metric", "suboptimality"), []), float(spec["eps"]))
        if t is None:
            return math.nan
        return {"iterations_to_eps": lambda: int(it[t]), "bits_to_eps": lambda: float(tb.bits_per_worker(run)[t]),
                "time_to_eps_s": lambda: float(tb.wall(run)[t]),
                "ms_to_eps": lambda: 1e3 * float(tb.wall(run)[t])}[f]()
    if f == "method":
        return _method(run)
    if f == "iterations":
        return int(it[-1])
    if f.startswith("final_"):
        return tb.last_finite(run.series.get(f[len("final_"):]))
    if f == "model_bits_per_worker":
        return float(tb.bits_per_worker(run)[-1])
    if f == "ms_per_iteration":
        w = tb.wall(run)
        return 1e3 * float(w[-1]) / int(it[-1]) if int(it[-1]) else math.nan
    if f.startswith("attr:"):
        return run.attrs.get(f[len("attr:"):], "")
    raise TableError(f"column {spec.get('head', f)!r}: unknown field {f!r} (known: {', '.join(FIELDS)})")


FIELDS_TO_EPS = ("iterations_to_eps", "bits_to_eps", "time_to_eps_s", "ms_to_eps")
FIELDS = ("method", "iterations", "final_<series>", "model_bits_per_worker", "ms_per_iteration",
          "attr:<run attribute>") + FIELDS_TO_EPS
"""What a ``builder`` column can show: ``*_to_eps`` with the column's ``eps`` (and ``metric``,
default ``suboptimality``): the first recorded row at or below it (NaN, shown as ``na``: never)."""


def _fmt(v, spec: dict) -> str:
    if isinstance(v, float) and math.isnan(v):
        return spec.get("missing", "na")
    fmt = spec.get("format", "")
    try:
        return format(v, fmt) if fmt else str(v)
    except (ValueError, TypeError) as exc:
        raise TableError(f"column {spec.get('head')!r}: format {fmt!r} for {v!r}: {exc}") from None


def _git_head(root: Path) -> tuple[str, bool]:
    def git(*a):
        try:
            return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))


def machine_now() -> dict:
    """CPU model, cores and load of this machine now (:func:`hpcgc.machine.snapshot` when present)."""
    try:
        from .machine import snapshot  # the noise probe of run.repeats, where it exists
        s = snapshot()
        return {"cpu": s.get("cpu_model", ""), "cores": s.get("cores", ""), "load": s.get("load1", "")}
    except ImportError:
        import os
        cpu = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.split(":")[0].strip() in ("model name", "Model"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        try:
            load = float(Path("/proc/loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            load = ""
        return {"cpu": cpu, "cores": os.cpu_count() or "", "load": load}


def regenerate(name: str, paths, root: Path = ROOT, force: bool = False, warn=print) -> Path:
    """Rebuild table ``name``'s CSV and provenance from results files (see the module doc)."""
    from . import results
    _, meta = read_table(name, root)
    b = meta.get("builder")
    if not b:
        raise TableError(f"table {name!r} has no 'builder' in docs/data/{name}.json: it was transcribed, "
                         "not built from results files (add a builder to rebuild it)")
    campaign = b.get("kind") in ("verdict", "breakeven", "phases", "scale-check")
    if campaign:                         # a jobs/does-it-pay.sh campaign directory (analysis.verdict)
        files = sorted(p for p in Path(paths[0]).glob("*.h5") if not p.name.endswith("-collectives.h5")
                       and (b.get("n") is None or f"-n{int(b['n'])}-" in p.name))
        runs = [r for p in files for r in results.load(p)]
    else:
        runs = results.load(paths[0]) if len(paths) == 1 else [r for p in paths for r in results.load(p)]
    if not runs:
        raise TableError(f"no runs in {', '.join(map(str, paths))}")
    try:
        import tomllib
    except ModuleNotFoundError:          # Python 3.10
        import tomli as tomllib
    want = meta.get("experiment") or b.get("experiment")
    names = {tomllib.loads(r.attrs["config"]).get("name", "") for r in runs}
    if want and names != {want} and not force:
        raise TableError(f"table {name!r} is built from experiment {want!r}; these results are of "
                         f"{', '.join(sorted(map(repr, names)))} (refusing; --force to override)")
    head, dirty = _git_head(ROOT)         # the code that would describe the results: this checkout
    fa = runs[0].file_attrs
    commits = {r.file_attrs.get("git_commit", "unknown") for r in runs}
    if head and commits != {head}:
        warn(f"hpcgc.docs_tables: warning: results of commit {', '.join(sorted(commits))}, "
             f"the checkout is at {head}")
    if any(bool(r.file_attrs.get("git_dirty", False)) for r in runs) or dirty:
        warn("hpcgc.docs_tables: warning: results or checkout from a tree with uncommitted changes")
    if b.get("kind") == "dagc":                 # the DAGC comparison's own table (hpcgc.analysis.dagc_table)
        from .analysis import dagc_table
        text = dagc_table.table(dagc_table.collect(paths, float(b.get("target", 0.9))), float(b.get("target", 0.9)))
        md = [line.strip()[1:-1] for line in text.splitlines() if line.startswith("|")]
        rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)] for k, line in enumerate(md) if k != 1]
    elif campaign:
        from .analysis import verdict
        camp = Path(paths[0])
        only_n = int(b["n"]) if b.get("n") is not None and b["kind"] != "phases" else None
        if b["kind"] == "scale-check":        # a jobs/scale-check.sh directory (analysis.scale_check)
            from .analysis import scale_check
            rows = scale_check.rows(camp)
        else:
            rows = (verdict.rows(camp, only_n) if b["kind"] == "verdict" else verdict.breakeven_rows(camp, only_n)
                if b["kind"] == "breakeven" else
                    verdict.phases_rows(camp, b.get("setting", "emu-1gbit"), int(b.get("n", 4)),
                                        b.get("file", "does-it-pay")))
    else:
        where = b.get("where", {})
        sel = [r for r in runs if all(str(r.attrs.get(k)) == str(v) for k, v in where.items())]
        if not sel:
            raise TableError(f"table {name!r}: no run matches {where}")
        cols = b["columns"]
        rows = [[c["head"] for c in cols]] + [[_fmt(_field(r, c), c) for c in cols] for r in sel]
    now = machine_now()
    cpu = fa.get("machine_start_cpu_model") or now["cpu"]
    meta.update(
        source="results", commit=sorted(commits)[0] if len(commits) == 1 else ", ".join(sorted(commits)),
        cpu=cpu, cores=int(fa.get("machine_start_cores", now["cores"]) or 0),
        ranks=int(fa.get("world_size", 0)), mpi=str(fa.get("mpi_library_version", "")),
        load=fa.get("machine_start_load1", now["load"]), date=str(fa.get("created", "")),
        command=str(fa.get("command_line", "")),
        regenerated_with=f"python -m hpcgc.docs_tables regenerate --table {name} --from "
                         + " ".join(map(str, paths)))
    if "machine_start_cpu_model" not in fa:
        meta["note"] = "cpu, cores and load: of the machine that ran regenerate (the results file records none)"
    else:
        meta.pop("note", None)
    meta.pop("transcribed_from", None)
    for k in ("cores", "load"):
        v = meta[k]
        if isinstance(v, float) and math.isnan(v):
            meta[k] = "unknown"
    return write_table(name, rows, meta, root)


# -- command line ---------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpcgc.docs_tables", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("render", help="rewrite every marked table in README.md and docs/*.md from docs/data/")
    sub.add_parser("check", help="exit 1 when a marked table differs from its data (what the test checks)")
    sub.add_parser("list", help="every table: the documents that show it and its provenance")
    g = sub.add_parser("regenerate", help="rebuild a table's data file from results files, then render")
    g.add_argument("--table", required=True, help="table name, e.g. diana-experiments/baselines")
    g.add_argument("--from", dest="paths", nargs="+", required=True, metavar="RESULTS",
                   help="results files or directories (hpcgc.results.load)")
    g.add_argument("--force", action="store_true", help="accept results of another experiment")
    ap.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    root = Path(args.root)
    try:
        if args.cmd == "render":
            for line in render_all(root):
                print(f"rendered {line}")
            return 0
        if args.cmd == "check":
            problems = check(root)
            for p in problems:
                print(p)
            return 1 if problems else 0
        if args.cmd == "list":
            shown = markers(root)
            for name in tables(root):
                _, meta = read_table(name, root)
                docs = ", ".join(str(p.relative_to(root)) for p in shown.get(name, [])) or "(no document)"
                print(f"{name}: {docs}; {meta.get('source')}, {meta.get('date')}, {meta.get('ranks')} ranks")
            return 0
        path = regenerate(args.table, args.paths, root, force=args.force,
                          warn=lambda m: print(m, file=sys.stderr))
        print(f"wrote {path}")
        for line in render_all(root):
            print(f"rendered {line}")
        return 0
    except (TableError, FileNotFoundError, ValueError) as exc:     # ValueError: results.ResultsFormatError
        print(f"hpcgc.docs_tables: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
