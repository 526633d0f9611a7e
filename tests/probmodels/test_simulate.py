"""Tests for probmodels/simulate.py: each simulator's distribution checked by its moments, with
tolerances of 5 Monte Carlo standard errors (per statistic; a false alarm is ~1e-6 per check),
plus reproducibility, return types and bad input."""

import numpy as np
import pytest
from scipy.stats import norm

from probmodels import datasets, simulate

Z = 5.0  # tolerance in Monte Carlo standard errors


def _within(estimate, expected, se):
    estimate, expected, se = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (estimate, expected, se)))
    z = np.abs(estimate - expected) / se
    assert np.all(z < Z), f"max |z| = {z.max():.2f}: estimate {estimate} vs expected {expected}"


def test_reexported_from_datasets():
    names = ("twonorm", "threenorm", "circle", "gaussian_hmm", "poisson_hmm", "gaussian_mixture_data", "lda_corpus")
    for name in names:
        assert getattr(datasets, name) is getattr(simulate, name)


def test_twonorm_class_means_and_covariance():
    X, y = simulate.twonorm(20000, seed=0)
    assert X.shape == (20000, 20) and X.dtype == np.float64 and y.dtype == np.int64
    assert set(y.tolist()) == {-1, 1}
    _within(np.mean(y == 1), 0.5, np.sqrt(0.25 / len(y)))
    a = 2 / np.sqrt(20)
    for label in (1, -1):
        Xc = X[y == label]
        m = len(Xc)
        _within(Xc.mean(axis=0), -label * a, 1 / np.sqrt(m))
        cov = np.cov(Xc, rowvar=False)
        se = np.where(np.eye(20, dtype=bool), np.sqrt(2 / m), np.sqrt(1 / m))
        _within(cov, np.eye(20), se)


def test_twonorm_bayes_error():
    # The optimal rule sign(-sum x) errs with probability Phi(-a sqrt(d)) = Phi(-2) = 0.02275.
    X, y = simulate.twonorm(20000, seed=1, num_features=8)
    err = np.mean(np.sign(-X.sum(axis=1)) != y)
    _within(err, 0.022750131948179, np.sqrt(0.02275 * 0.97725 / len(y)))


def test_threenorm_mixture_structure():
    n, d = 20000, 20
    X, y = simulate.threenorm(n, seed=0)
    a = 2 / np.sqrt(d)
    _within(np.mean(y == 1), 0.5, np.sqrt(0.25 / n))
    neg, pos = X[y == -1], X[y == 1]
    alternating = a * np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    _within(neg.mean(axis=0), alternating, 1 / np.sqrt(len(neg)))
    # Class +1: mean 0 per coordinate (variance 1 + a^2), and along 1/sqrt(d) a two-component
    # mixture at +-a sqrt(d) = +-2: E u = 0, E u^2 = 1 + 4 = 5, half the points on each side.
    _within(pos.mean(axis=0), 0.0, np.sqrt((1 + a**2) / len(pos)))
    u = pos.sum(axis=1) / np.sqrt(d)
    _within(np.mean(u**2), 5.0, np.std(u**2) / np.sqrt(len(u)))
    _within(np.mean(u > 0), 0.5, np.sqrt(0.25 / len(u)))
    # Bimodality: P(0.5 < |u| < 3.5) for u ~ N(2, 1) is Phi(1.5) - Phi(-1.5) + Phi(-2.5) - Phi(-5.5)
    # (a single Gaussian with the same variance 5 would give 0.71).
    band = norm.cdf(1.5) - norm.cdf(-1.5) + norm.cdf(-2.5) - norm.cdf(-5.5)
    _within(np.mean((np.abs(u) > 0.5) & (np.abs(u) < 3.5)), band, np.sqrt(band * (1 - band) / len(u)))
    # Class -1 along 1/sqrt(d): mean 0 (d even), variance 1.
    v = neg.sum(axis=1) / np.sqrt(d)
    _within(np.mean(v), 0.0, 1 / np.sqrt(len(v)))
    _within(np.var(v), 1.0, np.sqrt(2 / len(v)))


