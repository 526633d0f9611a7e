"""Simulators for the synthetic problems used by tests, demos and benchmarks.

Every simulator takes a size, a ``seed: int`` and keyword-only parameters with documented defaults,
and returns NumPy arrays (float64 features, int64 labels / counts / states), never JAX arrays.
Simulators with hidden structure return a ``NamedTuple`` whose field names are the site names of the
matching library model (``states``, ``trans``, ``locs``, ``z``, ``topics``, ...), so a posterior can be
compared with the truth field by field.

>>> from probmodels.simulate import twonorm
>>> X, y = twonorm(100, seed=0)
>>> X.shape, sorted(set(y.tolist()))
((100, 20), [-1, 1])
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

__all__ = [
    "twonorm",
    "threenorm",
    "circle",
    "gaussian_hmm",
    "poisson_hmm",
    "gaussian_mixture_data",
    "lda_corpus",
    "GaussianHMMData",
    "PoissonHMMData",
    "MixtureData",
    "LDACorpus",
]


class GaussianHMMData(NamedTuple):
    """A simulated Gaussian HMM sequence and the parameters that generated it."""

    obs: np.ndarray  # (T,) float64
    states: np.ndarray  # (T,) int64
    init: np.ndarray  # (K,)
    trans: np.ndarray  # (K, K), rows sum to 1
    locs: np.ndarray  # (K,)
    scales: np.ndarray  # (K,)


class PoissonHMMData(NamedTuple):
    """A simulated Poisson HMM sequence and the parameters that generated it."""

    obs: np.ndarray  # (T,) int64
    states: np.ndarray  # (T,) int64
    init: np.ndarray  # (K,)
    trans: np.ndarray  # (K, K)
    rates: np.ndarray  # (K,)


class MixtureData(NamedTuple):
    """A simulated Gaussian-mixture sample, its assignments and the true parameters."""

    X: np.ndarray  # (n, d) float64
    z: np.ndarray  # (n,) int64 component of each row
    weights: np.ndarray  # (K,)
    locs: np.ndarray  # (K, d)
    cov: np.ndarray  # (K, d, d)


class LDACorpus(NamedTuple):
    """A corpus drawn from the LDA generative process and its true topics."""

    counts: np.ndarray  # (num_docs, vocab_size) int64 document-term counts
    topics: np.ndarray  # (num_topics, vocab_size), rows sum to 1
    theta: np.ndarray  # (num_docs, num_topics), rows sum to 1


# --------------------------------------------------------------------------- argument checks


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return np.random.default_rng(int(seed))


def _count(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _positive(value, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return arr


def _simplex(value, name: str, axis: int = -1) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must hold finite non-negative probabilities, got {value!r}")
    if not np.allclose(arr.sum(axis=axis), 1.0, atol=1e-8):
        raise ValueError(f"{name} must sum to 1 along its last axis, got sums {arr.sum(axis=axis)}")
    return arr


# --------------------------------------------------------------------------- classification


def twonorm(n: int, seed: int = 0, *, num_features: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Breiman's twonorm: two unit-covariance Gaussians with means ``-a 1`` (y=+1) and ``+a 1`` (y=-1).

    ``a = 2 / sqrt(num_features)``; labels are +1 or -1 with probability 1/2 each. The sign
    convention matches the vendored ``twonorm.csv`` (KEEL copy), whose class +1 has mean ``-a 1``.
    The Bayes error is ``Phi(-2) = 2.3%`` for every ``num_features``.

    >>> X, y = twonorm(7400, seed=0)
    >>> X.shape
    (7400, 20)
    """
    n = _count(n, "n")
    d = _count(num_features, "num_features")
    rng = _rng(seed)
    a = 2.0 / np.sqrt(d)
    y = np.where(rng.random(n) < 0.5, 1, -1).astype(np.int64)
    X = rng.standard_normal((n, d)) - a * y[:, None]
    return X, y


