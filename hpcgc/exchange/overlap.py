"""``run.overlap``: each layer's exchange starts while the backward pass computes the layers below it.

PyTorch DDP's bucket design (Li et al., *PyTorch Distributed: Experiences on Accelerating Data
Parallel Training*, VLDB 2020, §3.2.3 and §4.2): the gradient of the output layer is final first;
its Allreduce can run while the backward pass computes the gradients of the layers below it, and
the step waits only for what is still in flight. Here a *bucket* is one layer of the MLP — its
weight and bias, contiguous in the flat vector (:meth:`hpcgc.models.Model.buckets`) — and the
collective is ``MPI_Iallreduce`` (:meth:`hpcgc.transport.Transport.iallreduce`)::

    backward pass (worker_compute_layers)            MPI
      layer L done → Δ[a_L:b_L] final → cast → Iallreduce(bucket L)   … in flight …
      layer L−1 done → … → Iallreduce(bucket L−1), Testall             … in flight …
      …
      layer 1 done → … → Iallreduce(bucket 1), Testall
    exchange: Waitall → decode every bucket's sum → the step (every rank, as ``allreduce``)

Progress (``docs/overlap.md``): MPICH advances a non-blocking collective only inside MPI calls,
unless its asynchronous progress thread is on (``MPIR_CVAR_ASYNC_PROGRESS=1``). The exchange calls
``MPI_Testall`` after every bucket it starts — the tests between layers; the thread is an
environment setting of the launch, measured against them by ``python -m hpcgc.bench overlap``.

Same iterates: every bucket is the same elementwise cast of the same coordinates, and MPICH sums
each coordinate over the ranks in the same order whatever the message length (recursive doubling
and recursive halving both pair ranks at distance 1, then 2, …), so the iterates equal the
blocking ``allreduce``'s bit for bit (``tests/mpi/test_overlap_mpi.py`` compares the files).

What it supports (checked at plan time by :func:`refusal`): ``run.collective = "allreduce"``,
algorithms that form their message coordinate by coordinate from one gradient
(``Algorithm.overlaps``: dcgd, diana, ef) and the elementwise codecs of ``identity`` (float32,
``fp64=true``, ``identity:fp16``, ``identity:bf16``). Refused, with the reason: ``int8`` (its scale
is a MAX over the whole vector, known only after the backward pass), ``randk:shared_seed=true`` and
``powersgd`` (their message is not per coordinate). ``allgather`` and ``gather``: :mod:`.overlap_allgather`,
:mod:`.overlap_gather` (per-bucket compression in fixed-size slots). ``reduce-scatter`` is refused (its
second stage is chained through the owners' sums; ``docs/overlap.md``). A problem with one layer
(logreg, ridge, sigmoid-loss, softmax) has nothing to overlap: the run warns and exchanges as usual.

Phases: ``grad`` is the backward pass alone; ``compress`` the buckets' casts; ``wait_up`` 0 (no
barrier: it would serialise what overlap runs in parallel); ``comm_up`` the time in MPI calls on
the critical path — the starts, the tests, the final wait: what communication cost the iteration —;
``comm_hidden`` the part of ``grad`` during which one of the iteration's collectives was in flight
(outside the iteration's sum; an upper bound of the transfer time hidden, since completion is only
seen at a test).
"""
from __future__ import annotations

import numpy as np

from ..transport import wtime
from .base import DIVERGED, Exchange

SUPPORTED = ("run.collective = 'allreduce' with dcgd, diana or ef and identity (float32, fp64=true, fp16, bf16); "
             "run.collective = 'allgather' or 'gather' with dcgd or diana and randk (shared_seed=false), or ef "
             "and topk")
"""What ``run.overlap`` supports, named in every refusal."""
ALLGATHER = {"dcgd": ("randk",), "diana": ("randk",), "ef": ("topk",)}
"""``allgather`` (:mod:`.overlap_allgather`): algorithm → compressors whose per-bucket payload has a
bound known before the pass (``Compressor.payload_bound``) and whose per-bucket form keeps the
algorithm's constants valid (ef: a biased compressor, scale 1)."""
WHY = {
    "int8": "int8's scale is a MAX over the whole vector, known only after the backward pass",
    "randk": "shared-seed rand-k samples its coordinates over the whole vector",
    "powersgd": "PowerSGD's two rounds need the whole matrix",
}
ONE_LAYER = ("logreg", "ridge", "sigmoid-loss", "softmax")
"""Problem kinds with one layer (one bucket): overlap has nothing to hide there (a warning)."""


