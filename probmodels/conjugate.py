"""Exact posteriors and log evidences of the conjugate models: the references every engine is
tested against.

- `linear_regression_posterior` matches `probmodels.linear_regression`: known noise ``sigma``
  with ``w ~ N(0, s^2 I)``; or unknown precision ``tau ~ Gamma(a0, b0)`` (shape, rate) with
  ``w | tau ~ N(0, s^2 / tau I)``.
- `gp_regression_posterior` matches `probmodels.gp_regression` at fixed kernel and noise.

Example:
    >>> import numpy as np
    >>> from probmodels import conjugate
    >>> X = np.eye(3); y = np.ones(3)
    >>> post = conjugate.linear_regression_posterior(X, y, prior_scale=1.0, noise_scale=1.0)
    >>> np.allclose(post.mean, 0.5)
    True
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg, special

from probmodels import _checks


class GaussianPosterior(NamedTuple):
    """Known-noise case: ``w | y ~ N(mean, cov)``."""

    mean: np.ndarray
    cov: np.ndarray
    log_evidence: float


class NormalGammaPosterior(NamedTuple):
    """Unknown-precision case: ``tau | y ~ Gamma(shape, rate)``, ``w | tau, y ~ N(mean, scale_matrix / tau)``;
    marginally ``w | y`` is Student-t with ``2 shape`` degrees of freedom, mean ``mean`` and covariance ``cov``."""

    mean: np.ndarray
    cov: np.ndarray
    scale_matrix: np.ndarray
    shape: float
    rate: float
    log_evidence: float

    @property
    def precision_mean(self) -> float:
        return self.shape / self.rate

    @property
    def precision_sd(self) -> float:
        return float(np.sqrt(self.shape) / self.rate)


def _inputs(X, y):
    X = _checks.matrix(X, "X")
    y = _checks.vector(y, X.shape[0], "y")
    if y is None:
        raise ValueError("y is required for the posterior")
    return X, y


def linear_regression_posterior(X, y, *, prior_scale=1.0, noise_scale=None, noise_prior=(1.0, 1.0)):
    """Exact posterior and log evidence ``log p(y | X)`` for `probmodels.linear_regression`."""
    X, y = _inputs(X, y)
    n, d = X.shape
    s2 = _checks.positive(prior_scale, "prior_scale") ** 2
    if noise_scale is not None:
        sigma2 = _checks.positive(noise_scale, "noise_scale") ** 2
        prec = np.eye(d) / s2 + X.T @ X / sigma2
        chol = linalg.cho_factor(prec, lower=True)
        cov = linalg.cho_solve(chol, np.eye(d))
        mean = linalg.cho_solve(chol, X.T @ y / sigma2)
        # y ~ N(0, sigma2 I + s2 X X^T), via the matrix determinant lemma in d dimensions.
        logdet = n * np.log(sigma2) + d * np.log(s2) + 2 * np.sum(np.log(np.diag(chol[0])))
        quad = (y @ y - (X.T @ y / sigma2) @ mean * sigma2) / sigma2
        log_ev = -0.5 * (n * np.log(2 * np.pi) + logdet + quad)
        return GaussianPosterior(mean, cov, float(log_ev))
    a0, b0 = _checks.positive_pair(noise_prior, "noise_prior")
    lam0 = np.eye(d) / s2
    lam_n = lam0 + X.T @ X
    chol = linalg.cho_factor(lam_n, lower=True)
    scale_matrix = linalg.cho_solve(chol, np.eye(d))
    mean = linalg.cho_solve(chol, X.T @ y)
    a_n = a0 + n / 2.0
    b_n = b0 + 0.5 * (y @ y - mean @ lam_n @ mean)
    logdet_n = 2 * np.sum(np.log(np.diag(chol[0])))
    log_ev = (
        -0.5 * n * np.log(2 * np.pi)
        + 0.5 * (-d * np.log(s2) - logdet_n)
        + a0 * np.log(b0) - a_n * np.log(b_n)
        + special.gammaln(a_n) - special.gammaln(a0)
    )
    cov = scale_matrix * b_n / (a_n - 1.0) if a_n > 1 else np.full((d, d), np.inf)
    return NormalGammaPosterior(mean, cov, scale_matrix, float(a_n), float(b_n), float(log_ev))


def gp_regression_posterior(X, y, *, kernel=None, noise=1.0):
    """Exact posterior of ``f`` at the rows of ``X`` and the log evidence for
    `probmodels.gp_regression` with fixed hyperparameters: with ``K`` the model's prior covariance
    (the kernel matrix plus the same jitter, `probmodels.kernels.gram`) and ``C = K + noise^2 I``,
    ``f | y ~ N(K C^-1 y, K - K C^-1 K)`` and ``log p(y) = log N(y; 0, C)``.

    >>> import numpy as np
    >>> from probmodels.kernels import RBF
    >>> X = np.linspace(0, 1, 4)[:, None]
    >>> post = gp_regression_posterior(X, np.zeros(4), kernel=RBF(0.5), noise=0.1)
    >>> np.allclose(post.mean, 0.0), post.cov.shape
    (True, (4, 4))
    """
    from probmodels.kernels import RBF, Kernel, gram, hyperpriors

    X = _checks.matrix(X, "X", allow_1d=True)
    y = _checks.vector(y, X.shape[0], "y")
    if y is None:
        raise ValueError("y is required for the posterior")
    kernel = RBF() if kernel is None else kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a probmodels.kernels.Kernel, got {type(kernel).__name__}")
    if hyperpriors(kernel) or hasattr(noise, "log_prob"):
        raise ValueError("kernel/noise: the closed form needs fixed hyperparameters, not priors")
    noise = np.asarray(noise, dtype=float)
    if noise.ndim > 1 or not np.all(np.isfinite(noise)) or not np.all(noise > 0):
        raise ValueError(f"noise must be positive and finite, got {noise!r}")
    K = np.asarray(gram(kernel, X)[0], dtype=float)
    C = K + np.diag(np.broadcast_to(noise**2, y.shape))
    chol = linalg.cho_factor(C, lower=True)
    alpha = linalg.cho_solve(chol, y)
    KCinv = linalg.cho_solve(chol, K).T  # K C^-1 (K and C symmetric)
    cov = K - KCinv @ K
    log_ev = -0.5 * (y @ alpha + 2 * np.sum(np.log(np.diag(chol[0]))) + len(y) * np.log(2 * np.pi))
    return GaussianPosterior(K @ alpha, 0.5 * (cov + cov.T), float(log_ev))


def beta_bernoulli_log_evidence(successes: int, trials: int, a: float = 1.0, b: float = 1.0) -> float:
    """``log p(y)`` of a particular sequence of Bernoulli trials under ``theta ~ Beta(a, b)``."""
    a = _checks.positive(a, "a")
    b = _checks.positive(b, "b")
    if not (0 <= successes <= trials):
        raise ValueError(f"successes must lie in [0, trials], got {successes} of {trials}")
    return float(special.betaln(a + successes, b + trials - successes) - special.betaln(a, b))
