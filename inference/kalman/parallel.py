"""Parallel-in-time (associative-scan) Kalman filter and RTS smoother: O(log T) depth.

Särkkä and García-Fernández (2021), "Temporal parallelization of Bayesian smoothers", IEEE TAC
66(1). Filtering: each step is an element (A, b, C, eta, J) that stands for
``p(x_t | y_t, x_{t-1}) = N(A x_{t-1} + b, C)`` and the information form of ``p(y_t | x_{t-1})``
(eta, J); their combination is associative, so ``lax.associative_scan`` gives every filtered
(mean, covariance) = (b, C) of the prefixes. Smoothing: each step is an affine Gaussian
``p(x_t | x_{t+1}, y_{0:t}) = N(E x_{t+1} + g, L)`` and a reversed scan composes them. The log
likelihood is summed afterwards from the one-step predictions of the filtered moments (all steps
at once). Same numerics as :mod:`inference.kalman.sequential` where they carry over (Cholesky
solves, Joseph forms, symmetrised covariances); the combination solves one general (N, N) system
with ``I + C J``, as in the paper.

The two passes have the signatures and outputs of ``filter_pass`` / ``smooth_pass`` there; the
public functions pick them with ``parallel=True``. On one CPU core the sequential passes are
cheaper (O(T) work against about 2.5x that here); the parallel ones pay on accelerators.

Example:
    >>> import numpy as np
    >>> from inference import kalman
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(50, 2))
    >>> a = kalman.smoother(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y)
    >>> b = kalman.smoother(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y, parallel=True)
    >>> bool(np.allclose(a.means, b.means)), bool(np.isclose(a.log_likelihood, b.log_likelihood))
    (True, True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import lu_factor, lu_solve, solve_triangular

from inference.kalman.sequential import condition, masked_observation, predict, smoother_gain, sym


def _t(a):
    return jnp.swapaxes(a, -1, -2)


def _mv(a, v):
    return (a @ v[..., None])[..., 0]


GAUSS_JORDAN_MAX = 8  # N up to this: Gauss-Jordan elimination; above: LAPACK's LU (measured)


def solve(m, b):
    """Solve m x = b for batched (…, N, N) ``m`` and (…, N, K) ``b``.

    For N <= ``GAUSS_JORDAN_MAX``, Gauss-Jordan elimination with partial pivoting in a
    ``fori_loop`` over the N columns: it compiles in a third of the time of an LU factorisation
    and its two triangular solves, which matters because the associative scan inlines the
    combination 2 log2(T) times, and it runs faster for small N (N = 2: 2x); for larger N
    LAPACK's LU (3x faster at N = 20, measured on CPU). The matrices solved here, I + C J with
    C and J positive semi-definite, have every eigenvalue >= 1."""
    n = m.shape[-1]
    if n > GAUSS_JORDAN_MAX:
        return lu_solve(lu_factor(m), b)
    rows = jnp.arange(n)

    def eliminate(k, aug):
        col = jnp.abs(aug[..., :, k])
        p = jnp.argmax(jnp.where(rows >= k, col, -1.0), axis=-1)  # pivot row at or below k
        order = jnp.where(rows == k, p[..., None], jnp.where(rows == p[..., None], k, rows))
        aug = jnp.take_along_axis(aug, order[..., :, None], axis=-2)  # swap rows k and p
        pivot = aug[..., k, :] / aug[..., k, k][..., None]
        factor = jnp.where(rows == k, 0.0, aug[..., :, k])
        aug = aug - factor[..., :, None] * pivot[..., None, :]
        return jnp.where((rows == k)[:, None], pivot[..., None, :], aug)

    return lax.fori_loop(0, n, eliminate, jnp.concatenate([m, b], axis=-1))[..., n:]


# ----------------------------------------------------------------------------- filter
def _filter_element(F, Q, H, R, y, masked: bool):
    """(A, b, C, eta, J) of a step t >= 1: x_{t-1} -> x_t conditioned on y_t alone."""
    if masked:
        H, R, y, _ = masked_observation(H, R, y)
    HQ = H @ Q
    chol = jnp.linalg.cholesky(sym(HQ @ H.T + R))
    gain = solve_triangular(chol, solve_triangular(chol, HQ, lower=True), lower=True, trans=1).T  # Q H' S^-1
    a = jnp.eye(Q.shape[-1], dtype=Q.dtype) - gain @ H
    v = solve_triangular(chol, H @ F, lower=True)  # L^-1 H F
    return (a @ F, gain @ y, sym(a @ Q @ a.T + gain @ R @ gain.T),
            v.T @ solve_triangular(chol, y, lower=True), v.T @ v)


def _filter_combine(earlier, later):
    """Särkkä and García-Fernández (2021), eq. (14-18); batched over leading axes."""
    a1, b1, c1, eta1, j1 = earlier
    a2, b2, c2, eta2, j2 = later
    eye = jnp.eye(a1.shape[-1], dtype=a1.dtype)
    inv = solve(eye + c1 @ j2, jnp.broadcast_to(eye, c1.shape))  # M^-1, M = I + C1 J2
    x = a2 @ inv  # A2 (I + C1 J2)^-1
    y = _t(inv @ a1)  # A1' (I + J2 C1)^-1
    return (x @ a1, _mv(x, b1 + _mv(c1, eta2)) + b2, sym(x @ c1 @ _t(a2) + c2),
            _mv(y, eta2 - _mv(j2, b1)) + eta1, sym(y @ j2 @ a1 + j1))


def filter_pass(params, obs, masked: bool):
    """Parallel forward pass: (log p(y_t | y_<t) (T,), filtered means (T, N), covariances)."""
    init_mean, init_cov, F, Q, H, R = params
    n = init_mean.shape[-1]
    m0, p0, _ = condition(init_mean, init_cov, H, R, obs[0], masked)
    zeros = jnp.zeros((1, n, n), F.dtype)
    first = (zeros, m0[None], p0[None], jnp.zeros((1, n), F.dtype), zeros)
    rest = jax.vmap(lambda y: _filter_element(F, Q, H, R, y, masked))(obs[1:])
    elems = tuple(jnp.concatenate([f, r]) for f, r in zip(first, rest))
    _, means, covs, _, _ = lax.associative_scan(_filter_combine, elems)
    # one-step predictions from the filtered moments give every step's log density at once
    pred_means, pred_covs = jax.vmap(lambda m, p: predict(m, p, F, Q))(means[:-1], covs[:-1])
    pred_means = jnp.concatenate([init_mean[None], pred_means])
    pred_covs = jnp.concatenate([init_cov[None], pred_covs])
    lls = jax.vmap(lambda m, p, y: condition(m, p, H, R, y, masked)[2])(pred_means, pred_covs, obs)
    return lls, means, covs


# ----------------------------------------------------------------------------- smoother
def smoother_elements(params, filtered_means, filtered_covs):
    """(E, g, L) per step: p(x_t | x_{t+1}, y_{0:t}) = N(E x_{t+1} + g, L); at the last step
    E = 0 and (g, L) is the filtered moment. Also what forward-filter backward-sample draws from."""
    _, _, F, Q, _, _ = params
    eye = jnp.eye(F.shape[-1], dtype=F.dtype)

    def one(m, p):
        gain = smoother_gain(p, F, Q)
        a = eye - gain @ F
        return gain, m - gain @ (F @ m), sym(a @ p @ a.T + gain @ Q @ gain.T)

    gains, g, L = jax.vmap(one)(filtered_means[:-1], filtered_covs[:-1])
    return (jnp.concatenate([gains, jnp.zeros_like(eye)[None]]), jnp.concatenate([g, filtered_means[-1:]]),
            jnp.concatenate([L, filtered_covs[-1:]]))


def affine_combine(later, earlier):
    """Compose x_t = E_i x_{t+1} + g_i after x_{t+1} = E_j x_{t+2} + g_j, batched over leading
    axes; ``g`` is (…, N, S) (S columns: means or sample paths). With a third member L the
    covariances compose too: E_i L_j E_i' + L_i."""
    e_i, g_i = earlier[:2]
    e_j, g_j = later[:2]
    out = (e_i @ e_j, e_i @ g_j + g_i)
    if len(earlier) == 3:
        out = out + (sym(e_i @ later[2] @ _t(e_i)) + earlier[2],)
    return out


def smooth_pass(params, filtered_means, filtered_covs):
    """Parallel backward pass: (smoothed means (T, N), covariances (T, N, N), gains (T-1, N, N))."""
    gains, g, L = smoother_elements(params, filtered_means, filtered_covs)
    _, means, covs = lax.associative_scan(affine_combine, (gains, g[..., None], L), reverse=True)
    return means[..., 0], covs, gains[:-1]
