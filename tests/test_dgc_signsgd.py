"""DGC and signSGD with majority vote, one step at a time by hand (explicit state) against numpy
transcriptions of the papers' recursions; the warm-up schedule; the sign vote's Allreduce codec;
plan-time refusals. The MPI runs are in ``tests/mpi/test_dgc_signsgd_mpi.py``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import algorithms, compressors, config
from hpcgc.algorithms.dgc import DGC, stage_k, warmup_stage
from hpcgc.algorithms.signsgd_mv import SignSgdMV
from hpcgc.compressors.sign import SignSum, vote_dtype
from hpcgc.errors import ConfigError
from hpcgc.run.setup import check
from tests.algo_fixtures import D, N, shards
from tests.algo_fixtures import make as _make


def make(cls, spec, n=N, L=2.0, **opts):
    return _make(cls, spec, L=L, n=n, for_run=True, **opts)


def run(alg, fs, iterations, rng_seed=1):
    ws = [alg.worker_init(i, f) for i, f in enumerate(fs)]
    ss = alg.server_init(np.zeros(D))
    rng = np.random.default_rng(rng_seed)
    xs = []
    for _ in range(iterations):
        xk = ss.x.copy()
        msgs = []
        for w, f in zip(ws, fs):
            alg.worker_compute(w, xk, f, rng)
            msgs.append((w.i, alg.worker_encode(w, rng)))
        alg.server_step(ss, msgs)
        xs.append(ss.x.copy())
    return xs, ws


def test_registered():
    assert algorithms.get("dgc") is DGC and algorithms.get("signsgd-mv") is SignSgdMV


def test_dgc_steps_by_hand():
    """Momentum correction u ← m·u + γ·clip(g), v ← v + u; top-k(v) sent; v and u cleared where sent
    (momentum factor masking); x ← x − Σ w_i top-k(v_i); clipping at c/√n."""
    fs = shards()
    m, c, k = 0.9, 0.05, 3
    alg = make(DGC, f"topk:k={k},fp64=true", momentum=m, dgc_clip=c, step_multiplier=0.5)
    gamma = 0.5 / 2.0
    assert alg.gamma == gamma and alg.local_clip == c / math.sqrt(N)
    xs, ws = run(alg, fs, 5)
    x = np.zeros(D)
    u = [np.zeros(D) for _ in fs]
    v = [np.zeros(D) for _ in fs]
    clipped = 0
    for t in range(5):
        agg = np.zeros(D)
        for i, f in enumerate(fs):
            g = f.grad(x)
            norm = np.linalg.norm(g)
            if norm > c / math.sqrt(N):
                g = g * (c / math.sqrt(N) / norm)
                clipped += 1
            u[i] = m * u[i] + gamma * g
            v[i] = v[i] + u[i]
            idx = np.argsort(-np.abs(v[i]), kind="stable")[:k]
            agg[idx] += v[i][idx] / N
            v[i][idx] = 0.0
            u[i][idx] = 0.0
        x = x - agg
        np.testing.assert_allclose(xs[t], x, rtol=1e-13, atol=1e-16)
    assert clipped > 0
    for w, ui, vi in zip(ws, u, v):
        np.testing.assert_allclose(w.u, ui, rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(w.v, vi, rtol=1e-13, atol=1e-16)
        assert w.t[0] == 5


def test_dgc_warmup_schedule_is_the_papers():
    """75 %, 93.75 %, 98.4375 %, 99.6 % kept-out in four equal stages, then the run's k (never fewer)."""
    d, W = 10_000, 8
    assert [warmup_stage(t, W) for t in range(10)] == [1, 1, 2, 2, 3, 3, 4, 4, 0, 0]
    ks = [stage_k(10, d, s) for s in (1, 2, 3, 4, 0)]
    assert ks == [2500, 625, 157, 40, 10]
    assert [1 - k / d for k in ks[:4]] == [0.75, 0.9375, 0.9843, 0.996]
    assert stage_k(100, d, 4) == 100 and stage_k(5, 7, 1) == 5          # at least k, at most d
    alg = make(DGC, "topk:k=1,fp64=true", dgc_warmup=8)
    fs = shards()
    ws = alg.worker_init(0, fs[0])
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(10):
        alg.worker_compute(ws, np.zeros(D), fs[0], rng)
        payload = alg.worker_encode(ws, rng)
        kept.append(int(np.count_nonzero(ws.sent)))
        assert payload.size > 0
    assert kept == [stage_k(1, D, warmup_stage(t, 8)) for t in range(10)] == [3, 3, 1, 1, 1, 1, 1, 1, 1, 1]


