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
with ``I + C J`` (every eigenvalue >= 1 for C, J positive semi-definite), as in the paper. Unlike
there, wide right-hand sides go through the system's inverse and a product (`_psd_solve_many`):
batched solves cost far more than products on CPU.

The two passes have the signatures and outputs of ``filter_pass`` / ``smooth_pass`` there; the
public functions pick them with ``parallel=True``. On one CPU core the sequential passes are
cheaper (O(T) work against about 2.5x that here); the parallel ones pay on accelerators.

Example:
    >>> import numpy as np
    >>> from inference import kalman
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> a = kalman.smoother(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y)
    >>> b = kalman.smoother(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y, parallel=True)
    >>> bool(np.allclose(a.means, b.means)), bool(np.isclose(a.log_likelihood, b.log_likelihood))
    (True, True)
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from inference.kalman.linalg import joseph, mm, small_batched, solve, solve_psd, sym
from inference.kalman.sequential import condition, log_density, masked_observation, predict, smoother_gain


def _t(a):
    return jnp.swapaxes(a, -1, -2)


# ----------------------------------------------------------------------------- filter
def _filter_element(F, Q, H, R, y, masked: bool, small: int):
    """(A, b, C, eta, J) of a step t >= 1: x_{t-1} -> x_t conditioned on y_t alone (vmapped over
    the steps: batched solves, hence ``small``: `inference.kalman.linalg.small_batched`)."""
    if masked:
        H, R, y, _ = masked_observation(H, R, y)
    HQ = H @ Q
    HF = H @ F
    rhs = jnp.concatenate([HQ, HF, y[:, None]], axis=1)
    sol = _psd_solve_many(sym(HQ @ H.T + R), rhs, small)
    n = Q.shape[-1]
    gain = sol[:, :n].T  # Q H' S^-1
    a = jnp.eye(n, dtype=Q.dtype) - gain @ H
    cov = sym(a @ Q @ a.T + gain @ R @ gain.T) if joseph(Q.dtype) else sym(Q - gain @ HQ)
    return a @ F, gain @ y, cov, HF.T @ sol[:, -1], sym(HF.T @ sol[:, n:-1])


def _psd_solve_many(s, rhs, small: int):
    """``s^-1 rhs`` for symmetric positive definite ``s`` (…, D, D): through ``s^-1`` (a solve
    against the identity, then a product) when ``rhs`` has more than D columns. Batched solves
    cost far more than products of the same size on CPU (jax 0.12, 500 systems of size 20: a
    LAPACK triangular solve 1.85 ms, a product 0.21 ms; Gauss-Jordan's work grows with the
    columns too), so solving fewer columns pays: T = 1000, the parallel smoother 77 -> 49 ms at
    N = D = 20, 22 -> 17 ms at 10, the same at 2-5 (benchmarks/RESULTS.md)."""
    d = s.shape[-1]
    if rhs.shape[-1] <= d:
        return solve_psd(s, rhs, small)[0]
    return mm(solve_psd(s, jnp.eye(d, dtype=s.dtype), small)[0], rhs)


def _filter_combine(earlier, later):
    """Särkkä and García-Fernández (2021), eqs. (14-18), batched over leading axes. One solve
    with M = I + C1 J2 gives M^-1 (every eigenvalue of M is >= 1), then M^-1 A1 as a product
    (fewer columns solved: `_psd_solve_many`); products that share a factor are concatenated."""
    a1, b1, c1, eta1, j1 = earlier
    a2, b2, c2, eta2, j2 = later
    n = a1.shape[-1]
    eye = jnp.eye(n, dtype=a1.dtype)
    u = mm(c1, jnp.concatenate([j2, eta2[..., None]], -1))  # [C1 J2, C1 eta2]
    small = small_batched(math.prod(a1.shape[:-2]))  # this level's number of systems
    inv = solve(eye + u[..., :n], jnp.broadcast_to(eye, a1.shape), small)  # M^-1
    inv_a1 = mm(inv, a1)
    x = mm(a2, inv)  # A2 (I + C1 J2)^-1
    w = mm(x, jnp.concatenate([a1, (b1 + u[..., n])[..., None], c1], -1))
    v = mm(j2, jnp.concatenate([b1[..., None], a1], -1))  # [J2 b1, J2 A1]
    z = mm(_t(inv_a1), jnp.concatenate([(eta2 - v[..., 0])[..., None], v[..., 1:]], -1))  # A1' (I + J2 C1)^-1 [..]
    return (w[..., :n], w[..., n] + b2, sym(mm(w[..., n + 1:], _t(a2))) + c2, z[..., 0] + eta1,
            sym(z[..., 1:]) + j1)


