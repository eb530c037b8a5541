"""The tables ``hpcgc run`` and ``hpcgc floor`` print on rank 0 from the runs' summaries
(:class:`hpcgc.run.finish.RunSummary`): the summary table, the spread over the runs of one configuration
(repeats, seeds), and the floor table. Text only: no MPI, no data."""
from __future__ import annotations

import math
import re


def _measure(s) -> str:
    """The run's final measure for the summary: f − f*, or the ‖∇f‖² ratio (suffix g) without f*."""
    if math.isnan(s.suboptimality) and math.isfinite(s.grad_ratio):
        return f"{s.grad_ratio:.2e}g"
    return f"{s.suboptimality:.3e}"


RUN_HEAD = f"{'run':<5} {'algorithm':<9} {'compressor':<26} {'collective':<10}"


def run_columns(s, repeat: bool = True) -> str:
    """A run's first columns in the summary and floor tables (under :data:`RUN_HEAD`)."""
    run = s.run_id[:3] + (f"r{s.repeat}" if repeat and re.search(r"-r\d+$", s.run_id) else "")
    return f"{run:<5} {s.algorithm:<9} {s.compressor[:26]:<26} {s.collective:<10}"


def floor_head(ratio: str) -> str:
    return f"{'median(ms)':>10} {'floor(ms)':>10} {ratio:>7}"


def floor_columns(s) -> str:
    """A run's median iteration, floor and their ratio (under :func:`floor_head`)."""
    return f"{s.median_iter_ms:>10.4f} {s.floor_ms:>10.4f} {s.floor_ratio:>7.2f}"


def summary_table(summaries) -> str:
    cols = ("grad", "compress", "wait_up", "comm_up", "server", "wait_down", "comm_down", "other", "iter",
            "comm_hidden")
    head = (f"{RUN_HEAD} {'status':<10} {'iters':>6} {'f - f*':>10} "
            f"{'MB up':>9} {'wire/model':>10} " + " ".join(f"{c + '(ms)':>12}" for c in cols))
    floor = any(math.isfinite(s.floor_ratio) for s in summaries)
    if floor:
        head += " " + floor_head("/floor")
    head += f" {'inter(MB)':>10} {'intra(MB)':>10}"
    lines = ["# per-iteration times: mean over iterations and ranks; MB up: bytes that crossed the network "
             "(every rank's under allreduce/allgather, all but rank 0's under gather); wait_*: waiting for "
             "other ranks (late senders) before a transfer, comm_*: the collective, other: hpcgc's bookkeeping, iter: wall-clock, "
             "comm_hidden: run.overlap's communication in flight during grad, not in iter's sum "
             "(docs/results.md, Phases)",
             "# inter(MB): bytes all ranks handed to the run's collectives (uplink and downlink; under run.topology = "
             "'hierarchical' the node leaders' collectives between nodes); intra(MB): bytes sent inside the nodes "
             "(hierarchical: the node's Reduce and Bcast; 0 when flat)",
             "# f - f*: the final suboptimality; on problems without f* (nonconvex) the final "
             "|grad f|^2 / |grad f(x0)|^2, marked g",
             head, "-" * len(head)]
    for s in summaries:
        lines.append(f"{run_columns(s)} {s.status:<10} {s.iterations:>6} "
                     f"{_measure(s):>10} {s.mb_up:>9.4f} {s.wire_over_model:>10.3f} "
                     + " ".join(f"{s.phase_ms.get(c, math.nan):>12.4f}" for c in cols)
                     + (" " + floor_columns(s) if floor else "")
                     + f" {getattr(s, 'mb_inter', math.nan):>10.4f} {getattr(s, 'mb_intra', math.nan):>10.4f}")
    if floor:
        lines.append("# median: hpcgc's median iteration (over ranks and iterations); floor: the same collectives with "
                     "the same message sizes and nothing else (python -m hpcgc.bench floor, docs/performance.md)")
    return "\n".join(lines)


def spread_groups(summaries, group_of) -> list[tuple[str, list]]:
    """Summaries grouped by ``group_of(summary)`` (the run's configuration without its seed), in
    first-seen order; groups of one run are left out."""
    groups: dict = {}
    for s in summaries:
        groups.setdefault(group_of(s), []).append(s)
    return [(k, g) for k, g in groups.items() if len(g) > 1]


def over_what(group) -> str:
    """'repeats', 'seeds' or 'repeats x seeds': what a group's runs differ in."""
    reps, seeds = len({s.repeat for s in group}), len({s.seed for s in group})
    return "repeats x seeds" if reps > 1 and seeds > 1 else "seeds" if seeds > 1 else "repeats"


