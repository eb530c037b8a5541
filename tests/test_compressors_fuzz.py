"""Tests of hpcgc.compressors: corrupted payloads: rejected, or decoded to a finite vector; never out of bounds (also with NUMBA_BOUNDSCHECK=1).

Shared specs and checks: tests/compressor_checks.py.
"""
from __future__ import annotations

import pytest

from .compressor_checks import FUZZ_SPECS, fuzz_decoders


def test_fuzz_corrupted_payloads():
    accepted, rejected = fuzz_decoders(FUZZ_SPECS)
    assert rejected > accepted > 0


@pytest.mark.skipif(not __import__("os").environ.get("HPCGC_TEST_BOUNDSCHECK"),
                    reason="set HPCGC_TEST_BOUNDSCHECK=1 (recompiles the decoders with bounds checks, ~10 s)")
@pytest.mark.slow
@pytest.mark.timeout(960)    # recompiles the decoders with bounds checks: minutes on a loaded machine
def test_fuzz_with_numba_boundscheck(boundscheck_fuzz):
    """The same fuzzing with NUMBA_BOUNDSCHECK=1: any out-of-bounds access in a kernel raises
    (tests/conftest.py: boundscheck_fuzz, one process for this test and test_qsgd_elias.py's)."""
    ok, out, expected = boundscheck_fuzz["compressors"]
    assert ok, out[-3000:]
    assert tuple(map(int, out.split())) == expected        # as decoded without bounds checks
