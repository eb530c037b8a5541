"""DiLoCo one round at a time by hand (explicit state) against a numpy transcription of Douillard et
al. 2023, Algorithm 1 (H inner SGD steps, the averaged pseudo-gradient, an outer Nesterov step as
torch.optim.SGD(nesterov=True) takes it); error feedback on the pseudo-gradient; H = 1, μ = 0,
η_out = 1 against DCGD's step; the plan-time refusals. The MPI runs (convergence, DCGD bit for bit
under every collective, resume) are in ``tests/mpi/test_diloco_mpi.py``."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import algorithms, compressors, config
from hpcgc.algorithms.diana import Dcgd
from hpcgc.algorithms.diloco import DiLoCo
from hpcgc.errors import ConfigError
from hpcgc.run.setup import check
from tests.algo_fixtures import D, N, options, shards


def make(spec, cls=DiLoCo, **opts):
    comp = compressors.make(spec)
    return cls([comp] * N, d=D, n_workers=N, weights=np.full(N, 1.0 / N),
               problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.1, "kind": "logreg",
                             "segments": [("x", 0, D, (D,))]}, options=options(**opts))


def one_round(alg, x, fs, ws, ss, seed=0):
    """One round through the algorithm's own halves (gather form); returns the new x."""
    payloads = []
    for i, f in enumerate(fs):
        rng = np.random.default_rng([seed, i])
        alg.worker_compute(ws[i], x, f, rng)
        payloads.append((i, alg.worker_encode(ws[i], rng)))
    return alg.server_step(ss, payloads).copy()


def test_registered_and_in_the_lists():
    assert algorithms.get("diloco") is DiLoCo
    assert DiLoCo.takes_biased and DiLoCo.takes_learning_rate
    assert set(DiLoCo.collectives) == {"gather", "allgather", "allreduce", "reduce-scatter"}


def test_rounds_by_hand_nesterov_outer_step():
    """H = 3 full-gradient inner steps, identity:fp64 messages, outer η = 0.7, μ = 0.9: three rounds
    against the transcription x_i ← x_i − η_in ∇f_i(x_i); Δ = mean(x − x_i); v ← μv + Δ;
    x ← x − η(Δ + μv)."""
    fs = shards()
    alg = make("identity:fp64=true", learning_rate=0.3, local_steps=3, outer_learning_rate=0.7, outer_momentum=0.9)
    ws = [alg.worker_init(i, f) for i, f in enumerate(fs)]
    ss = alg.server_init(np.zeros(D))
    x, v = np.zeros(D), np.zeros(D)
    got = np.zeros(D)
    for r in range(3):
        got = one_round(alg, got, fs, ws, ss, seed=r)
        deltas = []
        for f in fs:
            xi = x.copy()
            for _ in range(3):
                xi = xi - 0.3 * f.grad(xi)
            deltas.append(x - xi)
        delta = np.mean(deltas, axis=0)
        v = 0.9 * v + delta
        x = x - 0.7 * (delta + 0.9 * v)
        np.testing.assert_allclose(got, x, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ss.v, v, rtol=1e-12, atol=1e-15)
    assert alg.describe()["outer_momentum"] == 0.9 and alg.describe()["local_steps"] == 3


