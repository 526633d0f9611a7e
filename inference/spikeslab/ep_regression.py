"""EP for linear regression with a spike-and-slab prior (Hernandez-Lobato, Hernandez-Lobato &
Suarez 2015, Machine Learning 99:437-487).

The Gaussian likelihood is kept exactly; each prior factor ``p_j N(w_j|0, v_j) + (1-p_j) delta(w_j)``
is replaced by a Gaussian site ``exp(-tau_j w_j^2/2 + nu_j w_j)``, so the approximation is
``Q(w) = N(m, V)`` with ``V = (diag(tau) + beta X^T X)^-1`` (full covariance) and the inclusion
probabilities are those of the tilted distributions. ``V`` is never formed when d > n: its diagonal
and the mean come from the n x n Woodbury form (O(n^2 d) per parallel sweep, memory O(n d)).

Sites whose new precision would be negative (the tilted mixture is wider than the cavity) are
clipped to a tiny positive precision (mean still matched) and counted; sites with a non-positive
cavity precision are skipped and counted. Damping and tolerance are traced: no recompiles.

Unknown noise precision (Normal-Gamma prior) is handled by EP on a grid of precisions weighted by
EP evidence times the Gamma prior (trapezoid rule in log tau): see ``engine_ep``.

Example:
    >>> import numpy as np, jax.numpy as jnp
    >>> X = np.random.default_rng(0).normal(size=(30, 4)); y = 2 * X[:, 0]
    >>> data = make_data(X, y, beta=1.0, slab_var=np.ones(4), p_incl=np.full(4, 0.2))
    >>> state = run(data, jnp.asarray(0.5), jnp.asarray(1e-8), jnp.asarray(200))
    >>> [round(float(p), 2) for p in state.incl]
    [1.0, 0.05, 0.05, 0.04]
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.spikeslab.sites import log_partition, spike_slab_tilted

TAU_MIN = 1e-6  # smallest site precision, in units of the slab precision
TAU_MAX = 1e10  # largest site precision, in units of the slab precision
MAX_SEQUENTIAL_FEATURES = 4000


class EPData(NamedTuple):
    X: jax.Array  # (n, d), unit noise scale
    y: jax.Array  # (n,)
    beta: jax.Array  # noise precision
    slab_var: jax.Array  # (d,)
    logit_p: jax.Array  # (d,)


class EPState(NamedTuple):
    tau: jax.Array  # (d,) site precisions
    nu: jax.Array  # (d,) site precision-times-mean
    m: jax.Array  # (d,) mean of Q
    v: jax.Array  # (d,) diagonal of V
    incl: jax.Array  # (d,) inclusion probabilities
    iteration: jax.Array
    max_change: jax.Array  # largest change of (incl, m / sqrt(v), log v) in the last sweep
    num_clipped: jax.Array  # sites clipped to a positive precision in the last sweep
    num_skipped: jax.Array  # sites skipped (cavity precision <= 0) in the last sweep


def make_data(X, y, *, beta, slab_var, p_incl) -> EPData:
    d = np.shape(X)[1]
    p = np.broadcast_to(np.asarray(p_incl, float), (d,))
    return EPData(jnp.asarray(X, float), jnp.asarray(y, float), jnp.asarray(beta, float),
                  jnp.broadcast_to(jnp.asarray(slab_var, float), (d,)), jnp.asarray(np.log(p) - np.log1p(-p)))


def _global(data: EPData, tau, nu):
    """Mean and diagonal covariance of Q; also ``log|P|`` with ``P = diag(tau) + beta X^T X``."""
    X, beta = data.X, data.beta
    n, d = X.shape
    if d <= n:
        P = jnp.diag(tau) + beta * (X.T @ X)
        L = jnp.linalg.cholesky(P)
        Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(d), lower=True)
        m = Linv.T @ (Linv @ (nu + beta * (X.T @ data.y)))
        return m, jnp.sum(Linv**2, axis=0), 2 * jnp.sum(jnp.log(jnp.diag(L)))
    A, Linv, logdet_b = _woodbury(X, beta, tau)
    v = 1.0 / tau - jnp.sum(A**2, axis=0)
    mu0 = nu / tau
    m = mu0 + A.T @ (Linv @ (data.y - X @ mu0))
    return m, v, jnp.sum(jnp.log(tau)) + n * jnp.log(beta) + logdet_b


def _woodbury(X, beta, tau):
    """``A = L^-1 X Lam^-1`` with ``L L^T = B = I / beta + X Lam^-1 X^T`` (so ``V = Lam^-1 - A^T A``),
    ``L^-1`` and ``log|B|``: n x n factorisations only, the O(n^2 d) work in two matrix products."""
    n = X.shape[0]
    XL = X / tau
    L = jnp.linalg.cholesky(jnp.eye(n) / beta + XL @ X.T)
    Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(n), lower=True)
    return Linv @ XL, Linv, 2 * jnp.sum(jnp.log(jnp.diag(L)))


def _site_targets(tau_c, nu_c, slab_var, logit_p):
    """New site parameters from the tilted moments, with clipping of negative precisions."""
    t = spike_slab_tilted(tau_c, nu_c, slab_var, logit_p)
    lo, hi = TAU_MIN / slab_var, TAU_MAX / slab_var
    tau_new = 1.0 / jnp.maximum(t.var, 1e-300) - tau_c
    clipped = tau_new < lo
    tau_new = jnp.clip(tau_new, lo, hi)
    nu_new = t.mean * (tau_c + tau_new) - nu_c  # matches the tilted mean even when clipped
    return tau_new, nu_new, t, clipped


def init(data: EPData) -> EPState:
    """Sites start at the Gaussian with the prior's variance ``p v_s``."""
    p = jax.nn.sigmoid(data.logit_p)
    tau = 1.0 / (p * data.slab_var)
    nu = jnp.zeros_like(tau)
    m, v, _ = _global(data, tau, nu)
    z = jnp.asarray(0, jnp.int32)
    return EPState(tau, nu, m, v, p, z, jnp.asarray(jnp.inf, tau.dtype), z, z)


