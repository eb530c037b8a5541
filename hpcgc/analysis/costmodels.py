"""Cost models of the MPI collectives hpcgc uses: α–β–γ formulas of MPICH's algorithms.

Notation of Thakur, Rabenseifner & Gropp (2005): ``p`` processes (here ``n``), α the latency of one
message (seconds), β the transfer time per byte (seconds per byte, the *inverse* bandwidth: a link
of B bytes/s has β = 1/B), γ the computation time per byte of a reduction (seconds per byte). Every
function takes numpy arrays (broadcast against each other) and returns seconds.

Sources:

* R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations in
  MPICH", Int. J. High Performance Computing Applications 19(1):49–66, 2005 — the algorithms, their
  costs and MPICH's selection rules (thresholds below: the defaults of MPICH's control variables
  ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` = 2048, ``MPIR_CVAR_BCAST_SHORT_MSG_SIZE`` = 12288,
  ``MPIR_CVAR_BCAST_LONG_MSG_SIZE`` = 524288, ``MPIR_CVAR_BCAST_MIN_PROCS`` = 8,
  ``MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE`` = 81920, ``MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE`` = 524288;
  MPICH 4's ch4 may also follow a JSON tuning file).
* E. Chan, M. Heimlich, A. Purkayastha, R. van de Geijn, "Collective communication: theory,
  practice, and experience", Concurrency and Computation: Practice and Experience 19:1749–1783, 2007
  — the same α–β–γ model, the ring ("bucket") algorithms for long vectors and the lower bounds.
* P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
  J. Parallel Distrib. Comput. 69(2):117–124, 2009 — the ring Allreduce (reduce-scatter + allgather
  along a ring).

Conventions for the message size (as in OSU and ``hpcgc collectives``: bytes *each rank*
contributes), with the paper's ``n`` (total bytes) in brackets:

==============  ===========================  ===========================================================
function        ``nbytes``                   algorithms (``"auto"`` = MPICH's selection)
==============  ===========================  ===========================================================
allreduce       vector bytes per rank [n]    recursive_doubling, rabenseifner, ring
reduce          vector bytes per rank [n]    binomial, rabenseifner (reduce-scatter + gather)
bcast           buffer bytes [n]             binomial, scatter_allgather (recursive doubling or ring)
gather          block per rank [n = p·b]     binomial (MPICH's MPI_Gather), linear
gatherv         bytes into the root          linear (MPICH's MPI_Gatherv), binomial
allgather       block per rank [n = p·b]     recursive_doubling, bruck, ring (Allgatherv: mean block)
alltoall        block per destination        bruck, pairwise (MPICH's isend/irecv: the same terms)
alltoallv       bytes each rank sends to     pairwise (MPICH's Alltoallv: isend/irecv or pairwise)
                the others in all
==============  ===========================  ===========================================================

Composed: :func:`compressed_allreduce` — hpcgc's ``run.collective = "reduce-scatter"``: Alltoall of
the segment lengths + Alltoallv of the compressed segments + Allgather of the lengths + Allgatherv of
the re-compressed reduced segments (CGX, Markov et al. 2022; ``docs/cost-models.md``);
:func:`hierarchical` — a two-level (node-aware) exchange: an intra-node Reduce onto each node's leader,
the collective among the leaders, an intra-node Bcast, each level with its own α, β.

What the models ignore (``docs/cost-models.md``): link contention and the topology (every pair of
processes has its own link of the same α, β), several processes sharing a node (shared memory, a
NIC; :func:`hierarchical` models a node-aware exchange explicitly), eager/rendezvous protocol
switches, pipelining and segmentation, overlap with computation.
``lg`` is log₂; ⌈lg p⌉ rounds for the tree algorithms.
"""
from __future__ import annotations

import numpy as np

# MPICH's default thresholds (bytes), Thakur et al. 2005 §4 and MPICH's CVARs
ALLREDUCE_SHORT = 2048          # ≤: recursive doubling; >: Rabenseifner (reduce-scatter + allgather)
REDUCE_SHORT = 2048             # ≤: binomial tree; >: Rabenseifner (reduce-scatter + gather)
BCAST_SHORT = 12288             # <: binomial tree
BCAST_LONG = 524288             # <, with p a power of two: scatter + recursive-doubling allgather
BCAST_MIN_PROCS = 8             # p < 8: binomial tree at every size
ALLGATHER_SHORT = 81920         # total < : Bruck (p not a power of two)
ALLGATHER_LONG = 524288         # total < , p a power of two: recursive doubling; else ring
ALLTOALL_SHORT = 256            # block ≤ , p ≥ 8: Bruck; else isend/irecv or pairwise exchange
ALLTOALL_MIN_PROCS = 8          # MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE = 256 and Bruck needs p ≥ 8

