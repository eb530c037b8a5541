"""Every documented table is regenerated from its kept data file (docs/data/), and the command that
rebuilds a data file from results files works on a real run and refuses another experiment's.

``hpcgc.docs_tables``; docs/data/README.md."""
from __future__ import annotations

import json
import shutil

import h5py
import pytest

from hpcgc import docs_tables as dt
from tests.conftest import ROOT, run_mpi, show


def test_every_documented_table_equals_its_data_file():
    problems = dt.check(ROOT)
    assert problems == [], "\n".join(problems)
    shown = dt.markers(ROOT)
    # the documents this issue converted keep their tables in docs/data/
    for doc in ("docs/diana-experiments.md", "docs/does-it-pay.md", "docs/dagc.md", "docs/micro.md",
                "docs/collectives.md", "docs/performance.md"):
        assert any(ROOT / doc in docs for docs in shown.values()), f"{doc}: no marked table"
    for name in dt.tables(ROOT):
        _, meta = dt.read_table(name, ROOT)
        assert all(str(meta[k]) for k in dt.REQUIRED), (name, meta)


def _mini_root(tmp_path, meta: dict, rows=(("a", "b"), ("1", "2"))):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n")
    dt.write_table("exp/t", [list(r) for r in rows], meta, root)
    body = dt.render("exp/t", root)
    (root / "docs" / "page.md").write_text(f"text\n<!-- table: exp/t -->\n{body}<!-- /table -->\nmore\n")
    return root


META = {k: "x" for k in dt.REQUIRED} | {"source": "transcribed"}


def test_check_fails_when_the_text_differs_and_render_fixes_it(tmp_path):
    root = _mini_root(tmp_path, META)
    assert dt.check(root) == []
    page = root / "docs" / "page.md"
    page.write_text(page.read_text().replace("| 1 | 2 |", "| 1 | 3 |"))      # a hand edit of a number
    assert any("exp/t differs" in p for p in dt.check(root))
    assert dt.main(["--root", str(root), "check"]) == 1
    assert dt.main(["--root", str(root), "render"]) == 0
    assert dt.check(root) == [] and "| 1 | 2 |" in page.read_text()
    (root / "docs" / "data" / "exp" / "u.csv").write_text("a\n1\n")            # data no document shows
    (root / "docs" / "data" / "exp" / "u.json").write_text(json.dumps({"source": "x"}))
    problems = dt.check(root)
    assert any("exp/u.csv: shown by no document" in p for p in problems)
    assert any("exp/u.json: missing" in p for p in problems)


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dt") / "golden.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(ROOT / "tests" / "golden" / "experiment.toml"),
                    "-o", str(out)])
    assert p.returncode == 0, show(p)
    return out


BUILDER = {"experiment": "golden", "builder": {"columns": [
    {"head": "method", "field": "method"},
    {"head": "ω", "field": "attr:omega", "format": ".3g"},
    {"head": "iterations", "field": "iterations"},
    {"head": "f − f*", "field": "final_suboptimality", "format": ".2e"},
    {"head": "iterations to 0.1", "field": "iterations_to_eps", "eps": 0.1, "missing": "—"},
    {"head": "bits to 1e-30", "field": "bits_to_eps", "eps": 1e-30, "missing": "—"}]}}


def test_regenerate_from_a_real_results_file(tmp_path, golden_run):
    root = _mini_root(tmp_path, META | BUILDER)
    warnings = []
    dt.regenerate("exp/t", [golden_run], root, warn=warnings.append)
    rows, meta = dt.read_table("exp/t", root)
    assert rows[0] == ["method", "ω", "iterations", "f − f*", "iterations to 0.1", "bits to 1e-30"]
    assert [r[0] for r in rows[1:]] == ["dcgd + qsgd:s=2,bucket=0", "dcgd + randk:k=6",
                                        "diana + qsgd:s=2,bucket=0", "diana + randk:k=6"]
    assert all(r[2] == "30" and r[5] == "—" for r in rows[1:])
    with h5py.File(golden_run) as f:
        assert meta["commit"] == f.attrs["git_commit"] and meta["ranks"] == 2
        assert meta["mpi"] == f.attrs["mpi_library_version"] and meta["command"] == f.attrs["command_line"]
    assert meta["source"] == "results" and meta["cpu"] and "regenerate --table exp/t" in meta["regenerated_with"]
    assert dt.check(root) != []                 # the data changed: the page must be rendered again
    dt.render_all(root)
    assert dt.check(root) == [] and "dcgd + randk:k=6" in (root / "docs" / "page.md").read_text()


def test_regenerate_refuses_another_experiment_and_warns_of_another_commit(tmp_path, golden_run):
    root = _mini_root(tmp_path, META | BUILDER | {"experiment": "diana-paper-baselines"})
    with pytest.raises(dt.TableError, match="diana-paper-baselines.*'golden'.*refusing"):
        dt.regenerate("exp/t", [golden_run], root)
    assert dt.main(["--root", str(root), "regenerate", "--table", "exp/t", "--from", str(golden_run)]) == 2
    other = tmp_path / "other-commit.h5"
    shutil.copy(golden_run, other)
    with h5py.File(other, "r+") as f:
        f.attrs["git_commit"] = "0123456789abcdef"
    root = _mini_root(tmp_path / "b", META | BUILDER)
    warnings = []
    dt.regenerate("exp/t", [other], root, warn=warnings.append)
    assert any("0123456789abcdef" in w and "checkout" in w for w in warnings), warnings
    transcribed = _mini_root(tmp_path / "c", META)
    with pytest.raises(dt.TableError, match="no 'builder'"):
        dt.regenerate("exp/t", [golden_run], transcribed)


def test_regenerate_the_dagc_table_kind(tmp_path, golden_run):
    """The DAGC comparison's table (hpcgc.analysis.dagc_table) as a builder: any results file with
    an accuracy series works; here the golden experiment's, target 50 %."""
    root = _mini_root(tmp_path, META | {"experiment": "golden", "builder": {"kind": "dagc", "target": 0.5}})
    dt.regenerate("exp/t", [golden_run], root, warn=lambda m: None)
    rows, meta = dt.read_table("exp/t", root)
    assert rows[0][:3] == ["partition", "method", "reached 50%"]
    # grouped by partition and label (here the compressor): DCGD's and DIANA's runs pooled as seeds are
    assert [r[1:3] for r in rows[1:]] == [["qsgd:s=2,bucket=0", "2/2"], ["randk:k=6", "2/2"]]
    assert all(len(r) == len(rows[0]) for r in rows) and meta["ranks"] == 2
