"""The nonconvex sigmoid loss (gradient, Hessian, smoothness bound) and DCGD/DIANA's named step
rules and plan-time checks on every problem class (issue 14, items 1 and 6)."""
import math

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from scipy.special import expit

from hpcgc import algorithms, compressors, config
from hpcgc.algorithms.base import SMOOTH, STRONGLY_CONVEX, learning_rate, problem_class
from hpcgc.algorithms.diana import STEP_RULES, expected_smoothness
from hpcgc.errors import ConfigError
from hpcgc.problems import Objective, sigmoid_curvature, solve_reference
from hpcgc.run.setup import check


def _data(m=60, d=10, sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, d))
    A[rng.random((m, d)) < 0.4] = 0.0
    y = np.sign(rng.standard_normal(m))
    return (sp.csr_matrix(A) if sparse else A), y


# -- the sigmoid loss -----------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_sigmoid_loss_gradient_and_hessp_match_finite_differences(sparse):
    A, y = _data(sparse=sparse)
    obj = Objective("sigmoid-loss", A, y, np.full(60, 1 / 60), l2=0.05)
    x = np.random.default_rng(1).standard_normal(obj.d)
    Ad = A.toarray() if sparse else A
    assert obj.loss(x) == pytest.approx(np.mean((1 - expit(y * (Ad @ x))) ** 2) + 0.025 * x @ x, rel=1e-13)
    g = obj.grad(x)
    assert scipy.optimize.check_grad(obj.loss, obj.grad, x) < 1e-6 * max(1.0, np.linalg.norm(g))
    v = np.random.default_rng(2).standard_normal(obj.d)
    fd = (obj.grad(x + 1e-6 * v) - obj.grad(x - 1e-6 * v)) / 2e-6
    assert np.allclose(obj.hessp(x, v), fd, atol=1e-7)
    # mini-batch rows: the unbiased estimate averages to the full gradient
    rows = [np.array([i]) for i in range(60)]
    assert np.allclose(np.mean([obj.grad(x, r) for r in rows], axis=0), g)


def test_sigmoid_curvature_is_the_sup_of_phi_second_derivative():
    t = np.linspace(-30, 30, 600001)
    s = expit(t)
    phi2 = 2 * s * (1 - s) ** 2 * (3 * s - 1)               # φ''(t) for φ(t) = (1 − σ(t))²
    # φ'' itself against a finite difference of φ' = −2σ(1 − σ)²
    dphi = lambda u: -2 * expit(u) * expit(-u) ** 2
    assert np.allclose(phi2[::1000], (dphi(t[::1000] + 1e-5) - dphi(t[::1000] - 1e-5)) / 2e-5, atol=1e-8)
    grid_max = np.abs(phi2).max()                                  # attained at t ≈ 0.4657 (s = (9 + √33)/24)
    assert grid_max <= sigmoid_curvature() <= grid_max * (1 + 1e-8)
    assert sigmoid_curvature() == pytest.approx(0.154059, abs=1e-6)


def test_sigmoid_smoothness_bounds_the_hessian_which_is_indefinite():
    """L = sup|φ''|·λ_max(AᵀWA) + l2 bounds ‖∇²f(x)‖ everywhere; the problem is nonconvex: the
    Hessian has a negative eigenvalue somewhere (l2 below the curvature's negative part)."""
    A, y = _data(m=200, d=8, seed=3)
    obj = Objective("sigmoid-loss", A, y, np.full(200, 1 / 200), l2=0.01)
    L = obj.smoothness()
    rng = np.random.default_rng(4)
    lowest = np.inf
    for scale in (0.1, 1.0, 3.0, 10.0):
        for _ in range(20):
            x = scale * rng.standard_normal(obj.d)
            H = np.column_stack([obj.hessp(x, e) for e in np.eye(obj.d)])
            ev = np.linalg.eigvalsh((H + H.T) / 2)
            assert np.abs(ev).max() <= L * (1 + 1e-12)
            lowest = min(lowest, ev[0])
    assert lowest < 0
    assert obj.mu is None and not obj.convex
    with pytest.raises(ValueError, match="nonconvex"):
        solve_reference(obj)
    # the per-row constant of mini-batch step rules: c·max‖a_j‖² + l2
    assert obj.row_smoothness() == pytest.approx(sigmoid_curvature() * (A * A).sum(1).max() + 0.01)


