"""Results as pandas frames: ``hpcgc.results.load(path_or_dir).to_frame()``, ``.runs_frame()``,
``.phases_frame()`` (pandas comes with the ``analysis`` extra; nothing else in hpcgc needs it).

Every frame starts with the columns that say which run a row belongs to (:data:`RUN_COLUMNS`:
file, run id, label, algorithm, compressor, collective, allocation, seed, repeat, data set, partition,
problem, ℓ2, ℓ1, n workers, d, ranks, server mode) and holds the values of the results file
unchanged — no interpolation, no filtering; a run cut off by a killed job keeps the rows present in
all its datasets. Column meanings are those of ``docs/results.md``; ``docs/analysis.md`` lists the
frames' columns.
"""
from __future__ import annotations

import numpy as np

from .schema import LEDGER, PHASES, SCALAR_SERIES, WORKER_SERIES

RUN_COLUMNS = ("file", "run_id", "label", "algorithm", "compressor", "collective", "allocation", "seed",
               "repeat", "dataset", "partition", "problem", "l2", "l1", "n", "d", "ranks", "server")
#: attribute of the run (or, for ``ranks``, of the file) behind each run column
_ATTR = {"n": "n_workers", "ranks": "world_size"}
PROVENANCE = ("hpcgc_version", "git_commit", "git_dirty", "created", "command_line", "mpi_library_version",
              "hostnames", "complete", "machine_start_cpu_model", "machine_start_load1", "machine_end_load1",
              "noise_other_cpu_share", "noise_warnings")


def _pd():
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError('results as frames need pandas: pip install "hpcgc[analysis]"') from None
    return pd


def run_columns(run) -> dict:
    """The identifying columns of one run (:data:`RUN_COLUMNS`)."""
    a = run.attrs
    out = {}
    for c in RUN_COLUMNS:
        if c == "file":
            out[c] = str(run.path) if run.path is not None else ""
        elif c == "run_id":
            out[c] = run.run_id
        elif c == "ranks":
            t = run.time.get("iter")
            out[c] = int(run.file_attrs.get("world_size") or (t.shape[1] if t is not None else 0))
        elif c == "repeat":
            out[c] = int(a.get("repeat", 0))
        else:
            out[c] = a.get(_ATTR.get(c, c), "")
    return out


def rows(run) -> int:
    """Rows present in every series of the run (a killed writer may leave one dataset a row longer)."""
    lengths = [len(v) for v in run.series.values()] + [len(v) for v in run.time.values()] + \
              [len(v) for v in run.mpi_bytes.values()]
    return min(lengths) if lengths else 0


def _frame(parts, columns):
    pd = _pd()
    if not parts:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(parts, ignore_index=True)


def to_frame(runs, workers: bool = False):
    """Tidy frame, one row per run × recorded iteration.

    Columns: :data:`RUN_COLUMNS`, ``iteration``, the scalar series (``loss``, ``suboptimality``,
    ``dist_to_opt``, ``grad_norm_sq``, ``accuracy``, ``train_accuracy``, ``test_loss``,
    ``bits_down_wire``), and the per-worker / per-rank series aggregated over their ``n`` workers
    or ``ranks`` ranks: ``bits_up_model_total`` / ``_mean`` / ``_max`` (over workers; ``_mean`` is
    "per worker"), the same for ``bits_up_wire``, ``time_<phase>_mean`` / ``_max`` / ``_rank0``
    (seconds, cumulative, over ranks) and ``mpi_bytes_<collective>_total`` (over ranks).

    ``workers=True``: the long form, one row per run × iteration × rank with the unaggregated
    values: ``rank``, ``worker`` (index in the worker table, −1 for a dedicated server),
    ``bits_up_model``, ``bits_up_wire`` (NaN on a rank that is not a worker), ``time_<phase>``,
    ``mpi_bytes_<collective>``. Merge with the wide form on (file, run_id, iteration).
    """
    pd = _pd()
    parts = []
    for r in runs:
        T = rows(r)
        ident = run_columns(r)
        if not workers:
            cols = {k: [v] * T for k, v in ident.items()}
            for k in SCALAR_SERIES:
                if k in r.series:
                    cols[k] = r.series[k][:T]
            for k in WORKER_SERIES:
                if k in r.series:
                    v = np.asarray(r.series[k][:T], dtype=float)
                    cols[f"{k}_total"] = v.sum(axis=1)
                    cols[f"{k}_mean"] = v.mean(axis=1) if v.shape[1] else np.full(T, np.nan)
                    cols[f"{k}_max"] = v.max(axis=1) if v.shape[1] else np.full(T, np.nan)
            for ph in PHASES:
                if ph in r.time:
                    v = np.asarray(r.time[ph][:T], dtype=float)
                    cols[f"time_{ph}_mean"] = v.mean(axis=1)
                    cols[f"time_{ph}_max"] = v.max(axis=1)
                    cols[f"time_{ph}_rank0"] = v[:, 0]
            for c in LEDGER:
                if c in r.mpi_bytes:
                    cols[f"mpi_bytes_{c}_total"] = np.asarray(r.mpi_bytes[c][:T], dtype=float).sum(axis=1)
            parts.append(pd.DataFrame(cols))
            continue
        P = ident["ranks"]
        wr = np.asarray(r.workers.get("rank", np.arange(P)), dtype=int)
        worker_of = np.full(P, -1)
        worker_of[wr[wr < P]] = np.flatnonzero(wr < P)
        cols = {k: [v] * (T * P) for k, v in ident.items()}
        cols["iteration"] = np.repeat(np.asarray(r.series["iteration"][:T]), P)
        cols["rank"] = np.tile(np.arange(P), T)
        cols["worker"] = np.tile(worker_of, T)
        for k in WORKER_SERIES:
            if k in r.series:
                full = np.full((T, P), np.nan)
                full[:, wr[wr < P]] = np.asarray(r.series[k][:T], dtype=float)[:, wr < P]
                cols[k] = full.ravel()
        for ph in PHASES:
            if ph in r.time:
                cols[f"time_{ph}"] = np.asarray(r.time[ph][:T], dtype=float).ravel()
        for c in LEDGER:
            if c in r.mpi_bytes:
                cols[f"mpi_bytes_{c}"] = np.asarray(r.mpi_bytes[c][:T], dtype=float).ravel()
        parts.append(pd.DataFrame(cols))
    return _frame(parts, (*RUN_COLUMNS, "iteration"))