def threenorm(n: int, seed: int = 0, *, num_features: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Breiman's threenorm: y=+1 from an equal mixture of ``N(a 1, I)`` and ``N(-a 1, I)``, y=-1 from
    ``N((a, -a, a, -a, ...), I)``, ``a = 2 / sqrt(num_features)``, classes equally likely.

    Table 6.3 of the thesis uses 100 training and 1000 test points (20 features).

    >>> X, y = threenorm(1100, seed=1)
    >>> X.shape
    (1100, 20)
    """
    n = _count(n, "n")
    d = _count(num_features, "num_features")
    rng = _rng(seed)
    a = 2.0 / np.sqrt(d)
    y = np.where(rng.random(n) < 0.5, 1, -1).astype(np.int64)
    mixture_sign = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    alternating = a * np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    means = np.where((y == 1)[:, None], a * mixture_sign[:, None] * np.ones(d), alternating)
    X = means + rng.standard_normal((n, d))
    return X, y


def circle(n: int, flip_rate: float = 0.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The thesis' circle problem: ``x ~ U(-1, 1)^2``, label +1 iff ``||x||^2 >= 1/2``, then each label
    flipped independently with probability ``flip_rate`` (label noise for the Bayes machine).

    Without noise P(y = +1) = 1 - pi/8 (about 0.607).

    >>> X, y = circle(200, flip_rate=0.1, seed=0)
    >>> X.shape, y.dtype
    ((200, 2), dtype('int64'))
    """
    n = _count(n, "n")
    if isinstance(flip_rate, bool) or not isinstance(flip_rate, numbers.Real):
        raise TypeError(f"flip_rate must be a number, got {type(flip_rate).__name__}")
    if not (0.0 <= flip_rate <= 0.5):
        raise ValueError(f"flip_rate must lie in [0, 0.5], got {flip_rate}")
    rng = _rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(np.sum(X**2, axis=1) >= 0.5, 1, -1).astype(np.int64)
    flip = rng.random(n) < flip_rate
    return X, np.where(flip, -y, y)


# --------------------------------------------------------------------------- hidden Markov models

_HMM_INIT = (0.5, 0.5)
_HMM_TRANS = ((0.95, 0.05), (0.10, 0.90))


def _markov_chain(rng, T: int, init: np.ndarray, trans: np.ndarray) -> np.ndarray:
    # Inverse-CDF sampling, one uniform per step (a Python loop: T is small in tests and demos).
    u = rng.random(T)
    cum_init, cum_trans = np.cumsum(init), np.cumsum(trans, axis=1)
    K = init.shape[0]
    states = np.empty(T, dtype=np.int64)
    states[0] = min(np.searchsorted(cum_init, u[0], side="right"), K - 1)
    for t in range(1, T):
        states[t] = min(np.searchsorted(cum_trans[states[t - 1]], u[t], side="right"), K - 1)
    return states


def _hmm_chain_params(init, trans, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    init = _simplex(_HMM_INIT if init is None else init, "init")
    trans = _simplex(_HMM_TRANS if trans is None else trans, "trans")
    if init.ndim != 1 or trans.shape != (init.shape[0], init.shape[0]):
        raise ValueError(f"init must be (K,) and trans (K, K); got {init.shape} and {trans.shape}")
    if init.shape[0] != num_states:
        raise ValueError(f"init/trans have {init.shape[0]} states but emission parameters have {num_states}")
    return init, trans


def gaussian_hmm(
    T: int, seed: int = 0, *, init=None, trans=None, locs=(-1.5, 1.5), scales=(0.7, 1.0)
) -> GaussianHMMData:
    """Draw a length-``T`` sequence from a univariate Gaussian HMM.

    Defaults: two states, ``init = (0.5, 0.5)``, ``trans = ((0.95, 0.05), (0.10, 0.90))``,
    ``locs = (-1.5, 1.5)``, ``scales = (0.7, 1.0)``; pass arrays to change the number of states.

    >>> data = gaussian_hmm(300, seed=0)
    >>> data.obs.shape, data.states.shape, data.trans.shape
    ((300,), (300,), (2, 2))
    """
    T = _count(T, "T")
    locs = np.asarray(locs, dtype=np.float64)
    if locs.ndim != 1 or not np.all(np.isfinite(locs)):
        raise ValueError(f"locs must be a finite (K,) vector, got {locs!r}")
    scales = _positive(scales, "scales")
    if scales.shape != locs.shape:
        raise ValueError(f"scales must have the shape of locs {locs.shape}, got {scales.shape}")
    init, trans = _hmm_chain_params(init, trans, locs.shape[0])
    rng = _rng(seed)
    states = _markov_chain(rng, T, init, trans)
    obs = locs[states] + scales[states] * rng.standard_normal(T)
    return GaussianHMMData(obs, states, init, trans, locs, scales)


def poisson_hmm(T: int, seed: int = 0, *, init=None, trans=None, rates=(2.0, 10.0)) -> PoissonHMMData:
    """Draw a length-``T`` count sequence from a Poisson HMM (defaults as :func:`gaussian_hmm`,
    ``rates = (2, 10)``).

    >>> data = poisson_hmm(300, seed=0)
    >>> data.obs.dtype, data.rates.tolist()
    (dtype('int64'), [2.0, 10.0])
    """
    T = _count(T, "T")
    rates = _positive(rates, "rates")
    if rates.ndim != 1:
        raise ValueError(f"rates must be a (K,) vector, got shape {rates.shape}")
    init, trans = _hmm_chain_params(init, trans, rates.shape[0])
    rng = _rng(seed)
    states = _markov_chain(rng, T, init, trans)
    obs = rng.poisson(rates[states]).astype(np.int64)
    return PoissonHMMData(obs, states, init, trans, rates)


# --------------------------------------------------------------------------- mixtures and topics

_MIX_WEIGHTS = (0.5, 0.3, 0.2)
_MIX_LOCS = ((-3.0, 0.0), (3.0, 0.0), (0.0, 4.0))
_MIX_COV = (((1.0, 0.3), (0.3, 0.5)), ((0.6, -0.2), (-0.2, 1.0)), ((0.8, 0.0), (0.0, 0.8)))


def gaussian_mixture_data(n: int, seed: int = 0, *, weights=None, locs=None, cov=None) -> MixtureData:
    """Draw ``n`` points from a finite Gaussian mixture with full covariances.

    Defaults: three well-separated 2-D components, ``weights = (0.5, 0.3, 0.2)``, means
    ``(-3, 0), (3, 0), (0, 4)``. ``cov`` is (K, d, d) and must be symmetric positive definite.

    >>> data = gaussian_mixture_data(500, seed=0)
    >>> data.X.shape, data.locs.shape, data.cov.shape
    ((500, 2), (3, 2), (3, 2, 2))
    """
    n = _count(n, "n")
    weights = _simplex(_MIX_WEIGHTS if weights is None else weights, "weights")
    locs = np.asarray(_MIX_LOCS if locs is None else locs, dtype=np.float64)
    cov = np.asarray(_MIX_COV if cov is None else cov, dtype=np.float64)
    K = weights.shape[0]
    if weights.ndim != 1 or locs.ndim != 2 or locs.shape[0] != K or not np.all(np.isfinite(locs)):
        raise ValueError(f"locs must be a finite (K, d) array with K = len(weights) = {K}, got shape {locs.shape}")
    d = locs.shape[1]
    if cov.shape != (K, d, d) or not np.all(np.isfinite(cov)) or not np.allclose(cov, np.swapaxes(cov, 1, 2)):
        raise ValueError(f"cov must be a finite symmetric ({K}, {d}, {d}) array, got shape {cov.shape}")
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError("cov must be positive definite for every component") from None
    rng = _rng(seed)
    z = rng.choice(K, size=n, p=weights).astype(np.int64)
    X = locs[z] + np.einsum("nij,nj->ni", chol[z], rng.standard_normal((n, d)))
    return MixtureData(X, z, weights, locs, cov)


def lda_corpus(
    num_docs: int,
    vocab_size: int,
    num_topics: int,
    *,
    doc_length: float = 100.0,
    alpha: float = 0.1,
    eta: float = 0.01,
    seed: int = 0,
) -> LDACorpus:
    """Draw a corpus from the LDA generative process (Blei, Ng & Jordan 2003).

    ``topics[k] ~ Dirichlet(eta 1_V)``, ``theta[d] ~ Dirichlet(alpha 1_K)``, document length
    ``N_d ~ Poisson(doc_length)`` (at least 1), and each word drawn by picking a topic from
    ``theta[d]`` then a word from that topic; the per-word topics are summed out, so a document's
    counts are ``Multinomial(N_d, theta[d] @ topics)``. Returns dense int64 counts.

    >>> corpus = lda_corpus(50, vocab_size=30, num_topics=3, seed=0)
    >>> corpus.counts.shape, corpus.topics.shape, corpus.theta.shape
    ((50, 30), (3, 30), (50, 3))
    """
    num_docs = _count(num_docs, "num_docs")
    vocab_size = _count(vocab_size, "vocab_size")
    num_topics = _count(num_topics, "num_topics")
    for name, value in (("doc_length", doc_length), ("alpha", alpha), ("eta", eta)):
        _positive(value, name)
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
    rng = _rng(seed)
    topics = rng.dirichlet(np.full(vocab_size, float(eta)), size=num_topics)
    theta = rng.dirichlet(np.full(num_topics, float(alpha)), size=num_docs)
    lengths = np.maximum(rng.poisson(doc_length, size=num_docs), 1)
    probs = theta @ topics
    probs /= probs.sum(axis=1, keepdims=True)  # guard against rounding before multinomial
    counts = rng.multinomial(lengths, probs).astype(np.int64)
    return LDACorpus(counts, topics, theta)
