"""The collective cost models against the formulas of Thakur, Rabenseifner & Gropp (2005) for a few
(n, m), written out here by hand, MPICH's selection thresholds, and Chan et al. (2007)'s lower bounds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc.analysis import costmodels as cm

A, B, G = 1e-5, 1e-9, 2e-10          # α = 10 µs, β = 1 ns/B (1 GB/s), γ = 0.2 ns/B


def close(x, y):
    return float(x) == pytest.approx(y, rel=1e-12)


def test_allreduce_formulas():
    # recursive doubling, p = 8, n = 1024 B: lg p (α + nβ + nγ) = 3 (α + 1024β + 1024γ)
    assert close(cm.allreduce(1024, 8, A, B, G, "recursive_doubling"), 3 * (A + 1024 * B + 1024 * G))
    # Rabenseifner, p = 8, n = 1 MiB: 2 lg p α + 2 (p−1)/p nβ + (p−1)/p nγ
    n = 1 << 20
    assert close(cm.allreduce(n, 8, A, B, G, "rabenseifner"), 6 * A + 2 * 7 / 8 * n * B + 7 / 8 * n * G)
    # ring, p = 5: 2(p−1) α + 2(p−1)/p nβ + (p−1)/p nγ
    assert close(cm.allreduce(n, 5, A, B, G, "ring"), 8 * A + 2 * 4 / 5 * n * B + 4 / 5 * n * G)
    # p = 6 is not a power of two: fold into p' = 4 (α + nβ + nγ), recursive doubling on 4 (2 steps),
    # send the result back (α + nβ)
    assert close(cm.allreduce(1024, 6, A, B, G, "recursive_doubling"),
                 (A + 1024 * B + 1024 * G) + 2 * (A + 1024 * B + 1024 * G) + (A + 1024 * B))
    assert close(cm.allreduce(n, 6, A, B, G, "rabenseifner"),
                 (A + n * B + n * G) + (4 * A + 2 * 3 / 4 * n * B + 3 / 4 * n * G) + (A + n * B))
    # MPICH's choice: recursive doubling up to 2048 B, Rabenseifner above
    assert close(cm.allreduce(2048, 8, A, B, G), 3 * (A + 2048 * B + 2048 * G))
    assert close(cm.allreduce(2052, 8, A, B, G), 6 * A + 2 * 7 / 8 * 2052 * B + 7 / 8 * 2052 * G)
    # arrays broadcast: one n per size
    v = cm.allreduce(np.array([1024, n]), np.array([8, 8]), A, B, G)
    assert v == pytest.approx([3 * (A + 1024 * B + 1024 * G), 6 * A + 1.75 * n * B + 0.875 * n * G], rel=1e-12)


def test_bcast_formulas():
    # binomial, p = 5, n = 100 B: ⌈lg 5⌉ (α + nβ) = 3 (α + 100β)
    assert close(cm.bcast(100, 5, A, B, "binomial"), 3 * (A + 100 * B))
    # scatter + recursive-doubling allgather, p = 16, n = 64 KiB: 2 lg p α + 2 (p−1)/p nβ
    n = 65536
    assert close(cm.bcast(n, 16, A, B, "scatter_allgather"), 8 * A + 2 * 15 / 16 * n * B)
    # MPICH: 64 KiB on 16 (a power of two, 12 KiB ≤ n < 512 KiB) → scatter + recursive doubling
    assert close(cm.bcast(n, 16, A, B), 8 * A + 2 * 15 / 16 * n * B)
    # 1 MiB on 16 (≥ 512 KiB) → scatter + ring allgather: (lg p + p − 1) α + 2 (p−1)/p nβ
    n = 1 << 20
    assert close(cm.bcast(n, 16, A, B), (4 + 15) * A + 2 * 15 / 16 * n * B)
    # 64 KiB on 12 (not a power of two) → scatter + ring: (⌈lg 12⌉ + 11) α + ...
    assert close(cm.bcast(65536, 12, A, B), (4 + 11) * A + 2 * 11 / 12 * 65536 * B)
    # fewer than 8 processes, or under 12 KiB: binomial at any size
    assert close(cm.bcast(n, 4, A, B), 2 * (A + n * B))
    assert close(cm.bcast(12000, 64, A, B), 6 * (A + 12000 * B))


def test_gather_formulas():
    # binomial MPI_Gather, p = 8, 100 B each: ⌈lg p⌉α + (p−1)/p · (8 · 100) β
    assert close(cm.gather(100, 8, A, B), 3 * A + 7 / 8 * 800 * B)
    assert close(cm.gather(100, 8, A, B, "linear"), 7 * A + 700 * B)
    # MPI_Gatherv (linear in MPICH): p − 1 messages, every byte that is not the root's
    assert close(cm.gatherv(1000 + 3000, 3, A, B), 2 * A + 4000 * B)
    assert close(cm.gatherv(4000, 5, A, B, "binomial"), 3 * A + 4000 * B)


def test_allgather_formulas():
    # ring, p = 6, 1 MB per process: (p−1) α + (p−1)/p · (p · m) β
    m = 1e6
    assert close(cm.allgather(m, 6, A, B, "ring"), 5 * A + 5 / 6 * 6e6 * B)
    assert close(cm.allgather(m, 6, A, B), 5 * A + 5 / 6 * 6e6 * B)            # MPICH: long → ring
    # p = 8, 1000 B each (8000 B < 512 KiB, power of two) → recursive doubling: lg p α + (p−1)/p nβ
    assert close(cm.allgather(1000, 8, A, B), 3 * A + 7 / 8 * 8000 * B)
    # p = 6, 1000 B each (6000 B < 80 KiB, not a power of two) → Bruck: ⌈lg 6⌉ α + ...
    assert close(cm.allgather(1000, 6, A, B), 3 * A + 5 / 6 * 6000 * B)
    # p = 6, 20 KB each (120 KB: above Bruck's 80 KiB, not a power of two) → ring
    assert close(cm.allgather(20000, 6, A, B), 5 * A + 5 / 6 * 120000 * B)


def test_one_process_costs_nothing_and_bad_arguments():
    for f in (cm.allreduce, cm.bcast, cm.gather, cm.gatherv, cm.allgather):
        assert f(1 << 20, 1, A, B) == 0.0
    with pytest.raises(ValueError, match="algorithm"):
        cm.allreduce(8, 4, A, B, algorithm="tree")
    with pytest.raises(ValueError, match="processes"):
        cm.bcast(8, 0, A, B)
    with pytest.raises(ValueError, match="sizes"):
        cm.allgather(-1, 4, A, B)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7, 8, 12, 16, 100, 128, 1000, 1024])
@pytest.mark.parametrize("m", [8, 1000, 4096, 100_000, 1 << 20, 1 << 26])
def test_never_below_the_lower_bounds(p, m):
    """Chan et al. 2007, Table I: no algorithm beats ⌈lg p⌉α + (bandwidth term) for its collective."""
    lg = math.ceil(math.log2(p))
    lb = {"allreduce": lg * A + 2 * (p - 1) / p * m * B + (p - 1) / p * m * G,
          "bcast": lg * A + m * B,
          "allgather": lg * A + (p - 1) / p * (p * m) * B,
          "gather": lg * A + (p - 1) / p * (p * m) * B}
    for alg in cm.ALGORITHMS["allreduce"]:
        assert cm.allreduce(m, p, A, B, G, alg) >= lb["allreduce"] * (1 - 1e-12)
    for alg in cm.ALGORITHMS["bcast"]:
        assert cm.bcast(m, p, A, B, alg) >= lb["bcast"] * (1 - 1e-12) or p < 2
    for alg in cm.ALGORITHMS["allgather"]:
        assert cm.allgather(m, p, A, B, alg) >= lb["allgather"] * (1 - 1e-12)
    for alg in cm.ALGORITHMS["gather"]:
        assert cm.gather(m, p, A, B, alg) >= lb["gather"] * (1 - 1e-12)


def test_coefficients_are_the_time():
    """time = a·α + b·β + c·γ: what the break-even report uses."""
    a, b, c = cm.coefficients("allreduce", 1 << 20, 8)
    assert close(a * A + b * B + c * G, cm.allreduce(1 << 20, 8, A, B, G))
    assert (float(a), float(b), float(c)) == (6.0, 2 * 7 / 8 * (1 << 20), 7 / 8 * (1 << 20))


def test_projection_keeps_its_documented_formulas():
    """``hpcgc project`` computes through these models with fixed algorithms; its numbers are those
    of docs/projection.md (written out here for P = 4, k = 10 iterations)."""
    from hpcgc.analysis import projection as proj
    net = proj.Network("toy", A, 1 / B)
    P, k = 4, np.array([0, 10])

    def costs(collective, up_bytes, down_bytes=0.0, rounds=1):
        z = np.zeros(2)
        return proj.Costs(k, z, z, np.array([0.0, up_bytes]), np.array([0.0, down_bytes]), z, P, True,
                          collective, rounds)

    # ring Allreduce, PowerSGD's 2 calls per iteration, 8000 B of vectors per rank and iteration
    up, down = proj.network_time(costs("allreduce", 10 * P * 8000, rounds=2), net)
    assert up[1] == pytest.approx(10 * 2 * 2 * (P - 1) * A + 2 * (P - 1) / P * 10 * 8000 * B, rel=1e-12)
    assert down[1] == 0 and up[0] == 0
    # ring Allgather of the lengths + ring Allgatherv of the payloads: 2 (P − 1) α, (P−1)/P of every byte
    up, _ = proj.network_time(costs("allgather", 10 * P * 504), net)
    assert up[1] == pytest.approx(10 * 2 * (P - 1) * A + (P - 1) / P * 10 * P * 504 * B, rel=1e-12)
    # linear gather: (P − 1) lengths + (P − 1) payloads; binomial Bcast of 808 B: ⌈lg 4⌉ = 2 rounds
    up, down = proj.network_time(costs("gather", 10 * (P - 1) * 504, 10 * 808), net)
    assert up[1] == pytest.approx(10 * 2 * (P - 1) * A + 10 * (P - 1) * 504 * B, rel=1e-12)
    assert down[1] == pytest.approx(10 * 2 * (A + 808 * B), rel=1e-12)
    up, _ = proj.network_time(costs("gather", 10 * (P - 1) * 504, 10 * 808), net, "tree")
    assert up[1] == pytest.approx(10 * 2 * 2 * A + 10 * (P - 1) * 504 * B, rel=1e-12)


def test_alltoall_formulas():
    # Thakur et al. 2005 §4.5: pairwise (p − 1)(α + mβ); Bruck ⌈lg p⌉α + (p·m/2)⌈lg p⌉β for m ≤ 256 B, p ≥ 8
    assert close(cm.alltoall(1000, 4, A, B), 3 * (A + 1000 * B))
    assert close(cm.alltoall(4, 4, A, B), 3 * (A + 4 * B))                   # p < 8: pairwise
    assert close(cm.alltoall(4, 128, A, B), 7 * A + 128 * 4 / 2 * 7 * B)     # Bruck
    assert close(cm.alltoall(4, 128, A, B, "pairwise"), 127 * (A + 4 * B))
    assert close(cm.alltoall(257, 128, A, B), 127 * (A + 257 * B))
    # Alltoallv: p − 1 messages, the bytes that leave the process
    assert close(cm.alltoallv(3000, 4, A, B), 3 * A + 3000 * B)


def test_compressed_allreduce_by_hand():
    """reduce-scatter + allgather of a compressed vector of 262 144 B (both stages), by hand."""
    c = 262_144
    # n = 4: Alltoall of 4-byte lengths (p < 8: pairwise) 3α + 12β; Alltoallv of 3/4·c: 3α + 196 608β;
    # Allgather of the lengths (16 B in all, p a power of two: recursive doubling) 2α + 12β;
    # Allgatherv of c/4 per rank (c in all < 512 KiB: recursive doubling) 2α + 196 608β
    a, b, g = cm.compressed_allreduce_coefficients(c, c, 4)
    assert (float(a), float(b), float(g)) == (10.0, 393_240.0, 0.0)
    assert close(cm.compressed_allreduce(c, c, 4, A, B), 10 * A + 393_240 * B)
    # n = 128: Bruck Alltoall 7α + 128·4/2·7 = 1792β; Alltoallv 127α + 127/128·c = 260 096β;
    # lengths 7α + 127/128·512 = 508β; Allgatherv of 2048-byte blocks 7α + 260 096β
    a, b, _ = cm.compressed_allreduce_coefficients(c, c, 128)
    assert (float(a), float(b)) == (148.0, 1792 + 260_096 + 508 + 260_096)
    # n = 1024: 10α + 1024·2·10β; 1023α + 1023/1024·c; 10α + 1023/1024·4096; 10α + 1023/1024·c
    a, b, _ = cm.compressed_allreduce_coefficients(c, c, 1024)
    assert (float(a), float(b)) == (1053.0, 20_480 + 261_888 + 4092 + 261_888)
    # the bandwidth term is bounded in n (≈ 2(n − 1)/n·c + lengths), where an Allgather's grows ∝ n
    _, b_ag, _ = cm.coefficients("allgather", c, 1024)
    assert float(b) < 2.1 * c < float(b_ag) / 100


def test_reduce_formulas_by_hand():
    """MPI_Reduce (Thakur et al. 2005 §4.6): binomial ⌈lg p⌉(α + nβ + nγ) up to 2 KiB, Rabenseifner
    (reduce-scatter + gather) 2 lg p·α + 2(p−1)/p·nβ + (p−1)/p·nγ above; p = 6 folds 2 extra in first."""
    assert close(cm.reduce(1024, 4, A, B, G), 2 * (A + 1024 * B + 1024 * G))                  # binomial
    n = 1 << 20
    assert close(cm.reduce(n, 4, A, B, G), 4 * A + 1.5 * n * B + 0.75 * n * G)                # Rabenseifner
    assert close(cm.reduce(n, 6, A, B, G), (4 + 1) * A + (1.5 + 1) * n * B + (0.75 + 1) * n * G)
    assert close(cm.reduce(1024, 6, A, B, G, "binomial"), 3 * (A + 1024 * B + 1024 * G))
    assert cm.reduce(n, 1, A, B, G) == 0.0


def test_hierarchical_by_hand():
    """4 nodes x 4 ranks, 4 MiB float32 gradient, network α 50 µs, β 8 ns/B (1 Gb/s), shared memory
    α 1 µs, β 0.1 ns/B, γ = 0: intra Reduce (Rabenseifner, p = 4): 4·1 µs + 1.5·m·0.1 ns = 0.633 ms;
    intra Bcast (binomial, p < 8): 2·(1 µs + m·0.1 ns) = 0.841 ms; leaders' Allreduce (Rabenseifner,
    p = 4): 4·50 µs + 1.5·m·8 ns = 50.53 ms — 52.006 ms in all, against 63.31 ms for the flat
    Allreduce over 16 ranks at the network's α, β (8·50 µs + 2·15/16·m·8 ns)."""
    m = 4 * 2**20
    intra = (4e-6 + 1.5 * m * 1e-10) + 2 * (1e-6 + m * 1e-10)
    inter = 4 * 50e-6 + 1.5 * m * 8e-9
    assert close(cm.intra_node(m, 4, 1e-6, 1e-10), intra)
    assert close(cm.hierarchical("allreduce", m, 4, 4, 50e-6, 8e-9, 1e-6, 1e-10), intra + inter)
    assert close(intra + inter, 0.0520056544)
    assert close(cm.allreduce(m, 16, 50e-6, 8e-9), 8 * 50e-6 + 2 * 15 / 16 * m * 8e-9)
    # compressed leaders' step: the node reduces the dense vector, the leaders send 1/16 of it
    assert close(cm.hierarchical("allgather", m / 16, 4, 4, 50e-6, 8e-9, 1e-6, 1e-10, intra_bytes=m),
                 intra + cm.allgather(m / 16, 4, 50e-6, 8e-9))
    # one rank per node: no intra-node part; one node: no network part
    assert close(cm.hierarchical("allreduce", m, 4, 1, 50e-6, 8e-9, 1e-6, 1e-10), inter)
    assert close(cm.hierarchical("allreduce", m, 1, 4, 50e-6, 8e-9, 1e-6, 1e-10), intra)
