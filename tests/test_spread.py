"""The spread module (median and its order-statistics interval), the machine-noise decision and
probe, and run.repeats at plan time (no MPI: hpcgc.config and hpcgc.run.setup.plan)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import config, machine
from hpcgc.analysis import spread as sp
from hpcgc.errors import ConfigError
from hpcgc.run.setup import plan


# -- the interval -----------------------------------------------------------------------------------
def test_order_ranks_known_values():
    # n < 6: no symmetric pair reaches 95 %: [min, max] with coverage 1 − 2·2⁻ⁿ
    for n in range(2, 6):
        assert sp.order_ranks(n) == (1, n, 1 - 2 * 2.0 ** -n)
    assert sp.order_ranks(6) == (1, 6, 1 - 2 / 64)            # 96.9 %
    assert sp.order_ranks(9)[:2] == (2, 8)                    # 1 − 2·(1 + 9)/512 = 96.1 %
    lo, hi, cov = sp.order_ranks(10)
    assert (lo, hi) == (2, 9) and cov == pytest.approx(1 - 2 * (1 + 10) / 1024)
    lo, hi, cov = sp.order_ranks(100)                          # the textbook pair for n = 100: 40 and 61
    assert (lo, hi) == (40, 61) and 0.95 <= cov < 0.97
    assert sp.order_ranks(1) == (1, 1, 0.0)


def test_spread_of_known_inputs():
    s = sp.spread([10, 1, 9, 2, 8, 3, 7, 4, 6, 5])
    assert (s.median, s.lo, s.hi, s.n) == (5.5, 2.0, 9.0, 10)
    s3 = sp.spread([3.0, 1.0, 2.0])
    assert (s3.median, s3.lo, s3.hi, s3.coverage) == (2.0, 1.0, 3.0, 0.75)
    nan = sp.spread([1.0, float("nan"), 3.0])                 # a run that never reached its target is left out
    assert (nan.median, nan.n) == (2.0, 2)
    empty = sp.spread([float("nan")])
    assert empty.n == 0 and math.isnan(empty.median)
    one = sp.spread([4.0])
    assert (one.median, one.lo, one.hi, one.n) == (4.0, 4.0, 4.0, 1)
    assert sp.format_spread(s3) == "2 [1, 3]" and sp.format_spread(one) == "4" and sp.format_spread(empty) == "-"


def test_coverage_is_what_it_says():
    """The interval of n = 10 normal samples holds the true median in ~97.9 % of 20 000 draws."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(20_000):
        s = sp.spread(rng.standard_normal(10))
        hits += s.lo <= 0.0 <= s.hi
    assert abs(hits / 20_000 - sp.order_ranks(10)[2]) < 0.005


def test_separated_and_ratio():
    a, b = sp.spread([1.0, 1.1, 1.2]), sp.spread([1.3, 1.4, 1.5])
    assert sp.separated(a, b) and sp.separated(b, a)
    c = sp.spread([1.15, 1.4, 1.5])
    assert not sp.separated(a, c)
    assert not sp.separated(sp.spread([1.0]), sp.spread([2.0]))    # one run each: nothing is measurable
    lo, hi = sp.ratio_interval(a, b)
    assert lo == pytest.approx(1.0 / 1.5) and hi == pytest.approx(1.2 / 1.3)
    assert "coverage 75 %" in sp.describe(3) and "order statistics 2 and 9 of 10" in sp.describe(10)


# -- the busy decision (constructed numbers: the machine is not loaded for this test) -----------------
def test_busy_warning_from_measured_other_processes():
    w = machine.busy_warnings(cores=2, own_ranks=2, load1=3.1, other_cpu_cores=1.2)
    assert len(w) == 1 and w[0].startswith("WARNING: the machine was busy: other processes used 1.2 core(s)")
    assert "load average 3.1" in w[0] and "2 core(s)" in w[0]


def test_quiet_machine_no_warning():
    assert machine.busy_warnings(cores=8, own_ranks=4, load1=4.2, other_cpu_cores=0.1) == []
    assert machine.busy_warnings(cores=8, own_ranks=4, load1=9.0, other_cpu_cores=3.0) == []   # room for both
    assert machine.busy_warnings(cores=2, own_ranks=2, load1=2.1, other_cpu_cores=0.2) == []   # a daemon


def test_busy_from_load_average_without_proc_stat():
    w = machine.busy_warnings(cores=2, own_ranks=2, load1=3.1)          # other_cpu_cores unknown (NaN)
    assert len(w) == 1 and "load average 3.1 > 2 rank(s) of ours" in w[0]
    assert machine.busy_warnings(cores=2, own_ranks=2, load1=2.0) == []


def test_oversubscribed_by_our_own_ranks():
    w = machine.busy_warnings(cores=2, own_ranks=4, load1=4.0, other_cpu_cores=0.0)
    assert len(w) == 1 and w[0].startswith("WARNING: 4 ranks on 2 core(s)")


def test_noise_from_two_snapshots():
    start = {"time": 100.0, "total_jiffies": 10_000, "busy_jiffies": 4_000, "clock_ticks": 100, "cores": 2}
    end = {"time": 110.0, "total_jiffies": 12_000, "busy_jiffies": 5_500, "clock_ticks": 100, "cores": 2}
    n = machine.noise(start, end, own_cpu_s=10.0, own_ranks=2)   # 1 500 busy jiffies, 1 000 of them ours
    assert n["own_cpu_cores"] == pytest.approx(1.0)
    assert n["other_cpu_share"] == pytest.approx(500 / 2000) and n["other_cpu_cores"] == pytest.approx(0.5)
    blind = machine.noise({**start, "total_jiffies": -1}, {**end, "total_jiffies": -1}, 10.0, 2)
    assert math.isnan(blind["other_cpu_share"])


