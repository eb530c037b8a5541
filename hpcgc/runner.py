"""Running an experiment: validation and set-up on every rank, the iteration loop, recording on rank 0.

Data flows one way (`DESIGN.md`): config → data shard per rank → per iteration
(gradient → compress → Gatherv → server decode/aggregate/step → Bcast) → results on rank 0.
This module orchestrates; it calls MPI only through :mod:`hpcgc.transport`, compressors only
through their public API, and HDF5 only through :mod:`hpcgc.results`.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np

from . import algorithms, allocation, compressors, config, data
from .errors import ConfigError, UserError
from .models import MODEL_KINDS, ClassifierProblem, Model
from .problems import KINDS as LINEAR_KINDS
from .problems import Objective, cached_reference
from .progress import Progress
from .transport import LENGTH_BYTES, PHASES, RankOrderedJIT, Transport, wtime

CONTINUE, STOP, DIVERGED = 0.0, 1.0, 2.0
PROBLEM_KINDS = LINEAR_KINDS + MODEL_KINDS
EMPTY = np.zeros(0, dtype=np.uint8)


# -- planning (identical on every rank, no data needed) -------------------------------------------
@dataclass
class RunPlan:
    index: int
    run_id: str
    cfg: dict


def plan(cfg: dict) -> list[RunPlan]:
    """Expand the sweep and check every grid point's names and parameters (cheap, no data)."""
    runs = []
    for i, rc in enumerate(config.expand(cfg)):
        r = rc["run"]
        algorithms.get(r["algorithm"])
        comp = compressors.make(r["compressor"])
        allocation.check_name(r["allocation"])
        if (r["allocation"] != "uniform" or r["budget"] > 0) and r["budget_unit"] == "fraction":
            allocation.check_budget(r["allocation"], r["budget"])
        kind = rc["problem"]["kind"]
        if kind not in PROBLEM_KINDS:
            raise ConfigError(f"unknown problem.kind {kind!r}; available: {', '.join(PROBLEM_KINDS)}")
        alg_cls = algorithms.get(r["algorithm"])
        if kind in MODEL_KINDS and not getattr(alg_cls, "takes_learning_rate", False):
            raise ConfigError(f"algorithm {r['algorithm']!r} uses a step size from smoothness constants, which "
                              f"problem.kind = {kind!r} does not have; use algorithm 'local-sgd'")
        if allocation.kind(r["allocation"]) == "threshold" and "lam" not in comp.params:
            raise ConfigError(f"allocation {r['allocation']!r} sets per-worker thresholds; it needs the hard-threshold "
                              f"compressor ('threshold:lam=...'), not {comp.spec!r}")
        if not 0.0 <= r["momentum"] < 1.0:
            raise ConfigError(f"run.momentum must be in [0, 1), got {r['momentum']!r}")
        if isinstance(r["alpha"], str) and r["alpha"] != "theory":
            raise ConfigError(f"run.alpha must be a number in (0, 1] or 'theory', got {r['alpha']!r}")
        tag = rc["label"] or f"{r['algorithm']}-{comp.spec}"
        if r["allocation"] != "uniform" and not rc["label"]:
            tag += f"-{r['allocation']}"
        tag = re.sub(r"[^A-Za-z0-9.+-]+", "_", tag.replace("=", ""))
        runs.append(RunPlan(i, f"{i:03d}-{tag}-s{r['seed']}", rc))
    return runs


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
    L: float | None = None           # global smoothness constant, rank 0 only
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
               rc["problem"]["l1"], rc["problem"]["hidden"], rc["run"]["server"])
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
                    meta["model"] = Model(kind, full.n_features, len(classes), rc["problem"]["hidden"])
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
        t.agree(error)
        L_max = t.allreduce_max(L_i)
        L_all = t.gather_rows(np.array([L_i]))
        # rank 0: the reference optimum of the global objective (cached on disk)
        opt, cached, error, L_global = None, False, None, None
        if t.is_root and kind not in MODEL_KINDS:
            try:
                L_global = global_obj.smoothness()
                opt, cached = cached_reference(global_obj, {
                    "data": ds.fingerprint, "partition": rc["data"]["partition"],
                    "partition_seed": rc["data"]["partition_seed"], "sizes": rc["data"]["sizes"],
                    "n": n, "kind": kind, "l2": l2, "l1": l1, "test_fraction": rc["data"]["test_fraction"],
                    "version": 1})
            except (UserError, ValueError, ArithmeticError) as exc:
                error = exc
        t.agree(error)
        return Setup(d=meta["d"], n_workers=n, worker_ranks=worker_ranks, samples=meta["samples"],
                     label_hist=meta["label_hist"], local=local, L_max=L_max,
                     L_local=None if L_all is None else L_all[worker_ranks, 0],
                     global_obj=global_obj, opt=opt, opt_cached=cached, L=L_global, model=meta.get("model"),
                     test=test_obj, setup_seconds=time.perf_counter() - t0)


