"""The quick tier: ``pytest --quick`` (``scripts/test.sh --quick``) runs only the tests whose id
matches a pattern in tests/quick.txt, matches none of its ``!pattern`` lines and is not marked
``slow``.

The list is curated: a new test file is in the full tier (``scripts/test.sh``, what CI runs) until
someone adds it here; a new test in a listed file joins the quick tier unless it is marked ``slow``.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import pytest

QUICK = Path(__file__).with_name("quick.txt")


def pytest_addoption(parser):
    parser.getgroup("hpcgc quick tier").addoption(
        "--quick", action="store_true", default=False,
        help="run the quick tier only: tests matching tests/quick.txt, not marked slow (docs/testing.md)")


def quick_patterns() -> list[str]:
    lines = (ln.split("#", 1)[0].strip() for ln in QUICK.read_text().splitlines())
    return [ln for ln in lines if ln]


def in_quick_tier(nodeid: str, patterns: list[str], slow: bool) -> bool:
    """In the quick tier: not slow, matched by a pattern and by no ``!pattern``."""
    if slow or any(fnmatchcase(nodeid, p[1:]) for p in patterns if p.startswith("!")):
        return False
    return any(fnmatchcase(nodeid, p) for p in patterns if not p.startswith("!"))


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--quick"):
        return
    patterns = quick_patterns()
    keep, drop = [], []
    for item in items:
        (keep if in_quick_tier(item.nodeid, patterns, item.get_closest_marker("slow") is not None) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(trylast=True)
def pytest_report_header(config):
    if config.getoption("--quick"):
        return f"quick tier: {QUICK.relative_to(config.rootpath)} (scripts/test.sh without --quick runs every test)"
    return None
