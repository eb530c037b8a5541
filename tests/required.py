"""The required-tests check: tests CI must run, not skip (patterns in tests/required.txt).

``pytest --required tests/required.txt`` (``scripts/test.sh`` passes it on a full run) records the
outcome of every test whose id matches a pattern and prints, at the end of the run, each pattern
with how many of its tests passed, failed or were skipped, and the skipped ones with their reasons.
Under ``CI=true`` (or ``--required-strict``) a required test that was skipped, or a pattern that
matched no collected test (a renamed file, a ``-k`` that left it out), makes the exit status 1;
elsewhere the same list is printed as a warning (a laptop without root cannot start SLURM).

The hooks are imported into tests/conftest.py.
"""
from __future__ import annotations

import os
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    """True when the environment says this is CI (``CI=true``, as CI runners set it)."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def read_patterns(path: Path) -> list[str]:
    """The patterns of a required-tests file: one a line, ``#`` starts a comment."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


class RequiredTests:
    """Collects outcomes of the tests matching ``patterns`` and judges them at the end."""

    def __init__(self, path: Path, patterns: list[str], strict: bool):
        self.path, self.patterns, self.strict = path, patterns, strict
        self.collected: dict[str, list[str]] = {p: [] for p in patterns}
        self.outcome: dict[str, tuple[str, str]] = {}      # test id -> (passed|failed|skipped, reason)
        self.problems: list[str] = []

    def matching(self, nodeid: str) -> list[str]:
        return [p for p in self.patterns if fnmatchcase(nodeid, p)]

    def collection_finish(self, items) -> None:
        for item in items:
            for p in self.matching(item.nodeid):
                self.collected[p].append(item.nodeid)

    def logreport(self, report) -> None:
        if not self.matching(report.nodeid):
            return
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.outcome[report.nodeid] = ("skipped", reason.removeprefix("Skipped: "))
        elif report.failed:
            self.outcome[report.nodeid] = ("failed", "")
        elif report.when == "call" and report.nodeid not in self.outcome:
            self.outcome[report.nodeid] = ("passed", "")

    def judge(self) -> list[str]:
        """One line per problem: a required test skipped (or not run at all), a pattern that matched nothing."""
        problems = []
        for p in self.patterns:
            ids = self.collected[p]
            if not ids:
                problems.append(f"{p}: matched no collected test")
            for nodeid in ids:
                state, reason = self.outcome.get(nodeid, ("not run", ""))
                if state in ("skipped", "not run"):
                    problems.append(f"{nodeid}: {state}" + (f" ({reason})" if reason else ""))
        self.problems = list(dict.fromkeys(problems))
        return self.problems

    def lines(self) -> list[str]:
        out = []
        for p in self.patterns:
            ids = self.collected[p]
            counts = {}
            for nodeid in ids:
                state = self.outcome.get(nodeid, ("not run", ""))[0]
                counts[state] = counts.get(state, 0) + 1
            shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no test collected"
            out.append(f"  {p}: {shown}")
        return out


_current: RequiredTests | None = None      # the run's check (pytest_runtest_logreport sees no config)


def pytest_addoption(parser):
    group = parser.getgroup("hpcgc required tests")
    group.addoption("--required", metavar="FILE", default=None,
                    help="check that the tests matching the patterns in FILE ran and did not skip "
                         "(tests/required.txt; scripts/test.sh passes it)")
    group.addoption("--required-strict", action="store_true", default=False,
                    help="a required test that skipped fails the run (the default under CI=true)")


def pytest_configure(config):
    path = config.getoption("--required", default=None)
    if not path:
        return
    p = Path(path)
    if not p.is_absolute():
        p = Path(config.rootpath) / p
    if not p.is_file():
        raise pytest.UsageError(f"--required: no such file {p}")
    strict = config.getoption("--required-strict", default=False) or in_ci()
    global _current
    _current = RequiredTests(p, read_patterns(p), strict)


def pytest_unconfigure(config):
    global _current
    _current = None


def pytest_collection_finish(session):
    if _current is not None:
        _current.collection_finish(session.items)


def pytest_runtest_logreport(report):
    if _current is not None:
        _current.logreport(report)


def pytest_sessionfinish(session, exitstatus):
    req = _current
    if req is None:
        return
    if req.judge() and req.strict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    req = _current
    if req is None:
        return
    tr = terminalreporter
    tr.section(f"required tests ({req.path.name}: CI fails when one of them skipped)")
    for line in req.lines():
        tr.write_line(line)
    if not req.problems:
        tr.write_line(f"all {sum(len(v) for v in req.collected.values())} required tests ran", green=True)
        return
    word = "FAILED" if req.strict else "WARNING (CI=true would fail)"
    tr.write_line(f"{word}: {len(req.problems)} required test(s) did not run:", red=True, bold=True)
    for line in req.problems:
        tr.write_line(f"  {line}", red=True)
