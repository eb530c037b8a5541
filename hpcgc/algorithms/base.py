"""The interface every algorithm implements (one file per algorithm + one registry line).

State is explicit (optax style): ``*_init`` creates it, the other methods take and update it;
nothing hides in globals, so a test can run one step by hand. The runner calls, per iteration:

    worker:  worker_compute(ws, x, problem, rng)   -> timed as "grad"
             worker_encode(ws, rng) -> payload      -> timed as "compress"   (uint8 bytes sent)
    server:  server_step(ss, [(i, payload_i)...])   -> timed as "server"     (returns new x)

Before the first iteration, in this order (all optional):

    worker_init(i, problem) -> ws            worker i's state; may analyse its local problem
    agree_values(ws) -> 1-D float array      values to max-reduce over all workers (e.g. ω_i, L̃_i);
    set_agreed(maxima)                       every rank (also a dedicated server) gets the maxima
    server_init(x0) -> ss
    worker_setup_message(ws) -> bytes|None   one-time upload, same Gatherv as every payload,
    server_setup(ss, [(i, bytes)...])        recorded as workers/one_time_bits (model and wire)

Algorithms know nothing of MPI or HDF5.
"""
from __future__ import annotations

import numpy as np


class Algorithm:
    name = "?"

    def __init__(self, compressors: list, *, d: int, n_workers: int, weights, problem_info: dict,
                 options: dict):
        """``compressors[i]`` is worker i's compressor (per-worker ratios from an allocation);
        ``problem_info`` has L_max, mu, L (global, rank 0 only may be None) and the like;
        ``options`` is the resolved ``[run]`` table (step_multiplier, alpha, momentum, batch, ...)
        plus ``l1``."""
        self.compressors = compressors
        self.d = d
        self.n = n_workers
        self.weights = np.asarray(weights, dtype=np.float64)

    # agreement across workers (default: nothing to agree on)
    def agree_values(self, state):
        return None

    def set_agreed(self, maxima):
        return None

    # one-time set-up (default: none)
    def worker_setup_message(self, state):
        return None

    def server_setup(self, state, messages):
        return None

    def one_time_model_bits(self, i: int, payload) -> float:
        return 8.0 * payload.size

    def model_bits(self, i: int, payload) -> float:
        return self.compressors[i].model_bits(payload, self.d)

    def describe(self) -> dict:
        return {}
