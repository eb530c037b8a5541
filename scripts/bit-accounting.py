"""Rank 0's per-iteration bit accounting at n workers, alone: the per-worker loop it replaced
against ``Exchange.account`` (vectorised over the workers; issue 31 target 3). No MPI: the
payloads of n workers (one compressor) in one receive buffer, as the transport hands them.

    python scripts/bit-accounting.py [--n 32] [--compressor qsgd:s=2] [--d 30]

Prints the CPU microseconds per iteration (``time.process_time``, best of 9 batches of 3000 —
CPU time, so other jobs on the machine inflate it little) of: building the messages list (the
server step needs it either way), the per-worker loop, the vectorised accounting; and checks that
both give the same bits.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--compressor", default="qsgd:s=2")
    ap.add_argument("--d", type=int, default=30)
    a = ap.parse_args()
    from hpcgc import algorithms, compressors
    from hpcgc.exchange.base import Exchange
    from hpcgc.transport import LENGTH_BYTES

    n, d = a.n, a.d
    comp = compressors.make(a.compressor)
    alg = algorithms.make("diana", [comp] * n, d=d, n_workers=n, weights=np.full(n, 1 / n),
                          problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    rng = np.random.default_rng(0)
    pays = [comp.compress(rng.standard_normal(d), rng) for _ in range(n)]
    counts = np.array([p.size for p in pays], dtype=np.int32)
    got = (np.concatenate(pays), counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32))
    ex = Exchange.__new__(Exchange)                 # only what account() reads
    ex.alg, ex.worker_ranks = alg, list(range(n))
    ex._messages(got)

    def loop(bm, bw):                               # the accounting as it was (e48eb24)
        for i, p in ex.msgs:
            bw[i] += 8 * (LENGTH_BYTES + p.size)
            bm[i] += alg.model_bits(i, p)

    def vectorised(bm, bw):
        Exchange.account(ex, bm, bw)

    for name, f in (("messages list", lambda bm, bw: ex._messages(got)), ("per-worker loop", loop),
                    ("vectorised", vectorised)):
        bm, bw = np.zeros(n), np.zeros(n)
        best = np.inf
        for _ in range(9):
            t0 = time.process_time()
            for _ in range(3000):
                f(bm, bw)
            best = min(best, (time.process_time() - t0) / 3000)
        print(f"{name:16s} {1e6 * best:7.1f} CPU-µs per iteration (n = {n}, {comp.spec})")
    ex._messages(got)
    b1, w1, b2, w2 = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for _ in range(3):
        loop(b1, w1)
        vectorised(b2, w2)
    print("same bits:", bool(np.array_equal(b1, b2) and np.array_equal(w1, w2)))


if __name__ == "__main__":
    main()
