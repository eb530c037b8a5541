"""A compressor bound to one dimension for a run's loop: :class:`Prepared`, what
:meth:`hpcgc.compressors.base.Compressor.prepared` returns (re-exported by :mod:`.base`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Prepared(NamedTuple):
    """A compressor bound to one dimension for a run's loop (:meth:`Compressor.prepared`)."""

    encode: Callable        # (x, rng) -> payload: compress
    add: Callable           # (payload, out, weight): out += weight * decompress(payload); returns the
                            # indices it changed (sparse formats) or None (any entry may have changed)
    entries: Callable | None = None   # (payload, weight) -> sparse_base.Entries: a sparse message checked
                            # (header, count), its entries — increasing int64 indices and the float64
                            # products add would add — decoded by sparse_base.decode_entries (several
                            # messages into one pair of arrays) or Entries.decode(); None when the format
                            # has no such form
    own: Callable | None = None       # add for the payload encode returned last, from what the encoder
                            # kept (no decode); None: none kept (see add_own)
    update: Callable | None = None    # (payload, D, S, alpha, weight): D += alpha * ((0 + weight *
                            # decompress(payload)) - S) in one pass, without the decoded vector
                            # (Compressor._fused_update; reduce-scatter's second stage,
                            # ReduceScatter.recompress); None: not provided
    add_many: Callable | None = None  # (buf, starts, lengths, weights, out) -> count: ``add`` of the
                            # payloads buf[starts[j]:starts[j] + lengths[j]] with weights[j], j = 0, 1, …
                            # in that order — out_i = ((out_i + a_0i) + a_1i) + …, the same bits as one
                            # ``add`` per payload — in one kernel call (rank 0's server step on the
                            # Gatherv's receive buffer: Algorithm.add_messages). Returns how many it
                            # added: the first ``count`` payloads; payload ``count`` (if any) is invalid
                            # and nothing of it was added — the caller's ``add`` of it raises its
                            # message. Arrays: uint8 buf, int64 starts, int32 lengths, float64 weights
                            # and out (the transport's dtypes). Compressor._add_many_at; None: not provided

    def add_own(self, payload, out, weight):
        """``add`` of the worker's own payload, just encoded (``worker_sent``): from the encoder's own
        indices and wire values where the compressor keeps them (top-k: the same values, not decoded
        again), else — or for any other payload — ``add``."""
        return (self.own or self.add)(payload, out, weight)