def spread_table(summaries, group_of) -> str:
    """The median and 95 % interval (hpcgc.analysis.spread: order statistics of the median) of time
    per iteration, iterations and time to target of each group of runs that share a configuration
    but the seed (repeats of one grid point, seeds, or both); empty when every group has one run."""
    from .analysis.spread import describe, format_spread, spread
    groups = spread_groups(summaries, group_of)
    if not groups:
        return ""
    head = (f"{RUN_HEAD} {'over':<15} {'n':>3} {'ms/it (median) [95% interval]':>34} "
            f"{'iterations':>26} {'time to target (s)':>30}")
    lines = ["# spread over runs of one configuration: median [95 % interval] (order statistics of the median; "
             "docs/analysis.md, Spread)", head, "-" * len(head)]
    ns = set()
    for _, g in groups:
        ns.add(len(g))
        tt = spread([s.time_to_target_s for s in g])
        reached = f" ({tt.n}/{len(g)})" if tt.n < len(g) else ""
        lines.append(f"{run_columns(g[0], repeat=False)} {over_what(g):<15} {len(g):>3} "
                     f"{format_spread(spread([s.median_iter_ms for s in g])):>34} "
                     f"{format_spread(spread([s.iterations for s in g]), '.6g'):>26} "
                     f"{format_spread(tt) + reached:>30}")
    lines += [f"# n = {n}: {describe(n)}" for n in sorted(ns)]
    lines.append("# time to target: the loop's wall-clock of runs stopped by run.tolerance (k/n: k of n runs reached it)")
    return "\n".join(lines)


def floor_table(summaries) -> str:
    """The floor table printed by ``python -m hpcgc.bench floor`` (the floors: :mod:`hpcgc.floor`)."""
    head = (f"{RUN_HEAD} {'iters':>6} {floor_head('ratio')} {'+kernels(ms)':>12} {'ratio':>7}"
            "  collectives per iteration (rank 0)")
    lines = ["# floor: the run's collectives with its message sizes and nothing else, back to back "
             "(median of batches, slowest rank); median: hpcgc's median iteration (wall-clock, over ranks "
             "and iterations); ratio = median / floor",
             "# +kernels: the floor plus the method's own kernels timed alone (slowest worker's gradient and "
             "message + rank 0's server step; gather only, else nan); its ratio = median / (collectives + kernels), "
             "the figure docs/performance.md quotes",
             head, "-" * len(head)]
    for s in summaries:
        lines.append(f"{run_columns(s)} {s.iterations:>6} {floor_columns(s)} {s.floor_kernels_ms:>12.4f} "
                     f"{s.floor_ratio_kernels:>7.2f}  {s.floor_collectives}")
    traffic = traffic_table(summaries)
    return "\n".join(lines) + ("\n" + traffic if traffic else "")


def traffic_table(summaries) -> str:
    """Rank 0's memory-traffic floor per phase of each run (:mod:`hpcgc.traffic`, printed by
    ``floor``): the bytes the phase's mathematics reads and writes, their time at the copy
    bandwidth measured in the same run, the measured median and the ratio; then the same counted in
    64-byte lines (lineMB, lfloor, lratio); empty when no run has the figures."""
    runs = [s for s in summaries if getattr(s, "traffic", None)]
    if not runs:
        return ""
    head = (f"{RUN_HEAD} {'phase':<9} {'MB':>8} {'floor(ms)':>10} {'median(ms)':>10} {'ratio':>7} "
            f"{'lineMB':>8} {'lfloor(ms)':>10} {'lratio':>7}")
    lines = ["# memory-traffic floor (rank 0, docs/performance.md): MB = what the phase's mathematics must read and "
             "write (nonzeros, touched d-vectors, payloads), 8 B per float64 even where scattered; floor = MB at the "
             "copy bandwidth measured in the same run (every rank at once, 64 MiB / n ranks per buffer); "
             "ratio = median / floor",
             "# lineMB, lfloor, lratio: the same counted in 64-byte cache lines — a scattered access (x and the "
             "gradient at the shard's columns, a sparse message's entries decoded into a d-vector) moves every line "
             "it touches (64 B read, 64 B more where it writes), streamed ones as in MB; at the same bandwidth, "
             "still a lower bound (scattered lines also lose the hardware prefetcher)",
             head, "-" * len(head)]
    for s in runs:
        lines.append(f"{run_columns(s)} {'copy':<9} {'GB/s:':>8} {s.traffic['bandwidth'] / 1e9:>10.2f}")
        for (ph, nbytes, fl, med), (_, lbytes, lfl) in zip(s.traffic["rows"], s.traffic["line_rows"]):
            if math.isnan(nbytes):
                lines.append(f"{run_columns(s)} {ph:<9} {'no model':>8} {'':>10} {1e3 * med:>10.4g}")
                continue
            r = med / fl if math.isfinite(fl) and fl > 0 else math.nan
            lr = med / lfl if math.isfinite(lfl) and lfl > 0 else math.nan
            lines.append(f"{run_columns(s)} {ph:<9} {nbytes / 1e6:>8.4g} {1e3 * fl:>10.4g} {1e3 * med:>10.4g} {r:>7.3g} "
                         f"{lbytes / 1e6:>8.4g} {1e3 * lfl:>10.4g} {lr:>7.3g}")
    return "\n".join(lines)
