"""Sequential (``lax.scan``) Kalman filter and Rauch-Tung-Striebel smoother for one sequence.

Model: ``x_0 ~ N(init_mean, init_cov)``, ``x_t = F x_{t-1} + N(0, Q)``, ``y_t = H x_t + N(0, R)``
(time index from 0 in the code). Numerics chosen so that float32 works:

- the innovation covariance ``S = H P H' + R`` is solved against ``[H P, y - H m]`` once, giving
  the gain, the innovation's quadratic form and log det S together (:mod:`inference.kalman.linalg`:
  Gauss-Jordan for small sizes, Cholesky above; no explicit inverse);
- in float32 filtered covariances use the Joseph form ``(I - K H) P (I - K H)' + K R K'`` and
  smoothed ones its smoother analogue ``(I - G F) P (I - G F)' + G (Q + P_s) G'``: sums of
  positive semi-definite terms, so rounding cannot make them indefinite (the short forms
  ``P - K H P`` and ``P_f + G (P_s - P_p) G'`` subtract and can); float64 uses the short forms
  (:func:`inference.kalman.linalg.joseph`); every covariance is symmetrised;
- the smoother gain solves with the predicted covariance plus a jitter of ``10 N eps`` times its
  largest diagonal entry (:func:`inference.kalman.linalg.add_jitter`), which keeps a singular
  prediction (singular ``Q`` and ``F``) finite and changes nothing measurable otherwise.

Missing entries: a NaN in ``y_t`` removes that entry from the update (``masked=True``): its row
of ``H`` is zeroed, its row and column of ``R`` replaced by the identity's and the value by 0,
so it contributes exactly ``-log(2 pi) / 2`` to the step's log density, which is added back.
A whole NaN row is a pure prediction step. Padding a batch is NaN rows at the end.

Example:
    >>> import numpy as np
    >>> from inference.kalman.sequential import filter_pass
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> lls, means, covs = filter_pass((np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye), y, False)
    >>> means.shape, covs.shape, lls.shape
    ((4, 2), (4, 2, 2), (4,))
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.kalman.linalg import SMALL_SOLVE, add_jitter, joseph, solve_psd, sym  # noqa: F401 - sym re-exported

UNROLL = 1  # lax.scan unroll factor
LOG_2PI = float(np.log(2.0 * np.pi))


def masked_observation(H, R, y):
    """(H, R, y, number missing) with every NaN entry of ``y`` taken out of the update."""
    seen = ~jnp.isnan(y)
    both = seen[:, None] & seen[None, :]
    eye = jnp.eye(R.shape[-1], dtype=R.dtype)
    return (jnp.where(seen[:, None], H, 0.0), jnp.where(both, R, eye), jnp.where(seen, y, 0.0),
            jnp.sum(~seen).astype(R.dtype))


def condition(mean, cov, H, R, y, masked: bool, small: int = SMALL_SOLVE):
    """Condition N(mean, cov) on one observation y = H x + N(0, R).

    Returns (filtered mean, filtered covariance (Joseph form in float32), log p(y)). ``small``:
    the size up to which the solve is Gauss-Jordan (:func:`inference.kalman.linalg.solve_psd`)."""
    missing = 0.0
    if masked:
        H, R, y, missing = masked_observation(H, R, y)
    HP = H @ cov
    resid = y - H @ mean
    sol, logdet = solve_psd(sym(HP @ H.T + R), jnp.concatenate([HP, resid[:, None]], axis=1), small)  # S^-1 [HP, r]
    gain = sol[:, :-1].T  # P H' S^-1
    if joseph(cov.dtype):
        a = jnp.eye(cov.shape[-1], dtype=cov.dtype) - gain @ H
        new_cov = sym(a @ cov @ a.T + gain @ R @ gain.T)
    else:
        new_cov = sym(cov - gain @ HP)
    return mean + gain @ resid, new_cov, _gaussian_log_density(resid, sol[:, -1], logdet, y.shape[-1] - missing)


def _gaussian_log_density(resid, s_inv_resid, logdet, dim):
    """log N(resid; 0, S) from S^-1 resid, log det S and the number of observed entries."""
    return -0.5 * (resid @ s_inv_resid + logdet + dim * LOG_2PI)


def log_density(mean, cov, H, R, y, masked: bool, small: int = SMALL_SOLVE):
    """log p(y) for y = H x + N(0, R), x ~ N(mean, cov): `condition`'s third output alone, from
    one solve against the residual (`condition` solves against ``[H P, r]`` for its gain too)."""
    missing = 0.0
    if masked:
        H, R, y, missing = masked_observation(H, R, y)
    resid = y - H @ mean
    sol, logdet = solve_psd(sym(H @ cov @ H.T + R), resid[:, None], small)
    return _gaussian_log_density(resid, sol[:, 0], logdet, y.shape[-1] - missing)


def predict(mean, cov, F, Q):
    """One step ahead: (F m, F P F' + Q)."""
    return F @ mean, sym(F @ cov @ F.T + Q)


def smoother_gain(filtered_cov, F, Q, small: int = SMALL_SOLVE):
    """(RTS gain G = P_f F' P_p^-1, predicted covariance P_p = F P_f F' + Q). P_p is positive
    definite (up to the jitter when it is singular): a Cholesky solve above the small sizes."""
    fp = F @ filtered_cov
    pred = sym(fp @ F.T + Q)
    return solve_psd(add_jitter(pred), fp, small)[0].T, pred


def smooth_step(filtered_mean, filtered_cov, next_mean, next_cov, F, Q):
    """One backward RTS step: (smoothed mean, smoothed covariance, gain) at t from t + 1."""
    gain, pred = smoother_gain(filtered_cov, F, Q)
    mean = filtered_mean + gain @ (next_mean - F @ filtered_mean)
    if joseph(F.dtype):
        a = jnp.eye(F.shape[-1], dtype=F.dtype) - gain @ F
        cov = sym(a @ filtered_cov @ a.T + gain @ (Q + next_cov) @ gain.T)
    else:
        cov = sym(filtered_cov + gain @ (next_cov - pred) @ gain.T)
    return mean, cov, gain


def filter_pass(params, obs, masked: bool):
    """Forward pass of one sequence ``obs`` (T, D): (log p(y_t | y_<t) (T,), filtered means
    (T, N), filtered covariances (T, N, N))."""
    init_mean, init_cov, F, Q, H, R = params

    def step(carry, y):
        mean, cov, ll = condition(*carry, H, R, y, masked)
        return predict(mean, cov, F, Q), (ll, mean, cov)

    _, (lls, means, covs) = lax.scan(step, (init_mean, init_cov), obs, unroll=UNROLL)
    return lls, means, covs


def smooth_pass(params, filtered_means, filtered_covs):
    """Backward RTS pass from the filter's output: (smoothed means (T, N), smoothed covariances
    (T, N, N), gains (T-1, N, N)), gain t linking steps t and t + 1."""
    _, _, F, Q, _, _ = params

    def step(carry, inputs):
        mean, cov, gain = smooth_step(*inputs, *carry, F, Q)
        return (mean, cov), (mean, cov, gain)

    last = (filtered_means[-1], filtered_covs[-1])
    _, (means, covs, gains) = lax.scan(step, last, (filtered_means[:-1], filtered_covs[:-1]), reverse=True,
                                       unroll=UNROLL)
    return (jnp.concatenate([means, last[0][None]]), jnp.concatenate([covs, last[1][None]]), gains)
