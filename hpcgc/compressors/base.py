"""The abstract :class:`Compressor` (its parameter schema and the ``"name:k=v,k=v"`` spec parser:
:mod:`.params`; the base classes of sparse messages: :mod:`.sparse_base`).

A compressor class declares, once, its name, a one-line description and a tuple of :class:`Param`
(type, default, allowed range). The base class does everything generic:

* parsing and checking parameters (``ConfigError`` naming compressor, parameter and allowed range),
* the canonical spec string (round-trips through :func:`hpcgc.compressors.make`),
* input checks for :meth:`Compressor.compress` (1-D float array, 1 ≤ d < 2**32) and drawing the
  kernel seed from the caller's ``numpy.random.Generator``,
* payload coercion and the default, non-fused :meth:`Compressor.decompress_add`.

A subclass implements ``_compress(x, seed)``, ``_decompress(payload, d)`` (and, to avoid a dense
temporary, ``_decompress_add(payload, d, out, weight)``), ``omega(d)`` (None if biased),
``delta(d)`` for biased (contractive) compressors, ``model_bits(payload, d)`` and, when some
parameter constraint depends on d, ``_validate(d)``. Payload lengths and headers are
checked before any kernel runs.
"""
from __future__ import annotations

import math
import numbers
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..errors import ConfigError, PayloadError
from .kernels import wire
from .kernels.norms import NONFINITE, block_norms_linf, write_scales
from .kernels.norms import OK as SCALES_OK
from .params import REQUIRED, Param, format_value
from .prepared import Prepared

_F4, _F8, _U4 = struct.Struct("<f"), struct.Struct("<d"), struct.Struct("<I")
_HEAD = struct.Struct(f"{wire.HEADER_BYTES}s")


def round_up_float32(v: float) -> float:
    """The smallest float32 value ≥ ``v`` (a float ≥ 0 or NaN), as a float: the scalar
    :func:`wire.round_up_to_float32` (inf when v exceeds the float32 range)."""
    try:
        b = _F4.pack(v)                # round to nearest, as numpy's cast
    except OverflowError:
        return math.inf
    f = _F4.unpack(b)[0]
    if f < v:                          # next float32 up: v ≥ 0, so the bit pattern + 1
        f = _F4.unpack(_U4.pack(_U4.unpack(b)[0] + 1))[0]
    return f


def draw_seed(rng: np.random.Generator) -> np.uint64:
    """The one 64-bit seed ``compress`` draws: ``rng.integers(0, 2**64, dtype=np.uint64)``, which
    for numpy's default bit generator (PCG64) is its next raw 64-bit output, taken directly."""
    bg = rng.bit_generator
    if type(bg) is np.random.PCG64:
        return np.uint64(bg.random_raw())
    return np.uint64(rng.integers(0, 2**64, dtype=np.uint64))


def _ready(x, d) -> bool:
    """x is already what ``_as_input`` makes of it: a contiguous 1-D float64 ndarray of length d."""
    return (type(x) is np.ndarray and x.dtype.char == "d" and x.ndim == 1 and x.shape[0] == d
            and x.flags.c_contiguous)


def _ready_payload(payload, d) -> bool:
    """payload is already what ``_as_payload`` makes of it, for a valid int d."""
    return (type(payload) is np.ndarray and payload.dtype.char == "B" and payload.ndim == 1
            and payload.flags.c_contiguous and type(d) is int and 1 <= d <= wire.MAX_D)


