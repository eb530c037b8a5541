"""EF + top-k's server step at d = 2²⁰ split into its parts, beside the line floor and the machine's
own rate for the same scattered lines (issue 31, target 1: what bounds this phase from below).

The server step of does-it-pay grid point 4 (EF, ``topk:k=16384``, n = 2, rank 0): two payloads are
checked (``Prepared.entries``), their Elias-omega index streams decoded two at a time
(``sparse_base.decode_entries``: two dependent chains in lockstep; with or without asking for x's
lines as each index is decoded), and x is updated at the n·k decoded entries
(``algorithms.kernels.sparse_step``). Each part is timed alone, and then:

    scatter      x[j] -= 1.0 at the same entries and nothing else, x's line asked for AHEAD
                 entries ahead (numba, this script): the machine's rate for these lines — what
                 any kernel that updates x at them pays, whatever its decoding
    line floor   the lines the traffic model counts for the phase (the entries' distinct lines,
                 read and written: 128 B each, plus the payloads) at the copy bandwidth measured
                 here (``hpcgc.traffic.copy_bandwidth``), as ``hpcgc floor`` counts them

Warm: the same call repeated. ``--evict``: a 64 MiB read before every call (untimed), so x and the
payloads come from memory, as in a run, where the gradient evicts them. Median and minimum of
REPEAT calls, µs. The payloads are top-k of Gaussian vectors (uniformly spread entries, as
``scripts/phase-kernels.py server-ef-topk``). Measures the checkout on ``PYTHONPATH``.

    python scripts/ef-server-parts.py [--repeat 40] [--evict] [--ahead 32 64 128]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from hpcgc import algorithms, compressors, traffic
from hpcgc.algorithms.kernels import sparse_step
from hpcgc.compressors.kernels.sparse import prefetch
from hpcgc.compressors.sparse_base import decode_entries
from hpcgc.micro import describe_target, kernel_target, machine_info


@njit(cache=True)
def scatter(x, idx, ahead):
    """x[idx[q]] -= 1.0 for every q, x's line at idx[q + ahead] asked for first."""
    top = idx.shape[0] - 1
    for q in range(idx.shape[0]):
        prefetch(x, idx[min(q + ahead, top)])
        x[idx[q]] -= 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--evict", action="store_true", help="a 64 MiB read before every call (untimed)")
    ap.add_argument("--ahead", type=int, nargs="+", default=[32, 64, 128],
                    help="prefetch distances (entries) of the scatter kernel")
    a = ap.parse_args()
    d, k = 1 << 20, 16384
    comp = compressors.make(f"topk:k={k}")
    info = {"L_max": 1.0, "L": 1.0, "mu": 1e-3, "kind": "logreg"}
    alg = algorithms.make("ef", [comp, comp], d=d, n_workers=2, weights=np.full(2, 0.5), problem_info=info,
                          options={"collective": "allgather"})
    rng = np.random.default_rng(0)
    ss = alg.server_init(rng.standard_normal(d) * 1e-3)
    codec = comp.prepared(d)
    alg.codecs = [codec, codec]
    msgs = list(enumerate(codec.encode(rng.standard_normal(d), rng) for _ in range(2)))
    alg.server_step(ss, msgs)                        # compiles, sizes the work arrays
    sw = alg.scaled_weights
    parts = [alg.codecs[i].entries(p, sw[i]) for i, p in msgs]
    idx, vals = alg._idx, alg._vals
    starts = decode_entries(parts, idx, vals, ss.x)
    entries = np.array(idx[:starts[-1]])
    big = np.ones(8 << 20)

    def timed(f):
        f()
        ts = []
        for _ in range(a.repeat):
            if a.evict:
                big.sum()
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return 1e6 * float(np.median(ts)), 1e6 * min(ts)

    rows = [("entries (headers checked)", lambda: [alg.codecs[i].entries(p, sw[i]) for i, p in msgs]),
            ("decode, two chains", lambda: decode_entries(parts, idx, vals, None)),
            ("decode, two chains, x's lines asked for", lambda: decode_entries(parts, idx, vals, ss.x)),
            ("sparse_step (x at the entries)", lambda: sparse_step(ss.x, idx, vals, starts, alg._block)),
            ("server_step (all of it)", lambda: alg.server_step(ss, msgs))]
    for ahead in a.ahead:
        rows.append((f"scatter x[j] -= 1, {ahead} ahead", lambda ahead=ahead: scatter(ss.x, entries, ahead)))
    bw = traffic.copy_bandwidth()
    lines = traffic.lines_of([entries])
    payload = float(sum(p.nbytes for _, p in msgs))
    floor = (2 * traffic.LINE * lines + payload) / bw
    print(f"# EF + topk:k={k} server step parts, d = {d}, n = 2, {entries.size} entries in {lines} lines; "
          f"{'evicted (64 MiB read before each call)' if a.evict else 'warm'}; {a.repeat} calls; "
          f"{machine_info()}, {describe_target(kernel_target()).lstrip('# ')}; load {open('/proc/loadavg').read().split()[0]}")
    print(f"# copy bandwidth {bw / 1e9:.1f} GB/s; line floor {1e6 * floor:.1f} µs "
          f"({lines} lines read and written + {payload / 1e3:.0f} kB of payloads)")
    print(f"{'part':<44} {'median µs':>10} {'min µs':>8} {'median / line floor':>20}")
    for name, f in rows:
        med, lo = timed(f)
        print(f"{name:<44} {med:>10.1f} {lo:>8.1f} {med * 1e-6 / floor:>20.2f}")


if __name__ == "__main__":
    main()
