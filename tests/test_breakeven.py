"""The break-even report: hand-computed break-even bandwidths for toy methods under each collective
model (gather, allreduce, allgather), the closed form against a fine sweep, and ``hpcgc breakeven``
on results files and a collectives file produced here by the real benchmark under mpiexec, with
every bad input (exit 2, one message)."""
from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgc import results
from hpcgc.analysis import baselines
from hpcgc.analysis import breakeven as be
from hpcgc.analysis import costmodels as cm
from tests.conftest import ROOT, mpi_env, run_mpi, show

ALPHA = 1e-5                   # 10 µs
N = 4                          # the toy runs' rank count (a power of two)


def gbps(bytes_per_s):         # bytes/s → Gb/s
    return bytes_per_s * 8 / 1e9


def toy(collective, iterations, workers, server, up, down=0.0, down_bcasts=1, baseline=False, label=None):
    return be.MethodModel(label or collective, ("toy",), N, collective, iterations, "1/1", workers, server,
                          up, down, 1, down_bcasts, baseline)


# d = 10⁶; the baseline hands 4 000 000 bytes (float32) per rank to one MPI_Allreduce per iteration
BASE = toy("allreduce", 100, 9e-3, 1e-3, 4e6, baseline=True, label="baseline")
# DIANA-like, every rank receives every payload: 4-byte length + 100 000 bytes per worker
ALLGATHER = toy("allgather", 150, 11e-3, 2e-3, 100_004)
# parameter server with a compressed downlink: an 8-byte header and a 100 000-byte payload broadcast
GATHER = toy("gather", 150, 11e-3, 3e-3, 100_004, down=100_008, down_bcasts=2)
# parameter server with the dense float64 downlink (8 (d + 1) bytes)
GATHER_DENSE = toy("gather", 150, 11e-3, 3e-3, 100_004, down=8_000_008)
# shared-seed rand-k through the Allreduce: 40 000 bytes per rank
RANDK = toy("allreduce", 200, 9.5e-3, 1e-3, 40_000)
RANDK_FAST = toy("allreduce", 50, 9.5e-3, 1e-3, 40_000)


def test_baseline_by_hand():
    # MPI_Allreduce of 4e6 B > 2 KiB on 4 processes: Rabenseifner, 2 lg 4 = 4 latencies,
    # 2 (4 − 1)/4 · 4e6 = 6e6 bytes through each link
    p_b, q_b = BASE.affine(N, ALPHA)
    assert p_b == pytest.approx(100 * (10e-3 + 4 * ALPHA), rel=1e-12)        # 1.004 s
    assert q_b == pytest.approx(100 * 6e6, rel=1e-12)                        # 6e8 B
    # at 1 Gb/s (β = 8 ns/B): 1.004 + 6e8 · 8e-9 = 5.804 s
    assert BASE.time(N, ALPHA, be.gbps_to_beta(1.0)) == pytest.approx(1.004 + 4.8, rel=1e-12)


def test_allgather_toy_by_hand():
    # MPI_Allgather of the 4-byte lengths: 16 B in all (< 512 KiB, p a power of two) → recursive
    # doubling: lg 4 = 2 latencies, 3/4 · 16 = 12 B; MPI_Allgatherv of 100 000 B each: 400 000 B in all
    # (< 512 KiB) → recursive doubling: 2 latencies, 3/4 · 400 000 = 300 000 B
    a, b = 2 + 2, 12 + 300_000
    p_m = 150 * (11e-3 + 2e-3 + a * ALPHA)          # 150 · 0.01304 = 1.956 s
    q_m = 150 * b                                    # 45 001 800 B
    assert ALLGATHER.affine(N, ALPHA) == pytest.approx((p_m, q_m), rel=1e-12)
    # it wins where 1.956 + 45 001 800 β < 1.004 + 6e8 β, i.e. β > 0.952 / 554 998 200 s/B
    beta_star = (1.956 - 1.004) / (6e8 - 45_001_800)
    r = be.method_break_even(ALLGATHER, BASE, N, ALPHA)
    assert r.kind == "below"
    assert r.gbps == pytest.approx(gbps(1 / beta_star), rel=1e-9)
    assert r.gbps == pytest.approx(4.66386, rel=1e-5)


def test_gather_toy_by_hand():
    # MPI_Gather of the lengths (binomial): ⌈lg 4⌉ = 2 latencies, 3 · 4 = 12 B into the root;
    # MPI_Gatherv (linear): 3 messages of 100 000 B; Bcast of the 8-byte header and of the 100 000-byte
    # payload: 4 processes < 8 → binomial, 2 rounds each: 2 (α + 8β) + 2 (α + 100 000β)
    a = 2 + 3 + 2 + 2
    b = 12 + 300_000 + 16 + 200_000
    p_m = 150 * (11e-3 + 3e-3 + a * ALPHA)           # 150 · 0.01409 = 2.1135 s
    assert GATHER.affine(N, ALPHA) == pytest.approx((p_m, 150 * b), rel=1e-12)
    beta_star = (2.1135 - 1.004) / (6e8 - 150 * 500_028)
    r = be.method_break_even(GATHER, BASE, N, ALPHA)
    assert r.kind == "below" and r.gbps == pytest.approx(gbps(1 / beta_star), rel=1e-9)
    assert r.gbps == pytest.approx(3.78546, rel=1e-5)
    # the dense downlink: a binomial Bcast of 8 000 008 B, 2 rounds = 16 000 016 B per iteration alone,
    # more bytes than the Allreduce's 6e6, and more compute: it never wins
    q_dense = 150 * (12 + 300_000 + 2 * 8_000_008)
    assert GATHER_DENSE.affine(N, ALPHA)[1] == pytest.approx(q_dense, rel=1e-12) and q_dense > 6e8
    assert be.method_break_even(GATHER_DENSE, BASE, N, ALPHA).kind == "never"


