"""run.repeats under a real mpiexec: every grid point runs R times with the same seed — identical
iterates and bits, recorded as repeat 0 … R−1 — and the spread over them reaches the frames, the
report's tables and the results file's machine/noise attributes."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from hpcgc.results import LEDGER, SCALAR_SERIES, WORKER_SERIES
from tests.mpi.conftest import run_experiment

comm = MPI.COMM_WORLD
R = 3


def test_repeats_same_iterates_repeat_index_and_intervals(shared_dir):
    res, runs, summaries, t = run_experiment(
        shared_dir / "rep.h5", {"run.iterations": 60, "run.eval_every": 10, "run.repeats": R,
                                "run.per_iteration_times": False},
        sweep={"run.algorithm": ["diana", "dcgd"], "run.compressor": ["randk:k=5"]})
    # interleaved: p0r0, p1r0, p0r1, ...
    assert [(r.rp.index, r.rp.repeat) for r in runs] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert len(res) == 2 * R
    by_point: dict = {}
    for run in res:
        assert run.status == "completed"
        by_point.setdefault(run.run_id.rsplit("-r", 1)[0], []).append(run)
    for reps in by_point.values():
        assert sorted(r.attrs["repeat"] for r in reps) == list(range(R))
        first = reps[0]
        for other in reps[1:]:
            assert other.attrs["seed"] == first.attrs["seed"] and other.config == first.config
            for k in (*SCALAR_SERIES, *WORKER_SERIES):
                if k in first.series:
                    assert np.array_equal(first.series[k], other.series[k], equal_nan=True), k
            for c in LEDGER:
                assert np.array_equal(first.mpi_bytes[c], other.mpi_bytes[c]), c
            assert np.array_equal(first.x_final, other.x_final)
            for k in ("sender_bytes_up", "grad_evals", "samples", "compression_ratio"):
                assert np.array_equal(first.workers[k], other.workers[k], equal_nan=True), k
    # the machine and its noise, recorded at start and end
    for key in ("machine_start_load1", "machine_end_load1", "machine_start_cpu_model", "machine_end_cores",
                "machine_start_missing", "noise_other_cpu_share", "noise_own_ranks", "noise_warnings"):
        assert key in res.attrs, key
    assert res.attrs["noise_own_ranks"] == comm.size                 # every rank of this job on one host
    if comm.rank == 0:
        assert [s.repeat for s in summaries] == [0, 0, 1, 1, 2, 2]
        assert isinstance(summaries.warnings, list)
    # the frames: repeat column, one spread row per configuration with interval columns
    rf = res.runs_frame()
    assert sorted(rf["repeat"].tolist()) == sorted(list(range(R)) * 2)
    sf = res.spread_frame(eps=float(np.nanmax([r.series["suboptimality"][-1] for r in res])))
    assert len(sf) == 2 and (sf["runs"] == R).all() and (sf["over"] == "repeats").all()
    for m in ("ms_per_iteration", "iterations", "time_to_eps_s"):
        lo, med, hi = sf[f"{m}_lo"], sf[f"{m}_median"], sf[f"{m}_hi"]
        assert ((lo <= med) & (med <= hi)).all(), m
        assert (sf[f"{m}_coverage"] == 0.75).all()                    # [min, max] of 3
    assert (sf["iterations_lo"] == sf["iterations_hi"]).all()        # same iterates: same iteration counts


def test_report_tables_carry_the_interval(shared_dir):
    res, _, _, _ = run_experiment(shared_dir / "rep2.h5", {"run.iterations": 40, "run.repeats": R,
                                                           "run.algorithm": "diana", "run.compressor": "randk:k=5"})
    if comm.rank == 0:
        from hpcgc.analysis.report import report
        out = report([str(shared_dir / "rep2.h5")], shared_dir / "report", eps=1.0, formats=("png",))
        row = out["method_rows"][0]
        assert row["runs"] == R and row["spread_over"] == "repeats"
        assert row["time_to_eps_s_lo"] <= row["time_to_eps_s_median"] <= row["time_to_eps_s_hi"]
        assert row["ms_per_iteration_lo"] <= row["ms_per_iteration_median"] <= row["ms_per_iteration_hi"]
        assert "[min, max] of 3" in row["interval"]
        table = (shared_dir / "report" / "table.csv").read_text()
        assert "time_to_eps_s_lo" in table and "ms_per_iteration_hi" in table
        assert sorted(r["repeat"] for r in out["run_rows"]) == list(range(R))
    comm.Barrier()
