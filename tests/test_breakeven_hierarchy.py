"""Flat vs hierarchical in ``hpcgc breakeven`` (hpcgc/analysis/breakeven/hierarchy.py): the two-level
times of toy methods on 4 nodes x 4 ranks, computed here by hand from the formulas of Thakur,
Rabenseifner & Gropp (2005) (docs/cost-models.md), the exact break-even, the levels read from a
collectives file with ``levels/`` (written and read back), and every bad input."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import results
from hpcgc.analysis import breakeven as be
from hpcgc.analysis.breakeven import hierarchy as hi

A_NET, A_SHM, B_SHM = 50e-6, 1e-6, 1e-10          # network α; shared memory α, β (0.1 ns/B = 80 Gb/s)
D = 1 << 20                                        # coordinates
M = 4 * D                                          # the float32 baseline's vector (bytes)
LEVELS = hi.Levels(4, A_SHM, B_SHM, A_NET, "test")


def toy(collective, iterations, workers, up, baseline=False):
    return be.MethodModel(collective, ("toy",), 16, collective, iterations, "1/1", workers, 0.0, up, 0.0, 1, 1,
                          baseline, dense_bytes=8.0 * D)


BASE = toy("allreduce", 100, 5e-3, M, baseline=True)
PAYLOAD = 131072                                   # 1 bit per coordinate
COMPRESSED = toy("allgather", 150, 6e-3, PAYLOAD + 4)


def test_hierarchical_times_by_hand():
    """Per iteration, at n = 16 = 4 nodes x 4 ranks:

    baseline, hierarchical: the node reduces and broadcasts the float64 gradient (8·D bytes, as
    hpcgc.exchange.hierarchical does: the cast applies between the leaders only), leaders' Allreduce of
    M (Rabenseifner, p = 4) 4·α + 1.5·M·β;
    baseline, flat: Allreduce over 16 ranks 8·α + 2·15/16·M·β;
    compressed (Allgather of 1-bit payloads), hierarchical: the node reduces and broadcasts the float64
    gradient (8·D bytes), the leaders Allgather the 4-byte lengths (recursive doubling: 2α + 12β)
    and the payloads (4·P = 512 KiB ≥ 512 KiB: ring, 3α + 3·P·β)."""
    beta = 8e-9                                    # 1 Gb/s
    g = 8 * D
    intra_b = (4 * A_SHM + 1.5 * g * B_SHM) + 2 * (A_SHM + g * B_SHM)
    base_hier = 100 * (5e-3 + intra_b + 4 * A_NET + 1.5 * M * beta)
    base_flat = 100 * (5e-3 + 8 * A_NET + 2 * 15 / 16 * M * beta)
    intra_c = (4 * A_SHM + 1.5 * g * B_SHM) + 2 * (A_SHM + g * B_SHM)
    comp_hier = 150 * (6e-3 + intra_c + (2 + 3) * A_NET + (12 + 3 * PAYLOAD) * beta)
    assert hi.hierarchical_time(BASE, 16, LEVELS, beta) == pytest.approx(base_hier, rel=1e-12)
    assert hi.flat_time(BASE, 16, LEVELS, beta) == pytest.approx(base_flat, rel=1e-12)
    assert hi.hierarchical_time(COMPRESSED, 16, LEVELS, beta) == pytest.approx(comp_hier, rel=1e-12)
    assert hi.intra_bytes(BASE) == 8 * D and hi.intra_bytes(COMPRESSED) == 8 * D

    # the exact break-even of the hierarchical compressed method against the hierarchical baseline:
    # T = P + Q·β on both sides, so β* = ΔP / (−ΔQ)
    pm = 150 * (6e-3 + intra_c + 5 * A_NET)
    qm = 150 * (12 + 3 * PAYLOAD)
    pb = 100 * (5e-3 + intra_b + 4 * A_NET)
    qb = 100 * 1.5 * M
    beta_star = (pm - pb) / (qb - qm)
    panel = ("synthetic:logreg", "iid", "logreg", 0.1, 0.0, 16)
    rows = hi.hierarchy_rows({panel: (BASE, [BASE, COMPRESSED])}, LEVELS)
    row = rows[1]
    assert row["nodes"] == 4 and row["ranks_per_node"] == 4
    assert row["break_even_gbps_hier_run_n"] == pytest.approx(8 / beta_star / 1e9, rel=1e-9)
    assert row["break_even_hier_run_n"].startswith("below")
    assert row["time_hier_s_at_1Gbps"] == pytest.approx(comp_hier, rel=1e-12)
    assert rows[0]["break_even_hier_run_n"] == "baseline"
    # at n = 1024 (256 nodes of 4) the allgathered payloads grow with the nodes: 256·P per leader
    assert row["break_even_hier_n1024"].split()[0] in ("below", "above", "always", "never")
    # the hierarchical method against the flat baseline: a time difference of its own
    assert row["break_even_hier_vs_flat_baseline_run_n"].split()[0] in ("below", "above", "always", "never")


def test_ranks_per_node_must_divide():
    with pytest.raises(be.BreakEvenError, match="does not divide the rank count 16"):
        hi.hierarchical_affine(BASE, 16, hi.Levels(3, A_SHM, B_SHM, A_NET, "x"))


def _tables(alpha, beta, n):
    """A CollectiveTable of Bcasts at n ranks whose fit is exactly alpha + beta·s (binomial: ⌈lg n⌉
    messages, so the point-to-point α, β are alpha/⌈lg n⌉, beta/⌈lg n⌉)."""
    s = np.array([1 << 20, 1 << 21, 1 << 22])
    t = alpha + beta * s
    return [results.CollectiveTable("bcast", s, t, t, t, np.array([10, 10, 10]), alpha, beta, 0.0, 0.0, "exact")]


def test_levels_from_a_collectives_file(tmp_path):
    path = tmp_path / "coll.h5"
    flat = _tables(3e-4, 2e-8, 4)
    levels = {"intra": ({"ranks": 2, "communicator": "node"}, _tables(2e-6, 1e-10, 2)),
              "inter": ({"ranks": 2, "communicator": "leaders"}, _tables(6e-5, 8e-9, 2))}
    results.write_collectives(path, {"world_size": 4, "nodes": 2, "ranks_per_node": 2}, flat, levels)
    back = results.load_collectives(path)
    assert set(back.levels) == {"intra", "inter"} and back.levels["intra"].attrs["ranks"] == 2
    assert back.levels["inter"]["bcast"].beta == 8e-9 and list(back) == ["bcast"]

    lv = hi.levels_from_file(path, None, None, None, alpha=1.0)          # K read from the file
    assert lv.ranks_per_node == 2
    assert lv.intra_alpha == pytest.approx(2e-6) and lv.intra_beta == pytest.approx(1e-10)
    assert lv.inter_alpha == pytest.approx(6e-5)                         # the leaders' α, not the report's
    lv = hi.levels_from_file(path, 2, 5.0, 40.0, alpha=1.0)              # the options win
    assert lv.intra_alpha == pytest.approx(5e-6) and lv.intra_beta == pytest.approx(8 / 40e9)
    assert hi.levels_from_file(path, 1, None, None, alpha=1.0) is None   # K = 1: flat only

    plain = tmp_path / "flat.h5"                                         # one level only
    results.write_collectives(plain, {"world_size": 4}, flat)
    assert results.load_collectives(plain).levels == {}
    assert hi.levels_from_file(plain, None, None, None, alpha=1.0) is None
    with pytest.raises(be.BreakEvenError, match="intra-node latency is unknown"):
        hi.levels_from_file(plain, 4, None, None, alpha=1.0)
    with pytest.raises(be.BreakEvenError, match="intra-node bandwidth is unknown"):
        hi.levels_from_file(plain, 4, 1.0, None, alpha=1.0)
    with pytest.raises(be.BreakEvenError, match="--ranks-per-node 0"):
        hi.levels_from_file(plain, 0, None, None, alpha=1.0)
    with pytest.raises(be.BreakEvenError, match="--intra-gbps"):
        hi.levels_from_file(plain, 4, 1.0, -3.0, alpha=1.0)
