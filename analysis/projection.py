"""Moved to :mod:`hpcgc.analysis.projection`; this name stays for old scripts."""
from hpcgc.analysis.projection import *  # noqa: F403
