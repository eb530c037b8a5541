"""Network projection: what a measured run would take on a network with latency α and bandwidth β.

The α–β (Hockney) model: one message of ``b`` bytes costs ``α + b/β``. A run is replayed with its
measured compute and its recorded bytes, and the communication it did on this machine is replaced
by the model's cost of the same messages, in the run's structure per iteration:

    compute   max over ranks of (grad + compress)   + server time on rank 0      (measured)
    uplink    Gather of one 4-byte length per rank, then Gatherv of the payloads to rank 0:
              every message that crosses the network (rank 0's own never does, `workers/
              crossed_network`) arrives at the root, which receives them one after the other
              ("linear" gather): (P−1) length messages + m payload messages per iteration,
              each α + bytes/β.  Alternative "tree": ⌈log₂P⌉ latency rounds per collective,
              the same bytes through the root's link.
    downlink  Bcast of the (d+1)·8-byte iterate as a binomial tree: ⌈log₂P⌉ rounds of α + B/β;
              with a compressed downlink (``run.downlink``, EF21-P) two Bcasts per iteration, the
              8-byte header and the payload: ⌈log₂P⌉ rounds of 2α + B/β, B = 8 + payload bytes.

    T(k) = Σ_{iterations ≤ k} compute  +  α·(messages up) + (bytes up)/β  +  ⌈log₂P⌉·(k·α + (bytes down)/β)

Runs without a server (``run.collective``, attribute ``collective``) are replayed in their own
structure; compute is then the max over ranks of (grad + compress + server), as every rank steps:

    allreduce  ring: 2(P−1) rounds of α per Allreduce (``exchange_rounds`` per iteration: 2 for
               PowerSGD) and 2(P−1)/P × the bytes each rank handed to it, through every link
    allgather  ring: (P−1) rounds of α for the lengths and (P−1) for the payloads; every rank
               receives the other ranks' payloads: (P−1)/P × the bytes of all ranks, per rank

Compute and communication do not overlap (the collectives are blocking, as in hpcgc's transport).
The formulas are those of :mod:`hpcgc.analysis.costmodels` (sources there and in
``docs/cost-models.md``) with fixed algorithms; the model, its parameters and its limits are in
``docs/projection.md``. :mod:`hpcgc.analysis.breakeven` uses the same formulas with MPICH's
size-dependent algorithm selection.

    hpcgc project RESULTS... [--eps 1e-8] [--network 1 10 100] [--latency-us A]   (hpcgc.analysis.project)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import costmodels

LENGTH_BYTES = 4          # hpcgc's Gather of one int32 length per rank and iteration
GATHER_MODELS = {"linear": "linear", "tree": "binomial"}   # --gather → costmodels algorithm


@dataclass(frozen=True)
class Network:
    """α (seconds per message) and β (bytes per second)."""
    name: str
    latency: float
    bandwidth: float

    @classmethod
    def gbps(cls, gbit_per_s: float, latency_us: float, name: str | None = None) -> Network:
        return cls(name or f"{gbit_per_s:g} Gb/s", latency_us / 1e6, gbit_per_s * 1e9 / 8)

    def message(self, nbytes) -> float | np.ndarray:
        """Time of one message of ``nbytes`` bytes: α + b/β."""
        return self.latency + np.asarray(nbytes, dtype=float) / self.bandwidth

    def describe(self) -> str:
        return f"{self.name} (α = {self.latency * 1e6:g} µs, β = {self.bandwidth * 8 / 1e9:g} Gb/s)"


# Presets: typical MPI point-to-point latencies of such links (override with --latency-us).
PRESETS = {
    "1": Network.gbps(1, 50.0, "1 Gb/s"),        # Gigabit Ethernet, TCP
    "10": Network.gbps(10, 10.0, "10 Gb/s"),     # 10 GbE, TCP
    "100": Network.gbps(100, 2.0, "100 Gb/s"),   # 100 Gb/s InfiniBand / RoCE class
}


def network(spec: str, latency_us: float | None = None) -> Network:
    """'1' | '10' | '100' (presets, Gb/s) or any bandwidth in Gb/s ('25'); latency overrides α."""
    if spec in PRESETS and latency_us is None:
        return PRESETS[spec]
    try:
        gbit = float(spec)
    except ValueError:
        raise ValueError(f"network {spec!r}: expected a bandwidth in Gb/s (presets: 1, 10, 100)") from None
    if not gbit > 0:
        raise ValueError(f"network {spec!r}: bandwidth must be > 0")
    if latency_us is None:
        latency_us = PRESETS[spec].latency * 1e6 if spec in PRESETS else 5.0
    if latency_us < 0:
        raise ValueError("latency must be >= 0")
    return Network.gbps(gbit, latency_us, f"{gbit:g} Gb/s")


def gather_time(sizes, net: Network) -> float:
    """Linear gather at the root: the root receives the messages one after the other."""
    sizes = np.asarray(sizes, dtype=float)
    return float(costmodels.gatherv(sizes.sum(), sizes.size + 1, net.latency, 1.0 / net.bandwidth, "linear"))


def bcast_time(nbytes: float, ranks: int, net: Network) -> float:
    """Binomial-tree broadcast: ⌈log₂ P⌉ rounds, each one message of the whole buffer."""
    return float(costmodels.bcast(nbytes, ranks, net.latency, 1.0 / net.bandwidth, "binomial"))


def rounds(ranks: int) -> int:
    return math.ceil(math.log2(ranks)) if ranks > 1 else 0


# -- a run's measured costs ------------------------------------------------------------------------
@dataclass
class Costs:
    """Cumulative quantities at each evaluation row of a run (what the projection needs)."""
    iterations: np.ndarray     # (T,) iterations completed at each row
    compute: np.ndarray        # (T,) seconds: Σ_iterations [max_r (grad + compress) + server(rank 0)]
    up_messages: np.ndarray    # (T,) messages that crossed the network to the root (lengths + payloads)
    up_bytes: np.ndarray       # (T,) bytes that crossed the network to the root
    down_bytes: np.ndarray     # (T,) bytes broadcast (one copy of the buffer per broadcast)
    measured: np.ndarray       # (T,) measured wall-clock of the iteration loop (rank 0)
    ranks: int
    compute_exact: bool        # True: per-iteration maxima (per_iteration/); False: from cumulative totals
    collective: str = "gather"
    exchange_rounds: int = 1   # Allreduce calls per iteration (PowerSGD: 2)
    down_bcasts: int = 1       # Bcasts per iteration: 2 with a compressed downlink (header, payload)


def costs(run) -> Costs:
    """Measured compute and recorded bytes of an :class:`hpcgc.results.Run`, per row."""
    s, tm = run.series, run.time
    it = np.asarray(s["iteration"], dtype=np.int64)
    T = len(it)
    P = int(tm["iter"].shape[1]) if "iter" in tm else int(run.attrs.get("n_workers", 1))
    crossed = np.asarray(run.workers.get("crossed_network", []), dtype=bool)
    n = s["bits_up_wire"].shape[1] if "bits_up_wire" in s else 0
    if crossed.size != n:                      # old or truncated file: rank 0 is worker 0
        crossed = np.arange(n) != 0 if n == P else np.ones(n, dtype=bool)
    m = int(crossed.sum())
    up_bytes = (s["bits_up_wire"][:T][:, crossed].sum(axis=1) / 8.0) if n else np.zeros(T)
    down_bytes = np.asarray(s.get("bits_down_wire", np.zeros(T)), dtype=float)[:T] / 8.0
    up_messages = it * ((P - 1) + m)           # Gather: every non-root rank; Gatherv: crossed payloads

    collective = run.attrs.get("collective", "gather")
    server_everywhere = collective != "gather"

    def stage_max(g, c, sv):       # every rank's compute, then the server's (on rank 0, or on every rank)
        return np.nanmax(g + c + sv, axis=1) if server_everywhere else np.nanmax(g + c, axis=1) + sv[:, 0]

    zero = np.zeros((T, P))
    grad, comp, serv = (np.asarray(tm.get(ph, zero), dtype=float)[:T] for ph in ("grad", "compress", "server"))
    compute = stage_max(grad, comp, serv)
    exact = False
    pi = run.per_iteration
    if pi and all(ph in pi for ph in ("grad", "compress", "server")) and T and it.max() <= len(pi["grad"]):
        per = stage_max(pi["grad"].astype(float), pi["compress"].astype(float), pi["server"].astype(float))
        cum = np.concatenate([[0.0], np.cumsum(per)])
        compute = cum[it]
        exact = True
    measured = np.asarray(tm["iter"], dtype=float)[:T, 0] if "iter" in tm else np.full(T, np.nan)
    return Costs(it, compute, up_messages.astype(float), up_bytes, down_bytes, measured, P, exact, collective,
                 int(run.attrs.get("exchange_rounds", 1)), 1 if run.attrs.get("downlink", "dense") == "dense" else 2)


def network_time(c: Costs, net: Network, gather: str = "linear") -> tuple[np.ndarray, np.ndarray]:
    """Cumulative modelled (uplink, downlink) seconds at each row, from :mod:`costmodels`.

    Each model is affine in the message size for a fixed algorithm, so k iterations cost k times
    the model at the mean size per iteration (cumulative bytes / k). The algorithms are fixed (not
    MPICH's size-dependent ``auto``): Gather and Gatherv ``linear`` (or ``binomial`` with
    ``gather="tree"``), binomial Bcast, ring Allreduce, ring Allgather(v)."""
    P = c.ranks
    a, b = net.latency, 1.0 / net.bandwidth
    k = np.asarray(c.iterations, dtype=float)

    def per(total, calls):             # mean bytes per call (0 where no call was made)
        return np.divide(total, calls, out=np.zeros_like(k), where=calls > 0)

    zero = np.zeros_like(k)
    if P <= 1:
        return zero, zero.copy()
    if c.collective == "allreduce":      # up_bytes: every rank's vectors; each rank handed 1/P of them
        calls = k * c.exchange_rounds
        return calls * costmodels.allreduce(per(c.up_bytes / P, calls), P, a, b, algorithm="ring"), zero
    if c.collective == "allgather":      # Allgather of the 4-byte lengths, Allgatherv of the payloads
        block = np.maximum(per(c.up_bytes / P, k) - LENGTH_BYTES, 0.0)
        up = k * (costmodels.allgather(LENGTH_BYTES, P, a, b, algorithm="ring")
                  + costmodels.allgather(block, P, a, b, algorithm="ring"))
        return up, zero
    if gather not in GATHER_MODELS:
        raise ValueError(f"gather model {gather!r}: expected linear or tree")
    alg = GATHER_MODELS[gather]
    payload_in = np.maximum(per(c.up_bytes, k) - LENGTH_BYTES * (P - 1), 0.0)   # into the root, per iteration
    up = k * (costmodels.gather(LENGTH_BYTES, P, a, b, algorithm=alg)
              + costmodels.gatherv(payload_in, P, a, b, algorithm=alg))
    bcasts = k * c.down_bcasts
    down = bcasts * costmodels.bcast(per(c.down_bytes, bcasts), P, a, b, algorithm="binomial")
    return up, down


def project(c: Costs, net: Network, gather: str = "linear") -> np.ndarray:
    """Projected cumulative wall-clock (seconds) at each row."""
    up, down = network_time(c, net, gather)
    return c.compute + up + down


def first_reached(values, eps: float) -> int | None:
    """Index of the first row whose value is ≤ eps (finite), or None."""
    v = np.asarray(values, dtype=float)
    hit = np.flatnonzero(np.isfinite(v) & (v <= eps))
    return int(hit[0]) if hit.size else None


def time_to_eps(run, eps: float, net: Network | None, gather: str = "linear", metric: str = "suboptimality"):
    """Projected (net given) or measured (net None) seconds until ``metric`` ≤ eps; NaN if never."""
    t = first_reached(run.series.get(metric, []), eps)
    if t is None:
        return float("nan")
    c = costs(run)
    return float(c.measured[t] if net is None else project(c, net, gather)[t])
