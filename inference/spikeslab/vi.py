"""Coordinate-ascent VI for spike-and-slab regression and probit classification.

Family: ``q(z, w) q(tau) = prod_j Bern(z_j|alpha_j) [N(w_j|mu_j, s2_j)]^z_j x Gamma(tau)`` -- the
mean-field Bernoulli-Gaussian family of Carbonetto & Stephens (2012) and Titsias & Lazaro-Gredilla
(2011), with a Gamma factor for an unknown noise precision (Normal-Gamma model: slab ``v_j / tau``).
Each coordinate update is closed form:

    s2_j = 1 / (E[tau] (x_j^T x_j + 1/v_j)),   mu_j = E[tau] s2_j x_j^T (t - sum_{k!=j} x_k alpha_k mu_k),
    logit alpha_j = logit p_j + (E[log tau] - log v_j + log s2_j) / 2 + mu_j^2 / (2 s2_j),

with ``t = y`` (regression) or, for probit, ``t = E[u] - b`` where ``u_i ~ N(x_i^T w + b_i, 1)``
truncated to the sign of ``y_i`` (Albert-Chib augmentation; ``q(u)`` is that truncated normal).
A sweep costs O(n d). The ELBO (monotone under these updates) is the log-evidence lower bound.

Example:
    >>> import numpy as np, jax.numpy as jnp
    >>> X = np.random.default_rng(0).normal(size=(50, 6)); y = 2 * X[:, 1]
    >>> data, cfg = make_data(X, y, slab_var=np.ones(6), p_incl=np.full(6, 0.2))
    >>> s = run(data, cfg, jnp.asarray(1e-8), jnp.asarray(500))
    >>> int(np.argmax(s.alpha)), round(float(s.mu[1]), 2)
    (1, 1.96)
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import digamma, gammaln, log_ndtr


TRACE_LEN = 1000


class VIData(NamedTuple):
    X: jax.Array  # (n, d), unit noise scale
    y: jax.Array  # (n,) targets (regression) or +-1 labels (probit)
    offset: jax.Array  # (n,) b (probit)
    slab_var: jax.Array  # (d,) slab variance at tau = 1
    logit_p: jax.Array  # (d,)
    prior_shape: jax.Array  # Gamma prior of tau (ignored when fixed)
    prior_rate: jax.Array


class VIConfig(NamedTuple):
    gamma: bool  # unknown noise precision
    probit: bool


class VIState(NamedTuple):
    alpha: jax.Array  # (d,) inclusion probabilities
    mu: jax.Array  # (d,) slab means
    s2: jax.Array  # (d,) slab variances
    shape: jax.Array  # q(tau) Gamma shape (fixed noise: unused)
    rate: jax.Array
    elbo: jax.Array
    iteration: jax.Array
    max_change: jax.Array
    elbo_trace: jax.Array  # (TRACE_LEN,) ELBO after each sweep (the last slot keeps the latest)


def make_data(X, y, *, slab_var, p_incl, offset=None, noise_prior=None, probit=False):
    X = np.asarray(X, float)
    n, d = X.shape
    p = np.broadcast_to(np.asarray(p_incl, float), (d,))
    a, b = noise_prior if noise_prior is not None else (1.0, 1.0)
    data = VIData(jnp.asarray(X), jnp.asarray(y, float), jnp.asarray(np.zeros(n) if offset is None else offset, float),
                  jnp.broadcast_to(jnp.asarray(slab_var, float), (d,)), jnp.asarray(np.log(p) - np.log1p(-p)),
                  jnp.asarray(float(a)), jnp.asarray(float(b)))
    return data, VIConfig(noise_prior is not None, bool(probit))


def _tau_moments(state, cfg):
    if cfg.gamma:
        return state.shape / state.rate, digamma(state.shape) - jnp.log(state.rate)
    return jnp.ones(()), jnp.zeros(())


def _targets(data, cfg, Xm):
    """``t``: y for regression; ``E[u] - b`` for probit, with ``m = X E[w] + b``."""
    if not cfg.probit:
        return data.y
    m = Xm + data.offset
    ratio = jnp.exp(-0.5 * m**2 - 0.5 * math.log(2 * math.pi) - log_ndtr(data.y * m))
    return m + data.y * ratio - data.offset


def _var_w(state):
    return state.alpha * (state.mu**2 + state.s2) - (state.alpha * state.mu) ** 2


def elbo(state: VIState, data: VIData, cfg: VIConfig):
    """Evidence lower bound of the (unit-noise) model."""
    X, n = data.X, data.X.shape[0]
    e_tau, e_log_tau = _tau_moments(state, cfg)
    mean_w = state.alpha * state.mu
    var_f = (X**2) @ _var_w(state)
    if cfg.probit:
        lik = jnp.sum(log_ndtr(data.y * (X @ mean_w + data.offset))) - 0.5 * jnp.sum(var_f)
    else:
        resid = data.y - X @ mean_w
        lik = 0.5 * n * (e_log_tau - math.log(2 * math.pi)) - 0.5 * e_tau * (resid @ resid + jnp.sum(var_f))
    a, p = state.alpha, jax.nn.sigmoid(data.logit_p)
    xlogy = lambda x, y: jnp.where(x > 0, x * jnp.log(jnp.where(x > 0, y, 1.0)), 0.0)  # noqa: E731
    slab = 0.5 * (e_log_tau - jnp.log(data.slab_var) + 1.0 + jnp.log(state.s2)) \
        - e_tau * (state.mu**2 + state.s2) / (2 * data.slab_var)
    prior = jnp.sum(a * slab + xlogy(a, p / jnp.maximum(a, 1e-300)) + xlogy(1 - a, (1 - p) / jnp.maximum(1 - a, 1e-300)))
    if cfg.gamma:
        a0, b0, aq, bq = data.prior_shape, data.prior_rate, state.shape, state.rate
        kl = ((aq - a0) * digamma(aq) - gammaln(aq) + gammaln(a0) + a0 * (jnp.log(bq) - jnp.log(b0))
              + aq * (b0 - bq) / bq)
        prior = prior - kl
    return lik + prior


def init(data: VIData, cfg: VIConfig) -> VIState:
    d = data.X.shape[1]
    p = jax.nn.sigmoid(data.logit_p)
    shape = data.prior_shape + 0.5 * data.X.shape[0]
    rate = data.prior_rate + 0.5 * (data.y @ data.y) if not cfg.probit else jnp.ones(())
    s2 = 1.0 / (jnp.sum(data.X**2, 0) + 1.0 / data.slab_var)
    if cfg.gamma:
        s2 = s2 * rate / shape
    z = jnp.asarray(0, jnp.int32)
    return VIState(p, jnp.zeros(d), s2, jnp.asarray(shape, float), jnp.asarray(rate, float), jnp.asarray(-jnp.inf),
                   z, jnp.asarray(jnp.inf), jnp.full(TRACE_LEN, jnp.nan))


def update(state: VIState, data: VIData, cfg: VIConfig) -> VIState:
    """One sweep: q(u) (probit), every (alpha_j, mu_j, s2_j) in turn, then q(tau)."""
    X = data.X
    xx = jnp.sum(X**2, 0)
    e_tau, e_log_tau = _tau_moments(state, cfg)
    Xm = X @ (state.alpha * state.mu)
    t = _targets(data, cfg, Xm)

    def body(carry, j):
        alpha, mu, s2, Xm = carry
        x = X[:, j]
        old = alpha[j] * mu[j]
        r = x @ (t - Xm) + xx[j] * old
        s2j = 1.0 / (e_tau * (xx[j] + 1.0 / data.slab_var[j]))
        muj = e_tau * s2j * r
        logit = data.logit_p[j] + 0.5 * (e_log_tau - jnp.log(data.slab_var[j]) + jnp.log(s2j)) + 0.5 * muj**2 / s2j
        aj = jax.nn.sigmoid(logit)
        Xm = Xm + x * (aj * muj - old)
        return (alpha.at[j].set(aj), mu.at[j].set(muj), s2.at[j].set(s2j), Xm), None

    (alpha, mu, s2, Xm), _ = lax.scan(body, (state.alpha, state.mu, state.s2, Xm), jnp.arange(X.shape[1]))
    new = state._replace(alpha=alpha, mu=mu, s2=s2)
    if cfg.gamma:
        resid = data.y - Xm
        var_w = _var_w(new)
        shape = data.prior_shape + 0.5 * X.shape[0] + 0.5 * jnp.sum(alpha)
        rate = data.prior_rate + 0.5 * (resid @ resid + xx @ var_w) \
            + 0.5 * jnp.sum(alpha * (mu**2 + s2) / data.slab_var)
        new = new._replace(shape=shape, rate=rate)
    change = jnp.maximum(jnp.max(jnp.abs(alpha - state.alpha)),
                         jnp.max(jnp.abs(alpha * mu - state.alpha * state.mu) / jnp.sqrt(s2)))
    value = elbo(new, data, cfg)
    slot = jnp.minimum(state.iteration, TRACE_LEN - 1)
    return new._replace(elbo=value, iteration=state.iteration + 1, max_change=change,
                        elbo_trace=state.elbo_trace.at[slot].set(value))


@partial(jax.jit, static_argnames=("cfg",))
def run(data: VIData, cfg: VIConfig, tol, max_iter) -> VIState:
    """Sweeps under ``lax.while_loop`` until the largest parameter change is below ``tol``."""
    return lax.while_loop(lambda s: (s.iteration < max_iter) & (s.max_change > tol),
                          lambda s: update(s, data, cfg), init(data, cfg))
