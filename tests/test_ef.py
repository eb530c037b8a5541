"""EF (EF14 / EF-SGD) and EF21, one step at a time by hand (explicit state, optax style) against
a numpy transcription of each paper's recursion; the EF21 Theorem 1 step; the scaled unbiased
compressor; the dense first message and its bits; plan-time refusals. The MPI runs (convergence on
a9a, same seed ⇒ same iterates) are in ``tests/mpi/test_ef_mpi.py``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcgc import algorithms, compressors, config
from hpcgc.algorithms.ef import EF
from hpcgc.algorithms.ef21 import EF21, theory_step
from hpcgc.errors import ConfigError
from hpcgc.run.setup import check
from tests.algo_fixtures import D, N, make, options, shards


def topk(v, k):
    out = np.zeros_like(v)
    idx = np.argsort(-np.abs(v))[:k]
    out[idx] = v[idx]
    return out


def test_registered_and_named_in_the_biased_refusal():
    assert algorithms.get("ef") is EF and algorithms.get("ef21") is EF21
    assert EF.takes_biased and EF21.takes_biased and EF.nonconvex_ok and EF21.nonconvex_ok
    cfg = config.defaults()
    cfg["run"].update(algorithm="dcgd", compressor="topk:k=3")
    (msg,) = check(cfg)
    assert msg == ("dcgd needs an unbiased compressor; topk:k=3 is biased. Algorithms that take biased "
                   "compressors: diloco, ef, ef21, ef21-sgdm, local-sgd")


def test_ef_steps_by_hand():
    """Three iterations of EF with top-k (float64 values) against e ← e + γg; m = top-k(e); e ← e − m;
    x ← x − Σ w_i m_i."""
    fs = shards()
    alg = make(EF, "topk:k=3,fp64=true", step_multiplier=0.5)
    assert alg.gamma == 0.5 / 2.0
    ws = [alg.worker_init(i, f) for i, f in enumerate(fs)]
    ss = alg.server_init(np.zeros(D))
    rng = np.random.default_rng(1)
    x, e = np.zeros(D), [np.zeros(D) for _ in fs]
    pushed = np.zeros(D)                           # Σ_t Σ_i w_i γ g_i^t
    for _ in range(3):
        xk = ss.x.copy()
        msgs = []
        for w, f in zip(ws, fs):
            alg.worker_compute(w, xk, f, rng)
            msgs.append((w.i, alg.worker_encode(w, rng)))
        alg.server_step(ss, msgs)
        m_sum = np.zeros(D)
        for i, f in enumerate(fs):                 # the transcription
            e[i] = e[i] + alg.gamma * f.grad(x)
            pushed += alg.gamma * f.grad(x) / N
            m = topk(e[i], 3)
            e[i] = e[i] - m
            m_sum += m / N
        x = x - m_sum
        np.testing.assert_allclose(ss.x, x, rtol=1e-14, atol=1e-15)
        for w, ei in zip(ws, e):
            np.testing.assert_allclose(w.e, ei, rtol=1e-14, atol=1e-15)
    # x⁰ − x^k = Σ_i w_i (γ Σ_t g_i^t − e_i^k): nothing is lost, only delayed
    np.testing.assert_allclose(-ss.x, pushed - np.mean([w.e for w in ws], axis=0), rtol=1e-12, atol=1e-15)
    assert alg.describe()["contraction_delta"] == 3 / D


def test_ef_scales_an_unbiased_compressor_by_one_over_one_plus_omega():
    fs = shards()
    alg = make(EF, "randk:k=4")
    comp = alg.compressors[0]
    s = 1.0 / (1.0 + comp.omega(D))
    assert alg.scales[0] == s and alg.delta == s
    ws = alg.worker_init(0, fs[0])
    rng = np.random.default_rng(3)
    alg.worker_compute(ws, np.zeros(D), fs[0], rng)
    before = ws.e.copy()
    payload = alg.worker_encode(ws, rng)
    np.testing.assert_allclose(ws.e, before - s * comp.decompress(payload, D), rtol=1e-15, atol=1e-16)
    ss = alg.server_init(np.zeros(D))
    alg.server_step(ss, [(0, payload)])
    np.testing.assert_allclose(ss.x, -s * comp.decompress(payload, D) / N, rtol=1e-15, atol=1e-16)


def test_ef21_steps_by_hand():
    """EF21: the first message is ∇f_i(x⁰) dense (float64, 64·d bits), then top-k of ∇f_i(x) − g_i;
    g = Σ w_i g_i; x ← x − γ g; γ from Theorem 1 with L̃ = √(mean L_i²)."""
    fs = shards()
    alg = make(EF21, "topk:k=3,fp64=true")
    ws = [alg.worker_init(i, f) for i, f in enumerate(fs)]
    L_i = np.array([f.smoothness() for f in fs])
    assert [w.L_i for w in ws] == list(L_i)
    agreed = np.max([alg.agree_values(w) for w in ws], axis=0)    # what the max-reduce delivers
    alg.set_agreed(agreed)
    delta = 3 / D
    theta, beta = 1 - math.sqrt(1 - delta), (1 - delta) / (1 - math.sqrt(1 - delta))
    L_t = math.sqrt(np.mean(L_i ** 2))
    assert alg.gamma == pytest.approx(1.0 / (2.0 + L_t * math.sqrt(beta / theta)), rel=1e-15)
    ss = alg.server_init(np.zeros(D))
    rng = np.random.default_rng(1)
    x, g_i = np.zeros(D), [None] * N
    for it in range(4):
        xk = ss.x.copy()
        msgs = []
        for w, f in zip(ws, fs):
            alg.worker_compute(w, xk, f, rng)
            msgs.append((w.i, alg.worker_encode(w, rng)))
        bits = [alg.model_bits(i, p) for i, p in msgs]
        alg.server_step(ss, msgs)
        for i, f in enumerate(fs):                 # the transcription
            g_i[i] = f.grad(x) if it == 0 else g_i[i] + topk(f.grad(x) - g_i[i], 3)
        x = x - alg.gamma * np.mean(g_i, axis=0)
        np.testing.assert_allclose(ss.x, x, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(ss.g, np.mean(g_i, axis=0), rtol=1e-13, atol=1e-15)
        for w, gi in zip(ws, g_i):
            np.testing.assert_allclose(w.g, gi, rtol=1e-13, atol=1e-15)
        expected = 64 * D if it == 0 else alg.compressors[0].model_bits(msgs[0][1], D)
        assert bits[0] == expected
        assert ws[0].fresh[0] == 0.0 and ss.fresh[0] == 0.0


def test_ef21_unbiased_compressor_is_scaled():
    fs = shards()
    alg = make(EF21, "randk:k=3")
    s = 1.0 / (1.0 + alg.compressors[0].omega(D))
    assert alg.delta == s and alg.scales[0] == s
    w = alg.worker_init(1, fs[1])
    rng = np.random.default_rng(5)
    alg.worker_compute(w, np.zeros(D), fs[1], rng)
    alg.worker_encode(w, rng)                      # the dense first message
    np.testing.assert_array_equal(w.g, fs[1].grad(np.zeros(D)))
    x = np.full(D, 0.1)
    alg.worker_compute(w, x, fs[1], rng)
    g_before, diff = w.g.copy(), fs[1].grad(x) - w.g
    np.testing.assert_array_equal(w.delta, diff)
    payload = alg.worker_encode(w, rng)
    np.testing.assert_allclose(w.g, g_before + s * alg.compressors[0].decompress(payload, D), rtol=1e-15)


def test_theory_step_formula():
    assert theory_step(3.0, 5.0, 1.0)[0] == pytest.approx(1 / 3.0)       # identity: gradient descent
    gamma, theta, beta = theory_step(2.0, 4.0, 0.19)                     # √(1 − 0.19) = 0.9
    assert theta == pytest.approx(0.1) and beta == pytest.approx(0.81 / 0.1)
    assert gamma == pytest.approx(1 / (2.0 + 4.0 * math.sqrt(81.0)))


def test_learning_rate_where_no_smoothness_constant():
    comp = compressors.make("topk:k=2")
    kw = dict(d=D, n_workers=N, weights=np.full(N, 1 / N),
              problem_info={"L_max": 0.0, "L": None, "mu": 0.0, "kind": "mlp"})
    assert EF([comp] * N, options=options(learning_rate=0.03), **kw).gamma == 0.03
    ef21 = EF21([comp] * N, options=options(learning_rate=0.02), **kw)
    assert ef21.gamma == 0.02 and ef21.agree_values(ef21.worker_init(0, None)) is None
    for cls in (EF, EF21):
        for lr in (0.0, -0.5, float("nan")):
            with pytest.raises(ConfigError, match="run.learning_rate is required for"):
                cls([comp] * N, options=options(learning_rate=lr), **kw)


def test_step_rules_of_the_error_feedback_methods():
    """'theory' (the default where L is known) or 'learning-rate' (γ = multiplier × run.learning_rate)."""
    comp = compressors.make("topk:k=2")
    kw = dict(d=D, n_workers=N, weights=np.full(N, 1 / N),
              problem_info={"L_max": 2.0, "L": 2.0, "mu": 0.1, "kind": "logreg"})
    ef = EF([comp] * N, options=options(), **kw)
    assert (ef.step_rule, ef.gamma, ef.describe()["step_rule"]) == ("theory", 0.5, "theory")
    ef = EF([comp] * N, options=options(step_rule="learning-rate", learning_rate=0.03, step_multiplier=2.0), **kw)
    assert (ef.step_rule, ef.gamma) == ("learning-rate", 0.06)
    ef21 = EF21([comp] * N, options=options(step_rule="learning-rate", learning_rate=0.02), **kw)
    assert (ef21.step_rule, ef21.gamma) == ("learning-rate", 0.02)
    with pytest.raises(ConfigError, match="unknown run.step_rule 'flpytorch' for algorithm 'ef'"):
        EF([comp] * N, options=options(step_rule="flpytorch"), **kw)


@pytest.mark.parametrize("alg,spec,set_,needle", [
    ("ef21", "sign", {}, "ef21 cannot use sign: its step and its recursion need the contraction δ"),
    ("ef21", "threshold:lam=0.1", {}, "ef21 cannot use threshold:lam=0.1"),
    ("ef", "sign", {}, "ef cannot use sign: error feedback needs a contractive compressor"),
    ("ef21", "topk:k=3", {"momentum": 0.5}, "ef21 has no momentum"),
    ("ef", "topk:k=3", {"alpha": 0.5}, "ef has no shifts"),
    ("ef21", "identity", {"collective": "allreduce"}, "algorithm 'ef21' cannot run under run.collective = 'allreduce'"),
    ("ef", "topk:k=3", {"collective": "allreduce"}, "compressor topk:k=3 cannot ride run.collective = 'allreduce'"),
])
def test_refused_at_plan_time_in_one_line(alg, spec, set_, needle):
    cfg = config.defaults()
    cfg["run"].update(algorithm=alg, compressor=spec, **set_)
    (msg,) = check(cfg)
    assert needle in msg and "\n" not in msg


def test_accepted_at_plan_time():
    for alg, spec, extra in [("ef", "threshold:lam=0.1", {}), ("ef", "scaled-sign", {}), ("ef21", "scaled-sign", {}),
                             ("ef21", "randk:k=3", {"collective": "allgather"}),
                             ("ef", "identity", {"collective": "allreduce"})]:
        cfg = config.defaults()
        cfg["run"].update(algorithm=alg, compressor=spec, **extra)
        assert check(cfg) == [], (alg, spec)
    cfg = config.defaults()
    cfg["run"].update(algorithm="ef21", compressor="topk:k=3")
    cfg["problem"]["l1"] = 0.1
    (msg,) = check(cfg)
    assert "ef21 has no prox step for problem.l1" in msg
