"""Latent Gaussian-process classifiers: the probit/logit GP classifier and the Bayes machine.

Both put a GP prior on the latent values at the training inputs,
``f ~ MultivariateNormal(0, K + jitter I)`` with ``K = kernel(X, X)`` (default ``RBF()``) and the
smallest jitter that makes ``K`` numerically positive definite (`probmodels.kernels.gram`; at least
``1e-6`` x mean diagonal in float64). Labels are accepted as {0, 1}, {-1, +1} or bool and observed
internally as {0, 1}.

- ``gp_classifier``: ``y_i ~ Bernoulli(Phi(f_i))`` (probit) or ``Bernoulli(sigmoid(f_i))`` (logit).
  Sites ``f``, ``y``.
- ``bayes_machine``: ``P(y_i | f_i, eps) = eps + (1 - 2 eps) step(t_i f_i)`` (``t_i = 2 y_i - 1``),
  ``eps ~ Beta(noise_prior)`` the label-noise rate (Hernández-Lobato 2009, ch. 6). Sites ``f``,
  ``eps``, ``y`` (`inference.distributions.NoisyStep`). EP runs its own kernel-form algorithm
  (`inference.ep.bayes_machine`), MCMC elliptical slice sampling plus a Gibbs step for ``eps``.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.gp import bayes_machine
    >>> from probmodels.kernels import RBF
    >>> X = np.random.default_rng(0).uniform(-1, 1, (40, 2)); y = np.sign(X[:, 0])
    >>> post = inference.ep(bayes_machine, X, y, kernel=RBF(0.5))
    >>> post.samples["eps"].shape
    (1, 1000)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr

from inference.distributions import NoisyStep
from probmodels import _checks
from probmodels.kernels import RBF, Kernel, gram

__all__ = ["gp_classifier", "bayes_machine"]

LINKS = ("probit", "logit")


def _inputs(X, y, kernel):
    X = _checks.matrix(X, "X", allow_1d=True)
    n = X.shape[0]
    y = _checks.binary_labels(y, n, "y")
    if kernel is None:
        kernel = RBF()
    elif not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a probmodels.kernels.Kernel (e.g. RBF()), got {type(kernel).__name__}")
    return X, n, y, kernel


def _latent(X, n, kernel):
    K, _ = gram(kernel, X, name=f"kernel matrix {kernel!r} at X")
    return numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(n, dtype=K.dtype), covariance_matrix=K))


def gp_classifier(X, y=None, *, kernel=None, link="probit"):
    """GP classifier: ``f ~ GP(0, kernel)`` at the rows of ``X``, ``y_i ~ Bernoulli(link^-1(f_i))``.

    ``link`` is ``"probit"`` (``Phi``; EP moments in closed form) or ``"logit"`` (sigmoid).
    """
    X, n, y, kernel = _inputs(X, y, kernel)
    if link not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    f = _latent(X, n, kernel)
    # logit(Phi(f)) = log Phi(f) - log Phi(-f): exact and finite for any f.
    logits = log_ndtr(f) - log_ndtr(-f) if link == "probit" else f
    numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)


def bayes_machine(X, y=None, *, kernel=None, noise_prior=(1.0, 10.0)):
    """The Bayes machine: ``f ~ GP(0, kernel)``, ``eps ~ Beta(noise_prior)``,
    ``P(y_i = 1 | f_i, eps) = eps + (1 - 2 eps) step(f_i)`` (each label flipped with probability eps).

    ``noise_prior = (a0, b0)``, both positive; the default Beta(1, 10) has mean 1/11.
    """
    X, n, y, kernel = _inputs(X, y, kernel)
    a0, b0 = _checks.positive_pair(noise_prior, "noise_prior")
    f = _latent(X, n, kernel)
    eps = numpyro.sample("eps", dist.Beta(a0, b0))
    numpyro.sample("y", NoisyStep(f, eps), obs=y)