def test_allreduce_toy_by_hand():
    # rand-k through MPI_Allreduce, 40 000 B > 2 KiB → Rabenseifner: 4 latencies, 6e4 bytes
    p_m = 200 * (10.5e-3 + 4 * ALPHA)                # 2.108 s
    q_m = 200 * 6e4                                  # 1.2e7 B
    assert RANDK.affine(N, ALPHA) == pytest.approx((p_m, q_m), rel=1e-12)
    r = be.method_break_even(RANDK, BASE, N, ALPHA)
    assert r.gbps == pytest.approx(gbps((6e8 - 1.2e7) / (2.108 - 1.004)), rel=1e-9)     # 4.26087 Gb/s
    # at n = 128: Rabenseifner, 2 lg 128 = 14 latencies, 2 · 127/128 · m bytes; compute unchanged
    p_b = 100 * (10e-3 + 14 * ALPHA)                 # 1.014 s
    q_b = 100 * 2 * 127 / 128 * 4e6                  # 793 750 000 B
    p_m = 200 * (10.5e-3 + 14 * ALPHA)               # 2.128 s
    q_m = 200 * 2 * 127 / 128 * 4e4                  # 15 875 000 B
    r128 = be.method_break_even(RANDK, BASE, 128, ALPHA)
    assert r128.kind == "below" and r128.gbps == pytest.approx(gbps((q_b - q_m) / (p_m - p_b)), rel=1e-9)
    assert r128.gbps == pytest.approx(5.58615, rel=1e-5)
    # fewer iterations than the baseline and fewer bytes: faster at every bandwidth
    assert 50 * (10.5e-3 + 4 * ALPHA) < 1.004
    assert be.method_break_even(RANDK_FAST, BASE, N, ALPHA).kind == "always"


def test_allgather_at_128_by_hand_never():
    # n = 128: the lengths (512 B in all) by recursive doubling, 7 latencies and 127/128 · 512 = 508 B;
    # the payloads (12.8 MB in all ≥ 512 KiB) by the ring: 127 latencies, 127/128 · 1.28e7 = 1.27e7 B;
    # the server decodes 128 messages instead of 4: 2 ms · 128/4 = 64 ms
    p_m = 150 * (11e-3 + 64e-3 + (7 + 127) * ALPHA)
    q_m = 150 * (508 + 1.27e7)
    assert ALLGATHER.affine(128, ALPHA) == pytest.approx((p_m, q_m), rel=1e-12)
    q_b = 100 * 2 * 127 / 128 * 4e6
    assert q_m > q_b                                  # more bytes than the Allreduce: never
    assert be.method_break_even(ALLGATHER, BASE, 128, ALPHA).kind == "never"


def test_closed_form_matches_a_fine_sweep():
    g = np.geomspace(0.1, 400, 20001)
    beta = be.gbps_to_beta(g)
    for m in (ALLGATHER, GATHER, RANDK):
        r = be.method_break_even(m, BASE, N, ALPHA)
        wins = m.time(N, ALPHA, beta) < BASE.time(N, ALPHA, beta)
        assert wins[g < r.gbps * 0.999].all() and not wins[g > r.gbps * 1.001].any()


def test_break_even_cases():
    assert be.break_even(2.0, 1.0, 1.0, 3.0) == be.BreakEven("below", float(be.beta_to_gbps(1.0 / 2.0)))
    assert be.break_even(0.5, 1.0, 1.0, 3.0).kind == "always"
    assert be.break_even(2.0, 3.0, 1.0, 1.0).kind == "never"
    r = be.break_even(0.5, 3.0, 1.0, 1.0)             # faster compute, more bytes: wins on fast links
    assert r.kind == "above" and r.gbps == pytest.approx(float(be.beta_to_gbps(0.5 / 2.0)))
    assert be.break_even(float("nan"), 1.0, 1.0, 1.0).kind == "unreached"
    assert be.BreakEven("below", 1000.0).text(0.1, 400) == "below 1e+03 Gb/s (outside the sweep)"


# -- the baseline a user would run: fastest of fp32 / fp16 / bf16, a modelled 16-bit one otherwise -------

TARGET = be.Target("suboptimality", 1e-3)


def allreduce_toy(precision, iterations=100, label=None):
    m = toy("allreduce", iterations, 9e-3, 1e-3, 4e6 * baselines.BITS[precision] / 32, baseline=True,
            label=label or f"allreduce {precision}")
    m.precision = precision
    return m


