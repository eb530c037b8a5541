"""DAGC allocations against an independent optimum (scipy) and the authors' rule."""
import numpy as np
import pytest
import scipy.optimize

from hpcgc import allocation
from hpcgc.errors import ConfigError


def scipy_optimum(p, budget):
    """min Σ p_i²/δ_i² s.t. Σ δ_i = n·budget, 0 < δ_i ≤ 1, solved by SLSQP in the scaled
    variables u = δ/budget (so the problem is well conditioned for any budget)."""
    n = p.size
    q = p / p.max()
    cons = {"type": "eq", "fun": lambda u: u.sum() - n, "jac": lambda u: np.ones(n)}
    res = scipy.optimize.minimize(lambda u: np.sum(q ** 2 / u ** 2), np.ones(n),
                                  jac=lambda u: -2 * q ** 2 / u ** 3, bounds=[(1e-6, 1.0 / budget)] * n,
                                  constraints=[cons], method="SLSQP", options={"ftol": 1e-16, "maxiter": 2000})
    # SLSQP may end on "positive directional derivative" at machine precision: accept a feasible point
    assert abs(res.x.sum() - n) < 1e-8 and res.x.max() <= 1 / budget + 1e-12, res.message
    return res.x * budget


@pytest.mark.parametrize("seed", range(12))
def test_dagc_equals_scipy_optimum(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 16))
    volumes = rng.lognormal(0, 1.5 if seed % 2 else 0.3, n) * 1000
    budget = float(rng.choice([0.01, 0.1, 0.3, 0.6]))
    delta = allocation.allocate("dagc", volumes, budget)
    p = volumes / volumes.sum()
    ref = scipy_optimum(p, budget)
    assert delta.sum() == pytest.approx(n * budget, rel=1e-12)
    assert np.all(delta <= 1.0) and np.all(delta > 0)
    assert np.allclose(delta, ref, rtol=1e-4, atol=1e-6)
    assert np.sum(p ** 2 / delta ** 2) <= np.sum(p ** 2 / ref ** 2) * (1 + 1e-9)


def test_dagc_caps_at_one_and_still_spends_the_budget():
    volumes = np.array([1000.0, 10, 10, 10])
    delta = allocation.allocate("dagc", volumes, 0.5)
    assert delta[0] == 1.0 and delta.sum() == pytest.approx(2.0)
    p = volumes / volumes.sum()
    assert np.allclose(delta, scipy_optimum(p, 0.5), atol=1e-6)


def test_equal_volumes_give_uniform():
    for name in ("dagc", "dagc-reference"):
        assert np.allclose(allocation.allocate(name, [50] * 10, 0.1), 0.1)
    assert np.allclose(allocation.allocate("dagc-a", [50] * 10, 0.3), 0.3)


def test_dagc_a_harmonic_mean():
    rng = np.random.default_rng(3)
    volumes = rng.integers(1, 1000, 9)
    lam = allocation.allocate("dagc-a", volumes, 0.02)
    assert np.mean(1 / lam) == pytest.approx(1 / 0.02, rel=1e-12)
    order = np.argsort(volumes)
    assert np.all(np.diff(lam[order]) <= 1e-15)          # more data, smaller threshold


def test_dagc_reference_reproduces_the_spec_example():
    # skew-10 volumes of the authors' generator (geometric from 10 to 1 over n-1, last repeated);
    # spec/dagc.md §A.5.1 lists the authors' output for 10 clients, skew 10, δ̄ = 0.1
    n = 10
    v = np.logspace(np.log10(10), 0, n - 1)
    v = np.append(v, v[-1])
    delta = allocation.allocate("dagc-reference", v, 0.1)
    assert delta.sum() == pytest.approx(n * 0.1)
    expected = [0.210, 0.174, 0.143, 0.118, 0.098, 0.045, 0.067, 0.055, 0.045, 0.045]
    assert np.allclose(delta, expected, atol=6e-4)


def test_dagc_reference_demotes_a_client():
    v = np.array([10.0, 7.0, 5.0, 3.0, 1.0])
    delta = allocation.allocate("dagc-reference", v, 0.2)
    assert delta.sum() == pytest.approx(1.0)
    w = (v / v.sum()) ** (2 / 3)
    ratio = delta / w
    assert np.ptp(ratio) > 1e-6        # one client's weight replaced by the reference's
    assert np.sum(np.abs(ratio - np.median(ratio)) > 1e-9) == 1


def test_kept_counts():
    assert list(allocation.kept_counts([0.1, 0.0001, 1.5], 30)) == [3, 1, 30]


@pytest.mark.parametrize("name,budget", [("dagc", 0.0), ("dagc", 1.5), ("uniform", -0.1), ("dagc-a", 0.0)])
def test_bad_budgets(name, budget):
    with pytest.raises(ConfigError, match="budget"):
        allocation.allocate(name, [1, 2, 3], budget)


def test_bad_volumes_and_names():
    with pytest.raises(ConfigError, match="worker 1"):
        allocation.allocate("dagc", [3, 0, 2], 0.1)
    with pytest.raises(ConfigError, match="unknown allocation"):
        allocation.allocate("greedy", [3, 1, 2], 0.1)
