"""Multi-class models for the DAGC and nonconvex settings: softmax (multinomial logistic) regression
and a ReLU MLP of ``problem.depth`` hidden layers of ``problem.hidden`` units, in plain numpy with
analytic gradients (backpropagation; no deep-learning framework).

Parameters live in one flat float64 vector; ``segments`` names the tensors in it (W1, b1, W2, ...),
so compressors can be applied per tensor as DAGC does (Lu et al., INFOCOM 2023; `spec/dagc.md` A.4).
The MLP with p inputs, C classes, width H and depth L has

    d = p·H + H + (L − 1)·(H² + H) + H·C + C        (:func:`mlp_parameters`)

parameters: 64 inputs, H = 700, L = 3, C = 10 give 1 033 910. Forward and backward passes are one
BLAS matrix product per layer on the whole batch (Goodfellow, Bengio, Courville, *Deep Learning*,
2016, §6.5, Algorithms 6.3-6.4); each tensor's gradient is written straight into its slice of the
flat gradient vector. Memory beyond the parameter vectors is the activations of one block of rows
(at most ``BLOCK_BYTES``; longer batches — the full-data evaluation on rank 0 — are processed block
by block and summed). A :class:`ClassifierProblem` is one worker's (or the server's) view: the
model plus a data shard, with the same ``grad(x, rows)`` interface as
:class:`hpcgc.problems.Objective`.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import ConfigError
from .matrix import issparse

MODEL_KINDS = ("softmax", "mlp")
MAX_PARAMETERS = 2**31
"""Largest parameter count a model may have: one float64 vector is then 16 GiB, and the sparse wire
formats count coordinates in 32-bit fields."""
STATE_VECTORS = 8
"""Parameter-sized float64 vectors one rank holds, roughly (iterate, gradient, the algorithm's
states, the decoded sum): a model whose 8·d·STATE_VECTORS bytes exceed the machine's memory is
refused before any vector is allocated."""
BLOCK_BYTES = 2**27
"""Activation memory of one block of rows (128 MiB): longer batches are processed block by block."""


def mlp_parameters(n_features: int, n_classes: int, hidden: int, depth: int) -> int:
    """d = p·H + H + (L − 1)·(H² + H) + H·C + C: weights and biases of L hidden ReLU layers of H
    units between p inputs and C outputs."""
    return n_features * hidden + hidden + (depth - 1) * (hidden * hidden + hidden) + hidden * n_classes + n_classes


def check_mlp_size(hidden: int, depth: int) -> None:
    """Plan-time refusal (no data): an MLP whose hidden layers alone exceed MAX_PARAMETERS, whatever
    the data's feature and class counts (at least 1 and 2)."""
    if hidden < 1:
        raise ConfigError(f"problem.hidden must be >= 1, got {hidden}")
    if depth < 1:
        raise ConfigError(f"problem.depth must be >= 1 (hidden layers), got {depth}")
    low = mlp_parameters(1, 2, hidden, depth)
    if low > MAX_PARAMETERS:
        raise ConfigError(f"problem.hidden = {hidden} with problem.depth = {depth} gives more than {low:.3g} "
                          f"parameters; at most {MAX_PARAMETERS:.3g} (2^31) are supported "
                          f"(d = p·H + H + (depth − 1)(H² + H) + H·C + C)")


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class Model:
    def __init__(self, kind: str, n_features: int, n_classes: int, hidden: int = 32, depth: int = 1):
        if kind not in MODEL_KINDS:
            raise ConfigError(f"unknown model {kind!r}; available: {', '.join(MODEL_KINDS)}")
        if n_classes < 2:
            raise ConfigError(f"a classifier needs at least 2 classes, the data has {n_classes}")
        if kind == "mlp":
            check_mlp_size(hidden, depth)
        self.kind, self.p, self.C, self.H = kind, n_features, n_classes, hidden
        self.depth = depth if kind == "mlp" else 0
        if kind == "softmax":
            widths, names = [self.p, self.C], [("W", "b")]
        else:
            widths = [self.p] + [hidden] * depth + [self.C]
            names = [(f"W{j}", f"b{j}") for j in range(1, depth + 2)]
        self.widths = widths
        self.layers = names                      # (weight, bias) segment names, input to output
        shapes = []
        for (w, b), fan_in, fan_out in zip(names, widths[:-1], widths[1:]):
            shapes += [(w, (fan_in, fan_out)), (b, (fan_out,))]
        self.segments = []
        start = 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            self.segments.append((name, start, start + size, shape))
            start += size
        self.d = start
        if self.d > MAX_PARAMETERS:
            raise ConfigError(f"{self.describe()}: more than {MAX_PARAMETERS:.3g} (2^31) parameters are not supported")
        mem = _physical_memory()
        if mem and 8 * self.d * STATE_VECTORS > mem:
            raise ConfigError(f"{self.describe()}: {STATE_VECTORS} float64 vectors of d = {self.d} need "
                              f"{8 * self.d * STATE_VECTORS / 2**30:.3g} GiB per rank, more than this machine's "
                              f"{mem / 2**30:.3g} GiB: make problem.hidden or problem.depth smaller")
        # rows per block: the activations of all layers (and the backward temporaries) within BLOCK_BYTES
        self.block_rows = max(1, BLOCK_BYTES // (8 * 2 * sum(widths[1:])))
        self._tmp = None

    def describe(self) -> str:
        """E.g. 'mlp 64-700-700-700-10 (1033910 parameters)'."""
        return f"{self.kind} {'-'.join(map(str, self.widths))} ({self.d} parameters)"

    def views(self, x):
        return {name: x[a:b].reshape(shape) for name, a, b, shape in self.segments}

    def init(self, seed: int = 0) -> np.ndarray:
        """Zeros for softmax (convex); for the MLP He (Kaiming) normal weights N(0, 2/fan_in) in
        every layer, input to output, biases 0 (He et al., ICCV 2015, eq. 10), drawn from
        ``default_rng(seed)``: deterministic, and depth 1 draws exactly what it always did."""
        x = np.zeros(self.d)
        if self.kind == "mlp":
            rng = np.random.default_rng(seed)
            v = self.views(x)
            for (w, _), fan_in in zip(self.layers, self.widths[:-1]):
                v[w][:] = rng.standard_normal(v[w].shape) * np.sqrt(2.0 / fan_in)
        return x

    def _forward(self, v, X, keep: bool):
        """Logits of the rows X, and (``keep``) the post-ReLU activations of every hidden layer."""
        acts = []
        a = X
        last = len(self.layers) - 1
        for j, (w, b) in enumerate(self.layers):
            z = np.asarray(a @ v[w])
            z += v[b]
            if j < last:
                np.maximum(z, 0.0, out=z)          # ReLU in place: z > 0 ⇔ h > 0, so h is all backprop needs
                if keep:
                    acts.append(z)
            a = z
        return a, acts

    def layer_range(self, j: int) -> tuple[int, int]:
        """[a, b) of layer j's weight and bias in the flat vector (contiguous: W_j then b_j)."""
        return self.segments[2 * j][1], self.segments[2 * j + 1][2]

    def buckets(self) -> list[tuple[int, int]]:
        """The layers' ranges in the order the backward pass completes them (output layer first):
        the buckets of ``run.overlap`` (:mod:`hpcgc.exchange.overlap`)."""
        return [self.layer_range(j) for j in range(len(self.layers) - 1, -1, -1)]

    def _block(self, v, X, labels, m: int, g, gv, layer_done=None):
        """Σ −log p(label) over the rows X and, if ``g`` is given, their share of the mean
        cross-entropy's gradient (1/m of the sum) written into every tensor of g; ``layer_done(j)``
        after layer j's tensors are written (output layer first)."""
        logits, acts = self._forward(v, X, keep=g is not None)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        probs = e / e.sum(axis=1, keepdims=True)
        rows = np.arange(X.shape[0])
        nll = -np.sum(np.log(probs[rows, labels] + 1e-300))
        if g is None:
            return nll
        dz = probs                                  # ∂/∂logits of the mean cross-entropy: (p − onehot)/m
        dz[rows, labels] -= 1.0
        dz /= m
        for j in range(len(self.layers) - 1, -1, -1):
            w, b = self.layers[j]
            if j == 0 and issparse(X):
                gv[w][:] = np.asarray(X.T @ dz)
            else:
                np.matmul((X if j == 0 else acts[j - 1]).T, dz, out=gv[w])
            np.sum(dz, axis=0, out=gv[b])
            if layer_done is not None:
                layer_done(j)
            if j > 0:
                dz = dz @ v[w].T
                dz *= acts[j - 1] > 0
        return nll

    def loss_grad(self, x, X, labels, l2: float, need_grad: bool = True, out=None, ready=None):
        """Mean cross-entropy + (l2/2)‖x‖² and its gradient (written into ``out`` if given, a
        d-vector). Rows are taken ``block_rows`` at a time: one block (every mini-batch, the
        bundled data sets) is one pass.

        ``ready(a, b)`` (``run.overlap``): called as soon as the gradient's slice [a, b) — one layer's
        weight and bias, l2 term included — is final, output layer first (:meth:`buckets`); with one
        block that is right after the layer's backward step, with several after the last block. The
        l2 term is then added layer by layer: the same elementwise operations, the same bits."""
        m = X.shape[0]
        v = self.views(x)
        g = gv = None
        if need_grad:
            g = np.empty(self.d) if out is None else out
            gv = self.views(g)
        step = self.block_rows
        if ready is not None and need_grad and m <= step:
            tmp = self._scratch()

            def layer_done(j):
                a, b = self.layer_range(j)
                g[a:b] += np.multiply(x[a:b], l2, out=tmp[a:b])
                ready(a, b)
            nll = self._block(v, X, labels, m, g, gv, layer_done)
            return nll / m + 0.5 * l2 * float(np.dot(x, x)), g
        nll = self._block(v, X[:step], labels[:step], m, g, gv) if m > step else self._block(v, X, labels, m, g, gv)
        if m > step:
            sv = self.views(self._scratch()) if need_grad else None
            for a in range(step, m, step):
                nll += self._block(v, X[a:a + step], labels[a:a + step], m, self._tmp if need_grad else None, sv)
                if need_grad:
                    g += self._tmp
        loss = nll / m + 0.5 * l2 * float(np.dot(x, x))
        if not need_grad:
            return loss, None
        g += np.multiply(x, l2, out=self._scratch())
        if ready is not None:
            for a, b in self.buckets():
                ready(a, b)
        return loss, g

    def __getstate__(self):
        return {**self.__dict__, "_tmp": None}      # broadcast to every rank: without the scratch

    def _scratch(self) -> np.ndarray:
        """One d-vector of scratch space, allocated once per model (no page faults per call)."""
        if self._tmp is None:
            self._tmp = np.empty(self.d)
        return self._tmp

    def predict(self, x, X) -> np.ndarray:
        v = self.views(x)
        step = self.block_rows
        return np.concatenate([np.argmax(self._forward(v, X[a:a + step], keep=False)[0], axis=1)
                               for a in range(0, X.shape[0], step)] or [np.zeros(0, dtype=np.int64)])


class ClassifierProblem:
    """A model on a data shard: ``grad(x, rows)``, ``loss(x)``, ``accuracy(x)``."""

    def __init__(self, model: Model, X, labels, l2: float):
        self.model = model
        self.A = X.tocsr() if issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.l2 = float(l2)
        self.l1 = 0.0
        self.kind = model.kind
        self.d = model.d

    def grad(self, x, rows=None, out=None, ready=None):
        """∇f(x) on the shard (or its ``rows``), a new d-vector or written into ``out``; ``ready(a,
        b)`` as each layer's slice is final (:meth:`Model.loss_grad`)."""
        if rows is None:
            return self.model.loss_grad(x, self.A, self.labels, self.l2, out=out, ready=ready)[1]
        return self.model.loss_grad(x, self.A[rows], self.labels[rows], self.l2, out=out, ready=ready)[1]

    def loss(self, x) -> float:
        return self.model.loss_grad(x, self.A, self.labels, self.l2, need_grad=False)[0]

    full_loss = loss

    def accuracy(self, x) -> float:
        return float(np.mean(self.model.predict(x, self.A) == self.labels))

    def smoothness(self) -> float:
        return float("nan")      # not used: local SGD takes a learning rate