ALGORITHMS = {
    "allreduce": ("auto", "recursive_doubling", "rabenseifner", "ring"),
    "reduce": ("auto", "binomial", "rabenseifner"),
    "bcast": ("auto", "binomial", "scatter_allgather", "scatter_ring_allgather"),
    "gather": ("auto", "binomial", "linear"),
    "gatherv": ("auto", "linear", "binomial"),
    "allgather": ("auto", "recursive_doubling", "bruck", "ring"),
    "alltoall": ("auto", "bruck", "pairwise"),
    "alltoallv": ("auto", "pairwise"),
}


def _args(nbytes, n):
    m = np.asarray(nbytes, dtype=np.float64)
    p = np.asarray(n, dtype=np.int64)
    if np.any(p < 1):
        raise ValueError("the number of processes must be >= 1")
    if np.any(m < 0):
        raise ValueError("message sizes must be >= 0 bytes")
    return m, p


def lg_ceil(n) -> np.ndarray:
    """⌈log₂ n⌉ (0 for n = 1), exact for integers."""
    p = np.asarray(n, dtype=np.int64)
    return np.where(p > 1, np.ceil(np.log2(np.maximum(p, 1)) - 1e-12), 0).astype(np.float64)


def pof2_floor(n) -> np.ndarray:
    """The largest power of two ≤ n."""
    p = np.asarray(n, dtype=np.int64)
    return np.power(2, np.floor(np.log2(np.maximum(p, 1)) + 1e-12)).astype(np.int64)


def is_pof2(n) -> np.ndarray:
    p = np.asarray(n, dtype=np.int64)
    return (p & (p - 1)) == 0


def _check(kind: str, algorithm: str):
    if algorithm not in ALGORITHMS[kind]:
        raise ValueError(f"{kind} algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS[kind])}")


# -- coefficients: time = a·α + b·β + c·γ ------------------------------------------------------------
def coefficients(kind: str, nbytes, n, algorithm: str = "auto"):
    """(a, b, c) with time = a·α + b·β + c·γ for collective ``kind`` (a key of :data:`ALGORITHMS`).

    Every model of this module is linear in α, β, γ for a given algorithm; ``"auto"`` picks the
    algorithm by message size and process count only, never by α or β, so the coefficients are what
    a break-even computation needs (:mod:`hpcgc.analysis.breakeven`)."""
    _check(kind, algorithm)
    m, p = _args(nbytes, n)
    m, p = np.broadcast_arrays(m, p)
    one = p <= 1                       # a single process communicates nothing
    return tuple(np.where(one, 0.0, np.broadcast_to(np.asarray(x, dtype=np.float64), m.shape))
                 for x in _COEF[kind](m, p, algorithm))


def _allreduce_coef(m, p, algorithm):
    """Thakur et al. 2005 §4.4: recursive doubling lg p·(α + nβ + nγ); Rabenseifner's reduce-scatter
    + allgather 2 lg p·α + 2(p−1)/p·nβ + (p−1)/p·nγ. For p not a power of two both first fold the
    p − p' extra processes into p' = 2^⌊lg p⌋ (α + nβ + nγ) and send them the result at the end
    (α + nβ). Ring (Patarasuk & Yuan 2009; Chan et al. 2007's bucket algorithm): reduce-scatter and
    allgather along a ring, 2(p−1)·α + 2(p−1)/p·nβ + (p−1)/p·nγ, any p. MPICH (``auto``): recursive
    doubling for n ≤ 2 KiB, Rabenseifner above."""
    pp = pof2_floor(p).astype(np.float64)
    extra = np.where(is_pof2(p), 0.0, 1.0)              # the fold-in / fold-out steps
    lgp = np.log2(np.maximum(pp, 1))
    rd = (lgp + 2 * extra, (lgp + 2 * extra) * m, (lgp + extra) * m)
    rab = (2 * lgp + 2 * extra, 2 * (pp - 1) / pp * m + 2 * extra * m, (pp - 1) / pp * m + extra * m)
    pf = p.astype(np.float64)
    ring = (2 * (pf - 1), 2 * (pf - 1) / pf * m, (pf - 1) / pf * m)
    if algorithm == "recursive_doubling":
        return rd
    if algorithm == "rabenseifner":
        return rab
    if algorithm == "ring":
        return ring
    short = m <= ALLREDUCE_SHORT
    return tuple(np.where(short, x, y) for x, y in zip(rd, rab))


