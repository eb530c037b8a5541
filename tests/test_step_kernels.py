"""DIANA's server step kernel (hpcgc.algorithms.kernels.shifted_step) gives the bits of the numpy
expressions it replaced, with and without momentum and shifts."""
import numpy as np
import pytest

from hpcgc.algorithms.kernels import shifted_step


def numpy_step(x, h, v, m, gamma, alpha, beta):
    """The step as DIANA (and DIANA+) computed it before the kernel."""
    if beta:
        v *= beta
        v += h
        v += m
    else:
        np.add(h, m, out=v)
    x -= np.multiply(v, gamma)
    if alpha:
        h += np.multiply(m, alpha)


@pytest.mark.parametrize("beta", [0.0, 0.9])
@pytest.mark.parametrize("alpha", [0.0, 0.37])
@pytest.mark.parametrize("d", [1, 7, 1000])
def test_step_kernel_has_the_numpy_bits(d, alpha, beta):
    rng = np.random.default_rng(d)
    want = [rng.standard_normal(d) * 10.0 ** rng.uniform(-5, 5, d) for _ in range(4)]
    got = [a.copy() for a in want]
    for _ in range(3):
        numpy_step(*want, 0.0123, alpha, beta)
        shifted_step(*got, 0.0123, alpha, beta)
    for a, b in zip(want, got):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("beta", [0.0, 0.9])
@pytest.mark.parametrize("alpha", [0.0, 0.37])
def test_step_from_an_allreduce_sum_has_the_bits_of_decode_then_step(dtype, scale, beta, alpha):
    """step_from_sum (the uncompressed Allreduce's fused server step) against what DIANA/DCGD did
    before it: m = 0; m += scale·sum (numpy, in the sum's type); shifted_step — x and h bit for bit
    (signs of zero included), v too when β ≠ 0 (with β = 0 nothing reads v and the kernel leaves
    it). DCGD (α = 0) keeps h = +0.0 and the kernel does not read it."""
    from hpcgc.algorithms.kernels import step_from_sum
    rng = np.random.default_rng(7)
    d = 1001
    total = (rng.standard_normal(d) * 10.0 ** rng.uniform(-5, 5, d)).astype(dtype)
    total[rng.random(d) < 0.1] = -0.0
    x = rng.standard_normal(d)
    x[rng.random(d) < 0.1] = -0.0
    h = rng.standard_normal(d) if alpha else np.zeros(d)
    v = rng.standard_normal(d)
    want = [x.copy(), h.copy(), v.copy()]
    got = [x.copy(), h.copy(), v.copy()]
    for _ in range(3):
        m = np.zeros(d)
        m += scale * total if scale != 1.0 else total
        shifted_step(*want, m, 0.0123, alpha, beta)
        step_from_sum(*got, total, scale, 0.0123, alpha, beta, alpha != 0.0)
    for a, b in zip(want[:2] if not beta else want, got[:2] if not beta else got):
        assert np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))
