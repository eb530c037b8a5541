"""Statements in README.md that the code decides: the algorithm list is the registry's, and the
phase and wire/model statements say what the code does (issue 28, item 7)."""
from __future__ import annotations

import re

from hpcgc import algorithms
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_lists_every_registered_algorithm():
    lines = README.splitlines()
    i = next(k for k, line in enumerate(lines) if re.match(r'algorithm\s+= "', line))
    comment = [lines[i].split("#", 1)[1]]
    for line in lines[i + 1:]:
        if not re.match(r"\s+#", line):
            break
        comment.append(line.split("#", 1)[1])
    text = re.sub(r"\(.*?\)", "", " ".join(comment))
    listed = {w.strip() for w in text.split("|")}
    assert listed == set(algorithms.available()), (listed, algorithms.available())


def test_readme_does_not_repeat_contradicted_statements():
    flat = " ".join(README.split())
    assert "`iter` is the sum of the phases (hpcgc's own bookkeeping is outside them)" not in flat
    assert "for d ≥ 10⁴ every compressor is within 5 %" not in flat
    assert "implemented exactly" not in flat
    assert "`other` the part of it outside the seven named phases" in flat


def test_phase_means_are_over_ranks_without_per_iteration_times(tmp_path):
    """README: "Phase times: mean per iteration over iterations and ranks" — also with
    run.per_iteration_times = false (the summary then averages every rank's cumulative timers)."""
    from hpcgc import results
    from tests.conftest import run_mpi, show
    out = tmp_path / "p.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--set", "run.iterations=40", "--set", 'sweep.algorithm=["diana"]',
                    "--set", 'sweep.compressor=["qsgd:s=2"]', "--set", "run.per_iteration_times=false",
                    "-q", "-o", str(out)])
    assert p.returncode == 0, show(p)
    lines = p.stdout.splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("run ") and "iter(ms)" in line)
    cols, row = lines[head].split(), lines[head + 2].split()
    run = results.load(out)[0]
    assert "iter" not in run.per_iteration
    done = run.attrs["iterations_done"]
    for phase in ("grad", "server", "iter"):
        shown = float(row[cols.index(f"{phase}(ms)") - 3])     # "f - f*" is 3 words and "MB up" 2 in the head
        over_ranks = 1e3 * run.time[phase][-1].mean() / done
        assert abs(shown - over_ranks) <= 1e-4 + 1e-3 * over_ranks, (phase, shown, over_ranks, run.time[phase][-1])
