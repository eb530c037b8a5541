"""DCGD+ and DIANA+: distributed compressed gradient methods with smoothness-aware compression.

Safaryan, Hanzely, Richtárik, *Smoothness Matrices Beat Smoothness Constants: Better Communication
Compression Techniques for Distributed Optimization*, NeurIPS 2021 (arXiv 2102.07245); Wang,
Safaryan, Richtárik, *Theoretically Better and Numerically Faster Distributed Optimization with
Smoothness-Aware Quantization Techniques*, NeurIPS 2022 (arXiv 2106.03524), Algorithms 1 and 2
as in the authors' code (`spec/smoothness.md` §3, §4). Worker i knows its smoothness matrix L_i
(:mod:`hpcgc.smoothness`) and compresses in the whitened space:

    C_i⁺(v) = S_i · Q_i(S_i^- v),     S_i = L_i^{1/2},  S_i^- = L_i^{†1/2},

    worker i:  Δ_i = ∇f_i(x) − h_i;  send Q_i(S_i^- Δ_i);  h_i ← h_i + α·S_i Q_i(S_i^- Δ_i)
    server:    m = Σ_i w_i S_i Q_i(…);  ĝ = h + m;  x ← prox(x − γ ĝ) (heavy ball optional);  h ← h + α m

DCGD+ is the same with α = 0 (no shifts). Step sizes (`spec/decisions.md`): DCGD+
γ = 1/(L + 2 L̃_max/n), DIANA+ γ = 1/(L + 6 L̃_max/n), times ``run.step_multiplier``;
α = 1/(ω_max + 1); ω_max and L̃_max are agreed across workers (max-reduction), L is the global
smoothness constant (rank 0).

Set-up (before iteration 0, untimed by the runner, timed here and recorded as
``smoothness_setup_seconds``, the max over workers): worker i forms L_i, its square roots (dense by
``eigh`` up to ``dense_max`` = 2000 coordinates, the diagonal surrogate M_i ⪰ L_i above, or as the
compressor's ``matrix`` parameter says), binds its compressor to diag(L_i) (steps / probabilities,
:mod:`hpcgc.compressors.dither_plus`, ``block_quant``, ``sparsify_plus``), and uploads S_i and the
compressor parameters once. The upload is counted in ``workers/one_time_bits``: 32 bits per float,
the upper triangle d(d+1)/2 of the symmetric S_i (half of the authors' d²; the dense case) or its d
diagonal entries (surrogate), plus the compressor's parameter floats.

Numerics: S_i is shipped as float32 and *both* sides use the float32-rounded S̃_i (the worker for
its own shift), so h = Σ w_i h_i holds to rounding and DIANA+ converges to x* itself. The server
keeps all S̃_i stacked, as rows of one (n·d, d) float64 array (S_i is symmetric), and applies them
to the decoded messages with one gather + one matrix-vector product over the nonzeros of all
messages: O(d·Σ_i nnz_i) per iteration, no per-worker loop of d² work (the diagonal surrogate:
O(Σ_i nnz_i)).

Any other unbiased compressor (``qsgd``, ``randk``, …) can be whitened as well; its L̃ is then the
generic bound ω·λ_max(L_i).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import smoothness
from ..errors import ConfigError, PayloadError
from ..problems import prox_l1
from .base import Algorithm
from .kernels import shifted_step
from .kernels import warm as warm_step

SETUP_MAGIC = b"SM+1"
_HEAD = np.dtype([("magic", "S4"), ("kind", "u1"), ("pad", "u1", 3), ("d", "<u4"), ("n_matrix", "<u4"),
                  ("n_params", "<u4"), ("omega", "<f8"), ("ltilde", "<f8")])
KIND_DENSE, KIND_DIAG = 1, 2
DENSE_GATHER_FRACTION = 0.5
"""Above this fraction of nonzeros the server scatters into one dense (n·d) vector and multiplies
the whole stack instead of gathering rows."""


@dataclass
class WorkerState:
    i: int
    comp: object                # the worker's bound compressor (in the whitened space)
    fac: smoothness.SmoothnessFactor
    S: np.ndarray               # float32-rounded S_i (dense (d, d) or diagonal (d,)), float64
    h: np.ndarray               # shift h_i
    delta: np.ndarray           # ∇f_i(x) − h_i
    y: np.ndarray               # S_i^- delta (whitened)
    omega: float
    ltilde: float
    setup_seconds: float
    setup_params: np.ndarray


@dataclass
class ServerState:
    x: np.ndarray
    h: np.ndarray
    v: np.ndarray


def bind_whitened(c, fac: smoothness.SmoothnessFactor, *, d: int, n: int, mu: float, method: str):
    """The worker's compressor bound to its smoothness matrix: (bound, ω_i, L̃_i, setup params)."""
    if hasattr(c, "smoothness_bind"):
        b = c.smoothness_bind(fac.diag, d=d, n=n, mu=mu, method=method)
        return b, float(b.omega_i), float(b.ltilde_i), np.asarray(b.setup_params, dtype=np.float64)
    om = c.omega(d)
    return c, float(om), float(om * fac.lambda_max), np.zeros(0)