def _reduce_coef(m, p, algorithm):
    """Thakur et al. 2005 §4.6 (MPI_Reduce to one root): binomial tree ⌈lg p⌉·(α + nβ + nγ);
    Rabenseifner's reduce-scatter (recursive halving) + binomial gather 2 lg p·α + 2(p−1)/p·nβ +
    (p−1)/p·nγ, for p not a power of two after folding the p − p' extra processes into p' =
    2^⌊lg p⌋ (α + nβ + nγ; no result goes back to them). MPICH (``auto``): binomial for
    n ≤ 2 KiB (``MPIR_CVAR_REDUCE_SHORT_MSG_SIZE``), Rabenseifner above."""
    lgp = lg_ceil(p)
    binomial = (lgp, lgp * m, lgp * m)
    pp = pof2_floor(p).astype(np.float64)
    extra = np.where(is_pof2(p), 0.0, 1.0)
    lgpp = np.log2(np.maximum(pp, 1))
    rab = (2 * lgpp + extra, 2 * (pp - 1) / pp * m + extra * m, (pp - 1) / pp * m + extra * m)
    if algorithm == "binomial":
        return binomial
    if algorithm == "rabenseifner":
        return rab
    short = m <= REDUCE_SHORT
    return tuple(np.where(short, x, y) for x, y in zip(binomial, rab))


def _bcast_coef(m, p, algorithm):
    """Thakur et al. 2005 §4.2: binomial tree ⌈lg p⌉·(α + nβ); van de Geijn's scatter + allgather:
    a binomial scatter (lg p·α + (p−1)/p·nβ) then a recursive-doubling allgather (lg p·α + (p−1)/p·nβ)
    or a ring allgather ((p−1)·α + (p−1)/p·nβ). MPICH (``auto``): binomial for n < 12 KiB or p < 8;
    scatter + recursive doubling for n < 512 KiB with p a power of two; scatter + ring otherwise."""
    pf = p.astype(np.float64)
    lgp = lg_ceil(p)
    binomial = (lgp, lgp * m, 0 * m)
    scatter = (lgp, (pf - 1) / pf * m)
    sag_rd = (2 * lgp, 2 * scatter[1], 0 * m)
    sag_ring = (lgp + pf - 1, 2 * scatter[1], 0 * m)
    if algorithm == "binomial":
        return binomial
    if algorithm == "scatter_allgather":
        return sag_rd
    if algorithm == "scatter_ring_allgather":
        return sag_ring
    use_binomial = (m < BCAST_SHORT) | (p < BCAST_MIN_PROCS)
    use_rd = (m < BCAST_LONG) & is_pof2(p)
    return tuple(np.where(use_binomial, b, np.where(use_rd, r, g)) for b, r, g in zip(binomial, sag_rd, sag_ring))


def _gatherv_coef(m_in, p, algorithm):
    """``m_in``: bytes the root receives from the other processes (its own block does not move).
    Linear (MPICH's only MPI_Gatherv algorithm: the root receives from each of the p − 1 others):
    (p − 1)·α + n_in·β. Binomial tree (Thakur et al. 2005 §4.3, MPICH's MPI_Gather): ⌈lg p⌉·α +
    n_in·β — every byte that is not the root's crosses the root's link once; with equal blocks
    n_in = (p−1)/p·n, the paper's ⌈lg p⌉α + (p−1)/p·nβ."""
    pf = p.astype(np.float64)
    if algorithm == "binomial":
        return lg_ceil(p), m_in, 0 * m_in
    return pf - 1, m_in, 0 * m_in


def _gather_coef(m, p, algorithm):
    """MPI_Gather of equal blocks of ``m`` bytes: the root receives (p − 1)·m bytes;
    MPICH (``auto``): binomial tree, ⌈lg p⌉·α + (p−1)/p·nβ (n = p·m); ``linear``: (p − 1)·α + ..."""
    return _gatherv_coef((p - 1) * m, p, "linear" if algorithm == "linear" else "binomial")


