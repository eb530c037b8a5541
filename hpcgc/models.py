"""Multi-class models for the DAGC setting: softmax (multinomial logistic) regression and a
one-hidden-layer ReLU MLP, in plain numpy with analytic gradients (no deep-learning framework).

Parameters live in one flat float64 vector; ``segments`` names the tensors in it (W, b, ...), so
compressors can be applied per tensor as DAGC does (Lu et al., INFOCOM 2023; `spec/dagc.md` A.4).
A :class:`ClassifierProblem` is one worker's (or the server's) view: the model plus a data shard,
with the same ``grad(x, rows)`` interface as :class:`hpcgc.problems.Objective`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .errors import ConfigError

MODEL_KINDS = ("softmax", "mlp")


class Model:
    def __init__(self, kind: str, n_features: int, n_classes: int, hidden: int = 32):
        if kind not in MODEL_KINDS:
            raise ConfigError(f"unknown model {kind!r}; available: {', '.join(MODEL_KINDS)}")
        if n_classes < 2:
            raise ConfigError(f"a classifier needs at least 2 classes, the data has {n_classes}")
        if kind == "mlp" and hidden < 1:
            raise ConfigError(f"problem.hidden must be >= 1, got {hidden}")
        self.kind, self.p, self.C, self.H = kind, n_features, n_classes, hidden
        shapes = ([("W", (self.p, self.C)), ("b", (self.C,))] if kind == "softmax" else
                  [("W1", (self.p, self.H)), ("b1", (self.H,)), ("W2", (self.H, self.C)), ("b2", (self.C,))])
        self.segments = []
        start = 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            self.segments.append((name, start, start + size, shape))
            start += size
        self.d = start

    def views(self, x):
        return {name: x[a:b].reshape(shape) for name, a, b, shape in self.segments}

    def init(self, seed: int = 0) -> np.ndarray:
        """Zeros for softmax (convex); He-style random weights for the MLP (seeded)."""
        x = np.zeros(self.d)
        if self.kind == "mlp":
            rng = np.random.default_rng(seed)
            v = self.views(x)
            v["W1"][:] = rng.standard_normal(v["W1"].shape) * np.sqrt(2.0 / self.p)
            v["W2"][:] = rng.standard_normal(v["W2"].shape) * np.sqrt(2.0 / self.H)
        return x

    def _logits(self, x, X):
        v = self.views(x)
        if self.kind == "softmax":
            return np.asarray(X @ v["W"]) + v["b"], None
        z = np.asarray(X @ v["W1"]) + v["b1"]
        h = np.maximum(z, 0.0)
        return h @ v["W2"] + v["b2"], (z, h)

    def loss_grad(self, x, X, labels, l2: float, need_grad: bool = True):
        """Mean cross-entropy + (l2/2)‖x‖² and its gradient."""
        logits, cache = self._logits(x, X)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        probs = e / e.sum(axis=1, keepdims=True)
        m = X.shape[0]
        loss = -np.mean(np.log(probs[np.arange(m), labels] + 1e-300)) + 0.5 * l2 * float(np.dot(x, x))
        if not need_grad:
            return loss, None
        dlog = probs
        dlog[np.arange(m), labels] -= 1.0
        dlog /= m
        g = np.zeros(self.d)
        gv = self.views(g)
        if self.kind == "softmax":
            gv["W"][:] = np.asarray(X.T @ dlog)
            gv["b"][:] = dlog.sum(axis=0)
        else:
            z, h = cache
            v = self.views(x)
            gv["W2"][:] = h.T @ dlog
            gv["b2"][:] = dlog.sum(axis=0)
            dh = (dlog @ v["W2"].T) * (z > 0)
            gv["W1"][:] = np.asarray(X.T @ dh)
            gv["b1"][:] = dh.sum(axis=0)
        g += l2 * x
        return loss, g

    def predict(self, x, X) -> np.ndarray:
        return np.argmax(self._logits(x, X)[0], axis=1)


class ClassifierProblem:
    """A model on a data shard: ``grad(x, rows)``, ``loss(x)``, ``accuracy(x)``."""

    def __init__(self, model: Model, X, labels, l2: float):
        self.model = model
        self.A = X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.l2 = float(l2)
        self.l1 = 0.0
        self.kind = model.kind
        self.d = model.d

    def grad(self, x, rows=None):
        if rows is None:
            return self.model.loss_grad(x, self.A, self.labels, self.l2)[1]
        return self.model.loss_grad(x, self.A[rows], self.labels[rows], self.l2)[1]

    def loss(self, x) -> float:
        return self.model.loss_grad(x, self.A, self.labels, self.l2, need_grad=False)[0]

    full_loss = loss

    def accuracy(self, x) -> float:
        return float(np.mean(self.model.predict(x, self.A) == self.labels))

    def smoothness(self) -> float:
        return float("nan")      # not used: local SGD takes a learning rate
