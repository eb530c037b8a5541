"""EF21-SGDM and DASHA one step at a time by hand (explicit state) against numpy transcriptions of
the papers' recursions; their step formulas; plan-time refusals (one line each, no data) and, in one
real mpiexec launch, bad input exiting on every rank with one message. The MPI runs (convergence,
degenerate cases, collectives, resume) are in ``tests/mpi/test_ef21sgdm_dasha_mpi.py``."""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from hpcgc import algorithms, compressors, config
from hpcgc.algorithms.dasha import Dasha, momentum_a, theory_step
from hpcgc.algorithms.ef21 import EF21
from hpcgc.algorithms.ef21_sgdm import EF21SGDM
from hpcgc.errors import ConfigError
from hpcgc.run.setup import check
from tests.algo_fixtures import D, N, make, shards
from tests.conftest import run_mpi, show


def agree(alg, ws):
    vals = np.max([alg.agree_values(w) for w in ws], axis=0)
    alg.set_agreed(vals)


def test_registered_with_their_flags():
    assert algorithms.get("ef21-sgdm") is EF21SGDM and algorithms.get("dasha") is Dasha
    assert EF21SGDM.takes_biased and EF21SGDM.nonconvex_ok and not EF21SGDM.needs_unbiased
    assert Dasha.needs_unbiased and Dasha.nonconvex_ok and not Dasha.takes_biased
    for cls in (EF21SGDM, Dasha):
        assert cls.collectives == ("gather", "allgather", "reduce-scatter")


