"""Bayesian linear and GLM regression as plain NumPyro programs.

Sites: ``w`` (weights), ``precision`` (noise precision, when not fixed), ``y`` (observations).
Each program samples the prior predictive when ``y=None``. ``prior_scale`` (and a known
``noise_scale``) may be given as a prior, e.g. ``dist.HalfNormal(2.0)``: it is then sampled as the
site of that name, a hyperparameter (``inference.laplace`` / ``inference.ep`` with ``hyper=``).

Example:
    >>> import numpy as np, inference, probmodels
    >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = X @ np.array([1.0, -1.0])
    >>> post = inference.laplace(probmodels.linear_regression, X, y, noise_scale=0.5)
    >>> post.samples["w"].shape
    (1, 1000, 2)
"""

from __future__ import annotations

import jax
import numpy as np
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr

from probmodels import _checks


@jax.jit
def probit_logits(f):
    """``logit(Phi(f)) = log Phi(f) - log Phi(-f)``: the probit link as Bernoulli logits, exact and
    finite for any ``f`` (separable data included). One compiled program per shape: run op by op
    (the models' eager traces), ``log_ndtr`` compiled ~25 small programs per shape.

    Example (finite where ``Phi(f)`` underflows):
        >>> import numpy as np
        >>> np.round(np.asarray(probit_logits(np.array([-40.0, 0.0, 1.0]))), 2).tolist()
        [-804.61, 0.0, 1.67]
    """
    return log_ndtr(f) - log_ndtr(-f)


def linear_regression(X, y=None, *, prior_scale=1.0, noise_scale=None, noise_prior=(1.0, 1.0)):
    """Gaussian linear regression ``y ~ N(X w, 1/precision)``.

    Known noise (``noise_scale`` given): ``w ~ N(0, prior_scale^2 I)``.
    Unknown noise: ``precision ~ Gamma(noise_prior)`` (shape, rate) and the conjugate
    normal-gamma prior ``w | precision ~ N(0, prior_scale^2 / precision I)``, so both cases have
    the closed-form posterior and evidence of `probmodels.conjugate`.

    Example:
        >>> import numpy as np, numpyro, probmodels
        >>> X = np.random.default_rng(0).normal(size=(20, 3))
        >>> sim = numpyro.handlers.trace(numpyro.handlers.seed(probmodels.linear_regression, 0)).get_trace(X, noise_scale=1.0)
        >>> sim["w"]["value"].shape, sim["y"]["value"].shape   # a draw from the prior predictive
        ((3,), (20,))
    """
    X = _checks.matrix(X, "X")
    n, d = X.shape
    y = _checks.vector(y, n, "y")
    if noise_scale is None:
        a0, b0 = _checks.positive_pair(noise_prior, "noise_prior")
        prior_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "linear_regression")
        precision = numpyro.sample("precision", dist.Gamma(a0, b0))
        w_scale = prior_scale / jnp.sqrt(precision)
        noise_sd = 1.0 / jnp.sqrt(precision)
    else:
        noise_sd = _checks.positive_or_prior(noise_scale, "noise_scale", "linear_regression")
        w_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "linear_regression")
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), w_scale).to_event(1))
    numpyro.sample("y", dist.Normal(X @ w, noise_sd), obs=y)


def logistic_regression(X, y=None, *, prior_scale=1.0):
    """Bayesian logistic regression: ``w ~ N(0, prior_scale^2 I)``, ``y ~ Bernoulli(sigmoid(X w))``.
    Labels {0, 1}, {-1, +1} or bool; site ``y`` and its predictions hold them as {0, 1}.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = X[:, 0] > 0
        >>> post = inference.laplace(probmodels.logistic_regression, X, y, num_samples=100)
        >>> post.samples["w"].shape, bool(post.mean("w")[0] > 0)
        ((1, 100, 2), True)
    """
    X = _checks.matrix(X, "X")
    n, d = X.shape
    y = _checks.binary_labels(y, n, "y")
    prior_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "logistic_regression")
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), prior_scale).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def probit_regression(X, y=None, *, prior_scale=1.0):
    """Bayesian probit regression: ``w ~ N(0, prior_scale^2 I)``, ``y ~ Bernoulli(Phi(X w))``.
    Labels {0, 1}, {-1, +1} or bool; site ``y`` and its predictions hold them as {0, 1}.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = X[:, 0] > 0
        >>> post = inference.ep(probmodels.probit_regression, X, y, num_samples=100, progress=False)
        >>> post.evidence_method, bool(post.mean("w")[0] > 0)
        ('ep', True)
    """
    X = _checks.matrix(X, "X")
    n, d = X.shape
    y = _checks.binary_labels(y, n, "y")
    prior_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "probit_regression")
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), prior_scale).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=probit_logits(X @ w)), obs=y)


