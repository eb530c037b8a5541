"""The end of one run (:meth:`hpcgc.run.run.Run.execute`'s tear-down): every rank's sender-side
ledger and per-iteration timings gathered to rank 0, the run's tables written, and the
:class:`RunSummary` the summary table (:mod:`hpcgc.summary`) is made of."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..transport import LENGTH_BYTES, PHASES


@dataclass
class RunSummary:
    run_id: str
    algorithm: str
    compressor: str
    collective: str
    status: str
    stop_reason: str
    iterations: int
    suboptimality: float
    mb_up: float
    phase_ms: dict
    median_iter_ms: float
    wire_over_model: float
    grad_ratio: float = np.nan          # ‖∇f(x)‖²/‖∇f(x⁰)‖² at the last evaluation (problems without f*)
    floor_ms: float = np.nan            # the run's collectives alone, per iteration (--floor, hpcgc.floor)
    floor_ratio: float = np.nan         # median_iter_ms / floor_ms
    floor_collectives: str = ""         # the collective sequence the floor timed (rank 0's sizes)
    floor_kernels_ms: float = np.nan    # the floor + the run's own kernels timed alone (hpcgc.floor.kernels)
    floor_ratio_kernels: float = np.nan  # median_iter_ms / floor_kernels_ms
    traffic: dict = field(default_factory=dict)   # rank 0's memory-traffic floor per phase (hpcgc.floor.traffic)
    point: int = 0                      # the grid point (repeats of one point share it)
    repeat: int = 0                     # 0 … run.repeats − 1
    seed: int = 0
    loop_s: float = np.nan              # rank 0's wall-clock in the iteration loop (seconds)
    reached: bool = False               # stopped by run.tolerance: loop_s is the time to target
    mb_inter: float = np.nan            # MB every rank handed to the run's collectives (between nodes)
    mb_intra: float = np.nan            # MB sent inside the nodes (run.topology = "hierarchical"; flat: 0)
    topology: str = "flat"

    @property
    def time_to_target_s(self) -> float:
        return self.loop_s if self.reached else np.nan


def finish(run, rw, x, done, blew_up, clock, ledger, outcome, one_time, crossed, last_row, floor=None):
    """Tear-down of :class:`.run.Run` (collective, untimed): sender-side ledger and per-iteration
    timings to rank 0, the run's tables, the summary (rank 0; None elsewhere)."""
    s, t, r = run.s, run.t, run.r
    evals = run.alg.grad_evals(run.ws) if run.ws is not None else np.nan
    sent = t.gather_rows(np.array([float(t.up_bytes), evals, float(t.ledger.sum()), float(t.intra[0])]))
    per_it = clock.per_iteration
    per_rank = t.gather_rows(per_it[:done].ravel()) if per_it is not None else None
    # without per-iteration times the summary's means are still over ranks: every rank's totals
    totals = t.gather_rows(clock.totals) if per_it is None else None
    if not t.is_root:
        return None
    n = s.n_workers
    if blew_up and rw is not None:
        # the divergent state is recorded as the last row so the file shows where it blew up
        rw.append({"iteration": done, "loss": np.nan, "suboptimality": np.nan, "dist_to_opt": np.nan,
                   "grad_norm_sq": np.nan, "accuracy": np.nan, "bits_up_model": ledger.model,
                   "bits_up_wire": ledger.wire, "bits_received_wire": ledger.wire * np.nan,
                   "bits_down_wire": ledger.down, "bits_down_model": ledger.down_model,
                   "time": np.tile(clock.totals, (t.size, 1)) * np.nan,
                   "mpi_bytes": np.tile(t.ledger, (t.size, 1)) * np.nan,
                   "node_bytes": np.full((t.size, 4), np.nan)})
    if rw is not None:
        rw.write_table("workers", {
            "rank": np.array(s.worker_ranks), "samples": s.samples,
            "compression_ratio": np.where(np.isnan(run.ratios), 1.0, run.ratios),
            "threshold": run.thresholds, "label_histogram": s.label_hist,
            "one_time_bits": one_time["model"], "one_time_bits_wire": one_time["wire"],
            "crossed_network": crossed, "smoothness": s.L_local,
            "sender_bytes_up": sent[s.worker_ranks, 0], "grad_evals": sent[s.worker_ranks, 1]})
        if per_rank is not None:
            pr = per_rank.reshape(t.size, done, len(PHASES))
            rw.write_table("per_iteration", {ph: pr[:, :, j].T.astype(np.float32)
                                             for j, ph in enumerate(PHASES)})
    mean_ms = ({ph: 1e3 * float(totals[:, j].mean()) / max(done, 1) for j, ph in enumerate(PHASES)}
               if totals is not None else {})
    if per_rank is not None and done:
        pr = per_rank.reshape(t.size, done, len(PHASES))
        mean_ms = {ph: 1e3 * float(pr[:, :, j].mean()) for j, ph in enumerate(PHASES)}
        med_iter = 1e3 * float(np.median(pr[:, :, PHASES.index("iter")]))
    else:
        med_iter = mean_ms["iter"]
    extra, traffic = {}, {}
    if run.overlap_buckets:                 # run.overlap: rank 0's window (the break-even model's H)
        extra["overlap_window_seconds"] = run.ex.window_seconds()
    if floor is not None:
        floor = dict(floor)
        traffic = floor.pop("floor_traffic", {})         # printed by `floor`, not stored
        extra = {**extra, **floor, "floor_ratio": 1e-3 * med_iter / floor["floor_seconds"]
                 if floor["floor_seconds"] > 0 else np.nan}
        fk = floor.get("floor_kernels_seconds", np.nan)
        extra["floor_ratio_kernels"] = 1e-3 * med_iter / fk if fk > 0 else np.nan
    if rw is not None:
        rw.finish(outcome.status, outcome.reason, {"iterations_done": done, **run.checkpoint_cost, **extra},
                  {"x_final": x})
    model_total = ledger.model.sum()
    header = 8 * LENGTH_BYTES * n * done if r["collective"] != "allreduce" else 0
    return RunSummary(
        run_id=run.rp.run_id, algorithm=r["algorithm"], compressor=run.comp.spec, collective=r["collective"],
        status=outcome.status, stop_reason=outcome.reason, iterations=done,
        suboptimality=float(last_row.get("suboptimality", np.nan)) if outcome.status not in ("diverged", "overflow") else np.nan,
        mb_up=float(ledger.wire[crossed].sum()) / 8e6, phase_ms=mean_ms, median_iter_ms=med_iter,
        wire_over_model=float(ledger.wire.sum() - header) / model_total if model_total else np.nan,
        grad_ratio=(float(last_row.get("grad_norm_sq", np.nan)) / run.grad0
                    if run.grad0 and outcome.status not in ("diverged", "overflow") else np.nan),
        floor_ms=1e3 * extra.get("floor_seconds", np.nan), floor_ratio=extra.get("floor_ratio", np.nan),
        floor_collectives=extra.get("floor_collectives", ""),
        floor_kernels_ms=1e3 * extra.get("floor_kernels_seconds", np.nan),
        floor_ratio_kernels=extra.get("floor_ratio_kernels", np.nan), traffic=traffic,
        point=run.rp.index, repeat=run.rp.repeat,
        seed=int(r["seed"]), loop_s=float(clock.totals[PHASES.index("iter")]),
        reached=outcome.status == "completed" and outcome.reason.startswith("tolerance"),
        mb_inter=float(sent[:, 2].sum()) / 1e6, mb_intra=float(sent[:, 3].sum()) / 1e6, topology=r["topology"])
