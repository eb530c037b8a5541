"""Softmax regression and the MLP (DAGC workloads): analytic gradients against finite differences."""
import io

import numpy as np
import pytest
import scipy.optimize

from hpcgc.errors import ConfigError
from hpcgc.models import ClassifierProblem, Model
from hpcgc.progress import Progress


@pytest.mark.parametrize("kind", ["softmax", "mlp"])
def test_gradient_matches_finite_differences(kind):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 7))
    labels = rng.integers(0, 3, 40)
    model = Model(kind, 7, 3, hidden=5)
    prob = ClassifierProblem(model, X, labels, l2=0.01)
    x = model.init(1) + 0.1 * rng.standard_normal(model.d)
    assert scipy.optimize.check_grad(prob.loss, prob.grad, x) < 1e-5 * max(1.0, np.linalg.norm(prob.grad(x)))
    rows = np.arange(10)
    sub = ClassifierProblem(model, X[rows], labels[rows], l2=0.01)
    assert np.allclose(prob.grad(x, rows), sub.grad(x))
    assert sum(b - a for _, a, b, _ in model.segments) == model.d


def test_softmax_learns_separable_data():
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((4, 5)) * 4
    labels = rng.integers(0, 4, 400)
    X = centers[labels] + rng.standard_normal((400, 5))
    prob = ClassifierProblem(Model("softmax", 5, 4), X, labels, l2=1e-4)
    x = np.zeros(prob.d)
    for _ in range(300):
        x -= 0.5 * prob.grad(x)
    assert prob.accuracy(x) > 0.95


def test_model_errors():
    with pytest.raises(ConfigError, match="classes"):
        Model("softmax", 3, 1)
    with pytest.raises(ConfigError, match="unknown model"):
        Model("cnn", 3, 2)


def test_progress_plain_lines_in_logs_and_live_line_on_a_terminal():
    log = io.StringIO()
    p = Progress("run", 100, stream=log)
    p.interval = 0.0
    p.update(50, 1e-3, 0.5)
    p.update(100, 1e-4, 1.0)
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "it 50/100" in lines[0] and "\r" not in log.getvalue()

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    q = Progress("run", 10, stream=tty)
    q.interval = 0.0
    q.update(5, 1e-3, 0.1)
    q.close()
    assert tty.getvalue().startswith("\r[") and "\n" not in tty.getvalue()