def default_cutpoints(num_categories: int) -> jnp.ndarray:
    """``K - 1`` cut points one noise scale apart, centred on 0: ``b_k = k - K / 2``."""
    return jnp.arange(1, num_categories) - 0.5 * num_categories


def ordinal_regression(X, y=None, *, num_categories=None, cutpoints=None, prior_scale=1.0, noise_scale=1.0):
    """Ordinal probit regression (Chu & Ghahramani 2005): ``w ~ N(0, prior_scale^2 I)`` and
    ``P(y = k) = Phi((b_k - x w) / s) - Phi((b_{k-1} - x w) / s)`` for ``y`` in {0, ..., K-1}.

    The cut points are fixed: ``cutpoints`` (K - 1 increasing numbers), or by default
    ``b_k = k - K / 2`` (one noise scale apart, centred on 0; :func:`default_cutpoints`). ``K`` is
    ``num_categories``, else ``len(cutpoints) + 1``, else ``max(y) + 1``. ``noise_scale`` is ``s``.
    The likelihood is :class:`inference.distributions.OrderedProbit`, which EP reads as a
    closed-form ordinal site. Sites ``w``, ``y``.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(60, 2)); y = np.digitize(X[:, 0], [-0.5, 0.5])
        >>> post = inference.ep(probmodels.ordinal_regression, X, y, num_samples=100, progress=False)
        >>> post.diagnostics["site_kinds"], bool(post.mean("w")[0] > 0)
        ({'y': 'ordinal'}, True)
    """
    from inference.distributions import OrderedProbit

    X = _checks.matrix(X, "X")
    n, d = X.shape
    cuts = _ordinal_cutpoints(num_categories, cutpoints, y)
    y = _checks.categories(y, n, cuts.shape[0] + 1, "y")
    prior_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "ordinal_regression")
    noise_scale = _checks.positive(noise_scale, "noise_scale")
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), prior_scale).to_event(1))
    numpyro.sample("y", OrderedProbit(X @ w, cuts, noise_scale), obs=y)


def _ordinal_cutpoints(num_categories, cutpoints, y):
    if cutpoints is not None:
        if _checks.is_traced(cutpoints):
            return cutpoints
        cuts = np.asarray(cutpoints, dtype=float)
        if cuts.ndim != 1 or cuts.size == 0 or not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
            raise ValueError(f"cutpoints must be a 1-D array of finite, strictly increasing numbers, got {cutpoints!r}")
        if num_categories is not None and _checks.positive_int(num_categories, "num_categories", 2) != cuts.size + 1:
            raise ValueError(f"num_categories={num_categories} but cutpoints has {cuts.size} entries "
                             f"(K - 1 = {num_categories - 1} expected)")
        return jnp.asarray(cuts)
    if num_categories is None:
        if y is None or _checks.is_traced(y):
            raise ValueError("ordinal_regression: give num_categories (or cutpoints) when y is not observed "
                             "(after a fit that read K off y: post.predict(X_new, num_categories=K))")
        arr = np.asarray(y)
        if arr.size == 0 or not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
            raise ValueError("y must hold integer categories 0, ..., K-1")
        if np.min(arr) > 0:  # 1-based labels (R's convention) would leave category 0 empty below
            raise ValueError(  # fixed cut points: a silently other posterior for w
                f"y's lowest category is {np.min(arr):g}, not 0: categories are 0, ..., K-1 (for 1-based "
                f"labels pass y - 1); to fit categories that were never observed, give num_categories= "
                f"or cutpoints=")
        num_categories = max(int(np.max(arr)) + 1, 2)
    return default_cutpoints(_checks.positive_int(num_categories, "num_categories", 2))


def robust_regression(X, y=None, *, df=3.0, noise_scale=1.0, prior_scale=1.0):
    """Robust linear regression: ``w ~ N(0, prior_scale^2 I)``, ``y ~ StudentT(df, X w,
    noise_scale)``, with known ``df`` and ``noise_scale``. The heavy tails discount outliers that
    pull a Gaussian-noise fit; the likelihood is not log-concave, so EP meets negative site
    precisions (handled by its quadrature sites, counted in ``diagnostics``). Sites ``w``, ``y``.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(60, 2)); y = X @ np.array([1.0, -1.0])
        >>> y[:5] += 30.0  # outliers
        >>> post = inference.ep(probmodels.robust_regression, X, y, num_samples=100, progress=False)
        >>> np.round(post.mean("w"), 1).tolist()
        [1.0, -1.0]
    """
    X = _checks.matrix(X, "X")
    n, d = X.shape
    y = _checks.vector(y, n, "y")
    df = _checks.positive(df, "df")
    noise_scale = _checks.positive(noise_scale, "noise_scale")
    prior_scale = _checks.positive_or_prior(prior_scale, "prior_scale", "robust_regression")
    w = numpyro.sample("w", dist.Normal(jnp.zeros(d), prior_scale).to_event(1))
    numpyro.sample("y", dist.StudentT(df, X @ w, noise_scale), obs=y)
