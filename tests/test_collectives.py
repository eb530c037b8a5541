"""Serial tests of the collectives benchmark: the alpha-beta fit, message sizes, the memory guard."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import collectives as co
from hpcgc.errors import ConfigError
from hpcgc.transport import COLLECTIVES

SIZES = 2.0 ** np.arange(2, 29)          # 4 B .. 256 MiB, the default sweep


@pytest.mark.parametrize("alpha,beta", [(3e-6, 2e-10), (50e-6, 1e-9), (1e-6, 0.0), (0.0, 5e-10)])
def test_fit_recovers_noiseless_alpha_beta_exactly(alpha, beta):
    t = alpha + beta * SIZES
    a, b, err, med = co.fit_alpha_beta(SIZES, t)
    assert a == pytest.approx(alpha, rel=1e-9, abs=1e-18)
    assert b == pytest.approx(beta, rel=1e-9, abs=1e-22)
    assert err < 1e-9 and med <= err


def test_fit_with_noise_within_stated_tolerance():
    """Multiplicative noise of ±5 % (uniform): α and β within 5 %, the reported error ≥ the true
    deviation of the model from every point and ≤ about twice the noise."""
    rng = np.random.default_rng(0)
    alpha, beta = 4e-6, 3e-10
    for _ in range(20):
        t = (alpha + beta * SIZES) * (1 + rng.uniform(-0.05, 0.05, SIZES.size))
        a, b, err, med = co.fit_alpha_beta(SIZES, t)
        assert a == pytest.approx(alpha, rel=0.05) and b == pytest.approx(beta, rel=0.05)
        rel = np.abs(a + b * SIZES - t) / t
        assert rel.max() == pytest.approx(err) and np.median(rel) == pytest.approx(med)
        assert err <= 0.11


def test_fit_nonnegative_and_degenerate():
    s = np.array([4.0, 8.0, 16.0, 32.0])
    a, b, _, _ = co.fit_alpha_beta(s, np.array([10.0, 9.0, 8.0, 7.0]))    # decreasing: β would be < 0
    assert b == 0.0 and a > 0
    a, b, _, _ = co.fit_alpha_beta(s, 1e-9 * s - 1e-9)                    # α would be < 0
    assert a == 0.0 and b > 0
    assert all(math.isnan(v) for v in co.fit_alpha_beta([8.0], [1.0]))
    assert all(math.isnan(v) for v in co.fit_alpha_beta([8.0, 16.0], [1.0, 0.0]))


@pytest.mark.parametrize("text,value", [("4", 4), ("1K", 1024), ("64M", 64 << 20), ("256m", 256 << 20),
                                        ("256MiB", 256 << 20), ("1G", 1 << 30), ("2KB", 2048), (" 8 ", 8)])
def test_parse_size(text, value):
    assert co.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-4", "1.5M", "4X", "K", "1 M B"])
def test_parse_size_rejects(text):
    with pytest.raises(ConfigError, match="not a size in bytes"):
        co.parse_size(text, "--max-size")


def test_sizes_and_defaults():
    args = co.parse_args([])
    assert args.sizes == [1 << k for k in range(2, 29)] and args.collectives == list(COLLECTIVES)
    assert co.parse_args(["--min-size", "3", "--max-size", "1K"]).sizes == [4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert co.sizes_for("bcast", [4, 8, 16]) == [8, 16]
    assert co.sizes_for("allreduce", [4, 8]) == [4, 8] and co.sizes_for("allreduce", [4, 8], fp64=True) == [8]


@pytest.mark.parametrize("argv,needle", [
    (["--min-size", "1M", "--max-size", "64K"], "empty message-size range"),
    (["--min-size", "5", "--max-size", "7"], "no power of two"),
    (["--max-size", "4G"], "< 2 GiB"),
    (["--max-size", "lots"], "not a size"),
    (["--collectives", "scatter"], "invalid choice"),          # (alltoall is a choice since reduce-scatter)
    (["--iterations", "0"], "--iterations"),
    (["--max-seconds", "-1"], "--max-seconds"),
    (["--bogus"], "unrecognized"),
    (["-c", "bcast", "--max-size", "4"], "empty message-size range for bcast"),
    (["-c", "allreduce", "--fp64", "--min-size", "1", "--max-size", "4"], "8-byte elements"),
])
def test_bad_options_are_config_errors(argv, needle):
    with pytest.raises(ConfigError, match=needle):
        co.parse_args(argv)


def test_memory_guard():
    kinds = list(COLLECTIVES)
    mib = 1 << 20
    # allgather dominates: every rank holds its payload plus all n received ones
    assert co.node_bytes(kinds, mib, 4, 4, True) == 4 * 5 * mib
    assert co.node_bytes(["gather"], mib, 4, 2, False) == 2 * mib
    assert co.node_bytes(["gather"], mib, 4, 2, True) == 5 * mib + mib
    avail = 40 * mib                           # half of it: 20 MiB = exactly 4 ranks x 5 x 1 MiB
    assert co.memory_error(kinds, mib, 4, 4, True, avail, "n1") is None
    msg = co.memory_error(kinds, 2 * mib, 4, 4, True, avail, "n1")
    assert "40 MiB" in msg and "n1" in msg and "allgather" in msg and "--max-size 1M" in msg
    assert co.largest_fitting(kinds, [1 << k for k in range(2, 29)], 4, 4, True, avail) == mib
    assert co.memory_error(kinds, 1 << 30, 4, 4, True, None, "n1") is None      # unknown memory: no guard


def test_output_format():
    assert co.table_row(1024, 1e-6, 2e-6, 3e-6, 100).split() == ["1024", "2.00", "1.00", "3.00", "100"]
    assert len(co.table_row(1 << 28, 1, 1, 1, 3)) == len(co.TABLE_HEAD)
    line = co.fit_line(2e-6, 1e-9, 0.123, 0.05, 10)
    assert line == "# alpha = 2.000 us, beta = 1.0000 ns/B (1.000 GB/s), fit error 12.3% (max; median 5.0%) over 10 sizes"