def test_precision_of_specs():
    assert baselines.precision_of("identity", "allreduce") == "fp32"
    assert baselines.precision_of("identity:fp64=true", "allreduce") == "fp64"
    assert baselines.precision_of("identity:fp64", "allreduce") == "fp64"             # a bare flag
    assert baselines.precision_of("identity:fp16=true", "allreduce") == "fp16"
    assert baselines.precision_of("identity:fp16=false", "allreduce") == "fp32"
    assert baselines.precision_of("identity:fp16", "allreduce") == "fp16"
    assert baselines.precision_of("identity:bf16", "allreduce") == "bf16"
    assert baselines.precision_of("identity:int8", "allreduce") is None       # lossy: not a baseline
    assert baselines.precision_of("identity", "gather") is None
    assert baselines.precision_of("qsgd:s=4", "allreduce") is None


def test_no_16bit_run_models_one_from_fp32_and_says_so():
    fp32 = allreduce_toy("fp32")
    c = baselines.choose([fp32, RANDK], TARGET, be.gbps_to_beta(1.0), ALPHA, time_of=lambda m: 1.0)
    base = c.base
    assert base.modelled and base.precision == "fp16" and c.wide is fp32 and base.runs == []
    assert "modelled" in base.label and "modelled" in c.tag(base) and "second line" in c.tag(fp32)
    assert "0.5× its bytes" in c.how and "no fp16/bf16" in c.how
    # the same iterations and non-transfer time, half the bytes: Rabenseifner on 2e6 B at n = 4
    assert base.iterations == 100 and base.up_bytes == 2e6
    assert base.affine(N, ALPHA) == pytest.approx((100 * (10e-3 + 4 * ALPHA), 100 * 1.5 * 2e6), rel=1e-12)
    # rand-k against the modelled fp16 baseline, by hand: 2.108 + 1.2e7 β < 1.004 + 3e8 β
    r = be.method_break_even(RANDK, base, N, ALPHA)
    assert r.kind == "below" and r.gbps == pytest.approx(gbps((3e8 - 1.2e7) / (2.108 - 1.004)), rel=1e-9)
    assert be.method_break_even(RANDK, fp32, N, ALPHA).gbps > r.gbps        # the fp32 line flatters it


def test_fastest_measured_baseline_wins_and_is_named():
    fp32, fp16, bf16 = allreduce_toy("fp32"), allreduce_toy("fp16"), allreduce_toy("bf16")
    times = {id(fp32): 5.0, id(fp16): 3.0, id(bf16): 2.9}
    for m in (fp32, fp16, bf16):
        m.runs = ["measured"]            # time_of stands for the measured time to target
    pick = lambda ms: baselines.choose(ms, TARGET, 8e-9, ALPHA, time_of=lambda m: times[id(m)])
    c = pick([fp32, fp16, bf16, RANDK])
    assert c.base is bf16 and c.wide is fp32 and c.tag(bf16) == " [baseline: bf16]"
    assert "fastest" in c.how and "fp32 5 s" in c.how
    # on shared memory the cast may cost more than the bytes it saves: then fp32 is the baseline
    times[id(fp32)] = 2.0
    assert pick([fp32, fp16, bf16]).base is fp32
    # a 16-bit run that misses the target is not a candidate, and is not replaced by a modelled one
    slow = allreduce_toy("fp16", iterations=float("nan"))
    slow.runs = ["measured"]
    times[id(fp32)] = 5.0
    c = pick([fp32, slow])
    assert c.base is fp32 and not c.base.modelled
    # ties go to 16 bits
    times[id(fp32)] = times[id(fp16)]
    assert pick([fp32, fp16]).base is fp16


def test_reduce_scatter_model_by_hand():
    # DIANA + qsgd under reduce-scatter: 262 144 B per stage (both stages' whole vectors), 150 iterations
    rs = toy("reduce-scatter", 150, 11e-3, 2e-3, 262_144, down=262_144)
    # n = 4: 10 latencies, 393 240 B through the links (tests/test_costmodels.py by hand); compute constant
    assert rs.affine(N, ALPHA) == pytest.approx((150 * (13e-3 + 10 * ALPHA), 150 * 393_240), rel=1e-12)
    assert [op for op, _, _ in rs.messages()] == ["reduce_scatter", "segment_allgather"]
    for n in (4, 128, 1024):
        a, b, _ = cm.compressed_allreduce_coefficients(262_144, 262_144, n)
        p, q = rs.affine(n, ALPHA)
        assert (p, q) == pytest.approx((150 * (13e-3 + float(a) * ALPHA), 150 * float(b)), rel=1e-12)
    # against the fp16 Allreduce (2e6 B, 100 iterations) at n = 1024: Rabenseifner 20 latencies,
    # 2·1023/1024·2e6 B; the method 1053 latencies and 548 348 B
    fp16 = allreduce_toy("fp16")
    pb, qb = 100 * (10e-3 + 20 * ALPHA), 100 * 2 * 1023 / 1024 * 2e6
    pm, qm = 150 * (13e-3 + 1053 * ALPHA), 150 * 548_348
    r = be.method_break_even(rs, fp16, 1024, ALPHA)
    assert r.kind == "below" and r.gbps == pytest.approx(gbps((qb - qm) / (pm - pb)), rel=1e-9)
    # the Allgather form of the same message never pays at n = 1024: its bytes grow ∝ n
    ag = toy("allgather", 150, 11e-3, 2e-3, 262_148)
    assert be.method_break_even(ag, fp16, 1024, ALPHA).kind == "never"


