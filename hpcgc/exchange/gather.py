"""``gather``: the parameter server (the default, as the seeds describe it).

    wait_up    Gather of one 4-byte length per rank to rank 0 (the announcement): rank 0 waits
               in it for the last worker's gradient and compression — the "late sender" time of
               MPI profilers — plus one latency; a worker only sends (≈ one latency)
    comm_up    Gatherv of the payloads to rank 0 (every sender has arrived: transfer)
    server     rank 0 decodes, aggregates and steps (and compresses the downlink message, if any)
    wait_down  Bcast of the control word (8 bytes) from rank 0: the workers wait in it while rank 0
               steps (late sender: the server); compressed downlink: the Bcast of its 8-byte
               header (payload length, control word)
    comm_down  Bcast of the new iterate (float64), and of the algorithm's extra vector when it sends one
               (``Algorithm.down_extra``: ADIANA's w at the iterations where it moves); compressed downlink (``run.downlink``, EF21-P,
               :mod:`.downlink`): Bcast of the payload and every rank's decoding of it into w;
               the same path carries an algorithm's own step message (``Algorithm.step_downlink``:
               signSGD-MV's 1-bit vote, applied by every rank)

With ``run.wait_phases = false`` the wait phases are 0 and the same time is in ``comm_*``; the
dense iterate and control word then travel in one Bcast (8(d + 1) bytes either way).

Cost model (α–β, P ranks, payload s_i bytes, d coordinates): the Gatherv moves Σ_{i≠0} s_i bytes
into rank 0's link, ≈ α·log P + β·Σ s_i; the dense broadcast 8(d + 1) bytes to every rank,
≈ (α + β·8(d + 1))·log P for a binomial tree (MPICH switches to scatter + allgather,
≈ 2β·8(d + 1), for large messages). A compressed downlink of s_0 payload bytes costs two
broadcasts, ≈ (2α + β·(8 + s_0))·log P: one more latency, s_0 instead of 8d bytes.
"""
from __future__ import annotations

import numpy as np

from ..transport import DOWN_HEADER_BYTES, wtime
from ..typed_state import rng_state, set_rng_state
from .base import CONTINUE, DIVERGED, EMPTY, Exchange, exploded, mean_bytes


