"""The analysis command on results produced here by the real benchmark under mpiexec, the network
projection against hand-computed times, and bad input (empty directory, other schema versions,
killed and truncated files)."""
from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgc import results
from hpcgc.analysis import projection as proj
from hpcgc.analysis import report
from tests.conftest import ROOT, mpi_env, run_mpi, show

EPS = 1e-4     # DIANA reaches it within the iterations below, DCGD stalls above it (label-sorted split)

EXPERIMENT = """
name = "analysis-test"
[data]
dataset = "breast-cancer"
partition = "label-sorted"
[problem]
kind = "logreg"
l2 = 0.1
[run]
iterations = {iterations}
eval_every = 10
tolerance = 1e-12
[sweep]
algorithm = ["dcgd", "diana"]
compressor = ["quant:p=inf,block=8"]
seed = {seeds}
"""




@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """Two real results files: DCGD and DIANA on 2 ranks × 2 seeds, DIANA on 3 ranks × 1 seed (so
    that there is a scaling figure)."""
    d = tmp_path_factory.mktemp("analysis-results")
    cfg = d / "exp.toml"
    cfg.write_text(EXPERIMENT.format(iterations=300, seeds="[0, 1]"))
    files = {}
    for ranks, extra in ((2, []), (3, ["--set", "sweep.seed=[0]", "--set", "sweep.algorithm=['diana']"])):
        out = d / "results" / f"n{ranks}.h5"
        p = run_mpi(ranks, ["-m", "hpcgc.bench", "--config", str(cfg), *extra, "-o", str(out), "-q"], timeout=240)
        assert p.returncode == 0, show(p)
        files[ranks] = out
    return d / "results", files


@pytest.fixture(scope="module")
def made(produced, tmp_path_factory):
    res_dir, files = produced
    out = tmp_path_factory.mktemp("report")
    r = report.report([res_dir], out, eps=EPS, log=lambda *_: None)
    return out, r, files


