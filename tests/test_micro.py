"""Smoke test of the compressor micro-benchmark: ``python -m hpcgc.bench micro --quick``."""
from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgc import micro
from hpcgc.errors import ConfigError

from .conftest import ROOT


def test_expand_spec():
    assert micro.expand_spec("topk:k=1%", 1000) == "topk:k=10"
    assert micro.expand_spec("randk:k=0.5%,shared_seed=true", 1024) == "randk:k=6,shared_seed=true"
    assert micro.expand_spec("randk:k=1%", 10) == "randk:k=1"
    assert micro.expand_spec("qsgd:s=4", 10) == "qsgd:s=4"
    with pytest.raises(ConfigError):
        micro.expand_spec("topk:k=200%", 10)


def test_micro_quick(tmp_path):
    out = tmp_path / "micro.h5"
    specs = ["topk:k=1%", "qsgd:s=4", "natural", "sign", "randk:k=1%,shared_seed=true"]
    cmd = [sys.executable, "-m", "hpcgc.bench", "micro", "--quick", "--max-log2", "12", "--compressors",
           *specs, "-o", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "NUMBA_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    text = r.stdout
    lines = text.splitlines()
    # OSU-style header, then one table per compressor with aligned columns and units
    assert lines[0].startswith("# hpcgc compressor micro-benchmark")
    assert any("numba" in l and "hpcgc" in l for l in lines[:4])
    assert any(l.startswith("# python -m hpcgc.bench micro") for l in lines[:6])
    target = micro.kernel_target()                 # same environment as the subprocess
    assert micro.describe_target(target) in lines[:8]
    heads = [i for i, l in enumerate(lines) if l.split()[:3] == ["d", "comp", "GB/s"]]
    assert len(heads) == len(specs)
    for i in heads:
        head = lines[i]
        rows = lines[i + 1:i + 4]
        assert [int(r.split()[0]) for r in rows] == [1024, 2048, 4096]
        assert all(len(r) == len(head) for r in rows)           # aligned
    assert "# results: " + str(out) in text
    with h5py.File(out, "r") as f:
        assert f.attrs["schema"] == "hpcgc-micro"
        for key in ("hpcgc_version", "created", "machine", "numba_version", "command_line"):
            assert f.attrs[key]
        assert f.attrs["numba_num_threads"] == 1
        for key, value in target.items():
            assert f.attrs["kernel_" + key] == value
        np.testing.assert_array_equal(f["copy/d"][()], [1024, 2048, 4096])
        assert np.all(f["copy/gbps"][()] > 0)
        np.testing.assert_array_equal(f["accumulate/d"][()], [1024, 2048, 4096])
        assert np.all(f["accumulate/gbps"][()] > 0)
        groups = sorted(f["compressors"])
        assert [f["compressors"][g].attrs["spec"] for g in groups] == specs
        for g in groups:
            h = f["compressors"][g]
            assert np.all(h["compress_s"][()] > 0) and np.all(h["decompress_add_s"][()] > 0)
            assert np.all(h["wire_bits"][()] >= h["model_bits"][()])
            assert np.all(h["wire_over_model"][()] < 1.3)
            for ratio in ("comp_over_copy", "dec_add_over_copy", "dec_add_over_acc"):
                assert np.all(np.isfinite(h[ratio][()])) and np.all(h[ratio][()] > 0)
            assert np.all(h["copy_s"][()] > 0) and np.all(h["acc_s"][()] > 0)
        topk = f["compressors"][groups[0]]
        assert list(topk.attrs["specs_per_d"]) == ["topk:k=11", "topk:k=21", "topk:k=41"]
        assert np.all(np.isfinite(topk["speedup_comp"][()]))
        np.testing.assert_allclose(topk["param_theory"][()], [11 / 1024, 21 / 2048, 41 / 4096])
        assert np.all(topk["param_measured"][()] >= topk["param_theory"][()])    # δ(x) ≥ k/d
        nat = f["compressors"][groups[2]]
        assert np.all(nat["param_measured"][()] <= 0.125) and np.all(nat["param_theory"][()] == 0.125)
        shared = f["compressors"][groups[4]]
        assert np.all(np.isnan(shared["np_compress_s"][()]))                   # no numpy reference


def test_vector_isa_and_kernel_target(monkeypatch):
    """The header names the instruction set numba compiles for: the widest one the feature list
    enables; NUMBA_CPU_NAME / NUMBA_CPU_FEATURES override the host's (numba.config)."""
    assert micro.vector_isa("+64bit,+avx,+avx2,+avx512f,+avx512dq") == "AVX-512"
    assert micro.vector_isa("+avx,+avx2,+fma,-avx512f") == "AVX2"
    assert micro.vector_isa("+sse4.2,-avx") == "SSE4.2"
    assert micro.vector_isa("+64bit") == "SSE2"
    from numba import config
    monkeypatch.setattr(config, "CPU_NAME", "znver3")
    monkeypatch.setattr(config, "CPU_FEATURES", "+64bit,+avx,+avx2,+fma,-avx512f")
    t = micro.kernel_target()
    assert (t["cpu"], t["isa"], t["cpu_source"], t["features_source"]) == \
        ("znver3", "AVX2", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")
    assert micro.describe_target(t).startswith("# kernels compiled for: znver3, AVX2 (")
    monkeypatch.setattr(config, "CPU_FEATURES", "")
    assert micro.kernel_target()["isa"] == "znver3's default features"
    monkeypatch.setattr(config, "CPU_NAME", None)
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    t = micro.kernel_target()
    assert t["cpu"] == t["host_cpu"] and t["isa"] == t["host_isa"] and t["cpu_source"] == "host"
    assert "(the host's; host: " in micro.describe_target(t)


def test_timed_with_runs_each_reference_right_before_each_run():
    """The rooflines are timed back to back with the kernel: ref, ref2, fn, ref, ref2, fn, ...;
    warm-up runs included in the same order, untimed; the ratio is the median of the pairs."""
    from hpcgc.micro import _paired_ratio, _timed_with
    log = []
    t, (r1, r2) = _timed_with(lambda: log.append("fn"), (lambda: log.append("a"), lambda: log.append("b")),
                              repeat=4, warmup=1, budget=10.0, min_runs=3)
    assert log == ["a", "b", "fn"] * 5
    assert len(t) == len(r1) == len(r2) == 4
    assert _paired_ratio(np.array([1.0, 2.0, 9.0]), np.array([2.0, 2.0, 3.0])) == 1.0   # median of 0.5, 1, 3


def test_micro_bad_options(tmp_path):
    for args in (["--min-log2", "5", "--max-log2", "3"], ["--compressors", "nope"],
                 ["--compressors", "topk:k=5000", "--max-log2", "11", "--min-log2", "10"], ["--repeat", "0"]):
        r = subprocess.run([sys.executable, "-m", "hpcgc.bench", "micro", "--no-save", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("hpcgc: error: ") and len(r.stderr.strip().splitlines()) == 1