def _change(old: EPState, m, v, incl):
    return jnp.max(jnp.maximum(jnp.maximum(jnp.abs(incl - old.incl), jnp.abs(m - old.m) / jnp.sqrt(v)),
                               jnp.abs(jnp.log(v / old.v))))


def update(state: EPState, data: EPData, damping) -> EPState:
    """One parallel (all sites at once, damped) sweep."""
    tau_c = 1.0 / state.v - state.tau
    nu_c = state.m / state.v - state.nu
    ok = tau_c > 0
    tau_new, nu_new, t, clipped = _site_targets(jnp.where(ok, tau_c, 1.0), nu_c, data.slab_var, data.logit_p)
    tau = jnp.where(ok, damping * tau_new + (1 - damping) * state.tau, state.tau)
    nu = jnp.where(ok, damping * nu_new + (1 - damping) * state.nu, state.nu)
    m, v, _ = _global(data, tau, nu)
    incl = jnp.where(ok, t.incl, state.incl)
    return EPState(tau, nu, m, v, incl, state.iteration + 1, _change(state, m, v, incl),
                   jnp.sum(clipped & ok).astype(jnp.int32), jnp.sum(~ok).astype(jnp.int32))


def update_sequential(state: EPState, data: EPData, damping) -> EPState:
    """One sequential sweep: sites one at a time, ``V`` kept exactly by rank-one updates.

    Stores the d x d covariance (O(d^2) memory, O(d^3) per sweep)."""
    X, beta = data.X, data.beta
    d = X.shape[1]
    P = jnp.diag(state.tau) + beta * (X.T @ X)
    V = jnp.linalg.inv(P)
    V = 0.5 * (V + V.T)
    m = V @ (state.nu + beta * (X.T @ data.y))

    def body(carry, j):
        tau, nu, V, m, incl, nclip, nskip = carry
        vj, mj = V[j, j], m[j]
        tau_c, nu_c = 1.0 / vj - tau[j], mj / vj - nu[j]
        ok = tau_c > 0
        tn, nn, t, clipped = _site_targets(jnp.where(ok, tau_c, 1.0), nu_c, data.slab_var[j], data.logit_p[j])
        d_tau = jnp.where(ok, damping * (tn - tau[j]), 0.0)
        d_nu = jnp.where(ok, damping * (nn - nu[j]), 0.0)
        col = V[:, j]
        den = 1.0 + d_tau * vj
        V = V - (d_tau / den) * jnp.outer(col, col)
        m = m + col * (d_nu - d_tau * mj) / den
        carry = (tau.at[j].add(d_tau), nu.at[j].add(d_nu), V, m, incl.at[j].set(jnp.where(ok, t.incl, incl[j])),
                 nclip + (clipped & ok), nskip + (~ok))
        return carry, None

    z = jnp.asarray(0, jnp.int32)
    (tau, nu, V, _, incl, nclip, nskip), _ = lax.scan(body, (state.tau, state.nu, V, m, state.incl, z, z),
                                                      jnp.arange(d))
    m, v, _ = _global(data, tau, nu)
    return EPState(tau, nu, m, v, incl, state.iteration + 1, _change(state, m, v, incl), nclip, nskip)


