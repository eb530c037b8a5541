"""Checkpoint and resume under a real mpiexec -n 4: a run interrupted by a real SIGTERM (one rank
signals itself at a random time) and resumed with --resume equals the uninterrupted run bit for bit
— iterates, bits at every recorded iteration, the MPI byte ledger — for every kind of state
(DIANA's shifts and momentum, EF's memory e_i, EF21's g_i and server g, local copies, PowerSGD's Q)."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from hpcgc import config, results
from hpcgc.run import execute, prepare
from hpcgc.run.signals import REQUEST, Interrupted
from hpcgc.transport import Transport

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
    "diana+-dense": {"run.algorithm": "diana+", "run.compressor": "quant+:p=inf", "run.batch": 30},
    "local-sgd-topk-ef": {"data.dataset": "digits", "problem.kind": "softmax", "run.algorithm": "local-sgd",
                          "run.compressor": "topk:k=20", "run.error_feedback": True, "run.batch": 16,
                          "run.learning_rate": 0.1},
    "dagc": {"data.dataset": "digits", "data.partition": "dirichlet:1+skew:10", "problem.kind": "softmax",
             "run.algorithm": "local-sgd", "run.compressor": "topk:k=1", "run.allocation": "dagc",
             "run.budget": 0.1, "run.error_feedback": True, "run.batch": 16, "run.learning_rate": 0.1},
    "powersgd-allreduce": {"data.dataset": "digits", "problem.kind": "mlp", "run.algorithm": "local-sgd",
                           "run.compressor": "powersgd:rank=2", "run.collective": "allreduce",
                           "run.error_feedback": True, "run.batch": 16, "run.learning_rate": 0.1},
}


def _cfg(overrides, iterations):
    cfg = config.defaults()
    cfg["name"] = "resume"
    for key, value in {"run.iterations": iterations, "run.eval_every": 10, "run.tolerance": 0.0,
                       "run.checkpoint_every": 0, "problem.l2": 0.05, **overrides}.items():
        sec, k = key.split(".")
        cfg[sec][k] = value
    return cfg


def _execute(cfg, out, resume=False, before=None):
    t = Transport()
    runs = prepare(cfg, t)
    if before is not None:
        before()
    return execute(runs, t, out, log=lambda *a: None, resume=resume)


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_and_resumed_equals_uninterrupted(shared_dir, case):
    iterations = 1500 if "data.dataset" not in CASES[case] else 150     # the classifiers are slower per iteration
    cfg = _cfg(CASES[case], iterations)
    started = {}
    _execute(cfg, shared_dir / "full.h5", before=lambda: started.setdefault("t", time.monotonic()))
    full_seconds = comm.bcast(time.monotonic() - started["t"], root=0)

    caught = None
    for lo, hi in ((0.4, 0.6), (0.1, 0.2), (0.01, 0.05)):     # a faster second run may end before the
        REQUEST.install()                                    # signal (the first one compiled kernels):
        timers = []                                          # then again, earlier

        def arm(lo=lo, hi=hi, timers=timers):    # one rank is signalled, at a random moment mid-run
            if comm.rank == 2:
                delay = np.random.default_rng().uniform(lo, hi) * full_seconds
                timers.append(threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)))
                timers[0].start()
        try:
            _execute(cfg, shared_dir / "cut.h5", before=arm)
        except Interrupted as exc:
            caught = exc
        finally:
            for timer in timers:
                timer.cancel()
            REQUEST.restore()
        comm.Barrier()
        if caught is not None:
            if results.load(shared_dir / "cut.h5.partial")[0].status == "interrupted":
                break
            caught = None                    # the signal came after the run's last iteration (the
            left = "cut.h5.partial"          # loop is a small part of a short run): again, earlier
        else:
            left = "cut.h5"
        if comm.rank == 0:
            (shared_dir / left).unlink()
        comm.Barrier()
    assert caught is not None and caught.signum == signal.SIGTERM
    comm.Barrier()
    cut = results.load(shared_dir / "cut.h5.partial")[0]
    assert cut.status == "interrupted"
    stopped_at = cut.attrs["iterations_done"]
    assert 0 < stopped_at < iterations

    _execute(cfg, shared_dir / "cut.h5", resume=True)
    comm.Barrier()
    a, b = results.load(shared_dir / "full.h5")[0], results.load(shared_dir / "cut.h5")
    assert b.complete and b.attrs["resumed"] == 1
    b = b[0]
    assert b.status == "completed" and b.attrs["iterations_done"] == iterations
    assert np.array_equal(a.x_final, b.x_final)
    ia, ib = a.series["iteration"], b.series["iteration"]
    assert set(ia) <= set(ib) and set(ib) - set(ia) <= {stopped_at}      # plus the row where it stopped
    keep = np.isin(ib, ia)
    for key in ("loss", "grad_norm_sq", "bits_up_model", "bits_up_wire", "bits_down_wire", "bits_down_model"):
        assert np.array_equal(a.series[key], b.series[key][keep], equal_nan=True), key
    for coll, sent in a.mpi_bytes.items():
        assert np.array_equal(sent, b.mpi_bytes[coll][keep]), coll
    assert np.array_equal(a.workers["sender_bytes_up"], b.workers["sender_bytes_up"])


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