def test_panel_rows_have_the_n128_and_n1024_columns_and_both_baselines():
    fp32 = allreduce_toy("fp32", label="uncompressed allreduce")
    rs = toy("reduce-scatter", 150, 11e-3, 2e-3, 262_144, down=262_144, label="diana qsgd")
    choice = baselines.choose([fp32, rs], TARGET, 8e-9, ALPHA, time_of=lambda m: 1.0)
    rep = be.Report(TARGET, be.Latency(ALPHA, "test"), np.geomspace(0.1, 400, 5), [], 0.0, {})
    be.panel_rows(rep, "toy", choice, [choice.base, fp32, rs], [4, 128, 1024])
    base_row, wide_row, rs_row = rep.rows
    assert base_row["method"].endswith("[baseline: fp16, modelled]") and base_row["reached"] == "modelled"
    assert base_row["break_even_n1024"] == "baseline" and wide_row["method"].endswith("[fp32 baseline: second line]")
    assert rs_row["baseline"] == "fp16 (modelled)"
    for col, n in (("run_n", N), ("n128", 128), ("n1024", 1024)):
        want = be.method_break_even(rs, choice.base, n, ALPHA)
        assert rs_row[f"break_even_{col}"] == want.text(0.1, 400)
        assert rs_row[f"break_even_gbps_{col}"] == pytest.approx(want.gbps, rel=1e-12)
        want32 = be.method_break_even(rs, fp32, n, ALPHA)
        assert rs_row[f"break_even_{col}_fp32"] == want32.text(0.1, 400)
    assert set(be.COLUMNS) >= set(rs_row) and {"break_even_n1024", "break_even_run_n_fp32"} <= set(be.MD_COLUMNS)
    assert {(r["method"], r["n"]) for r in rep.n_rows} >= {("diana qsgd", 1024), ("diana qsgd", 128)}


# -- the command on real results ---------------------------------------------------------------------
EXPERIMENT = """
name = "breakeven-test"
[data]
dataset = "breast-cancer"
[problem]
kind = "logreg"
l2 = 0.1
[run]
iterations = 300
eval_every = 5
tolerance = 1e-3

[[variant]]
label = "uncompressed allreduce"
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"

[[variant]]
label = "diana qsgd gather"
run.algorithm = "diana"
run.compressor = "qsgd:s=2"
run.collective = "gather"
"""




@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """The baseline and DIANA + QSGD (gather) on 2 ranks, in two files (so one of them lacks the
    baseline), and collectives files at 2 and 4 ranks at small sizes."""
    d = tmp_path_factory.mktemp("breakeven")
    cfg = d / "exp.toml"
    cfg.write_text(EXPERIMENT)
    out = {}
    for name, grid in (("base", "0"), ("diana", "1")):
        out[name] = d / f"{name}.h5"
        p = run_mpi(2, ["-m", "hpcgc.bench", "--config", str(cfg), "--grid-index", grid, "-o", str(out[name]), "-q"],
                    timeout=400)
        assert p.returncode == 0, show(p)
    for ranks in (2, 4):
        out[f"coll{ranks}"] = d / f"coll{ranks}.h5"
        p = run_mpi(ranks, ["-m", "hpcgc.bench", "collectives", "--max-size", "4K", "--max-seconds", "0.02",
                            "-o", str(out[f"coll{ranks}"])], timeout=400)
        assert p.returncode == 0, show(p)
    return d, out


