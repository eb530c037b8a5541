"""DGC and signSGD with majority vote under a real mpiexec -n 4 (pytest-mpi).

DGC (Lin et al. 2018): with momentum 0, no clipping and no warm-up it is EF with top-k, bit for bit
(gather and reduce-scatter); with momentum 0.9, clipping and the sparsity warm-up it reaches
f − f* ≤ 1e-4 on mushrooms (logreg, iid shards, top-k k = 6 of d = 112) in 1000 iterations; each
warm-up stage sends its own k. signSGD-MV (Bernstein et al. 2019): the same votes and iterates under
gather, allgather, allreduce and reduce-scatter; the vote rides MPI_Allreduce as int8, d bytes per
rank per iteration; under gather the downlink is 1 bit per coordinate; signSGD and Signum reach
f − f* ≤ 3e-3 on the same problem in 1000 iterations with γ = 0.005."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc.algorithms.dgc import stage_k, warmup_stage
from hpcgc.transport import DOWN_HEADER_BYTES, LENGTH_BYTES
from tests.conftest import libsvm_path
from tests.mpi.conftest import run_experiment

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD


def run_cfg(out: Path, overrides: dict, sweep: dict | None = None):
    return run_experiment(out, {"run.checkpoint_every": 0, **overrides}, name="dgc-signsgd", sweep=sweep)[0]


def mushrooms(**kw):
    return {"data.dataset": f"libsvm:{libsvm_path('mushrooms')}", "data.partition": "iid", "problem.kind": "logreg",
            "problem.l2": 0.05, "run.per_iteration_times": False, **kw}


A9A = {"problem.l2": 0.05, "run.iterations": 60, "run.eval_every": 10, "run.batch": 40,
       "data.partition": "label-sorted"}


@pytest.mark.parametrize("collective,k", [("gather", 3), ("reduce-scatter", 8)])
def test_dgc_without_momentum_clipping_warmup_is_ef_topk_bit_for_bit(shared_dir, collective, k):
    """u = γg, v = e: the same messages, the same memory, the same step — every iterate and bit equal."""
    cfg = {**A9A, "run.compressor": f"topk:k={k}", "run.collective": collective}
    dgc, ef = run_cfg(shared_dir / "eq.h5", cfg, sweep={"run.algorithm": ["dgc", "ef"]})
    assert dgc.attrs["algorithm"] == "dgc" and ef.attrs["algorithm"] == "ef"
    assert dgc.attrs["gamma"] == ef.attrs["gamma"]
    assert np.array_equal(dgc.x_final, ef.x_final)
    for key in ("loss", "grad_norm_sq", "bits_up_model", "bits_up_wire", "bits_down_wire"):
        assert np.array_equal(dgc.series[key], ef.series[key], equal_nan=True), key
    assert np.abs(dgc.x_final).max() > 0


def test_dgc_with_momentum_clipping_and_warmup_converges(shared_dir):
    """Target: f − f* ≤ 1e-4 after 1000 iterations (momentum 0.9 with γ = 0.1/L, the effective step
    γ/(1 − m) = 1/L; clipping at c = 1; a 100-iteration warm-up)."""
    res = run_cfg(shared_dir / "conv.h5", mushrooms(**{
        "run.algorithm": "dgc", "run.compressor": "topk:k=6", "run.momentum": 0.9, "run.step_multiplier": 0.1,
        "run.dgc_clip": 1.0, "run.dgc_warmup": 100, "run.iterations": 1000, "run.eval_every": 100}))
    (r,) = res
    s = r.series
    assert r.status == "completed" and s["suboptimality"][-1] <= 1e-4, s["suboptimality"]
    assert r.attrs["dgc_momentum"] == 0.9 and r.attrs["dgc_local_clip"] == 1.0 / 2.0     # c/√n, n = 4
    if comm.rank == 0:
        print(f"\nDGC topk:k=6 mushrooms: f − f* = {s['suboptimality'][-1]:.3e} after {s['iteration'][-1]} "
              f"iterations, {s['bits_up_model'][-1].mean():.0f} model bits per worker")


def test_dgc_warmup_stages_send_their_own_k(shared_dir):
    """W = 40: iterations 0–9 keep ⌈d/4⌉, 10–19 ⌈d/16⌉, 20–29 ⌈d/64⌉, 30–39 ⌈d/256⌉ (≥ k), then k:
    each iteration's model bits lie in [32·k_s, (32 + ⌈log₂ d⌉)·k_s] (float32 values + indices)."""
    k, W = 1, 40
    (r,) = run_cfg(shared_dir / "warm.h5", {**A9A, "run.algorithm": "dgc", "run.compressor": f"topk:k={k}",
                                             "run.dgc_warmup": W, "run.momentum": 0.5, "run.iterations": 50,
                                             "run.eval_every": 1})
    d = r.attrs["d"]
    per = np.diff(r.series["bits_up_model"], axis=0)            # row t: iteration t's bits, per worker
    ks = [stage_k(k, d, warmup_stage(t, W)) for t in range(50)]
    assert ks[0] == -(-d // 4) and ks[10] == -(-d // 16) and ks[39] == max(k, -(-d // 256)) and ks[45] == k
    for t, kt in enumerate(ks):
        assert np.all(per[t] >= 32 * kt) and np.all(per[t] <= (32 + int(np.ceil(np.log2(d)))) * kt), (t, kt, per[t])


SIGN = {"run.algorithm": "signsgd-mv", "run.compressor": "sign", "run.learning_rate": 0.005}


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_signsgd_mv_every_collective_gives_the_same_iterates(shared_dir, momentum):
    """n = 4 (a power of two: the vote's ties are +1 under every collective). Mini-batches under
    gather / allgather / allreduce (one seed drawn per message alike); full gradients for
    reduce-scatter (it draws one seed per segment, so its mini-batches differ)."""
    base = mushrooms(**SIGN, **{"run.momentum": momentum, "run.iterations": 40, "run.eval_every": 10,
                                "data.partition": "label-sorted"})
    runs = {c: run_cfg(shared_dir / f"{c}.h5", {**base, "run.batch": 30, "run.collective": c})[0]
            for c in ("gather", "allgather", "allreduce")}
    for c, r in runs.items():
        assert r.status == "completed" and np.array_equal(r.x_final, runs["gather"].x_final), c
        assert np.array_equal(r.series["loss"], runs["gather"].series["loss"]), c
    full = {c: run_cfg(shared_dir / f"full-{c}.h5", {**base, "run.collective": c})[0]
            for c in ("gather", "reduce-scatter")}
    assert np.array_equal(full["gather"].x_final, full["reduce-scatter"].x_final)
    assert np.abs(runs["gather"].x_final).max() > 0


def test_signsgd_mv_vote_rides_allreduce_as_int8_and_gather_downlink_is_one_bit(shared_dir):
    """Allreduce: the MPI ledger shows d bytes per rank per iteration (int8 votes), the wire bits 8·d
    and the model bits d. Gather: d model bits per worker up, d down; the Bcast carries the 8-byte
    header, the payload's 8-byte header and ⌈d/8⌉ bytes of signs."""
    base = mushrooms(**SIGN, **{"run.iterations": 20, "run.eval_every": 5})
    ar = run_cfg(shared_dir / "ar.h5", {**base, "run.collective": "allreduce"})[0]
    d, it = ar.attrs["d"], ar.series["iteration"]
    assert ar.attrs["vote_type"] == "int8"
    assert np.array_equal(ar.mpi_bytes["Allreduce"], np.outer(it, np.full(comm.size, d)))
    assert np.array_equal(ar.series["bits_up_wire"], np.outer(it, np.full(comm.size, 8 * d)))
    assert np.array_equal(ar.series["bits_up_model"], np.outer(it, np.full(comm.size, d)))
    g = run_cfg(shared_dir / "g.h5", {**base, "run.collective": "gather"})[0]
    assert g.attrs["downlink"] == "sign" and g.attrs["downlink_scale"] == 0.005
    assert np.array_equal(g.series["bits_up_model"], np.outer(it, np.full(comm.size, d)))
    assert np.array_equal(g.series["bits_down_model"], d * it)
    body = 8 + (d + 7) // 8
    assert np.array_equal(g.series["bits_down_wire"], 8 * (DOWN_HEADER_BYTES + body) * it)
    assert np.array_equal(g.mpi_bytes["Bcast"][:, 0], (DOWN_HEADER_BYTES + body) * it)
    assert np.array_equal(g.series["bits_up_wire"], np.outer(it, np.full(comm.size, 8 * (LENGTH_BYTES + body))))
    assert np.array_equal(g.x_final, ar.x_final)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_signsgd_mv_converges(shared_dir, momentum):
    """Target: f − f* ≤ 3e-3 after 1000 iterations with γ = 0.005 (a constant step: a neighbourhood)."""
    (r,) = run_cfg(shared_dir / "s.h5", mushrooms(**SIGN, **{"run.momentum": momentum, "run.iterations": 1000,
                                                              "run.eval_every": 100}))
    s = r.series
    assert r.status == "completed" and s["suboptimality"][-1] <= 3e-3, s["suboptimality"]
    if comm.rank == 0:
        print(f"\nsignSGD-MV momentum {momentum} mushrooms: f − f* = {s['suboptimality'][-1]:.3e} after "
              f"{s['iteration'][-1]} iterations")
