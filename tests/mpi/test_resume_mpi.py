"""Checkpoint and resume under a real mpiexec -n 4: a run interrupted by a real SIGTERM (every rank
signals itself during an iteration between evaluation points) and resumed with --resume equals the
uninterrupted run bit for bit — every non-timing dataset, row for row: iterates, bits, the MPI byte
ledger — for every kind of state (DIANA's shifts and momentum, EF's memory e_i, EF21's g_i and
server g, DGC's velocities and warm-up stage, Signum's v_i, local copies, PowerSGD's Q,
reduce-scatter's owner-side aggregate state); a checkpoint that is not typed state fitting the run (a
hostile pickle, other shapes) is refused before anything runs."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import results
from hpcgc.results import checkpoint as checkpoint_file
from hpcgc.run import execute, prepare
from hpcgc.run.signals import REQUEST, Interrupted
from hpcgc.transport import Transport
from tests.mpi.conftest import defaults

pytestmark = pytest.mark.mpi(min_size=4)
comm = MPI.COMM_WORLD

CASES = {
    "diana-qsgd": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.momentum": 0.5, "run.batch": 40},
    "dcgd-randk": {"run.algorithm": "dcgd", "run.compressor": "randk:k=6"},
    "ef-randk": {"run.algorithm": "ef", "run.compressor": "randk:k=6", "run.batch": 40},
    "ef21-topk": {"run.algorithm": "ef21", "run.compressor": "topk:k=3", "run.batch": 40},
    "diana-ef21p-down": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2", "run.downlink": "randk:k=6"},
    "vr-diana-coin": {"run.algorithm": "vr-diana", "run.compressor": "randk:k=6", "run.batch": 30},
    "adiana-allgather": {"run.algorithm": "adiana", "run.compressor": "natural", "run.collective": "allgather"},
    "adiana-gather": {"run.algorithm": "adiana", "run.compressor": "natural", "run.probability": 0.05},
    "diana-hadamard": {"run.algorithm": "diana", "run.compressor": "hadamard:s=2"},   # the shared rotation stream
    "diana-reduce-scatter": {"run.algorithm": "diana", "run.compressor": "qsgd:s=2",
                             "run.collective": "reduce-scatter"},          # the owners' D (checkpointed)
    "ef21-topk-reduce-scatter": {"run.algorithm": "ef21", "run.compressor": "topk:k=8",
                                 "run.collective": "reduce-scatter"},
    "dgc-warmup-momentum": {"run.algorithm": "dgc", "run.compressor": "topk:k=3", "run.momentum": 0.9,
                            "run.step_multiplier": 0.1, "run.dgc_clip": 1.0, "run.dgc_warmup": 240,
                            "run.batch": 40},            # u_i, v_i and the warm-up stage's counters
    "signum-mv-gather": {"run.algorithm": "signsgd-mv", "run.compressor": "sign", "run.learning_rate": 0.001,
                         "run.momentum": 0.9, "run.batch": 40},       # v_i; the 1-bit downlink
    "signsgd-mv-allreduce": {"run.algorithm": "signsgd-mv", "run.compressor": "sign", "run.learning_rate": 0.001,
                             "run.collective": "allreduce", "run.batch": 40},
    "diana+-dense": {"run.algorithm": "diana+", "run.compressor": "quant+:p=inf", "run.batch": 30},
    "local-sgd-topk-ef": {"data.dataset": "digits", "problem.kind": "softmax", "run.algorithm": "local-sgd",
                          "run.compressor": "topk:k=20", "run.error_feedback": True, "run.batch": 16,
                          "run.learning_rate": 0.1},
    "dagc": {"data.dataset": "digits", "data.partition": "dirichlet:1+skew:10", "problem.kind": "softmax",
             "run.algorithm": "local-sgd", "run.compressor": "topk:k=1", "run.allocation": "dagc",
             "run.budget": 0.1, "run.error_feedback": True, "run.batch": 16, "run.learning_rate": 0.1},
    "diloco-topk-ef": {"data.dataset": "digits", "problem.kind": "softmax", "run.algorithm": "diloco",
                       "run.compressor": "topk:k=20", "run.error_feedback": True, "run.local_steps": 3,
                       "run.batch": 16, "run.learning_rate": 0.1},          # outer momentum v, e_i, x_i
    "powersgd-allreduce": {"data.dataset": "digits", "problem.kind": "mlp", "run.algorithm": "local-sgd",
                           "run.compressor": "powersgd:rank=2", "run.collective": "allreduce",
                           "run.error_feedback": True, "run.batch": 16, "run.learning_rate": 0.1},
}


def _cfg(overrides, iterations):
    cfg = defaults()
    cfg["name"] = "resume"
    for key, value in {"run.iterations": iterations, "run.eval_every": 10, "run.tolerance": 0.0,
                       "run.checkpoint_every": iterations // 3, "problem.l2": 0.05, **overrides}.items():
        sec, k = key.split(".")
        cfg[sec][k] = value
    return cfg


def _execute(cfg, out, resume=False, before=None):
    t = Transport()
    runs = prepare(cfg, t)
    if before is not None:
        before(runs)
    return execute(runs, t, out, log=lambda *a: None, resume=resume)


def _sigterm_at(iteration):
    """A real SIGTERM to every rank (as mpiexec or SLURM forward one) during ``iteration``: each
    rank signals itself from its worker's gradient step of that iteration (rank 0 is a worker)."""
    def arm(runs):
        alg = runs[0].alg
        compute, calls = alg.worker_compute, [0]

        def counted(*args, **kwargs):
            calls[0] += 1
            if calls[0] == iteration:
                os.kill(os.getpid(), signal.SIGTERM)
            return compute(*args, **kwargs)
        alg.worker_compute = counted
    return arm