def hpcgc(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "hpcgc", "breakeven", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env=mpi_env(), timeout=timeout)


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_command_writes_figures_and_table(produced, tmp_path):
    d, f = produced
    p = hpcgc(f["base"], f["diana"], "--collectives", f["coll2"], "-o", tmp_path)
    assert p.returncode == 0, show(p)
    assert "break_even_run_n" in p.stdout and "warning" not in p.stderr
    rows = _csv(tmp_path / "breakeven.csv")
    # no fp16/bf16 run in the files: the 16-bit baseline is modelled from the float32 one, and says so
    assert [r["method"] for r in rows] == [
        "allreduce identity:fp16 (modelled from uncompressed allreduce) [baseline: fp16, modelled]",
        "uncompressed allreduce [fp32 baseline: second line]", "diana qsgd gather"]
    b16, base, diana = rows
    assert b16["break_even_run_n"] == "baseline" and b16["reached"] == "modelled" and int(b16["ranks"]) == 2
    assert base["break_even_run_n_fp32"] == "baseline" and int(base["ranks"]) == 2
    assert {r["baseline"] for r in rows} == {"fp16 (modelled)"} and "modelled" in p.stdout
    assert float(b16["up_bytes_per_worker_iter"]) == 60.0 and b16["iterations_to_target"] == base["iterations_to_target"]
    assert diana["collective"] == "gather"
    # d = 30: the baseline's vector is 30 float32 per rank; DIANA's message 4 + 24 bytes
    assert float(base["up_bytes_per_worker_iter"]) == 120.0
    # the table's break-even is what the model of the measured runs gives, recomputed from the files
    lat = be.latency_from_collectives(f["coll2"])
    coll = results.load_collectives(f["coll2"])
    assert lat.ranks == 2
    # each fitted latency over its operation's latency count at n = 2 (the fit may give α = 0: not used)
    counts = {"gather": 1 + 1, "allgather": 1 + 1, "bcast": 1, "allreduce": 1}
    alphas = [tb.alpha / counts[op] for op, tb in coll.items() if tb.alpha > 0]
    assert lat.alpha == pytest.approx(float(np.median(alphas)), rel=1e-12)
    # recomputed by hand from the files: n = 2, so every tree has ⌈lg 2⌉ = 1 round
    a_run, d_run = results.load(f["base"])[0], results.load(f["diana"])[0]

    def first(run):                 # iterations at the first recorded row with f − f* ≤ 1e-3
        return run.series["iteration"][int(np.flatnonzero(run.series["suboptimality"] <= 1e-3)[0])]

    def busy(pi):                   # rank 0's non-transfer time: means over the iterations after the first
        return sum(float(pi[ph][1:, 0].mean()) for ph in ("grad", "compress", "server", "wait_up", "wait_down", "other"))

    pa, pd = a_run.per_iteration, d_run.per_iteration
    k_b, k_m = first(a_run), first(d_run)
    up_b = a_run.series["bits_up_wire"][-1, 0] / 8 / a_run.series["iteration"][-1]      # 120 B: 30 float32
    up_m = d_run.series["bits_up_wire"][-1, 1] / 8 / d_run.series["iteration"][-1]      # length word + payload
    # baseline: MPI_Allreduce of 120 B (≤ 2 KiB: recursive doubling, lg 2 = 1 step): α + 120 β
    p_b = k_b * (busy(pa) + lat.alpha)
    q_b = k_b * up_b
    # DIANA + QSGD, gather: Gather of the 4-byte lengths (α + 4β), Gatherv of rank 1's payload
    # (α + (up − 4)β), binomial Bcast of d + 1 = 31 float64 (α + 248β); the server at rank 0
    p_m = k_m * (busy(pd) + 3 * lat.alpha)
    q_m = k_m * (4 + (up_m - 4) + 248)
    assert d_run.attrs["d"] == 30 and up_b == 120
    expect = be.break_even(p_m, q_m, p_b, q_b)              # against the float32 Allreduce: the second line
    assert diana["break_even_run_n_fp32"] == expect.text(0.1, 400)
    if expect.kind in ("below", "above"):
        assert float(diana["break_even_gbps_run_n_fp32"]) == pytest.approx(expect.gbps, rel=1e-5)
    # against the modelled fp16 Allreduce: the same iterations and time, 60 B instead of 120 (α + 60β)
    expect16 = be.break_even(p_m, q_m, p_b, k_b * up_b / 2)
    assert diana["break_even_run_n"] == expect16.text(0.1, 400)
    if expect16.kind in ("below", "above"):
        assert float(diana["break_even_gbps_run_n"]) == pytest.approx(expect16.gbps, rel=1e-5)
    assert diana["break_even_n1024"] and diana["break_even_n1024_fp32"]
    t1 = p_m + q_m * 8e-9                                   # 1 Gb/s: β = 8 ns/B
    assert float(diana["time_s_at_1Gbps"]) == pytest.approx(t1, rel=1e-6)    # float32 phase times
    # iterations to target: the first recorded row with f − f* ≤ 1e-3
    run = results.load(f["diana"])[0]
    t = int(np.flatnonzero(run.series["suboptimality"] <= 1e-3)[0])
    assert float(diana["iterations_to_target"]) == run.series["iteration"][t]
    nrows = _csv(tmp_path / "breakeven-n.csv")
    assert sorted({int(r["n"]) for r in nrows}) == [2 ** i for i in range(1, 11)]
    figs = sorted(tmp_path.glob("breakeven*.png"))
    assert len(figs) == 2 and all(fig.stat().st_size > 10_000 for fig in figs)
    assert (tmp_path / "breakeven.md").read_text().startswith("**Break-even")


def test_collectives_at_another_rank_count_warns(produced, tmp_path):
    _, f = produced
    p = hpcgc(f["base"], f["diana"], "--collectives", f["coll4"], "--n-max", "64", "-o", tmp_path)
    assert p.returncode == 0, show(p)
    assert "measured at n = 4" in p.stderr and "runs of" in p.stderr and "at n = 2" in p.stderr


