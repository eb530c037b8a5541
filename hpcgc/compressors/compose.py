"""``compose:A+B``: compressor composition, A applied first, then B on what A produced.

The spec is ``compose:`` followed by the parts' specs joined by ``+`` (``compose:randk:k=64+qsgd:s=4``);
the parser hands everything after ``compose:`` to this class verbatim, which splits it on ``+``. A
``+`` that ends a compressor's own name (``quant+``, ``rand-tau+``, ``block-quant+``) is kept with it:
a piece that is empty or starts with ``:`` is glued back to the previous one
(``compose:quant++qsgd`` = quant+ then qsgd). More than two parts nest to the right:
``compose:A+B+C`` = A then (B then C) (canonical spec ``compose:A+compose:B+C``; a ``compose:`` inside
is dropped, so the chain is always read flat). CocktailSGD (Wang et al., ICML 2023) composes rand-k,
top-k and quantization this way.

Semantics, C(x) = B(A(x)) with A(x) as A decodes it (its wire rounding included):

* A keeps a subset of coordinates (``randk``, ``topk``, ``threshold``: a sparse message with an index
  stream): B compresses the nnz-vector v of A's decoded values on A's support S, and
  C(x) = Σ_{j∈S} B(v)_j e_j. B's dimension is nnz (k for rand-k/top-k).
* any other A: B compresses the dense d-vector A(x); only B's message is sent.

Constants (d the dimension; ω_B taken at the dimension B acts on, k or d; for a variable support
— threshold — at d, the largest):

* A, B unbiased: E‖B(A(x)) − x‖² = E‖B(Ax) − Ax‖² + E‖Ax − x‖² (B unbiased given A(x)) ≤
  ω_B E‖Ax‖² + ω_A‖x‖², so ω = ω_A + ω_B + ω_A·ω_B (unbiased).
* A a biased coordinate selection (top-k: A(x) = x on S, so ‖Ax‖² + ‖Ax − x‖² = ‖x‖²), B unbiased with
  ω_B < 1: E‖B(Ax) − x‖² ≤ ω_B‖Ax‖² + ‖x‖² − ‖Ax‖² ≤ (1 − δ_A(1 − ω_B))‖x‖², so δ = δ_A·(1 − ω_B)
  (biased); no δ when ω_B ≥ 1 or A has none (threshold): error-feedback methods refuse it then.
* anything else (a biased B, a biased A that is not a coordinate selection, shared-randomness or
  matrix-only parts): the constants are not defined and the spec is refused when it is parsed.

A lossless ``identity:fp64=true`` in second place is a no-op (B(v) = v exactly): A's payload is sent as
it is, so ``compose:A+identity:fp64=true`` is A bit for bit (payload after the 8-byte header, decoded
values, model bits). In first place it is a real part whose output is x itself, so
``compose:identity:fp64=true+B`` is B bit for bit the same way (``identity`` in float32 is a real cast).

Randomness: ``compress`` draws one 64-bit seed; the first part that draws randomness gets it,
the next one mix64(seed ^ salt), …: a composition with a deterministic part (identity, top-k) is
then the other part bit for bit (``identity:fp64=true`` is exact; ``identity`` rounds to float32).

Wire format (after its own 8-byte header, format 20, flag bit 1 = Elias-coded indices)::

    A sparse:  nnz (uint32) | index bytes (uint32) | A's index stream (⌈log₂d⌉-bit fields or Elias-omega gaps, whichever is
               shorter, :mod:`.kernels.sparse`; byte-padded) | B's payload of dimension nnz (absent if nnz = 0)
    A dense:   B's payload of dimension d
    B a no-op: A's payload

Model bits: A's index bits + B's model bits (A sparse; the two counts are header overhead), B's model bits (A dense). Collectives: gather
and allgather (one byte payload per worker).
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import wire
from .kernels.elias_gaps import read_indices
from .kernels.prng import mix64
from .kernels.sparse import encode_indices, scatter_scaled, write_index_stream
from .sparse_base import SparseCompressor

_SALT = np.uint64(0xC0135E5A17C0135E)
LOSSLESS = "identity:fp64=true"
"""The part that is a no-op in second place (its output is its input, exactly): not sent."""
_SELECTIONS = ("topk", "threshold")
"""Biased parts that keep a subset of coordinates unscaled (A(x) = x on S): the δ rule above."""


def split_parts(text: str) -> list[str]:
    """``"randk:k=4+qsgd:s=2"`` → ["randk:k=4", "qsgd:s=2"]; a piece that is empty or starts with
    ``:`` belongs to the previous part (names ending in ``+``); a part's ``compose:`` prefix is dropped
    (the chain read flat)."""
    parts: list[str] = []
    for piece in text.split("+"):
        if parts and (not piece.strip() or piece.lstrip().startswith(":")) and not parts[-1].endswith("+"):
            parts[-1] += "+" + piece
        else:
            parts.append(piece)
    out = [p.strip() for p in parts]
    return [p.partition(":")[2] if p.split(":", 1)[0].strip().lower() == "compose" else p for p in out]


class Compose(Compressor):
    """C = B ∘ A (A first): B on A's kept values (sparse A) or on A's dense output; ω = ω_A + ω_B +
    ω_Aω_B (both unbiased), δ = δ_A(1 − ω_B) (top-k then unbiased B with ω_B < 1)."""

    name = "compose"
    description = ("composition compose:A+B (A first, each part a compressor spec; B acts on A's kept values "
                   "when A is rand-k/top-k/threshold, else on A's output); unbiased parts: omega = wA + wB + wA*wB "
                   "(wB at B's dimension); top-k then unbiased B: delta = deltaA*(1 - wB); bits: A's index bits "
                   "+ B's bits")
    PARAMS = ()
    FORMAT_ID = 20

    def __init__(self, of: str | None = None, **params) -> None:
        from . import make  # the registry (no import cycle at load time)
        if params:
            raise ConfigError(f"compose: unknown parameter {sorted(params)[0]!r}; write compose:A+B with A, B "
                              "compressor specs, e.g. compose:randk:k=64+qsgd:s=4")
        if not isinstance(of, str) or not of.strip():
            raise ConfigError("compose: parts are required: compose:A+B with A, B compressor specs, "
                              "e.g. compose:randk:k=64+qsgd:s=4")
        pieces = split_parts(of)
        if len(pieces) < 2 or not all(pieces):
            raise ConfigError(f"compose:{of}: expected at least two parts joined by '+', "
                              "e.g. compose:randk:k=64+qsgd:s=4")
        self.a = make(pieces[0])
        self.b = make(pieces[1]) if len(pieces) == 2 else Compose(of="+".join(pieces[1:]))
        spec = f"compose:{self.a.spec}+{self.b.spec}"
        if self.b.spec == LOSSLESS:           # B(v) = v exactly: a no-op, A's message is sent as it is
            self.b = None
        for c in (self.a, self.b) if self.b is not None else (self.a,):
            if c.shared_randomness or getattr(c, "matrices_only", False) or getattr(c, "aware", False):
                raise ConfigError(f"compose:{of}: part {c.spec} cannot be composed (shared randomness, "
                                  "matrix-shaped or smoothness-aware compressors are whole messages of their own)")
        self._params = {"of": spec.partition(":")[2]}
        self._spec = spec
        self._fingerprint = wire.fingerprint(self._spec)
        self._fp64, self._flags, self._float_bits, self._scale_bytes = False, 0, 32, 4
        self._seeds_a = not getattr(self.a, "deterministic", False)
        if self.b is None:
            self.unbiased, self.sparse = bool(self.a.unbiased), False
            return
        self.sparse = isinstance(self.a, SparseCompressor)
        variable = self.sparse and getattr(self.a, "VARIABLE_NNZ", False)
        if variable and "k" in self.b.params:
            raise ConfigError(f"compose:{of}: {self.b.spec} keeps k entries of {self.a.spec}'s variable "
                              "support, which may be smaller; compose with a fixed-k sparsifier (randk, topk)")
        self._exact_a = self.a.spec == LOSSLESS     # A(x) = x: the composition's constants are B's
        if not self._exact_a and (not self.b.unbiased or not (self.a.unbiased or self.a.name in _SELECTIONS)):
            bad = self.b if not self.b.unbiased else self.a
            raise ConfigError(f"compose:{of}: its constants are not defined ({bad.spec} is biased"
                              + (" and comes second" if bad is self.b else " and is not a coordinate selection")
                              + "); defined: unbiased then unbiased (omega), topk/threshold then unbiased (delta)")
        self.unbiased = bool(self.b.unbiased if self._exact_a else self.a.unbiased)

    @classmethod
    def describe(cls) -> str:
        return f"{cls.name}: {cls.description} [spec: compose:A+B, e.g. compose:randk:k=64+qsgd:s=4]"

    @property
    def _last(self) -> Compressor:
        """The part whose payload ends the message: B, or A when B is a no-op."""
        return self.a if self.b is None else self.b

    # -- constants -------------------------------------------------------------------------------
    def _dim_b(self, d: int) -> int:
        """The dimension B acts on: k for a fixed-k sparse A, else d."""
        if self.sparse and not getattr(self.a, "VARIABLE_NNZ", False):
            return min(self.a.k, d)
        return d

    def omega(self, d: int) -> float | None:
        if self.b is None:
            return self.a.omega(d)
        if self._exact_a:
            return self.b.omega(d)
        if not self.unbiased:
            return None
        wa, wb = self.a.omega(d), self.b.omega(self._dim_b(d))
        return wa + wb + wa * wb

    def delta(self, d: int) -> float | None:
        if self.b is None:
            return self.a.delta(d)
        if self._exact_a:
            return self.b.delta(d)
        if self.unbiased:
            return super().delta(d)
        da, wb = self.a.delta(d), self.b.omega(self._dim_b(d))
        return None if da is None or wb >= 1.0 else da * (1.0 - wb)

    def _validate(self, d: int) -> None:
        self.a.validate(d)
        if self.b is not None:
            self.b.validate(self._dim_b(d))

    # -- compress --------------------------------------------------------------------------------
    def _seeds(self, seed) -> tuple[np.uint64, np.uint64]:
        seed = np.uint64(seed)
        return seed, (np.uint64(mix64(seed ^ _SALT)) if self._seeds_a else seed)

    def _b_encode(self, v: np.ndarray, seed) -> np.ndarray:
        m = v.shape[0]
        checked = self.__dict__.setdefault("_b_checked", set())
        if m not in checked:                 # B's parameters at the dimension it acts on, once per m
            self.b.validate(m)
            checked.add(m)
        return self.b._codec_at(m)[0](v, seed)

    def _compress(self, x: np.ndarray, seed) -> np.ndarray:
        d = x.shape[0]
        sa, sb = self._seeds(seed)
        pa = self.a._codec_at(d)[0](x, sa)
        if self.b is None:
            out = self._new_payload(pa.size, d)
            out[wire.HEADER_BYTES:] = pa
            return out
        if not self.sparse:
            pb = self._b_encode(self.a.decompress(pa, d), sb)
            out = self._new_payload(pb.size, d)
            out[wire.HEADER_BYTES:] = pb
            return out
        idx, vals = self._a_support(pa, d)
        nnz = idx.shape[0]
        pb = self._b_encode(vals, sb) if nnz else np.zeros(0, dtype=np.uint8)
        use_elias, ibits, words = encode_indices(idx, d)
        ibytes = (ibits + 7) // 8
        out = wire.new_payload(8 + ibytes + pb.size, self.FORMAT_ID, wire.FLAG_ELIAS if use_elias else 0,
                               self._fingerprint, d)
        out[wire.HEADER_BYTES:wire.HEADER_BYTES + 8].view("<u4")[:] = (nnz, ibytes)
        out[wire.HEADER_BYTES + 8:wire.HEADER_BYTES + 8 + ibytes] = 0
        write_index_stream(idx, d, words, ibits, out, wire.HEADER_BYTES + 8)
        out[wire.HEADER_BYTES + 8 + ibytes:] = pb
        return out

    def _a_support(self, pa: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(S, A's decoded values on S) of a sparse A's payload, float64."""
        a = self.a
        pa, voff, nnz, idx, _ = a._read_sparse(pa, d)
        vals = a._read_values(pa, voff, nnz).astype(np.float64)
        scale = a._scale(d, nnz)
        if scale != 1.0:
            vals *= scale
        return idx, vals

    # -- decompress ------------------------------------------------------------------------------
    def _parts(self, payload: np.ndarray, d: int):
        """(indices or None, B's payload, B's dimension, index bits) after the header checks."""
        flags = wire.check_header(payload, self.name, self.FORMAT_ID, 0, self._fingerprint, d,
                                  wire.HEADER_BYTES + (8 if self.sparse else 0),
                                  free_flags=wire.FLAG_ELIAS if self.sparse else 0, exact=False)
        if not self.sparse:
            return None, payload[wire.HEADER_BYTES:], d, 0          # B's payload (A's when B is a no-op)
        nnz = int(payload[wire.HEADER_BYTES:wire.HEADER_BYTES + 4].view("<u4")[0])
        if nnz > d or (not getattr(self.a, "VARIABLE_NNZ", False) and nnz != self._dim_b(d)):
            raise PayloadError(f"{self.name}: corrupted payload: {nnz} kept coordinates for d={d}")
        ibytes = int(payload[wire.HEADER_BYTES + 4:wire.HEADER_BYTES + 8].view("<u4")[0])
        start = wire.HEADER_BYTES + 8
        if start + ibytes > payload.size:
            raise PayloadError(f"{self.name}: payload truncated: its index stream of {ibytes} bytes does not fit")
        idx, ibits = read_indices(payload[:start + ibytes], start, nnz, d, bool(flags & wire.FLAG_ELIAS), self.name)
        return idx, payload[start + ibytes:], nnz, ibits

    def model_bits(self, payload, d: int) -> int:
        payload = self._as_payload(payload, d)
        idx, pb, m, ibits = self._parts(payload, d)
        return ibits + (int(self._last.model_bits(pb, m)) if m else 0)

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        out = np.zeros(d)
        self._decompress_add(payload, d, out, 1.0)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        idx, pb, m, _ = self._parts(payload, d)
        if idx is None:
            self._last.decompress_add(pb, d, out, weight)
        elif m:
            scatter_scaled(self.b.decompress(pb, m), idx, weight, out, True)
