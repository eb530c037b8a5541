"""One small real experiment (2 algorithms × 2 compressors, ``mpiexec -n 4``) read three ways: the
pandas frames against ``results.load`` value by value, ``hpcgc report`` run from a directory
outside the clone, and its ``report.html`` opened in a real headless Chromium (no console errors,
every image rendered, a screenshot kept as a test artifact).

The screenshot goes to ``$HPCGC_TEST_ARTIFACTS`` (default ``<clone>/test-artifacts/``):
``report-html-screenshot.png`` and ``report-html-check.json`` (what the page reported).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcgc import results
from hpcgc.results import PHASES
from tests.conftest import ROOT, mpi_env, need, run_mpi, show

ARTIFACTS = Path(os.environ.get("HPCGC_TEST_ARTIFACTS", ROOT / "test-artifacts"))
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]




@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """A 2 × 2 grid (dcgd, diana × qsgd:s=2, randk:k=6) on 4 ranks, 60 iterations."""
    pytest.importorskip("pandas")
    d = tmp_path_factory.mktemp("frames")
    out = d / "results" / "grid.h5"
    p = run_mpi(4, ["-m", "hpcgc.bench", "--set", "sweep.algorithm=['dcgd','diana']",
                    "--set", "sweep.compressor=['qsgd:s=2','randk:k=6']", "--set", "run.iterations=60",
                    "-o", str(out), "-q"], timeout=300)
    assert p.returncode == 0, show(p)
    return out


def test_frames_equal_load_value_by_value(experiment):
    runs = results.load(experiment)
    both = results.load(experiment.parent)               # a directory reads the same runs
    assert [r.run_id for r in both] == [r.run_id for r in runs] and len(runs) == 4
    wide, long = runs.to_frame(), runs.to_frame(workers=True)
    assert set(wide["collective"]) == {"gather"}
    assert {(a, c) for a, c in zip(wide["algorithm"], wide["compressor"])} == \
        {(a, c) for a in ("dcgd", "diana") for c in ("qsgd:s=2,bucket=0", "randk:k=6")}
    checked = 0
    for r in runs:
        w = wide[wide["run_id"] == r.run_id].reset_index(drop=True)
        lf = long[long["run_id"] == r.run_id].reset_index(drop=True)
        T, P = len(r.series["iteration"]), r.time["iter"].shape[1]
        n = r.attrs["n_workers"]
        assert len(w) == T and len(lf) == T * P and P == 4
        for col, attr in (("algorithm", "algorithm"), ("compressor", "compressor"), ("collective", "collective"),
                          ("seed", "seed"), ("dataset", "dataset"), ("partition", "partition"),
                          ("n", "n_workers"), ("d", "d")):
            assert (w[col] == r.attrs[attr]).all(), col
        for k, v in r.series.items():
            if v.ndim == 1:
                np.testing.assert_array_equal(w[k].to_numpy(), v, err_msg=k)
            else:                                              # (T, n) per worker
                assert v.shape == (T, n)
                np.testing.assert_array_equal(w[f"{k}_total"].to_numpy(), v.sum(axis=1), err_msg=k)
                np.testing.assert_array_equal(w[f"{k}_mean"].to_numpy(), v.mean(axis=1), err_msg=k)
                np.testing.assert_array_equal(w[f"{k}_max"].to_numpy(), v.max(axis=1), err_msg=k)
                wr = r.workers["rank"]
                got = lf[k].to_numpy().reshape(T, P)[:, wr]
                np.testing.assert_array_equal(got, v, err_msg=k)
            checked += 1
        for ph, v in r.time.items():
            np.testing.assert_array_equal(lf[f"time_{ph}"].to_numpy().reshape(T, P), v, err_msg=ph)
            np.testing.assert_array_equal(w[f"time_{ph}_rank0"].to_numpy(), v[:, 0], err_msg=ph)
            np.testing.assert_array_equal(w[f"time_{ph}_mean"].to_numpy(), v.mean(axis=1), err_msg=ph)
            checked += 1
        for c, v in r.mpi_bytes.items():
            np.testing.assert_array_equal(lf[f"mpi_bytes_{c}"].to_numpy().reshape(T, P), v, err_msg=c)
            np.testing.assert_array_equal(w[f"mpi_bytes_{c}_total"].to_numpy(), v.sum(axis=1), err_msg=c)
            checked += 1
    assert checked >= 4 * (9 + 2 + 6 + 6)

    rf = runs.runs_frame()
    assert list(rf["run_id"]) == [r.run_id for r in runs]
    for r, (_, row) in zip(runs, rf.iterrows()):
        assert row["status"] == r.status and row["iterations"] == r.series["iteration"][-1]
        assert row["final_suboptimality"] == r.series["suboptimality"][-1]
        assert row["model_bits_per_worker"] == r.series["bits_up_model"][-1].mean()
        assert row["time_s"] == r.time["iter"][-1, 0]
        assert row["git_commit"] == runs.attrs["git_commit"] and row["mpi_library_version"]

    ph = runs.phases_frame()
    assert len(ph) == 4 * 4 * len(PHASES)                      # runs × ranks × phases
    for r in runs:
        for rank in range(4):
            for phase in ("grad", "comm_up", "iter"):
                row = ph[(ph["run_id"] == r.run_id) & (ph["rank"] == rank) & (ph["phase"] == phase)]
                assert float(row["seconds"].iloc[0]) == r.time[phase][-1, rank]
                assert float(row["ms_median"].iloc[0]) == pytest.approx(
                    1e3 * np.median(r.per_iteration[phase][:, rank].astype(float)), rel=1e-12)


def _outside_env(cwd):
    """The environment for commands run outside the clone: without PYTHONPATH when the installed
    hpcgc is this checkout (as after scripts/setup.sh, in CI), so that the installation itself is
    what is tested; else (a venv installed from another checkout) with PYTHONPATH = the clone."""
    env = {k: v for k, v in mpi_env().items() if k != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import hpcgc; print(hpcgc.__file__)"], cwd=cwd, env=env,
                           capture_output=True, text=True)
    installed = where.returncode == 0 and Path(where.stdout.strip()).resolve().parent.parent == ROOT
    return (env, True) if installed else (mpi_env(), False)


def _hpcgc_outside(args, cwd):
    """``hpcgc ARGS`` from ``cwd``: the installed console script when the installed package is this
    checkout, else ``python -m hpcgc``."""
    env, installed = _outside_env(cwd)
    exe = shutil.which("hpcgc", path=str(Path(sys.executable).parent))
    cmd = [exe, *args] if installed and exe else [sys.executable, "-m", "hpcgc", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def html_report(experiment, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    assert ROOT not in outside.parents
    p = _hpcgc_outside(["report", str(experiment.parent), "-o", "rep", "--eps", "1e-2", "--format", "png"],
                       outside)
    assert p.returncode == 0, show(p)
    return outside / "rep"


def test_report_from_outside_the_clone(html_report, tmp_path):
    for name in ("report.html", "report.md", "table.csv", "runs.csv", "phases.png", "convergence.png"):
        assert (html_report / name).stat().st_size > 500, name
    p = subprocess.run([sys.executable, "-c", "import hpcgc.analysis, hpcgc.analysis.report"], cwd=tmp_path,
                       env=_outside_env(tmp_path)[0], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    html = (html_report / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') >= 4             # figures embedded
    assert "src=\"http" not in html and "href=\"http" not in html      # nothing fetched from elsewhere
    for word in ("Provenance of the inputs", "MPICH", "python -m hpcgc.bench", "diana randk:k=6"):
        assert word in html, word


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    if os.environ.get("HPCGC_REQUIRE_BROWSER"):
        pytest.fail("no chromium on PATH although HPCGC_REQUIRE_BROWSER is set (scripts/test.sh installs it)")
    need("no headless chromium", "bash scripts/test.sh installs Debian's chromium as root "
         "(apt-get install chromium)")


CHECK_SCRIPT = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  var t = e.target && e.target.tagName ? ('resource ' + e.target.tagName + ' ' + (e.target.src || e.target.href))
                                       : (e.message || String(e));
  window.__errors.push(t);
}, true);
window.addEventListener('unhandledrejection', function (e) { window.__errors.push('rejection ' + e.reason); });
var __ce = console.error;
console.error = function () { window.__errors.push('console.error ' + Array.from(arguments).join(' '));
                              __ce.apply(console, arguments); };
window.addEventListener('load', function () {
  var imgs = Array.from(document.images).map(function (i) {
    return {alt: i.alt, w: i.naturalWidth, h: i.naturalHeight, complete: i.complete}; });
  var pre = document.createElement('pre');
  pre.id = 'hpcgc-check';
  pre.textContent = JSON.stringify({errors: window.__errors, images: imgs, title: document.title,
                                    tables: document.querySelectorAll('table').length});
  document.body.appendChild(pre);
});
</script>"""