def test_signsgd_with_one_worker_is_signsgd_and_signum():
    """n = 1: x ← x − γ·sign(g) (sign(0) = +1), and with β: v ← (1 − β)g + βv, x ← x − γ·sign(v)."""
    (f,) = shards(n=1)
    for beta in (0.0, 0.9):
        alg = make(SignSgdMV, "sign", n=1, learning_rate=0.01, momentum=beta)
        xs, _ = run(alg, [f], 6)
        x, v = np.zeros(D), np.zeros(D)
        for t in range(6):
            v = f.grad(x) if beta == 0 else (1 - beta) * f.grad(x) + beta * v
            x = x - 0.01 * np.where(v < 0, -1.0, 1.0)
            assert np.array_equal(xs[t], x), (beta, t)


def test_signsgd_majority_vote_by_hand():
    """Three workers: the step is −γ·sign(Σ_i sign(g_i)) — the majority, not the sign of the mean."""
    fs = shards()
    alg = make(SignSgdMV, "sign", learning_rate=0.1)
    xs, _ = run(alg, fs, 4)
    x = np.zeros(D)
    differs = 0
    for t in range(4):
        gs = [f.grad(x) for f in fs]
        votes = sum(np.where(g < 0, -1, 1) for g in gs)
        differs += int(np.any(np.sign(votes) != np.sign(sum(gs))))
        x = x - 0.1 * np.where(votes < 0, -1.0, 1.0)
        assert np.array_equal(xs[t], x)
    assert differs > 0                          # the data make the vote and the mean disagree somewhere


def test_sign_vote_codec():
    """±1 in the smallest integer type whose sum over n cannot wrap; −0.0 and 0 vote +1; d model bits,
    d·itemsize wire bytes; a non-finite entry is refused."""
    assert vote_dtype(1) is np.int8 and vote_dtype(127) is np.int8 and vote_dtype(128) is np.int16
    assert vote_dtype(32767) is np.int16 and vote_dtype(40000) is np.int32
    codec = compressors.make("sign").for_run(d=5, n_workers=4).sum_codec(5)
    assert isinstance(codec, SignSum) and codec.dtype is np.int8
    x = np.array([1.5, -2.0, 0.0, -0.0, -1e-300])
    v = codec.begin(x, 1.0, np.random.default_rng(0))
    assert v.dtype == np.int8 and list(v) == [1, -1, 1, 1, -1]
    assert codec.model_bits() == 5 and codec.wire_bytes() == 5
    out = np.zeros(5)
    codec.decode_add(np.array([4, -2, 0, 2, -4], dtype=np.int8), out, 0.25)
    assert list(out) == [1.0, -0.5, 0.0, 0.5, -1.0]
    own = np.zeros(5)
    codec.own_add(own, 2.0)
    assert list(own) == [2.0, -2.0, 2.0, 2.0, -2.0]
    with pytest.raises(ValueError):
        codec.begin(np.array([1.0, np.nan, 0, 0, 0]), 1.0, np.random.default_rng(0))
    assert compressors.make("sign").for_run(d=5, n_workers=200).sum_codec(5).dtype is np.int16
    with pytest.raises(ConfigError, match="cannot ride Allreduce"):
        compressors.make("scaled-sign").sum_codec(5)


@pytest.mark.parametrize("overrides,needle", [
    ({"algorithm": "dgc", "compressor": "randk:k=3"}, "dgc sparsifies by top-k: run.compressor must be 'topk:k=K'"),
    ({"algorithm": "dgc", "compressor": "topk:k=3", "collective": "reduce-scatter", "dgc_warmup": 10},
     "dgc's sparsity warm-up (run.dgc_warmup) changes k"),
    ({"algorithm": "dgc", "compressor": "topk:k=3", "collective": "allreduce"},
     "topk:k=3 cannot ride run.collective = 'allreduce'; collectives it can use: gather, allgather, reduce-scatter"),
    ({"algorithm": "signsgd-mv", "compressor": "topk:k=3", "learning_rate": 0.1},
     "signsgd-mv sends sign(g_i) and steps by the sign of the vote: run.compressor must be 'sign'"),
    ({"algorithm": "signsgd-mv", "compressor": "sign"}, "run.learning_rate is required for signsgd-mv"),
    ({"algorithm": "signsgd-mv", "compressor": "sign", "learning_rate": 0.1, "downlink": "topk:k=3"},
     "algorithm 'signsgd-mv' has no downlink state"),
    ({"algorithm": "ef", "compressor": "scaled-sign", "collective": "allreduce"},
     "compressor scaled-sign cannot ride run.collective = 'allreduce'"),
])
def test_plan_time_refusals_one_line(overrides, needle):
    cfg = config.defaults()
    cfg["run"].update(overrides)
    msgs = check(cfg)
    assert len(msgs) == 1 and needle in msgs[0], msgs


@pytest.mark.parametrize("item", ["run.dgc_clip=-1", "run.dgc_warmup=-5", "run.dgc_warmup=2.5"])
def test_dgc_keys_are_checked_when_set(item):
    with pytest.raises(ConfigError, match=item.split("=")[0]):
        config.apply_overrides(config.defaults(), [item])