# -- step rules ------------------------------------------------------------------------------------
def _alg(name="diana", spec="randk:k=3", n=4, d=20, rule=None, kind="logreg", L_max=2.0, L=1.5, mu=0.1, **opts):
    comp = compressors.make(spec).for_run(d=d, n_workers=n)
    options = {"step_multiplier": 1.0, "alpha": "theory", "momentum": 0.0, "batch": 0, "l1": 0.0, **opts}
    if rule is not None:
        options["step_rule"] = rule
    return algorithms.make(name, [comp] * n, d=d, n_workers=n, weights=np.full(n, 1 / n),
                           problem_info={"L_max": L_max, "L": L, "mu": mu, "kind": kind}, options=options)


def test_each_step_rule_gives_its_formula():
    n, L_max, L, mu = 4, 2.0, 1.5, 0.1
    om = 20 / 3 - 1                                                   # rand-k, d = 20, k = 3
    a = 1 / (1 + om)
    expect = {
        "flpytorch": 1 / (L_max * (1 + 4 * om / n)),
        "paper9107": 1 / (L_max * (1 + 2 * om / n)),
        "sadiev": min(a / (2 * mu), 1 / (L_max * (1 + 6 * om / n))),
        "unified": min(1 / mu, 1 / (L_max * (om + 1) / n + (om - 1) * L_max / n + L
                                    + 1.0001 * (2 * om / n) / (a / 2) * a * (L_max + L_max))),
        "horvath-thm4": 1 / (10 * L_max * math.sqrt(1 + (1 + om) / n) * (1 + (1 + om) + 1)),
    }
    assert set(expect) | {"learning-rate"} == set(STEP_RULES)
    for rule, gamma in expect.items():
        for name in ("diana", "dcgd"):                                # DCGD: the same γ as DIANA
            alg = _alg(name, rule=rule)
            assert alg.omega == pytest.approx(om) and alg.step_rule == rule
            assert alg.gamma == pytest.approx(gamma, rel=1e-14), rule
            assert alg.describe()["step_rule"] == rule and alg.describe()["step_formula"].startswith("1 * ")
    assert _alg(rule="paper9107", step_multiplier=3.0).gamma == pytest.approx(3 * expect["paper9107"])
    assert _alg(rule="learning-rate", learning_rate=0.25, step_multiplier=2.0).gamma == 0.5
    # shared randomness: one independent message, n = 1 in ω/n
    shared = _alg(spec="randk:k=3,shared_seed=true", rule="paper9107")
    assert shared.gamma == pytest.approx(1 / (L_max * (1 + 2 * om / 1)))


def test_default_step_rule_is_unchanged():
    """auto = flpytorch on strongly convex problems: γ = 1/(L_max(1 + 4ω/n)) as before."""
    for name in ("diana", "dcgd"):
        alg = _alg(name)                      # no run.step_rule at all (as older callers pass options)
        assert alg.step_rule == "flpytorch"
        assert alg.gamma == 1.0 / (2.0 * (1.0 + 4.0 * (20 / 3 - 1) / 4))
        assert _alg(name, rule="auto").gamma == alg.gamma
    assert config.defaults()["run"]["step_rule"] == "auto"


def test_auto_rule_per_problem_class():
    assert problem_class("ridge") == STRONGLY_CONVEX and problem_class("sigmoid-loss") == SMOOTH
    assert _alg(kind="sigmoid-loss", mu=None).step_rule == "horvath-thm4"
    mlp = _alg(kind="mlp", L_max=0.0, L=None, mu=None, learning_rate=0.05)
    assert mlp.step_rule == "learning-rate" and mlp.gamma == 0.05
    with pytest.raises(ConfigError, match="run.learning_rate is required"):
        _alg(kind="softmax", L_max=0.0, L=None, learning_rate=0.0)
    with pytest.raises(ConfigError, match="run.learning_rate is required"):
        learning_rate({"learning_rate": -1.0}, "x")