def test_error_feedback_on_the_pseudo_gradient_by_hand():
    """top-k with error feedback: e_i ← e_i + Δ_i; m_i = topk(e_i); e_i ← e_i − m_i; the server's
    aggregate is mean m_i, and x⁰ − x = η Σ_t (Δ^t + μ v^t) with Δ^t = mean m_i^t."""
    fs = shards(1)
    alg = make("topk:k=3", learning_rate=0.2, local_steps=2, error_feedback=True, outer_learning_rate=0.5,
               outer_momentum=0.0)
    ws = [alg.worker_init(i, f) for i, f in enumerate(fs)]
    ss = alg.server_init(np.zeros(D))
    x, e = np.zeros(D), [np.zeros(D) for _ in fs]
    got = np.zeros(D)
    for r in range(4):
        got = one_round(alg, got, fs, ws, ss, seed=r)
        ms = []
        for i, f in enumerate(fs):
            xi = x.copy()
            for _ in range(2):
                xi = xi - 0.2 * f.grad(xi)
            e[i] = e[i] + (x - xi)
            m = np.zeros(D)
            idx = np.argsort(-np.abs(e[i]), kind="stable")[:3]
            m[idx] = e[i][idx].astype(np.float32)          # top-k sends float32 values
            e[i] = e[i] - m
            ms.append(m)
        x = x - 0.5 * np.mean(ms, axis=0)
        np.testing.assert_allclose(got, x, rtol=1e-12, atol=1e-15)
        for i in range(N):
            np.testing.assert_allclose(ws[i].e, e[i], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("spec", ["qsgd:s=4", "randk:k=5", "identity"])
def test_one_step_no_momentum_unit_outer_rate_is_dcgd_bit_for_bit(spec):
    """H = 1, μ = 0, η_out = 1, η_in = 0.5 (a power of two: C(η g) = η C(g) exactly) is DCGD with
    γ = 0.5: the same iterates, bit for bit, for five rounds of the same random draws."""
    fs = shards(2)
    dl = make(spec, learning_rate=0.5, local_steps=1, outer_learning_rate=1.0, outer_momentum=0.0)
    dc = make(spec, cls=Dcgd, learning_rate=0.5, step_rule="learning-rate")
    assert dc.gamma == 0.5
    wd, wc = [dl.worker_init(i, f) for i, f in enumerate(fs)], [dc.worker_init(i, f) for i, f in enumerate(fs)]
    sd, sc = dl.server_init(np.zeros(D)), dc.server_init(np.zeros(D))
    xd, xc = np.zeros(D), np.zeros(D)
    for r in range(5):
        xd = one_round(dl, xd, fs, wd, sd, seed=r)
        xc = one_round(dc, xc, fs, wc, sc, seed=r)
        assert np.array_equal(xd, xc), (r, np.abs(xd - xc).max())
    assert np.abs(xd).max() > 0


@pytest.mark.parametrize("set_,needle", [
    ({}, "diloco needs run.local_steps = H >= 1"),
    ({"local_steps": 0}, "diloco needs run.local_steps = H >= 1"),
    ({"local_steps": 4, "outer_momentum": 1.0}, "run.outer_momentum must be in [0, 1) for diloco"),
    ({"local_steps": 4, "outer_momentum": -0.1}, "run.outer_momentum must be in [0, 1) for diloco"),
    ({"local_steps": 4, "momentum": 0.9}, "diloco's inner optimizer is plain SGD: remove run.momentum"),
    ({"local_steps": 4, "compressor": "topk:k=3"}, "diloco with the biased compressor topk:k=3 needs "
                                                   "run.error_feedback = true"),
])
def test_refused_at_plan_time_in_one_line(set_, needle):
    cfg = config.defaults()
    cfg["run"].update(algorithm="diloco", compressor="qsgd:s=4", learning_rate=0.1)
    cfg["run"].update(set_)
    msgs = check(cfg)
    assert len(msgs) == 1 and needle in msgs[0], msgs
    assert "\n" not in msgs[0]


def test_refusals_at_construction_too():
    with pytest.raises(ConfigError, match="diloco needs run.local_steps"):
        make("qsgd:s=4", learning_rate=0.1)
    with pytest.raises(ConfigError, match="outer_momentum"):
        make("qsgd:s=4", learning_rate=0.1, local_steps=2, outer_momentum=1.5)


def test_l1_and_bad_outer_rate_refused():
    cfg = config.defaults()
    cfg["run"].update(algorithm="diloco", compressor="qsgd:s=4", local_steps=2)
    cfg["problem"]["l1"] = 0.01
    (msg,) = check(cfg)
    assert "diloco has no prox step for problem.l1" in msg
    with pytest.raises(ConfigError, match="run.outer_learning_rate: must be > 0"):
        config.apply_overrides(config.defaults(), ["run.outer_learning_rate=0"])
    with pytest.raises(ConfigError, match="run.local_steps: must be >= 0"):
        config.apply_overrides(config.defaults(), ["run.local_steps=-1"])


@pytest.mark.parametrize("set_", [
    {"local_steps": 1},
    {"local_steps": 50, "compressor": "topk:k=3", "error_feedback": True, "collective": "reduce-scatter"},
    {"local_steps": 5, "compressor": "int8", "collective": "allreduce"},
    {"local_steps": 5, "compressor": "qsgd:s=4", "collective": "reduce-scatter"},
])
def test_accepted_at_plan_time(set_):
    cfg = config.defaults()
    cfg["run"].update(algorithm="diloco", compressor="qsgd:s=4")
    cfg["run"].update(set_)
    assert check(cfg) == []


def test_local_sgd_local_steps_zero_means_one():
    cfg = config.defaults()
    assert cfg["run"]["local_steps"] == 0
    lsgd = algorithms.make("local-sgd", [compressors.make("identity")] * 2, d=4, n_workers=2,
                           weights=np.full(2, 0.5), problem_info={"segments": [("x", 0, 4, (4,))]},
                           options={"learning_rate": 0.1, "local_steps": 0, "batch": 0})
    assert lsgd.steps == 1