@pytest.mark.parametrize("flip_rate", [0.0, 0.1, 0.3, 0.5])
def test_circle_flip_rate_and_class_balance(flip_rate):
    n = 20000
    X, y = simulate.circle(n, flip_rate=flip_rate, seed=2)
    assert X.shape == (n, 2) and np.all(np.abs(X) <= 1.0)
    clean = np.where(np.sum(X**2, axis=1) >= 0.5, 1, -1)
    p_pos = 1 - np.pi / 8  # area outside the disc of radius sqrt(1/2), over the square's area 4
    _within(np.mean(clean == 1), p_pos, np.sqrt(p_pos * (1 - p_pos) / n))
    flipped = np.mean(y != clean)
    if flip_rate == 0.0:
        assert flipped == 0.0
    else:
        _within(flipped, flip_rate, np.sqrt(flip_rate * (1 - flip_rate) / n))


def _check_chain(states, trans):
    # Empirical transition frequencies out of each state vs the true row, binomial standard errors.
    K = trans.shape[0]
    for i in range(K):
        nxt = states[1:][states[:-1] == i]
        assert len(nxt) > 100
        freq = np.bincount(nxt, minlength=K) / len(nxt)
        _within(freq, trans[i], np.sqrt(trans[i] * (1 - trans[i]) / len(nxt)) + 1e-12)


def test_gaussian_hmm_transitions_and_emissions():
    data = simulate.gaussian_hmm(20000, seed=0)
    assert data.obs.shape == data.states.shape == (20000,) and data.obs.dtype == np.float64
    _check_chain(data.states, data.trans)
    for k in range(2):
        x = data.obs[data.states == k]
        _within(x.mean(), data.locs[k], data.scales[k] / np.sqrt(len(x)))
        _within(x.var(), data.scales[k] ** 2, data.scales[k] ** 2 * np.sqrt(2 / len(x)))
    # Stationary occupancy of the default chain: (2/3, 1/3); states are autocorrelated, so only a
    # loose check (the effective sample size is ~ T (1 - 0.85) / (1 + 0.85)).
    _within(np.mean(data.states == 0), 2 / 3, np.sqrt(2 / 9 / (20000 * 0.15 / 1.85)))


def test_gaussian_hmm_custom_parameters():
    trans = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]])
    data = simulate.gaussian_hmm(15000, seed=1, init=[0.0, 0.0, 1.0], trans=trans, locs=[-5, 0, 5], scales=[1, 1, 1])
    assert data.states[0] == 2 and data.trans.shape == (3, 3)
    _check_chain(data.states, trans)


def test_poisson_hmm_rates():
    data = simulate.poisson_hmm(20000, seed=0)
    assert data.obs.dtype == np.int64 and np.all(data.obs >= 0)
    _check_chain(data.states, data.trans)
    for k, rate in enumerate(data.rates):
        x = data.obs[data.states == k]
        _within(x.mean(), rate, np.sqrt(rate / len(x)))


def test_gaussian_mixture_moments():
    data = simulate.gaussian_mixture_data(30000, seed=0)
    n, K = 30000, 3
    assert data.X.shape == (n, 2) and data.z.shape == (n,)
    freq = np.bincount(data.z, minlength=K) / n
    _within(freq, data.weights, np.sqrt(data.weights * (1 - data.weights) / n))
    for k in range(K):
        Xk = data.X[data.z == k]
        m, S = len(Xk), data.cov[k]
        _within(Xk.mean(axis=0), data.locs[k], np.sqrt(np.diag(S) / m))
        # Var of one sample covariance entry: S_ii S_jj + S_ij^2.
        se = np.sqrt((np.outer(np.diag(S), np.diag(S)) + S**2) / m)
        _within(np.cov(Xk, rowvar=False), S, se)