@pytest.mark.parametrize("args,message", [
    (["--latency-us", "0"], "α must be finite and > 0"),
    (["--latency-us", "-3"], "α must be finite and > 0"),
    (["--latency-us", "nan"], "α must be finite and > 0"),
    (["--bandwidth", "0", "400"], "must be finite and > 0"),
    (["--bandwidth", "1", "inf"], "must be finite and > 0"),
    (["--bandwidth", "10", "1"], "no valid point"),
    (["--points", "0"], "no valid point"),
    (["--n-max", "1"], "n_max >= 2"),
    (["--eps", "-1"], "finite number > 0"),
])
def test_bad_numbers(produced, tmp_path, args, message):
    _, f = produced
    p = hpcgc(f["base"], f["diana"], "--collectives", f["coll2"], "-o", tmp_path, *args)
    assert p.returncode == 2, show(p)
    assert message in p.stderr and p.stderr.count("error:") == 1 and "Traceback" not in p.stderr


def test_no_baseline(produced, tmp_path):
    _, f = produced
    p = hpcgc(f["diana"], "--collectives", f["coll2"], "-o", tmp_path)
    assert p.returncode == 2, show(p)
    assert "no uncompressed Allreduce baseline" in p.stderr and 'run.collective = "allreduce"' in p.stderr


def test_no_common_target(produced, tmp_path):
    _, f = produced
    other = tmp_path / "other-tolerance.h5"
    shutil.copy(f["diana"], other)
    with h5py.File(other, "r+") as h:                # the same runs, asked for another tolerance
        for g in h["runs"].values():
            g.attrs["config"] = g.attrs["config"].replace("tolerance = 0.001", "tolerance = 1e-06")
    p = hpcgc(f["base"], other, "--collectives", f["coll2"], "-o", tmp_path / "out")
    assert p.returncode == 2, show(p)
    assert "no common target" in p.stderr and "--eps" in p.stderr
    p = hpcgc(f["base"], other, "--collectives", f["coll2"], "--eps", "1e-3", "-o", tmp_path / "out")
    assert p.returncode == 0, show(p)


def test_collectives_file_without_latency(produced, tmp_path):
    _, f = produced
    zero = tmp_path / "zero.h5"
    res = results.load_collectives(f["coll2"])
    tabs = []
    for tb in res.values():
        tb.alpha = 0.0
        tabs.append(tb)
    results.write_collectives(zero, res.attrs, tabs)
    p = hpcgc(f["base"], f["diana"], "--collectives", zero, "-o", tmp_path / "out")
    assert p.returncode == 2, show(p)
    assert "no collective has a latency α > 0" in p.stderr
    # α given: the same file still prices the check's messages (its measured sizes and β)
    p = hpcgc(f["base"], f["diana"], "--collectives", zero, "--latency-us", "50", "-o", tmp_path / "given")
    assert p.returncode == 0, show(p)
    rows = _csv(tmp_path / "given" / "check.csv")
    assert len(rows) == 2 and all(float(r["predicted_s"]) > 0 for r in rows)
    p = hpcgc(f["base"], f["diana"], "-o", tmp_path / "out")
    assert p.returncode == 2 and "--collectives" in p.stderr


def test_help_explains():
    p = hpcgc("--help")
    assert p.returncode == 0
    for word in ("break-even", "Thakur", "--collectives", "--n-max", "assumed"):
        assert word in p.stdout
    assert math.isfinite(be.gbps_to_beta(1.0)) and be.gbps_to_beta(1.0) == pytest.approx(8e-9)


def _run(stop_measure="f - f*", tolerance=1e-3, per_iteration=True):
    grad = np.array([[1e-3, 2e-3], [3e-3, 1e-3], [1e-3, 1e-3]])        # (iterations, ranks) seconds
    comp = np.full((3, 2), 1e-4)
    serv = np.array([[5e-4, 0.0], [7e-4, 0.0], [6e-4, 0.0]])
    wait = np.array([[9e-3, 0.0], [2e-4, 0.0], [4e-4, 0.0]])
    other = np.array([[1e-5, 0.0], [3e-5, 0.0], [5e-5, 0.0]])
    it = grad + comp + serv + wait + other + 1e-4
    series = {"iteration": np.array([0, 3]), "suboptimality": np.array([1.0, 1e-4]),
              "grad_norm_sq": np.array([4.0, 1e-3])}
    phases = {"grad": grad, "compress": comp, "server": serv, "wait_up": wait, "other": other, "iter": it}
    time = {ph: np.vstack([np.zeros(2), v.sum(axis=0)]) for ph, v in phases.items()}
    pi = phases if per_iteration else {}
    run = results.Run("r", {"stop_measure": stop_measure}, {}, series, time, {}, pi)
    from hpcgc.analysis import tables
    return tables.RunInfo(run, "f.h5", True, False, 2, {"run.tolerance": tolerance})


