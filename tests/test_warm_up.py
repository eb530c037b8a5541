"""``run.warm_up``: the untimed iteration before the timed loop is undone — every recorded value
(iterates, losses, bits, MPI bytes, tables) is identical with and without it, for every algorithm
family and collective; only the timings may differ."""
from __future__ import annotations

import h5py
import numpy as np

from tests.conftest import run_mpi, show

VARIANTS = [   # (algorithm, compressor, other run keys): every exchange path and algorithm family
    ("diana", "qsgd:s=2", {}),
    ("ef21", "topk:k=5", {"collective": "allgather"}),
    ("ef21", "topk:k=5", {"downlink": "qsgd:s=8"}),
    ("ef", "topk:k=5", {}),
    ("marina", "randk:k=4", {}),
    ("vr-diana", "randk:k=4", {"batch": 16}),
    ("adiana", "natural", {"collective": "allgather"}),
    ("diana", "randk:k=6,shared_seed=true", {"collective": "allreduce"}),
    ("dcgd", "identity", {"collective": "allreduce"}),
    ("diana", "quant:p=inf,block=8", {"server": "dedicated"}),
]


def _experiment(warm_up: bool) -> str:
    head = f"""name = "warm-up"
[data]
dataset = "breast-cancer"
[problem]
kind = "logreg"
l2 = 1e-2
[run]
iterations = 40
eval_every = 4
seed = 3
warm_up = {str(warm_up).lower()}
"""
    variants = [f'[[variant]]\nrun.algorithm = "{a}"\nrun.compressor = "{c}"\n'
                + "".join(f"run.{k} = {v!r}\n".replace("'", '"') for k, v in extra.items())
                for a, c, extra in VARIANTS]
    return head + "".join(variants)


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
        cfg.write_text(_experiment(flag == "true"))
        files[flag] = tmp_path / f"warm-{flag}.h5"
        p = run_mpi(3, ["-m", "hpcgc.bench", "--config", str(cfg), "-q", "-o", str(files[flag])], timeout=600)
        assert p.returncode == 0, show(p)
    on, off = _datasets(files["true"]), _datasets(files["false"])
    assert on.keys() == off.keys() and len({k.split("/")[1] for k in on}) == len(VARIANTS)
    differ = [k for k in on if not (on[k].shape == off[k].shape and np.array_equal(on[k], off[k], equal_nan=True))]
    assert not differ, differ
    with h5py.File(files["true"], "r") as f:        # the runs moved: the comparison is not of idle runs
        assert all(f["runs"][r]["iteration"][-1] == 40 and np.ptp(f["runs"][r]["loss"][()]) > 0 for r in f["runs"])