def test_lda_corpus_generative_process():
    D, V, K, alpha, eta, length = 400, 60, 5, 0.1, 0.05, 200.0
    corpus = simulate.lda_corpus(D, V, K, doc_length=length, alpha=alpha, eta=eta, seed=0)
    counts, topics, theta = corpus
    assert counts.shape == (D, V) and counts.dtype == np.int64 and np.all(counts >= 0)
    np.testing.assert_allclose(topics.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(topics >= 0) and np.all(theta >= 0)
    N = counts.sum(axis=1)
    assert N.min() >= 1
    _within(N.mean(), length, np.sqrt(length / D))
    # Dirichlet(alpha 1_K) spread: E sum_k (theta_k - 1/K)^2 = (1 - 1/K) / (K alpha + 1); docs independent.
    s = np.sum((theta - 1 / K) ** 2, axis=1)
    _within(s.mean(), (1 - 1 / K) / (K * alpha + 1), s.std() / np.sqrt(D))
    # Counts are Multinomial(N_d, theta_d @ topics): per-word totals within 5 standard errors.
    p = theta @ topics
    expected = (N[:, None] * p).sum(axis=0)
    var = (N[:, None] * p * (1 - p)).sum(axis=0)
    used = expected > 5
    _within(counts.sum(axis=0)[used], expected[used], np.sqrt(var[used]))
    assert np.all(counts.sum(axis=0)[expected < 1e-12] == 0)


def test_lda_topics_dirichlet_spread():
    V, eta = 40, 0.2
    topics = simulate.lda_corpus(1, V, 2000, eta=eta, seed=3).topics
    s = np.sum((topics - 1 / V) ** 2, axis=1)
    _within(s.mean(), (1 - 1 / V) / (V * eta + 1), s.std() / np.sqrt(len(s)))


@pytest.mark.parametrize(
    "call",
    [
        lambda: simulate.twonorm(100, seed=7),
        lambda: simulate.threenorm(100, seed=7),
        lambda: simulate.circle(100, 0.2, seed=7),
        lambda: simulate.gaussian_hmm(100, seed=7),
        lambda: simulate.poisson_hmm(100, seed=7),
        lambda: simulate.gaussian_mixture_data(100, seed=7),
        lambda: simulate.lda_corpus(10, 20, 3, seed=7),
    ],
)
def test_seeded_numpy_outputs(call):
    first, second = call(), call()
    for a, b in zip(first, second):
        assert type(a) is np.ndarray
        np.testing.assert_array_equal(a, b)


def test_different_seeds_differ():
    assert not np.array_equal(simulate.twonorm(50, seed=0)[0], simulate.twonorm(50, seed=1)[0])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: simulate.twonorm(0), ValueError, "n must be"),
        (lambda: simulate.threenorm(-3), ValueError, "n must be"),
        (lambda: simulate.twonorm(10.5), TypeError, "n must be"),
        (lambda: simulate.twonorm(10, seed=-1), ValueError, "seed"),
        (lambda: simulate.twonorm(10, seed=1.0), TypeError, "seed"),
        (lambda: simulate.circle(10, flip_rate=-0.1), ValueError, "flip_rate"),
        (lambda: simulate.circle(10, flip_rate=0.6), ValueError, "flip_rate"),
        (lambda: simulate.circle(0, flip_rate=0.1), ValueError, "n must be"),
        (lambda: simulate.gaussian_hmm(0), ValueError, "T must be"),
        (lambda: simulate.gaussian_hmm(10, trans=[[0.5, 0.4], [0.5, 0.5]]), ValueError, "trans"),
        (lambda: simulate.gaussian_hmm(10, scales=[1.0, -1.0]), ValueError, "scales"),
        (lambda: simulate.gaussian_hmm(10, locs=[0.0, 1.0, 2.0], scales=[1.0, 1.0, 1.0]), ValueError, "states"),
        (lambda: simulate.poisson_hmm(10, rates=[1.0, 0.0]), ValueError, "rates"),
        (lambda: simulate.gaussian_mixture_data(10, cov=np.stack([-np.eye(2)] * 3)), ValueError, "cov"),
        (lambda: simulate.gaussian_mixture_data(10, weights=[0.5, 0.6, -0.1]), ValueError, "weights"),
        (lambda: simulate.lda_corpus(10, 20, 0), ValueError, "num_topics"),
        (lambda: simulate.lda_corpus(10, 20, 3, alpha=0.0), ValueError, "alpha"),
        (lambda: simulate.lda_corpus(10, 20, 3, eta=np.nan), ValueError, "eta"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
