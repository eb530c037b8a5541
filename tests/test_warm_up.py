"""``run.warm_up``: the untimed iteration before the timed loop is undone — every recorded value
(iterates, losses, bits, MPI bytes, tables) is identical with and without it, for every algorithm
family and collective; only the timings may differ."""
from __future__ import annotations

import h5py
import numpy as np

from tests.conftest import run_mpi, show

EXPERIMENT = '''
name = "warm-up"
[data]
dataset = "breast-cancer"
[problem]
kind = "logreg"
l2 = 1e-2
[run]
iterations = 40
eval_every = 4
seed = 3
{extra}
[[variant]]
run.algorithm = "diana"
run.compressor = "qsgd:s=2"
[[variant]]
run.algorithm = "ef21"
run.compressor = "topk:k=5"
run.collective = "allgather"
[[variant]]
run.algorithm = "ef21"
run.compressor = "topk:k=5"
run.downlink = "qsgd:s=8"
[[variant]]
run.algorithm = "ef"
run.compressor = "topk:k=5"
[[variant]]
run.algorithm = "marina"
run.compressor = "randk:k=4"
[[variant]]
run.algorithm = "vr-diana"
run.compressor = "randk:k=4"
run.batch = 16
[[variant]]
run.algorithm = "adiana"
run.compressor = "natural"
run.collective = "allgather"
[[variant]]
run.algorithm = "diana"
run.compressor = "randk:k=6,shared_seed=true"
run.collective = "allreduce"
[[variant]]
run.algorithm = "dcgd"
run.compressor = "identity"
run.collective = "allreduce"
[[variant]]
run.algorithm = "diana"
run.compressor = "quant:p=inf,block=8"
run.server = "dedicated"
'''


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            parts = name.split("/")
            if isinstance(obj, h5py.Dataset) and "time" not in parts and "per_iteration" not in parts:
                out[name] = obj[()]
        f.visititems(visit)
    return out


def test_warm_up_changes_no_recorded_value(tmp_path):
    files = {}
    for flag in ("true", "false"):
        cfg = tmp_path / f"warm-{flag}.toml"
        cfg.write_text(EXPERIMENT.format(extra=f"warm_up = {flag}"))
        files[flag] = tmp_path / f"warm-{flag}.h5"
        p = run_mpi(3, ["-m", "hpcgc.bench", "--config", str(cfg), "-q", "-o", str(files[flag])], timeout=600)
        assert p.returncode == 0, show(p)
    on, off = _datasets(files["true"]), _datasets(files["false"])
    assert on.keys() == off.keys() and len({k.split("/")[1] for k in on}) == 10
    differ = [k for k in on if not (on[k].shape == off[k].shape and np.array_equal(on[k], off[k], equal_nan=True))]
    assert not differ, differ
    with h5py.File(files["true"], "r") as f:        # the runs moved: the comparison is not of 10 idle runs
        assert all(f["runs"][r]["iteration"][-1] == 40 and np.ptp(f["runs"][r]["loss"][()]) > 0 for r in f["runs"])
