"""One run: its compressors, algorithm and exchange built from the plan, executed through the loop.

``Run.execute`` sets up the states, wires the observers (:mod:`.observers`) and the exchange
(:mod:`hpcgc.exchange`), calls :func:`.loop.iterate`, and writes the run's tables. Metrics are
computed on rank 0 only, on the global objective, outside the timed phases.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import algorithms, allocation, compressors, config, exchange, machine
from ..errors import ConfigError, UserError
from ..exchange import downlink
from ..exchange.base import CONTINUE
from ..exchange.overlap import OverlapAllreduce
from ..exchange.overlap import warning as overlap_warning
from ..exchange.overlap_allgather import OverlapAllgather
from ..exchange.overlap_gather import OverlapGather
from ..problems import BINARY_KINDS
from ..transport import Transport
from ..typed_state import StateMismatch
from .checkpoint import Checkpointer, Policy, RunState
from .finish import RunSummary, finish
from .loop import iterate, warm_up
from .observers import (
    Budgets,
    Clock,
    Ledger,
    Outcome,
    ProgressLine,
    Recorder,
    StopRules,
    Watch,
)
from .setup import RunPlan, Setup, binary_accuracy

EMPTY = np.zeros(0, dtype=np.uint8)
SHARED_STREAM = 0x5EED
"""Spawn key of the generator every rank draws alike (shared-seed compressors)."""
DOWNLINK_STREAM = 0xD0A1
"""Spawn key of the generator of the downlink compressor (rank 0 alone draws from it)."""
NODE_RANK_STREAM = 0x40DE
"""First spawn key word of a node's non-leader rank's generator (``run.topology = "hierarchical"``;
the leaders draw from ``spawn(nodes)[node]``, as the ranks of a flat run of that many ranks do)."""


class ShardWatch(Watch):
    """The loop's observer hub when the metrics are a reduction over the shards
    (``problem.reference = "none"``): every rank takes part in :meth:`Run._reduce` at each
    evaluation point, then rank 0 builds the row from its result as usual."""

    def __init__(self, *args, reduce, **kwargs):
        super().__init__(*args, **kwargs)
        self.reduce = reduce
        self.metrics = lambda: dict(self._reduced)

    def evaluate(self, k: int) -> bool:
        self._reduced = self.reduce()
        return super().evaluate(k)


class Run:
    def __init__(self, rp: RunPlan, setup: Setup, transport: Transport, writer=None, show_progress=False):
        self.rp, self.s, self.t = rp, setup, transport
        self.rank_setup = setup         # this rank's shard (= self.s unless run.topology = "hierarchical")
        self.writer = writer
        self.show_progress = show_progress
        self.floor = 0.0                # > 0: seconds to measure the run's collectives' floor after it (--floor)
        rc = rp.cfg
        self.r = rc["run"]
        s = setup
        alg_cls = algorithms.get(self.r["algorithm"])
        if self.r["batch"] > int(s.samples.min()) and not getattr(alg_cls, "clips_batch", False):
            raise ConfigError(f"run.batch = {self.r['batch']} exceeds the smallest worker's sample count "
                              f"{int(s.samples.min())}")
        if getattr(alg_cls, "aggregation", "mean") == "samples":      # DAGC: N_i / N
            weights = s.samples / s.samples.sum()
        else:                                                          # DIANA: 1/n
            weights = np.full(s.n_workers, 1.0 / s.n_workers)
        self.nodes, self.share = None, 1.0
        if self.r["topology"] == "hierarchical":        # the algorithm's workers are the nodes (.nodes)
            from ..transport import Nodes
            from .nodes import node_setup
            self.nodes = Nodes.of(transport)
            s, self.share, weights = node_setup(setup, self.nodes, weights, rc["problem"]["kind"])
            self.s = s
        self.comp = compressors.make(self.r["compressor"])
        self.comps = self._per_worker_compressors()
        self.x0 = s.model.init(self.r["seed"]) if s.model is not None else np.zeros(s.d)
        segments = s.model.segments if s.model is not None else [("x", 0, s.d, (s.d,))]
        self.alg = alg_cls(self.comps, d=s.d, n_workers=s.n_workers, weights=weights,
                           problem_info={"L_max": s.L_max, "L": s.L, "mu": rc["problem"]["l2"], "segments": segments,
                                         "kind": rc["problem"]["kind"]},
                           options={**self.r, "l1": rc["problem"]["l1"], "ratios": self.ratios,
                                    "thresholds": self.thresholds})
        # Allreduce calls per iteration; building worker 0's codec also checks the message's shape
        # now that it is known (e.g. a PowerSGD rank too large for a layer)
        self.exchange_rounds = self.alg.sum_codec(0).rounds if self.r["collective"] == "allreduce" else 1
        # run.overlap (checked at plan time): one bucket per layer; a problem of one layer only warns
        self.overlap_buckets = 0
        if self.r.get("overlap"):
            note = overlap_warning(rc["problem"]["kind"])
            if note is None and s.model is not None and len(s.model.layers) > 1:
                self.overlap_buckets = len(s.model.layers)
            elif transport.is_root:
                print(note or "warning: run.overlap = true: the model has one layer; nothing to overlap",
                      file=sys.stderr, flush=True)
        seq = np.random.SeedSequence(self.r["seed"]).spawn(transport.size)[transport.rank]
        if self.nodes is not None:
            seq = (np.random.SeedSequence(self.r["seed"]).spawn(self.nodes.count)[self.nodes.index]
                   if self.nodes.is_leader else
                   np.random.SeedSequence(self.r["seed"], spawn_key=(NODE_RANK_STREAM, transport.rank)))
        self.rng = np.random.default_rng(seq)
        # identical on every rank: what shared-seed compressors draw from (same coordinates everywhere)
        self.shared_rng = np.random.default_rng(np.random.SeedSequence(self.r["seed"], spawn_key=(SHARED_STREAM,)))
        self.shared = any(c.shared_randomness for c in self.comps)
        self.grad0 = None               # rank 0: ‖∇f(x⁰)‖² on problems without f* (the tolerance's reference)
        self.downlink = downlink.build(self.r["downlink"], d=s.d, n_workers=s.n_workers)
        own = self.alg.step_downlink() if self.r["collective"] == "gather" else None
        if self.downlink is None and own is not None:        # signSGD-MV: the 1-bit vote, not the iterate
            self.downlink = downlink.direct(*own)
        self.down_rng = np.random.default_rng(np.random.SeedSequence(self.r["seed"], spawn_key=(DOWNLINK_STREAM,)))

    def _encode_rng(self):
        """The generator compressors draw from: the shared one when a compressor needs all its
        randomness shared (shared-seed rand-k, PowerSGD, count sketch); the rank's own carrying the
        shared one as ``.shared`` when only a rotation is shared (``hadamard``); else the rank's own."""
        if self.shared:
            return self.shared_rng
        if any(getattr(c, "shared_rotation", False) for c in self.comps):
            from ..compressors.hadamard import with_shared
            return with_shared(self.rng, self.shared_rng)
        return self.rng

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

    # metrics are computed on rank 0, on the global objective, outside the timed phases; with
    # problem.reference = "none" every rank first reduces its shard's loss and gradient (_reduce)
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
        elif s.global_obj.kind in BINARY_KINDS:
            out["train_accuracy"] = binary_accuracy(s.global_obj, x)
        if s.test is not None:
            out["test_loss"] = s.test.full_loss(x)
            if s.model is not None:
                out["accuracy"] = s.test.accuracy(x)
            elif s.test.kind in BINARY_KINDS:
                out["accuracy"] = binary_accuracy(s.test, x)
        elif "train_accuracy" in out:
            out["accuracy"] = out["train_accuracy"]
        return out

    def _reduce(self, x) -> dict | None:
        """Collective (every rank): the loss, ‖∇f‖² and training accuracy of the global objective at
        rank 0's ``x``, as a reduction over the workers' shards (``problem.reference = "none"``).

        f = Σ_i w_i f_i with w_i = 1/n (linear kinds: the global objective weighs worker i's rows by
        1/(n·m_i)) or m_i/N (classifiers: the mean over all rows); ∇f likewise; one Allreduce of
        d + 3 floats, not in the bit ledger. Rank 0 gets the metrics dict, the others None."""
        s, t = self.rank_setup, self.t            # every rank's own shard, also under hierarchical
        d = s.d
        xb = np.array(x, dtype=np.float64)
        t.bcast_control(xb)                  # the workers may hold another copy (compressed downlink)
        buf = np.zeros(d + 3)
        local = s.local
        if local is not None:
            m = local.A.shape[0]
            wt = m / float(s.samples.sum()) if s.model is not None else 1.0 / s.n_workers
            np.multiply(local.grad(xb), wt, out=buf[:d])
            buf[d] = wt * local.full_loss(xb)
            if s.model is not None:
                buf[d + 1] = local.accuracy(xb) * m
            elif local.kind in BINARY_KINDS:
                buf[d + 1] = binary_accuracy(local, xb) * m
            buf[d + 2] = m
        xb = None
        total = t.allreduce_sum_measure(buf)
        if not t.is_root:
            return None
        g = total[:d]
        out = {"loss": float(total[d]), "grad_norm_sq": float(np.dot(g, g)), "suboptimality": np.nan,
               "dist_to_opt": np.nan}
        if s.model is not None or (local is not None and local.kind in BINARY_KINDS) or \
                (local is None and self.rp.cfg["problem"]["kind"] in BINARY_KINDS):
            out["train_accuracy"] = out["accuracy"] = float(total[d + 1] / total[d + 2])
        return out

    def execute(self, resume: dict | None = None) -> RunSummary | None:
        """Run (or, with ``resume`` = this rank's stored checkpoint tree, continue) this run; collective."""
        s, t, r, alg = self.s, self.t, self.r, self.alg
        root = t.is_root
        me = s.worker_ranks.index(t.rank) if t.rank in s.worker_ranks else None
        x = np.array(self.x0, dtype=np.float64)        # identical on every rank (zeros, or the seeded MLP init)
        ws = alg.worker_init(me, s.local) if me is not None else None
        self.ws = ws
        vals = alg.agree_values(ws) if ws is not None else None
        width = int(t.allreduce_max(-1.0 if vals is None else float(len(vals))))
        if width >= 0:
            mine = np.full(width, -np.inf) if vals is None else np.asarray(vals, dtype=np.float64)
            alg.set_agreed(t.allreduce_max_array(mine))
        ex_cls, more = exchange.get(r["collective"]), {}
        if self.overlap_buckets:                      # run.overlap (hpcgc.exchange.overlap, .overlap_allgather)
            ex_cls, more = OverlapAllreduce, {"buckets": s.model.buckets()}
            if r["collective"] in ("allgather", "gather"):
                ex_cls = OverlapAllgather if r["collective"] == "allgather" else OverlapGather
                more = {**more, "blocking": r["overlap_blocking"]}
        if self.nodes is None:
            ex = ex_cls(t, alg, s.worker_ranks, me, x, self._encode_rng(),
                        downlink=self.downlink, downlink_rng=self.down_rng, **more)
        else:                                         # run.topology = "hierarchical" (no overlap: plan time)
            ex = exchange.Hierarchical(ex_cls, self.nodes, alg, me, x, self._encode_rng(),
                                       downlink=self.downlink, downlink_rng=self.down_rng)
        ex.split = r["wait_phases"]
        self.wait_mode = machine.wait_mode(r["wait"], t)   # run.wait: how the waiting ranks wait (collective)
        t.yielding = self.wait_mode == "yield"
        if self.nodes is not None and self.nodes.leaders is not None:
            self.nodes.leaders.yielding = t.yielding
        self.ex = ex
        x = ex.x                                       # the exchange's own buffer (gather: the broadcast's)
        ss = alg.server_init(x) if ex.holds_server else None
        ex.place_server_state(ss)
        one_time = self._one_time_upload(ex, ws, ss)
        crossed = np.array([rk != 0 or ex.server_everywhere for rk in s.worker_ranks])
        t.reset_ledger()

        sharded = s.reference == "none"      # metrics by reduction over the shards (collective, every rank)
        red0 = self._reduce(self.x0) if sharded else None
        clock = Clock(r["iterations"], r["per_iteration_times"])
        outcome, ledger, observers, rw, bar, rules, budgets, policy = Outcome(), None, [], None, None, None, None, None
        if root:
            ledger = Ledger(s.n_workers, s.worker_ranks)
            budgets = Budgets(r, ledger, outcome)
            x0_dist = float(np.sum((x - s.opt.x) ** 2)) if s.opt is not None else 0.0
            bar = ProgressLine(self.rp.run_id, r["iterations"], self.show_progress, crossed, ledger)
            if sharded:                                                   # no f*: tolerance on ‖∇f‖²/‖∇f(x⁰)‖²
                grad0 = self.grad0 = red0["grad_norm_sq"]
            else:
                g0 = s.global_obj.grad(self.x0) if s.opt is None else None
                grad0 = self.grad0 = None if g0 is None else float(np.dot(g0, g0))
            rules = StopRules(r, s.opt is not None, outcome, None if ex.carries_control else budgets, grad0)
            policy = Policy(r["checkpoint_every"], outcome)

            def on_step():
                ledger.account(ex)
                return budgets.check() if ex.carries_control else CONTINUE
            ex.on_step = on_step
        state = RunState(t, x, ws, ss, ex, (self.rng, self.shared_rng), clock, ledger, rules, budgets)
        start = 0
        if resume is not None:       # every rank checks its own stored tree against this run, then all agree
            err = None
            try:
                start = state.load(resume, f"checkpoint of run {self.rp.run_id}, rank {t.rank}")
            except StateMismatch as exc:
                err = UserError(f"--resume: {exc}")
            t.agree(err)
        if root and self.writer is not None:
            rw = (self.writer.resume_run(self.rp.run_id, self.resume_rows, start, r["eval_every"],
                                                r["iterations"])
                  if resume is not None else
                  self.writer.begin_run(self.rp.run_id, self._attrs(), s.n_workers, t.size,
                                        node_bytes=self.nodes is not None))
        if root:
            observers = [Recorder(self.writer, rw, outcome), rules, bar]
        t.quiet_barrier()       # the others sleep (not spin in MPI) while rank 0 starts the run's file group

        saver = Checkpointer(t, state, policy, rw)
        evals = (lambda: alg.grad_evals(ws) if ws is not None else np.nan)
        node_bytes = self.nodes is not None
        if sharded:
            watch = ShardWatch(t, clock, ledger, None, observers, checkpoint=saver, evals=evals,
                               reduce=lambda: self._reduce(ex.iterate()), node_bytes=node_bytes)
        else:
            watch = Watch(t, clock, ledger, lambda: self._metrics(ex.iterate(), x0_dist), observers,
                          checkpoint=saver, evals=evals, node_bytes=node_bytes)
        wstate = ws                     # a node's non-leader rank: its shard's gradient into the node's Reduce
        if self.nodes is not None and not self.nodes.is_leader:
            from .nodes import NodeRank
            ex.follower, wstate = NodeRank(self.rank_setup.local, self.nodes, self.share), NodeRank.FOLLOWER
        if r["warm_up"]:
            warm_up(alg, ex, wstate, ss, x, s.local, self.rng, state)
        done, blew_up = iterate(alg, ex, wstate, ss, x, s.local, self.rng, iterations=r["iterations"],
                                eval_every=r["eval_every"], watch=watch, start=start)
        self.checkpoint_cost = saver.cost
        # every rank's own copy (identical under allreduce/allgather); rank 0 under a compressed
        # downlink: the server's x (the workers hold w)
        x = ex.iterate()
        self.x_final = x
        if blew_up:
            overflow = self._overflow(done)                # collective: every rank saw the same iterate
            outcome.end(*(("overflow", overflow) if overflow else
                          ("diverged", f"non-finite or exploding iterate at iteration {done}")))
        if root:
            bar.close()
        floor = None
        if self.floor:
            from ..floor import run_floor
            floor = run_floor(self, t, done, state=(ws, ss, x, s.local, self.rng), clock=clock, seconds=self.floor)
        return finish(self, rw, x, done, blew_up, clock, ledger, outcome, one_time, crossed, watch.last_row, floor)

    def _overflow(self, done: int) -> str | None:
        """Why the iterate became non-finite if a cast overflowed its wire type (collective, after
        the loop ended with a non-finite iterate): the largest value a rank's compressor sent as
        ±Inf, or the first coordinate of an Allreduce sum that overflowed; None if neither."""
        comps = self.comps if self.comps else [self.comp]
        value = self.t.allreduce_max(max(float(c.overflow) for c in comps))
        coord = int(self.t.allreduce_max(float(max(c.sum_overflow for c in comps))))
        wire = getattr(self.comp, "wire_type", None) or "int8 scale (float32)"
        if value > 0:
            return (f"{self.comp.spec}: |x| = {value:.6g} exceeds the {wire} range at iteration {done} "
                    "(sent as Inf; the aggregate is non-finite)")
        if coord >= 0:
            return (f"{self.comp.spec}: the {wire} Allreduce sum overflowed at coordinate {coord} at iteration "
                    f"{done} (every rank's value in range, their sum beyond it)")
        return None

    def estimated_bytes(self) -> int:
        """Upper estimate of this run's share of the results file (checked against free space)."""
        from ..results import estimate_run_bytes
        r, s = self.r, self.s
        return estimate_run_bytes(r["iterations"] // r["eval_every"] + 2, s.n_workers, self.t.size,
                                  r["iterations"] if r["per_iteration_times"] else 0, s.d)

    def _one_time_upload(self, ex, ws, ss) -> dict:
        """The algorithm's one-time set-up message (e.g. L_i^{1/2} for smoothness-aware methods),
        sent through the run's collective like every other payload. Collective; no-op when unused."""
        payload = self.alg.worker_setup_message(ws) if ws is not None else None
        if not self.t.allreduce_max(0.0 if payload is None else 1.0):
            n = self.s.n_workers
            return {"model": np.zeros(n), "wire": np.zeros(n)}
        return ex.one_time(payload, ss)

    def _attrs(self) -> dict:
        s, r, rc = self.s, self.r, self.rp.cfg
        a = {"config": config.to_toml(rc), "label": rc["label"], "algorithm": r["algorithm"], "compressor": self.comp.spec,
             "compressor_name": self.comp.name, "allocation": r["allocation"], "budget": r["budget"],
             "budget_applied": self.budget_applied, "seed": r["seed"], "repeat": self.rp.repeat, "dataset": rc["data"]["dataset"],
             "partition": rc["data"]["partition"], "problem": rc["problem"]["kind"],
             "l2": rc["problem"]["l2"], "l1": rc["problem"]["l1"], "d": s.d, "n_workers": s.n_workers,
             "server": r["server"], "collective": r["collective"],
             "exchange_rounds": self.exchange_rounds, "f_star": s.opt.f if s.opt else np.nan,
             "x_star_grad_norm": s.opt.grad_norm if s.opt else np.nan,
             "f_star_method": s.opt.method if s.opt else ("none (problem.reference = 'none')"
                                                         if s.reference == "none" else "none (nonconvex or no reference)"),
             "L_max": s.L_max, "setup_seconds": s.setup_seconds,
             "iterations": r["iterations"], "eval_every": r["eval_every"], "batch": r["batch"],
             "stop_measure": "f - f*" if s.opt else "grad_norm_sq / grad_norm_sq[0]",
             "reference": s.reference,
             "evaluation": ("reduction over the shards" if s.reference == "none" else "rank 0, whole data set"),
             "downlink": downlink.DENSE, "overlap_buckets": self.overlap_buckets, "wait_mode": self.wait_mode}
        if self.nodes is not None:       # flat runs have none of these (files read them back as "flat")
            a.update({"topology": "hierarchical", "nodes": self.nodes.count,
                      "ranks_per_node": self.nodes.ranks_per_node.astype(np.int64),
                      "node_assignment": self.nodes.assignment})
        if self.downlink is not None:
            a.update(self.downlink.describe())
        a.update(self.alg.describe())
        return a
