"""``run.overlap`` without MPI: the plan-time refusals (one line, naming what is supported), the
MLP's per-layer ``ready`` callbacks (order, ranges, the same gradient bits), the algorithms' layer
by layer messages (the same bits as ``worker_compute``), and the overlap term of the break-even
model. The iterates under a real mpiexec: tests/mpi/test_overlap_mpi.py; the saving on an emulated
cluster: tests/test_overlap_emulated.py."""
from __future__ import annotations

import numpy as np
import pytest

from hpcgc import compressors, config
from hpcgc.algorithms.diana import Dcgd, Diana
from hpcgc.algorithms.ef import EF
from hpcgc.exchange.overlap import warning
from hpcgc.models import ClassifierProblem, Model
from hpcgc.run.setup import check

MLP = {"problem": {"kind": "mlp"}, "data": {"dataset": "digits"},
       "run": {"collective": "allreduce", "overlap": True, "learning_rate": 0.1}}


def cfg_with(**run):
    cfg = config.defaults()
    for sec, kv in MLP.items():
        cfg[sec].update(kv)
    cfg["run"].update(run)
    return cfg


@pytest.mark.parametrize("run, needle", [
    ({"collective": "gather", "algorithm": "dcgd", "compressor": "identity"}, "not bounded before the vector"),
    ({"collective": "gather", "server": "dedicated", "algorithm": "dcgd", "compressor": "randk:k=10"},
     "run.server = 'dedicated'"),
    ({"collective": "reduce-scatter", "algorithm": "ef", "compressor": "topk:k=10"},
     "under run.collective = 'reduce-scatter'"),
    ({"collective": "allgather", "algorithm": "ef", "compressor": "randk:k=10"}, "the whole vector's 1/(1 + ω)"),
    ({"collective": "allgather", "algorithm": "ef", "compressor": "scaled-sign"}, "not bounded before the vector"),
    ({"collective": "allgather", "algorithm": "diana", "compressor": "qsgd"}, "not bounded before the vector"),
    ({"collective": "allgather", "algorithm": "diana", "compressor": "randk:k=10,shared_seed=true"},
     "not bounded before the vector"),
    ({"collective": "allgather", "algorithm": "ef21", "compressor": "topk:k=10"}, "algorithm 'ef21'"),
    ({"overlap": False, "overlap_blocking": True, "algorithm": "dcgd", "compressor": "identity"},
     "run.overlap_blocking = true needs run.overlap = true"),
    ({"overlap_blocking": True, "algorithm": "dcgd", "compressor": "identity"}, "is for run.collective = 'allgather'"),
    ({"algorithm": "dcgd", "compressor": "int8"}, "int8's scale is a MAX over the whole vector"),
    ({"algorithm": "dcgd", "compressor": "randk:k=10,shared_seed=true"}, "compressor randk"),
    ({"algorithm": "local-sgd", "compressor": "identity"}, "algorithm 'local-sgd'"),
])
def test_refused_at_plan_time_in_one_line_naming_what_is_supported(run, needle):
    (msg,) = check(cfg_with(**run))
    assert needle in msg and "\n" not in msg
    if "overlap_blocking" not in run:
        assert "supported: run.collective = 'allreduce' with dcgd, diana or ef" in msg
        assert ("run.collective = 'allgather' or 'gather' with dcgd or diana and randk (shared_seed=false), or ef "
                "and topk") in msg


@pytest.mark.parametrize("alg", ["dcgd", "diana", "ef"])
@pytest.mark.parametrize("spec", ["identity", "identity:fp16", "identity:bf16", "identity:fp64=true"])
def test_accepted_at_plan_time(alg, spec):
    assert check(cfg_with(algorithm=alg, compressor=spec)) == []


@pytest.mark.parametrize("alg, spec", [("dcgd", "randk:k=10"), ("diana", "randk:k=10,fp64=true"), ("ef", "topk:k=10")])
@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize("collective", ["allgather", "gather"])
def test_accepted_under_allgather_and_gather(alg, spec, blocking, collective):
    assert check(cfg_with(collective=collective, algorithm=alg, compressor=spec, overlap_blocking=blocking)) == []


@pytest.mark.parametrize("spec", ["topk:k=7", "topk:k=300,fp64=true", "randk:k=7", "randk:k=300"])
@pytest.mark.parametrize("d", [301, 4096, 5000])
def test_payload_bound_holds_for_every_index_layout(spec, d):
    """The slot of run.overlap under allgather: no payload is longer than payload_bound(d), whether the
    indices go fixed-width (spread) or as Elias-omega gaps (clustered: shorter)."""
    comp = compressors.make(spec)
    rng = np.random.default_rng(0)
    spread, clustered = rng.standard_normal(d), np.zeros(d)
    clustered[:300] = rng.standard_normal(300) + 10.0
    sizes = [comp.compress(x, rng).size for x in (spread, clustered, np.ones(d))]
    assert max(sizes) <= comp.payload_bound(d)
    assert compressors.make("qsgd").payload_bound(d) is None


def test_one_layer_problems_warn_not_refuse():
    cfg = cfg_with(algorithm="dcgd", compressor="identity")
    cfg["problem"]["kind"] = "logreg"
    assert check(cfg) == []
    assert "one layer" in warning("logreg") and "nothing to overlap" in warning("softmax")
    assert warning("mlp") is None