def _binary_accuracy(obj, x) -> float:
    """Share of ±1 labels predicted right by sign(aᵀx), with a zero margin predicting +1."""
    return float(np.mean(np.where(obj.A @ x >= 0, 1.0, -1.0) == obj.y))


def _linear_targets(ds, kind: str) -> np.ndarray:
    return ds.binary_labels() if kind == "logreg" else np.asarray(ds.y, dtype=np.float64)


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


# -- one run ------------------------------------------------------------------------------------------
@dataclass
class RunSummary:
    run_id: str
    algorithm: str
    compressor: str
    status: str
    stop_reason: str
    iterations: int
    suboptimality: float
    mb_up: float
    phase_ms: dict
    median_iter_ms: float
    wire_over_model: float


class Run:
    def __init__(self, rp: RunPlan, setup: Setup, transport: Transport, writer=None, show_progress=False):
        self.rp, self.s, self.t = rp, setup, transport
        self.writer = writer
        self.show_progress = show_progress
        rc = rp.cfg
        self.r = rc["run"]
        s = setup
        self.comp = compressors.make(self.r["compressor"])
        self.comps = self._per_worker_compressors()
        if self.r["batch"] > int(s.samples.min()) and not getattr(algorithms.get(self.r["algorithm"]),
                                                                  "clips_batch", False):
            raise ConfigError(f"run.batch = {self.r['batch']} exceeds the smallest worker's sample count "
                              f"{int(s.samples.min())}")
        alg_cls = algorithms.get(self.r["algorithm"])
        if getattr(alg_cls, "aggregation", "mean") == "samples":      # DAGC: N_i / N
            weights = s.samples / s.samples.sum()
        else:                                                          # DIANA: 1/n
            weights = np.full(s.n_workers, 1.0 / s.n_workers)
        self.x0 = s.model.init(self.r["seed"]) if s.model is not None else np.zeros(s.d)
        segments = s.model.segments if s.model is not None else [("x", 0, s.d, (s.d,))]
        self.alg = alg_cls(self.comps, d=s.d, n_workers=s.n_workers, weights=weights,
                           problem_info={"L_max": s.L_max, "L": s.L, "mu": rc["problem"]["l2"], "segments": segments,
                                         "kind": rc["problem"]["kind"]},
                           options={**self.r, "l1": rc["problem"]["l1"], "ratios": self.ratios,
                                    "thresholds": self.thresholds})
        seq = np.random.SeedSequence(self.r["seed"]).spawn(transport.size)[transport.rank]
        self.rng = np.random.default_rng(seq)

    def _per_worker_compressors(self) -> list:
        """Worker i's compressor: with a budget, an allocation sets each worker's kept fraction δ_i,
        applied as k_i = max(1, ⌈δ_i·d⌉) to compressors that have a ``k`` parameter, or (``dagc-a``)
        its threshold λ_i for the hard-threshold compressor. Algorithms that compress per tensor
        (local SGD) re-apply δ_i per tensor from ``ratios``."""
        s, r = self.s, self.r
        self.ratios = np.full(s.n_workers, np.nan)
        self.thresholds = np.full(s.n_workers, np.nan)
        self.budget_applied = False
        if r["budget"] > 0 and allocation.kind(r["allocation"]) == "threshold":
            self.thresholds = self._allocate_on_root()
            comps = [compressors.make(self.comp.name, **{**self.comp.params, "lam": float(v)})
                     for v in self.thresholds]
            self.budget_applied = True
        elif r["budget"] > 0 and "k" in self.comp.params:
            self.ratios = self._allocate_on_root()
            ks = allocation.kept_counts(self.ratios, s.d)
            comps = [compressors.make(self.comp.name, **{**self.comp.params, "k": int(k)}) for k in ks]
            self.comp = comps[0] if len(set(ks)) == 1 else self.comp
            self.budget_applied = True
        else:
            comps = [self.comp] * s.n_workers
        comps = [c.for_run(d=s.d, n_workers=s.n_workers) for c in comps]
        for c in comps:
            c.validate(s.d)
        if "k" in self.comp.params and not self.budget_applied:
            self.ratios[:] = self.comp.params["k"] / s.d
        if "lam" in self.comp.params and not self.budget_applied:
            self.thresholds[:] = self.comp.params["lam"]
        return comps

    def _allocate_on_root(self) -> np.ndarray:
        """Rank 0 solves the allocation from the workers' sample counts and broadcasts the result
        (`spec/decisions.md`, DAGC); an infeasible budget fails on every rank alike."""
        s, r, t = self.s, self.r, self.t
        result = None
        if t.is_root:
            try:
                budget = r["budget"]
                if r["budget_unit"] == "coordinates":   # total coordinates per round → mean fraction
                    budget = allocation.coordinates_budget(budget, s.n_workers, s.d)
                if allocation.kind(r["allocation"]) == "ratio" and budget * s.d < 1:
                    raise ConfigError(f"run.budget keeps {budget * s.d:.3g} of d = {s.d} coordinates per worker "
                                      "on average: too small for every worker to send one coordinate")
                result = allocation.allocate(r["allocation"], s.samples, budget)
            except ConfigError as exc:
                result = exc
        result = t.bcast_object(result)
        if isinstance(result, Exception):
            raise result
        return result

    # metrics are computed on rank 0 only, on the global objective, outside the timed phases
    def _metrics(self, x, x0_dist):
        """Loss on the training data (all shards), f − f* and ‖x − x*‖² where an optimum exists,
        accuracy on the test split if there is one (else on the training data)."""
        s = self.s
        F = s.global_obj.full_loss(x)
        g = s.global_obj.grad(x)
        out = {"loss": F, "grad_norm_sq": float(np.dot(g, g)), "suboptimality": np.nan, "dist_to_opt": np.nan}
        if s.opt is not None:
            out["suboptimality"] = F - s.opt.f
            out["dist_to_opt"] = float(np.sum((x - s.opt.x) ** 2)) / x0_dist if x0_dist > 0 else 0.0
        if s.model is not None:
            out["train_accuracy"] = s.global_obj.accuracy(x)
        elif s.global_obj.kind == "logreg":
            out["train_accuracy"] = _binary_accuracy(s.global_obj, x)
        if s.test is not None:
            out["test_loss"] = s.test.full_loss(x)
            if s.model is not None:
                out["accuracy"] = s.test.accuracy(x)
            elif s.test.kind == "logreg":
                out["accuracy"] = _binary_accuracy(s.test, x)
        elif "train_accuracy" in out:
            out["accuracy"] = out["train_accuracy"]
        return out

    def execute(self) -> RunSummary | None:
        s, t, r, alg = self.s, self.t, self.r, self.alg
        d, n, T = s.d, s.n_workers, r["iterations"]
        root = t.is_root
        me = s.worker_ranks.index(t.rank) if t.rank in s.worker_ranks else None
        xbuf = np.zeros(d + 1)          # iterate + one control word, broadcast every iteration
        x = xbuf[:d]
        x[:] = self.x0                  # identical on every rank (zeros, or the seeded MLP init)
        ctrl = np.zeros(1)              # eval-point decision (untimed, not part of the algorithm)
        wstate = alg.worker_init(me, s.local) if me is not None else None
        vals = alg.agree_values(wstate) if wstate is not None else None
        width = int(t.allreduce_max(-1.0 if vals is None else float(len(vals))))
        if width >= 0:
            mine = np.full(width, -np.inf) if vals is None else np.asarray(vals, dtype=np.float64)
            alg.set_agreed(t.allreduce_max_array(mine))
        sstate = alg.server_init(x) if root else None
        per_it = np.zeros((T, len(PHASES))) if r["per_iteration_times"] else None
        totals = np.zeros(len(PHASES))
        crossed = np.array([rk != 0 for rk in s.worker_ranks])
        one_time = self._one_time_upload(wstate, sstate, me)
        t.reset_ledger()
        t.barrier()

        rw = None
        if root:
            bits_model = np.zeros(n)
            bits_wire = np.zeros(n)
            bits_down = 0.0
            x0_dist = float(np.sum((x - s.opt.x) ** 2)) if s.opt is not None else 0.0
            f0_gap = None
            rw = self.writer.begin_run(self.rp.run_id, self._attrs(), n, t.size) if self.writer else None
            status, reason = "completed", "iterations"
            t_start = time.monotonic()
            bar = Progress(self.rp.run_id, T, enabled=self.show_progress)
            last_row = {}

        def record(it):
            """Collective: gather timers; rank 0 evaluates, writes a row and decides whether to stop."""
            nonlocal f0_gap, status, reason, last_row
            times = t.gather_rows(totals)
            if root:
                row = self._metrics(x, x0_dist)
                row.update(iteration=it, bits_up_model=bits_model, bits_up_wire=bits_wire,
                           bits_down_wire=bits_down, time=times)
                if rw is not None:
                    rw.append(row)
                last_row = row
                # progress measure: f − f* where an optimum exists, else the training loss
                gap = row["suboptimality"] if s.opt is not None else row["loss"]
                if f0_gap is None:
                    f0_gap = max(abs(gap), 1e-300)
                decision = CONTINUE
                if not math.isfinite(row["loss"]) or gap > r["divergence_factor"] * f0_gap:
                    what = "f - f*" if s.opt is not None else "loss"
                    status, reason, decision = "diverged", f"{what} = {gap:.3g} at iteration {it}", STOP
                elif r["tolerance"] > 0 and s.opt is not None and gap <= r["tolerance"]:
                    status, reason, decision = "completed", f"tolerance {r['tolerance']:g} reached", STOP
                ctrl[0] = decision
            t.bcast_control(ctrl)
            return ctrl[0] != CONTINUE

        stop = record(0)
        k = 0
        blew_up = False        # iterate became non-finite between two evaluation points
        while not stop and k < T:
            t0 = wtime()
            if me is not None:
                alg.worker_compute(wstate, x, s.local, self.rng)
                t1 = wtime()
                payload = alg.worker_encode(wstate, self.rng)
                t2 = wtime()
            else:
                t1 = t2 = t0
                payload = EMPTY
            got = t.gather_payloads(payload)
            t3 = wtime()
            if root:
                buf, counts, displs = got
                msgs = [(i, buf[displs[rk]:displs[rk] + counts[rk]]) for i, rk in enumerate(s.worker_ranks)]
                alg.server_step(sstate, msgs)
                for i, p in msgs:
                    bits_wire[i] += 8 * (LENGTH_BYTES + p.size)
                    bits_model[i] += alg.model_bits(i, p)
                x[:] = sstate.x
                sq = float(np.dot(x, x))
                if not math.isfinite(sq) or sq > 1e200:
                    status, reason = "diverged", f"non-finite or exploding iterate at iteration {k + 1}"
                    xbuf[d] = DIVERGED
                elif r["max_bits"] > 0 and bits_model.max() >= r["max_bits"]:
                    status, reason, xbuf[d] = "stopped", f"bit budget {r['max_bits']:g} reached", STOP
                elif r["max_seconds"] > 0 and time.monotonic() - t_start >= r["max_seconds"]:
                    status, reason, xbuf[d] = "stopped", f"wall-time budget {r['max_seconds']:g} s reached", STOP
                else:
                    xbuf[d] = CONTINUE
                bits_down += 8 * xbuf.nbytes
                t4 = wtime()
            else:
                t4 = t3
            t.bcast(xbuf)
            t5 = wtime()
            lap = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0)
            totals += lap
            if per_it is not None:
                per_it[k] = lap
            k += 1
            control = xbuf[d]
            if control == DIVERGED:
                blew_up = True
                break
            if k % r["eval_every"] == 0 or k == T or control == STOP:
                stop = record(k) or control == STOP
            if root:
                bar.update(k, last_row.get("suboptimality", np.nan), bits_wire[crossed].sum() / 8e6)
        iterations_done = k
        if root:
            bar.close()

        # tear-down: sender-side ledger and per-iteration timings (collective, untimed)
        sent = t.gather_rows(np.array([float(t.up_bytes)]))
        per_rank = t.gather_rows(per_it[:iterations_done].ravel()) if per_it is not None else None
        if not root:
            return None
        if blew_up and rw is not None:
            # the divergent state is recorded as the last row so the file shows where it blew up
            row = {"iteration": iterations_done, "loss": np.nan, "suboptimality": np.nan, "dist_to_opt": np.nan,
                   "grad_norm_sq": np.nan, "accuracy": np.nan, "bits_up_model": bits_model,
                   "bits_up_wire": bits_wire, "bits_down_wire": bits_down,
                   "time": np.tile(totals, (t.size, 1)) * np.nan}
            rw.append(row)
        if rw is not None:
            rw.write_table("workers", {
                "rank": np.array(s.worker_ranks), "samples": s.samples,
                "compression_ratio": np.where(np.isnan(self.ratios), 1.0, self.ratios),
                "threshold": self.thresholds, "label_histogram": s.label_hist,
                "one_time_bits": one_time["model"], "one_time_bits_wire": one_time["wire"],
                "crossed_network": crossed, "smoothness": s.L_local,
                "sender_bytes_up": sent[s.worker_ranks, 0]})
            if per_rank is not None:
                pr = per_rank.reshape(t.size, iterations_done, len(PHASES))
                rw.write_table("per_iteration", {ph: pr[:, :, j].T.astype(np.float32)
                                                 for j, ph in enumerate(PHASES)})
            rw.finish(status, reason, {"iterations_done": iterations_done}, {"x_final": x})
        # summary for the table
        mean_ms = {ph: 1e3 * totals[j] / max(iterations_done, 1) for j, ph in enumerate(PHASES)}
        if per_rank is not None and iterations_done:
            pr = per_rank.reshape(t.size, iterations_done, len(PHASES))
            mean_ms = {ph: 1e3 * float(pr[:, :, j].mean()) for j, ph in enumerate(PHASES)}
            med_iter = 1e3 * float(np.median(pr[:, :, PHASES.index("iter")]))
        else:
            med_iter = mean_ms["iter"]
        model_total = bits_model.sum()
        return RunSummary(
            run_id=self.rp.run_id, algorithm=r["algorithm"], compressor=self.comp.spec, status=status,
            stop_reason=reason, iterations=iterations_done,
            suboptimality=float(last_row.get("suboptimality", np.nan)) if status != "diverged" else np.nan,
            mb_up=float(bits_wire[crossed].sum()) / 8e6, phase_ms=mean_ms, median_iter_ms=med_iter,
            wire_over_model=float(bits_wire.sum() - 8 * LENGTH_BYTES * n * iterations_done) / model_total
            if model_total else np.nan)

    def _one_time_upload(self, wstate, sstate, me) -> dict:
        """The algorithm's one-time set-up message (e.g. L_i^{1/2} for smoothness-aware methods),
        sent through the same Gatherv as every other payload. Collective; no-op when unused."""
        t, n = self.t, self.s.n_workers
        payload = self.alg.worker_setup_message(wstate) if me is not None else None
        used = t.allreduce_max(0.0 if payload is None else 1.0)
        out = {"model": np.zeros(n), "wire": np.zeros(n)}
        if not used:
            return out
        got = t.gather_payloads(EMPTY if payload is None else payload)
        if t.is_root:
            buf, counts, displs = got
            msgs = [(i, buf[displs[rk]:displs[rk] + counts[rk]]) for i, rk in enumerate(self.s.worker_ranks)]
            self.alg.server_setup(sstate, msgs)
            for i, p in msgs:
                out["wire"][i] = 8 * (LENGTH_BYTES + p.size)
                out["model"][i] = self.alg.one_time_model_bits(i, p)
        return out

    def _attrs(self) -> dict:
        s, r, rc = self.s, self.r, self.rp.cfg
        a = {"config": config.to_toml(rc), "label": rc["label"], "algorithm": r["algorithm"], "compressor": self.comp.spec,
             "compressor_name": self.comp.name, "allocation": r["allocation"], "budget": r["budget"],
             "budget_applied": self.budget_applied, "seed": r["seed"], "dataset": rc["data"]["dataset"],
             "partition": rc["data"]["partition"], "problem": rc["problem"]["kind"],
             "l2": rc["problem"]["l2"], "l1": rc["problem"]["l1"], "d": s.d, "n_workers": s.n_workers,
             "server": r["server"], "f_star": s.opt.f if s.opt else np.nan,
             "x_star_grad_norm": s.opt.grad_norm if s.opt else np.nan,
             "f_star_method": s.opt.method if s.opt else "none (nonconvex or no reference)", "L_max": s.L_max, "setup_seconds": s.setup_seconds,
             "iterations": r["iterations"], "eval_every": r["eval_every"], "batch": r["batch"]}
        a.update(self.alg.describe())
        return a


