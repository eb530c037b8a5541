"""The deep MLP (problem.depth, issue 13): parameter count, gradients against central finite
differences on a ≥ 10⁶-parameter model, depth 1 identical to the one-hidden-layer model it replaces,
row blocks, initialisation, and the refusals (schema, plan time, memory)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

from hpcgc import config, models
from hpcgc.errors import ConfigError
from hpcgc.models import ClassifierProblem, Model, mlp_parameters
from hpcgc.run.setup import check


class OneHiddenLayer:
    """The MLP as it was before problem.depth (hpcgc/models.py at commit d70647a), verbatim in its
    arithmetic: the reference that depth = 1 must reproduce bit for bit."""

    def __init__(self, p, C, H):
        self.p, self.C, self.H = p, C, H
        self.shapes = [("W1", (p, H)), ("b1", (H,)), ("W2", (H, C)), ("b2", (C,))]
        self.d = p * H + H + H * C + C

    def views(self, x):
        out, start = {}, 0
        for name, shape in self.shapes:
            size = int(np.prod(shape))
            out[name] = x[start:start + size].reshape(shape)
            start += size
        return out

    def init(self, seed):
        x = np.zeros(self.d)
        rng = np.random.default_rng(seed)
        v = self.views(x)
        v["W1"][:] = rng.standard_normal(v["W1"].shape) * np.sqrt(2.0 / self.p)
        v["W2"][:] = rng.standard_normal(v["W2"].shape) * np.sqrt(2.0 / self.H)
        return x

    def loss_grad(self, x, X, labels, l2):
        v = self.views(x)
        z = np.asarray(X @ v["W1"]) + v["b1"]
        h = np.maximum(z, 0.0)
        logits = h @ v["W2"] + v["b2"]
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        probs = e / e.sum(axis=1, keepdims=True)
        m = X.shape[0]
        loss = -np.mean(np.log(probs[np.arange(m), labels] + 1e-300)) + 0.5 * l2 * float(np.dot(x, x))
        dlog = probs
        dlog[np.arange(m), labels] -= 1.0
        dlog /= m
        g = np.zeros(self.d)
        gv = self.views(g)
        gv["W2"][:] = h.T @ dlog
        gv["b2"][:] = dlog.sum(axis=0)
        dh = (dlog @ v["W2"].T) * (z > 0)
        gv["W1"][:] = np.asarray(X.T @ dh)
        gv["b1"][:] = dh.sum(axis=0)
        g += l2 * x
        return loss, g


def _data(m, p, C, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, p)), rng.integers(0, C, m)


def test_parameter_count_formula_matches_the_segments():
    for p, C, H, L in [(64, 10, 700, 3), (7, 3, 5, 1), (7, 3, 5, 4), (30, 2, 1, 2)]:
        m = Model("mlp", p, C, hidden=H, depth=L)
        assert m.d == mlp_parameters(p, C, H, L) == sum(b - a for _, a, b, _ in m.segments)
        assert [s[0] for s in m.segments] == [f"{t}{j}" for j in range(1, L + 2) for t in "Wb"]
        assert m.widths == [p] + [H] * L + [C]
        assert m.segments[-1][2] == m.d and all(m.segments[k][2] == m.segments[k + 1][1] for k in range(2 * L + 1))
    big = Model("mlp", 64, 10, hidden=700, depth=3)
    assert big.d == 64 * 700 + 700 + 2 * (700 * 700 + 700) + 700 * 10 + 10 == 1_033_910
    assert big.describe() == "mlp 64-700-700-700-10 (1033910 parameters)"


def test_million_parameter_gradient_matches_central_differences():
    """Every tensor of the 64-700-700-700-10 MLP (1 033 910 parameters): its largest gradient
    coordinate and two random ones against (f(x + h e_j) − f(x − h e_j)) / 2h, h = 1e-5."""
    X, y = _data(24, 64, 10)
    model = Model("mlp", 64, 10, hidden=700, depth=3)
    assert model.d >= 10**6
    rng = np.random.default_rng(1)
    x = model.init(5) + 0.01 * rng.standard_normal(model.d)      # nonzero biases too
    prob = ClassifierProblem(model, X, y, l2=1e-3)
    g = prob.grad(x)
    h = 1e-5
    checked = 0
    for name, a, b, _ in model.segments:
        seg = g[a:b]
        assert np.any(seg != 0), name
        for j in [a + int(np.argmax(np.abs(seg))), *(a + rng.choice(b - a, 2, replace=False))]:
            xp, xm = x.copy(), x.copy()
            xp[j] += h
            xm[j] -= h
            fd = (prob.loss(xp) - prob.loss(xm)) / (2 * h)
            assert abs(fd - g[j]) <= 1e-8 + 1e-5 * abs(g[j]), (name, j, g[j], fd)
            checked += 1
    assert checked == 3 * len(model.segments) == 24


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_small_deep_gradient_matches_finite_differences_everywhere(depth):
    X, y = _data(40, 7, 3, seed=depth)
    model = Model("mlp", 7, 3, hidden=5, depth=depth)
    prob = ClassifierProblem(model, X, y, l2=0.01)
    x = model.init(1) + 0.1 * np.random.default_rng(2).standard_normal(model.d)
    assert scipy.optimize.check_grad(prob.loss, prob.grad, x) < 1e-5 * max(1.0, np.linalg.norm(prob.grad(x)))
    rows = np.arange(10)
    assert np.allclose(prob.grad(x, rows), ClassifierProblem(model, X[rows], y[rows], 0.01).grad(x))


@pytest.mark.parametrize("sparse", [False, True])
def test_depth_one_reproduces_the_one_hidden_layer_model_bit_for_bit(sparse):
    """Same seed ⇒ same x⁰ and the same SGD iterates, losses and accuracies as the model before
    problem.depth existed (dense and CSR inputs)."""
    X, y = _data(300, 64, 10, seed=3)
    if sparse:
        X = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    ref, model = OneHiddenLayer(64, 10, 32), Model("mlp", 64, 10, hidden=32)
    assert model.depth == 1 and model.d == ref.d
    xr, xn = ref.init(7), model.init(7)
    assert np.array_equal(xr, xn)
    prob = ClassifierProblem(model, X, y, l2=1e-4)
    rng = np.random.default_rng(0)
    for _ in range(25):
        rows = rng.choice(300, 32, replace=False)
        gr = ref.loss_grad(xr, prob.A[rows], y[rows], 1e-4)[1]
        gn = prob.grad(xn, rows)
        assert np.array_equal(gr, gn)
        xr -= 0.1 * gr
        xn -= 0.1 * gn
    lr, gr = ref.loss_grad(xr, prob.A, y, 1e-4)
    assert prob.loss(xn) == lr and np.array_equal(prob.grad(xn), gr)


def test_row_blocks_sum_to_the_one_pass_gradient_and_out_is_written():
    X, y = _data(257, 9, 4, seed=4)
    model = Model("mlp", 9, 4, hidden=6, depth=3)
    prob = ClassifierProblem(model, X, y, l2=1e-3)
    x = model.init(3)
    loss, g, acc = prob.loss(x), prob.grad(x), prob.accuracy(x)
    model.block_rows = 50                       # 6 blocks, the last one short
    assert np.allclose(prob.grad(x), g, rtol=1e-12, atol=1e-15)
    assert abs(prob.loss(x) - loss) <= 1e-13 and prob.accuracy(x) == acc
    out = np.full(model.d, np.nan)
    assert prob.grad(x, out=out) is out and np.allclose(out, g, rtol=1e-12, atol=1e-15)
    out2 = np.full(model.d, np.nan)
    assert prob.grad(x, np.arange(20), out=out2) is out2 and np.array_equal(out2, prob.grad(x, np.arange(20)))


def test_he_initialisation_deterministic_from_the_seed():
    model = Model("mlp", 64, 10, hidden=700, depth=3)
    a, b, c = model.init(11), model.init(11), model.init(12)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    v = model.views(a)
    for j, fan_in in enumerate(model.widths[:-1], start=1):
        assert abs(v[f"W{j}"].std() / np.sqrt(2.0 / fan_in) - 1) < 0.05, j       # N(0, 2/fan_in)
        assert not np.any(v[f"b{j}"])


def test_bad_sizes_are_refused_with_their_key():
    for key, value in (("depth", 0), ("hidden", 0), ("depth", -1)):
        with pytest.raises(ConfigError, match=f"problem.{key}: must be > 0, got {value}"):
            config.merge(config.defaults(), {"problem": {key: value}}, "test")
    for kw, what in ((dict(hidden=0), "problem.hidden"), (dict(depth=0), "problem.depth")):
        with pytest.raises(ConfigError, match=what):
            Model("mlp", 8, 3, **{"hidden": 4, "depth": 1, **kw})
    cfg = config.defaults()
    cfg["problem"].update(kind="mlp", hidden=40_000, depth=3)
    cfg["run"].update(algorithm="local-sgd", compressor="identity")
    msgs = check(cfg)
    assert len(msgs) == 1 and "problem.hidden = 40000 with problem.depth = 3" in msgs[0] and "2^31" in msgs[0], msgs
    cfg["problem"].update(hidden=700, depth=3)
    assert check(cfg) == []
    cfg["problem"]["depth"] = 0                 # past the schema (a hand-built config): still refused at plan time
    assert any("problem.depth must be >= 1" in m for m in check(cfg))


def test_a_model_too_large_for_the_machine_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(models, "_physical_memory", lambda: 2**30)          # a 1 GiB machine
    with pytest.raises(ConfigError, match=r"mlp 64-6000-6000-10 .* GiB per rank, more than this machine's 1 GiB"):
        Model("mlp", 64, 10, hidden=6000, depth=2)
    assert Model("mlp", 64, 10, hidden=700, depth=3).d == 1_033_910         # 63 MiB: fine
