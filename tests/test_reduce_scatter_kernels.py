"""The reduce-scatter owner's second-stage update of D (hpcgc.exchange.reduce_scatter.recompress):
the one-pass kernel and qsgd's fused decode give the bits of the numpy expressions they replaced,
``m[:] = 0; add(p, m, s₂); D += α₂ * (m - S)``."""
import numpy as np
import pytest

from hpcgc.compressors import make
from hpcgc.compressors.qsgd import UPDATE_CHUNK
from hpcgc.errors import PayloadError
from hpcgc.exchange.kernels import second_stage_update


def numpy_update(codec, payload, D, S, alpha, weight):
    """The update as the exchange computed it before the kernels."""
    m = np.zeros(D.shape[0])
    codec.add(payload, m, weight)
    D += alpha * (m - S)


def vectors(rng, d):
    """S and D with magnitudes over ten decades and exact zeros of both signs."""
    S, D = (rng.standard_normal(d) * 10.0 ** rng.uniform(-5, 5, d) for _ in range(2))
    S[::7] = 0.0
    S[3::11] = -0.0
    D[::5] = 0.0
    return S, D


@pytest.mark.parametrize("d", [1, 7, 1000])
def test_second_stage_kernel_has_the_numpy_bits_and_rezeroes_m(d):
    rng = np.random.default_rng(d)
    S, D = vectors(rng, d)
    m = rng.standard_normal(d)
    m[::3] = 0.0
    want = D.copy()
    want += 0.37 * (m - S)
    second_stage_update(D, m, S, 0.37)
    assert np.array_equal(D.view(np.uint64), want.view(np.uint64))
    assert np.array_equal(m.view(np.uint64), np.zeros(d).view(np.uint64))


@pytest.mark.parametrize("spec", ["qsgd:s=64", "qsgd:s=4,bucket=512", "qsgd:s=3,bucket=16,fp64=true",
                                  "qsgd:s=1000000", "qsgd:s=8,p=inf,bucket=2048"])
@pytest.mark.parametrize("d", [1, 1000, UPDATE_CHUNK, 3 * UPDATE_CHUNK + 1000])
@pytest.mark.parametrize("weight", [1.0, 1 / 3])
def test_qsgd_fused_update_has_the_bits_of_decode_then_update(spec, d, weight):
    comp = make(spec)
    codec = comp.prepared(d)
    assert codec.update is not None
    rng = np.random.default_rng(d)
    S, D = vectors(rng, d)
    want = D.copy()
    for _ in range(3):                     # a few rounds: D feeds the next message, as in a run
        p = codec.encode(S - want, rng)
        numpy_update(codec, p, want, S, 0.37, weight)
        codec.update(p, D, S, 0.37, weight)
        assert np.array_equal(D.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("spec", ["qsgd:s=4,bucket=1000", "qsgd:s=4,code=elias"])
def test_no_fused_update_where_the_chunks_would_split_a_bucket_or_the_code_is_elias(spec):
    assert make(spec).prepared(3 * UPDATE_CHUNK).update is None


def test_fused_update_refuses_an_invalid_payload_and_leaves_d_untouched():
    d = 5000
    codec = make("qsgd:s=4").prepared(d)
    rng = np.random.default_rng(0)
    S, D = vectors(rng, d)
    p = codec.encode(S, rng)
    bad = p.copy()
    bad[8:12] = np.frombuffer(np.float32(np.nan).tobytes(), dtype=np.uint8)     # the bucket norm
    before = D.copy()
    with pytest.raises(PayloadError, match="invalid bucket norm"):
        codec.update(bad, D, S, 0.5, 1.0)
    with pytest.raises(PayloadError):
        codec.update(p[:-1], D, S, 0.5, 1.0)
    assert np.array_equal(D, before)