def refusal(r: dict, alg_cls, comp) -> str | None:
    """Why ``run.overlap = true`` cannot run with this [run] table, algorithm class and compressor
    (one line naming what is supported), or None. Plan time, no data."""
    if not r.get("overlap"):
        if r.get("overlap_blocking"):
            return "run.overlap_blocking = true needs run.overlap = true (it is the blocking form of its buckets)"
        return None
    if r["collective"] in ("allgather", "gather"):
        return _allgather_refusal(r, alg_cls, comp)
    if r.get("overlap_blocking"):
        return ("run.overlap_blocking = true is for run.collective = 'allgather' or 'gather' (the per-bucket "
                "compressor); "
                "the blocking form of the allreduce buckets is run.overlap = false (the same bits)")
    if r["collective"] != "allreduce":
        return (f"run.overlap = true is not supported under run.collective = {r['collective']!r}; "
                f"supported: {SUPPORTED}")
    if not getattr(alg_cls, "overlaps", False):
        return (f"run.overlap = true is not supported with algorithm {alg_cls.name!r} (its message is not "
                f"final layer by layer during one backward pass); supported: {SUPPORTED}")
    if comp.name != "identity":
        why = WHY.get(comp.name, "")
        return (f"run.overlap = true is not supported with compressor {comp.spec}"
                + (f" ({why})" if why else "") + f"; supported: {SUPPORTED}")
    return None


def _allgather_refusal(r: dict, alg_cls, comp) -> str | None:
    """``allgather`` and ``gather`` (:mod:`.overlap_allgather`, :mod:`.overlap_gather`): the same slots."""
    name, coll = alg_cls.name, r["collective"]
    if coll == "gather" and r.get("server") == "dedicated":
        return ("run.overlap = true is not supported with run.server = 'dedicated' (rank 0 has no backward pass to "
                f"start buckets from); use run.server = 'worker'; supported: {SUPPORTED}")
    if not getattr(alg_cls, "overlaps", False) or name not in ALLGATHER:
        return (f"run.overlap = true is not supported with algorithm {name!r} under run.collective = {coll!r}; "
                f"supported: {SUPPORTED}")
    if comp.name not in ALLGATHER[name] or not comp.segment_wise or comp.payload_bound(1 << 20) is None:
        why = ("error feedback's step scales the decoded sum by the whole vector's 1/(1 + ω), not the buckets'"
               if name == "ef" and comp.unbiased else
               "its payload length is not bounded before the vector is seen, or it has no per-bucket form")
        return (f"run.overlap = true under run.collective = {coll!r} is not supported with {name!r} and "
                f"compressor {comp.spec} ({why}); supported: {SUPPORTED}")
    return None


def warning(kind: str) -> str | None:
    """The warning of ``run.overlap = true`` on a problem with one layer, or None."""
    if kind in ONE_LAYER:
        return (f"warning: run.overlap = true on problem.kind = {kind!r}, which has one layer (one bucket): "
                "nothing to overlap; the run exchanges as without it")
    return None


class Bucketed(Exchange):
    """The backward pass with one non-blocking collective per bucket, started as the pass completes
    it (:meth:`compute`, the phase accounting); a subclass encodes and starts a bucket
    (:meth:`_encode_bucket`, :meth:`_start_bucket`) and finishes the exchange after the pass."""

    draws_after = False
    """True: one 64-bit word is drawn from the encode generator after the pass (see compute)."""

    def __init__(self, *args, buckets, **kwargs):
        super().__init__(*args, **kwargs)
        self.buckets = list(buckets)                     # [(a, b)], in the order the backward pass completes them
        self.index = {ab: j for j, ab in enumerate(self.buckets)}
        self.ws = None
        self.started = 0
        self.window = [0.0, 0]                           # Σ seconds, iterations: see window_seconds

    def _encode_bucket(self, j: int, a: int, b: int):
        """Bucket j's message [a, b), final: the buffer its collective sends."""
        raise NotImplementedError

    def _start_bucket(self, j: int, v) -> None:
        """Start bucket j's non-blocking collective on the buffer :meth:`_encode_bucket` returned."""
        raise NotImplementedError

    # -- the backward pass -------------------------------------------------------------------------
    def compute(self, ws, x, local, rng) -> None:
        """The gradient layer by layer; each layer's bucket is cast and its Iallreduce started as soon
        as it is final, followed by a test of every started request (MPI progress)."""
        self.ws, self.started = ws, 0
        self._compress = self._comm = self.hidden = 0.0
        self._busy, self._busy_hooks = None, 0.0
        self._first, self._hooks_after = None, 0.0
        self.alg.worker_compute_layers(ws, x, local, rng, self._ready)
        end = wtime()
        if self.draws_after:
            # the whole-vector codec draws one 64-bit word per iteration after the gradient's draws (the
            # mini-batch; often the same generator), unused by these codecs: so do we, at the same point
            self.rng.integers(0, 2**64, dtype=np.uint64)
        if self._busy is not None:
            self.hidden += end - self._busy - self._busy_hooks
        if self._first is not None:
            self.window[0] += end - self._first - self._hooks_after
            self.window[1] += 1
        if self.started != len(self.buckets):
            raise RuntimeError(f"run.overlap: the backward pass completed {self.started} of "
                               f"{len(self.buckets)} buckets")
        self.hooked = self._compress + self._comm

    def _ready(self, a: int, b: int) -> None:
        t0 = wtime()
        j = self.index[(a, b)]
        v = self._encode_bucket(j, a, b)
        t1 = wtime()
        if self._first is None:
            self._first = t1
        else:
            self._hooks_after += t1 - t0
        if self._busy is None:
            self._busy, self._busy_hooks = t1, 0.0
        else:
            self._busy_hooks += t1 - t0
        self._start_bucket(j, v)
        self.started += 1
        done = self.t.test_pending()
        t2 = wtime()
        self._busy_hooks += t2 - t1
        self._hooks_after += t2 - t1
        self._compress += t1 - t0
        self._comm += t2 - t1
        if done:                                          # nothing in flight until the next start
            self.hidden += t2 - self._busy - self._busy_hooks
            self._busy = None

    def window_seconds(self) -> float:
        """Mean over iterations of this rank's overlap window: the backward pass's time after the
        first bucket's start (the exchange's own work taken out) — the computation that can hide
        communication, the H of the break-even model's max(0, T_comm − H) (``docs/breakeven.md``)."""
        return self.window[0] / self.window[1] if self.window[1] else float("nan")