# -- EF21-SGDM ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("momentum,batch", [(0.5, 5), (0.9, 0), (0.0, 5)])
def test_ef21_sgdm_steps_match_the_paper_recursion(momentum, batch):
    """Algorithm 1 of Fatkhullin et al.: v_i ← (1−η)v_i + η∇f_i(x; ξ), c_i = C(v_i − g_i), g_i += c_i,
    g += mean c_i, x −= γg; the first message v_i⁰ = g_i⁰ = the first gradient, dense."""
    fs = shards()
    alg = make(EF21SGDM, "topk:k=3", momentum=momentum, batch=batch)
    ws = [alg.worker_init(i, fs[i]) for i in range(N)]
    agree(alg, ws)
    ss = alg.server_init(np.zeros(D))
    eta = 1.0 - momentum
    assert alg.eta == eta and alg.gamma > 0
    rngs = [np.random.default_rng(10 + i) for i in range(N)]
    v, g = np.zeros((N, D)), np.zeros((N, D))
    x = np.zeros(D)
    for k in range(6):
        msgs = []
        for i in range(N):
            mirror = copy.deepcopy(rngs[i])             # the draws the worker is about to make (the
            #                                            compressors draw from the same stream)
            rows = mirror.choice(fs[i].A.shape[0], size=batch, replace=False) if batch else None
            grad = fs[i].grad(x, rows)
            v[i] = grad if k == 0 else (1 - eta) * v[i] + eta * grad
            diff = v[i] - g[i]
            g[i] += diff if k == 0 else topk(diff, 3)
            alg.worker_compute(ws[i], ss.x, fs[i], rngs[i])
            msgs.append((i, alg.worker_encode(ws[i], rngs[i])))
        alg.server_step(ss, msgs)
        x = x - alg.gamma * g.mean(axis=0)
        np.testing.assert_allclose(ss.x, x, rtol=1e-12, atol=1e-14)
        for i in range(N):
            np.testing.assert_allclose(ws[i].v, v[i], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(ws[i].g, g[i], rtol=1e-12, atol=1e-14)


def topk(v, k):
    out = np.zeros_like(v)
    idx = np.argsort(-np.abs(v))[:k]
    out[idx] = v[idx].astype(np.float32)          # top-k's values travel as float32
    return out


def test_ef21_sgdm_with_zero_momentum_is_ef21_bit_for_bit_by_hand():
    fs = shards(1)
    a, b = make(EF21SGDM, "topk:k=4", batch=6), make(EF21, "topk:k=4", batch=6)
    wa, wb = [a.worker_init(i, fs[i]) for i in range(N)], [b.worker_init(i, fs[i]) for i in range(N)]
    agree(a, wa)
    agree(b, wb)
    assert a.gamma == b.gamma
    sa, sb = a.server_init(np.zeros(D)), b.server_init(np.zeros(D))
    ra, rb = [np.random.default_rng(i) for i in range(N)], [np.random.default_rng(i) for i in range(N)]
    for _ in range(8):
        pa, pb = [], []
        for i in range(N):
            a.worker_compute(wa[i], sa.x, fs[i], ra[i])
            b.worker_compute(wb[i], sb.x, fs[i], rb[i])
            pa.append((i, a.worker_encode(wa[i], ra[i])))
            pb.append((i, b.worker_encode(wb[i], rb[i])))
            assert np.array_equal(pa[-1][1], pb[-1][1])
        a.server_step(sa, pa)
        b.server_step(sb, pb)
        assert np.array_equal(sa.x, sb.x)


# -- DASHA -------------------------------------------------------------------------------------------
def test_dasha_theory_step_and_momentum():
    assert momentum_a(0.0) == 1.0 and momentum_a(10.0) == 1.0 / 21.0
    assert theory_step(2.0, 3.0, 0.0, 4) == 0.5                          # ω = 0: 1/L
    assert math.isclose(theory_step(2.0, 3.0, 9.0, 4), 1.0 / (2.0 + 3.0 * math.sqrt(9 * 37 / 4)))


@pytest.mark.parametrize("variant,batch,momentum", [("full", 0, 0.0), ("page", 5, 0.0), ("mvr", 5, 0.7)])
def test_dasha_steps_match_the_paper_recursion(variant, batch, momentum):
    """Algorithm 1 of Tyurin & Richtárik: m_i = C(h_i⁺ − h_i − a(g_i − h_i)), g_i += m_i, g += mean m_i,
    x −= γg; h_i⁺ of the variant (checked against numpy with the same draws), C decoded from the
    payload the worker sent."""
    fs = shards(2)
    alg = make(Dasha, "randk:k=4", dasha_variant=variant, batch=batch, momentum=momentum, probability=0.3
               if variant == "page" else "theory")
    ws = [alg.worker_init(i, fs[i]) for i in range(N)]
    agree(alg, ws)
    ss = alg.server_init(np.zeros(D))
    omega = D / 4 - 1
    assert alg.a == 1 / (2 * omega + 1)
    assert math.isclose(alg.gamma, theory_step(2.0, math.sqrt(np.mean([f.smoothness() ** 2 for f in fs])), omega, N))
    rngs = [np.random.default_rng(20 + i) for i in range(N)]
    comp = compressors.make("randk:k=4")
    h, g = np.zeros((N, D)), np.zeros((N, D))
    x, x_prev, G = np.zeros(D), np.zeros(D), np.zeros(D)
    from hpcgc.algorithms.base import shared_coin
    for k in range(7):
        msgs = []
        for i in range(N):
            f = fs[i]
            mirror = copy.deepcopy(rngs[i])
            if k == 0:
                new = f.grad(x)
            elif variant == "full" or (variant == "page" and shared_coin(alg.seed, k, alg.p)):
                new = f.grad(x)
            else:
                rows = mirror.choice(f.A.shape[0], size=batch, replace=False)
                if variant == "page":
                    new = h[i] + f.grad(x, rows) - f.grad(x_prev, rows)
                else:
                    new = f.grad(x, rows) + (1 - alg.b) * (h[i] - f.grad(x_prev, rows))
            vec = new if k == 0 else new - h[i] - alg.a * (g[i] - h[i])
            alg.worker_compute(ws[i], ss.x, f, rngs[i])
            np.testing.assert_allclose(ws[i].msg, vec, rtol=1e-10, atol=1e-13)
            payload = alg.worker_encode(ws[i], rngs[i])
            msgs.append((i, payload))
            dec = vec.copy() if k == 0 else comp.decompress(payload, D)
            g[i] += dec
            h[i] = new
            np.testing.assert_allclose(ws[i].g, g[i], rtol=1e-10, atol=1e-13)
        alg.server_step(ss, msgs)
        G = g.mean(axis=0)
        x_prev = x
        x = x - alg.gamma * G
        np.testing.assert_allclose(ss.g, G, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(ss.x, x, rtol=1e-10, atol=1e-13)


def test_dasha_first_message_dense_then_compressed_bits():
    fs = shards()
    alg = make(Dasha, "randk:k=2")
    ws = [alg.worker_init(i, fs[i]) for i in range(N)]
    agree(alg, ws)
    rng = np.random.default_rng(0)
    alg.worker_compute(ws[0], np.zeros(D), fs[0], rng)
    first = alg.worker_encode(ws[0], rng)
    assert alg.model_bits(0, first) == 64 * D
    alg.worker_compute(ws[0], np.ones(D) * 0.1, fs[0], rng)
    second = alg.worker_encode(ws[0], rng)
    assert alg.model_bits(0, second) == compressors.make("randk:k=2").model_bits(second, D) < 64 * D


# -- plan-time refusals (no data) --------------------------------------------------------------------
def refusals(**run):
    cfg = config.defaults()
    cfg["run"].update(run)
    return check(cfg)


@pytest.mark.parametrize("run,needle", [
    ({"algorithm": "dasha", "compressor": "topk:k=3"},
     "dasha needs an unbiased compressor; topk:k=3 is biased. Algorithms that take biased compressors: "),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "batch": 8},
     "dasha (run.dasha_variant = 'full') uses full local gradients: set run.batch = 0"),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "dasha_variant": "page"},
     "dasha with run.dasha_variant = 'page' needs mini-batches: set run.batch > 0"),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "momentum": 0.5},
     "dasha (run.dasha_variant = 'full') has no momentum parameter"),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "dasha_variant": "mvr", "batch": 4, "probability": 0.5},
     "run.probability is DASHA-PAGE's coin"),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "alpha": 0.5}, "dasha has no shifts"),
    ({"algorithm": "dasha", "compressor": "randk:k=3", "collective": "allreduce"},
     "cannot ride run.collective = 'allreduce'"),
    ({"algorithm": "ef21-sgdm", "compressor": "topk:k=3", "momentum": 1.0}, "run.momentum must be in [0, 1), got 1.0"),
    ({"algorithm": "ef21-sgdm", "compressor": "topk:k=3", "momentum": -0.1}, "run.momentum must be in [0, 1)"),
    ({"algorithm": "ef21-sgdm", "compressor": "sign"}, "ef21-sgdm cannot use sign"),
    ({"algorithm": "ef21-sgdm", "compressor": "topk:k=3", "alpha": 0.5}, "ef21-sgdm has no shifts"),
])
def test_plan_time_refusals_one_line_each(run, needle):
    problems = refusals(**run)
    assert len(problems) == 1, problems
    assert needle in problems[0], problems[0]