def rows_product(S_rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int) -> np.ndarray:
    """Σ_q vals[q]·S_rows[cols[q]]: a row gather (sparse) or a dense vector-matrix product."""
    if cols.size > DENSE_GATHER_FRACTION * n_rows:
        Y = np.zeros(n_rows)
        Y[cols] = vals
        return Y @ S_rows
    return vals @ S_rows[cols]


class DianaPlus(Algorithm):
    """DIANA+ (Wang, Safaryan, Richtárik 2022, Algorithm 2): DIANA with C_i⁺ = S_i Q_i(S_i^- ·)."""

    name = "diana+"
    kernels = (warm_step,)
    method = "diana"
    learns_shifts = True
    needs_unbiased = True
    collectives_why = ("each worker's message lives in its own whitened space (S_i Q_i(S_i^- ·)), so the "
                       "messages do not add up before S_i is applied per worker; use 'gather' or 'allgather'")
    gamma_factor = 6.0        # γ = 1/(L + gamma_factor·L̃_max/n)

    def __init__(self, compressors, *, d, n_workers, weights, problem_info, options):
        super().__init__(compressors, d=d, n_workers=n_workers, weights=weights, problem_info=problem_info,
                         options=options)
        kind = problem_info.get("kind", "logreg")
        if kind not in ("logreg", "ridge"):
            raise ConfigError(f"{self.name} needs smoothness matrices, defined here for problem.kind = logreg or "
                              f"ridge, not {kind!r}")
        for c in compressors:
            if not c.unbiased:
                raise ConfigError(f"{self.name} needs an unbiased compressor; {c.spec} is biased")
        mult = options.get("step_multiplier", 1.0)
        if not (mult > 0 and np.isfinite(mult)):
            raise ConfigError(f"run.step_multiplier must be > 0, got {mult!r}")
        beta = options.get("momentum", 0.0)
        if not (0.0 <= beta < 1.0):
            raise ConfigError(f"run.momentum must be in [0, 1), got {beta!r}")
        if not self.learns_shifts and options.get("alpha") not in (None, "theory", 0, 0.0):
            raise ConfigError(f"{self.name} has no shifts (α = 0); remove run.alpha or use 'diana+'")
        self.multiplier = float(mult)
        self.beta = float(beta)
        self.l1 = float(options.get("l1", 0.0))
        self.batch = int(options.get("batch", 0))
        self.alpha_option = options.get("alpha")
        self.mu = float(problem_info.get("mu") or 0.0)
        self.L = problem_info.get("L")
        params = compressors[0].params
        self.matrix_choice = params.get("matrix", "auto")
        self.dense_max = int(params.get("dense_max", smoothness.DENSE_MAX_DIM))
        # every rank: refuse a dense factor that does not fit (the server also stacks n of them)
        self.matrix_kind = smoothness.resolve_kind(self.matrix_choice, d, self.dense_max, n_stacked=n_workers)
        self.omega = self.ltilde_max = self.gamma = self.alpha = float("nan")
        self.setup_seconds = float("nan")
        self.decoders = list(compressors)
        self.omega_workers = np.full(n_workers, np.nan)
        self.ltilde_workers = np.full(n_workers, np.nan)
        self._bits = {}
        self.S_rows = None          # server: (n·d, d) stacked S̃_i, or (n·d,) diagonals

    # -- set-up ------------------------------------------------------------------------------
    def worker_init(self, i: int, problem=None) -> WorkerState:
        t0 = time.perf_counter()
        d = self.d
        fac = smoothness.factor(problem, "dense" if self.matrix_kind == "dense" else "diag", self.dense_max)
        comp, om, lt, params = bind_whitened(self.compressors[i], fac, d=d, n=self.n, mu=self.mu, method=self.method)
        if fac.kind == "dense":
            S = fac.S.astype(np.float32).astype(np.float64)
            iu = np.triu_indices(d)
            S[(iu[1], iu[0])] = S[iu]          # exactly the symmetric matrix the server rebuilds
        else:
            S = fac.S.astype(np.float32).astype(np.float64)
        return WorkerState(i=i, comp=comp, fac=fac, S=S, h=np.zeros(d), delta=np.empty(d), y=np.empty(d),
                           omega=om, ltilde=lt, setup_seconds=time.perf_counter() - t0, setup_params=params)

    def agree_values(self, state: WorkerState):
        return np.array([state.omega, state.ltilde, state.setup_seconds])

    def set_agreed(self, maxima):
        self.omega, self.ltilde_max, self.setup_seconds = (float(v) for v in maxima)
        self.alpha = self._alpha()
        if self.L is not None:
            self.gamma = self.multiplier / (self.L + self.gamma_factor * self.ltilde_max / self.n)

    def _alpha(self) -> float:
        if not self.learns_shifts:
            return 0.0
        a = self.alpha_option
        if a is None or a == "theory":
            return 1.0 / (self.omega + 1.0)
        a = float(a)
        if not (0.0 < a <= 1.0):
            raise ConfigError(f"run.alpha must be in (0, 1] (theory: 1/(1+ω_max) = {1 / (1 + self.omega):.4g}), "
                              f"got {a!r}")
        return a

    def worker_setup_message(self, state: WorkerState) -> np.ndarray:
        d = self.d
        if state.fac.kind == "dense":
            mat = state.S[np.triu_indices(d)].astype(np.float32)
            kind = KIND_DENSE
        else:
            mat = state.S.astype(np.float32)
            kind = KIND_DIAG
        params = state.setup_params.astype(np.float32)
        head = np.zeros(1, dtype=_HEAD)
        head["magic"], head["kind"], head["d"] = SETUP_MAGIC, kind, d
        head["n_matrix"], head["n_params"] = mat.size, params.size
        head["omega"], head["ltilde"] = state.omega, state.ltilde
        return np.concatenate([head.view(np.uint8), mat.view(np.uint8), params.view(np.uint8)])

    def _parse_setup(self, payload):
        payload = np.asarray(payload, dtype=np.uint8)
        if payload.size < _HEAD.itemsize:
            raise PayloadError(f"{self.name}: set-up message truncated ({payload.size} bytes)")
        head = np.frombuffer(payload[:_HEAD.itemsize].tobytes(), dtype=_HEAD)[0]
        nm, npar = int(head["n_matrix"]), int(head["n_params"])
        if head["magic"] != SETUP_MAGIC or int(head["d"]) != self.d or \
                payload.size != _HEAD.itemsize + 4 * (nm + npar):
            raise PayloadError(f"{self.name}: corrupted set-up message")
        body = np.frombuffer(payload[_HEAD.itemsize:].tobytes(), dtype="<f4").astype(np.float64)
        return head, body[:nm], body[nm:]

    def one_time_model_bits(self, i: int, payload) -> float:
        """32 bits per float of S_i (upper triangle or diagonal) and of the compressor parameters;
        the two float64 diagnostics (ω_i, L̃_i) and the header are wire-only."""
        head, mat, params = self._parse_setup(payload)
        return 32.0 * (mat.size + params.size)

    def server_setup(self, state: ServerState, messages) -> None:
        d, n = self.d, self.n
        dense = self.matrix_kind == "dense"
        self.S_rows = np.zeros((n * d, d)) if dense else np.zeros(n * d)
        iu = np.triu_indices(d)
        for i, payload in messages:
            head, mat, params = self._parse_setup(payload)
            if (int(head["kind"]) == KIND_DENSE) != dense:
                raise PayloadError(f"{self.name}: worker {i} sent a {'dense' if not dense else 'diagonal'} factor")
            if dense:
                block = self.S_rows[i * d:(i + 1) * d]
                block[iu] = mat
                block[(iu[1], iu[0])] = mat
            else:
                self.S_rows[i * d:(i + 1) * d] = mat
            c = self.compressors[i]
            self.decoders[i] = c.smoothness_from_setup(params, d=d, n=n) if hasattr(c, "smoothness_from_setup") \
                else c
            self.omega_workers[i] = float(head["omega"])
            self.ltilde_workers[i] = float(head["ltilde"])

    # -- per iteration -----------------------------------------------------------------------
    def worker_compute(self, state: WorkerState, x: np.ndarray, problem, rng):
        rows = rng.choice(problem.A.shape[0], size=self.batch, replace=False) if self.batch else None
        np.subtract(problem.grad(x, rows), state.h, out=state.delta)

    def worker_encode(self, state: WorkerState, rng) -> np.ndarray:
        """Whiten (y = S_i^- Δ_i), compress y, update h_i with S̃_i times the decoded own message."""
        return self.compress_whitened(state, state.delta, rng, state.h, self.alpha)

    def server_init(self, x0: np.ndarray) -> ServerState:
        return ServerState(x=np.array(x0, dtype=np.float64), h=np.zeros(self.d), v=np.zeros(self.d))

    def aggregate(self, messages) -> tuple[np.ndarray, dict]:
        """m = Σ_i w_i S̃_i Q_i(…) from whitened payloads [(i, payload)], and each payload's model bits."""
        d = self.d
        cols, vals, bits = [], [], {}
        for i, payload in messages:
            idx, v, bits[i] = decode(self.decoders[i], payload, d)
            cols.append(idx + i * d)
            vals.append(v * self.weights[i])
        cols = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        vals = np.concatenate(vals) if vals else np.zeros(0)
        if self.matrix_kind == "dense":
            m = rows_product(self.S_rows, cols, vals, self.S_rows.shape[0])
        else:
            m = np.bincount(cols % d, weights=self.S_rows[cols] * vals, minlength=d)
        return m, bits

    def compress_whitened(self, state: WorkerState, v: np.ndarray, rng, out=None, a: float = 0.0) -> np.ndarray:
        """Payload of Q_i(S_i^- v); with ``out`` and a ≠ 0 also out += a·S̃_i Q_i(S_i^- v), the decoded
        own message (exactly what the server applies)."""
        state.fac.whiten(v, state.y)
        payload = state.comp.compress(state.y, rng)
        if out is not None and a != 0.0:
            idx, vals, _ = decode(state.comp, payload, self.d)
            if state.fac.kind == "dense":
                out += a * (vals @ state.S[idx])
            else:
                out[idx] += a * state.S[idx] * vals
        return payload

    def server_step(self, state: ServerState, messages) -> np.ndarray:
        messages = list(messages)
        m, bits = self.aggregate(messages)
        self._bits = {i: (payload, bits[i]) for i, payload in messages}
        # v = β v + (h + m);  x = prox(x − γ v);  h += α m  (DIANA's step kernel)
        shifted_step(state.x, state.h, state.v, m, self.gamma, self.alpha, self.beta)
        if self.l1:
            prox_l1(state.x, self.gamma * self.l1)
        return state.x

    def model_bits(self, i: int, payload) -> float:
        got = self._bits.get(i)
        if got is not None and got[0] is payload:
            return got[1]
        return decode(self.decoders[i], payload, self.d)[2]

    def describe(self) -> dict:
        rule = "1/(L + 2 L~max/n)" if self.gamma_factor == 2.0 else "1/(L + 6 L~max/n)"
        shipped = ("upper triangle d(d+1)/2 of S_i, float32" if self.matrix_kind == "dense"
                   else "diagonal of S_i = M_i^(1/2) (surrogate M_i >= L_i), d float32")
        return {"gamma": self.gamma, "alpha": self.alpha, "beta": self.beta, "omega": self.omega,
                "ltilde_max": self.ltilde_max, "L_global": float(self.L) if self.L is not None else np.nan,
                "step_rule": f"step_multiplier * {rule}", "smoothness_matrix": self.matrix_kind,
                "smoothness_matrix_choice": self.matrix_choice, "dense_max_dim": self.dense_max,
                "one_time_payload": shipped, "smoothness_setup_seconds": self.setup_seconds,
                "omega_workers": self.omega_workers, "ltilde_workers": self.ltilde_workers}


class DcgdPlus(DianaPlus):
    """DCGD+ (Wang, Safaryan, Richtárik 2022, Algorithm 1): DIANA+ without shifts."""

    name = "dcgd+"
    method = "dcgd"
    learns_shifts = False
    gamma_factor = 2.0


def decode(comp, payload, d: int):
    """(indices, values, model bits) of a message in the whitened space."""
    if hasattr(comp, "decode_sparse"):
        return comp.decode_sparse(payload, d)
    y = comp.decompress(payload, d)
    idx = np.flatnonzero(y)
    return idx, y[idx], comp.model_bits(payload, d)


__all__ = ["DcgdPlus", "DianaPlus", "bind_whitened", "decode"]
