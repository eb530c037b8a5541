"""Rank 0's server-side decoding and a worker's encoding at n workers, alone, in CPU time (issue 31
target 3). No MPI: the payloads of n workers (one compressor) in one receive buffer, as the
transport's Gatherv hands them to rank 0.

    python scripts/decode-add.py [--n 32] [--d 30] [--algorithm diana] [SPEC ...]
                                                    # default: the default experiment's compressors

Per compressor, CPU microseconds (``time.process_time``, best of 7 batches, so other jobs on the
machine inflate it little) of:

    encode    the prepared codec's ``encode`` of one message (a worker's compress kernel)
    worker    the algorithm's ``worker_encode``: encode + the worker's own decode-add into its shift
              (DIANA; DCGD has no shift)
    N adds    the prepared codec's ``add`` of the n payloads into one vector, one call per message
    server    what rank 0 does between the Gatherv and the Bcast with the gathered buffer: the
              exchange's messages of it and the algorithm's ``server_step`` (the n decode-adds and
              the step; ``Algorithm.add_messages`` takes one kernel call for all n where the
              compressor declares ``Prepared.add_many``), without the bit accounting
              (``scripts/bit-accounting.py``)
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", default=["qsgd:s=2", "quant:p=inf,block=8", "randk:k=6"])
    ap.add_argument("--n", type=int, default=32, help="messages per iteration (workers; at -n 32 every rank is one)")
    ap.add_argument("--d", type=int, default=30)
    ap.add_argument("--algorithm", default="diana")
    a = ap.parse_args()
    from hpcgc import compressors

    def best(f, calls):
        b = np.inf
        for _ in range(7):
            t0 = time.process_time()
            for _ in range(calls):
                f()
            b = min(b, (time.process_time() - t0) / calls)
        return 1e6 * b

    for spec in a.specs:
        r = measure(compressors.make(spec), a.n, a.d, a.algorithm, best)
        print(f"{spec:24s} encode {r[0]:6.2f}  worker {r[1]:6.2f}  {a.n} adds {r[2]:7.2f}  server {r[3]:7.2f} "
              f"CPU-µs  (d = {a.d}, {a.algorithm})")


def measure(c, n: int, d: int, algorithm: str, best) -> tuple[float, float, float, float]:
    """CPU-µs of one encode, one worker_encode, n per-message adds, and rank 0's server step on the
    gathered buffer, of compressor ``c`` at dimension d."""
    from hpcgc import algorithms
    from hpcgc.exchange.base import Exchange
    rng = np.random.default_rng(0)
    enc, add = c.prepared(d)[:2]
    x = rng.standard_normal(d)
    pays = [enc(rng.standard_normal(d), rng) for _ in range(n)]
    out = np.zeros(d)

    def adds():
        for p in pays:
            add(p, out, 1.0 / n)
    alg = algorithms.make(algorithm, [c] * n, d=d, n_workers=n, weights=np.full(n, 1 / n),
                          problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg"}, options={})
    ws = alg.worker_init(0)
    ws.delta[:] = x
    ss = alg.server_init(np.zeros(d))
    counts = np.array([p.size for p in pays], dtype=np.int32)         # as the transport's arrays
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    got = (np.concatenate(pays), counts, displs)
    ex = Exchange.__new__(Exchange)                     # only what _messages reads
    ex.alg, ex.worker_ranks = alg, list(range(n))

    def server():
        alg.server_step(ss, ex._messages(got))
    return (best(lambda: enc(x, rng), 3000), best(lambda: alg.worker_encode(ws, rng), 3000), best(adds, 300),
            best(server, 300))


if __name__ == "__main__":
    main()