def _last_finite(v) -> float:
    v = np.asarray(v, dtype=float)
    ok = np.flatnonzero(np.isfinite(v))
    return float(v[ok[-1]]) if ok.size else float("nan")


def runs_frame(runs):
    """One row per run: :data:`RUN_COLUMNS`, ``status``, ``stop_reason``, ``rows`` (recorded),
    ``iterations`` (of the last row), ``final_<series>`` (the last finite value of ``loss``,
    ``suboptimality``, ``dist_to_opt``, ``grad_norm_sq``, ``accuracy``), ``model_bits_per_worker``
    and ``wire_bits_per_worker`` (cumulative at the end, mean over workers), ``wire_bits_up_total``
    (all workers), ``bits_down_wire``, ``time_s`` (rank 0's iteration loop, seconds, last finite),
    ``ms_per_iteration``, ``gamma``, ``omega``, ``f_star``, ``step_rule`` (empty where the algorithm
    has none), and the file's provenance (:data:`PROVENANCE`)."""
    pd = _pd()
    out = []
    for r in runs:
        T = rows(r)
        row = run_columns(r)
        row.update(status=r.status, stop_reason=r.attrs.get("stop_reason", ""), rows=T,
                   iterations=int(r.series["iteration"][T - 1]) if T else 0)
        for k in ("loss", "suboptimality", "dist_to_opt", "grad_norm_sq", "accuracy"):
            row[f"final_{k}"] = _last_finite(r.series[k][:T]) if k in r.series else float("nan")
        for k, name in (("bits_up_model", "model_bits_per_worker"), ("bits_up_wire", "wire_bits_per_worker")):
            v = r.series.get(k)
            row[name] = float(np.mean(v[T - 1])) if v is not None and T and v.shape[1] else 0.0
        up = r.series.get("bits_up_wire")
        row["wire_bits_up_total"] = float(np.sum(up[T - 1])) if up is not None and T else float("nan")
        for k in ("bits_down_wire", "bits_down_model"):
            row[k] = float(r.series[k][T - 1]) if k in r.series and T else float("nan")
        it = r.time.get("iter")
        row["time_s"] = _last_finite(it[:T, 0]) if it is not None and T else float("nan")
        row["ms_per_iteration"] = 1e3 * row["time_s"] / row["iterations"] if row["iterations"] else float("nan")
        for k in ("gamma", "omega", "f_star"):
            row[k] = r.attrs.get(k, float("nan"))
        row["step_rule"] = r.attrs.get("step_rule", "")
        for k in PROVENANCE:
            v = r.file_attrs.get(k, "")
            row[k] = ",".join(map(str, v)) if isinstance(v, list) else v
        out.append(row)
    return pd.DataFrame(out, columns=list(out[0]) if out else list(RUN_COLUMNS))


