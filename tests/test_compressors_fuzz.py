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
                    reason="set HPCGC_TEST_BOUNDSCHECK=1 (recompiles every kernel with bounds checks, ~30 s)")
@pytest.mark.slow
@pytest.mark.timeout(960)    # recompiles the kernels with bounds checks: minutes on a loaded machine
def test_fuzz_with_numba_boundscheck(boundscheck_cache):
    """The same fuzzing with NUMBA_BOUNDSCHECK=1: any out-of-bounds access in a kernel raises."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT
    code = ("import tests.compressor_checks as t; a, r = t.fuzz_decoders(t.FUZZ_SPECS, trials=200, seed=1); "
            "print(a, r)")
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(boundscheck_cache)}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
