"""Collapsed Gibbs sampling for spike-and-slab regression and probit classification.

Why collapsed: updating ``z_j`` given ``w`` is nearly frozen (a weight at 0 makes inclusion
unlikely and vice versa), so the indicators are updated with the weights -- and, for a Gamma noise
precision, the precision too -- integrated out:

* regression: ``p(z_j | z_-j, y)`` from ``y ~ N(0, C_z / tau)``, ``C_z = I + X S_z X^T``;
* probit: Albert-Chib utilities ``u_i ~ N(x_i^T w + b_i, 1)``, ``y_i = sign(u_i)``; the sampler
  alternates ``z | u`` (the same collapsed update, data ``u - b``) and ``u_i | u_-i, z, y`` with
  ``w`` integrated out too (``u - b ~ N(0, C_z)`` truncated to the observed signs; Holmes & Held
  2006), which mixes far better than the usual ``u | w``, ``w | u`` scan.

``C_z^-1`` is rebuilt once per sweep and kept up to date by Sherman-Morrison rank-one updates when
one indicator flips, so a sweep over d indicators costs O(n^2 d) time, O(n^2 + n d) memory; ``w``
(and ``tau``) are then drawn exactly given ``z`` with the O(n^2 d) sampler of Bhattacharya et al.
(2016). When n > d the regression data are first reduced to ``(R, Q^T y)`` (thin QR), so the cost
is O(min(n, d)^2 d).

Example:
    >>> import jax, numpy as np
    >>> X = np.random.default_rng(0).normal(size=(40, 5)); y = X[:, 0] * 2 + np.random.default_rng(1).normal(size=40)
    >>> data, config = regression_data(X, y, p_incl=np.full(5, 0.2), slab_var=np.ones(5))
    >>> state = init(jax.random.PRNGKey(0), data, config)
    >>> state, info = step(jax.random.PRNGKey(1), state, data, config)
    >>> state.z.shape, state.w.shape
    ((5,), (5,))
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import log_ndtr, ndtri

from inference import progress as progress_bar
from inference import random_draws


class GibbsData(NamedTuple):
    """Arrays the sampler needs. ``X`` is (m, d): m = n, or min(n, d) after QR reduction."""

    X: jax.Array
    y: jax.Array  # (m,) data in unit-noise form (regression); labels +-1 (probit, m = n)
    offset: jax.Array  # (m,) b (probit); zeros for regression
    extra: jax.Array  # residual sum of squares dropped by the QR reduction
    slab_var: jax.Array  # (d,)
    logit_prior: jax.Array  # (d,)
    a_post: jax.Array  # Gamma shape a + n/2 (ignored without a precision)
    b_prior: jax.Array  # Gamma rate b


class GibbsConfig(NamedTuple):
    """Structure fixed when the sampler is compiled (hashable, passed as a static argument)."""

    gamma: bool  # unknown noise precision with a Gamma prior
    probit: bool  # latent utilities


class GibbsState(NamedTuple):
    z: jax.Array  # (d,) int32 indicators
    w: jax.Array  # (d,) weights (0 where z = 0)
    precision: jax.Array  # noise precision (1.0 when fixed)
    u: jax.Array  # (m,) latent utilities minus offset (probit); the data (regression)
    Cinv: jax.Array  # (m, m) inverse of C_z = I + X S_z X^T for the current z


class GibbsInfo(NamedTuple):
    num_flips: jax.Array  # indicator changes in the sweep


def regression_data(X, y, *, p_incl, slab_var, noise_prior=None) -> tuple[GibbsData, GibbsConfig]:
    X, y = np.asarray(X, float), np.asarray(y, float)
    n, d = X.shape
    extra = 0.0
    if n > d:  # y^T C^-1 y and |C| only see X through R and Q^T y
        Q, R = np.linalg.qr(X)
        qy = Q.T @ y
        extra, X, y = float(y @ y - qy @ qy), R, qy
    a, b = noise_prior if noise_prior is not None else (1.0, 1.0)
    return _pack(X, y, np.zeros(len(y)), extra, slab_var, p_incl, a + 0.5 * n, b, noise_prior is not None, False)


def probit_data(X, t, *, p_incl, slab_var, offset=None) -> tuple[GibbsData, GibbsConfig]:
    X, t = np.asarray(X, float), np.asarray(t, float)
    b = np.zeros(len(t)) if offset is None else np.asarray(offset, float)
    return _pack(X, t, b, 0.0, slab_var, p_incl, 1.0, 1.0, False, True)


def _pack(X, y, b, extra, s2, p, a_post, b_prior, gamma, probit):
    d = X.shape[1]
    p = np.broadcast_to(np.asarray(p, float), (d,))
    data = GibbsData(jnp.asarray(X), jnp.asarray(y), jnp.asarray(b), jnp.asarray(extra),
                     jnp.broadcast_to(jnp.asarray(s2, float), (d,)), jnp.asarray(np.log(p) - np.log1p(-p)),
                     jnp.asarray(float(a_post)), jnp.asarray(float(b_prior)))
    return data, GibbsConfig(bool(gamma), bool(probit))


def init(rng_key, data: GibbsData, config: GibbsConfig) -> GibbsState:
    """Indicators drawn from the prior; utilities on the right side of zero."""
    k1, k2 = random.split(rng_key)
    z = random.bernoulli(k1, jax.nn.sigmoid(data.logit_prior)).astype(jnp.int32)
    if config.probit:
        u = data.y * (jnp.abs(random.normal(k2, data.y.shape)) + 0.1) - data.offset
    else:
        u = data.y
    one = jnp.ones((), data.slab_var.dtype)  # strongly typed: no recompile when the state comes back
    return GibbsState(z, jnp.zeros_like(data.slab_var), one, u, _c_inverse(data.X, z, data.slab_var))


def _c_matrix(X, z, s2):
    return jnp.eye(X.shape[0]) + (X * (z * s2)) @ X.T


def _c_inverse(X, z, s2):
    L = jnp.linalg.cholesky(_c_matrix(X, z, s2))
    Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(X.shape[0]), lower=True)
    return Linv.T @ Linv


def _refresh(Cinv, X, z, s2):
    """One Newton-Schulz step ``Cinv (2 I - C Cinv)``: removes the rounding drift of the rank-one
    updates (quadratic convergence) with matrix products only -- no LAPACK call per sweep."""
    CX = _c_matrix(X, z, s2) @ Cinv
    out = 2.0 * Cinv - Cinv @ CX
    return 0.5 * (out + out.T)


def _log_odds(data, gamma, j, h0, e0, Q0):
    s = data.slab_var[j]
    r = 1.0 + s * h0
    if gamma:
        Q1 = Q0 - s * e0**2 / r
        half = lambda q: jnp.log(data.b_prior + 0.5 * (q + data.extra))  # noqa: E731
        diff = -0.5 * jnp.log(r) - data.a_post * (half(Q1) - half(Q0))
    else:
        diff = -0.5 * jnp.log(r) + 0.5 * s * e0**2 / r
    return data.logit_prior[j] + diff


def indicator_sweep(rng_key, z, u, Cinv, data: GibbsData, config: GibbsConfig):
    """One systematic pass over all indicators with ``w`` (and ``tau``) integrated out.

    ``Cinv`` is ``C_z^-1`` for the incoming ``z``. Returns the new indicators, ``C_z^-1``,
    ``C_z^-1 u`` and ``u^T C_z^-1 u`` for them, and the number of flips.
    """
    d = z.shape[0]
    unif = random.uniform(rng_key, (d,))  # all draws up front: one RNG call, a small loop body
    Xt = data.X.T
    Cinv = _refresh(Cinv, data.X, z, data.slab_var)
    Cu = Cinv @ u

    def body(carry, inp):
        Cinv, Cu, Q, z, flips = carry
        j, v = inp
        x, s, zj = Xt[j], data.slab_var[j], z[j]
        g = Cinv @ x
        h, e = x @ g, x @ Cu
        k = jnp.where(zj == 1, 1.0 / (1.0 - s * h), 1.0)  # to quantities without feature j
        h0, e0, Q0 = h * k, e * k, Q + jnp.where(zj == 1, s * e**2 * k, 0.0)
        new = (v < jax.nn.sigmoid(_log_odds(data, config.gamma, j, h0, e0, Q0))).astype(jnp.int32)
        changed = (new != zj).astype(Cinv.dtype)
        coef = changed * jnp.where(zj == 1, s / (1.0 - s * h), -s / (1.0 + s * h))
        Cinv = Cinv + coef * jnp.outer(g, g)
        Cu = Cu + coef * e * g
        Q = Q + coef * e**2
        return (Cinv, Cu, Q, z.at[j].set(new), flips + changed), None

    init_carry = (Cinv, Cu, u @ Cu, z, jnp.asarray(0.0, Cinv.dtype))
    (Cinv, Cu, Q, z, flips), _ = lax.scan(body, init_carry, (jnp.arange(d), unif))
    return z, Cinv, Cu, Q, flips


def _truncated_normal(uniforms, mean, sd, lower_sign, bound):
    """x ~ N(mean, sd^2) restricted to sign * (x - bound) > 0, from two uniforms (last axis 2),
    stably in the tails (inverse CDF in log space; exponential tail approximation beyond it)."""
    a = lower_sign * (bound - mean) / sd  # standardised bound in the direction of the constraint
    u1 = jnp.clip(uniforms[..., 0], 1e-300, 1.0)
    # x' ~ N(0,1) | x' > a  <=>  -x' = ndtri(U * Phi(-a)), computed in log space
    t = -ndtri(jnp.exp(jnp.log(u1) + log_ndtr(-a)))
    tail = a - jnp.log(jnp.clip(uniforms[..., 1], 1e-300, 1.0)) / jnp.maximum(a, 1.0)
    t = jnp.where(jnp.isfinite(t) & (t >= a), t, tail)
    return mean + lower_sign * sd * t


def utility_sweep(rng_key, r, Cinv, data: GibbsData):
    """``r_i | r_-i, z, y`` with ``w`` integrated out: ``r = u - b ~ N(0, C)``, sign(r + b) = y."""
    n = r.shape[0]
    unif = random.uniform(rng_key, (n, 2))
    Pr = Cinv @ r

    def body(carry, inp):
        r, Pr = carry
        i, u = inp
        pii = Cinv[i, i]
        mean, sd = r[i] - Pr[i] / pii, jnp.sqrt(1.0 / pii)
        new = _truncated_normal(u, mean, sd, data.y[i], -data.offset[i])
        Pr = Pr + Cinv[:, i] * (new - r[i])
        return (r.at[i].set(new), Pr), None

    (r, _), _ = lax.scan(body, (r, Pr), (jnp.arange(n), unif))
    return r


def draw_weights(rng_key, z, u, Cinv, Cu, Q, data: GibbsData, config: GibbsConfig):
    """Exact ``w`` (and ``tau``) given ``z`` and the data ``u`` (Bhattacharya et al. 2016)."""
    k1, k2, k3 = random.split(rng_key, 3)
    s = z * data.slab_var
    mean = s * (data.X.T @ Cu)
    a = jnp.sqrt(s) * random.normal(k1, s.shape)
    v = data.X @ a + random.normal(k2, u.shape)
    draw = a + s * (data.X.T @ (Cinv @ (u - v)))
    if config.gamma:
        tau = random_draws.gamma(k3, data.a_post, dtype=draw.dtype) / (data.b_prior + 0.5 * (Q + data.extra))
        return mean + (draw - mean) / jnp.sqrt(tau), tau
    return draw, jnp.ones((), draw.dtype)


def step(rng_key, state: GibbsState, data: GibbsData, config: GibbsConfig) -> tuple[GibbsState, GibbsInfo]:
    """One Gibbs scan: indicators (collapsed), utilities (probit, collapsed), then w and tau."""
    k1, k2, k3 = random.split(rng_key, 3)
    z, Cinv, Cu, Q, flips = indicator_sweep(k1, state.z, state.u, state.Cinv, data, config)
    u = state.u
    if config.probit:
        u = utility_sweep(k2, u, Cinv, data)
        Cu = Cinv @ u
        Q = u @ Cu
    w, tau = draw_weights(k3, z, u, Cinv, Cu, Q, data, config)
    return GibbsState(z, w, tau, u, Cinv), GibbsInfo(flips)


@partial(jax.jit, static_argnames=("config", "num_steps", "collect"))
def run_chains(keys, states: GibbsState, data: GibbsData, config: GibbsConfig, num_steps: int, collect: bool):
    """Advance every chain ``num_steps`` scans (vmapped over chains); optionally keep the draws."""

    def chain(key, state):
        def body(state, key):
            state, info = step(key, state, data, config)
            out = (state.z.astype(jnp.int8), state.w, state.precision, info.num_flips) if collect else None
            return state, out

        return lax.scan(body, state, random.split(key, num_steps))

    return jax.vmap(chain)(keys, states)


def record(state: GibbsState, info: GibbsInfo) -> tuple:
    """What a kept draw holds: the indicators (int8), weights, precision and flips of its scan."""
    return state.z.astype(jnp.int8), state.w, state.precision, info.num_flips


def scan_chains(keys, states, step_fn, record_fn, num_warmup: int, num_samples: int, progress: bool):
    """Warmup then sampling for every chain (vmapped) in one loop of ``step_fn(key, state) ->
    (state, info)``: draw ``i - num_warmup``'s ``record_fn(state, info)`` (a tuple of arrays) goes
    into preallocated buffers (warmup scans overwrite slot 0), so the step is compiled once and
    memory holds only the kept draws; with ``progress`` a host callback advances the running bar
    (`inference.progress`), the draws unchanged. Traceable; ``(final states, buffers)``."""

    def chain(key, state):
        shapes = jax.eval_shape(lambda k, s: record_fn(*step_fn(k, s)), key, state)
        bufs = tuple(jnp.zeros((num_samples,) + x.shape, x.dtype) for x in shapes)

        def body(carry, inp):
            state, bufs = carry
            i, key = inp
            if progress:
                progress_bar.every(i, num_warmup + num_samples)
            state, info = step_fn(key, state)
            slot = jnp.maximum(i - num_warmup, 0)
            bufs = tuple(b.at[slot].set(v) for b, v in zip(bufs, record_fn(state, info)))
            return (state, bufs), None

        total = num_warmup + num_samples
        (state, bufs), _ = lax.scan(body, (state, bufs), (jnp.arange(total), random.split(key, total)))
        return state, bufs

    return jax.vmap(chain)(keys, states)


@partial(jax.jit, static_argnames=("config", "num_warmup", "num_samples", "progress"))
def sample_chains(keys, states: GibbsState, data: GibbsData, config: GibbsConfig, num_warmup: int, num_samples: int,
                  progress: bool = False):
    """Warmup then sampling for every chain in one compiled program (`scan_chains`); the draws
    `record` keeps, with leading (chain, draw) axes."""
    return scan_chains(keys, states, lambda k, s: step(k, s, data, config), record, num_warmup, num_samples, progress)