class Gather(Exchange):
    name = "gather"
    summary = "parameter server: Gatherv of the payloads to rank 0, step on rank 0, Bcast of the iterate"
    server_everywhere = False
    carries_control = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        d = self.x.shape[0]
        self.xbuf = self.ctrl = None
        if self.downlink is None:          # iterate + one control word; x is a view of it (the run
            self.xbuf = np.zeros(d + 1)    # takes ``x = exchange.x``): the Bcast writes the iterate
            self.xbuf[:-1] = self.x        # where every rank reads it, no copy after
            self.x = self.xbuf[:-1]
            self.ctrl = self.xbuf[-1:]     # broadcast first when the phases are split (wait_down)
        # compressed downlink (EF21-P): self.x is w on every rank; rank 0 also keeps the server's x
        self.server_x = None
        self.down_payload = EMPTY
        self.control_word = CONTINUE
        self.diff = np.empty(d) if self.downlink is not None and self.t.is_root else None
        self.placed = None                 # rank 0: the server's x when it lives in xbuf (place_server_state)
        self.extra_size = 0                # float64 entries of this iteration's extra Bcast (Algorithm.down_extra)

    def place_server_state(self, ss) -> None:
        """Rank 0, dense broadcast, an algorithm that ``steps_in_place``: the server's x becomes the
        view ``xbuf[:-1]`` (same values), so the step writes the iterate into the broadcast buffer and
        rank 0 copies nothing per iteration (8 MiB at d = 2²⁰). Rank 0's worker reads the same view,
        as it read the broadcast iterate before; the step runs after its gradient and message."""
        if self.xbuf is not None and ss is not None and self.alg.steps_in_place:
            self.xbuf[:-1] = ss.x
            ss.x = self.placed = self.xbuf[:-1]

    def encode(self, ws):
        return EMPTY if ws is None else super().encode(ws)

    def exchange(self, msg, ss):
        if self.downlink is not None:
            return self._exchange_compressed(msg, ss)
        t = self.t
        got, t0, t1, t2 = self._up(msg)
        if got is not None:
            xs = self._server(ss, got)
            t3 = wtime()
            if xs is not self.placed:
                self.xbuf[:-1] = xs
            control = self._stepped()
            self.xbuf[-1] = DIVERGED if exploded(xs, self.alg.step_norm_sq(ss)) else control
        else:
            t3 = t2
        t4 = wtime()
        if self.split:
            t.bcast(self.ctrl)                      # the workers wait here for rank 0's step
            t5 = wtime()
            t.bcast(self.x)
        else:
            t5 = t4
            t.bcast(self.xbuf)
        extra = self.alg.down_extra(ss)             # ADIANA's w when its shared coin moved it
        self.extra_size = 0 if extra is None else extra.size
        if extra is not None:
            t.bcast(extra)
        t6 = wtime()
        return (0.0, *self._late_sender(t0, t1, t2), t3 - t2, t5 - t4, t6 - t5)

    def _up(self, msg):
        """The uplink: (what rank 0 received — None elsewhere —, t0, t1, t2) with the lengths'
        Gather from t0 to t1 (rank 0 waits there for the last worker) and the payloads' Gatherv to t2."""
        t0 = wtime()
        msg = self.t.gather_lengths(msg)
        t1 = wtime()
        got = self.t.gatherv(msg)
        return got, t0, t1, wtime()

    def _server(self, ss, got):
        """Rank 0: the server step from what :meth:`_up` received; returns the new iterate."""
        return self.alg.server_step(ss, self._messages(got))

    # -- compressed downlink (EF21-P) ---------------------------------------------------------------
    def _exchange_compressed(self, msg, ss):
        t = self.t
        got, t0, t1, t2 = self._up(msg)
        payload, control = None, CONTINUE
        if got is not None:
            self.server_x = self._server(ss, got)
            payload = self._compress_down(self.server_x, ss)
            t3 = wtime()
            self.down_payload = EMPTY if payload is None else payload
            control = self._stepped()
            if payload is None:                        # diverged: nothing to send
                payload, control = EMPTY, DIVERGED
        else:
            t3 = t2
        t4 = wtime()
        payload, n, control = t.bcast_header(payload, int(control))   # the workers wait here for rank 0
        t5 = wtime()
        payload = t.bcast_body(payload, n)
        if control != DIVERGED:
            self._decode_down(payload)
        t6 = wtime()
        self.control_word = float(control)
        if not self.split:
            t5 = t4
        return (0.0, *self._late_sender(t0, t1, t2), t3 - t2, t5 - t4, t6 - t5)

    def _compress_down(self, xs, ss):
        """Rank 0: the downlink payload C(x^{k+1} − w^k) (lossless: x^{k+1} itself; ``direct``: the
        algorithm's step message, ``Algorithm.step_downlink``); None when the iterate diverged
        (non-finite, or too large for the compressor's wire format)."""
        if exploded(xs, self.alg.step_norm_sq(ss)):
            return None
        dl = self.downlink
        src = (self.alg.down_message(ss) if dl.direct else
               xs if dl.lossless else np.subtract(xs, self.x, out=self.diff))
        try:
            return dl.comp.compress(src, self.down_rng)
        except ValueError:
            return None

    def _decode_down(self, payload):
        """Every rank: w^{k+1} = w^k + scale·C(x^{k+1} − w^k) from the broadcast bytes (lossless: x^{k+1})."""
        dl, d = self.downlink, self.x.shape[0]
        if dl.lossless:
            self.x[:] = dl.comp.decompress(payload, d)
        else:
            dl.comp.decompress_add(payload, d, self.x, dl.scale)

    def iterate(self):
        return self.server_x if self.server_x is not None else self.x

    def control(self) -> float:
        return float(self.xbuf[-1]) if self.downlink is None else self.control_word

    def account(self, bits_model, bits_wire) -> float:
        super().account(bits_model, bits_wire)
        return self._down_wire_bits()

    def _down_wire_bits(self) -> float:
        """Rank 0: this iteration's downlink wire bits (the Bcast buffers)."""
        if self.downlink is None:
            return 8.0 * (self.xbuf.nbytes + 8 * self.extra_size)
        return 8.0 * (DOWN_HEADER_BYTES + self.down_payload.size)

    def down_model_bits(self) -> float:
        """Dense: 64·d (the float64 iterate; the control word is overhead), plus 64 per entry of the
        algorithm's extra Bcast (ADIANA's w when it moves); compressed: the downlink
        compressor's model bits of this iteration's payload (0 when nothing was sent)."""
        d = self.x.shape[0]
        if self.downlink is None:
            return 64.0 * (d + self.extra_size)
        return float(self.downlink.comp.model_bits(self.down_payload, d)) if self.down_payload.size else 0.0

    def state(self) -> dict:
        return {} if self.downlink is None else {"down_rng": rng_state(self.down_rng)}

    def restore(self, state: dict) -> None:
        if "down_rng" in state:
            set_rng_state(self.down_rng, state["down_rng"], "/exchange/down_rng")

    def _deliver(self, payload):
        return self.t.gather_payloads(payload)

    def floor_ops(self, per_iteration, d: int) -> list:
        """Gather + Gatherv of this rank's mean payload; Bcast of the control word and of the d
        float64 of the iterate (dense; one Bcast of d + 1 without ``run.wait_phases``), or of the
        8-byte header and rank 0's mean downlink payload (compressed)."""
        ops = [("gather", mean_bytes(per_iteration, self.t.rank, "Gatherv"), np.uint8)]
        if self.downlink is None:
            if self.split:
                return ops + [("bcast", 8, np.float64), ("bcast", 8 * d, np.float64)]
            return ops + [("bcast", 8 * (d + 1), np.float64)]
        payload = mean_bytes(per_iteration, 0, "Bcast") - DOWN_HEADER_BYTES
        return ops + [("bcast", DOWN_HEADER_BYTES, np.uint8)] + ([("bcast", payload, np.uint8)] if payload > 0 else [])
