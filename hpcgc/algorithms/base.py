"""The interface every algorithm implements (one file per algorithm + one registry line).

State is explicit (optax style): ``*_init`` creates it, the other methods take and update it;
nothing hides in globals, so a test can run one step by hand. The runner calls, per iteration:

    worker:  worker_compute(ws, x, problem, rng)   -> timed as "grad"
             worker_encode(ws, rng) -> payload      -> timed as "compress"   (uint8 bytes sent)
    server:  server_step(ss, [(i, payload_i)...])   -> timed as "server"     (returns new x)

and once before the first iteration a one-time upload, if the algorithm has one
(``worker_setup_message`` → ``server_setup``; its bytes go through the same Gatherv and are
recorded as ``workers/one_time_bits``). Algorithms know nothing of MPI or HDF5.
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