def _interrupt(cfg, out, iteration):
    REQUEST.install()
    try:
        with pytest.raises(Interrupted) as caught:
            _execute(cfg, out, before=_sigterm_at(iteration))
    finally:
        REQUEST.restore()
    comm.Barrier()
    assert caught.value.signum == signal.SIGTERM
    return results.load(out.with_name(out.name + ".partial"))[0]


TIMING = ("time", "per_iteration")       # wall-clock: differs between any two runs


def _datasets(path):
    """Every non-timing dataset of the file's one run, by path."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        run = next(iter(f["runs"].values()))
        run.visititems(lambda name, obj: out.setdefault(name, obj[()]) if isinstance(obj, h5py.Dataset)
                       and name.split("/")[0] not in TIMING else None)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_and_resumed_equals_uninterrupted(shared_dir, case):
    """SIGTERM between evaluation points (iteration 10·j + 3), checkpoints every third of the run:
    the resumed file's series equal the uninterrupted run's row for row — every non-timing dataset.
    300 iterations (150 for the classifiers) as tests/mpi/test_ef21sgdm_dasha_mpi.py's resume cases:
    two periodic checkpoints, the cut at 183 between them and off the evaluation grid, 117 resumed
    iterations; DGC's warm-up (240 = 4 stages of 60) is in its last stage at the cut and ends during
    the resume."""
    iterations = 300 if "data.dataset" not in CASES[case] else 150     # the classifiers are slower per iteration
    cfg = _cfg(CASES[case], iterations)
    _execute(cfg, shared_dir / "full.h5")
    cut_at = (iterations * 6 // 10) + 3                      # off the evaluation grid (eval_every = 10)
    cut = _interrupt(cfg, shared_dir / "cut.h5", cut_at)
    assert cut.status == "interrupted"
    stopped_at = cut.attrs["iterations_done"]
    assert cut_at <= stopped_at < iterations
    if CASES[case].get("run.collective", "gather") == "gather":    # rank 0 stops in the iteration it got
        assert stopped_at == cut_at and cut.series["iteration"][-1] == cut_at     # the signal: an off-grid row

    _execute(cfg, shared_dir / "cut.h5", resume=True)
    comm.Barrier()
    a, b = results.load(shared_dir / "full.h5")[0], results.load(shared_dir / "cut.h5")
    assert b.complete and b.attrs["resumed"] == 1
    b = b[0]
    assert b.status == "completed" and b.attrs["iterations_done"] == iterations
    assert np.array_equal(a.x_final, b.x_final)
    assert np.array_equal(a.series["iteration"], b.series["iteration"])      # no row of the interruption
    for key in ("loss", "grad_norm_sq", "bits_up_model", "bits_up_wire", "bits_received_wire", "bits_down_wire",
                "bits_down_model"):
        assert np.array_equal(a.series[key], b.series[key], equal_nan=True), key
    for coll, sent in a.mpi_bytes.items():
        assert np.array_equal(sent, b.mpi_bytes[coll]), coll
    assert np.array_equal(a.workers["sender_bytes_up"], b.workers["sender_bytes_up"])
    full, resumed = _datasets(shared_dir / "full.h5"), _datasets(shared_dir / "cut.h5")
    assert sorted(full) == sorted(resumed)
    for name, value in full.items():
        assert np.array_equal(value, resumed[name], equal_nan=value.dtype.kind == "f"), name


class Hostile:
    """Unpickling this creates ``marker``: what a pickled checkpoint from someone else could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_resume_refuses_untrusted_checkpoints_and_runs_nothing(shared_dir):
    """A hostile pickle where a checkpoint was (the old format, or the new one's name with pickled
    bytes), and a typed checkpoint whose shapes do not fit: --resume refuses with one line on every
    rank, nothing runs, the partial file keeps its rows; the genuine checkpoint then resumes."""
    import pickle

    import h5py

    from hpcgc.errors import UserError
    cfg = _cfg(CASES["dcgd-randk"], 200)
    out = shared_dir / "h.h5"
    cut = _interrupt(cfg, out, 57)
    rows = len(cut.series["iteration"])
    ck = shared_dir / "h.h5.checkpoint" / f"{cut.run_id}.h5"
    genuine = ck.with_name("genuine.h5")
    marker = shared_dir / "pwned"
    blob = np.frombuffer(pickle.dumps({"x": Hostile(marker)}), dtype=np.uint8)

    def plant(kind):
        if comm.rank == 0:
            if kind == "old":           # what hpcgc wrote before typed checkpoints
                with h5py.File(ck, "w") as f:
                    for r in range(comm.size):
                        f.create_dataset(f"rank_{r}", data=blob)
                    f.attrs.update(iteration=57, rows=rows, ranks=comm.size, run_id=cut.run_id,
                                   format="one pickled dict per rank (hpcgc.run.checkpoint.RunState)")
            elif kind == "disguised":   # the new format's name over pickled bytes
                with h5py.File(ck, "w") as f:
                    for r in range(comm.size):
                        f.create_dataset(f"rank_{r}", data=blob)
                    f.attrs.update(iteration=57, rows=rows, ranks=comm.size, run_id=cut.run_id,
                                   format=checkpoint_file.FORMAT, checkpoint_version=checkpoint_file.VERSION)
            elif kind == "reshaped":    # typed, but rank 2's iterate is shorter than this run's
                import shutil
                shutil.copy(genuine, ck)
                with h5py.File(ck, "r+") as f:
                    x = f["rank_2/x"][()]
                    del f["rank_2/x"]
                    f["rank_2/x"] = x[:-1]
        comm.Barrier()

    if comm.rank == 0:
        os.replace(ck, genuine)
    comm.Barrier()
    for kind, says in (("old", "predates typed checkpoints"), ("disguised", "not the groups rank_0"),
                       ("reshaped", r"checkpoint of run \S+, rank 2: /x is float64\[\d+\], this run's is float64\[\d+\]$")):
        plant(kind)
        with pytest.raises(UserError, match=says) as refused:
            _execute(cfg, out, resume=True)
        assert "\n" not in str(refused.value)
        comm.Barrier()
        assert not marker.exists()
        left = results.load(shared_dir / "h.h5.partial")[0]
        assert left.status == "interrupted" and len(left.series["iteration"]) == rows, kind
        assert ck.exists()
        comm.Barrier()
    if comm.rank == 0:
        os.replace(genuine, ck)
    comm.Barrier()
    _execute(cfg, out, resume=True)
    comm.Barrier()
    assert results.load(out)[0].attrs["iterations_done"] == 200 and not marker.exists()


def test_resume_refuses_a_different_experiment(shared_dir):
    cfg = _cfg(CASES["dcgd-randk"], 200)
    _execute(cfg, shared_dir / "x.h5")
    comm.Barrier()
    if comm.rank == 0:
        os.replace(shared_dir / "x.h5", shared_dir / "x.h5.partial")    # as if it had been cut off
    comm.Barrier()
    other = _cfg({**CASES["dcgd-randk"], "run.seed": 9}, 200)
    from hpcgc.errors import UserError
    with pytest.raises(UserError, match="different invocation"):
        _execute(other, shared_dir / "x.h5", resume=True)