def test_unified_rule_with_minibatches_uses_expected_smoothness():
    A, y = _data(m=30, d=6, seed=5)
    obj = Objective("logreg", A, y, np.full(30, 1 / 30), l2=0.1)
    assert expected_smoothness(obj, 30) == obj.smoothness()
    b = 5
    want = 30 * (b - 1) / (b * 29) * obj.smoothness() + (30 - b) / (b * 29) * obj.row_smoothness()
    assert expected_smoothness(obj, b) == pytest.approx(want)
    assert obj.smoothness() <= expected_smoothness(obj, b) <= obj.row_smoothness()
    alg = _alg(spec="randk:k=3", d=6, rule="unified", batch=b, L_max=obj.smoothness(), L=obj.smoothness())
    ws = alg.worker_init(0, obj)
    alg.set_agreed(np.asarray(alg.agree_values(ws)))
    full = _alg(spec="randk:k=3", d=6, rule="unified", L_max=obj.smoothness(), L=obj.smoothness())
    assert alg.gamma < full.gamma                                     # batches: larger A_sgd, smaller γ
    assert _alg(spec="randk:k=3", d=6, rule="unified", L_max=obj.smoothness(), L=obj.smoothness(),
                batch=0).agree_values(ws) is None


# -- plan-time checks -------------------------------------------------------------------------------
def _problems(**settings):
    cfg = config.defaults()
    cfg["data"]["dataset"] = "breast-cancer"
    for key, value in settings.items():
        sec, k = key.split("__")
        cfg[sec][k] = value
    return check(cfg)


def test_plan_time_checks_of_problems_and_step_rules():
    ok = [dict(problem__kind="sigmoid-loss"),
          dict(problem__kind="sigmoid-loss", run__algorithm="dcgd", run__step_rule="learning-rate",
               run__learning_rate=0.1),
          dict(problem__kind="mlp", run__learning_rate=0.1),
          dict(problem__kind="softmax", run__algorithm="dcgd", run__learning_rate=0.1, run__momentum=0.9),
          dict(problem__kind="logreg", run__step_rule="sadiev"),
          dict(problem__kind="mlp", run__algorithm="local-sgd")]              # local SGD: 0.1 when not set
    for s in ok:
        assert _problems(**s) == [], s
    bad = {
        "unknown run.step_rule 'fast' for algorithm 'diana'; available: auto, flpytorch, paper9107, sadiev, "
        "unified, horvath-thm4, learning-rate": dict(run__step_rule="fast"),
        "run.learning_rate is required for 'diana' on problem.kind = 'mlp'": dict(problem__kind="mlp"),
        "run.step_rule = 'flpytorch' needs a strongly convex problem": dict(problem__kind="sigmoid-loss",
                                                                           run__step_rule="flpytorch"),
        "run.step_rule = 'horvath-thm4' needs a smoothness constant": dict(problem__kind="softmax",
                                                                          run__step_rule="horvath-thm4",
                                                                          run__learning_rate=0.1),
        "algorithm 'diana+' needs a strongly convex problem": dict(problem__kind="sigmoid-loss",
                                                                   run__algorithm="diana+"),
        "algorithm 'local-sgd' has no named step rules": dict(run__algorithm="local-sgd", run__step_rule="unified"),
    }
    for msg, s in bad.items():
        found = _problems(**s)
        assert len(found) == 1 and found[0].startswith(msg), (s, found)


def test_learning_rate_key_zero_means_not_set():
    cfg = config.defaults()
    assert cfg["run"]["learning_rate"] == 0.0
    with pytest.raises(ConfigError, match="run.learning_rate: must be >= 0"):
        config.apply_overrides(cfg, ["run.learning_rate=-0.5"])
    lsgd = algorithms.make("local-sgd", [compressors.make("identity")] * 2, d=4, n_workers=2,
                           weights=np.full(2, 0.5), problem_info={"segments": [("x", 0, 4, (4,))]},
                           options={"learning_rate": 0.0, "local_steps": 1, "batch": 0})
    assert lsgd.lr == 0.1