def filter_pass(params, obs, masked: bool):
    """Parallel forward pass: (log p(y_t | y_<t) (T,), filtered means (T, N), covariances)."""
    init_mean, init_cov, F, Q, H, R = params
    n = init_mean.shape[-1]
    m0, p0, _ = condition(init_mean, init_cov, H, R, obs[0], masked)
    zeros = jnp.zeros((1, n, n), F.dtype)
    first = (zeros, m0[None], p0[None], jnp.zeros((1, n), F.dtype), zeros)
    small = small_batched(obs.shape[0])
    rest = jax.vmap(lambda y: _filter_element(F, Q, H, R, y, masked, small))(obs[1:])
    elems = tuple(jnp.concatenate([f, r]) for f, r in zip(first, rest))
    _, means, covs, _, _ = lax.associative_scan(_filter_combine, elems)
    # one-step predictions from the filtered moments give every step's log density at once
    pred_means, pred_covs = jax.vmap(lambda m, p: predict(m, p, F, Q))(means[:-1], covs[:-1])
    pred_means = jnp.concatenate([init_mean[None], pred_means])
    pred_covs = jnp.concatenate([init_cov[None], pred_covs])
    lls = jax.vmap(lambda m, p, y: log_density(m, p, H, R, y, masked, small))(pred_means, pred_covs, obs)
    return lls, means, covs


# ----------------------------------------------------------------------------- smoother
def smoother_elements(params, filtered_means, filtered_covs):
    """(E, g, L) per step: p(x_t | x_{t+1}, y_{0:t}) = N(E x_{t+1} + g, L); at the last step
    E = 0 and (g, L) is the filtered moment. Also what forward-filter backward-sample draws from."""
    _, _, F, Q, _, _ = params
    eye = jnp.eye(F.shape[-1], dtype=F.dtype)
    small = small_batched(filtered_means.shape[0])

    def one(m, p):
        gain, pred = smoother_gain(p, F, Q, small)
        if joseph(F.dtype):
            a = eye - gain @ F
            cov = sym(a @ p @ a.T + gain @ Q @ gain.T)
        else:
            cov = sym(p - gain @ pred @ gain.T)
        return gain, m - gain @ (F @ m), cov

    gains, g, L = jax.vmap(one)(filtered_means[:-1], filtered_covs[:-1])
    return (jnp.concatenate([gains, jnp.zeros_like(eye)[None]]), jnp.concatenate([g, filtered_means[-1:]]),
            jnp.concatenate([L, filtered_covs[-1:]]))


def affine_combine(later, earlier):
    """Compose x_t = E_i x_{t+1} + g_i after x_{t+1} = E_j x_{t+2} + g_j, batched over leading
    axes; ``g`` is (…, N, S) (S columns: means or sample paths). With a third member L the
    covariances compose too: E_i L_j E_i' + L_i."""
    e_i, g_i = earlier[:2]
    e_j, g_j = later[:2]
    out = (mm(e_i, e_j), mm(e_i, g_j) + g_i)
    if len(earlier) == 3:
        out = out + (sym(mm(mm(e_i, later[2]), _t(e_i))) + earlier[2],)
    return out


def smooth_pass(params, filtered_means, filtered_covs):
    """Parallel backward pass: (smoothed means (T, N), covariances (T, N, N), gains (T-1, N, N))."""
    gains, g, L = smoother_elements(params, filtered_means, filtered_covs)
    _, means, covs = lax.associative_scan(affine_combine, (gains, g[..., None], L), reverse=True)
    return means[..., 0], covs, gains[:-1]
