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
