"""Log likelihood of an LDS with diagonal observation noise, by sequential processing of the
entries of each observation (the univariate filter; Durbin and Koopman 2012, section 6.4).

With ``R = diag(r)`` the D entries of ``y_t`` are conditionally independent given ``x_t``, so the
update by ``y_t`` is D scalar updates: innovation variance ``s = h P h' + r_i`` (a number: no
Cholesky factor, no triangular solve), gain ``P h' / s``, covariance ``P - P h' h P / s``. The
log likelihood is the same as :func:`inference.kalman.log_likelihood`'s with ``R = diag(r)``
(tested to 1e-8), but its gradient compiles about 3x faster and runs about 4x faster (T = 150,
N = 2, D = 3, measured): this is what the Bayesian LDS (``probmodels.lds``) differentiates under
NUTS, VI and Laplace. A NaN entry is skipped (missing). The covariance after each update is
symmetrised; the prediction adds ``Q``, which keeps it positive definite when ``Q`` is.

Example:
    >>> import numpy as np
    >>> from inference import kalman
    >>> from inference.kalman.univariate import log_likelihood_diagonal
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> a = log_likelihood_diagonal((np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye), np.array([0.5, 0.2]), y)
    >>> b = kalman.log_likelihood(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, np.diag([0.5, 0.2]), y)
    >>> bool(np.isclose(a, b))
    True
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from inference.kalman.sequential import LOG_2PI, sym


def _update(carry, entry):
    """Condition (mean, cov) on one scalar observation y = h x + N(0, r); NaN: no update."""
    mean, cov, ll = carry
    h, r, y = entry
    seen = ~jnp.isnan(y)
    ph = cov @ h
    s = h @ ph + r
    e = jnp.where(seen, y, 0.0) - h @ mean
    mean = jnp.where(seen, mean + ph * (e / s), mean)
    cov = jnp.where(seen, cov - jnp.outer(ph, ph) / s, cov)
    ll = ll + jnp.where(seen, -0.5 * (LOG_2PI + jnp.log(s) + e * e / s), 0.0)
    return (mean, cov, ll), None


def log_likelihood_diagonal(params, r, obs):
    """log p(y_{0:T-1}) for one sequence ``obs`` (T, D) with ``params`` = (init_mean, init_cov, F,
    Q, H) and observation variances ``r`` (D,). Jittable and differentiable; no input checks."""
    init_mean, init_cov, F, Q, H = params

    def step(carry, y):
        mean, cov = carry
        (mean, cov, ll), _ = lax.scan(_update, (mean, sym(cov), jnp.zeros((), mean.dtype)), (H, r, y))
        return (F @ mean, sym(F @ cov @ F.T + Q)), ll

    _, lls = lax.scan(step, (init_mean, init_cov), obs)
    return jnp.sum(lls)
