"""Messages that add up element-wise: how a compressor rides ``MPI_Allreduce``.

Under ``run.collective = "allreduce"`` there is no server: every rank sends a fixed-length float
vector per *round*, the vectors are summed element-wise over the ranks, and every rank decodes the
same sum. This works only for compressors that are linear once their randomness is shared:

* ``identity`` — the vector itself (float32, or float64 with ``fp64=true``), and its 16-bit casts
  ``identity:fp16`` (summed by MPI in float16: ``MPI_FLOAT16_T``) and ``identity:bf16`` (summed in
  bfloat16 by a user-defined operation on 16-bit words, :mod:`hpcgc.transport`);
* ``int8`` — two rounds: an Allreduce (MAX) of one float32 scale s, then an Allreduce (SUM) of
  int8 values, each rank's in [−⌊127/n⌋, ⌊127/n⌋] so that the int8 sum is exact;
* ``sign`` — ±1 per entry in int8 (int16 / int32 beyond 127 / 32 767 workers), summed exactly by
  MPI's integer SUM: the vote count of signSGD with majority vote (:class:`.sign.SignSum`);
* ``randk:k=K,shared_seed=true`` — the k values at the coordinates drawn from the iteration's
  shared seed, identical on every worker, so Σ_i w_i C(x_i) = (d/k)·Σ_i w_i x_i[S];
* ``powersgd`` — rank-r factors: round 1 sums P_i = M_i Q, every rank orthogonalizes the sum P̂,
  round 2 sums Q_i = M_iᵀ P̂, and P̂ Q̂ᵀ = Σ_i w_i P̂ P̂ᵀ M_i (Vogels, Karimireddy, Jaggi 2019).

A :class:`SumCodec` is one worker's side of that protocol for one message of dimension d. It is
stateful (PowerSGD keeps P̂ between the rounds and Q for its warm start), one per rank and message
slot. The exchange drives it::

    v = codec.begin(x, weight, rng)            # round 0: weight already applied
    for r in range(1, codec.rounds):
        v = codec.advance(r, allreduce(v))     # later rounds from the previous sum
    total = allreduce(v)
    codec.decode_add(total, out)               # out += Σ_i w_i C(x_i)   (every rank, same result)
    codec.own_add(out_i, a)                    # out_i += a·C(x_i): this worker's own decoded message
                                               # (DIANA's shift, an error-feedback residual)

Weights: the worker multiplies its vectors by ``weight`` (w_i); with equal weights the exchange
passes weight = 1 and decodes with ``scale`` = w, so the vectors on the wire are exactly the
values a Gatherv payload would carry.

Bits: ``model_bits()`` is the papers' count for this worker's message (all rounds);
``wire_bytes()`` the bytes it hands to MPI (the sum of the round vectors' sizes).

Each round is one ``(operation, wire type)`` (``reductions()``): ``("sum", "float32")`` by default;
the wire type names the MPI datatype the transport reduces in (``float16``, ``bfloat16``, ``int8``,
``float32``, ``float64``), the numpy buffer holds the same bytes (``round_dtypes()``; 16-bit
floats as uint16 words). ``overflowed`` (identical on every rank: set from the sums) ends the run
with status ``overflow``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..errors import ConfigError


class SumCodec(ABC):
    """One worker's message as ``rounds`` float vectors of fixed length whose sums decode it."""

    dtype = np.float32
    rounds = 1

    @abstractmethod
    def lengths(self) -> tuple[int, ...]:
        """Length of the vector of each round (identical on every rank)."""

    @abstractmethod
    def begin(self, x: np.ndarray, weight: float, rng: np.random.Generator) -> np.ndarray:
        """Round-0 vector for message ``x`` (float64, length d), scaled by ``weight``.

        Draws from ``rng`` exactly as the compressor's ``compress`` would (one 64-bit seed), so a
        shared-seed compressor samples the same coordinates under every collective."""

    def advance(self, r: int, total: np.ndarray) -> np.ndarray:
        """Round-``r`` vector (1 ≤ r < rounds) from the sum of round r − 1."""
        raise NotImplementedError(f"{type(self).__name__} has one round")

    @abstractmethod
    def decode_add(self, total: np.ndarray, out: np.ndarray, scale: float = 1.0) -> None:
        """``out += scale · decoded aggregate``, from the sum of the last round."""

    @abstractmethod
    def own_add(self, out: np.ndarray, weight: float) -> None:
        """``out += weight · C(x)``: this worker's own decoded message (unweighted), valid after
        the last round (PowerSGD's needs the sum of round 1)."""

    @abstractmethod
    def model_bits(self) -> float:
        """Model bits of this worker's message, all rounds."""

    overflowed = False

    def round_dtypes(self) -> tuple:
        """The numpy dtype of each round's buffer."""
        return (self.dtype,) * self.rounds

    def reductions(self) -> tuple:
        """(operation, wire type) of each round's Allreduce."""
        return (("sum", np.dtype(self.dtype).name),) * self.rounds

    def wire_bytes(self) -> int:
        return int(sum(n * np.dtype(t).itemsize for n, t in zip(self.lengths(), self.round_dtypes())))

    def state(self) -> dict:
        """What this codec carries from one iteration to the next (checkpoints; a typed tree of
        fixed names, shapes and dtypes from the start, see ``Exchange.state``); default: nothing."""
        return {}

    def restore(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


class DenseSum(SumCodec):
    """``identity``: the vector itself, float32 (rounded, as the Gatherv payload) or float64."""

    dense_sum = True
    """The decoded aggregate is scale·sum element by element (``hpcgc.exchange.allreduce.Aggregate``)."""

    def __init__(self, d: int, fp64: bool):
        self.d = d
        self.dtype = np.float64 if fp64 else np.float32
        self._v = np.empty(d, dtype=self.dtype)

    def lengths(self):
        return (self.d,)

    def begin(self, x, weight, rng):
        rng.integers(0, 2**64, dtype=np.uint64)         # keep the stream aligned with compress()
        if weight == 1.0:
            self._v[:] = x
        else:
            np.multiply(x, weight, out=self._v, casting="unsafe")
        if not np.isfinite(self._v).all():
            raise ValueError("identity: input contains a non-finite value or exceeds the float32 range")
        # own message: the round vector itself (the Allreduce reads it into a separate sum; nothing
        # writes it before own_add), no copy; with a weight, the unweighted vector
        self._own = self._v if weight == 1.0 else x.astype(self.dtype)
        return self._v

    def decode_add(self, total, out, scale=1.0):
        out += scale * total if scale != 1.0 else total

    def own_add(self, out, weight):
        out += weight * self._own

    def model_bits(self):
        return float(self.d * 8 * np.dtype(self.dtype).itemsize)


class CastSum(SumCodec):
    """``identity:fp16`` / ``identity:bf16``: the vector cast to 16 bits, summed in that type by MPI
    (float16: MPICH's native ``MPI_FLOAT16_T`` SUM; bfloat16: the transport's user-defined SUM,
    each partial sum widened to float32, added and rounded back). The sum accumulates in the wire
    type, in the order MPICH's Allreduce algorithm combines the ranks. An Inf in the decoded sum —
    a value beyond the range on some rank, or a sum of in-range values that overflowed — sets
    ``overflowed`` on every rank alike (the same sum everywhere)."""

    dtype = np.uint16

    def __init__(self, d: int, comp):
        self.d, self.comp = d, comp
        self._v = np.empty(d, dtype=np.uint16)
        self._own = np.empty(d, dtype=np.uint16)

    def lengths(self):
        return (self.d,)

    def reductions(self):
        return (("sum", self.comp.wire_type),)

    def begin(self, x, weight, rng):
        rng.integers(0, 2**64, dtype=np.uint64)         # keep the stream aligned with compress()
        self.comp.encode_cast(x, weight, self._v)
        if weight == 1.0:
            self._own[:] = self._v
        else:
            self.comp.encode_cast(x, 1.0, self._own)
        return self._v

    def decode_add(self, total, out, scale=1.0):
        bad = self.comp.decode_cast(total, scale, out, True)
        if bad >= 0:
            self.overflowed = True
            self.comp.sum_overflow = bad

    def own_add(self, out, weight):
        self.comp.decode_cast(self._own, weight, out, True)

    def model_bits(self):
        return float(16 * self.d)


class IndexedSum(SumCodec):
    """``randk:shared_seed=true``: the k values at the coordinates every worker draws alike."""

    def __init__(self, d: int, k: int, fp64: bool, sample):
        self.d, self.k = d, k
        self.dtype = np.float64 if fp64 else np.float32
        self._sample = sample            # seed (uint64, one rng draw) -> sorted indices (int64, k)
        self._v = np.empty(k, dtype=self.dtype)

    def lengths(self):
        return (self.k,)

    def begin(self, x, weight, rng):
        seed = rng.integers(0, 2**64, dtype=np.uint64)
        self._idx = self._sample(np.uint64(seed)).copy()
        vals = x[self._idx]
        if not np.isfinite(vals).all():
            raise ValueError("randk: input contains a non-finite value")
        self._own = vals.astype(self.dtype)
        if weight == 1.0:
            self._v[:] = self._own
        else:
            np.multiply(vals, weight, out=self._v, casting="unsafe")
        if not np.isfinite(self._v).all():
            raise ValueError("randk: input exceeds the float32 range (use fp64=true)")
        return self._v

    def decode_add(self, total, out, scale=1.0):
        out[self._idx] += (scale * self.d / self.k) * total.astype(np.float64)

    def own_add(self, out, weight):
        out[self._idx] += (weight * self.d / self.k) * self._own.astype(np.float64)

    def model_bits(self):
        return float(self.k * 8 * np.dtype(self.dtype).itemsize)


class ConcatSum(SumCodec):
    """Several messages (per-tensor codecs over slices [a, b) of one vector) in one Allreduce per
    round; a part with fewer rounds sends nothing in the later ones. All parts share one dtype."""

    def __init__(self, parts):
        self.parts = list(parts)                       # [(a, b, codec)]
        dtypes = {np.dtype(c.dtype) for _, _, c in self.parts}
        if any(type(c).reductions is not SumCodec.reductions for _, _, c in self.parts):
            raise ConfigError("per-tensor Allreduce messages support float32/float64 vectors only "
                              "(not the 16-bit or int8 casts)")
        if len(dtypes) != 1:
            raise ConfigError("per-tensor Allreduce messages must share one float type (fp64 on all or none)")
        self.dtype = dtypes.pop().type
        self.rounds = max(c.rounds for _, _, c in self.parts)
        self._len = tuple(sum(c.lengths()[r] for _, _, c in self.parts if r < c.rounds)
                          for r in range(self.rounds))

    def lengths(self):
        return self._len

    def _join(self, r, vecs):
        return np.concatenate(vecs) if vecs else np.zeros(0, dtype=self.dtype)

    def _pieces(self, r, total):
        off = 0
        for a, b, c in self.parts:
            if r < c.rounds:
                n = c.lengths()[r]
                yield a, b, c, total[off:off + n]
                off += n

    def begin(self, x, weight, rng):
        self._final = {}
        return self._join(0, [c.begin(x[a:b], weight, rng) for a, b, c in self.parts])

    def advance(self, r, total):
        vecs = []
        for a, b, c, t in self._pieces(r - 1, total):
            if r < c.rounds:
                vecs.append(c.advance(r, t))
            else:
                self._final[id(c)] = t.copy()          # this part's last sum arrived in round r − 1
        return self._join(r, vecs)

    def decode_add(self, total, out, scale=1.0):
        self._final.update({id(c): t for _, _, c, t in self._pieces(self.rounds - 1, total)})
        for a, b, c in self.parts:
            c.decode_add(self._final[id(c)], out[a:b], scale)

    def own_add(self, out, weight):
        for a, b, c in self.parts:
            c.own_add(out[a:b], weight)

    def model_bits(self):
        return float(sum(c.model_bits() for _, _, c in self.parts))

    def state(self) -> dict:
        return {str(j): st for j, (_, _, c) in enumerate(self.parts) if (st := c.state())}

    def restore(self, state: dict) -> None:
        for j, st in state.items():
            self.parts[int(j)][2].restore(st)


COLLECTIVES = ("gather", "allreduce", "allgather", "reduce-scatter")
"""Every collective a run can use (``run.collective``); see :mod:`hpcgc.exchange`."""