def _problem(rows=40, depth=3, seed=0):
    rng = np.random.default_rng(seed)
    model = Model("mlp", 7, 4, hidden=9, depth=depth)
    X, y = rng.standard_normal((rows, 7)), rng.integers(0, 4, rows)
    return ClassifierProblem(model, X, y, l2=1e-3), model.init(seed)


@pytest.mark.parametrize("block_rows", [None, 16])       # one block, and several (ready at the end)
def test_ready_layer_by_layer_output_first_same_bits(block_rows):
    prob, x = _problem()
    if block_rows:
        prob.model.block_rows = block_rows
    seen, copies = [], []
    g = np.empty(prob.d)

    def ready(a, b):
        seen.append((a, b))
        copies.append(g[a:b].copy())                     # final already: nothing may change it later
    prob.grad(x, out=g, ready=ready)
    assert seen == prob.model.buckets() and seen[0][1] == prob.d and seen[-1][0] == 0
    ref = prob.grad(x)
    assert np.array_equal(g, ref)
    for (a, b), c in zip(seen, copies):
        assert np.array_equal(c, ref[a:b])


@pytest.mark.parametrize("cls", [Dcgd, Diana, EF])
def test_layer_by_layer_message_equals_worker_compute(cls):
    prob, x = _problem()
    comp = compressors.make("identity")
    alg = cls([comp] * 2, d=prob.d, n_workers=2, weights=[0.5, 0.5],
              problem_info={"L_max": 1.0, "L": 1.0, "mu": 0.0, "kind": "mlp"},
              options={"learning_rate": 0.1, "batch": 8, "collective": "allreduce"})
    one, two = alg.worker_init(0, prob), alg.worker_init(0, prob)
    for ws in (one, two):                                 # a non-zero shift / memory
        getattr(ws, "h", getattr(ws, "e", None))[:] = np.linspace(-1, 1, prob.d)
    alg.worker_compute(one, x, prob, np.random.default_rng(5))
    seen = []
    alg.worker_compute_layers(two, x, prob, np.random.default_rng(5), lambda a, b: seen.append((a, b)))
    assert seen == prob.model.buckets()
    assert np.array_equal(alg.worker_message(one), alg.worker_message(two))


# -- the break-even model with overlap (hpcgc.analysis.breakeven.model) -----------------------------
def _model(label, up_bytes, workers, hide=0.0, iterations=100.0):
    from hpcgc.analysis.breakeven.model import MethodModel
    return MethodModel(label=label, panel=(), ranks=4, collective="allreduce", iterations=iterations,
                       reached="1/1", workers=workers, server=1e-4, up_bytes=up_bytes, rounds=1, hide=hide)


def test_overlap_pays_only_the_exchange_beyond_the_window_by_hand():
    base, over = _model("b", 4e6, 0.02), _model("o", 4e6, 0.02, hide=0.01)
    n, alpha = 4, 5e-5
    a, b, g = (float(v) for v in base.coefficients(n))
    for beta in (1e-10, 1e-9, 1e-8):                               # 80 Gb/s … 0.8 Gb/s
        comm = a * alpha + b * beta
        assert float(base.time(n, alpha, beta)) == pytest.approx(100 * (0.02 + 1e-4 + comm))
        assert float(over.time(n, alpha, beta)) == pytest.approx(100 * (0.02 + 1e-4 + max(0.0, comm - 0.01)))


def test_overlapped_break_even_matches_a_fine_sweep():
    from hpcgc.analysis.breakeven.measure import beta_to_gbps
    from hpcgc.analysis.breakeven.model import method_break_even
    n, alpha = 4, 5e-5
    base = _model("fp32 overlapped", 4e6, 0.02, hide=0.015)
    for comp in (_model("compressed", 2e5, 0.03, iterations=130.0), _model("compressed fast", 2e5, 0.021)):
        be = method_break_even(comp, base, n, alpha)
        betas = np.geomspace(1e-12, 1e-6, 200001)
        wins = comp.time(n, alpha, betas) < base.time(n, alpha, betas)
        flips = np.flatnonzero(np.diff(wins.astype(int)))
        if not len(flips):
            assert be.kind == ("always" if wins.all() else "never")
            continue
        assert be.kind == "below" and wins[-1]                     # compression wins on slow networks
        assert be.gbps == pytest.approx(float(beta_to_gbps(betas[flips[0]])), rel=1e-3)


def test_measure_run_reads_the_overlap_window_and_one_allreduce_per_bucket():
    from hpcgc.analysis import breakeven as be
    from tests.test_breakeven import _run
    ri = _run()
    ri.run.attrs.update(collective="allreduce", exchange_rounds=1, overlap_buckets=3, overlap_window_seconds=0.012)
    m = be.measure_run(ri, be.Target("suboptimality", 1e-3))
    assert m["hide"] == 0.012 and m["rounds"] == 3
    ri.run.attrs.update(overlap_buckets=0)                       # a one-layer problem: no window, one round
    m = be.measure_run(ri, be.Target("suboptimality", 1e-3))
    assert m["hide"] == 0.0 and m["rounds"] == 1
