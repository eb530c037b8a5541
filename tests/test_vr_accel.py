"""VR-DIANA, ADIANA, ADIANA+ and MARINA, single process: the recursions driven as the runner drives
them (all workers in this process), against an optimum computed independently by scipy."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize

from hpcgc import algorithms, compressors
from hpcgc.algorithms import adiana, marina, vr_diana
from hpcgc.algorithms.base import shared_coin
from hpcgc.errors import ConfigError
from tests.test_smoothness import shards


def optimum(glob):
    r = scipy.optimize.minimize(glob.loss, np.zeros(glob.d), jac=glob.grad, method="L-BFGS-B",
                                options={"gtol": 1e-13, "ftol": 1e-16, "maxiter": 20000})
    return r.x, glob.loss(r.x)


def make(alg_name, spec, objs, glob, **opts):
    n, d = len(objs), objs[0].d
    comp = compressors.make(spec)
    comps = [comp.for_run(d=d, n_workers=n) for _ in range(n)]
    options = {"step_multiplier": 1.0, "alpha": "theory", "momentum": 0.0, "batch": 0, "l1": 0.0, "seed": 0,
               "probability": "theory"}
    options.update(opts)
    return algorithms.make(alg_name, comps, d=d, n_workers=n, weights=np.full(n, 1.0 / n),
                           problem_info={"L_max": max(o.smoothness() for o in objs), "L": glob.smoothness(),
                                         "mu": glob.l2, "kind": glob.kind}, options=options)


def simulate(alg, objs, T, seed=0, record=None, state=None):
    """Drive ``alg`` as the runner does under allgather (every worker reads the same x)."""
    n, d = len(objs), objs[0].d
    if state is None:
        ws = [alg.worker_init(i, objs[i]) for i in range(n)]
        vals = [alg.agree_values(w) for w in ws]
        if vals[0] is not None:
            alg.set_agreed(np.max(vals, axis=0))
        x = np.zeros(d)
        ss = alg.server_init(x)
        setup = [alg.worker_setup_message(w) for w in ws]
        if setup[0] is not None:
            alg.server_setup(ss, list(enumerate(setup)))
        rngs = [np.random.default_rng(np.random.SeedSequence(seed).spawn(n)[i]) for i in range(n)]
        k0 = 0
    else:
        x, ws, ss, rngs, k0 = state
    for k in range(k0, k0 + T):
        msgs = []
        for i in range(n):
            alg.worker_compute(ws[i], x, objs[i], rngs[i])
            msgs.append((i, alg.worker_encode(ws[i], rngs[i])))
        x = alg.server_step(ss, msgs).copy()
        if record is not None:
            record(k, x, alg, ws, ss, msgs)
    return x, (x, ws, ss, rngs, k0 + T)


def gap_curve(alg, objs, glob, fs, T, seed=0):
    out = []
    simulate(alg, objs, T, seed=seed, record=lambda k, x, *a: out.append(glob.loss(x) - fs))
    return np.array(out)


# -- the shared coin --------------------------------------------------------------------------------
def test_shared_coin_is_a_function_of_seed_and_iteration():
    a = [shared_coin(7, k, 0.2) for k in range(4000)]
    assert a == [shared_coin(7, k, 0.2) for k in range(4000)]            # any rank, any order
    assert abs(np.mean(a) - 0.2) < 0.03
    assert a != [shared_coin(8, k, 0.2) for k in range(4000)]
    assert all(shared_coin(3, k, 1.0) for k in range(50))


# -- VR-DIANA ---------------------------------------------------------------------------------------
def test_vr_diana_theory_steps_are_the_stated_formulas():
    assert vr_diana.nonconvex_theory_step(2.0, 3.0, 4, 8.0) == pytest.approx(
        1 / (10 * 2.0 * math.sqrt(1 + 3 / 4) * (8 ** (2 / 3) + 3 + 1)))
    assert vr_diana.nonconvex_theory_step(1.0, 0.0, 1, 1.0) == pytest.approx(1 / 20)   # DIANA, no compression
    assert vr_diana.batch_smoothness(10.0, 2.0, 5) == pytest.approx(10 / 5 + 0.8 * 2)
    assert vr_diana.strongly_convex_theory_step(2.0, 1.0, 4) == pytest.approx(1 / (6 * 2 * 2))


def test_vr_diana_reaches_the_optimum_where_diana_with_the_same_batches_stalls():
    objs, glob = shards(n=4, m=100, d=8, l2=0.1)
    _, fs = optimum(glob)
    vr = make("vr-diana", "randk:k=4", objs, glob, batch=5, step_multiplier=4.0)
    dn = make("diana", "randk:k=4", objs, glob, batch=5)
    g_vr = gap_curve(vr, objs, glob, fs, 1500)
    g_dn = gap_curve(dn, objs, glob, fs, 1500)
    assert vr.p == pytest.approx(5 / 100) and vr.gamma <= dn.gamma
    assert g_vr[-1] <= 1e-10, g_vr[-5:]
    assert g_dn[-200:].min() >= 100 * max(g_vr[-1], 1e-10), (g_dn[-5:], g_vr[-1])


def test_vr_diana_counts_gradient_evaluations_and_refreshes_on_the_shared_coin():
    objs, glob = shards(n=3, m=40, d=6, l2=0.1)
    alg = make("vr-diana", "randk:k=3", objs, glob, batch=4, seed=11, probability=0.25)
    T = 60
    refreshes = []

    def record(k, x, alg, ws, ss, msgs):
        refreshes.append([np.array_equal(w.w, prev[w.i]) for w in ws])
        prev[:] = [w.w.copy() for w in ws]
    prev = [np.zeros(6)] * 3
    _, (x, ws, ss, rngs, _) = simulate(alg, objs, T, record=record)
    coins = [shared_coin(11, k, 0.25) for k in range(T)]
    # every worker moves its reference point on the same iterations, those of the shared coin
    assert all(len(set(r)) == 1 for r in refreshes)
    for w in ws:
        assert w.evals[0] == 40 + 2 * 4 * T + 40 * sum(coins)


# -- MARINA -----------------------------------------------------------------------------------------
def test_marina_with_p_one_is_gradient_descent_iterate_for_iterate():
    objs, glob = shards(n=4, m=30, d=8, l2=0.05)
    xs_m, xs_d = [], []
    simulate(make("marina", "randk:k=2", objs, glob, probability=1.0), objs, 50,
             record=lambda k, x, *a: xs_m.append(x))
    simulate(make("dcgd", "identity", objs, glob), objs, 50, record=lambda k, x, *a: xs_d.append(x))
    assert all(np.array_equal(a, b) for a, b in zip(xs_m, xs_d))


def test_marina_theory_step_and_default_probability():
    assert marina.theory_step(2.0, 3.0, 4, 0.25) == pytest.approx(1 / (2.0 * (1 + math.sqrt(0.75 * 3 / (0.25 * 4)))))
    objs, glob = shards(n=4, m=30, d=8, l2=0.05)
    alg = make("marina", "randk:k=2", objs, glob)
    assert alg.p == pytest.approx(1 / (1 + alg.omega)) == pytest.approx(2 / 8)


def test_marina_dense_rounds_on_the_coin_counted_as_identity_and_it_converges():
    objs, glob = shards(n=4, m=60, d=12, l2=0.05)
    _, fs = optimum(glob)
    alg = make("marina", "randk:k=3", objs, glob, seed=5)
    ident = compressors.make("identity")
    kinds, bits = [], []

    def record(k, x, alg, ws, ss, msgs):
        kinds.append({p.size for _, p in msgs})
        bits.append([alg.model_bits(i, p) for i, p in msgs])
    gaps = []
    simulate(alg, objs, 1500, record=lambda *a: (record(*a), gaps.append(glob.loss(a[1]) - fs)))
    dense_size = ident.compress(np.ones(12), np.random.default_rng(0)).size
    for k, (sizes, b) in enumerate(zip(kinds, bits)):
        dense = k == 0 or shared_coin(5, k, alg.p)
        assert sizes == ({dense_size} if dense else sizes - {dense_size}), k     # all workers alike
        if dense:
            assert b == [32 * 12] * 4
    assert 0.1 < np.mean([len(s & {dense_size}) > 0 for s in kinds]) < 0.45
    assert gaps[-1] <= 1e-10, gaps[-5:]


# -- ADIANA -----------------------------------------------------------------------------------------
def test_adiana_parameters_are_the_theorem_s():
    par = adiana.theory_parameters("adiana", L=2.0, mu=1e-3, omega=3.0, n=4)
    p = min(1.0, max(1.0, math.sqrt(4 / 96) - 1) / 8)
    eta = min(1 / 4, 4 / (64 * 3 * (2 * p * 4 + 1) ** 2 * 2.0))
    th1 = min(0.25, math.sqrt(eta * 1e-3 / p))
    assert par["probability"] == pytest.approx(p) and par["eta"] == pytest.approx(eta)
    assert par["theta1"] == pytest.approx(th1) and par["theta2"] == 0.5 and par["alpha"] == 0.25
    assert par["gamma"] == pytest.approx(eta / (2 * (th1 + eta * 1e-3)))
    assert par["beta"] == pytest.approx(1 - par["gamma"] * 1e-3)
    big_n = adiana.theory_parameters("adiana", L=1.0, mu=1e-3, omega=1.0, n=10_000)
    assert big_n["eta"] == pytest.approx(0.5)                    # many workers: η = 1/(2L)
    assert adiana.theory_parameters("adiana", L=1.0, mu=1e-2, omega=0.0, n=4)["probability"] == 1.0
    plus = adiana.theory_parameters("adiana+", L=2.0, mu=1e-3, omega=3.0, n=4, ltilde=3.0 * 2.0)
    assert plus == par                                           # L̃ = ωL: ADIANA's choice


@pytest.mark.parametrize("kw, words", [
    ({"multiplier": 2.0}, "η ≤ n/(64·ωL·(2p(ω+1)+1)²)"),
    ({"alpha": 0.9}, "α ≤ 1/(1+ω)"),
    ({"mu": 0.0}, "problem.l2 (μ) must be > 0"),
    ({"prob": 1.5}, "run.probability must be in (0, 1]"),
])
def test_adiana_infeasible_parameters_name_the_inequality(kw, words):
    args = dict(L=2.0, mu=1e-3, omega=3.0, n=4)
    args.update(kw)
    with pytest.raises(ConfigError, match=None) as exc:
        adiana.theory_parameters("adiana", **args)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="1/\\(2L\\)"):
        adiana.theory_parameters("adiana", L=1.0, mu=1e-3, omega=1.0, n=10_000, multiplier=1.5)


def ill_conditioned(n=4, m=50, d=20, l2=1e-4, seed=0):
    """Ridge shards whose data Hessian spans 1 … 1e-5: the true μ is l2 (κ ≈ 9·10³)."""
    from hpcgc.problems import Objective
    rng = np.random.default_rng(seed)
    scale = np.logspace(0, -2.5, d)
    As = [rng.standard_normal((m, d)) * scale for _ in range(n)]
    ys = [rng.standard_normal(m) for _ in range(n)]
    objs = [Objective("ridge", A, y, np.full(m, 1 / m), l2) for A, y in zip(As, ys)]
    glob = Objective("ridge", np.vstack(As), np.concatenate(ys), np.full(n * m, 1 / (n * m)), l2)
    return objs, glob


def test_adiana_accelerates_diana_on_an_ill_conditioned_problem():
    """κ ≈ 9·10³ with μ = l2 the true strong convexity: without compression ADIANA (accelerated GD,
    p = 1) reaches 1e-8 in 2000 iterations where DIANA (= GD) is still above 1e-5; with rand-10 of 20
    (ω = 1) ADIANA is ahead of DIANA after 3000 iterations at the theory parameters of both."""
    objs, glob = ill_conditioned()
    _, fs = optimum(glob)
    a = gap_curve(make("adiana", "identity", objs, glob), objs, glob, fs, 2000)
    d = gap_curve(make("diana", "identity", objs, glob), objs, glob, fs, 2000)
    assert a[-1] <= 1e-8 and d[-1] >= 1e-5, (a[-1], d[-1])
    a = gap_curve(make("adiana", "randk:k=10", objs, glob), objs, glob, fs, 3000)
    d = gap_curve(make("diana", "randk:k=10", objs, glob), objs, glob, fs, 3000)
    assert a[-1] < 0.3 * d[-1], (a[-1], d[-1])


@pytest.mark.parametrize("spec, T", [("quant+", 2500), ("quant+:matrix=diag", 4000)])
def test_adiana_plus_reaches_1e8_with_dense_and_diagonal_matrices(spec, T):
    objs, glob = shards(n=4, m=60, d=10, l2=0.05)
    _, fs = optimum(glob)
    alg = make("adiana+", spec, objs, glob)
    g = gap_curve(alg, objs, glob, fs, T)
    assert alg.matrix_kind == ("diagonal" if "diag" in spec else "dense")
    assert g[-1] <= 1e-8, g[-5:]


# -- all four ---------------------------------------------------------------------------------------
CASES = [("vr-diana", "randk:k=3", {"batch": 4}), ("marina", "randk:k=3", {}), ("adiana", "randk:k=3", {}),
         ("adiana+", "quant+", {})]


@pytest.mark.parametrize("name, spec, opts", CASES)
def test_same_seed_same_iterates_and_resume_from_the_state_arrays(name, spec, opts):
    from hpcgc.run.checkpoint import arrays_of, restore_arrays
    objs, glob = shards(n=3, m=40, d=6, l2=0.1)
    xa, _ = simulate(make(name, spec, objs, glob, seed=3, **opts), objs, 40, seed=9)
    xb, _ = simulate(make(name, spec, objs, glob, seed=3, **opts), objs, 40, seed=9)
    assert np.array_equal(xa, xb)
    xc, _ = simulate(make(name, spec, objs, glob, seed=4, **opts), objs, 40, seed=9)
    assert not np.array_equal(xa, xc)                          # the coin depends on the seed
    # resume: 20 iterations, the state's arrays (what a checkpoint saves) into a fresh set-up, 20 more
    _, (x, ws, ss, rngs, k) = simulate(make(name, spec, objs, glob, seed=3, **opts), objs, 20, seed=9)
    saved = ([arrays_of(w) for w in ws], arrays_of(ss), [g.bit_generator.state for g in rngs], x.copy())
    fresh = make(name, spec, objs, glob, seed=3, **opts)
    _, (x2, ws2, ss2, rngs2, _) = simulate(fresh, objs, 0, seed=123)
    for w, s in zip(ws2, saved[0]):
        restore_arrays(w, s)
    restore_arrays(ss2, saved[1])
    for g, s in zip(rngs2, saved[2]):
        g.bit_generator.state = s
    xr, _ = simulate(fresh, objs, 20, state=(saved[3], ws2, ss2, rngs2, 20))
    assert np.array_equal(xr, xa)


@pytest.mark.parametrize("name, spec, opts, words", [
    ("vr-diana", "randk:k=3", {}, "vr-diana needs mini-batches"),
    ("vr-diana", "randk:k=3", {"batch": 4, "probability": 0.0}, "run.probability must be in (0, 1]"),
    ("marina", "randk:k=3", {"probability": 1.5}, "run.probability must be in (0, 1]"),
    ("marina", "topk:k=3", {}, "marina needs an unbiased compressor; topk:k=3 is biased"),
    ("adiana", "topk:k=3", {}, "adiana needs an unbiased compressor"),
    ("marina", "randk:k=3", {"batch": 4}, "set run.batch = 0"),
    ("adiana", "randk:k=3", {"step_multiplier": 3.0}, "breaks η ≤"),
])
def test_bad_input_is_one_line(name, spec, opts, words):
    objs, glob = shards(n=3, m=40, d=6, l2=0.1)
    with pytest.raises(ConfigError) as exc:
        alg = make(name, spec, objs, glob, **opts)
        simulate(alg, objs, 1)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_plan_time_refusals():
    from hpcgc import config
    from hpcgc.run.setup import check
    cfg = config.defaults()
    cfg["run"].update(algorithm="marina", probability=1.5)
    assert any("run.probability must be in (0, 1]" in m for m in check(cfg))
    cfg["run"].update(algorithm="adiana", probability="theory", collective="gather")
    assert check(cfg) == []                                  # w is broadcast when it moves
    cfg["run"].update(collective="allreduce", compressor="identity")
    msgs = check(cfg)
    assert any("algorithm 'adiana' cannot run under run.collective = 'allreduce'" in m and "'gather'" in m
               for m in msgs), msgs
    cfg["run"].update(algorithm="marina", collective="allreduce", compressor="identity")
    assert any("marina" in m and "allreduce" in m for m in check(cfg))
    cfg["run"].update(algorithm="vr-diana", collective="gather", compressor="topk:k=2")
    msgs = check(cfg)
    assert any("vr-diana needs an unbiased compressor" in m for m in msgs)
    assert any("vr-diana needs mini-batches" in m for m in msgs)
    cfg["run"].update(algorithm="marina", compressor="randk:k=2", batch=5)
    assert any("marina uses full local gradients" in m for m in check(cfg))
    cfg["run"].update(algorithm="adiana+", batch=0, collective="allgather")
    cfg["problem"]["l2"] = 0.0
    assert check(cfg) == ["adiana+ implements ADIANA's strongly convex theorem: problem.l2 (μ) must be > 0, got 0.0"]


def test_vr_diana_and_marina_step_rules_by_problem_class():
    """The step-rule framework (hpcgc.algorithms.base): VR-DIANA's own strongly convex step, the
    nonconvex Thm 4 step on sigmoid-loss, run.learning_rate (required) on the classifiers; MARINA's
    Thm 2.1 step where L is known, run.learning_rate otherwise."""
    from hpcgc.algorithms.marina import Marina
    from hpcgc.algorithms.vr_diana import VrDiana
    r = {"algorithm": "vr-diana", "step_rule": "auto", "learning_rate": 0.0}
    assert VrDiana.resolve_step_rule("logreg") == "vr-strongly-convex"
    assert VrDiana.resolve_step_rule("sigmoid-loss") == "horvath-thm4"
    assert VrDiana.check_problem("sigmoid-loss", r) is None
    assert "run.learning_rate is required for 'vr-diana'" in VrDiana.check_problem("mlp", r)
    r = {**r, "algorithm": "marina"}
    assert Marina.resolve_step_rule("ridge") == Marina.resolve_step_rule("sigmoid-loss") == "marina-thm2.1"
    assert "run.learning_rate is required for 'marina'" in Marina.check_problem("softmax", r)
    assert Marina.check_problem("softmax", {**r, "learning_rate": 0.1}) is None
    assert "unknown run.step_rule 'flpytorch'" in Marina.check_problem("logreg", {**r, "step_rule": "flpytorch"})
