"""Planning and data set-up: everything a run needs before its first iteration.

``plan`` expands the sweep and checks every grid point without data (names, parameters, the
algorithm × compressor × collective × server combination), identically on every rank.
:class:`DataCache` builds each (data, partition, problem) set-up once: rank 0 loads and partitions,
scatters the shards, solves the reference optimum; every rank gets what its role needs.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from .. import algorithms, allocation, compressors, config, data, exchange
from ..errors import ConfigError, UserError
from ..exchange import downlink
from ..models import MODEL_KINDS, ClassifierProblem, Model, check_mlp_size
from ..problems import BINARY_KINDS, CONVEX_KINDS, Objective, cached_reference
from ..problems import KINDS as LINEAR_KINDS
from ..transport import PHASES, Transport
from .checkpoint import parse_every

PROBLEM_KINDS = LINEAR_KINDS + MODEL_KINDS
PER_ITERATION_BYTES = len(PHASES) * 8  # one float64 per phase per iteration (run.per_iteration_times)
PER_ITERATION_LIMIT = 2**30

# -- planning (identical on every rank, no data needed) -------------------------------------------
@dataclass
class RunPlan:
    index: int
    run_id: str
    cfg: dict


def check(cfg: dict, out=None) -> list[str]:
    """Every problem that can be found without reading data, one message each (empty: valid).

    The one place the checks live: ``validate`` prints them, every run calls this (through
    :func:`plan`) before any data set is read or any optimum solved. Per grid point: names and
    parameters of the algorithm, compressor, allocation, problem; algorithm × compressor (biased /
    unbiased), × problem kind, × collective, × server mode; parameter ranges; the data set exists (a
    file is not opened) and the partition scheme parses. ``out``: the results file must be creatable.

    Independent mistakes are all reported. Within one grid point, the algorithm × compressor ×
    problem × collective chain reports its first refusal only (the next ones usually follow from
    it). The same check failing in several grid points is one line, with the count.
    """
    found: dict = {}                      # key -> [message, grid points]

    def note(key, exc):
        msg = str(exc)
        if key in found:
            found[key][1] += 1
        else:
            found[key] = [msg, 1]

    for rc in config.expand(cfg):
        r = rc["run"]
        alg_cls = comp = None
        try:
            alg_cls = algorithms.get(r["algorithm"])
        except UserError as exc:
            note(("algorithm", str(r["algorithm"])), exc)
        try:
            comp = compressors.make(r["compressor"])
        except UserError as exc:
            note(("compressor", str(r["compressor"])), exc)
        try:
            allocation.check_name(r["allocation"])
            if (r["allocation"] != "uniform" or r["budget"] > 0) and r["budget_unit"] == "fraction":
                allocation.check_budget(r["allocation"], r["budget"])
        except UserError as exc:
            note(("allocation", str(r["allocation"]), str(r["budget"])), exc)
        try:
            data.check_spec(rc["data"]["dataset"], rc["data"]["partition"])
        except UserError as exc:
            note(("data", str(rc["data"]["dataset"]), str(rc["data"]["partition"])), exc)
        for key, msg in _check_point(rc, alg_cls, comp):
            note(key, msg)
    if out is not None:
        try:
            _check_writable(out)
        except UserError as exc:
            note(("out",), exc)
    return [msg + (f" (and in {n - 1} more grid point{'s' if n > 2 else ''})" if n > 1 else "")
            for msg, n in found.values()]


def _check_point(rc: dict, alg_cls, comp) -> list[tuple]:
    """The problems of one grid point that need its algorithm class and compressor, as (key, message):
    independent parameters each, and the first refusal of the algorithm × compressor × problem ×
    collective chain."""
    r = rc["run"]
    out = []
    kind = rc["problem"]["kind"]
    if kind not in PROBLEM_KINDS:
        out.append((("kind", kind), f"unknown problem.kind {kind!r}; available: {', '.join(PROBLEM_KINDS)}"))
    if kind == "mlp":
        try:
            check_mlp_size(rc["problem"]["hidden"], rc["problem"]["depth"])
        except ConfigError as exc:
            out.append((("mlp-size", rc["problem"]["hidden"], rc["problem"]["depth"]), str(exc)))
    if not 0.0 <= r["momentum"] < 1.0:
        out.append((("momentum", r["momentum"]), f"run.momentum must be in [0, 1), got {r['momentum']!r}"))
    if isinstance(r["alpha"], str) and r["alpha"] != "theory":
        out.append((("alpha", r["alpha"]), f"run.alpha must be a number in (0, 1] or 'theory', got {r['alpha']!r}"))
    prob = r.get("probability", "theory")
    if prob != "theory" and (isinstance(prob, str) or not 0.0 < prob <= 1.0):
        out.append((("probability", str(prob)), f"run.probability must be in (0, 1] or 'theory', got {prob!r}"))
    try:
        parse_every(r["checkpoint_every"])
    except UserError as exc:
        out.append((("checkpoint_every", str(r["checkpoint_every"])), str(exc)))
    if r["per_iteration_times"] and r["iterations"] * PER_ITERATION_BYTES > PER_ITERATION_LIMIT:
        out.append((("per_iteration_times", r["iterations"]),
                    f"run.iterations = {r['iterations']} with run.per_iteration_times = true needs "
                    f"{r['iterations'] * PER_ITERATION_BYTES / 2**30:.3g} GiB per rank for the timings; "
                    "set run.per_iteration_times = false (cumulative phase times are still recorded)"))
    down_ok = True
    try:
        downlink.parse(r["downlink"])
    except UserError as exc:
        down_ok = False
        out.append((("downlink", str(r["downlink"])), str(exc)))
    if alg_cls is not None:
        out.extend((("algorithm-settings", r["algorithm"], msg), msg) for msg in alg_cls.plan_refusals(rc, comp))
    if alg_cls is None or comp is None or kind not in PROBLEM_KINDS:
        return out
    try:
        threshold = allocation.kind(r["allocation"]) == "threshold"
    except UserError:
        threshold = False                      # an unknown allocation is reported by check_name
    refusal = None
    problem_refusal = alg_cls.check_problem(kind, r)      # problem class × step rule × learning rate
    if problem_refusal is not None:
        refusal = ("problem", problem_refusal)
    elif threshold and "lam" not in comp.params:
        refusal = ("threshold", f"allocation {r['allocation']!r} sets per-worker thresholds; it needs the "
                                f"hard-threshold compressor ('threshold:lam=...'), not {comp.spec!r}")
    elif alg_cls.needs_unbiased and not comp.unbiased:
        from ..algorithms.diana import biased_refusal
        refusal = ("biased", biased_refusal(r["algorithm"], comp.spec))
    else:
        try:
            check_collective(r, alg_cls, comp)
            if down_ok:
                downlink.check(r["downlink"], alg_cls=alg_cls, collective=r["collective"])
            if getattr(comp, "matrices_only", False):
                check_matrices(rc, comp)
        except UserError as exc:
            refusal = ("collective-or-matrices", str(exc))
    if refusal is not None:
        out.append((("chain", refusal[0]), refusal[1]))
    return out


def _check_writable(out) -> None:
    """The results file can be created: its nearest existing parent is a writable directory."""
    import os
    from pathlib import Path
    p = Path(out).expanduser().absolute()
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if p.is_dir():
        raise ConfigError(f"results file {out} is a directory; give a file name (-o DIR/name.h5)")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write the results file {out}: {parent} is not a writable directory")


def plan(cfg: dict, out=None) -> list[RunPlan]:
    """Expand the sweep and check every grid point (:func:`check`, no data); every problem at once
    as one ConfigError of one line per problem."""
    problems = check(cfg, out)
    if problems:
        raise ConfigError("\n".join(problems))
    runs = []
    for i, rc in enumerate(config.expand(cfg)):
        r = rc["run"]
        comp = compressors.make(r["compressor"])
        tag = rc["label"] or f"{r['algorithm']}-{comp.spec}"
        if r["allocation"] != "uniform" and not rc["label"]:
            tag += f"-{r['allocation']}"
        if r["collective"] != "gather" and not rc["label"]:
            tag += f"-{r['collective']}"
        down = downlink.parse(r["downlink"])
        if down is not None and not rc["label"]:
            tag += f"-down-{down.spec}"
        tag = re.sub(r"[^A-Za-z0-9.+-]+", "_", tag.replace("=", ""))
        runs.append(RunPlan(i, f"{i:03d}-{tag}-s{r['seed']}", rc))
    return runs


def check_collective(r: dict, alg_cls, comp) -> None:
    """run.collective against the algorithm, the compressor, the server mode and the allocation."""
    ex = exchange.get(r["collective"])
    ex.check(alg_cls=alg_cls, compressor=comp, server=r["server"])
    if ex.name == "allreduce" and (r["allocation"] != "uniform"):
        raise ConfigError(f"run.allocation = {r['allocation']!r} gives the workers messages of different sizes; "
                          "an Allreduce sums one message shape on every rank: use 'gather' or 'allgather'")


def check_matrices(rc: dict, comp) -> None:
    """A compressor of matrix-shaped parameters (PowerSGD) needs a problem that has them, error
    feedback (Vogels et al. 2019, Alg. 2) and, for the MLP, a rank its hidden layer allows."""
    kind, r = rc["problem"]["kind"], rc["run"]
    if kind not in MODEL_KINDS:
        raise ConfigError(f"{comp.spec} compresses matrix-shaped parameters; problem.kind = {kind!r} has only "
                          f"the vector x: use a classifier ({', '.join(MODEL_KINDS)})")
    if not r["error_feedback"]:
        raise ConfigError(f"{comp.spec} needs run.error_feedback = true (PowerSGD's low-rank messages are biased; "
                          "error feedback is part of the method, Vogels et al. 2019, Alg. 2)")
    rank, hidden = comp.params["rank"], rc["problem"]["hidden"]
    if kind == "mlp" and rank > hidden:
        raise ConfigError(f"{comp.spec}: rank {rank} is larger than the MLP's layers allow (problem.hidden = "
                          f"{hidden}: the largest rank is {hidden})")


# -- data set-up (every rank) --------------------------------------------------------------------
@dataclass
class Setup:
    """Everything a run needs that depends only on data, partition and problem."""
    d: int
    n_workers: int
    worker_ranks: list
    samples: np.ndarray
    label_hist: np.ndarray
    local: Objective | None          # this rank's f_i (None on a dedicated server)
    L_max: float
    L_local: np.ndarray | None       # (n,) on rank 0
    global_obj: Objective | None     # rank 0 only
    opt: object | None               # rank 0 only (problems.Optimum)
    L: float | None = None           # global smoothness constant (every rank; None for classifiers)
    model: Model | None = None       # classifiers (softmax, mlp): the parameter layout
    test: object | None = None       # rank 0: held-out test problem, when data.test_fraction > 0
    opt_cached: bool = False
    setup_seconds: float = 0.0


class DataCache:
    """Loads each data set once per process and builds each (data, partition, problem) set-up once."""

    def __init__(self, transport: Transport):
        self.t = transport
        self.datasets = {}
        self.setups = {}

    def dataset(self, spec: str):
        if spec not in self.datasets:
            self.datasets[spec] = data.load(spec)
        return self.datasets[spec]

    def setup(self, rc: dict) -> Setup:
        key = (rc["data"]["dataset"], rc["data"]["partition"], rc["data"]["partition_seed"],
               tuple(rc["data"]["sizes"]), rc["data"]["test_fraction"], rc["problem"]["kind"], rc["problem"]["l2"],
               rc["problem"]["l1"], rc["problem"]["hidden"], rc["problem"]["depth"], rc["run"]["server"])
        if key not in self.setups:
            self.setups[key] = self._build(rc)
        return self.setups[key]

    def _build(self, rc: dict) -> Setup:
        """Rank 0 loads the data set and partitions it, then scatters each worker its shard.

        Only rank 0 parses files (and imports scikit-learn): with 32 ranks on a node this is the
        difference between one and 32 parsers competing for the cores at start-up.
        """
        t0 = time.perf_counter()
        t = self.t
        dedicated = rc["run"]["server"] == "dedicated"
        worker_ranks = list(range(1, t.size)) if dedicated else list(range(t.size))
        n = len(worker_ranks)
        kind, l2, l1 = rc["problem"]["kind"], rc["problem"]["l2"], rc["problem"]["l1"]
        error = meta = shards = None
        global_obj = parts = ds = test_obj = None
        if t.is_root:
            try:
                if n == 0:
                    raise ConfigError("run.server = 'dedicated' needs at least 2 MPI ranks (1 server + workers)")
                full = self.dataset(rc["data"]["dataset"])
                ds, test_ds = split_test(full, rc["data"]["test_fraction"], rc["data"]["partition_seed"])
                parts = data.partition(ds, n, scheme=rc["data"]["partition"], seed=rc["data"]["partition_seed"],
                                       sizes=rc["data"]["sizes"] or None)
                classes = np.unique(full.y)
                rows = np.concatenate(parts)
                meta = {"samples": np.array([len(p) for p in parts]),
                        "label_hist": np.array([[np.count_nonzero(ds.y[p] == c) for c in classes] for p in parts])}
                if kind in MODEL_KINDS:
                    y = np.searchsorted(classes, ds.y)
                    meta["model"] = Model(kind, full.n_features, len(classes), rc["problem"]["hidden"],
                                          rc["problem"]["depth"])
                    global_obj = ClassifierProblem(meta["model"], ds.X[rows], y[rows], l2)
                    if test_ds is not None:
                        test_obj = ClassifierProblem(meta["model"], test_ds.X, np.searchsorted(classes, test_ds.y), l2)
                else:
                    y = _linear_targets(ds, kind)
                    w = np.concatenate([np.full(len(p), 1.0 / (n * len(p))) for p in parts])
                    global_obj = Objective(kind, ds.X[rows], y[rows], w, l2, l1)
                    if test_ds is not None:
                        yt = _linear_targets(test_ds, kind)
                        test_obj = Objective(kind, test_ds.X, yt, np.full(len(yt), 1.0 / len(yt)), l2, l1)
                meta["d"] = meta["model"].d if "model" in meta else full.n_features
                shards = [None] * t.size
                for i, rk in enumerate(worker_ranks):
                    shards[rk] = (ds.X[parts[i]], y[parts[i]])
            except (UserError, ValueError, OSError) as exc:
                error = exc
            except MemoryError:
                error = UserError(f"not enough memory to set up {rc['data']['dataset']!r} with problem.kind = "
                                  f"{kind!r} (problem.hidden = {rc['problem']['hidden']}, problem.depth = {rc['problem']['depth']})")
        t.agree(error)
        meta = t.bcast_object(meta)
        shard = t.scatter_object(shards)
        shards = None
        error, local, L_i = None, None, 0.0
        try:
            if shard is not None:
                A, y_i = shard
                if kind in MODEL_KINDS:
                    local = ClassifierProblem(meta["model"], A, y_i, l2)
                else:
                    local = Objective(kind, A, y_i, np.full(A.shape[0], 1.0 / A.shape[0]), l2, l1)
                    L_i = local.smoothness()
        except (UserError, ValueError, ArithmeticError) as exc:
            error = exc
        except MemoryError:
            error = UserError(f"not enough memory for this rank's shard of {rc['data']['dataset']!r}")
        t.agree(error)
        L_max = t.allreduce_max(L_i)
        L_all = t.gather_rows(np.array([L_i]))
        # rank 0: the reference optimum of the global objective (cached on disk)
        opt, cached, error, L_global = None, False, None, None
        if t.is_root and kind not in MODEL_KINDS:
            try:
                L_global = global_obj.smoothness()
                if kind in CONVEX_KINDS:          # nonconvex kinds (sigmoid-loss) have no f*: measured by ‖∇f‖²
                    opt, cached = cached_reference(global_obj, {
                        "data": ds.fingerprint, "partition": rc["data"]["partition"],
                        "partition_seed": rc["data"]["partition_seed"], "sizes": rc["data"]["sizes"],
                        "n": n, "kind": kind, "l2": l2, "l1": l1, "test_fraction": rc["data"]["test_fraction"],
                        "version": 1})
            except (UserError, ValueError, ArithmeticError) as exc:
                error = exc
        t.agree(error)
        L_global = t.bcast_object(L_global)      # every rank may hold the server state (allgather)
        return Setup(d=meta["d"], n_workers=n, worker_ranks=worker_ranks, samples=meta["samples"],
                     label_hist=meta["label_hist"], local=local, L_max=L_max,
                     L_local=None if L_all is None else L_all[worker_ranks, 0],
                     global_obj=global_obj, opt=opt, opt_cached=cached, L=L_global, model=meta.get("model"),
                     test=test_obj, setup_seconds=time.perf_counter() - t0)


def binary_accuracy(obj, x) -> float:
    """Share of ±1 labels predicted right by sign(aᵀx), with a zero margin predicting +1."""
    return float(np.mean(np.where(obj.A @ x >= 0, 1.0, -1.0) == obj.y))


def _linear_targets(ds, kind: str) -> np.ndarray:
    return ds.binary_labels() if kind in BINARY_KINDS else np.asarray(ds.y, dtype=np.float64)


def split_test(ds, fraction: float, seed: int):
    """Hold out ``fraction`` of the rows (random, seeded) as a test set: (train, test or None)."""
    if fraction <= 0:
        return ds, None
    if not fraction < 1:
        raise ConfigError(f"data.test_fraction must be in [0, 1), got {fraction!r}")
    perm = np.random.default_rng([seed, 7919]).permutation(ds.n_samples)
    n_test = int(round(fraction * ds.n_samples))
    if n_test == 0 or n_test == ds.n_samples:
        raise ConfigError(f"data.test_fraction = {fraction} leaves an empty train or test set "
                          f"({ds.n_samples} samples)")
    return ds.subset(np.sort(perm[n_test:])), ds.subset(np.sort(perm[:n_test]))
