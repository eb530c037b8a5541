"""The required-tests check (tests/required.py) and the quick tier (tests/quick.py) on a small
suite of their own, in a child pytest: a required test that skipped fails a CI run, with the list."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, show
from tests.quick import in_quick_tier, quick_patterns
from tests.required import read_patterns

SUITE = '''
import pytest

def test_fine():
    pass

def test_needs_slurm():
    pytest.skip("no slurmctld here")'''


def _pytest(tmp_path, *args, ci: bool):
    (tmp_path / "test_sample.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.required", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_required_test_that_skipped_fails_ci_with_the_list(tmp_path):
    req = tmp_path / "required.txt"
    req.write_text("# what CI must run\ntest_sample.py::test_needs_*\ntest_sample.py::test_fine\n"
                   "test_gone.py::*   # a renamed file\n")
    p = _pytest(tmp_path, "--required", str(req), ci=True)
    assert p.returncode == 1, show(p)                          # the tests themselves passed or skipped
    assert "1 passed, 1 skipped" in p.stdout, show(p)
    out = p.stdout[p.stdout.index("required tests (required.txt"):]
    assert "test_sample.py::test_needs_*: 1 skipped" in out and "test_sample.py::test_fine: 1 passed" in out
    assert "FAILED: 2 required test(s) did not run:" in out, out
    assert "test_sample.py::test_needs_slurm: skipped (no slurmctld here)" in out, out
    assert "test_gone.py::*: matched no collected test" in out, out

    # outside CI the same list is a warning, and the run's status is the tests' own
    p = _pytest(tmp_path, "--required", str(req), ci=False)
    assert p.returncode == 0, show(p)
    assert "WARNING (CI=true would fail): 2 required test(s) did not run:" in p.stdout, show(p)

    # nothing required skipped: exit 0 under CI, and it says so
    req.write_text("test_sample.py::test_fine\n")
    p = _pytest(tmp_path, "--required", str(req), ci=True)
    assert p.returncode == 0 and "all 1 required tests ran" in p.stdout, show(p)


def test_the_repository_lists_parse():
    required = read_patterns(ROOT / "tests" / "required.txt")
    for must in ("tests/test_slurm.py::*", "tests/test_emulated_cluster.py::*",
                 "tests/test_cli_mpi.py::test_pytest_mpi_suite_on_4_ranks*"):
        assert must in required
    quick = quick_patterns()
    assert any(p.startswith("tests/test_cli_mpi.py::test_pytest_mpi_suite_on_4_ranks") for p in quick)
    for slow_one in ("tests/test_slurm.py::test_single_job_runs_mpi_and_records_ids",
                     "tests/test_emulated_cluster.py::test_allreduce_baseline_matches_ring_model_on_2_emulated_nodes"):
        assert not in_quick_tier(slow_one, quick, slow=False), slow_one
    assert in_quick_tier("tests/test_config.py::test_x", ["tests/test_config.py::*"], slow=False)
    assert not in_quick_tier("tests/test_config.py::test_x", ["tests/test_config.py::*"], slow=True)
    assert not in_quick_tier("tests/test_new_file.py::test_x", quick, slow=False)   # new files: full tier
    assert not in_quick_tier("tests/test_config.py::test_x", ["tests/test_config.py::*", "!*::test_x"], slow=False)
