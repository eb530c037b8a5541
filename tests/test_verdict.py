"""hpcgc.analysis.verdict: the does-it-pay verdict table from a campaign directory's CSVs (constructed
here: a baseline, a method measurably faster, one not measurably different, one slower, one that
missed the target, one with a single run)."""
from __future__ import annotations

import csv

from hpcgc.analysis import verdict

KEY = {"setting": "emu-1gbit", "n": "4", "experiment": "does-it-pay", "target": "grad1e-4"}


def _write(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def campaign(tmp_path):
    times = {"fp16 run": [1.0, 1.1, 1.2], "fp32 run": [2.0, 2.1, 2.2], "fast": [0.5, 0.6, 0.7],
             "close": [0.9, 1.05, 1.3], "slow": [3.0, 3.1, 3.3], "missed": [9.0, 9.0, 9.0], "single": [0.1]}
    check = []
    for m, ts in times.items():
        for r, t in enumerate(ts):
            check.append({**KEY, "method": m, "collective": "allreduce", "run_id": f"00{r}-{m}-r{r}",
                          "up_to": "last row (target not reached)" if m == "missed" else "target",
                          "iterations": "85", "measured_s": str(t)})
    _write(tmp_path / "check-all.csv", check)
    _write(tmp_path / "breakeven-all.csv", [
        {**KEY, "method": "fp16 run [baseline: fp16]"}, {**KEY, "method": "fp32 run [fp32 baseline: second line]"},
        {**KEY, "method": "fast"}])
    return tmp_path


def test_verdicts_from_intervals(tmp_path):
    head, *body = verdict.rows(campaign(tmp_path))
    assert head == list(verdict.COLUMNS)
    got = {r[4]: dict(zip(head, r)) for r in body}
    assert got["fp16 run"]["verdict"] == "baseline (fp16)"
    assert got["fast"]["verdict"] == "faster" and got["fast"]["vs_baseline"] == "0.55"
    assert got["fast"]["vs_fp32"] == "0.29"
    assert got["fast"]["time_to_target_s"] == "0.6 [0.5, 0.7]"
    assert got["close"]["verdict"] == "not measurably different"
    assert got["slow"]["verdict"] == "slower"
    assert got["fp32 run"]["verdict"] == "slower"
    assert got["missed"]["verdict"] == "not reached" and got["missed"]["iterations"] == "> 85"
    assert got["single"]["verdict"] == "one run: no interval"


def test_missing_campaign_files_say_what_to_run(tmp_path, capsys):
    assert verdict.main([str(tmp_path)]) == 2
    assert "jobs/does-it-pay.sh" in capsys.readouterr().err


def test_breakeven_rows_leave_the_baselines_out(tmp_path):
    c = campaign(tmp_path)
    rows = []
    with open(c / "breakeven-all.csv") as fh:
        rows = list(csv.DictReader(fh))
    cols = {"collective": "allreduce", "baseline": "fp16", "break_even_run_n": "below 3 Gb/s",
            "break_even_n128": "below 2 Gb/s", "break_even_n1024": "never", "break_even_run_n_fp32": "always"}
    _write(c / "breakeven-all.csv", [{**r, **cols} for r in rows])
    head, *body = verdict.breakeven_rows(c)
    assert head == list(verdict.BREAKEVEN_COLUMNS)
    assert all(len(r) == len(head) for r in body)
    assert [r[4] for r in body] == ["fast"]
    assert body[0][6:] == ["fp16", "below 3 Gb/s", "below 2 Gb/s", "never", "always"]
    assert verdict.breakeven_rows(c, n=8) == [head]          # one rank count per table


def test_a_float32_baseline_is_its_own_fp32_line(tmp_path):
    c = campaign(tmp_path)
    _write(c / "breakeven-all.csv", [{**KEY, "method": "fp32 run [baseline: fp32]"}, {**KEY, "method": "fast"}])
    head, *body = verdict.rows(c)
    got = {r[4]: dict(zip(head, r)) for r in body}
    assert got["fast"]["vs_baseline"] == got["fast"]["vs_fp32"] == "0.29"
