"""The scale-check table (issue 30 part 4; hpcgc/analysis/campaign.py, hpcgc/analysis/scale_check.py,
the ``scale-check`` builder of ``python -m hpcgc.docs_tables``): a campaign directory laid out as
``jobs/scale-check.sh`` writes it (one ``hpcgc breakeven`` report directory per setting and target,
its ``check.csv`` and ``what.txt``) is generated here; the combined ``check-all.csv`` and every cell
of the table are checked by hand (median [min, max] over repeats, the ratio, marks for a run that
missed the target or a ratio beyond ±25 %); the builder regenerates a documented table from it (with
a real results file for the provenance: tests/golden/experiment.toml run on 2 ranks). The driver's ``--help`` and
bad input (before any cluster is built)."""
from __future__ import annotations

import csv
import subprocess

from hpcgc import docs_tables as dt
from hpcgc.analysis import campaign, scale_check
from tests.conftest import ROOT, run_mpi, show

CHECK_HEAD = ("panel", "method", "collective", "ranks", "topology", "nodes", "ranks_per_node", "run_id", "up_to",
              "iterations", "measured_s", "predicted_s", "ratio", "mark")


def _report(camp, name, what, rows):
    d = camp / name
    d.mkdir(parents=True)
    (d / "what.txt").write_text(what)
    with open(d / "check.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CHECK_HEAD)
        w.writerows(rows)


def _row(method, collective, run, up_to, its, meas, pred, topology="flat", nodes=4, rpn=1):
    return ("p", method, collective, nodes * rpn, topology, nodes, rpn, run, up_to, its, meas, pred, meas / pred, "")


def _campaign(camp):
    tags = "setting=emu-10mbit-4x1\nn=4\nexperiment=scale-check\ntarget={}\nrate=10mbit\ncluster_nodes=4\n" \
           "cluster_ranks_per_node=1\n"
    _report(camp, "emu-10mbit-4x1-grad1e-2", tags.format("grad1e-2"), [
        _row("fp32", "allreduce", "000-r0", "target", 20, 2.0, 2.0),
        _row("fp32", "allreduce", "000-r1", "target", 20, 3.0, 2.0),
        _row("fp32", "allreduce", "000-r2", "target", 20, 2.2, 2.0),
        _row("ef", "allgather", "002", "last row (target not reached)", 50, 1.0, 0.5)])
    hier = "setting=emu-1gbit-2x2-hier\nn=4\nexperiment=does-it-pay\ntarget=grad1e-4\nrate=1gbit\n" \
           "cluster_nodes=2\ncluster_ranks_per_node=2\n"
    _report(camp, "emu-1gbit-2x2-hier-grad1e-4", hier,
            [_row("fp16", "allreduce", "005", "target", 30, 1.1, 1.0, "hierarchical", 2, 2)])
    _report(camp, "shm-n4-does-it-pay-grad1e-2", "shm\n4\ndoes-it-pay\ngrad1e-2\n",      # does-it-pay.sh's layout
            [_row("fp32", "allreduce", "000", "target", 25, 1.0, 1.0)])


def test_combine_and_the_table_by_hand(tmp_path):
    camp = tmp_path / "sc"
    _campaign(camp)
    assert campaign.combine(camp) == {"check": 6}
    with open(camp / "check-all.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["setting"] for r in rows] == ["emu-10mbit-4x1"] * 4 + ["emu-1gbit-2x2-hier", "shm"]
    assert rows[4]["cluster_ranks_per_node"] == "2" and rows[4]["topology"] == "hierarchical"
    assert rows[5]["experiment"] == "does-it-pay" and rows[5]["n"] == "4" and rows[5]["rate"] == ""
    table = scale_check.rows(camp)
    assert table[0] == list(scale_check.COLUMNS)
    body = {(r[0], r[7]): r for r in table[1:]}
    assert len(table) == 5
    fp32 = body[("emu-10mbit-4x1", "fp32")]
    assert fp32 == ["emu-10mbit-4x1", "4", "1", "10mbit", "flat", "scale-check", "grad1e-2", "fp32", "allreduce",
                    "20", "2.2 [2, 3]", "2", "1.10 [1.00, 1.50]", "OFF (1/3 runs beyond ±25%)", "–", "–"]
    ef = body[("emu-10mbit-4x1", "ef")]
    assert ef[9] == "50 (not reached)" and ef[10] == "1" and ef[12] == "2.00"
    assert ef[13] == "not reached; OFF (1/1 runs beyond ±25%)"
    hier = body[("emu-1gbit-2x2-hier", "fp16")]
    assert hier[1:5] == ["2", "2", "1gbit", "hierarchical"] and hier[12] == "1.10" and hier[13] == "ok"
    md = scale_check.markdown(table)
    assert md.count("\n") == 5 and md.startswith("| setting | nodes |")
    assert scale_check.main([str(tmp_path / "none")]) == 2


def test_the_builder_regenerates_a_documented_table(tmp_path):
    camp = tmp_path / "sc"
    _campaign(camp)
    campaign.combine(camp)
    p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(ROOT / "tests" / "golden" / "experiment.toml"),
                    "-o", str(camp / "emu-10mbit-4x1.h5"), "-q"])                          # the provenance
    assert p.returncode == 0, show(p)
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n")
    meta = {k: "none" for k in dt.REQUIRED} | {"source": "placeholder", "builder": {"kind": "scale-check"}}
    dt.write_table("scale-check/check", [list(scale_check.COLUMNS)], meta, root)
    body = dt.render("scale-check/check", root)
    assert "no data yet" in body
    (root / "docs" / "scale-check.md").write_text(f"x\n<!-- table: scale-check/check -->\n{body}<!-- /table -->\n")
    assert dt.check(root) == []
    dt.regenerate("scale-check/check", [camp], root, warn=lambda m: None)
    rows, meta = dt.read_table("scale-check/check", root)
    assert rows == scale_check.rows(camp) and meta["source"] == "results"
    dt.render_all(root)
    assert dt.check(root) == [] and "2.2 [2, 3]" in (root / "docs" / "scale-check.md").read_text()


def test_the_driver_help_and_bad_input():
    sh = ROOT / "jobs" / "scale-check.sh"
    p = subprocess.run(["bash", str(sh), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "SC_NODES" in p.stdout and "SC_HIER_GRID" in p.stdout and "removed" in p.stdout
    p = subprocess.run(["bash", str(sh), "--bogus"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown argument '--bogus'" in p.stderr