# -- the experiment ---------------------------------------------------------------------------------
def warm_jit(specs, transport: Transport):
    """Compile (or load from cache) every compressor's kernels, rank 0 first (see RankOrderedJIT)."""
    def warm():
        rng = np.random.default_rng(0)
        x = rng.standard_normal(64)
        for spec in specs:
            c = compressors.make(spec)
            try:
                c.validate(64)
            except ConfigError:
                continue
            p = c.compress(x, rng)
            out = np.zeros(64)
            c.decompress_add(p, 64, out, 1.0)
            c.model_bits(p, 64)
    RankOrderedJIT(transport).run(warm)


def parse_selection(text: str, count: int) -> list[int]:
    """'3', '0,2,5', '4-7' (inclusive) → sorted grid indices, each checked against the grid size."""
    out = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a = int(lo)
            b = int(hi) if hi else a
            out.update(range(a, b + 1))
    except ValueError:
        raise ConfigError(f"--grid-index expects I, I,J or I-J (0-based), got {text!r}") from None
    bad = [i for i in out if not 0 <= i < count]
    if bad or not out:
        raise ConfigError(f"--grid-index {text!r} is outside the grid of {count} point(s) (0..{count - 1})")
    return sorted(out)


def prepare(cfg: dict, transport: Transport, select: str | None = None) -> list[Run]:
    """Validate every grid point and build every run's set-up on every rank, before any file exists.

    Any user error (bad name, parameter, data file, partition, batch size) is raised here on every
    rank alike, so a bad experiment fails before it has written anything. ``select`` restricts the
    grid to some points (``--grid-index``, e.g. one SLURM array task each); run ids keep their
    index in the full grid.
    """
    error, plans = None, []
    try:
        plans = plan(cfg)
        if select is not None:
            plans = [plans[i] for i in parse_selection(select, len(plans))]
    except UserError as exc:
        error = exc
    transport.agree(error)
    cache = DataCache(transport)
    runs = []
    for rp in plans:
        setup = cache.setup(rp.cfg)          # agrees on errors internally
        error = None
        try:
            runs.append(Run(rp, setup, transport))
        except UserError as exc:
            error = exc
        transport.agree(error)
    return runs


