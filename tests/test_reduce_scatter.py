"""reduce-scatter's math without MPI (segments, the segment-wise compressors, the composed variance of
the two stages) and its received bytes under real mpiexec -n 2 and -n 4 launches."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from hpcgc.compressors import make
from hpcgc.compressors import segments as seg
from hpcgc.errors import ConfigError
from tests.conftest import run_mpi, show


def test_segments_are_balanced_contiguous_and_refuse_d_below_n():
    b = seg.bounds(10, 4)
    assert b == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert seg.lengths(10, 4) == {2, 3}
    with pytest.raises(ConfigError, match="d = 3 is smaller than the 4 ranks"):
        seg.bounds(3, 4)


def test_segment_forms():
    q = make("qsgd:s=4")
    assert q.segment(100, 25) is q
    assert make("topk:k=10").segment(100, 25).k == 3            # ⌈10·25/100⌉ = 3: δ_seg = 3/25 ≥ k/d
    assert make("randk:k=10").segment(100, 33).k == 4            # ⌈3.3⌉
    assert make("randk:k=10").segment(100, 33).omega(33) <= make("randk:k=10").omega(100)
    for spec in ("natural", "natural-dither", "quant", "terngrad", "sign", "scaled-sign", "identity:fp64=true",
                 "threshold:lam=0.1"):
        assert "reduce-scatter" in make(spec).collectives, spec
        make(spec).segment(100, 25)
    for spec in ("bernoulli:p=0.5", "randk:k=3,shared_seed=true", "powersgd"):
        c = make(spec)
        assert "reduce-scatter" not in c.collectives
    with pytest.raises(ConfigError, match="no segment-wise form.*collectives it can use: gather, allgather"):
        make("bernoulli:p=0.5").segment(100, 25)


@pytest.mark.parametrize("spec", ["qsgd:s=2", "natural", "randk:k=20"])
def test_two_unbiased_stages_mean_and_composed_variance(spec):
    """The two stages as the exchange runs them (segment-wise C₁ on every worker, weighted decode-and-
    sum per segment, C₂ of the reduced segment), on fixed vectors, many draws (fixed seed): the mean of
    the decoded aggregates matches Δ̄ coordinate-wise (|z| < 5), and the empirical E‖C₂(S) − Δ̄‖² is
    within the composed bound ω₂‖Δ̄‖² + (1 + ω₂)(ω₁/n²)Σ‖Δ_i‖²."""
    n, d, draws = 4, 103, 3000
    rng = np.random.default_rng(7)
    deltas = rng.standard_normal((n, d)) * np.array([1.0, 3.0, 0.5, 2.0])[:, None]
    mean = deltas.mean(axis=0)
    comp = make(spec)
    segs, b = seg.segment_compressors(comp, d, n), seg.bounds(d, n)
    om = seg.segment_omega(comp, d, n)
    bound = om * (mean @ mean) + (1 + om) * om / n**2 * (deltas ** 2).sum()
    gen = np.random.default_rng(11)
    aggs = np.zeros((draws, d))
    for t in range(draws):
        for c, (lo, hi) in zip(segs, b):
            S = np.zeros(hi - lo)
            for i in range(n):
                c.decompress_add(c.compress(deltas[i, lo:hi], gen), hi - lo, S, 1.0 / n)
            aggs[t, lo:hi] = c.decompress(c.compress(S, gen), hi - lo)
    err2 = ((aggs - mean) ** 2).sum(axis=1)
    assert err2.mean() <= bound, (err2.mean(), bound)
    z = (aggs.mean(axis=0) - mean) / (aggs.std(axis=0) / np.sqrt(draws) + 1e-300)
    assert np.abs(z).max() < 5.0


def test_composed_constants():
    assert seg.composed_omega(1.0, 1.0, 4) == 4 * 1.0 + 2 * 1.0
    assert seg.composed_omega(0.0, 0.0, 8) == 0.0
    assert seg.composed_delta(0.5, 0.25) == 0.125


def _received_per_iteration(tmp_path, n: int, collective: str, iterations: int = 6) -> tuple[float, float]:
    out = tmp_path / f"{collective}-{n}.h5"
    p = run_mpi(n, ["-m", "hpcgc.bench", "--set", "data.dataset=synthetic:sparse,n=400,d=65536,nnz=8",
                    "--set", "problem.reference=none", "--set", "data.partition=iid",
                    "--set", "run.algorithm=diana", "--set", "run.compressor=qsgd:s=4",
                    "--set", f"run.collective={collective}", "--set", f"run.iterations={iterations}",
                    "--set", f"run.eval_every={iterations}", "--set", "problem.l2=0.1",
                    "--set", "run.step_rule=learning-rate", "--set", "run.learning_rate=0.1",
                    "-o", str(out), "--quiet"], timeout=600)
    assert p.returncode == 0, show(p)
    with h5py.File(out) as f:
        g = f["runs"][next(iter(f["runs"]))]
        assert g.attrs["d"] == 65536
        recv = g["bits_received_wire"][-1] / 8 / iterations
        sent = g["bits_up_wire"][-1] / 8 / iterations
    return float(recv.mean()), float(sent.mean())


@pytest.mark.timeout(1500)
def test_received_bytes_scale_with_n_under_reduce_scatter_not_allgather(tmp_path):
    """qsgd at d = 2^16: from n = 2 to n = 4 a rank's received bytes per iteration grow by at most
    1.6× under reduce-scatter (2(n − 1)/n: 1 → 1.5) and by ≈ 3× under allgather (n − 1)."""
    rs2, _ = _received_per_iteration(tmp_path, 2, "reduce-scatter")
    rs4, _ = _received_per_iteration(tmp_path, 4, "reduce-scatter")
    ag2, _ = _received_per_iteration(tmp_path, 2, "allgather")
    ag4, _ = _received_per_iteration(tmp_path, 4, "allgather")
    assert rs4 / rs2 <= 1.6, (rs2, rs4)
    assert 2.9 <= ag4 / ag2 <= 3.1, (ag2, ag4)
