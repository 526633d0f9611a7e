"""inference.spikeslab.exact: enumeration against independent brute-force computations."""

import itertools

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

from inference.spikeslab.exact import enumerate_models, enumerate_probit, exact_posterior
from probmodels.spike_slab import spike_and_slab_regression

RNG = np.random.default_rng(7)
N, D = 12, 4
X = RNG.normal(size=(N, D))
Y = X[:, 1] - 0.5 * X[:, 3] + 0.7 * RNG.normal(size=N)
P = np.array([0.2, 0.3, 0.4, 0.5])
S2 = np.array([1.0, 2.0, 0.5, 1.5])


def _brute_fixed(noise_sd):
    """Every model by the multivariate normal density of y (w integrated out analytically)."""
    logs = []
    for m in itertools.product((0, 1), repeat=D):
        m = np.array(m)
        C = noise_sd**2 * np.eye(N) + (X * (m * S2)) @ X.T
        logs.append(np.sum(np.where(m == 1, np.log(P), np.log1p(-P))) + stats.multivariate_normal(np.zeros(N), C).logpdf(Y))
    logs = np.array(logs)
    post = np.exp(logs - logsumexp(logs))
    return post @ np.array(list(itertools.product((0, 1), repeat=D))), logsumexp(logs)


def _brute_gamma(a, b):
    """Every model by 1-D quadrature over the noise precision (Normal-Gamma: slab S2 / tau)."""
    logs = []
    for m in itertools.product((0, 1), repeat=D):
        m = np.array(m)
        C = np.eye(N) + (X * (m * S2)) @ X.T
        logdet, quad = np.linalg.slogdet(C)[1], Y @ np.linalg.solve(C, Y)
        # log N(Y | 0, C / t) + log Gamma(t | a, b), shifted by +20 for the quadrature's range
        f = lambda t: np.exp(0.5 * N * np.log(t / (2 * np.pi)) - 0.5 * logdet - 0.5 * t * quad  # noqa: E731
                             + a * np.log(b) - gammaln(a) + (a - 1) * np.log(t) - b * t + 20)
        logs.append(np.sum(np.where(m == 1, np.log(P), np.log1p(-P))) + np.log(integrate.quad(f, 0, np.inf, epsrel=1e-11, limit=200)[0]) - 20)
    logs = np.array(logs)
    post = np.exp(logs - logsumexp(logs))
    return post @ np.array(list(itertools.product((0, 1), repeat=D))), logsumexp(logs)


def test_fixed_noise_matches_brute_force():
    incl, log_ev = _brute_fixed(0.7)
    res = exact_posterior(spike_and_slab_regression, X, Y, p_incl=P, slab_scale=np.sqrt(S2), noise_scale=0.7)
    np.testing.assert_allclose(np.asarray(res.inclusion), incl, rtol=1e-9)
    np.testing.assert_allclose(float(res.log_evidence), log_ev, rtol=1e-11)
    assert abs(float(np.exp(res.model_log_prob).sum()) - 1) < 1e-12


def test_gamma_precision_matches_quadrature():
    incl, log_ev = _brute_gamma(2.0, 1.5)
    res = exact_posterior(spike_and_slab_regression, X, Y, p_incl=P, slab_scale=np.sqrt(S2), noise_prior=(2.0, 1.5))
    np.testing.assert_allclose(np.asarray(res.inclusion), incl, rtol=1e-7)
    np.testing.assert_allclose(float(res.log_evidence), log_ev, rtol=1e-8)


def test_too_many_features():
    with pytest.raises(ValueError, match="X"):
        enumerate_models(np.zeros((3, 17)), np.zeros(3), p_incl=0.1, slab_var=1.0)


def test_probit_enumeration_single_feature_against_quad():
    """d = 1: P(z = 1 | y) from a direct 1-D integral of the probit likelihood."""
    x = RNG.normal(size=(20, 1))
    y = np.sign(x[:, 0] + 0.8 * RNG.normal(size=20))
    lik = lambda w: np.exp(np.sum(stats.norm.logcdf(y * x[:, 0] * w)) + 10) * stats.norm.pdf(w)  # noqa: E731
    z1 = integrate.quad(lik, -12, 12, epsrel=1e-12)[0] * np.exp(-10)
    z0 = np.exp(np.sum(stats.norm.logcdf(0.0 * y)))
    res = enumerate_probit(x, y, p_incl=0.3, slab_var=1.0, num_nodes=80)
    np.testing.assert_allclose(res.inclusion[0], 0.3 * z1 / (0.3 * z1 + 0.7 * z0), rtol=1e-7)
    np.testing.assert_allclose(res.log_evidence, np.log(0.3 * z1 + 0.7 * z0), rtol=1e-7)