class OverlapAllreduce(Bucketed):
    """``allreduce`` with one ``Iallreduce`` per bucket, started from inside the backward pass."""

    name = "allreduce"
    summary = "every rank sums each layer's message with MPI_Iallreduce as the backward pass completes it"
    draws_after = True

    def __init__(self, *args, buckets, **kwargs):
        super().__init__(*args, buckets=buckets, **kwargs)
        alg = self.alg
        comp = alg.compressors[self.me]
        self.codecs = [comp.sum_codec(b - a) for a, b in self.buckets]
        w = np.asarray(alg.weights, dtype=np.float64)
        equal = bool(np.all(w == w[0]))
        self.weight = 1.0 if equal else float(w[self.me])
        self.scale = float(w[0]) if equal else 1.0
        self.sums = [np.empty(c.lengths()[0], dtype=c.round_dtypes()[0]) for c in self.codecs]
        self.op = self.codecs[0].reductions()[0]
        self.sink = np.random.default_rng(0)             # the buckets' own draws: discarded (see compute)

    def _encode_bucket(self, j: int, a: int, b: int):
        return self.codecs[j].begin(self.alg.worker_message(self.ws)[a:b], self.weight, self.sink)

    def _start_bucket(self, j: int, v) -> None:
        self.t.iallreduce(v, self.sums[j], *self.op)

    # -- after the backward pass -----------------------------------------------------------------
    def encode(self, ws):
        return None                                       # every bucket was cast in compute

    def exchange(self, msg, ss):
        t0 = wtime()
        self.t.wait_pending()
        t1 = wtime()
        comp = self.alg.compressors[self.me]

        def add_sum(out):
            for (a, b), c, total in zip(self.buckets, self.codecs, self.sums):
                before = c.overflowed
                c.decode_add(total, out[a:b], self.scale)
                if c.overflowed and not before and getattr(comp, "sum_overflow", -1) >= 0:
                    comp.sum_overflow += a                # the coordinate in the whole vector

        def own_add(out, weight):
            for (a, b), c in zip(self.buckets, self.codecs):
                c.own_add(out[a:b], weight)
        self._set_x(self.alg.server_reduced(ss, add_sum))
        t2 = wtime()
        self.alg.worker_sent(self.ws, own_add)
        t3 = wtime()
        self._stepped()
        return self._compress + t3 - t2, 0.0, self._comm + t1 - t0, t2 - t1, 0.0, 0.0

    def floor_ops(self, per_iteration, d: int) -> list:
        """One Allreduce per bucket (blocking: the floor measures the transfers, not the overlap)."""
        return [("allreduce", n * np.dtype(dt).itemsize, np.dtype(dt), *self.op)
                for c in self.codecs for n, dt in zip(c.lengths(), c.round_dtypes())]

    def control(self) -> float:
        return DIVERGED if any(c.overflowed for c in self.codecs) else super().control()

    def account(self, bits_model, bits_wire) -> float:
        bits_wire += 8.0 * sum(c.wire_bytes() for c in self.codecs)
        bits_model += sum(c.model_bits() for c in self.codecs)
        return 0.0