def _allgather_coef(m, p, algorithm):
    """Thakur et al. 2005 §4.1, n = p·m the bytes every process ends with: ring (p−1)·α + (p−1)/p·nβ;
    recursive doubling (p a power of two) lg p·α + (p−1)/p·nβ; Bruck ⌈lg p⌉·α + (p−1)/p·nβ. MPICH
    (``auto``, on the total n): recursive doubling for n < 512 KiB with p a power of two, Bruck for
    n < 80 KiB otherwise, ring for the rest. Allgatherv: the same with m the mean block."""
    pf = p.astype(np.float64)
    total = pf * m
    bw = (pf - 1) / pf * total
    lgp = lg_ceil(p)
    ring, tree = (pf - 1, bw, 0 * m), (lgp, bw, 0 * m)
    if algorithm == "ring":
        return ring
    if algorithm in ("recursive_doubling", "bruck"):
        return tree             # same cost; recursive doubling needs p a power of two in MPICH
    use_tree = ((total < ALLGATHER_LONG) & is_pof2(p)) | (total < ALLGATHER_SHORT)
    return tuple(np.where(use_tree, t, r) for t, r in zip(tree, ring))


def _alltoall_coef(m, p, algorithm):
    """Thakur et al. 2005 §4.5, ``m`` the block each process sends to each other one (N = p·m):
    Bruck ⌈lg p⌉·α + (N/2)·⌈lg p⌉·β (each of the ⌈lg p⌉ rounds forwards about half the data);
    pairwise exchange (and MPICH's isend/irecv for medium blocks, which posts the same p − 1
    messages at once) (p − 1)·α + (p − 1)·m·β — every block but the own one leaves the process.
    MPICH (``auto``): Bruck for m ≤ 256 B with p ≥ 8, pairwise otherwise."""
    pf = p.astype(np.float64)
    lgp = lg_ceil(p)
    bruck = (lgp, pf * m / 2 * lgp, 0 * m)
    pairwise = (pf - 1, (pf - 1) * m, 0 * m)
    if algorithm == "bruck":
        return bruck
    if algorithm == "pairwise":
        return pairwise
    use_bruck = (m <= ALLTOALL_SHORT) & (p >= ALLTOALL_MIN_PROCS)
    return tuple(np.where(use_bruck, b, q) for b, q in zip(bruck, pairwise))


def _alltoallv_coef(m_out, p, algorithm):
    """``m_out``: bytes each process sends to the others in all (its own block does not move), the
    same for every process. MPICH's Alltoallv (isend/irecv in batches, or pairwise exchange): p − 1
    messages out and in per process, full duplex: (p − 1)·α + m_out·β."""
    pf = p.astype(np.float64)
    return pf - 1, m_out, 0 * m_out


_COEF = {"allreduce": _allreduce_coef, "reduce": _reduce_coef, "bcast": _bcast_coef, "gather": _gather_coef,
         "gatherv": _gatherv_coef, "allgather": _allgather_coef, "alltoall": _alltoall_coef,
         "alltoallv": _alltoallv_coef}


def _time(kind, nbytes, n, alpha, beta, gamma, algorithm):
    a, b, c = coefficients(kind, nbytes, n, algorithm)
    return a * np.asarray(alpha, float) + b * np.asarray(beta, float) + c * np.asarray(gamma, float)


# -- the models, in seconds ---------------------------------------------------------------------------
def allreduce(nbytes, n, alpha, beta, gamma=0.0, algorithm: str = "auto"):
    """MPI_Allreduce of a vector of ``nbytes`` bytes on ``n`` processes (Thakur et al. 2005 §4.4):

    - ``recursive_doubling``: lg p·(α + nβ + nγ)
    - ``rabenseifner`` (reduce-scatter + allgather): 2 lg p·α + 2(p−1)/p·nβ + (p−1)/p·nγ
    - ``ring`` (Patarasuk & Yuan 2009): 2(p−1)·α + 2(p−1)/p·nβ + (p−1)/p·nγ
    - ``auto`` (MPICH): recursive doubling for n ≤ 2048 bytes, Rabenseifner above.

    p not a power of two: recursive doubling and Rabenseifner add α + nβ + nγ before and α + nβ
    after (folding into p' = 2^⌊lg p⌋ processes; lg p and p above are then those of p')."""
    return _time("allreduce", nbytes, n, alpha, beta, gamma, algorithm)


