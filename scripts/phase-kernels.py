"""One phase's kernels of a d = 2²⁰ does-it-pay run, called REPEAT times on rank 0's kind of shard,
with no MPI: the unit the instruction counts of ``docs/performance.md`` (issue 31) are taken on.

    python scripts/phase-kernels.py PHASE [--repeat K] [--rows 4000] [--d 1048576]

PHASE: ``grad-dcgd`` / ``grad-diana`` / ``grad-ef`` (the worker's ``worker_compute`` of DCGD, DIANA,
EF on a ``synthetic:sparse`` shard of ROWS rows, 40 nonzeros per row), ``server-allreduce`` (DCGD's
step from an Allreduce's float32 sum, as ``hpcgc.exchange.allreduce`` hands it), ``compress-identity``
(the uncompressed Allreduce's round vector), ``server-ef-topk`` (EF's step from two ``topk:k=16384``
payloads), ``compress-ef-topk`` (EF's worker message through ``topk:k=16384``: ``worker_encode`` =
EF's ``worker_message`` → the codec's compress (selection, index encoding, values) → ``worker_sent``
with the own payload decoded, e ← e − s·C(e); e is refilled with the same vector before each call,
outside the timing), ``compress-rs-qsgd`` (rank 0's compress phase of DIANA + ``qsgd:s=64`` under
``reduce-scatter`` at n = 2, does-it-pay grid point 7: the exchange's stage-1 ``encode`` of the n
segments with the own decode h ← h + α·C(Δ), then the owner's stage 2 — the re-compression of its
segment's sum and the update of D; also timed apart). The calls go through the algorithms' and codecs' public methods, so the script measures
any checkout it is run from (``PYTHONPATH=<checkout>``): the before/after figures compare two.

Instruction counts: run it under ``valgrind --tool=callgrind`` with ``--repeat 0`` and with
``--repeat K`` and divide the difference of the totals by K (perf's hardware counters are not
available in this VM; both runs make one untimed call first, so the kernels' loading from numba's
cache and the first touch of the buffers cancel out):

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python scripts/phase-kernels.py grad-dcgd --repeat 0
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python scripts/phase-kernels.py grad-dcgd --repeat 5
    callgrind_annotate /tmp/cg.<pid> | head        # "PROGRAM TOTALS"

Each call is timed (``time.perf_counter``; median, and the minimum — the figure least disturbed by
other processes on a loaded host). With ``--evict`` a 64 MiB buffer is read before
each call (untimed), so the phase's vectors come from memory as in a run, where the gradient and the
other rank evict them between steps (the server step's x, the compress phase's e).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=("grad-dcgd", "grad-diana", "grad-ef", "server-allreduce",
                                      "compress-identity", "server-ef-topk", "compress-ef-topk",
                                      "compress-rs-qsgd"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--d", type=int, default=2**20)
    ap.add_argument("--evict", action="store_true",
                    help="read a 64 MiB buffer before each call (untimed): the phase's vectors come from "
                         "memory, as in a run, where the other phases evict them")
    a = ap.parse_args()

    from hpcgc import algorithms, compressors
    from hpcgc.data.sparse import SparseGenerator
    from hpcgc.problems import Objective

    d = a.d
    gen = SparseGenerator(n=a.rows, d=d, nnz=40, zipf=1.1, snr=4.0, seed=0)
    ds = gen.rows(0, a.rows)
    obj = Objective("logreg", ds.X, ds.y, np.full(a.rows, 1.0 / a.rows), 1e-3)
    info = {"L_max": 1.0, "L": 1.0, "mu": 1e-3, "kind": "logreg"}
    name = {"grad-dcgd": "dcgd", "grad-diana": "diana", "grad-ef": "ef", "server-allreduce": "dcgd",
            "compress-identity": "dcgd", "server-ef-topk": "ef", "compress-ef-topk": "ef",
            "compress-rs-qsgd": "diana"}[a.phase]
    spec = {"server-ef-topk": "topk:k=16384", "compress-ef-topk": "topk:k=16384", "grad-ef": "topk:k=16384",
            "grad-diana": "qsgd:s=64", "compress-rs-qsgd": "qsgd:s=64,bucket=0"}.get(a.phase, "identity")
    comp = compressors.make(spec)
    coll = "allreduce" if spec == "identity" else "reduce-scatter" if a.phase == "compress-rs-qsgd" else "allgather"
    alg = algorithms.make(name, [comp, comp], d=d, n_workers=2, weights=np.full(2, 0.5), problem_info=info,
                          options={"collective": coll})
    rng = np.random.default_rng(0)
    x = rng.standard_normal(d) * 1e-3
    ws = alg.worker_init(0, obj)
    ss = alg.server_init(x)
    if hasattr(ws, "h"):
        ws.h[:] = rng.standard_normal(d) * 1e-3 if name == "diana" else 0.0

    def refill():
        pass

    if a.phase.startswith("grad"):
        def call():
            alg.worker_compute(ws, x, obj, rng)
    elif a.phase == "compress-identity":
        from hpcgc.compressors.summable import DenseSum
        codec = DenseSum(d, False)
        g = rng.standard_normal(d)

        def call():
            codec.begin(g, 1.0, rng)
    elif a.phase == "server-allreduce":
        total = rng.standard_normal(d).astype(np.float32)
        try:
            from hpcgc.compressors.summable import DenseSum
            from hpcgc.exchange.allreduce import Aggregate
            add_sum = Aggregate(DenseSum(d, False), total, 0.5)
        except ImportError:               # a checkout before the fused step
            def add_sum(out):
                out += 0.5 * total
        x_loop = np.array(x)

        def call():
            xs = alg.server_reduced(ss, add_sum)
            if xs is not x_loop:         # the exchange's copy into the loop's x (none when in place)
                x_loop[:] = xs
    elif a.phase == "compress-ef-topk":
        codec = comp.prepared(d)
        alg.codecs = [codec, codec]
        e0 = rng.standard_normal(d)          # EF's memory e + γ·g before the message

        def call():
            alg.worker_encode(ws, rng)

        def refill():
            ws.e[:] = e0
    elif a.phase == "compress-rs-qsgd":
        call, parts = rs_compress(alg, ws, d, rng)
    else:
        codec = comp.prepared(d)
        pays = [codec.encode(rng.standard_normal(d), rng) for _ in range(2)]
        alg.codecs = [codec, codec]

        def call():
            alg.server_step(ss, list(enumerate(pays)))
    if a.evict:
        big = np.ones(8 << 20)
        prepare = refill

        def refill():
            prepare()
            big.sum()
    refill()                     # untimed, before every call: the state the phase starts from
    call()                       # one untimed call in every run, --repeat 0 too: kernel loads, first touches
    times = []
    for _ in range(a.repeat):
        refill()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    if times:
        print(f"{a.phase}{' (evicted)' if a.evict else ''}: {a.repeat} calls, median {1e3 * float(np.median(times)):.3f} ms "
              f"(min {1e3 * min(times):.3f}) "
              f"(d = {d}, {a.rows} rows, {obj.A.nnz} nonzeros)")
        if a.phase == "compress-rs-qsgd":
            print("  " + ", ".join(f"{k} {1e3 * float(np.median(v[1:])):.3f} ms" for k, v in parts.items()))


def rs_compress(alg, ws, d, rng):
    """(call, parts) of ``compress-rs-qsgd``: the reduce-scatter exchange of rank 0 of 2, built on a
    stand-in for the transport (nothing here calls MPI: ``encode`` and the stage 2 are local), and
    a fixed segment sum S (the decoded sum of two stage-1 pieces) for its stage 2. ``parts``
    collects the two halves' times per call."""
    from types import SimpleNamespace

    from hpcgc.exchange.reduce_scatter import ReduceScatter
    place = SimpleNamespace(size=2, rank=0, is_root=True)
    ex = ReduceScatter(place, alg, [0, 1], 0, np.zeros(d), np.random.default_rng(1))
    ws.delta[:] = rng.standard_normal(d) * 1e-2
    a, b = ex.bounds[0]
    S = np.zeros(b - a)
    for _ in range(2):
        ex.codecs[0].add(ex.codecs[0].encode(rng.standard_normal(b - a) * 1e-2, rng), S, 0.5)
    parts = {"stage 1": [], "stage 2": []}

    def stage2_before():              # a checkout before ReduceScatter.recompress: its exchange's lines
        mine = ex.codecs[0]
        p2 = np.ascontiguousarray(mine.encode(S - ex.D, ex.rng))
        ex._m[:] = 0.0
        mine.add(p2, ex._m, ex.scale2)
        ex.D += ex.alpha2 * (ex._m - S)
        return p2, ex.comps[0].model_bits(p2, b - a)
    stage2 = (lambda: ex.recompress(S)) if hasattr(ex, "recompress") else stage2_before

    def call():
        t0 = time.perf_counter()
        ex.encode(ws)
        t1 = time.perf_counter()
        stage2()
        t2 = time.perf_counter()
        parts["stage 1"].append(t1 - t0)
        parts["stage 2"].append(t2 - t1)
    return call, parts


if __name__ == "__main__":
    main()