def execute(runs: list[Run], transport: Transport, out, argv=(), log=print, t_start=None, name="experiment",
            progress=False):
    """Run prepared runs; rank 0 writes ``out`` (via ``out.partial``). Returns (path, summaries) on
    rank 0 and (None, []) elsewhere. A run that diverges is recorded and the experiment goes on;
    an exception leaves the partial file readable and propagates."""
    from . import provenance
    from .results import ResultsWriter

    t = transport
    warm_jit(sorted({r.comp.spec for r in runs}), t)
    attrs = provenance.collect(t, list(argv))
    writer, err = None, None
    if t.is_root:
        log(provenance.header(attrs))
        if t_start is not None:
            log(f"# experiment {name!r}: {len(runs)} run(s); set-up {time.perf_counter() - t_start:.2f} s "
                "(data, partitions, f*, JIT)")
        try:
            writer = ResultsWriter(out, attrs)
        except OSError as exc:
            err = UserError(f"cannot create results file {out}: {exc.strerror or exc}")
    t.agree(err)
    summaries = []
    try:
        for i, run in enumerate(runs):
            run.writer = writer
            run.show_progress = progress
            s = run.execute()
            if s is not None:
                summaries.append(s)
                log(f"[{i + 1}/{len(runs)}] {s.run_id}: {s.status} ({s.stop_reason}) after {s.iterations} it, "
                    f"f - f* = {s.suboptimality:.3e}, {s.mb_up:.4f} MB up, {s.median_iter_ms:.3f} ms/it (median)")
    except BaseException:
        if writer is not None:
            writer.close(complete=False)
        raise
    return (writer.close(complete=True) if writer is not None else None), summaries
