"""``powersgd``: rank-r low-rank compression by one warm-started power (subspace) iteration step.

Vogels, Karimireddy, Jaggi, *PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization*, NeurIPS 2019 (arXiv 1905.13727), Algorithm 1. A layer's update is an m×n matrix M;
with a right factor Q (n×r) shared by every worker:

    P   = M Q                  (m×r)      round 1: Allreduce  P = Σ_i w_i M_i Q
    P̂   = orthogonalize(P)                every rank, on the same sum: the same P̂
    Q'  = Mᵀ P̂                 (n×r)      round 2: Allreduce  Q̂ = Σ_i w_i M_iᵀ P̂
    C(M) = P̂ Q̂ᵀ = P̂ P̂ᵀ Σ_i w_i M_i        and Q̂ is the next call's Q (warm start)

The first Q is i.i.d. N(0, 1), drawn from the call's 64-bit seed; the seed comes from the run's
*shared* generator (``shared_randomness = True``), so every worker draws the same Q. Because P̂
has orthonormal (or zero) columns, C(M) = P̂P̂ᵀM is an orthogonal projection of M:
‖C(M) − M‖² = ‖M‖² − ‖C(M)‖² ≤ ‖M‖², and C is exact when rank M ≤ r and P̂ spans M's column space.

**Biased; no δ.** ``omega`` and ``delta`` are None. The best rank-r approximation (truncated SVD)
has ‖M − M_r‖² = Σ_{i>r} σ_i² ≤ (1 − r/min(m, n))‖M‖² (Eckart–Young), i.e. δ ≥ r/min(m, n). One
power step from a given Q does not guarantee it: if the columns of Q are orthogonal to M's leading
right singular vectors (e.g. M Q = 0) the message is 0 and ‖C(M) − M‖ = ‖M‖. With the warm start
Q depends on the past messages, so no δ > 0 holds for every (M, Q); only the projection bound
above (δ = 0) does. Error feedback is what makes it work in practice (the paper's EF-SGD base
algorithm); counterexamples to convergence without extra subspace refreshes are given by Xie,
Chen, Yuan, arXiv 2509.11254 (2025).

**Orthogonalization** (:func:`orthonormalize_columns`): modified Gram–Schmidt on the columns of
P, each column orthogonalized twice against the previous ones ("twice is enough"), as sequential
numba loops, so that identical input gives bit-identical P̂ on every rank. A column whose norm
after orthogonalization is ≤ ``RANK_TOL`` = 1e-10 of its norm before (or exactly 0) is numerically
dependent on the previous ones and is set to **zero** instead of normalized: P̂ has orthonormal or
zero columns, never NaN, and C stays a projection. (The paper's code divides by ‖col‖ + 1e-8
instead, an absolute epsilon that leaves small-gradient columns non-normalized.) A zero column of
the warm-start Q̂ (it arises from a zero column of P̂, e.g. for a zero gradient) is replaced by
fresh N(0, 1) values from the call's seed, identical on every rank, so the iteration cannot stall
at Q = 0.

**Standalone** ``compress(x, rng)`` (the catalogue API, one worker, no state): x is reshaped
row-major into rows × cols, rows = ⌈√d⌉ (or the ``rows`` parameter), cols = ⌈d/rows⌉, the last
rows·cols − d entries zero (the decoder drops them; the error bound above still holds since the
dropped entries of x are 0). Q is drawn fresh from the call's seed (no warm start).

Wire format (after the 8-byte header; rows, cols, r follow from d and the parameters, which the
fingerprint covers): P̂ (rows×r, row-major) then Q' = MᵀP̂ (cols×r, row-major), float32 (float64
with ``fp64=true``). Model bits = r·(rows + cols)·F = wire bits − 64.

Error feedback (``local-sgd``) subtracts each worker's own message P̂P̂ᵀM_i: the weighted sum of
the residuals obeys the one-worker recursion and stays bounded on a fixed update; a single worker's
residual need not (parts of its update that cancel across workers are never sent) — see
``docs/compressors.md``.

Collectives: only ``allreduce`` — P must be summed over the workers before Q' is computed (under
a parameter server that is a round trip). :meth:`PowerSGD.sum_codec` is the two-round protocol.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..errors import ConfigError, PayloadError
from .base import Compressor
from .kernels import wire
from .params import FP64_PARAM, Param
from .summable import SumCodec

RANK_TOL = 1e-10
"""A column of P keeping ≤ RANK_TOL of its norm after Gram–Schmidt is set to zero."""


@njit(cache=True)
def orthonormalize_rows(t, tol):
    """Modified Gram–Schmidt on the rows of ``t`` (r × m, float64, in place), each row
    orthogonalized twice against the previous rows, then normalized — or zeroed when its norm fell
    to ≤ ``tol`` times its norm before (exactly 0 stays 0). Each row is first divided by its largest
    magnitude, so that the squares neither underflow nor overflow (scale-free for any finite
    input). Sequential loops: bit-reproducible."""
    r, m = t.shape
    for j in range(r):
        amax = 0.0                       # pre-scale to max |t_jk| = 1: no under/overflow in the squares
        for k in range(m):
            amax = max(amax, abs(t[j, k]))
        if amax > 0.0:
            for k in range(m):
                t[j, k] /= amax
        s0 = 0.0
        for k in range(m):
            s0 += t[j, k] * t[j, k]
        for _ in range(2):
            for i in range(j):
                dot = 0.0
                for k in range(m):
                    dot += t[i, k] * t[j, k]
                if dot != 0.0:
                    for k in range(m):
                        t[j, k] -= dot * t[i, k]
        s = 0.0
        for k in range(m):
            s += t[j, k] * t[j, k]
        nrm = math.sqrt(s)
        if s0 == 0.0 or not nrm > tol * math.sqrt(s0):
            for k in range(m):
                t[j, k] = 0.0
        else:
            inv = 1.0 / nrm
            for k in range(m):
                t[j, k] *= inv


def orthonormalize_columns(p: np.ndarray) -> np.ndarray:
    """P̂: the columns of ``p`` (m × r) orthonormalized (dependent columns zeroed), float64."""
    t = np.ascontiguousarray(p.T, dtype=np.float64)
    orthonormalize_rows(t, RANK_TOL)
    return t.T


def gaussian_q(seed, n: int, r: int) -> np.ndarray:
    """Q ~ N(0, 1)^{n×r} from a 64-bit seed (numpy's PCG64 Generator seeded with it)."""
    return np.random.default_rng(int(seed)).standard_normal((n, r))


class PowerSGD(Compressor):
    """Rank-r PowerSGD (Vogels et al. 2019): M ≈ P̂ (MᵀP̂)ᵀ, P̂ = orth(M Q). Biased, no δ; model bits
    r(m + n)F; rides Allreduce only (two rounds, :class:`PowerSum`)."""

    name = "powersgd"
    description = ("rank-r low-rank P Q^T by one warm-started power step (Vogels et al. 2019); biased, "
                   "delta None; bits r*(m+n)*F; allreduce only (2 rounds)")
    PARAMS = (
        Param("rank", int, 2, low=1, high=2**16,
              doc="rank r of the approximation (the paper uses 1, 2, 4)"),
        Param("rows", int, 0, low=0, high=wire.MAX_D,
              doc="standalone vectors only: matrix rows (0: ceil(sqrt(d)), zero-padded)", in_spec="nondefault"),
        FP64_PARAM,
    )
    FORMAT_ID = 13
    unbiased = False
    collectives = ("allreduce",)
    shared_randomness = True
    matrices_only = True
    """Per-tensor use (``local-sgd``): only matrix-shaped tensors are compressed; vectors go as
    ``identity`` (as in the paper)."""

    def _init(self) -> None:
        self.rank = int(self._params["rank"])
        self.rows = int(self._params["rows"])

    # -- theory ----------------------------------------------------------------------------------
    def omega(self, d: int) -> None:
        return None

    def delta(self, d: int) -> None:
        """None: a single warm-started power step gives no uniform contraction. Exact rank-r
        truncation would give δ ≥ r/min(m, n) (Eckart–Young), but one step from a Q orthogonal to
        M's leading right singular vectors sends 0 (‖C(M) − M‖ = ‖M‖); only ‖C(M) − M‖ ≤ ‖M‖
        (C is an orthogonal projection) holds for every M and Q."""
        return None

    # -- shapes ----------------------------------------------------------------------------------
    def matrix_shape(self, d: int) -> tuple[int, int]:
        """(rows, cols) a bare vector of length d is reshaped to: rows = ``rows`` or ⌈√d⌉,
        cols = ⌈d/rows⌉ (row-major, zero-padded to rows·cols)."""
        rows = self.rows or math.isqrt(d - 1) + 1
        return rows, -(-d // rows)

    def _validate(self, d: int) -> None:
        if self.rows > d:
            raise ConfigError(f"{self.name}: parameter rows={self.rows} is larger than d={d}; "
                              f"allowed: 1 <= rows <= d, or 0 for ceil(sqrt(d))")
        m, n = self.matrix_shape(d)
        if self.rank > min(m, n):
            raise ConfigError(f"{self.name}: parameter rank={self.rank} is larger than the {m}x{n} matrix of "
                              f"d={d} allows; largest rank: {min(m, n)}")

    def _body_bytes(self, d: int) -> int:
        m, n = self.matrix_shape(d)
        return self.rank * (m + n) * self._scale_bytes

    def _dtype(self) -> str:
        return "<f8" if self._fp64 else "<f4"

    # -- bits ------------------------------------------------------------------------------------
    def model_bits(self, payload, d: int) -> int:
        self._check_payload(self._as_payload(payload, d), d, self._body_bytes(d))
        m, n = self.matrix_shape(d)
        return self.rank * (m + n) * self._float_bits

    # -- compress / decompress -------------------------------------------------------------------
    def _as_matrix(self, x: np.ndarray, m: int, n: int) -> np.ndarray:
        d = x.shape[0]
        if d == m * n:
            return x.astype(np.float64, copy=False).reshape(m, n)
        M = np.zeros(m * n)
        M[:d] = x
        return M.reshape(m, n)

    def _compress(self, x: np.ndarray, seed: np.uint64) -> np.ndarray:
        d = x.shape[0]
        if not np.isfinite(x).all():
            raise self._nonfinite_error(x)
        m, n = self.matrix_shape(d)
        r = self.rank
        M = self._as_matrix(x, m, n)
        with np.errstate(over="ignore", invalid="ignore"):
            P = orthonormalize_columns(M @ gaussian_q(seed, n, r))
            Qp = M.T @ P
        payload = self._new_payload(self._body_bytes(d), d)
        body = payload[wire.HEADER_BYTES:].view(self._dtype())
        with np.errstate(over="ignore", invalid="ignore"):
            body[:m * r] = P.ravel()
            body[m * r:] = Qp.ravel()
        if not np.isfinite(body).all():
            raise self._nonfinite_error(x, "factors" + ("" if self._fp64 else " (float32)"))
        return payload

    def _product(self, payload: np.ndarray, d: int) -> np.ndarray:
        """P Q'ᵀ (float64, first d entries, row-major) from a checked payload."""
        self._check_payload(payload, d, self._body_bytes(d))
        m, n = self.matrix_shape(d)
        r = self.rank
        vals = wire.read_array(payload, wire.HEADER_BYTES, r * (m + n), self._dtype())
        with np.errstate(invalid="ignore"):
            if not np.isfinite(vals).all():
                raise PayloadError(f"{self.name}: corrupted payload: non-finite factor value")
        P = vals[:m * r].astype(np.float64).reshape(m, r)
        Qp = vals[m * r:].astype(np.float64).reshape(n, r)
        with np.errstate(over="ignore", invalid="ignore"):
            y = (P @ Qp.T).ravel()[:d]
        if not np.isfinite(y).all():
            raise PayloadError(f"{self.name}: corrupted payload: the factors' product overflows")
        return y

    def _decompress(self, payload: np.ndarray, d: int) -> np.ndarray:
        return np.ascontiguousarray(self._product(payload, d))

    def _decompress_add(self, payload: np.ndarray, d: int, out: np.ndarray, weight: float) -> None:
        y = self._product(payload, d)
        if weight != 1.0:
            y = y * weight
        out += y

    # -- Allreduce -------------------------------------------------------------------------------
    def sum_codec(self, d: int, shape: tuple | None = None) -> PowerSum:
        """The two-round Allreduce codec for one m×n matrix (``shape``; None: the standalone reshape
        of a length-d vector). ConfigError if ``shape`` is not 2-D, does not hold d entries, or
        rank > min(m, n)."""
        if shape is None:
            self.validate(d)
            m, n = self.matrix_shape(d)
        else:
            shape = tuple(int(s) for s in shape)
            if len(shape) != 2:
                raise ConfigError(f"{self.name}: compresses matrices only, got a tensor of shape {shape}; "
                                  f"vectors go uncompressed (identity)")
            m, n = shape
            if m < 1 or n < 1 or m * n != d:
                raise ConfigError(f"{self.name}: matrix shape {m}x{n} does not hold d={d} entries")
            if self.rank > min(m, n):
                raise ConfigError(f"{self.name}: parameter rank={self.rank} is larger than the {m}x{n} layer "
                                  f"allows; largest rank: {min(m, n)}")
        return PowerSum(d, m, n, self.rank, self._fp64)


class PowerSum(SumCodec):
    """One worker's PowerSGD message for one m×n matrix through two Allreduces (rounds = 2).

    ``begin``: one seed drawn from the (shared) rng; on the first call Q ~ N(0, 1) from it, later
    the previous aggregate Q̂ (warm start; its zero columns refilled from the seed). Sends
    P_i = w_i M_i Q. ``advance(1, ΣP)``: P̂ = orth(ΣP); keeps Q_i = M_iᵀP̂ (unweighted, rounded to
    the wire type) and sends w_i Q_i. ``decode_add(ΣQ)``: Q̂ = ΣQ (kept for the warm start),
    out += scale·P̂Q̂ᵀ. ``own_add``: out += weight·P̂ Q_iᵀ = weight·P̂P̂ᵀM_i.
    """

    rounds = 2

    def __init__(self, d: int, m: int, n: int, r: int, fp64: bool):
        self.d, self.m, self.n, self.r = d, m, n, r
        self.dtype = np.float64 if fp64 else np.float32
        self._bits = 64 if fp64 else 32
        self.q = None                       # warm-start Q (n×r, float64); None before the first call
        self._P = self._own = None

    def lengths(self):
        return (self.m * self.r, self.n * self.r)

    def state(self) -> dict:
        """The warm-start Q (checkpoints): zeros before the first call, which ``begin`` treats as
        None (every column refilled from the seed), so the state has one shape from the start."""
        return {"q": np.zeros((self.n, self.r)) if self.q is None else self.q.copy()}

    def model_bits(self):
        return float(self.r * (self.m + self.n) * self._bits)

    def _matrix(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.d,):
            raise ValueError(f"powersgd: message must have shape ({self.d},), got {x.shape}")
        if self.d == self.m * self.n:
            return x.reshape(self.m, self.n)
        M = np.zeros(self.m * self.n)
        M[:self.d] = x
        return M.reshape(self.m, self.n)

    def _send(self, v: np.ndarray, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            out = v.astype(self.dtype).ravel()
        if not np.isfinite(out).all():
            hint = "" if self.dtype == np.float64 else " (use fp64=true)"
            raise ValueError(f"powersgd: {what} exceeds the {np.dtype(self.dtype).name} range{hint}")
        return out

    def begin(self, x, weight, rng):
        seed = rng.integers(0, 2**64, dtype=np.uint64)
        M = self._matrix(x)
        if not np.isfinite(M).all():
            raise ValueError("powersgd: input contains a non-finite value")
        if self.q is None:
            self.q = gaussian_q(seed, self.n, self.r)
        else:
            dead = ~np.any(self.q != 0.0, axis=0)
            if dead.any():                  # a zero column would stay zero forever: refill it
                self.q[:, dead] = gaussian_q(seed, self.n, self.r)[:, dead]
        self._M = M
        self._weight = float(weight)
        with np.errstate(over="ignore", invalid="ignore"):
            P = M @ self.q
            if weight != 1.0:
                P *= weight
        return self._send(P, "P = M Q")

    def advance(self, r, total):
        if r != 1:
            raise ValueError(f"powersgd: no round {r}")
        total = np.asarray(total, dtype=np.float64)
        if total.shape != (self.m * self.r,) or not np.isfinite(total).all():
            raise ValueError("powersgd: the round-1 sum is not a finite vector of length m*r")
        self._P = orthonormalize_columns(total.reshape(self.m, self.r))
        with np.errstate(over="ignore", invalid="ignore"):
            own = self._M.T @ self._P
        self._own = self._send(own, "Q = M^T P").reshape(self.n, self.r)
        if self._weight == 1.0:
            return self._own.ravel()
        return self._send(own * self._weight, "Q = M^T P")

    def decode_add(self, total, out, scale=1.0):
        q = np.asarray(total, dtype=np.float64).reshape(self.n, self.r)
        self.q = q.copy()                    # warm start of the next call (the same on every rank)
        y = (self._P @ q.T).ravel()[:self.d]
        out += scale * y if scale != 1.0 else y

    def own_add(self, out, weight):
        y = (self._P @ self._own.astype(np.float64).T).ravel()[:self.d]
        out += weight * y