def test_report_html_in_headless_chromium(html_report, tmp_path):
    exe = _browser()
    page = html_report / "report.html"
    # the checker sees the page as the user does: the same file with a script that records errors first
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("<head>", "<head>" + CHECK_SCRIPT, 1))
    base = [exe, *BROWSER_FLAGS, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"]
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-a'}", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, show(dom)
    start = dom.stdout.find('<pre id="hpcgc-check">')
    assert start >= 0, "the page did not finish loading:\n" + show(dom)
    import html as _html
    raw = dom.stdout[start + len('<pre id="hpcgc-check">'):dom.stdout.index("</pre>", start)]
    check = json.loads(_html.unescape(raw))
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln and ("ERROR" in ln or "error" in ln)]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "report-html-check.json").write_text(json.dumps({**check, "console": console}, indent=1))
    assert check["errors"] == [] and console == [], (check["errors"], console)
    assert len(check["images"]) >= 4 and check["tables"] >= 4, check
    bad = [i for i in check["images"] if not (i["complete"] and i["w"] > 0 and i["h"] > 0)]
    assert not bad, f"images that did not render: {bad}"

    shot = ARTIFACTS / "report-html-screenshot.png"
    shot.unlink(missing_ok=True)
    s = subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-b'}", "--window-size=1280,2400",
                        f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert s.returncode == 0 and shot.exists(), show(s)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
