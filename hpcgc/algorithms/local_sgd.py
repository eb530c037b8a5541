"""Local SGD rounds with per-tensor compression of the model delta and optional error feedback —
the DAGC setting (Lu et al., *DAGC: Data-Aware Adaptive Gradient Compression*, INFOCOM 2023;
`spec/dagc.md` §A.4 and §A.6):

    round r:  worker i: copy x, run `local_steps` mini-batch SGD steps (learning rate, batch) → u_i = x_i − x
                        with error feedback: e_i += u_i; m_i = C_i(e_i); e_i −= m_i   (else m_i = C_i(u_i))
              server:   x += Σ_i (N_i / N) · m_i          (weights = the workers' sample counts)

C_i is applied **per tensor** t of the model: top-k/rand-k keep k_{i,t} = max(1, ⌈δ_i·d_t⌉) entries
(δ_i from the allocation), the hard threshold keeps |v_j| ≥ λ_i. The message is the concatenation
of the per-tensor payloads, each preceded by its 4-byte length (counted in the wire bytes).
With ``local_steps = 1`` this is compressed SGD with error feedback (EF-SGD) — the plain-gradient
variant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import compressors as C
from ..compressors.summable import ConcatSum
from ..errors import ConfigError
from .base import Algorithm

FRAME = 4  # bytes of length before each tensor's payload
DEFAULT_LEARNING_RATE = 0.1   # run.learning_rate = 0 (not set)


@dataclass
class WorkerState:
    i: int
    problem: object
    u: np.ndarray                 # model delta of this round (or delta + residual with EF)
    e: np.ndarray | None          # error-feedback residual
    local: np.ndarray             # the worker's local copy of the model


@dataclass
class ServerState:
    x: np.ndarray


class LocalSGD(Algorithm):
    name = "local-sgd"
    aggregation = "samples"       # runner: weights N_i / N
    takes_learning_rate = True    # no smoothness constant needed: works for softmax/MLP
    clips_batch = True            # a worker with fewer samples than `batch` uses its whole shard (skewed splits)
    takes_biased = True
    collectives = ("gather", "allreduce", "allgather")

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        self.lr = float(options.get("learning_rate") or DEFAULT_LEARNING_RATE)   # 0 = not set
        self.steps = int(options.get("local_steps") or 1)      # 0 = not set
        self.batch = int(options.get("batch", 0))
        self.ef = bool(options.get("error_feedback", False))
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"run.learning_rate must be > 0, got {self.lr!r}")
        if self.steps < 1:
            raise ConfigError(f"run.local_steps must be >= 1, got {self.steps}")
        self.segments = [(a, b) for _, a, b, *_ in problem_info["segments"]]
        self.shapes = [tuple(seg[3]) if len(seg) > 3 else (seg[2] - seg[1],) for seg in problem_info["segments"]]
        ratios = options.get("ratios")
        thresholds = options.get("thresholds")
        # per worker, per tensor compressors
        self.tensor_comps = []
        for i, base in enumerate(compressors):
            row = []
            for (a, b), shape in zip(self.segments, self.shapes):
                dt = b - a
                params = dict(base.params)
                if "k" in params and ratios is not None and not np.isnan(ratios[i]):
                    params["k"] = min(dt, max(1, math.ceil(ratios[i] * dt - 1e-9)))
                elif "k" in params:
                    params["k"] = min(dt, params["k"])
                if "lam" in params and thresholds is not None and not np.isnan(thresholds[i]):
                    params["lam"] = float(thresholds[i])
                comp = C.make(base.name, **params)
                if getattr(comp, "matrices_only", False) and len(shape) != 2:    # PowerSGD: vectors go
                    comp = C.make("identity", fp64=bool(params.get("fp64", False)))  # uncompressed (paper)
                comp.validate(dt)
                row.append(comp)
            self.tensor_comps.append(row)

    def describe(self) -> dict:
        return {"learning_rate": self.lr, "local_steps": self.steps, "error_feedback": self.ef,
                "gamma": self.lr, "alpha": 0.0, "beta": 0.0}

    # -- worker --------------------------------------------------------------------------------------
    def worker_message(self, ws: WorkerState) -> np.ndarray:
        return ws.e if ws.e is not None else ws.u

    def worker_sent(self, ws: WorkerState, own_add) -> None:
        if ws.e is not None:
            own_add(ws.e, -1.0)                 # e −= C(e), exactly what the others decode

    def sum_codec(self, i: int):
        """One Allreduce message over all tensors: each tensor's codec on its slice (its shape
        for PowerSGD), concatenated per round."""
        return ConcatSum([(a, b, c.sum_codec(b - a, shape))
                          for c, (a, b), shape in zip(self.tensor_comps[i], self.segments, self.shapes)])

    def worker_init(self, i, problem=None) -> WorkerState:
        return WorkerState(i=i, problem=problem, u=np.zeros(self.d), e=np.zeros(self.d) if self.ef else None,
                           local=np.empty(self.d))

    def worker_compute(self, ws: WorkerState, x, problem, rng):
        ws.local[:] = x
        m = problem.A.shape[0]
        for _ in range(self.steps):
            rows = rng.choice(m, size=self.batch, replace=False) if self.batch and self.batch < m else None
            ws.local -= self.lr * problem.grad(ws.local, rows)
        np.subtract(ws.local, x, out=ws.u)
        if ws.e is not None:
            ws.e += ws.u

    def worker_encode(self, ws: WorkerState, rng) -> np.ndarray:
        v = ws.e if ws.e is not None else ws.u
        parts = []
        for comp, (a, b) in zip(self.tensor_comps[ws.i], self.segments):
            p = comp.compress(v[a:b], rng)
            if ws.e is not None:
                comp.decompress_add(p, b - a, ws.e[a:b], -1.0)   # e −= C(e), exactly what the server sees
            parts.append(np.frombuffer(np.uint32(p.size).tobytes(), dtype=np.uint8))
            parts.append(p)
        return np.concatenate(parts)

    def _split(self, payload):
        off = 0
        for a, b in self.segments:
            if off + FRAME > payload.size:
                raise ValueError("truncated local-sgd message")
            size = int(payload[off:off + FRAME].view(np.uint32)[0])
            off += FRAME
            yield a, b, payload[off:off + size]
            off += size

    # -- server --------------------------------------------------------------------------------------
    def server_init(self, x0) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64))

    def server_step(self, ss: ServerState, messages):
        for i, payload in messages:
            for (a, b, p), comp in zip(self._split(payload), self.tensor_comps[i]):
                comp.decompress_add(p, b - a, ss.x[a:b], self.weights[i])
        return ss.x

    def server_reduced(self, ss: ServerState, add_sum):
        add_sum(ss.x)
        return ss.x

    def model_bits(self, i, payload) -> float:
        return float(sum(comp.model_bits(p, b - a)
                         for (a, b, p), comp in zip(self._split(payload), self.tensor_comps[i])))