@partial(jax.jit, static_argnames=("sequential",))
def run(data: EPData, damping, tol, max_iter, sequential: bool = False) -> EPState:
    """Iterate sweeps under ``lax.while_loop`` until the largest change is below ``tol``."""
    step = update_sequential if sequential else update

    def cond(s):
        return (s.iteration < max_iter) & (s.max_change > tol)

    return lax.while_loop(cond, lambda s: step(s, data, damping), init(data))


@jax.jit
def finalize(state: EPState, data: EPData):
    """Inclusion probabilities, the spike-and-slab marginals ``q*(z_j, w_j)`` (tilted at the final
    cavity) and the EP log evidence ``log Z_EP``."""
    tau_c = jnp.maximum(1.0 / state.v - state.tau, 0.0)
    nu_c = state.m / state.v - state.nu
    t = spike_slab_tilted(tau_c, nu_c, data.slab_var, data.logit_p)
    n, d = data.X.shape
    _, _, logdet = _global(data, state.tau, state.nu)
    h = state.nu + data.beta * (data.X.T @ data.y)
    log_gauss = (-0.5 * n * jnp.log(2 * jnp.pi) + 0.5 * n * jnp.log(data.beta) - 0.5 * data.beta * (data.y @ data.y)
                 + 0.5 * d * jnp.log(2 * jnp.pi) - 0.5 * logdet + 0.5 * h @ state.m)
    log_z = log_gauss + jnp.sum(t.log_z - log_partition(1.0 / state.v, state.m / state.v))
    return t.incl, t.slab_mean, t.slab_var, log_z


@jax.jit
def predictive(state: EPState, data: EPData, X_new):
    """Mean and variance of ``f* = X_new w`` under ``Q`` (full covariance, Woodbury when d > n)."""
    X, beta = data.X, data.beta
    n, d = X.shape
    mean = X_new @ state.m
    if d <= n:
        P = jnp.diag(state.tau) + beta * (X.T @ X)
        L = jnp.linalg.cholesky(P)
        A = jax.scipy.linalg.solve_triangular(L, X_new.T, lower=True)
        return mean, jnp.sum(A**2, axis=0)
    A, _, _ = _woodbury(X, beta, state.tau)
    return mean, jnp.sum(X_new**2 / state.tau, axis=1) - jnp.sum((A @ X_new.T) ** 2, axis=0)