def phases_frame(runs):
    """Per-rank phase times, one row per run × rank × phase (``grad``, ``compress``, ``comm_up``,
    ``server``, ``comm_down``, ``iter``): :data:`RUN_COLUMNS`, ``rank``, ``role`` (``worker``, or
    ``server`` for a dedicated server rank), ``phase``, ``iterations`` (at the last recorded row with
    finite times), ``seconds`` (cumulative time of that rank in that phase up to there) and
    ``ms_per_iteration`` (= 1000 · seconds / iterations), and, when the run kept per-iteration times,
    ``ms_median`` and ``ms_p99`` over its iterations."""
    pd = _pd()
    out = []
    for r in runs:
        T = rows(r)
        if not T or "iter" not in r.time:
            continue
        ident = run_columns(r)
        ok = np.flatnonzero(np.isfinite(np.asarray(r.time["iter"][:T, 0], dtype=float)))
        if ok.size == 0:
            continue
        t = ok[-1]
        k = int(r.series["iteration"][t])
        P = r.time["iter"].shape[1]
        wr = set(np.asarray(r.workers.get("rank", np.arange(P)), dtype=int).tolist())
        for ph in PHASES:
            if ph not in r.time:
                continue
            per_it = r.per_iteration.get(ph)
            for rank in range(P):
                sec = float(r.time[ph][t, rank])
                row = {**ident, "rank": rank, "role": "worker" if rank in wr else "server", "phase": ph,
                       "iterations": k, "seconds": sec, "ms_per_iteration": 1e3 * sec / k if k else float("nan")}
                if per_it is not None and len(per_it):
                    v = np.asarray(per_it[:, rank], dtype=float)
                    row["ms_median"] = 1e3 * float(np.median(v))
                    row["ms_p99"] = 1e3 * float(np.percentile(v, 99))
                out.append(row)
    return pd.DataFrame(out) if out else pd.DataFrame(
        columns=[*RUN_COLUMNS, "rank", "role", "phase", "iterations", "seconds", "ms_per_iteration"])


#: the measures :func:`spread_frame` summarizes (columns of :func:`runs_frame` / time to target)
SPREAD_MEASURES = ("ms_per_iteration", "iterations", "time_to_eps_s")


def time_to_eps(run, eps: float, metric: str = "suboptimality") -> float:
    """Rank 0's loop time (seconds) at the first recorded row where ``metric`` <= ``eps`` (NaN: never)."""
    T = rows(run)
    v = np.asarray(run.series.get(metric, [])[:T], dtype=float)
    hit = np.flatnonzero(v <= eps)
    it = run.time.get("iter")
    return float(it[hit[0], 0]) if hit.size and it is not None else float("nan")


def spread_frame(runs, eps: float | None = None, metric: str = "suboptimality", over: str = "auto"):
    """One row per configuration: the runs that differ only in ``repeat`` and/or ``seed``, summarized by
    the median and 95 % interval of :data:`SPREAD_MEASURES` (:mod:`hpcgc.analysis.spread`: order
    statistics of the median; for fewer than 6 runs [min, max] with its actual coverage).

    ``over``: ``"repeats"`` (group also by seed: the machine's spread), ``"seeds"`` (group also by
    repeat: the method's), ``"all"`` (both together) or ``"auto"`` (= ``"all"``). Columns:
    :data:`RUN_COLUMNS` of the group's first run (``run_id``, ``seed``, ``repeat`` of it), ``over``
    (what the group's runs differ in: repeats, seeds, repeats x seeds, or one run), ``runs``,
    ``repeats``, ``seeds``, and per measure ``<m>_median``, ``_lo``, ``_hi``, ``_n`` (finite values:
    runs that reached ``eps`` for the time to target), ``_coverage``. ``time_to_eps_s`` needs ``eps``
    (NaN without)."""
    from ..analysis.spread import columns, spread
    pd = _pd()
    rf = runs_frame(runs)
    if rf.empty:
        return pd.DataFrame(columns=[*RUN_COLUMNS, "over", "runs"])
    rf["time_to_eps_s"] = [time_to_eps(r, eps, metric) if eps is not None else float("nan") for r in runs]
    rf["_config"] = [_config_key(r) for r in runs]
    keys = ["_config"] + (["seed"] if over == "repeats" else ["repeat"] if over == "seeds" else [])
    out = []
    for _, g in rf.groupby(keys, sort=False):
        reps, seeds = g["repeat"].nunique(), g["seed"].nunique()
        row = {c: g.iloc[0][c] for c in RUN_COLUMNS}
        row.update(over=("repeats x seeds" if reps > 1 and seeds > 1 else "seeds" if seeds > 1 else
                         "repeats" if reps > 1 else "one run"), runs=len(g), repeats=reps, seeds=seeds)
        for m in SPREAD_MEASURES:
            row.update(columns(m, spread(g[m].to_numpy(dtype=float))))
        out.append(row)
    return pd.DataFrame(out)


def _config_key(run) -> str:
    """The run's resolved configuration without its seed, ``run.repeats`` and the experiment's name:
    runs with equal keys differ only in seed and repeat (and may come from different files)."""
    import json
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in run.config.items() if k != "name"}
    cfg.get("run", {}).pop("seed", None)
    cfg.get("run", {}).pop("repeats", None)
    ident = {c: run_columns(run)[c] for c in ("algorithm", "compressor", "collective", "allocation", "dataset",
                                             "partition", "problem", "ranks", "server", "label")}
    return json.dumps([cfg, ident], sort_keys=True, default=str)
