"""Tilted-moment leaf functions of EP (inference/ep/sites.py) against adaptive quadrature
(scipy.integrate.quad) and against each other. Tolerances are absolute on (log Z, mean, var)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

from inference.ep import sites

CAVITIES = [(0.0, 1.0), (2.0, 0.5), (-3.0, 4.0), (1.0, 25.0), (-1.5, 0.01)]


def quad_moments(log_lik, m, v, breaks=()):
    """(log Z, mean, var) of exp(log_lik(eta)) N(eta | m, v) by scipy quad, split at ``breaks``."""
    sd = np.sqrt(v)
    lo, hi = m - 14 * sd, m + 14 * sd
    pts = sorted({lo, hi, m, *[b for b in breaks if lo < b < hi]})

    def integral(g):
        return sum(integrate.quad(g, a, b, limit=400, epsabs=0, epsrel=1e-13)[0] for a, b in zip(pts[:-1], pts[1:]))

    dens = lambda e: np.exp(log_lik(e) + stats.norm.logpdf(e, m, sd))  # noqa: E731
    z = integral(dens)
    mean = integral(lambda e: e * dens(e)) / z
    var = integral(lambda e: (e - mean) ** 2 * dens(e)) / z
    return np.array([np.log(z), mean, var])


def as_array(t):
    return np.array([float(x) for x in t])


@pytest.mark.parametrize("m,v", CAVITIES)
@pytest.mark.parametrize("s", [1.0, -1.0])
def test_probit_matches_quadrature(m, v, s):
    want = quad_moments(lambda e: special.log_ndtr(s * e), m, v)
    np.testing.assert_allclose(as_array(sites.probit(m, v, s)), want, rtol=1e-9, atol=1e-11)


def test_probit_far_tail_moments_float32():
    """float32 Mills ratio (erfcx form) and probit moments far in the left tail, against float64
    closed forms: the ``exp(log N - log Phi)`` form was 2-3% off in the variance at z = -23
    (round-off of ``log Phi ~ -265`` times ``z^2``)."""
    z = np.array([-35.0, -23.0, -10.0, -3.0, -0.5, 0.0, 3.0, 8.0])
    want = np.exp(stats.norm.logpdf(z) - special.log_ndtr(z))
    v = 2.0
    m = z * np.sqrt(1.0 + v)  # cavities whose standardised distance is z
    with jax.enable_x64(False):
        got = np.asarray(sites.mills(jnp.asarray(z, jnp.float32)), float)
        moments = [as_array(sites.probit(jnp.float32(mi), jnp.float32(v), jnp.float32(1.0))) for mi in m]
    np.testing.assert_allclose(got, want, rtol=2e-6)
    for mi, (log_z, mean, var) in zip(m, moments):
        ref = as_array(sites.probit(mi, v, 1.0))  # float64 (the suite's default)
        assert np.isfinite([log_z, mean, var]).all() and var > 0
        assert abs(mean - ref[1]) <= 1e-5 * (abs(ref[1]) + np.sqrt(ref[2])), (mi, mean, ref)
        assert abs(var - ref[2]) <= 1e-3 * ref[2], (mi, var, ref)


@pytest.mark.parametrize("m,v", CAVITIES)
@pytest.mark.parametrize("y,noise_var", [(0.3, 1.0), (-2.0, 0.05), (4.0, 9.0)])
def test_gaussian_matches_quadrature(m, v, y, noise_var):
    want = quad_moments(lambda e: stats.norm.logpdf(y, e, np.sqrt(noise_var)), m, v)
    np.testing.assert_allclose(as_array(sites.gaussian(m, v, y, noise_var)), want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("m,v", CAVITIES[:4])
@pytest.mark.parametrize("s", [1.0, -1.0])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_noisy_step_matches_quadrature(m, v, s, eps):
    def log_lik(e):
        with np.errstate(divide="ignore"):
            return np.log(eps + (1 - 2 * eps) * (s * e > 0))

    want = quad_moments(log_lik, m, v, breaks=(0.0,))
    np.testing.assert_allclose(as_array(sites.noisy_step(m, v, s, eps)), want, rtol=1e-8, atol=1e-10)


def test_noisy_step_with_zero_noise_is_the_probit_limit():
    # step(eta) under N(m, v) equals Phi(eta / sigma) as sigma -> 0; compare with a tiny-scale probit.
    m, v, sig = 0.7, 2.0, 1e-5
    probit = sites.probit(m / sig, v / sig**2, 1.0)
    step = sites.noisy_step(m, v, 1.0, 0.0)
    np.testing.assert_allclose([float(step[0]), float(step[1]), float(step[2])],
                               [float(probit[0]), float(probit[1]) * sig, float(probit[2]) * sig**2], rtol=1e-6)


LIKELIHOODS = {
    "logistic y=1": (lambda e: -np.logaddexp(0, -e), lambda e: -jnp.logaddexp(0.0, -e)),
    "logistic y=0": (lambda e: -np.logaddexp(0, e), lambda e: -jnp.logaddexp(0.0, e)),
    "poisson y=0": (lambda e: -np.exp(e), lambda e: -jnp.exp(e)),
    "poisson y=3": (lambda e: 3 * e - np.exp(e) - special.gammaln(4), lambda e: 3 * e - jnp.exp(e) - jax.scipy.special.gammaln(4.0)),
    "poisson y=20": (lambda e: 20 * e - np.exp(e) - special.gammaln(21), lambda e: 20 * e - jnp.exp(e) - jax.scipy.special.gammaln(21.0)),
    "student-t": (lambda e: stats.t.logpdf(1.5, 3, loc=e, scale=0.5), lambda e: jax.scipy.stats.t.logpdf(1.5, 3, loc=e, scale=0.5)),
}


def batched(rule, log_lik, ms, vs):
    """(k, 3) moments of a quadrature rule, jitted and vmapped over cavities."""
    out = jax.jit(jax.vmap(lambda m, v: rule(log_lik, m, v)))(jnp.asarray(ms, float), jnp.asarray(vs, float))
    return np.stack([np.asarray(x) for x in out], axis=1)


@pytest.mark.parametrize("name", list(LIKELIHOODS))
def test_quadrature_matches_scipy(name):
    np_ll, jax_ll = LIKELIHOODS[name]
    ms, vs = zip(*CAVITIES)
    got = batched(sites.quadrature, jax_ll, ms, vs)
    for k, (m, v) in enumerate(CAVITIES):
        np.testing.assert_allclose(got[k], quad_moments(np_ll, m, v), rtol=1e-7, atol=1e-8, err_msg=f"cavity {m, v}")


@pytest.mark.parametrize("s", [1.0, -1.0])
def test_gauss_hermite_and_quadrature_match_closed_form_probit(s):
    ms, vs = zip(*CAVITIES[:3])
    closed = np.stack([np.asarray(x) for x in sites.probit(jnp.array(ms), jnp.array(vs), s)], axis=1)
    ll = lambda e: jax.scipy.special.log_ndtr(s * e)  # noqa: E731
    np.testing.assert_allclose(batched(sites.gauss_hermite, ll, ms, vs), closed, atol=1e-6)
    np.testing.assert_allclose(batched(sites.quadrature, ll, ms, vs), closed, atol=1e-10)


def test_quadrature_beats_gauss_hermite_under_a_broad_cavity():
    # Probit site under a cavity 10x wider than the likelihood: the tilted density is skewed.
    m, v = -2.0, 100.0
    closed = as_array(sites.probit(m, v, -1.0))
    ll = lambda e: jax.scipy.special.log_ndtr(-e)  # noqa: E731
    err_sinh = np.max(np.abs(batched(sites.quadrature, ll, [m], [v])[0] - closed))
    err_gh = np.max(np.abs(batched(sites.gauss_hermite, ll, [m], [v])[0] - closed))
    assert err_sinh < 1e-8 < 1e-3 < err_gh


def test_site_functions_vectorise_and_stay_finite_in_the_tails():
    m = jnp.array([-40.0, -8.0, 0.0, 8.0, 40.0])
    v = jnp.array([0.5, 1.0, 2.0, 1.0, 0.5])
    logistic = jax.jit(jax.vmap(lambda a, b: sites.quadrature(lambda e: -jnp.logaddexp(0.0, -e), a, b)))
    for out in (sites.probit(m, v, 1.0), sites.noisy_step(m, v, 1.0, 0.05), sites.noisy_step(m, v, 1.0, 0.0),
                logistic(m, v)):
        log_z, mean, var = (np.asarray(x) for x in out)
        assert np.all(np.isfinite(log_z)) and np.all(np.isfinite(mean))
        assert np.all(var > 0) and np.all(var <= np.asarray(v) * (1 + 1e-12))


def test_quadrature_outside_the_support_counts_as_zero_likelihood():
    # Poisson with identity link: log-likelihood is NaN for eta < 0; the tilted lives on eta > 0.
    # The integrand has a kink at the support boundary, so the rule converges only algebraically
    # there: 1e-4 instead of 1e-8.
    ll = lambda e: 2.0 * jnp.log(e) - e - jax.scipy.special.gammaln(3.0)  # noqa: E731
    got = batched(sites.quadrature, ll, [1.0], [1.0])[0]
    want = quad_moments(lambda e: np.where(e > 0, 2 * np.log(np.abs(e)) - e - special.gammaln(3), -np.inf), 1.0, 1.0,
                        breaks=(0.0,))
    np.testing.assert_allclose(got, want, atol=1e-4)