def test_snapshot_has_every_key_and_says_what_is_missing():
    s = machine.snapshot()
    for k in ("time", "host", "cpu_model", "cores", "cpu_mhz", "cpufreq_mhz", "load1", "load5", "load15",
              "runnable", "busy_jiffies", "total_jiffies", "clock_ticks", "missing"):
        assert k in s
    assert s["cores"] >= 1 and s["load1"] >= 0                 # Linux: /proc/loadavg is there
    if math.isnan(s["cpufreq_mhz"]):
        assert "cpufreq" in s["missing"]
    assert machine.describe(s).startswith("# machine: ")


# -- run.repeats at plan time ----------------------------------------------------------------------------
def _cfg(**run):
    cfg = config.default_experiment()
    cfg["run"].update(run)
    return cfg


@pytest.mark.parametrize("value,needle", [(0, "run.repeats: must be between 1 and 100, got 0"),
                                          (101, "run.repeats: must be between 1 and 100, got 101"),
                                          (-3, "between 1 and 100"), ("3", "expected an integer"),
                                          (2.5, "expected an integer")])
def test_repeats_bad_values(value, needle):
    with pytest.raises(ConfigError) as e:
        config.apply_overrides(config.default_experiment(), [f"run.repeats={value!r}".replace("'", '"')])
    assert needle in str(e.value) and len(str(e.value).splitlines()) == 1


def test_repeats_not_sweepable():
    with pytest.raises(ConfigError, match="cannot set run.repeats: it applies to the whole experiment"):
        config.apply_overrides(config.default_experiment(), ["sweep.run.repeats=[1, 2]"])
    with pytest.raises(ConfigError, match="a \\[\\[variant\\]\\] cannot set run.repeats"):
        config.merge(config.defaults(), {"variant": [{"run": {"repeats": 2}}]}, "x.toml")


def test_plan_interleaves_repeats():
    plans = plan(_cfg(repeats=3))
    points = len(config.expand(_cfg()))
    assert len(plans) == 3 * points
    assert [(p.index, p.repeat) for p in plans[:points + 1]] == [*((i, 0) for i in range(points)), (0, 1)]
    assert plans[points].run_id == plans[0].run_id[:-1] + "1" and plans[0].run_id.endswith("-r0")
    assert all(p.cfg == plans[p.index].cfg for p in plans)    # same configuration, same seed
    single = plan(_cfg())
    assert [p.run_id for p in single] == [p.run_id[:-3] for p in plans[:points]]   # R = 1: ids unchanged


def test_validate_prints_the_repeats():
    """`hpcgc validate` (2 ranks, real mpiexec) shows the repeats and the interleaved order in its plan."""
    from tests.conftest import run_mpi, show
    p = run_mpi(2, ["-m", "hpcgc.bench", "validate", "--set", "run.repeats=2",
                    "--set", 'sweep.run.algorithm=["diana"]'], timeout=300)
    assert p.returncode == 0, show(p)
    assert "6 run(s) valid" in p.stdout and "\nrepeats: 2 of each grid point" in p.stdout
    assert "\ngrid points: 3\n" in p.stdout, show(p)
    lines = [ln.split(":")[0].strip() for ln in p.stdout.splitlines() if ln.startswith("  0")]
    assert lines[0].endswith("-r0 (repeat 0)") and lines[3].endswith("-r1 (repeat 1)"), lines


def test_break_even_interval_and_measurably_faster_from_input_intervals():
    """The break-even bandwidth's interval comes from the ends of the inputs' intervals (method fast vs
    baseline slow and the reverse); 'measurably faster' = non-overlapping modelled time intervals."""
    from dataclasses import replace

    from hpcgc.analysis import breakeven as be
    base = be.MethodModel("allreduce", ("p",), 4, "allreduce", iterations=100, reached="3/3", workers=1e-3,
                          server=0.0, up_bytes=8e6, baseline=True)
    m = be.MethodModel("gather", ("p",), 4, "gather", iterations=120, reached="3/3", workers=2e-3,
                       server=0.0, up_bytes=8e4)

    def corners(mm, f):            # iterations and compute spread ±f around the model's values
        it = sp.spread([mm.iterations * (1 - f), mm.iterations, mm.iterations * (1 + f)])
        c = sp.spread([1 - f, 1.0, 1 + f])
        return be.Corners(replace(mm, iterations=it.lo, workers=mm.workers * c.lo),
                          replace(mm, iterations=it.hi, workers=mm.workers * c.hi), it, c, "repeats")
    cm, cb = corners(m, 0.05), corners(base, 0.05)
    mid = be.method_break_even(m, base, 4, 1e-6)
    lo, hi, text = be.break_even_interval(cm, cb, 4, 1e-6)
    assert mid.kind == "below" and lo < mid.gbps < hi and text.startswith("below ") and "–" in text
    slow_net, fast_net = float(be.gbps_to_beta(0.1)), float(be.gbps_to_beta(400))
    assert be.measurably_faster(cm, cb, 4, 1e-6, slow_net) == "faster"       # 100x fewer bytes on a slow link
    assert be.measurably_faster(cm, cb, 4, 1e-6, fast_net) == "slower"       # more iterations, more compute
    wide_m, wide_b = corners(m, 0.4), corners(base, 0.4)
    assert be.measurably_faster(wide_m, wide_b, 4, 1e-6, fast_net) == "not measurably different"
