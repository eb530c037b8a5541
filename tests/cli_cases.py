"""Several ``hpcgc`` command lines, one after another, in one process per rank: run under mpiexec by
tests/test_cli_mpi.py so that its bad-input cases share one launch instead of paying a start of
Python, MPI and hpcgc on every rank for each (a few CPU-seconds a case).

    mpiexec -n 4 python -m tests.cli_cases CASES.json OUTDIR

CASES.json is a list of argument lists for ``hpcgc.bench.main``; each rank writes
OUTDIR/rank-<r>.json: per case its return code (``SystemExit``'s code for argparse) and what it
printed on stdout and stderr. A case that takes the ranks down (an internal error aborts) ends the
launch, and the test fails.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from mpi4py import MPI

from hpcgc.bench import main


def run(cases: list[list[str]]) -> list[dict]:
    out = []
    for argv in cases:
        err, std = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            try:
                rc = main(list(argv))
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
        out.append({"argv": argv, "rc": rc, "stdout": std.getvalue(), "stderr": err.getvalue()})
        MPI.COMM_WORLD.Barrier()            # the ranks start each case together, as a fresh launch would
    return out


if __name__ == "__main__":
    cases = json.loads(Path(sys.argv[1]).read_text())
    rank = MPI.COMM_WORLD.Get_rank()
    Path(sys.argv[2], f"rank-{rank}.json").write_text(json.dumps(run(cases)))