def _csv(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def _num(s):
    return float(s) if s != "" else float("nan")


def _first(v, eps):
    hit = np.flatnonzero(np.isfinite(v) & (v <= eps))
    return int(hit[0]) if hit.size else None


def test_report_writes_nonempty_figures(made):
    out, _, _ = made
    for stem in ("convergence-", "accuracy-", "projection-", "phases", "scaling"):
        pngs = sorted(out.glob(f"{stem}*.png"))
        assert pngs, f"no {stem}*.png in {sorted(p.name for p in out.iterdir())}"
        for png in pngs:
            data = png.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png
            pdf = png.with_suffix(".pdf")
            assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000, pdf
    # two panels (2 and 3 ranks): one convergence figure each
    assert len(list(out.glob("convergence-*.png"))) == 2
    for name in ("table.csv", "table.md", "runs.csv", "projection.csv", "projection.md", "report.md"):
        assert (out / name).stat().st_size > 100, name


def test_run_table_matches_results_files(made):
    out, _, files = made
    rows = {(r["file"], r["run_id"]): r for r in _csv(out / "runs.csv")}
    n = 0
    for path in files.values():
        for run in results.load(path):
            row = rows[(str(path), run.run_id)]
            s = run.series
            assert int(row["ranks"]) == run.time["iter"].shape[1]
            assert row["status"] == run.status == "completed"
            assert int(row["iterations"]) == int(s["iteration"][-1])
            assert _num(row["final_suboptimality"]) == s["suboptimality"][-1]
            assert _num(row["final_dist_to_opt"]) == s["dist_to_opt"][-1]
            assert _num(row["final_accuracy"]) == s["accuracy"][-1]
            assert _num(row["model_bits_per_worker"]) == pytest.approx(s["bits_up_model"][-1].mean(), rel=1e-15)
            crossed = run.workers["crossed_network"]
            assert _num(row["wire_bytes_up"]) == pytest.approx(s["bits_up_wire"][-1][crossed].sum() / 8, rel=1e-15)
            assert _num(row["time_s"]) == run.time["iter"][-1, 0]
            t = _first(s["suboptimality"], EPS)
            if run.attrs["algorithm"] == "diana":
                assert t is not None, "DIANA should reach the test's ε"
            if t is None:
                assert row["bits_to_eps"] == row["iterations_to_eps"] == row["time_to_eps_s"] == ""
            else:
                assert int(row["iterations_to_eps"]) == s["iteration"][t]
                assert _num(row["bits_to_eps"]) == pytest.approx(s["bits_up_model"][t].mean(), rel=1e-15)
                assert _num(row["time_to_eps_s"]) == run.time["iter"][t, 0]
            n += 1
    assert n == len(rows) == 5


def test_method_table_aggregates_seeds_and_ratios(made):
    out, _, files = made
    runs = results.load(files[2])
    table = {(r["method"], int(r["ranks"])): r for r in _csv(out / "table.csv")}
    md = (out / "table.md").read_text()
    for alg in ("dcgd", "diana"):
        mine = [r for r in runs if r.attrs["algorithm"] == alg]
        assert len(mine) == 2
        row = table[(f"{alg} quant:p=inf,block=8", 2)]
        assert row["seeds"] == "2"
        finals = [r.series["suboptimality"][-1] for r in mine]
        assert _num(row["final_suboptimality"]) == pytest.approx(math.exp(np.mean(np.log(finals))), rel=1e-12)
        ts = [_first(r.series["suboptimality"], EPS) for r in mine]
        if all(t is not None for t in ts):
            assert row["reached"] == "2/2"
            assert _num(row["bits_to_eps"]) == pytest.approx(
                np.mean([r.series["bits_up_model"][t].mean() for r, t in zip(mine, ts)]), rel=1e-12)
            assert _num(row["iterations_to_eps"]) == pytest.approx(
                np.mean([r.series["iteration"][t] for r, t in zip(mine, ts)]))
        else:
            assert row["bits_to_eps"] == ""
        assert f"| {alg} quant:p=inf,block=8 | 2 |" in md
    # default baseline: the first method whose seeds all reach ε (DIANA here) -> its ratios are 1
    diana = table[("diana quant:p=inf,block=8", 2)]
    assert _num(diana["bits_ratio"]) == 1.0 and _num(diana["time_ratio"]) == 1.0


def test_cli_baseline_and_errors(produced, tmp_path, capsys):
    """``python -m analysis.report`` as a process (its entry point); the bad --baseline through the
    same ``main`` in this process (a second process would only pay the imports again)."""
    _, files = produced
    cmd = [sys.executable, "-m", "analysis.report", str(files[3]), "-o", str(tmp_path / "r"),
           "--baseline", "diana:quant:p=inf,block=8", "--eps", "1e-3", "--format", "png"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=mpi_env(), timeout=180)
    assert p.returncode == 0, show(p)
    assert "| diana quant:p=inf,block=8 | 3 |" in p.stdout
    assert (tmp_path / "r" / "convergence.png").stat().st_size > 10_000      # one panel: no suffix
    assert not list((tmp_path / "r").glob("*.pdf"))
    capsys.readouterr()
    assert report.main([*cmd[3:-2], "--baseline", "adam:zip"]) == 2
    assert "--baseline 'adam:zip' matches no method" in capsys.readouterr().err


def test_bad_inputs(produced, tmp_path):
    _, files = produced
    (tmp_path / "empty").mkdir()
    with pytest.raises(report.AnalysisError, match="no results files"):
        report.collect([tmp_path / "empty"])
    assert report.main([str(tmp_path / "empty"), "-o", str(tmp_path / "o")]) == 2
    with pytest.raises(report.AnalysisError, match="no such file"):
        report.collect([tmp_path / "missing.h5"])

    v2 = tmp_path / "v2.h5"
    shutil.copy(files[3], v2)
    with h5py.File(v2, "r+") as f:
        f.attrs["schema_version"] = 2
    with pytest.raises(report.AnalysisError, match="schema version 2; this hpcgc reads version 1"):
        report.collect([v2])

    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(files[3].read_bytes()[:5000])
    # the good file is used, the others are named and skipped; --strict refuses
    coll = report.collect([files[3], v2, foreign, cut])
    assert len(coll.runs) == 1 and len(coll.skipped) == 3
    notes = "\n".join(coll.notes)
    assert "not an hpcgc results file" in notes and "truncated or not an HDF5 file" in notes
    with pytest.raises(report.AnalysisError, match="--strict"):
        report.collect([files[3], cut], strict=True)


def test_killed_file_uses_what_is_complete(produced, tmp_path, capsys):
    """A job killed in its second run: the file stays .partial (complete = false), the second run's
    status is 'running' and its datasets stop mid-way (one a row shorter than the others)."""
    _, files = produced
    part = tmp_path / "killed.h5.partial"
    shutil.copy(files[2], part)
    with h5py.File(part, "r+") as f:
        f.attrs["complete"] = False
        g = f["runs"][sorted(f["runs"])[1]]
        g.attrs["status"] = "running"
        for name, ds in g.items():
            if isinstance(ds, h5py.Dataset) and ds.ndim and name != "x_final":
                ds.resize((12,) + ds.shape[1:])
        for ds in g["time"].values():
            ds.resize((11,) + ds.shape[1:])
        for grp in ("workers", "per_iteration"):
            del g[grp]
    out = tmp_path / "rep"
    assert report.main([str(part), "-o", str(out), "--eps", str(EPS), "--format", "png"]) == 0
    err = capsys.readouterr().err
    assert "unfinished file (complete = false" in err and "3 finished run(s) of 4" in err
    assert "did not finish (status 'running'); using its 11 recorded row(s)" in err
    rows = _csv(out / "runs.csv")
    assert [r["status"] for r in rows] == ["completed", "truncated", "completed", "completed"]
    assert int(rows[1]["iterations"]) == 100           # row 10 of the truncated run
    assert "did not finish" in (out / "report.md").read_text()
    assert (out / "convergence.png").stat().st_size > 10_000


# -- projection ------------------------------------------------------------------------------------
def test_alpha_beta_two_messages_by_hand():
    net = proj.Network.gbps(1, 10.0)                   # α = 10 µs, β = 1 Gb/s = 1.25e8 B/s
    assert net.bandwidth == 1.25e8 and net.latency == 1e-5
    # linear gather at the root: two messages of 1000 and 3000 bytes, received one after the other
    assert proj.gather_time([1000, 3000], net) == pytest.approx(2 * 1e-5 + 4000 / 1.25e8, rel=1e-12)  # 5.2e-5 s
    assert proj.gather_time([1000, 3000], net) == pytest.approx(5.2e-5, rel=1e-12)
    # binomial broadcast of 800 bytes over 5 ranks: ⌈log2 5⌉ = 3 rounds
    assert proj.bcast_time(800, 5, net) == pytest.approx(3 * (1e-5 + 800 / 1.25e8), rel=1e-12)
    assert proj.bcast_time(800, 1, net) == 0.0
    assert proj.network("10").describe() == "10 Gb/s (α = 10 µs, β = 10 Gb/s)"
    assert proj.network("25", latency_us=1).latency == 1e-6
    with pytest.raises(ValueError):
        proj.network("fast")


def _toy_run(per_iteration: bool):
    """Two ranks, rank 0 is server and worker: per iteration rank 1 sends two messages across the
    network (its 4-byte length and a 96-byte payload), rank 0 broadcasts d + 1 = 10 float64."""
    grad = np.array([[1.0e-3, 2.0e-3], [1.0e-3, 1.0e-3]])          # (iterations, ranks) seconds
    comp = np.array([[5.0e-4, 1.0e-4], [2.0e-3, 1.0e-4]])
    serv = np.array([[3.0e-4, 0.0], [3.0e-4, 0.0]])

    def cum(a):                                                     # rows at iterations 0, 1, 2
        return np.vstack([np.zeros(2), np.cumsum(a, axis=0)])

    series = {
        "iteration": np.array([0, 1, 2]),
        "suboptimality": np.array([1.0, 1e-3, 1e-9]),
        "bits_up_model": np.array([[0, 0], [700, 700], [1400, 1400]], float),
        "bits_up_wire": 8.0 * np.array([[0, 0], [100, 100], [200, 200]]),
        "bits_down_wire": 8.0 * np.array([0, 80, 160]),
    }
    time = {"grad": cum(grad), "compress": cum(comp), "server": cum(serv),
            "iter": cum(grad + comp + serv + 1e-3)}
    pi = {"grad": grad, "compress": comp, "server": serv} if per_iteration else {}
    workers = {"rank": np.array([0, 1]), "crossed_network": np.array([False, True])}
    return results.Run("toy", {"n_workers": 2}, {}, series, time, workers, pi)


def test_projection_reproduces_hand_computed_toy():
    a, b = 1e-5, 1e6                               # α = 10 µs, β = 1 MB/s
    net = proj.Network("toy", a, b)
    run = _toy_run(per_iteration=True)
    c = proj.costs(run)
    assert c.compute_exact and c.ranks == 2
    # iteration 1: compute = max(1e-3 + 5e-4, 2e-3 + 1e-4) + 3e-4 = 2.4e-3
    #   up: rank 1's two messages, 4 + 96 bytes: 2α + 100/β = 1.2e-4; down: 1 round, α + 80/β = 9e-5
    it1 = 2.4e-3 + (2 * a + 100 / b) + (a + 80 / b)
    assert it1 == pytest.approx(2.61e-3, rel=1e-12)
    # iteration 2: compute = max(1e-3 + 2e-3, 1e-3 + 1e-4) + 3e-4 = 3.3e-3; same messages
    it2 = 3.3e-3 + 1.2e-4 + 9e-5
    assert proj.project(c, net) == pytest.approx([0.0, it1, it1 + it2], rel=1e-12)
    up, down = proj.network_time(c, net)
    assert up == pytest.approx([0, 1.2e-4, 2.4e-4], rel=1e-12) and down == pytest.approx([0, 9e-5, 1.8e-4], rel=1e-12)
    # time to ε = 1e-6: reached at row 2 (iteration 2)
    assert proj.time_to_eps(run, 1e-6, net) == pytest.approx(it1 + it2, rel=1e-12)
    assert proj.time_to_eps(run, 1e-6, None) == pytest.approx(run.time["iter"][2, 0])
    assert math.isnan(proj.time_to_eps(run, 1e-12, net))
    # without per-iteration times: the cumulative totals' max over ranks (a lower bound)
    c2 = proj.costs(_toy_run(per_iteration=False))
    assert not c2.compute_exact
    assert c2.compute[2] == pytest.approx(max(2e-3 + 2.5e-3, 3e-3 + 2e-4) + 6e-4, rel=1e-12)
    # tree gather: ⌈log2 2⌉ = 1 latency round per collective, 2 collectives
    up_t, _ = proj.network_time(c, net, "tree")
    assert up_t[1] == pytest.approx(2 * a + 100 / b, rel=1e-12)


def test_projection_of_real_runs_follows_the_model(produced):
    _, files = produced
    net = proj.PRESETS["10"]
    for run in results.load(files[3]):
        c = proj.costs(run)
        P, k = 3, run.series["iteration"]
        crossed = run.workers["crossed_network"]
        up_bytes = run.series["bits_up_wire"][:, crossed].sum(axis=1) / 8
        expect_up = k * (2 * (P - 1)) * net.latency + up_bytes / net.bandwidth
        expect_down = 2 * (k * net.latency + run.series["bits_down_wire"] / 8 / net.bandwidth)   # ⌈log2 3⌉ = 2
        assert proj.project(c, net) - c.compute == pytest.approx(expect_up + expect_down, rel=1e-9)
        assert c.compute_exact
        per = run.per_iteration
        expect_compute = np.sum(np.max(per["grad"].astype(float) + per["compress"], axis=1) + per["server"][:, 0])
        assert c.compute[-1] == pytest.approx(expect_compute, rel=1e-9)
        assert run.series["bits_down_wire"][-1] / 8 == k[-1] * (run.attrs["d"] + 1) * 8


def test_project_cli(produced, tmp_path):
    _, files = produced
    p = subprocess.run([sys.executable, "-m", "analysis.project", str(files[2]), "--eps", str(EPS),
                        "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=mpi_env(), timeout=120)
    assert p.returncode == 0, show(p)
    assert "time_to_eps_s@1Gb/s" in p.stdout and "time_to_eps_s@100Gb/s" in p.stdout
    rows = _csv(tmp_path / "projection.csv")
    assert {r["method"] for r in rows} == {"dcgd quant:p=inf,block=8", "diana quant:p=inf,block=8"}
    diana = next(r for r in rows if r["method"].startswith("diana"))
    t1, t100 = _num(diana["time_to_eps_s@1Gb/s"]), _num(diana["time_to_eps_s@100Gb/s"])
    assert t1 > t100 > 0