def test_phases_targets_and_common_target():
    ri = _run()
    # rank 0's means over the iterations after the first; the first iteration's wall-clock apart
    ph = be.rank0_means(ri.run)
    assert ph["grad"] == pytest.approx(2e-3) and ph["wait_down"] == 0.0     # a phase the file lacks
    assert ph["first"] == pytest.approx(1e-3 + 1e-4 + 5e-4 + 9e-3 + 1e-5 + 1e-4)
    m = be.measure_run(ri, be.Target("suboptimality", 1e-3))
    assert m["workers"] == pytest.approx(2.1e-3) and m["server"] == pytest.approx(6.5e-4)
    assert m["idle"] == pytest.approx(3e-4) and m["other"] == pytest.approx(4e-5) and m["iterations"] == 3
    # without per_iteration/: rank 0's totals over 3 iterations, one row, no first iteration
    ph = be.rank0_means(_run(per_iteration=False).run)
    assert ph["grad"] == pytest.approx(5e-3 / 3) and ph["wait_up"] == pytest.approx(9.6e-3 / 3)
    assert math.isnan(ph["first"])
    # the gradient measure of problems without f*: ‖∇f‖² / ‖∇f(x⁰)‖²
    g = _run(stop_measure="grad_norm_sq / grad_norm_sq[0]")
    assert be.target_series(g.run, "grad_ratio") == pytest.approx([1.0, 2.5e-4])
    assert be.common_target([ri, _run()], None, None) == be.Target("suboptimality", 1e-3)
    with pytest.raises(be.BreakEvenError, match="no common target"):
        be.common_target([ri, g], None, None)                        # f − f* and the gradient measure
    with pytest.raises(be.BreakEvenError, match="no common target"):
        be.common_target([ri, _run(tolerance=1e-6)], None, None)
    with pytest.raises(be.BreakEvenError, match="no target"):
        be.common_target([_run(tolerance=0.0)], None, None)
    assert be.common_target([ri, _run(tolerance=1e-6)], 1e-2, None) == be.Target("suboptimality", 1e-2)


def test_accuracy_target_from_the_recorded_series():
    """--accuracy-within: the first row whose test accuracy is within the points of the uncompressed
    float32 Allreduce run's final accuracy (no stop rule needed), for every method of the panel."""
    from hpcgc.analysis import tables

    def info(comp, acc, collective="allreduce"):
        ri = _run()
        ri.run.series["iteration"] = np.arange(len(acc)) * 5
        ri.run.series["accuracy"] = np.asarray(acc, dtype=float)
        ri.flat = {"run.compressor": comp, "run.collective": collective, "run.tolerance": 0.0}
        ri.run.attrs.update(compressor=comp, collective=collective)
        return ri

    base = info("identity", [0.1, 0.90, 0.950, 0.960])
    psgd = info("powersgd:rank=4", [0.1, 0.80, 0.954, 0.958])
    coll = tables.Collection([base, psgd], ["f.h5"])
    t = be.accuracy_target(coll, 0.5)
    assert t.metric == be.ACCURACY_GAP and t.eps == pytest.approx(0.005)
    assert list(t.reference.values()) == [pytest.approx(0.96)] and "within 0.5 points" in t.describe()
    # 0.96 − 0.005 = 0.955: the baseline reaches it at row 3 (iteration 15), PowerSGD too (0.958), not at 0.954
    assert be.measure_run(base, t)["iterations"] == 15 and be.measure_run(psgd, t)["iterations"] == 15
    t2 = be.accuracy_target(coll, 1.1)                                        # 0.949: row 2 for both
    assert be.measure_run(base, t2)["iterations"] == 10 and be.measure_run(psgd, t2)["iterations"] == 10
    with pytest.raises(be.BreakEvenError, match="finite number of points"):
        be.accuracy_target(coll, 0.0)
    noacc = info("identity", [])
    with pytest.raises(be.BreakEvenError, match="test_fraction"):
        be.accuracy_target(tables.Collection([noacc], ["f.h5"]), 0.5)


def test_report_default_baseline_is_the_fastest_allreduce():
    """``hpcgc report``: per panel the fastest uncompressed-equivalent Allreduce to ε among fp16, bf16 and
    float32 (ties to 16 bits); compressed methods and unreached runs are not candidates."""
    from types import SimpleNamespace as NS

    def meth(comp, collective="allreduce", panel="p"):
        ri = NS(attrs={"compressor": comp, "collective": collective}, flat={})
        return NS(panel=panel, runs=[ri], label=comp)

    fp32, fp16, bf16, qsgd = meth("identity"), meth("identity:fp16"), meth("identity:bf16"), meth("qsgd:s=4", "gather")
    other = meth("identity", panel="q")
    t = {id(fp32): 3.0, id(fp16): 2.0, id(bf16): float("nan"), id(qsgd): 0.5, id(other): 1.0}
    got = baselines.report_baseline([fp32, fp16, bf16, qsgd, other], t)
    assert got == {"p": (fp16, "fp16"), "q": (other, "fp32")}
    t[id(fp32)] = 2.0                                         # a tie: 16 bits
    assert baselines.report_baseline([fp32, fp16], t)["p"] == (fp16, "fp16")
    t[id(fp32)] = 1.0
    assert baselines.report_baseline([fp32, fp16], t)["p"] == (fp32, "fp32")


def test_reduce_scatter_stage_bytes_from_the_ledger():
    """The two stages' whole compressed vectors from the per-collective ledger (the Alltoallv counts
    what went to the other ranks), else from the bytes handed to MPI."""
    from types import SimpleNamespace as NS

    from hpcgc.analysis.reducescatter import rs_stage_bytes
    k, n, c = 10, 4, 262_144
    led = {"Alltoallv": np.array([[0.0] * n, [k * c * 3 / 4] * n]), "Allgatherv": np.array([[0.0] * n, [k * c / 4] * n])}
    assert rs_stage_bytes(NS(mpi_bytes=led), 0.0, k, [True] * n, n) == pytest.approx((c, c))
    up = 4 * (n - 1) + 3 / 4 * c + 4 + c / 4                 # both stages and the length words
    assert rs_stage_bytes(NS(mpi_bytes={}), up, k, [True] * n, n) == pytest.approx((c, c))


