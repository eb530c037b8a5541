"""The memory-traffic floor's byte counts (:mod:`hpcgc.traffic`) against a hand count on a small
problem: a 3 × 6 CSR shard with 5 nonzeros in 4 distinct columns (int32 indices); its line counts
(64-byte lines where the access is scattered) on a 3 × 40 shard whose 5 columns fall in 4 lines, and
the expected lines of random positions by hand, by enumeration and against seeded random draws."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgc import compressors
from hpcgc import traffic as tr


def shard():
    #   row 0: columns 0, 2      row 1: column 2      row 2: columns 3, 5
    A = sp.csr_matrix((np.ones(5), np.array([0, 2, 2, 3, 5], dtype=np.int32), np.array([0, 2, 3, 5], dtype=np.int32)),
                      shape=(3, 6))
    return tr.shard_counts(A)


def total(items):
    return sum(b for _, b in items)


def test_shard_counts():
    assert shard() == {"sparse": True, "m": 3, "z": 5, "u": 4, "I": 4}


def test_gradient_by_hand():
    d = 6
    # margins: 5 nonzeros x (8 value + 4 index) + 4 row pointers x 4 = 76; x at 4 columns 32; labels and
    # weights 3 x 16 = 48; scatter 60; gradient at 4 columns read-modify-write 64; l2: x 48; output 48
    dcgd = 76 + 32 + 48 + 60 + 64 + 48 + 48
    assert total(tr.grad_items("dcgd", d, shard(), 0.1)) == dcgd == 376
    assert total(tr.grad_items("dcgd", d, shard(), 0.0)) == dcgd - 48
    assert total(tr.grad_items("diana", d, shard(), 0.1)) == dcgd + 48          # the shift h read
    # EF: no message vector of its own; e read and written in place (96)
    assert total(tr.grad_items("ef", d, shard(), 0.1)) == dcgd - 48 + 96


def test_compress_and_server_by_hand():
    d, n = 6, 2
    qsgd, topk, ident = compressors.make("qsgd:s=2"), compressors.make("topk:k=2"), compressors.make("identity")
    # qsgd: two passes over the message (96), payload 40; DIANA's own decode: payload 40 + h r/w 96
    assert total(tr.compress_items("diana", qsgd, "gather", d, 40, own_decode=True)) == 96 + 40 + 40 + 96
    assert total(tr.compress_items("dcgd", ident, "allreduce", d, 24, own_decode=False)) == 48 + 24
    # EF + top-k: one pass (48), payload 30, own decode 30 + 2 entries r/w 32
    assert total(tr.compress_items("ef", topk, "allgather", d, 30, own_decode=True)) == 48 + 30 + 30 + 32
    # gather, DIANA: payloads 40 + 44; aggregate: first written 48, second read-modify-write 96; the step:
    # x r/w 96, aggregate read 48, h r/w 96
    assert total(tr.server_items("diana", qsgd, "gather", d, n, [40, 44], 0, alpha=0.5, beta=0.0)) == \
        84 + 48 + 96 + 96 + 48 + 96
    # allreduce, DCGD: the float32 sum read (24), x r/w 96
    assert total(tr.server_items("dcgd", ident, "allreduce", d, n, [], 24, alpha=0.0, beta=0.0)) == 24 + 96
    # allgather, EF + top-k: payloads 30 + 30, x at 2 entries per message r/w: 2 x 2 x 16
    assert total(tr.server_items("ef", topk, "allgather", d, n, [30, 30], 0, alpha=0.0, beta=0.0)) == 60 + 64
    # reduce-scatter's stage 2 on a segment of 3: qsgd's two passes over the sum (48), its payload 20;
    # with a second-stage state (DIANA's D, alpha2 != 0) D read and written (48); DCGD (alpha2 = 0) none
    assert total(tr.second_stage_items(qsgd, 3, 20, alpha2=0.5)) == 48 + 20 + 48
    assert total(tr.second_stage_items(qsgd, 3, 20, alpha2=0.0)) == 48 + 20
    assert total(tr.second_stage_items(topk, 3, 14, alpha2=1.0)) == 24 + 14 + 48


def test_rows_divide_by_the_bandwidth():
    items = {"grad": [("a", 100)], "compress": [("b", 50)], "server": [("c", 0)], "other": []}
    med = {"grad": 2e-6, "compress": 1e-6, "server": 1e-6, "other": 3e-6}
    rows = tr.traffic_rows(items, med, 1e8)                      # 100 B at 1e8 B/s: 1 µs
    assert rows[0] == ("grad", 100.0, 1e-6, 2e-6) and tr.ratio(2e-6, 1e-6) == 2.0
    assert np.isnan(tr.ratio(1e-6, rows[2][2])) and np.isnan(rows[3][2])     # no bytes; 'other': no floor
    assert tr.copy_bandwidth(nbytes=1 << 20, batches=3) > 0


# -- the line floor: the same items counted in 64-byte lines (8 float64) where the access is scattered --------------

def line_shard(lines: bool = True):
    #   d = 40 (5 lines of 8 entries)   row 0: columns 0, 9   row 1: 9, 17   row 2: 23, 39
    #   distinct columns 0, 9, 17, 23, 39 (u = 5); their lines 0, 1, 2, 2, 4: 4 distinct lines
    A = sp.csr_matrix((np.ones(6), np.array([0, 9, 9, 17, 23, 39], dtype=np.int32),
                       np.array([0, 2, 4, 6], dtype=np.int32)), shape=(3, 40))
    return tr.shard_counts(A, lines=lines)


def line_total(items):
    return sum(tr.line_bytes(it) for it in items)


def test_expected_lines_by_hand_and_by_enumeration():
    # one entry: one line; two of 16 (2 lines): both in one line with probability 2·C(8, 2)/C(16, 2) = 56/120
    assert tr.expected_lines(1, 16) == 1.0
    assert tr.expected_lines(2, 16) == pytest.approx((1 * 56 + 2 * 64) / 120, rel=1e-14)
    assert tr.expected_lines(2, 40) == pytest.approx(5 * (1 - (32 * 31) / (40 * 39)), rel=1e-14)
    assert tr.expected_lines(0, 40) == 0.0 and tr.expected_lines(40, 40) == tr.expected_lines(99, 40) == 5.0
    assert tr.expected_lines(50, 43) == 6.0                                # a partial last line of 3 entries
    # every N-subset of 19 entries (2 full lines and one of 3), averaged: the formula exactly
    for n in (1, 2, 3, 5, 11, 17, 19):
        exact = np.mean([len({j // 8 for j in c}) for c in itertools.combinations(range(19), n)])
        assert tr.expected_lines(n, 19) == pytest.approx(exact, rel=1e-12), n


@pytest.mark.parametrize("n,length", [(3, 40), (10, 43), (64, 4096), (300, 4096)])
def test_expected_lines_against_seeded_random_draws(n, length):
    """N distinct positions drawn uniformly (seeded): the mean number of distinct lines within four
    standard errors of :func:`expected_lines` (64 of 4096: k = d/64, the documented regime)."""
    rng = np.random.default_rng(12345)
    draws = 2000
    pos = np.argpartition(rng.random((draws, length)), n - 1, axis=1)[:, :n]    # a uniform N-subset per row
    touched = np.zeros((draws, -(-length // 8)), dtype=bool)
    touched[np.arange(draws)[:, None], pos // 8] = True
    counts = touched.sum(axis=1)
    se = counts.std(ddof=1) / np.sqrt(draws)
    assert abs(counts.mean() - tr.expected_lines(n, length)) < 4 * se + 1e-12, (counts.mean(), se)
    if (n, length) == (64, 4096):
        assert tr.expected_lines(n, length) > 0.94 * n        # nearly every entry a line of its own


def test_column_lines_from_the_data():
    assert line_shard() == {"sparse": True, "m": 3, "z": 6, "u": 5, "I": 4, "lines": 4}
    assert tr.column_lines(None) is None and tr.column_lines(np.ones((2, 3))) is None


def test_gradient_lines_by_hand():
    d = 40
    # bytes: margins 6 x 12 + 4 x 4 = 88; x at 5 columns 40; labels and weights 48; scatter 72; gradient
    # at 5 columns read-modify-write 80; l2: x 320; output 320
    by_bytes = 88 + 40 + 48 + 72 + 80 + 320 + 320
    assert total(tr.grad_items("dcgd", d, line_shard(), 0.1)) == by_bytes == 968
    # lines: x at the columns' 4 lines read (4 x 64 = 256), the gradient's 4 lines read and written (512);
    # the streams as counted
    assert line_total(tr.grad_items("dcgd", d, line_shard(), 0.1)) == by_bytes - 40 - 80 + 256 + 512 == 1616
    assert line_total(tr.grad_items("ef", d, line_shard(), 0.0)) == 1616 - 320 - 320 + 640
    # without the data's lines: 5 random distinct columns of 40, 5·(1 − C(32, 5)/C(40, 5)) lines expected
    e = 5 * (1 - 201376 / 658008)
    assert line_total(tr.grad_items("dcgd", d, line_shard(lines=False), 0.1)) == pytest.approx(
        by_bytes - 120 + 3 * 64 * e, rel=1e-12)
    # a dense shard has no scattered access: lines = bytes
    dense = tr.shard_counts(np.ones((3, 40)))
    assert line_total(tr.grad_items("diana", d, dense, 0.1)) == total(tr.grad_items("diana", d, dense, 0.1))


def test_compress_and_server_lines_by_hand():
    d, n = 40, 2
    qsgd, topk, randk = compressors.make("qsgd:s=2"), compressors.make("topk:k=2"), compressors.make("randk:k=2")
    one, two = 5 * (1 - (32 * 31) / (40 * 39)), 5 * (1 - (32 * 31 * 30 * 29) / (40 * 39 * 38 * 37))
    # EF + top-k: message read 320, payload 30, own payload 30 (streams); the own decode at 2 of 40
    # entries of e read and written: 16 bytes → 128 per expected line
    assert total(tr.compress_items("ef", topk, "allgather", d, 30, own_decode=True)) == 320 + 30 + 30 + 32
    assert line_total(tr.compress_items("ef", topk, "allgather", d, 30, own_decode=True)) == pytest.approx(
        320 + 30 + 30 + 128 * one, rel=1e-12)
    # a dense own decode (qsgd, DIANA: h at every entry) is a stream
    dense = tr.compress_items("diana", qsgd, "gather", d, 40, own_decode=True)
    assert line_total(dense) == total(dense) == 320 * 2 + 40 + 40 + 640
    # EF + top-k server: payloads 60 read; x at n·k = 4 random distinct entries read and written
    assert line_total(tr.server_items("ef", topk, "allgather", d, n, [30, 30], 0, alpha=0.0, beta=0.0)) == \
        pytest.approx(60 + 128 * two, rel=1e-12)
    # DIANA + rand-k under gather: the aggregate (bytes 8k + 16k(n − 1) = 48) at 4 entries → 128 per line;
    # x, the aggregate read by the step and h: streams (16d + 8d + 16d)
    items = tr.server_items("diana", randk, "gather", d, n, [20, 20], 0, alpha=0.5, beta=0.0)
    assert total(items) == 40 + 48 + 640 + 320 + 640
    assert line_total(items) == pytest.approx(40 + 128 * two + 640 + 320 + 640, rel=1e-12)
    # more entries than the vector has (n·k = 60 of 40): every line (640), never below the bytes (720)
    wide = tr.server_items("dcgd", compressors.make("randk:k=30"), "gather", d, n, [0, 0], 0, alpha=0.0, beta=0.0)
    assert line_total(wide) == total(wide) == 8 * 30 + 16 * 30 + 640 + 320
    # reduce-scatter's and allreduce's items are streams
    rs = tr.second_stage_items(qsgd, 20, 20, alpha2=0.5)
    assert line_total(rs) == total(rs)


def test_lines_counted_from_the_messages_entries():
    """Where the messages' entries are known (``hpcgc.floor.next_positions``) their lines are counted:
    worker 0's entries 3, 9 (lines 0, 1), worker 1's 12, 33 (lines 1, 4): 2 own lines, 3 in all."""
    d, n, topk = 40, 2, compressors.make("topk:k=2")
    pos = [np.array([3, 9]), np.array([12, 33])]
    assert tr.lines_of(pos[:1]) == 2 and tr.lines_of(pos) == 3 and tr.lines_of([]) == 0
    own = tr.compress_items("ef", topk, "allgather", d, 30, own_decode=True, own_lines=tr.lines_of(pos[:1]))
    assert line_total(own) == 320 + 30 + 30 + 128 * 2 and total(own) == 320 + 30 + 30 + 32
    step = tr.server_items("ef", topk, "allgather", d, n, [30, 30], 0, alpha=0.0, beta=0.0, lines=tr.lines_of(pos))
    assert line_total(step) == 60 + 128 * 3 and total(step) == 60 + 64


def test_line_rows_divide_by_the_same_bandwidth():
    items = {"grad": [tr.Item("x at columns", 8, tr.Scatter(1, 40, writes=False, lines=1)), ("a", 100)],
             "compress": [("b", 50)], "server": [], "other": []}
    rows = tr.line_rows(items, 1e8)
    assert rows[0] == ("grad", 164.0, 1.64e-6) and rows[1] == ("compress", 50.0, 5e-7)
    assert rows[2] == ("server", 0.0, 0.0) and np.isnan(rows[3][2])
    assert all(np.isnan(b) for _, b, _ in tr.line_rows(None, 1e8))
