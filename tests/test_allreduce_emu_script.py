"""scripts/allreduce-emu.py (issue 31 target 2's benchmark): its arguments and the report's arithmetic
(medians over rounds with [min, max], the ratio, the verdict against 1.25x) on hand-made rounds; the
measurement itself needs an emulated cluster and runs in ``scripts/measure-performance.sh allreduce-emu``."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("allreduce_emu", ROOT / "scripts" / "allreduce-emu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(r, it, bare, ones, cycle, **phases):
    return {"round": r, "ranks": 4, "iter": it, "bare_ms": bare, "bare_ones_ms": ones, "cycle_ms": cycle,
            "period_ms": bare, "ratio": it / bare, "ratio_ones": it / ones, **phases}


def test_summary_medians_spread_and_verdict():
    m = _script()
    table = {"fp32": [_row(1, 80.0, 60.0, 58.0, 70.0, grad=1.0), _row(2, 90.0, 70.0, 66.0, 75.0, grad=3.0),
                      _row(3, 85.0, 80.0, 60.0, 72.0, grad=2.0)],
             "fp16": [_row(1, 200.0, 100.0, 90.0, 120.0)]}
    head, fp32, fp16 = m.summary(table)
    cell = dict(zip(head, fp32))
    assert cell["rounds"] == "3"
    assert cell["iteration (ms)"] == "85.0 [80.0, 90.0]"
    assert cell["bare, run's values (ms)"] == "70.0 [60.0, 80.0]"
    # the ratio's median is over the rounds' ratios (1.333, 1.286, 1.0625), not iteration median / bare median
    assert cell["ratio"] == "1.29 [1.06, 1.33]"
    assert cell["target 1.25x"] == "not met"
    assert cell["grad (ms)"] == "2.0 [1.0, 3.0]"
    assert cell["wait_up (ms)"] == "nan [nan, nan]"          # a phase the rounds lack is shown as such
    assert dict(zip(head, fp16))["ratio"] == "2.00 [2.00, 2.00]"
    table["fp32"][0]["ratio"] = table["fp32"][1]["ratio"] = 1.25
    assert dict(zip(head, m.summary(table)[1]))["target 1.25x"] == "met"


def test_rounds_need_a_bare_file(tmp_path):
    m = _script()
    with pytest.raises(SystemExit, match="no r<R>-bare.json"):
        m.rounds(tmp_path)
    for name in ("r2-bare.json", "r10-bare.json", "r1-fp32.h5", "x-bare.json"):
        (tmp_path / name).write_text("{}")
    assert m.rounds(tmp_path) == [2, 10]


@pytest.mark.parametrize("argv", [["bare", "--out", "x.json", "--calls", "0"], ["bare"],
                                  ["bare", "--out", "x", "--values", "random"], ["report"]])
def test_bad_arguments_exit_2(argv):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "allreduce-emu.py"), *argv], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert "error:" in p.stderr


def test_measure_performance_lists_the_target():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "measure-performance.sh"), "nonesuch"], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 2
    assert "allreduce-emu" in p.stderr
