"""The table of ``scripts/vs-authors.sh``: per-iteration times of the authors' DIANA+ (quant+) loop
and of hpcgc's, median over the iterations of each run, then over the runs, and their ratio.

    python scripts/vs-authors-report.py WORKDIR RUNS ITERATIONS NP

Reads ``WORKDIR/theirs-<r>.npy`` (rank 0 of the authors' loop, per iteration: MPI.Wtime at the
start and end of the iteration body, their own timer ``total_time`` at both; written by the lines
``scripts/vs-authors.patch`` adds) and ``WORKDIR/hpcgc-<r>.h5`` (``per_iteration/iter``, rank 0).
What each figure contains: docs/performance.md, "Against the authors' code".
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hpcgc import results


def theirs(path: Path, iterations: int) -> tuple[float, float]:
    """Median ms per iteration of rank 0: wall-clock of the iteration body, and their own timer."""
    t = np.load(path)
    if t.shape != (iterations, 4):
        sys.exit(f"vs-authors: {path}: {t.shape[0]} iterations recorded, expected {iterations}")
    return 1e3 * float(np.median(t[:, 1] - t[:, 0])), 1e3 * float(np.median(t[:, 3] - t[:, 2]))


def ours(path: Path, iterations: int, n: int) -> tuple[float, float]:
    """Median ms per iteration of hpcgc's ``iter`` phase: rank 0, and all ranks together."""
    (run,) = results.load(path)
    if run.status != "completed" or int(run.attrs["iterations_done"]) != iterations:
        sys.exit(f"vs-authors: {path}: run {run.status} after {run.attrs['iterations_done']} of "
                 f"{iterations} iterations")
    it = np.asarray(run.per_iteration["iter"], dtype=np.float64)
    if it.shape != (iterations, n):
        sys.exit(f"vs-authors: {path}: per_iteration/iter has shape {it.shape}, expected {(iterations, n)}")
    return 1e3 * float(np.median(it[:, 0])), 1e3 * float(np.median(it))


def bits_check(work: Path, run: int) -> str:
    """Uplink model MB of all workers over the same iterations of the last pair of runs (one-time
    upload of S_i excluded): the two loops should send about the same (same steps, same code)."""
    import pickle

    (trace,) = sorted((work / "code" / "results").glob("a9a-*-SD-DIANA-plus-*"))
    mbs, its = (pickle.load(open(trace / f"{k}_trace.p", "rb")) for k in ("mbs", "iter"))
    (seed,) = [s for s in mbs if mbs[s]]            # the one seed run (VS_AUTHORS_SEEDS=1)
    k = int(its[seed][-1])
    (ours_run,) = results.load(work / f"hpcgc-{run}.h5")
    at = list(ours_run.series["iteration"]).index(k)
    bits = ours_run.series["bits_up_model"]
    return (f"uplink model MB of all workers in the first {k} iterations (run {run}, one-time upload "
            f"excluded): authors "
            f"{mbs[seed][-1] - mbs[seed][0]:.4f}, hpcgc {(bits[at].sum() - bits[0].sum()) / 8e6:.4f}")


def main(argv: list[str]) -> None:
    if len(argv) != 4:
        sys.exit(__doc__)
    work, runs, iterations, n = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    rows = []
    for r in range(1, runs + 1):
        wall, own = theirs(work / f"theirs-{r}.npy", iterations)
        it0, itall = ours(work / f"hpcgc-{r}.h5", iterations, n)
        rows.append((wall, own, it0, itall, it0 / wall))
    print(f"\nDIANA+ (quant+), a9a, n = {n} ranks, norm-sorted, λ = 1e-3, {iterations} iterations per run; "
          "ms per iteration (median over the iterations of one run)")
    head = ("run", "order", "authors wall", "authors own timer", "hpcgc iter r0", "hpcgc iter all",
            "hpcgc/authors wall")
    print("  ".join(f"{h:>{max(len(h), 6)}}" for h in head))

    def line(name, order, vals):
        cells = [name, order] + [f"{v:.3f}" for v in vals]
        print("  ".join(f"{c:>{max(len(h), 6)}}" for c, h in zip(cells, head)))

    for r, row in enumerate(rows, 1):
        line(str(r), "theirs 1st" if r % 2 else "hpcgc 1st", row)
    med = np.median(np.asarray(rows), axis=0)
    line("median", "", med)
    print(f"\nratio hpcgc / authors (rank 0, wall-clock of the iteration): {med[2] / med[0]:.3f} "
          f"(median of the runs' medians; median of the per-run ratios {med[4]:.3f}); "
          f"against their own timer: {med[2] / med[1]:.3f}")
    print(bits_check(work, runs))


if __name__ == "__main__":
    main(sys.argv[1:])
