"""EP for spike-and-slab regression with an unknown noise precision: EP on a grid of precisions.

With the Normal-Gamma prior (slab ``v / tau``, noise ``1 / tau``) the posterior over the scalar
``tau`` is smooth and unimodal; it is integrated numerically instead of approximated: for each grid
value ``tau_k`` EP runs with that precision (all grid points at once, vmapped), and the grid
weights are ``Z_EP(tau_k) Gamma(tau_k | a, b) tau_k`` (trapezoid rule in ``log tau``). Inclusion
probabilities, moments and the evidence are the weighted mixtures. The grid spans the region
between the posteriors of ``tau`` under the empty and the full model (every model's posterior lies
in between) with a spacing of half the posterior standard deviation of ``log tau``, where the
trapezoid rule is accurate far beyond EP's own error.

As a sampling family the grid defines ``q(tau) = w_k / (h tau)`` on the cell ``|log tau - log
tau_k| < h / 2`` and ``q(z, w | tau)`` = the spike-and-slab family of cell ``k``.

Example:
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(30, 3)); y = X[:, 0] + 0.5 * np.random.default_rng(1).normal(size=30)
    >>> fit = fit_grid(X, y, slab_var=np.ones(3), p_incl=np.full(3, 0.3), noise_prior=(1.0, 1.0))
    >>> round(float(fit.incl[0]), 2), fit.log_tau.shape == fit.log_weights.shape
    (1.0, True)
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from inference.spikeslab import ep_regression as epr

MIN_POINTS, MAX_POINTS = 16, 80


class GridFit(NamedTuple):
    log_tau: np.ndarray  # (K,) grid in log precision
    step: float  # grid spacing h in log tau
    log_weights: np.ndarray  # (K,) normalised log weights
    states: epr.EPState  # batched over K
    incl_k: np.ndarray  # (K, d)
    slab_mean_k: np.ndarray  # (K, d)
    slab_var_k: np.ndarray  # (K, d)
    incl: np.ndarray  # (d,) mixture inclusion probabilities
    w_mean: np.ndarray  # (d,) mixture mean of w under Q
    w_var: np.ndarray  # (d,) mixture variance of w under Q
    log_evidence: float


def grid(X, y, slab_var, noise_prior, tail=1e-10):
    """Log-precision grid covering the posterior of tau (see module docstring)."""
    a0, b0 = noise_prior
    n = len(y)
    shape = a0 + 0.5 * n
    Xs = X * np.sqrt(slab_var)
    if n <= X.shape[1]:
        quad_full = y @ np.linalg.solve(np.eye(n) + Xs @ Xs.T, y)
    else:
        M = np.eye(X.shape[1]) + Xs.T @ Xs
        b = Xs.T @ y
        quad_full = y @ y - b @ np.linalg.solve(M, b)
    lo = stats.gamma.ppf(tail, shape, scale=1.0 / (b0 + 0.5 * (y @ y)))
    hi = stats.gamma.isf(tail, shape, scale=1.0 / (b0 + 0.5 * max(quad_full, 0.0)))
    h = 0.5 / math.sqrt(shape)
    k = int(np.clip(math.ceil((math.log(hi) - math.log(lo)) / h) + 1, MIN_POINTS, MAX_POINTS))
    log_tau = np.linspace(math.log(lo), math.log(hi), k)
    return log_tau, float(log_tau[1] - log_tau[0])


def fit_grid(X, y, *, slab_var, p_incl, noise_prior, damping=0.5, tol=1e-6, max_iter=1000,
             sequential=False, log_scale_adjust=0.0) -> GridFit:
    X, y = np.asarray(X, float), np.asarray(y, float)
    d = X.shape[1]
    s2 = np.broadcast_to(np.asarray(slab_var, float), (d,))
    log_tau, h = grid(X, y, s2, noise_prior)
    tau = np.exp(log_tau)
    base = epr.make_data(X, y, beta=1.0, slab_var=s2, p_incl=p_incl)
    batched = base._replace(beta=jnp.asarray(tau), slab_var=jnp.asarray(s2[None, :] / tau[:, None]))
    axes = epr.EPData(None, None, 0, 0, None)
    hyper = (jnp.asarray(damping), jnp.asarray(tol), jnp.asarray(max_iter))
    states = jax.vmap(lambda dat: epr.run(dat, *hyper, sequential=sequential), in_axes=(axes,))(batched)
    if not sequential:
        states = _sequential_pass(states, batched, axes, hyper, tol)
    incl, a, b, log_z = jax.vmap(epr.finalize, in_axes=(0, axes))(states, batched)
    a0, b0 = noise_prior
    log_prior = stats.gamma.logpdf(tau, a0, scale=1.0 / b0) + log_tau  # density of log tau
    joint = np.asarray(log_z) + log_prior
    log_ev = float(special.logsumexp(joint) + math.log(h)) + log_scale_adjust
    lw = joint - special.logsumexp(joint)
    wts = np.exp(lw)
    m, v = np.asarray(states.m), np.asarray(states.v)
    w_mean = wts @ m
    return GridFit(log_tau, h, np.asarray(lw), states, np.asarray(incl), np.asarray(a), np.asarray(b),
                   wts @ np.asarray(incl), w_mean, wts @ (v + m**2) - w_mean**2, log_ev)


def _sequential_pass(states, batched, axes, hyper, tol):
    """Grid points where the parallel schedule did not converge go on with sequential sweeps.

    With the noise precision fixed above its posterior mode, p >> n and correlated genes, the
    parallel schedule can settle into an oscillation of the weakly included genes (largest change
    ~0.3 after 1000 sweeps, log Z off by ~1 nat) where sequential sweeps settle to within ~1e-4
    nats. Only points whose last change exceeds ``10 tol`` run again (padded to a power of two to
    bound recompiles; below that a point is nearly converged, or at float32's round-off floor where
    sequential sweeps do no better), and each keeps whichever schedule ended with the smaller change."""
    bad = np.flatnonzero(~(np.asarray(states.max_change) <= 10 * tol))  # nearly there (or at float32's floor): leave
    if bad.size == 0:
        return states
    idx = np.concatenate([bad, np.full((1 << (bad.size - 1).bit_length()) - bad.size, bad[-1])])
    take = lambda x: x[idx]  # noqa: E731
    sub = jax.vmap(lambda st, dat: epr.resume(st, dat, *hyper, sequential=True), in_axes=(0, axes))(
        jax.tree.map(take, states), batched._replace(beta=batched.beta[idx], slab_var=batched.slab_var[idx]))
    sub = jax.tree.map(lambda x: x[: bad.size], sub)
    keep = np.asarray(sub.max_change) < np.asarray(states.max_change)[bad]  # the smaller last change wins
    bad = bad[keep]
    return jax.tree.map(lambda full, part: full.at[bad].set(part[keep]), states, sub)


def sample_precision(rng_key, fit: GridFit, num: int):
    return _sample_precision(rng_key, jnp.asarray(fit.log_weights), jnp.asarray(fit.log_tau), fit.step, num)


@partial(jax.jit, static_argnames=("num",))
def _sample_precision(rng_key, log_weights, log_tau, step, num):
    """Draws of tau from the grid density, their cell index and ``log q(tau)``."""
    k1, k2 = jax.random.split(rng_key)
    idx = jax.random.categorical(k1, log_weights, shape=(num,))
    u = log_tau[idx] + step * (jax.random.uniform(k2, (num,)) - 0.5)
    log_q = log_weights[idx] - jnp.log(step) - u
    return jnp.exp(u), idx, log_q
