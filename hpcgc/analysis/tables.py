"""Reading results for the report, grouping runs into methods and panels, and the tables.

:func:`collect` reads results files through :func:`hpcgc.results.load`; :func:`methods` groups the
runs (same resolved config up to the seed, same rank count); :func:`run_metrics`,
:func:`method_rows` make the rows of ``runs.csv`` and ``table.csv`` (``projection.csv``:
:mod:`hpcgc.analysis.projection_table`); :func:`write_csv` and :func:`markdown_table` write them. No figures here
(:mod:`hpcgc.analysis.report`), no network model (:mod:`hpcgc.analysis.projection`).
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import projection as proj

FLOOR = 1e-16             # values below (round-off around f*) are drawn at FLOOR on log axes
PHASES = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other")
"""The phases of an iteration, in order (``iter``, the measured wall-clock, is their sum because ``other``
is defined as the rest; ``docs/results.md``, "Phases"). Files
written before ``wait_*`` and ``other`` existed have only the five others (waiting inside ``comm_*``)."""
PHASE_LABELS = {"grad": "gradient", "compress": "compress", "wait_up": "wait before uplink (idle)",
                "comm_up": "comm up (Gather+Gatherv)", "server": "server (decode, aggregate, step)",
                "wait_down": "wait before downlink (idle)", "comm_down": "comm down (Bcast)",
                "other": "hpcgc bookkeeping"}
FINAL_STATUSES = ("completed", "diverged", "overflow", "stopped")
NOT_METHOD_KEYS = ("name", "run.seed", "run.repeats")   # keys that do not make a different method


class AnalysisError(Exception):
    """Bad input for the analysis (no files, nothing usable, unknown baseline, ...)."""


# -- reading -----------------------------------------------------------------------------------------
@dataclass
class RunInfo:
    run: object               # hpcgc.results.Run
    path: Path
    file_complete: bool
    truncated: bool           # the run did not finish (killed job): only its recorded rows are used
    ranks: int
    flat: dict                # flattened resolved config ("section.key" -> value)
    method: Method | None = None

    @property
    def attrs(self):
        return self.run.attrs

    @property
    def status(self) -> str:
        return "truncated" if self.truncated else self.run.status


@dataclass
class Collection:
    runs: list
    files: list
    notes: list = field(default_factory=list)
    skipped: list = field(default_factory=list)     # (path, reason)


def find_files(paths) -> list[Path]:
    """Results files named by ``paths``: files as given, directories searched recursively."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted({*p.rglob("*.h5"), *p.rglob("*.h5.partial")}, key=_natural)
            if not found:
                raise AnalysisError(f"{p}: no results files (*.h5, *.h5.partial) in this directory")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise AnalysisError(f"{p}: no such file or directory")
    # a finished file supersedes the .partial of the same name (e.g. a task that was re-run)
    names = {str(f) for f in out}
    out = [f for f in out if not (f.name.endswith(".partial") and str(f)[: -len(".partial")] in names)]
    return list(dict.fromkeys(out))


