"""Rank 0's server-side decoding and a worker's encoding at n workers, alone, in CPU time (issue 31
target 3): the prepared codec's ``encode`` of one message and its ``add`` of n workers' payloads
into one vector (what the server step of DCGD / DIANA does per iteration before its step). No MPI.

    python scripts/decode-add.py [--n 31] [--d 30] [SPEC ...]   # default: the default experiment's

Prints CPU microseconds (``time.process_time``, best of 7 batches), so other jobs on the machine
inflate it little.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", default=["qsgd:s=2", "quant:p=inf,block=8", "randk:k=6"])
    ap.add_argument("--n", type=int, default=31, help="messages added per iteration (workers)")
    ap.add_argument("--d", type=int, default=30)
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
        enc_us, add_us = measure(compressors.make(spec), a.n, a.d, best)
        print(f"{spec:24s} encode {enc_us:7.2f} CPU-µs   {a.n} adds {add_us:8.2f} CPU-µs  (d = {a.d})")


def measure(c, n: int, d: int, best) -> tuple[float, float]:
    """(CPU-µs of one encode, of n adds) of compressor ``c`` at dimension d."""
    rng = np.random.default_rng(0)
    enc, add = c.prepared(d)
    x = rng.standard_normal(d)
    pays = [enc(rng.standard_normal(d), rng) for _ in range(n)]
    out = np.zeros(d)

    def adds():
        for p in pays:
            add(p, out, 1.0 / n)
    return best(lambda: enc(x, rng), 3000), best(adds, 300)

if __name__ == "__main__":
    main()
