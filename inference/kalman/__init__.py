"""Message passing for linear dynamical systems (all in JAX, all jittable).

``x_0 ~ N(init_mean, init_cov)``, ``x_t = F x_{t-1} + N(0, Q)``, ``y_t = H x_t + N(0, R)``: the
model is six arrays, ``obs`` is (T, D) (or a batch (B, T, D); NaN entries are missing). Sequential
``lax.scan`` passes by default, associative-scan passes (Särkkä and García-Fernández 2021) with
``parallel=True``, same signature and result type. EM (Bishop 2006, 13.3.2) fits the six arrays.

    >>> import jax, numpy as np
    >>> from inference import kalman
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> ll, means, covs = kalman.smoother(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y)
    >>> kalman.sample_states(jax.random.PRNGKey(0), np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y, 5).shape
    (5, 4, 2)
"""

from inference.kalman.driver import Filtered, Smoothed, filter, log_likelihood, smoother  # noqa: A004
from inference.kalman.em import EM, em
from inference.kalman.sampling import sample_states

__all__ = ["EM", "Filtered", "Smoothed", "em", "filter", "log_likelihood", "sample_states", "smoother"]