def test_run_precision_reads_the_spec_not_the_bare_name():
    """A results file records the bare name (``compressor_name = "identity"``) beside the spec
    (``compressor = "identity:fp16"``): the precision comes from the spec (a measured fp16/bf16 run
    was once taken for float32, and a 16-bit baseline modelled beside it)."""
    from types import SimpleNamespace
    for spec, want in (("identity:fp16", "fp16"), ("identity:bf16", "bf16"), ("identity", "fp32"),
                       ("identity:fp64=true", "fp64"), ("int8", None)):
        ri = SimpleNamespace(attrs={"compressor_name": spec.partition(":")[0], "compressor": spec,
                                    "collective": "allreduce"}, flat={})
        assert baselines.run_precision(ri) == want, spec


def test_label_drops_a_hyphenated_collective():
    assert be._label("diana-qsgd-rs (collective=reduce-scatter, step_multiplier=4)") == \
        "diana-qsgd-rs (step_multiplier=4)"
    assert be._label("ef (collective=allgather)") == "ef"


def test_measured_16bit_runs_are_the_baseline_end_to_end(tmp_path):
    """Measured fp32, fp16 and bf16 Allreduce runs through `hpcgc breakeven`: the baseline is chosen
    among the measured runs by their measured time to the target (the path `measured_time` takes;
    once broken by a module split, with only the modelled path tested), named in the note and tagged."""
    out = tmp_path / "casts.h5"
    p = run_mpi(2, ["-m", "hpcgc.bench", "--set", "run.iterations=60", "--set", "run.eval_every=10",
                    "--set", "run.tolerance=0", "--set", 'sweep.algorithm=["dcgd"]',
                    "--set", 'sweep.collective=["allreduce"]',
                    "--set", 'sweep.compressor=["identity", "identity:fp16", "identity:bf16"]', "-o", str(out), "-q"],
                timeout=400)
    assert p.returncode == 0, show(p)
    r = hpcgc(out, "--latency-us", "5", "--eps", "1e-2", "-o", tmp_path / "be")
    assert r.returncode == 0, r.stderr
    assert "(measured: " in r.stderr + r.stdout and "modelled" not in r.stdout.split("|")[0]
    rows = _csv(tmp_path / "be" / "breakeven.csv")
    tags = [row["method"] for row in rows if "baseline" in row["method"]]
    assert sum("[baseline: " in t for t in tags) == 1               # one chosen baseline ...
    assert len(tags) == 1 or any("[fp32 baseline: second line]" in t for t in tags)   # ... fp32 beside it
    assert {row["baseline"] for row in rows} <= {"fp16", "bf16", "fp32"}


def test_ranks_per_node_flat_vs_hierarchical(produced, tmp_path):
    """--ranks-per-node 2 on the 2-rank runs (one node of 2): hierarchical.csv, its times the
    hierarchy module's on the measured models; bad K and missing intra-node figures: exit 2, one line."""
    from hpcgc.analysis.breakeven import hierarchy as hi
    d, f = produced
    p = hpcgc(f["base"], f["diana"], "--latency-us", "50", "--ranks-per-node", "2", "--intra-latency-us", "1",
              "--intra-gbps", "80", "-o", tmp_path)
    assert p.returncode == 0, show(p)
    assert "Flat vs hierarchical with 2 ranks per node" in p.stdout
    rows = {r["method"]: r for r in _csv(tmp_path / "hierarchical.csv")}
    lv = hi.Levels(2, 1e-6, 8 / 80e9, 50e-6, "test")
    rep = be.build([f["base"], f["diana"]], be.Latency(50e-6, "test"), be.bandwidth_sweep(0.1, 400, 5))
    (base, ms), = rep.panels.values()
    for m in ms:
        row = rows[m.label]
        assert int(row["nodes"]) == 1 and int(row["ranks_per_node"]) == 2
        for g in (1, 100):
            beta = 8 / (g * 1e9)
            assert float(row[f"time_hier_s_at_{g}Gbps"]) == pytest.approx(hi.hierarchical_time(m, 2, lv, beta))
            assert float(row[f"time_flat_s_at_{g}Gbps"]) == pytest.approx(float(m.time(2, 50e-6, beta)))
    assert float(rows["diana qsgd gather"]["intra_bytes"]) == 8 * 30          # the float64 gradient, d = 30
    for args, needle in ((["--ranks-per-node", "3", "--intra-latency-us", "1", "--intra-gbps", "80"],
                          "does not divide the rank count 2"),
                         (["--ranks-per-node", "2"], "intra-node latency is unknown")):
        p = hpcgc(f["base"], f["diana"], "--latency-us", "50", *args, "-o", tmp_path / "bad")
        assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, show(p)