def _natural(p: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


def _flatten(cfg: dict, prefix="") -> dict:
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _trim(run) -> int:
    """Cut every series of a run to the rows present in all of them (a killed writer may leave one
    dataset a row longer than another); returns the number of rows."""
    lengths = [len(v) for v in run.series.values()] + [len(v) for v in run.time.values()]
    T = min(lengths) if lengths else 0
    for d in (run.series, run.time):
        for k in list(d):
            d[k] = d[k][:T]
    return T


def collect(paths, strict: bool = False) -> Collection:
    """Load every results file named by ``paths`` through :func:`hpcgc.results.load`."""
    from hpcgc import results

    files = find_files(paths)
    coll = Collection(runs=[], files=files)
    seen: dict = {}
    for f in files:
        try:
            res = results.load(f)
        except results.ResultsFormatError as exc:
            msg = str(exc)
            if "schema version" in msg:
                msg += " — read it with the hpcgc version that wrote it (its `hpcgc_version` attribute)"
            elif "not a readable HDF5" in msg:
                msg += " — truncated or not an HDF5 file; nothing in it can be used"
            coll.skipped.append((f, msg))
            continue
        if not res.complete:
            done = sum(1 for r in res if r.status in FINAL_STATUSES)
            coll.notes.append(f"{f}: unfinished file (complete = false: the job was killed or failed); "
                              f"using what it holds: {done} finished run(s) of {len(res)}")
        for r in res:
            T = _trim(r)
            if T == 0:
                coll.notes.append(f"{f}: run {r.run_id} has no recorded rows (status {r.status!r}); skipped")
                continue
            truncated = r.status not in FINAL_STATUSES
            ranks = int(res.attrs.get("world_size") or (r.time["iter"].shape[1] if "iter" in r.time else 1))
            cfg = r.config or {}
            flat = _flatten(cfg) if cfg else {"run.algorithm": r.attrs.get("algorithm"),
                                              "run.compressor": r.attrs.get("compressor"),
                                              "run.seed": r.attrs.get("seed"),
                                              "data.dataset": r.attrs.get("dataset")}
            # canonical compressor spec, as the file records it
            if r.attrs.get("compressor"):
                flat["run.compressor"] = r.attrs["compressor"]
            info = RunInfo(r, f, res.complete, truncated, ranks, flat)
            dup_key = (json.dumps(flat, sort_keys=True, default=str), ranks, int(r.attrs.get("repeat", 0)))
            if dup_key in seen:
                other = seen[dup_key]
                better = (not info.truncated, info.file_complete) > (not other.truncated, other.file_complete)
                keep = info if better else other
                coll.notes.append(f"run {r.run_id} appears in {other.path} and {f} with the same config and "
                                  f"rank count; using the one in {keep.path}")
                if keep is info:
                    coll.runs[coll.runs.index(other)] = info
                    seen[dup_key] = info
                continue
            seen[dup_key] = info
            coll.runs.append(info)
    for ri in coll.runs:
        if ri.truncated:
            coll.notes.append(f"{ri.path}: run {ri.run.run_id} did not finish (status {ri.run.status!r}); using "
                              f"its {len(ri.run.series['iteration'])} recorded row(s), up to iteration "
                              f"{int(ri.run.series['iteration'][-1])} (status 'truncated' in the tables)")
    for f, why in coll.skipped:
        coll.notes.append(f"skipped: {why}")
    if strict and coll.skipped:
        raise AnalysisError("unreadable results files (--strict):\n  " +
                            "\n  ".join(why for f, why in coll.skipped))
    if not coll.runs:
        detail = "".join(f"\n  {why}" for f, why in coll.skipped)
        raise AnalysisError(f"no usable runs in {len(files)} file(s){detail}")
    return coll


# -- methods and panels ----------------------------------------------------------------------------
@dataclass
class Method:
    key: tuple
    panel: tuple
    label: str
    algorithm: str
    compressor: str
    ranks: int
    runs: list = field(default_factory=list)
    color: object = None
    linestyle: str = "-"


PANEL_KEYS = ("data.dataset", "data.partition", "problem.kind", "problem.l2", "problem.l1")


def panel_title(panel: tuple) -> str:
    d = dict(zip((*PANEL_KEYS, "ranks"), panel))
    ds = str(d["data.dataset"])
    if ds.startswith("libsvm:"):                   # the file's name, not the path it was read from
        ds = "libsvm:" + ds.split("/")[-1]
    t = f"{ds}, {d['data.partition']}, {d['problem.kind']} ℓ2 = {d['problem.l2']}"
    if d.get("problem.l1"):
        t += f", ℓ1 = {d['problem.l1']}"
    return t + f", {d['ranks']} ranks"


def panel_slug(panel: tuple) -> str:
    d = dict(zip((*PANEL_KEYS, "ranks"), panel))
    ds = str(d["data.dataset"]).split("/")[-1]
    s = f"{ds}-{d['data.partition']}-{d['problem.kind']}-l2_{d['problem.l2']}-{d['ranks']}ranks"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def methods(coll: Collection) -> list[Method]:
    """Group runs into methods (same resolved config up to the seed, same rank count), in the order
    of first appearance, with labels that name what differs inside each panel."""
    out: dict = {}
    for ri in coll.runs:
        mk = tuple(sorted((k, json.dumps(v, default=str)) for k, v in ri.flat.items() if k not in NOT_METHOD_KEYS))
        key = (mk, ri.ranks)
        if key not in out:
            panel = (*(ri.flat.get(k) for k in PANEL_KEYS), ri.ranks)
            alg = str(ri.flat.get("run.algorithm") or ri.attrs.get("algorithm", "?"))
            comp = str(ri.flat.get("run.compressor") or ri.attrs.get("compressor", "?"))
            base = ri.flat.get("label") or ri.attrs.get("label") or f"{alg} {comp}"
            out[key] = Method(key, panel, str(base), alg, comp, ri.ranks)
        out[key].runs.append(ri)
        ri.method = out[key]
    ms = list(out.values())
    # labels: add the config keys that differ between methods of the same panel
    for panel in dict.fromkeys(m.panel for m in ms):
        group = [m for m in ms if m.panel == panel]
        dicts = [dict(m.key[0]) for m in group]
        keys = sorted({k for d in dicts for k in d})
        vary = [k for k in keys if k not in ("run.algorithm", "run.compressor", "label")
                and len({d.get(k) for d in dicts}) > 1]
        for m, d in zip(group, dicts):
            extra = [f"{k.split('.')[-1]}={json.loads(d[k]) if k in d else '—'}" for k in vary]
            if extra:
                m.label += " (" + ", ".join(extra) + ")"
    return ms



# -- per-run quantities -----------------------------------------------------------------------------
def _col(run, name):
    v = run.series.get(name)
    return None if v is None else np.asarray(v, dtype=float)


def bits_per_worker(run) -> np.ndarray:
    """Cumulative model bits sent per worker (mean over workers), per row."""
    b = run.series.get("bits_up_model")
    return np.zeros(len(run.series["iteration"])) if b is None or b.size == 0 else np.asarray(b, float).mean(axis=1)


def wire_bytes_up(run) -> np.ndarray:
    """Cumulative bytes that crossed the network on the uplink (all workers), per row."""
    c = proj.costs(run)
    return c.up_bytes


def node_bytes(run) -> tuple[float, float]:
    """(inter-node, intra-node) bytes sent by all ranks by the run's last row: ``node_bytes/`` under
    run.topology = "hierarchical"; a flat run's every byte of the per-collective ledger is inter-node."""
    nb = getattr(run, "node_bytes", None) or {}
    if nb:
        return float(np.asarray(nb["inter_sent"])[-1].sum()), float(np.asarray(nb["intra_sent"])[-1].sum())
    sent = [np.asarray(v, dtype=float)[-1].sum() for v in (getattr(run, "mpi_bytes", None) or {}).values() if len(v)]
    return (float(sum(sent)) if sent else float("nan")), 0.0


def wall(run) -> np.ndarray:
    """Cumulative wall-clock of the iteration loop on rank 0 (evaluation excluded), per row."""
    t = run.time.get("iter")
    return np.full(len(run.series["iteration"]), np.nan) if t is None else np.asarray(t, float)[:, 0]


def last_finite(v) -> float:
    if v is None:
        return float("nan")
    v = np.asarray(v, dtype=float)
    ok = np.flatnonzero(np.isfinite(v))
    return float(v[ok[-1]]) if ok.size else float("nan")


def run_metrics(ri: RunInfo, eps: float, metric: str, summary=None) -> dict:
    """One row of ``runs.csv``. ``summary``: the run's row of :func:`hpcgc.results.frames.runs_frame` (the
    report passes it: its final values, bits and times come from the frame); without it the same
    values are computed here from the run."""
    r = ri.run
    it = np.asarray(r.series["iteration"])
    bits, wb, wc = bits_per_worker(r), wire_bytes_up(r), wall(r)
    t = proj.first_reached(r.series.get(metric, []), eps)
    acc = _col(r, "accuracy")
    row = {
        "file": str(ri.path), "run_id": r.run_id, "method": ri.method.label if ri.method else "",
        "algorithm": ri.flat.get("run.algorithm", r.attrs.get("algorithm", "")),
        "compressor": ri.flat.get("run.compressor", r.attrs.get("compressor", "")),
        "seed": r.attrs.get("seed", ri.flat.get("run.seed", "")), "repeat": int(r.attrs.get("repeat", 0)),
        "ranks": ri.ranks, "topology": r.attrs.get("topology", "flat"), "status": ri.status,
        "stop_reason": r.attrs.get("stop_reason", ""),
        "iterations": int(it[-1]),
        "final_suboptimality": last_finite(_col(r, "suboptimality")),
        "final_dist_to_opt": last_finite(_col(r, "dist_to_opt")),
        "final_accuracy": last_finite(acc),
        "model_bits_per_worker": float(bits[-1]),
        "wire_bytes_up": float(wb[-1]),
        "time_s": last_finite(wc),
        "bits_to_eps": float(bits[t]) if t is not None else float("nan"),
        "iterations_to_eps": int(it[t]) if t is not None else float("nan"),
        "time_to_eps_s": float(wc[t]) if t is not None else float("nan"),
        "inter_node_bytes": node_bytes(r)[0], "intra_node_bytes": node_bytes(r)[1],
    }
    if summary is not None:
        assert summary["run_id"] == r.run_id
        row.update(iterations=int(summary["iterations"]),
                   **{k: float(summary[k]) for k in ("final_suboptimality", "final_dist_to_opt", "final_accuracy",
                                                     "model_bits_per_worker", "time_s")})
    return row


RUN_COLUMNS = ("file", "run_id", "method", "algorithm", "compressor", "seed", "repeat", "ranks", "topology", "status",
               "stop_reason",
               "iterations", "final_suboptimality", "final_dist_to_opt", "final_accuracy",
               "model_bits_per_worker", "wire_bytes_up", "inter_node_bytes", "intra_node_bytes", "time_s",
               "bits_to_eps", "iterations_to_eps", "time_to_eps_s")

METHOD_COLUMNS = ("method", "ranks", "seeds", "status", "final_suboptimality", "final_dist_to_opt",
                  "final_accuracy", "iterations", "model_bits_per_worker", "wire_bytes_up", "inter_node_bytes",
                  "intra_node_bytes", "time_s",
                  "reached", "bits_to_eps", "iterations_to_eps", "time_to_eps_s",
                  "bits_ratio", "iterations_ratio", "time_ratio")
# the spread over a method's runs (repeats and/or seeds): median and 95 % interval (hpcgc.analysis.spread)
SPREAD_MEASURES = ("time_to_eps_s", "ms_per_iteration", "iterations_to_eps")
SPREAD_COLUMNS = ("spread_over", "runs", *(f"{m}_{c}" for m in SPREAD_MEASURES for c in ("median", "lo", "hi")),
                  "interval", "time_to_eps_vs_baseline")
METHOD_COLUMNS += SPREAD_COLUMNS


def _geomean(v) -> float:
    v = np.asarray(v, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return float("nan")
    return float(np.exp(np.mean(np.log(np.maximum(v, FLOOR)))))


def _mean_if_all(v) -> float:
    v = np.asarray(v, dtype=float)
    return float(v.mean()) if v.size and np.all(np.isfinite(v)) else float("nan")


def method_rows(ms, per_run: dict, baseline: dict) -> list[dict]:
    """One row per method: aggregates over its seeds, ratios to the panel's baseline."""
    rows = []
    for m in ms:
        rr = [per_run[id(ri)] for ri in m.runs]
        col = {k: [r[k] for r in rr] for k in rr[0]}
        statuses = {}
        for s in col["status"]:
            statuses[s] = statuses.get(s, 0) + 1
        reached = sum(1 for v in col["iterations_to_eps"] if np.isfinite(v))
        row = {
            "method": m.label, "ranks": m.ranks, "seeds": len(rr),
            "status": ", ".join(f"{n} {s}" for s, n in statuses.items()),
            "final_suboptimality": _geomean(col["final_suboptimality"]),
            "final_dist_to_opt": _geomean(col["final_dist_to_opt"]),
            "final_accuracy": _mean_if_all(col["final_accuracy"]),
            "iterations": float(np.mean(col["iterations"])),
            "model_bits_per_worker": float(np.mean(col["model_bits_per_worker"])),
            "wire_bytes_up": float(np.mean(col["wire_bytes_up"])),
            "inter_node_bytes": float(np.mean(col["inter_node_bytes"])),
            "intra_node_bytes": float(np.mean(col["intra_node_bytes"])),
            "time_s": _mean_if_all(col["time_s"]),
            "reached": f"{reached}/{len(rr)}",
            "bits_to_eps": _mean_if_all(col["bits_to_eps"]),
            "iterations_to_eps": _mean_if_all(col["iterations_to_eps"]),
            "time_to_eps_s": _mean_if_all(col["time_to_eps_s"]),
        }
        row.update(spread_columns(col))
        rows.append(row)
    by_label = {(m.panel, m.label): row for m, row in zip(ms, rows)}
    for m, row in zip(ms, rows):
        b = baseline.get(m.panel)
        base = by_label.get((m.panel, b.label)) if b else None
        for k, r in (("bits_to_eps", "bits_ratio"), ("iterations_to_eps", "iterations_ratio"),
                     ("time_to_eps_s", "time_ratio")):
            row[r] = (row[k] / base[k]) if base and base[k] and np.isfinite(base[k]) else float("nan")
        row["time_to_eps_vs_baseline"] = compare_to_baseline(row, base)
    return rows


def spread_columns(col: dict) -> dict:
    """The method's spread columns (:data:`SPREAD_COLUMNS`) from its runs' rows (``col``: column → list)."""
    from .spread import describe, spread
    reps, seeds = len(set(col.get("repeat", [0]))), len(set(col.get("seed", [0])))
    out = {"spread_over": ("repeats x seeds" if reps > 1 and seeds > 1 else "seeds" if seeds > 1 else
                           "repeats" if reps > 1 else "one run"), "runs": len(col["time_s"])}
    ms = [1e3 * t / k if k else float("nan") for t, k in zip(col["time_s"], col["iterations"])]
    for m, values in (("time_to_eps_s", col["time_to_eps_s"]), ("ms_per_iteration", ms),
                      ("iterations_to_eps", col["iterations_to_eps"])):
        s = spread(values)
        out.update({f"{m}_median": s.median, f"{m}_lo": s.lo, f"{m}_hi": s.hi})
    out["interval"] = describe(len(col["time_s"]))
    return out


def compare_to_baseline(row: dict, base: dict | None) -> str:
    """'faster' / 'slower' when the method's and the baseline's 95 % intervals of the time to ε do
    not overlap (measurably different: hpcgc.analysis.spread.separated), 'not measurably different'
    when they do, '' without a baseline or interval."""
    from .spread import Spread, separated
    if base is None or base is row:
        return ""

    def sp(r):
        return Spread(r["time_to_eps_s_median"], r["time_to_eps_s_lo"], r["time_to_eps_s_hi"],
                      r["runs"] if np.isfinite(r["time_to_eps_s_lo"]) else 0, float("nan"))
    a, b = sp(row), sp(base)
    if a.n < 2 or b.n < 2:
        return ""
    if not separated(a, b):
        return "not measurably different"
    return "faster" if a.hi < b.lo else "slower"


def choose_baseline(ms, spec: str | None, reached=None) -> dict:
    """Per panel, the baseline method: ``spec`` = 'ALG:COMPRESSOR' (or a method label); by default
    the panel's first method whose seeds all reach ε (``reached`` = callable(method) -> bool), else
    the panel's first method."""
    out = {}
    if spec is None:
        for m in ms:
            if reached is not None and reached(m):
                out.setdefault(m.panel, m)
        for m in ms:
            out.setdefault(m.panel, m)
        return out
    alg, _, comp = spec.partition(":")
    canon = comp
    if comp:
        from hpcgc import compressors
        from hpcgc.errors import UserError
        try:
            canon = compressors.make(comp).spec
        except (UserError, ValueError, TypeError):      # a spec this hpcgc does not know: compare as text
            canon = comp
    for m in ms:
        hit = (m.label == spec or m.label.split(" (")[0] == spec or
               (m.algorithm == alg and (not comp or m.compressor in (comp, canon))))
        if hit:
            out.setdefault(m.panel, m)
    if not out:
        raise AnalysisError(f"--baseline {spec!r} matches no method; methods: " +
                            "; ".join(sorted({f'{m.algorithm}:{m.compressor}' for m in ms})))
    return out


def _all_reach(m, eps, metric) -> bool:
    return all(proj.first_reached(ri.run.series.get(metric, []), eps) is not None for ri in m.runs)


# -- tables -----------------------------------------------------------------------------------------
def _csv_value(v):
    if isinstance(v, float):
        return "" if not math.isfinite(v) else repr(v)
    return v


def write_csv(path: Path, rows, columns):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([_csv_value(r.get(c, "")) for c in columns])


def _md_value(v):
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return "—"
        if v == int(v) and abs(v) < 1e7:
            return f"{int(v)}"
        return f"{v:.4g}"
    return str(v).replace("|", "\\|")


def markdown_table(rows, columns, title: str | None = None) -> str:
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    for r in rows:
        lines.append("| " + " | ".join(_md_value(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