def test_experiment_file_selects_nonconvex_problems_and_step_rules(tmp_path):
    """What the DIANA-paper experiment files need: sigmoid-loss, softmax/mlp with dcgd/diana,
    run.step_rule and run.learning_rate, in [run], [sweep] and [[variant]] tables."""
    f = tmp_path / "nonconvex.toml"
    f.write_text('''
name = "nonconvex"
[data]
dataset = "breast-cancer"
[problem]
kind = "sigmoid-loss"
l2 = 0.05
[run]
compressor = "qsgd:s=2"
step_rule = "horvath-thm4"
step_multiplier = 10.0
tolerance = 1e-6
[sweep]
algorithm = ["diana", "dcgd"]
[[variant]]
label = "theory"
[[variant]]
label = "mlp"
problem.kind = "mlp"
run.step_rule = "learning-rate"
run.learning_rate = 0.1
run.momentum = 0.9
[[variant]]
label = "logreg-paper9107"
problem.kind = "logreg"
run.step_rule = "paper9107"
''')
    cfg = config.load_file(str(f))
    assert check(cfg) == []
    grid = config.expand(cfg)
    assert [(g["problem"]["kind"], g["run"]["step_rule"], g["run"]["algorithm"]) for g in grid] == [
        ("sigmoid-loss", "horvath-thm4", "diana"), ("sigmoid-loss", "horvath-thm4", "dcgd"),
        ("mlp", "learning-rate", "diana"), ("mlp", "learning-rate", "dcgd"),
        ("logreg", "paper9107", "diana"), ("logreg", "paper9107", "dcgd")]
    assert grid[2]["run"]["learning_rate"] == 0.1
    # the resolved config round-trips through the results file's TOML text
    back = config.merge(config.defaults(), config.tomllib.loads(config.to_toml(grid[2])), "results file")
    assert back["run"]["step_rule"] == "learning-rate" and back["problem"]["kind"] == "mlp"


def test_an_algorithm_opts_in_with_the_flag(monkeypatch):
    """The generic mechanism other algorithms (error feedback) use: ``nonconvex_ok`` + step rules."""
    from hpcgc.algorithms import REGISTRY
    from hpcgc.algorithms.base import LEARNING_RATE, NO_CONSTANT, Algorithm

    class Plain(Algorithm):
        pass

    class Opted(Algorithm):
        nonconvex_ok = True
        step_rules = {"mine": STRONGLY_CONVEX, LEARNING_RATE: NO_CONSTANT}
        auto_rules = {STRONGLY_CONVEX: "mine", NO_CONSTANT: LEARNING_RATE}

    monkeypatch.setitem(REGISTRY, "plain", (Plain, "test"))
    monkeypatch.setitem(REGISTRY, "opted", (Opted, "test"))
    r = {"algorithm": "plain", "step_rule": "auto", "learning_rate": 0.0}
    assert Plain.check_problem("logreg", r) is None
    assert ("Algorithms that run on it: dasha, dcgd, dgc, diana, diloco, ef, ef21, ef21-sgdm, local-sgd, marina, "
            "opted, signsgd-mv, vr-diana") in Plain.check_problem("mlp", r)
    r = {**r, "algorithm": "opted"}
    assert Opted.check_problem("logreg", r) is None and Opted.resolve_step_rule("ridge") == "mine"
    assert "run.learning_rate is required" in Opted.check_problem("softmax", r)
    assert Opted.check_problem("softmax", {**r, "learning_rate": 0.1}) is None
    assert Opted.check_problem("sigmoid-loss", r).startswith(
        "algorithm 'opted' has no default step rule on problem.kind = 'sigmoid-loss': set run.step_rule to "
        "'learning-rate'")
    assert Opted.check_problem("sigmoid-loss", {**r, "step_rule": LEARNING_RATE, "learning_rate": 0.1}) is None
