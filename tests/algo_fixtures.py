"""Shared by the algorithms' by-hand tests (test_ef, test_ef21sgdm_dasha, test_diloco,
test_dgc_signsgd): three real logistic-regression shards on random data and an algorithm built the
way ``hpcgc.run.setup`` builds it, with every other run option at its default."""
from __future__ import annotations

import numpy as np

from hpcgc import compressors, config
from hpcgc.problems import Objective

D, N = 12, 3


def shards(seed=0, n=N):
    """n ≤ 3 logistic-regression shards f_i (20, 25, 30 rows; no ties in the gradients)."""
    rng = np.random.default_rng(seed)
    out = []
    for m in (20, 25, 30)[:n]:
        A = rng.normal(size=(m, D))
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
        out.append(Objective("logreg", A, y, np.full(m, 1.0 / m), 0.1, 0.0))
    return out


def options(**kw):
    """The run options: the defaults, updated by ``kw``."""
    r = config.defaults()["run"]
    r.update(kw)
    return {**r, "l1": 0.0}


def make(cls, spec, L=2.0, n=N, for_run=False, **opts):
    """``cls`` with compressor ``spec`` on every one of n workers (``for_run``: bound to d and n first)."""
    comp = compressors.make(spec)
    if for_run:
        comp = comp.for_run(d=D, n_workers=n)
    return cls([comp] * n, d=D, n_workers=n, weights=np.full(n, 1.0 / n),
               problem_info={"L_max": L, "L": L, "mu": 0.1, "kind": "logreg"}, options=options(**opts))