def test_unknown_variant_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match="run.dasha_variant: must be one of full, page, mvr; got 'storm'"):
        config.apply_overrides(config.defaults(), ["run.dasha_variant=storm"])


def test_momentum_is_accepted_where_it_means_something():
    assert refusals(algorithm="ef21-sgdm", compressor="topk:k=3", momentum=0.9, batch=1) == []
    assert refusals(algorithm="dasha", compressor="randk:k=3", dasha_variant="mvr", batch=4, momentum=0.9) == []
    assert refusals(algorithm="dasha", compressor="randk:k=3", dasha_variant="page", batch=4, probability=0.2) == []


def test_constructor_refuses_for_direct_users():
    with pytest.raises(ConfigError, match=r"run.momentum must be in \[0, 1\) for ef21-sgdm"):
        make(EF21SGDM, "topk:k=3", momentum=1.0)
    with pytest.raises(ConfigError, match="needs an unbiased compressor"):
        make(Dasha, "topk:k=3")
    with pytest.raises(ConfigError, match="needs mini-batches"):
        make(Dasha, "randk:k=3", dasha_variant="mvr")


BAD = [
    (["--set", "run.algorithm=ef21-sgdm", "--set", "run.compressor=topk:k=3", "--set", "run.momentum=1.5"],
     "run.momentum must be in [0, 1), got 1.5"),
    (["--set", "run.algorithm=dasha", "--set", "run.compressor=topk:k=3"], "dasha needs an unbiased compressor"),
    (["--set", "run.algorithm=dasha", "--set", "run.compressor=randk:k=3", "--set", "run.dasha_variant=page"],
     "needs mini-batches"),
    (["--set", "run.algorithm=dasha", "--set", "run.dasha_variant=storm"], "run.dasha_variant: must be one of"),
]


def test_bad_input_exits_on_every_rank_with_one_message(tmp_path):
    """One mpiexec -n 4 launch of the cases (``tests.cli_cases``): exit 2 on every rank, one
    ``hpcgc: error:`` line naming the problem, no traceback, nothing written."""
    cases = []
    for i, (args, _) in enumerate(BAD):
        (tmp_path / f"case-{i}").mkdir()
        cases.append([*args, "-o", str(tmp_path / f"case-{i}" / "bad.h5")])
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    p = run_mpi(4, ["-m", "tests.cli_cases", str(tmp_path / "cases.json"), str(tmp_path)], timeout=300)
    assert p.returncode == 0, show(p)
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    for i, (_, needle) in enumerate(BAD):
        got = [r[i] for r in ranks]
        assert [g["rc"] for g in got] == [2] * 4, got
        stderr = "".join(g["stderr"] for g in got)
        errors = [line for line in stderr.splitlines() if line.startswith("hpcgc: error:")]
        assert len(errors) == 1 and needle in errors[0], (needle, errors)
        assert "Traceback" not in stderr
        assert list((tmp_path / f"case-{i}").iterdir()) == []