def reduce(nbytes, n, alpha, beta, gamma=0.0, algorithm: str = "auto"):
    """MPI_Reduce of a vector of ``nbytes`` bytes from ``n`` processes onto one root (Thakur et al.
    2005 §4.6):

    - ``binomial``: ⌈lg p⌉·(α + nβ + nγ)
    - ``rabenseifner`` (reduce-scatter + gather): 2 lg p·α + 2(p−1)/p·nβ + (p−1)/p·nγ
      (p not a power of two: plus α + nβ + nγ to fold the extra processes in)
    - ``auto`` (MPICH): binomial for n ≤ 2048 bytes, Rabenseifner above."""
    return _time("reduce", nbytes, n, alpha, beta, gamma, algorithm)


def bcast(nbytes, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Bcast of ``nbytes`` bytes from one root to ``n`` processes (Thakur et al. 2005 §4.2):

    - ``binomial``: ⌈lg p⌉·(α + nβ)
    - ``scatter_allgather`` (scatter + recursive-doubling allgather): 2 lg p·α + 2(p−1)/p·nβ
    - ``scatter_ring_allgather``: (lg p + p − 1)·α + 2(p−1)/p·nβ
    - ``auto`` (MPICH): binomial below 12 KiB or with p < 8; scatter + recursive doubling below
      512 KiB with p a power of two; scatter + ring allgather otherwise."""
    return _time("bcast", nbytes, n, alpha, beta, 0.0, algorithm)


def gather(nbytes, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Gather of ``nbytes`` bytes from each of ``n`` processes to a root (Thakur et al. 2005):

    - ``binomial`` (MPICH's, ``auto``): ⌈lg p⌉·α + (p−1)·nbytes·β  (= the paper's (p−1)/p·nβ, n = p·nbytes)
    - ``linear``: (p − 1)·α + (p−1)·nbytes·β (the root receives from each process in turn)"""
    return _time("gather", nbytes, n, alpha, beta, 0.0, algorithm)


def gatherv(incoming, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Gatherv on ``n`` processes whose root receives ``incoming`` bytes in all from the others
    (any split; its own block does not move):

    - ``linear`` (MPICH's only MPI_Gatherv algorithm, ``auto``): (p − 1)·α + incoming·β
    - ``binomial``: ⌈lg p⌉·α + incoming·β"""
    return _time("gatherv", incoming, n, alpha, beta, 0.0, algorithm)


def allgather(nbytes, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Allgather(v) of a block of ``nbytes`` bytes per process (Allgatherv: the mean block) on
    ``n`` processes, every process ending with N = p·nbytes bytes (Thakur et al. 2005 §4.1):

    - ``ring``: (p − 1)·α + (p−1)/p·Nβ
    - ``recursive_doubling`` (p a power of two) and ``bruck``: ⌈lg p⌉·α + (p−1)/p·Nβ
    - ``auto`` (MPICH, on N): recursive doubling for N < 512 KiB and p a power of two, Bruck for
      N < 80 KiB otherwise, ring for the rest."""
    return _time("allgather", nbytes, n, alpha, beta, 0.0, algorithm)


def alltoall(nbytes, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Alltoall of a block of ``nbytes`` bytes from every process to every other one on ``n``
    processes (Thakur et al. 2005 §4.5; N = p·nbytes):

    - ``bruck``: ⌈lg p⌉·α + (N/2)·⌈lg p⌉·β
    - ``pairwise`` (and isend/irecv): (p − 1)·α + (p − 1)·nbytes·β
    - ``auto`` (MPICH): Bruck for blocks ≤ 256 B with p ≥ 8, pairwise otherwise."""
    return _time("alltoall", nbytes, n, alpha, beta, 0.0, algorithm)


def alltoallv(outgoing, n, alpha, beta, algorithm: str = "auto"):
    """MPI_Alltoallv on ``n`` processes, each sending ``outgoing`` bytes in all to the others (and
    receiving as many): (p − 1)·α + outgoing·β."""
    return _time("alltoallv", outgoing, n, alpha, beta, 0.0, algorithm)


LENGTH_BYTES = 4                # one int32 length per segment (hpcgc's length words)


def compressed_allreduce_coefficients(first, second, n):
    """(a, b, c) of one compressed Allreduce by reduce-scatter + allgather (hpcgc's
    ``run.collective = "reduce-scatter"``; CGX, Markov et al. 2022; 1-bit Adam's compressed
    allreduce, Tang et al. 2021), per process:

    1. MPI_Alltoall of the n segment lengths (4 B per destination),
    2. MPI_Alltoallv of the compressed segments: ``first`` = bytes of the whole compressed vector
       (all n segments, C₁ of d coordinates); (n − 1)/n of it leaves the process,
    3. MPI_Allgather of the length of the re-compressed reduced segment (4 B),
    4. MPI_Allgatherv of the re-compressed segments: ``second`` = bytes of all n of them (C₂ of d
       coordinates), a block of ``second``/n per process.

    Bytes received per process: (n − 1)/n·first + (n − 1)/n·second ≈ 2(n − 1)/n·d·b/8 for b bits
    per coordinate — the Rabenseifner/ring Allreduce's 2(n − 1)/n·m at b/32 of the float32 bytes.
    Both sizes are held fixed in n (the compressed size of d coordinates; each segment shrinks as
    1/n); the per-segment headers (8 B each) are not modelled. No reduction term: the decoding and
    summing is compute, measured (the ``server`` phase)."""
    first = np.asarray(first, dtype=np.float64)
    second = np.asarray(second, dtype=np.float64)
    pf = np.asarray(n, dtype=np.float64)
    parts = (coefficients("alltoall", LENGTH_BYTES, n),
             coefficients("alltoallv", (pf - 1) / pf * first, n),
             coefficients("allgather", LENGTH_BYTES, n),
             coefficients("allgather", second / pf, n))
    return tuple(sum(x) for x in zip(*parts))


def compressed_allreduce(first, second, n, alpha, beta):
    """Seconds of :func:`compressed_allreduce_coefficients` (MPICH's ``auto`` selection in each
    of the four collectives)."""
    a, b, _ = compressed_allreduce_coefficients(first, second, n)
    return a * np.asarray(alpha, float) + b * np.asarray(beta, float)


# -- two levels: a node-aware (hierarchical) exchange ---------------------------------------------------
def intra_node(nbytes, ranks_per_node, alpha, beta, gamma=0.0, down_bytes=None):
    """The intra-node part of a hierarchical exchange, in seconds: MPI_Reduce of ``nbytes`` onto the
    node's leader, then MPI_Bcast of ``down_bytes`` (default ``nbytes``) from it, on the node's
    ``ranks_per_node`` processes at the intra-node (shared-memory) α, β, γ; MPICH's ``auto``
    algorithms. 0 with one rank per node."""
    down = nbytes if down_bytes is None else down_bytes
    return reduce(nbytes, ranks_per_node, alpha, beta, gamma) + bcast(down, ranks_per_node, alpha, beta)


def hierarchical(kind, nbytes, nodes, ranks_per_node, alpha_inter, beta_inter, alpha_intra, beta_intra,
                 gamma=0.0, intra_bytes=None, down_bytes=None, algorithm: str = "auto"):
    """Seconds of a two-level exchange on ``nodes`` × ``ranks_per_node`` processes (Horovod's and
    BytePS's hierarchical allreduce; MPICH's own node-aware ``MPIR_CVAR_*_INTRA_ALGORITHM=smp``):

        T = Reduce(intra_bytes, K; α_intra, β_intra, γ)          the node's ranks onto its leader
          + kind(nbytes, nodes; α_inter, β_inter[, γ])           the leaders, over the network
          + Bcast(down_bytes, K; α_intra, β_intra)               the leader to its node

    ``kind``: a collective of :data:`ALGORITHMS` (``algorithm`` applies to it), with ``nbytes`` in its
    own convention; ``intra_bytes`` (default ``nbytes``): the vector each node reduces (uncompressed:
    compression, if any, applies to the leaders' step only); ``down_bytes`` (default
    ``intra_bytes``): what the leader broadcasts in its node. The flat alternative on the same
    machines is ``kind`` on nodes·K processes; this module prices it at one α, β (the network's)."""
    m_intra = nbytes if intra_bytes is None else intra_bytes
    inter = _time(kind, nbytes, nodes, alpha_inter, beta_inter, gamma if kind in ("allreduce", "reduce") else 0.0,
                  algorithm)
    return intra_node(m_intra, ranks_per_node, alpha_intra, beta_intra, gamma, down_bytes) + inter
