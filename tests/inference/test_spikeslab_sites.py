"""inference.spikeslab.sites: tilted moments against numerical quadrature."""

import numpy as np
import pytest
from scipy import integrate, stats

from inference.spikeslab.sites import log_partition, probit_tilted, spike_slab_tilted


@pytest.mark.parametrize("tau_c,nu_c,v,p", [(2.0, 1.5, 1.0, 0.2), (0.3, -0.4, 4.0, 0.7), (50.0, 0.1, 0.5, 0.05)])
def test_spike_slab_tilted_against_quadrature(tau_c, nu_c, v, p):
    cav = lambda w: np.exp(-0.5 * tau_c * w**2 + nu_c * w)  # noqa: E731
    slab = lambda w: cav(w) * stats.norm.pdf(w, 0, np.sqrt(v))  # noqa: E731
    z1 = integrate.quad(slab, -np.inf, np.inf, epsabs=1e-13)[0]
    m1 = integrate.quad(lambda w: w * slab(w), -np.inf, np.inf, epsabs=1e-13)[0]
    m2 = integrate.quad(lambda w: w * w * slab(w), -np.inf, np.inf, epsabs=1e-13)[0]
    Z = p * z1 + (1 - p) * cav(0.0)
    mean, second = p * m1 / Z, p * m2 / Z
    t = spike_slab_tilted(tau_c, nu_c, v, np.log(p / (1 - p)))
    np.testing.assert_allclose(float(t.log_z), np.log(Z), rtol=1e-9)
    np.testing.assert_allclose(float(t.mean), mean, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(float(t.var), second - mean**2, rtol=1e-8)
    np.testing.assert_allclose(float(t.incl), p * z1 / Z, rtol=1e-9)


def test_spike_slab_flat_cavity_is_the_prior():
    """An all-zero gene gives a flat cavity (tau_c = 0): the tilted distribution is the prior."""
    t = spike_slab_tilted(0.0, 0.0, 2.5, np.log(0.1 / 0.9))
    assert float(t.incl) == pytest.approx(0.1) and float(t.mean) == 0.0
    assert float(t.var) == pytest.approx(0.25) and float(t.log_z) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("mean,var,y", [(0.3, 0.8, 1.0), (-2.0, 0.1, 1.0), (1.5, 3.0, -1.0), (-9.0, 0.5, 1.0)])
def test_probit_tilted_against_quadrature(mean, var, y):
    f = lambda x, k: x**k * stats.norm.cdf(y * x) * stats.norm.pdf(x, mean, np.sqrt(var))  # noqa: E731
    lo, hi = mean - 12 * np.sqrt(var), mean + 12 * np.sqrt(var)
    Z = integrate.quad(f, lo, hi, args=(0,), epsabs=0, epsrel=1e-12, points=[0.0] if lo < 0 < hi else None)[0]
    m1 = integrate.quad(f, lo, hi, args=(1,), epsabs=0, epsrel=1e-12)[0] / Z
    m2 = integrate.quad(f, lo, hi, args=(2,), epsabs=0, epsrel=1e-12)[0] / Z
    log_z, alpha, beta = probit_tilted(mean, var, y)
    np.testing.assert_allclose(float(log_z), np.log(Z), rtol=1e-8)
    np.testing.assert_allclose(mean + var * float(alpha), m1, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(var - var**2 * float(beta), m2 - m1**2, rtol=1e-6)


def test_log_partition():
    np.testing.assert_allclose(float(log_partition(2.0, 1.0)),
                               np.log(integrate.quad(lambda w: np.exp(-w * w + w), -30, 30)[0]), rtol=1e-12)