class Compressor(ABC):
    """Abstract compressor: parameters, payload bytes in and out, ω and model bits.

    Class attributes a subclass sets: ``name``, ``description`` (one line), ``PARAMS``,
    ``FORMAT_ID`` (wire format byte), ``unbiased``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    FORMAT_ID: ClassVar[int]
    unbiased: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        schema = {p.name: p for p in self.PARAMS}
        unknown = sorted(set(params) - set(schema))
        if unknown:
            known = ", ".join(schema) or "none"
            raise ConfigError(f"{self.name}: unknown parameter {unknown[0]!r}; parameters: {known}")
        values: dict[str, Any] = {}
        for p in self.PARAMS:
            if p.name in params:
                values[p.name] = p.coerce(params[p.name], self.name)
            elif p.default is REQUIRED:
                raise ConfigError(f"{self.name}: parameter {p.name} is required ({p.allowed()}), "
                                  f"e.g. '{self.name}:{p.name}=...'")
            else:
                values[p.name] = p.default
        self._params = values
        parts = [p.name if p.flag and values[p.name] is True else f"{p.name}={format_value(values[p.name])}"
                 for p in self.PARAMS if p.in_spec == "always" or values[p.name] != p.default]
        self._spec = self.name + (":" + ",".join(parts) if parts else "")
        self._fingerprint = wire.fingerprint(self._spec)
        self._fp64 = bool(values.get("fp64", False))
        self._flags = wire.FLAG_FP64 if self._fp64 else 0
        self._float_bits = 64 if self._fp64 else 32
        self._scale_bytes = 8 if self._fp64 else 4
        self._init()

    def _init(self) -> None:
        """Hook: derive attributes from ``self._params`` (cross-parameter checks go here)."""

    # -- identity --------------------------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """Parameter values (a copy), defaults included."""
        return dict(self._params)

    @property
    def spec(self) -> str:
        """Canonical ``"name:k=v,..."``; ``make(c.spec)`` gives an equal compressor."""
        return self._spec

    @classmethod
    def describe(cls) -> str:
        """One line: name, description, parameters with defaults and ranges."""
        params = ", ".join(p.describe() for p in cls.PARAMS)
        return f"{cls.name}: {cls.description}" + (f" [{params}]" if params else "")

    def __repr__(self) -> str:
        return f"make({self._spec!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Compressor) and type(other) is type(self) and other._spec == self._spec

    def __hash__(self) -> int:
        return hash((type(self), self._spec))

    # -- theory ----------------------------------------------------------------------------------
    @abstractmethod
    def omega(self, d: int) -> float | None:
        """Variance parameter ω for dimension d: E‖C(x) − x‖² ≤ ω‖x‖² (None if biased)."""

    def delta(self, d: int) -> float | None:
        """Contraction parameter δ for dimension d: ‖C(x) − x‖² ≤ (1 − δ)‖x‖² for every x (in
        expectation for random compressors), the constant error feedback needs; None where no
        such δ > 0 exists for every x (e.g. plain sign, hard threshold, unbiased compressors with
        ω ≥ 1 — scale those by 1/(1 + ω) to get δ = 1/(1 + ω)). Default: 1 − ω for unbiased
        compressors with ω < 1 (E‖C(x) − x‖² ≤ ω‖x‖²), else None."""
        om = self.omega(d) if self.unbiased else None
        return None if om is None or om >= 1.0 else 1.0 - om

    @abstractmethod
    def model_bits(self, payload, d: int) -> int:
        """Paper-formula bit count of this message (see ``docs/compressors.md``)."""

    BITS_BY_LENGTH: ClassVar[bool] = False
    """True when ``model_bits`` depends on d and the payload's length only (fixed-layout formats,
    where the formula is a function of d): :meth:`decoded_model_bits` then evaluates it once per
    (d, length)."""

    def sparse_layout(self, d: int) -> tuple[int, int, int] | None:
        """(value bits, nnz, offset of the index stream) when every payload at dimension d carries
        the same value bits and nnz indices at that offset, fixed-width (⌈log₂d⌉ bits each) unless
        the header's Elias flag (``wire.FLAG_ELIAS``) is set (then the stream's own bits): its
        ``model_bits`` is value bits + index bits, which rank 0 then counts for all workers at once
        (:meth:`hpcgc.exchange.base.Exchange.account`: the flags bytes in one array read, the Elias
        streams' lengths in one kernel call). None (the default): no such layout."""
        return None

    def decoded_model_bits(self, payload, d: int) -> int:
        """``model_bits`` of a payload that was just decoded without error (the runner's bit
        accounting, after the server step has decoded every message): for ``BITS_BY_LENGTH``
        formats the formula — with its checks — is evaluated on the first payload of each
        (d, length) and looked up afterwards; otherwise ``model_bits`` itself."""
        if not self.BITS_BY_LENGTH:
            return self.model_bits(payload, d)
        cache = self.__dict__.setdefault("_bits_by_length", {})
        key = (d, len(payload))
        bits = cache.get(key)
        if bits is None:
            bits = cache[key] = self.model_bits(payload, d)
        return bits

    # -- collectives (hpcgc.compressors.summable) ------------------------------------------------
    collectives: ClassVar[tuple[str, ...]] = ("gather", "allgather")
    """The ``run.collective`` values this compressor's messages can ride: every byte payload rides
    Gatherv and Allgatherv; only messages that add up element-wise ride Allreduce."""

    deterministic: ClassVar[bool] = False
    """True when the message is a function of x alone (identity, top-k, sign, threshold): the seed
    ``compress`` draws is unused (a composition hands it to its next part, :mod:`.compose`)."""

    shared_randomness: ClassVar[bool] = False
    """True when every worker must draw the same randomness in an iteration (shared-seed rand-k):
    the runner then passes the iteration's shared generator to ``compress``. The workers' messages
    are then correlated, so averaging n of them does not divide the variance by n."""

    def sum_codec(self, d: int, shape: tuple | None = None):
        """The :class:`~.summable.SumCodec` that carries this compressor's message of dimension d
        (a matrix of ``shape`` where it matters) through ``MPI_Allreduce``; ConfigError if it cannot."""
        raise ConfigError(f"{self.spec} cannot ride Allreduce (its messages do not add up element-wise); "
                          f"collectives it can use: {', '.join(self.collectives)}")

    kernels: tuple = ()
    """Warm-up functions of kernels a run calls outside compress/decompress (the casts' MPI SUM
    operations): loaded with the others before the first iteration (``warm_jit``)."""

    overflow: float = 0.0
    """The largest finite |value| this compressor sent as ±Inf because its wire type could not hold it
    (the casts, ``int8``'s scale); 0.0: none. Read by the run when the iterate becomes non-finite, to
    end it with status ``overflow`` instead of ``diverged``."""
    sum_overflow: int = -1
    """The first coordinate of an Allreduce sum that overflowed its wire type (−1: none)."""

    def check_workers(self, n_workers: int) -> None:
        """Plan-time check against the number of workers (known from the MPI world before any data is
        read): ConfigError if this compressor cannot serve n workers (``int8``: n ≤ 127). Default: none."""

    # -- segments (run.collective = "reduce-scatter", hpcgc.exchange.reduce_scatter) ---------------
    segment_wise: ClassVar[bool] = False
    """True when the compressor has a segment-wise form: ``reduce-scatter`` splits a d-vector into
    n contiguous segments and compresses each one alone (:meth:`segment`). A compressor that sets it
    lists ``"reduce-scatter"`` in its ``collectives``."""

    def segment(self, d: int, d_seg: int) -> Compressor:
        """The compressor applied to one segment of length ``d_seg`` of a d-vector under
        ``reduce-scatter``: by default this compressor itself on the sub-vector (its ω or δ are
        then those of dimension d_seg); rand-k and top-k scale k (:class:`~.base.FixedKSparse`).
        ConfigError if the compressor has no segment-wise form."""
        if not self.segment_wise:
            raise ConfigError(f"{self.spec} has no segment-wise form, so it cannot ride run.collective = "
                              f"'reduce-scatter'; collectives it can use: {', '.join(self.collectives)}")
        return self

    def payload_bound(self, d: int) -> int | None:
        """The most bytes any payload of this compressor at dimension d can have, when that is fixed
        before the vector is seen: ``run.overlap`` under ``allgather`` sends each bucket's payload in
        a slot of this size with no length announcement (:mod:`hpcgc.exchange.overlap_allgather`).
        None (the default): not declared, so that exchange refuses the compressor."""
        return None

    # -- run context -----------------------------------------------------------------------------
    def for_run(self, *, d: int, n_workers: int) -> Compressor:
        """This compressor with parameters that depend on the run resolved (the runner calls it
        once per worker compressor, before ``validate``): e.g. ``dither``'s automatic
        s = ⌊√d/n⌋. The spec string stays as the user wrote it. Default: ``self``."""
        return self

    # -- dimension checks ------------------------------------------------------------------------
    def validate(self, d: int) -> None:
        """Raise ConfigError if these parameters are impossible for dimension d."""
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise ConfigError(f"{self.name}: dimension d must be an integer, got {d!r}")
        if not 1 <= d <= wire.MAX_D:
            raise ConfigError(f"{self.name}: dimension d={d} out of range; allowed: 1 <= d <= {wire.MAX_D}")
        self._validate(int(d))

    def _validate(self, d: int) -> None:
        """Hook for d-dependent parameter checks."""

    # -- compress --------------------------------------------------------------------------------
    def compress(self, x, rng: np.random.Generator) -> np.ndarray:
        """Compress 1-D float64/float32 ``x``; return the payload (uint8 array, the bytes sent).

        Deterministic given ``rng``'s state: exactly one 64-bit seed is drawn from ``rng`` (also by
        deterministic compressors, so that streams stay aligned) and seeds the kernel's PRNG
        (:mod:`hpcgc.compressors.kernels.prng`). Raises ValueError for non-finite input.
        """
        if not _ready(x, self.__dict__.get("_valid_d")):      # else: checked before (the runner's calls)
            x = self._as_input(x)
            self.validate(x.shape[0])
            self._valid_d = x.shape[0]                        # validate depends on d (and the parameters) only
        if type(rng) is not np.random.Generator and not isinstance(rng, np.random.Generator):
            raise TypeError(f"{self.name}: rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return self._compress(x, draw_seed(rng))

    # -- the runner's prepared path --------------------------------------------------------------
    def prepared(self, d: int) -> Prepared:
        """This compressor bound to dimension ``d`` for a run's loop: ``encode(x, rng)`` →
        payload and ``add(payload, out, weight)`` (out += weight·value), the same bytes and values
        as :meth:`compress` and :meth:`decompress_add`, without their per-call checks of the
        *arguments* — d and the parameters are checked here, once; the caller passes contiguous
        float64 arrays of length d (``x``, ``out``) and 1-D uint8 payloads. A payload's *contents*
        (header, length, fields) are still checked on every ``add``: they came over the network."""
        self.validate(d)
        enc, add = self._codec_at(d)
        return Prepared(lambda x, rng: enc(x, draw_seed(rng)), add, self._entries_at(d), self._own_at(d, add),
                        self._fused_update(d), self._add_many_at(d))

    def _entries_at(self, d: int) -> Callable | None:
        """Hook of :meth:`prepared`: its ``entries`` callable at dimension d (a sparse format's
        checked message, whose entries a step that merges several messages decodes: EF), or None
        (the default)."""
        return None

    def _own_at(self, d: int, add: Callable) -> Callable | None:
        """Hook of :meth:`prepared`: its ``own`` callable at dimension d (``add`` of the payload the
        last encode returned, without decoding it; ``add`` for any other payload), or None (the default)."""
        return None

    def _fused_update(self, d: int) -> Callable | None:
        """Hook of :meth:`prepared`: ``Prepared.update`` at dimension d — the same bits as
        ``m = zeros; add(payload, m, weight); D += alpha * (m - S)`` from a decoder that never
        writes the d-vector m (the reduce-scatter owner's update of its D). Default None."""
        return None

    def _add_many_at(self, d: int) -> Callable | None:
        """Hook of :meth:`prepared`: ``Prepared.add_many`` at dimension d — one kernel call that adds
        many payloads of this format, the same bits as one ``add`` each, in order. Default None: a
        format without it is added one payload at a time (the batch form is an optional fast path)."""
        return None

    def _codec_at(self, d: int) -> tuple:
        """(encode(x, seed), add(payload, out, weight)) at dimension d, made once per d: by default
        :meth:`_compress` and :meth:`_decompress_add`; a compressor whose kernels take layout
        constants binds them here (and implements those two through it)."""
        cache = self.__dict__.setdefault("_codecs_at", {})
        got = cache.get(d)
        if got is None:
            got = cache[d] = self._make_codec(d)
        return got

    def __getstate__(self) -> dict:
        """Copies (``copy.copy``: the smoothness-aware compressors' bound variants) and pickles leave
        out the bound callables of :meth:`_codec_at`: they close over *this* instance."""
        state = dict(self.__dict__)
        for key in ("_codecs_at", "_kept", "_kept_idx"):     # _kept*: top-k's last payload's entries
            state.pop(key, None)
        return state

    def _make_codec(self, d: int) -> tuple:
        """Hook of :meth:`_codec_at`: build the two callables for dimension d."""
        return self._compress, (lambda payload, out, weight: self._decompress_add(payload, d, out, weight))

    def _as_input(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 1:
            raise ValueError(f"{self.name}: x must be a 1-D array, got shape {x.shape}")
        if x.dtype not in (np.float64, np.float32):
            if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
                raise ValueError(f"{self.name}: x must be a real float array, got dtype {x.dtype}")
            x = x.astype(np.float64)
        return np.ascontiguousarray(x)

    def _nonfinite_error(self, x: np.ndarray, what: str = "norm") -> ValueError:
        """The ValueError for a non-finite scale: NaN/Inf in x, or an overflowing norm/value."""
        if not np.all(np.isfinite(x)):
            bad = int(np.flatnonzero(~np.isfinite(x))[0])
            return ValueError(f"{self.name}: input contains a non-finite value (x[{bad}] = {x[bad]})")
        hint = "" if self._params.get("fp64", True) else "; use fp64=true for float64 scales"
        return ValueError(f"{self.name}: input too large: its {what} overflows the wire format{hint}")

    @abstractmethod
    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        """Compress a contiguous 1-D float array whose length passed ``validate``."""

    # -- decompress ------------------------------------------------------------------------------
    def decompress(self, payload, d: int) -> np.ndarray:
        """Decode ``payload`` into a new float64 array of length ``d`` (PayloadError if invalid)."""
        payload = self._as_payload(payload, d)
        return self._decompress(payload, int(d))

    def decompress_add(self, payload, d: int, out: np.ndarray, weight: float = 1.0) -> None:
        """``out += weight * decompress(payload, d)``, fused where the subclass supports it.

        ``out`` must be a float64 array of length d; it is left untouched if the payload is invalid.
        """
        if _ready_payload(payload, d) and _ready(out, d) and out.flags.writeable:   # the runner's calls
            self._decompress_add(payload, d, out, float(weight))
            return
        payload = self._as_payload(payload, d)
        if not (isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == (d,)):
            raise ValueError(f"{self.name}: out must be a float64 array of shape ({d},), got "
                             f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"{self.name}: out must be a writeable contiguous array")
        self._decompress_add(payload, int(d), out, float(weight))

    def _as_payload(self, payload, d) -> np.ndarray:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not 1 <= d <= wire.MAX_D:
            raise PayloadError(f"{self.name}: requested dimension d={d!r} is invalid")
        return wire.as_payload(payload)

    @abstractmethod
    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        """Decode a uint8 payload into a new float64 array (check header/length first)."""

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        """Default: via a dense temporary. Subclasses override with a fused kernel."""
        y = self._decompress(payload, d)
        y *= weight
        out += y

    # -- helpers for subclasses ------------------------------------------------------------------
    # derived from the parameters once (``__init__``), plain attributes: the hot paths read them per call
    _fp64: bool                  # float64 scales/values on the wire (``fp64=true``)
    _flags: int                  # header flags of this format (wire.FLAG_FP64 with fp64)
    _float_bits: int             # F in the model-bit formulas: 32, or 64 with ``fp64=true``
    _scale_bytes: int            # bytes of one scale on the wire: 4, or 8 with ``fp64=true``

    def _header(self, d: int, flags: int) -> bytes:
        """The 8 header bytes of this compressor's payloads at dimension d with these flags
        (:func:`wire.new_payload`'s layout), built once per (flags, d)."""
        cache = self.__dict__.setdefault("_headers", {})
        head = cache.get((flags, d))
        if head is None:
            head = cache[(flags, d)] = wire.new_payload(0, self.FORMAT_ID, flags, self._fingerprint, d).tobytes()
        return head

    def _new_payload(self, body_bytes: int, d: int) -> np.ndarray:
        buf = np.empty(wire.HEADER_BYTES + body_bytes, dtype=np.uint8)      # body uninitialised
        _HEAD.pack_into(buf, 0, self._header(d, self._flags))
        return buf

    def _check_payload(self, payload: np.ndarray, d: int, body_bytes: int) -> None:
        n = wire.HEADER_BYTES + body_bytes
        if payload.size == n and payload[:wire.HEADER_BYTES].tobytes() == self._header(d, self._flags):
            return                      # exactly the header and length check_header accepts
        wire.check_header(payload, self.name, self.FORMAT_ID, self._flags, self._fingerprint, d, n)

    def _scales_for_wire(self, norms: np.ndarray) -> np.ndarray:
        """Scales as they will be sent (float32 rounded up, or float64), as float64 for the kernels."""
        if self._fp64:
            return norms
        if norms.shape[0] == 1:          # one scale: the scalar rounding, without four numpy calls
            return np.array([round_up_float32(float(norms[0]))])
        return wire.round_up_to_float32(norms)

    def _write_scales(self, payload: np.ndarray, scales: np.ndarray) -> None:
        n = scales.shape[0] * self._scale_bytes
        payload[wire.HEADER_BYTES:wire.HEADER_BYTES + n].view("<f8" if self._fp64 else "<f4")[:] = scales

    def _compress_blocks(self, x: np.ndarray, b: int, m: int, body: int, what: str):
        """Shared front half of the block-scaled compressors: the m block ℓ_p norms of x (p = self.p,
        block size b), checked and converted to wire scales; a new payload with the header and the
        scales written (:func:`.kernels.norms.write_scales`: one kernel call for ℓ2).

        ``what`` names the block in the float32-overflow error ("bucket" or "block").
        Returns (payload, scales, offset of the data after the scales).
        """
        norms, l2 = self._block_norms(x, b, m)
        payload = np.empty(wire.HEADER_BYTES + body, dtype=np.uint8)
        status = write_scales(x, b, norms, l2, self._fp64, self._header_array(x.shape[0]), payload)
        if status != SCALES_OK:
            raise self._scales_error(x, status, what)
        return payload, norms, wire.HEADER_BYTES + m * self._scale_bytes

    def _block_norms(self, x: np.ndarray, b: int, m: int) -> tuple[np.ndarray, bool]:
        """(norms, l2) for :func:`.kernels.norms.write_scales`: with p = 2 an empty array the
        kernel fills (l2 = True); with p = ∞ the block max-norms, computed here."""
        norms = np.empty(m)
        if self.p == 2:
            return norms, True
        block_norms_linf(x, b, norms)
        return norms, False

    def _scales_error(self, x: np.ndarray, status: int, what: str) -> ValueError:
        """The ValueError of a :func:`.kernels.norms.write_scales` status other than OK."""
        if status == NONFINITE:
            return self._nonfinite_error(x)
        return self._nonfinite_error(x, f"{what} norm (float32)")

    def _header_array(self, d: int) -> np.ndarray:
        """:meth:`_header` as a uint8 array (for kernels that write or compare it), built once per d."""
        cache = self.__dict__.setdefault("_header_arrays", {})
        head = cache.get(d)
        if head is None:
            head = cache[d] = np.frombuffer(self._header(d, self._flags), dtype=np.uint8)
        return head


class DecodeInto:
    """Mixin for a compressor with one fused decoder ``_decode(payload, d, out, weight, accumulate)``
    (``out[j] = v_j``, or ``out[j] += weight·v_j`` when accumulating): derives ``_decompress`` and
    ``_decompress_add`` from it. ``DENSE_DECODE = False`` when the decoder writes only the kept
    entries, so that ``_decompress`` starts from zeros."""

    DENSE_DECODE: ClassVar[bool] = True

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        out = np.empty(d) if self.DENSE_DECODE else np.zeros(d)
        self._decode(payload, d, out, 1.0, False)
        return out

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        self._decode(payload, d, out, weight, True)
