"""EM for a mixture of experts (Jordan & Jacobs 1994; Bishop 2006, sec. 14.5.3): the point-estimate
baseline of ``probmodels.mixture_of_experts``, and the data-driven start of its Bayesian fits.

    p(y | x) = sum_k softmax(gating_bias + gating @ x)_k  p_k(y | x),
    p_k: N(intercept_k + coef_k . x, scales_k^2)  ("linear")  or  Bernoulli(sigmoid(...))  ("logistic")

E step: responsibilities r_ik. M step (conditional maximisation, so the objective never falls):
each expert by weighted least squares (linear; then its noise variance) or by damped Newton steps
(logistic), the gating network by damped Newton steps on the soft-target multinomial log-likelihood
(each step the best of step sizes 1, 1/2, 1/4, 1/8 and 0). ``Penalty`` adds Gaussian priors on the
gating rows and the experts' coefficients and an inverse-gamma prior on the noise variances: with
the model's priors EM finds a posterior mode (MAP), with a tiny ridge (the default of `em`) the
maximum-likelihood fit; a ridge is needed there because softmax gating is invariant to adding one
vector to every row, and separable regions make the gating weights grow without bound.
Experts are returned sorted by the responsibility-weighted mean of the first input (their region),
the same labelling as the Bayesian model's start.

Example:
    >>> import numpy as np
    >>> from inference.moe_em import em
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-3, 3, 200); y = np.where(x < 0, -1 - 2 * x, 1 + x) + 0.1 * rng.normal(size=200)
    >>> fit = em(x[:, None], y, 2)
    >>> np.round(np.asarray(fit.params.coef[:, 0]), 1).tolist(), np.round(np.asarray(fit.params.intercept), 1).tolist()
    ([-2.0, 1.0], [-1.0, 1.0])
"""

from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from inference.latent import kmeans

EXPERTS = ("linear", "logistic")
STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 0.0)  # damped Newton: the best of these (0: no move)
NOISE_FLOOR = 1e-6  # fraction of var(y): the smallest noise variance of a linear expert


class MoEParams(NamedTuple):
    """Parameters keyed like the Bayesian model's sites: ``gating_bias`` (K,), ``gating`` (K, d),
    ``intercept`` (K,), ``coef`` (K, d), ``scales`` (K,) (the experts' noise sd; ones for
    logistic experts)."""

    gating_bias: jax.Array
    gating: jax.Array
    intercept: jax.Array
    coef: jax.Array
    scales: jax.Array


class Penalty(NamedTuple):
    """Gaussian priors (as precisions) on ``[bias, weights]`` of each gating row and on
    ``[intercept, coef]`` of each expert (about ``coef_mean``), and an InverseGamma(shape, scale)
    prior on each linear expert's noise variance (0, 0: none)."""

    gating_precision: jax.Array  # (d + 1,)
    coef_mean: jax.Array  # (d + 1,)
    coef_precision: jax.Array  # (d + 1,)
    noise_shape: jax.Array  # ()
    noise_scale: jax.Array  # ()


class EMResult(NamedTuple):
    """``params``; ``log_likelihood`` at them (float); ``objective`` trace (log-likelihood plus
    log prior, one entry per iteration, NaN after the last); ``num_iters``; ``converged`` (relative
    gain below ``tol``); ``restart_objectives`` (the final objective of every start)."""

    params: MoEParams
    log_likelihood: jax.Array
    objective: jax.Array
    num_iters: jax.Array
    converged: jax.Array
    restart_objectives: jax.Array


# ----------------------------------------------------------------------------- densities
def _design(X):
    return jnp.concatenate([jnp.ones(X.shape[:1] + (1,), X.dtype), X], -1)


def log_gates(params: MoEParams, X):
    """log softmax of the gating network at rows of X: (n, K)."""
    return jax.nn.log_softmax(params.gating_bias + X @ params.gating.T, axis=-1)


def expert_log_likelihood(params: MoEParams, X, y, expert: str):
    """log p_k(y_i | x_i) for every row and expert: (n, K)."""
    eta = params.intercept + X @ params.coef.T
    if expert == "linear":
        z = (y[:, None] - eta) / params.scales
        return -0.5 * z**2 - jnp.log(params.scales) - 0.5 * jnp.log(2 * jnp.pi)
    return y[:, None] * jax.nn.log_sigmoid(eta) + (1.0 - y[:, None]) * jax.nn.log_sigmoid(-eta)


def joint_log_terms(params: MoEParams, X, y, expert: str):
    """log g_k(x_i) + log p_k(y_i | x_i): (n, K). Their logsumexp over k is log p(y_i | x_i); the
    softmax over k is the responsibilities."""
    return log_gates(params, X) + expert_log_likelihood(params, X, y, expert)


def _log_prior(params, penalty):
    gate = jnp.concatenate([params.gating_bias[:, None], params.gating], -1)
    beta = jnp.concatenate([params.intercept[:, None], params.coef], -1)
    out = -0.5 * jnp.sum(penalty.gating_precision * gate**2) - 0.5 * jnp.sum(penalty.coef_precision * (beta - penalty.coef_mean) ** 2)
    var = params.scales**2
    noise = -(penalty.noise_shape + 1.0) * jnp.log(var) - penalty.noise_scale / var
    return out + jnp.where(penalty.noise_shape > 0, jnp.sum(noise), 0.0)


# ----------------------------------------------------------------------------- M step
def _best_step(objective, theta, step):
    """theta + s * step for the s in STEP_SIZES with the highest objective (s = 0 included)."""
    sizes = jnp.asarray(STEP_SIZES, theta.dtype)
    values = jax.vmap(lambda s: objective(theta + s * step))(sizes)
    values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
    return theta + sizes[jnp.argmax(values)] * step


def _gating_step(X1, w, r, gate, precision):
    """One damped Newton step on sum_i w_i sum_k r_ik log softmax_k - penalty, gate (K, d + 1)."""
    k, a = gate.shape

    def objective(g):
        return jnp.sum(w[:, None] * r * jax.nn.log_softmax(X1 @ g.T, -1)) - 0.5 * jnp.sum(precision * g**2)

    p = jax.nn.softmax(X1 @ gate.T, -1)
    grad = (w[:, None] * (r - p * jnp.sum(r, -1, keepdims=True))).T @ X1 - precision * gate
    rw = w * jnp.sum(r, -1)  # responsibilities sum to 1 per row (0 for padding)
    xx = jnp.einsum("ia,ib->iab", X1, X1)
    diag = jnp.einsum("i,ik,iab->kab", rw, p, xx)
    cross = jnp.einsum("i,ik,il,iab->kalb", rw, p, p, xx)
    hess = -cross.at[jnp.arange(k), :, jnp.arange(k), :].add(-diag)
    hess = hess.reshape(k * a, k * a) + jnp.diag(jnp.tile(precision, k))
    step = jnp.linalg.solve(hess, grad.reshape(-1)).reshape(k, a)
    return _best_step(objective, gate, step)


def _linear_experts(X1, y, w, r, beta, var, penalty, var_y):
    rw = w[:, None] * r  # (n, K)

    def one(rk, v):
        a = X1.T @ (rk[:, None] * X1) / v + jnp.diag(penalty.coef_precision)
        b = X1.T @ (rk * y) / v + penalty.coef_precision * penalty.coef_mean
        bk = jnp.linalg.solve(a, b)
        ssr = jnp.sum(rk * (y - X1 @ bk) ** 2)
        new = (penalty.noise_scale + 0.5 * ssr) / (jnp.where(penalty.noise_shape > 0, penalty.noise_shape + 1.0, 0.0)
                                                  + 0.5 * jnp.sum(rk))
        return bk, jnp.maximum(jnp.where(jnp.isfinite(new), new, v), NOISE_FLOOR * var_y)

    return jax.vmap(one, in_axes=(1, 0))(rw, var)


def _logistic_experts(X1, y, w, r, beta, penalty):
    rw = w[:, None] * r

    def one(rk, bk):
        def objective(b):
            eta = X1 @ b
            ll = jnp.sum(rk * (y * jax.nn.log_sigmoid(eta) + (1 - y) * jax.nn.log_sigmoid(-eta)))
            return ll - 0.5 * jnp.sum(penalty.coef_precision * (b - penalty.coef_mean) ** 2)

        p = jax.nn.sigmoid(X1 @ bk)
        grad = X1.T @ (rk * (y - p)) - penalty.coef_precision * (bk - penalty.coef_mean)
        hess = X1.T @ ((rk * p * (1 - p))[:, None] * X1) + jnp.diag(penalty.coef_precision)
        return _best_step(objective, bk, jnp.linalg.solve(hess, grad))

    return jax.vmap(one, in_axes=(1, 0))(rw, beta)


def _pack(gate, beta, scales):
    return MoEParams(gate[:, 0], gate[:, 1:], beta[:, 0], beta[:, 1:], scales)


def _m_step(X, y, w, r, params, penalty, expert, var_y):
    X1 = _design(X)
    gate = jnp.concatenate([params.gating_bias[:, None], params.gating], -1)
    beta = jnp.concatenate([params.intercept[:, None], params.coef], -1)
    if expert == "linear":
        beta, var = _linear_experts(X1, y, w, r, beta, params.scales**2, penalty, var_y)
        scales = jnp.sqrt(var)
    else:
        beta, scales = _logistic_experts(X1, y, w, r, beta, penalty), params.scales
    gate = _gating_step(X1, w, r, gate, penalty.gating_precision)
    return _pack(gate, beta, scales)


# ----------------------------------------------------------------------------- the loop
def objective(params, X, y, w, penalty, expert):
    """The weighted log-likelihood plus log prior that EM increases."""
    ll = logsumexp(joint_log_terms(params, X, y, expert), axis=-1)
    return jnp.sum(w * ll) + _log_prior(params, penalty)


def _initial_responsibilities(rng_key, X, y, w, num_experts):
    """Soft responsibilities from one k-means run on the standardised (x, y) (weighted by ``w``)."""
    feats = jnp.concatenate([X, y[:, None]], -1)
    mean = jnp.sum(w[:, None] * feats, 0) / jnp.sum(w)
    sd = jnp.sqrt(jnp.sum(w[:, None] * (feats - mean) ** 2, 0) / jnp.sum(w))
    feats = (feats - mean) / jnp.where(sd > 0, sd, 1.0)
    _, labels = kmeans(rng_key, feats, num_experts, w, num_restarts=1, num_iter=10)
    return 0.9 * jax.nn.one_hot(labels, num_experts, dtype=X.dtype) + 0.1 / num_experts


def sort_experts(params: MoEParams, X, y, w, expert):
    """Experts relabelled by the responsibility-weighted mean of the first input column."""
    r = jax.nn.softmax(joint_log_terms(params, X, y, expert), -1) * w[:, None]
    centre = (r.T @ X[:, 0]) / jnp.maximum(r.sum(0), 1e-30)
    order = jnp.argsort(centre)
    return jax.tree.map(lambda v: v[order], params)


@functools.partial(jax.jit, static_argnames=("num_experts", "expert", "max_iter"))
def fit(rng_key, X, y, w, num_experts: int, expert: str, penalty: Penalty, max_iter: int = 200, tol=1e-8):
    """One EM run from the k-means start of ``rng_key`` (row weights ``w``: 1, 0 for padding, or a
    Bayesian bootstrap); returns ``(params sorted by region, objective trace, iterations, converged)``.
    One M step in the loop body (the first from the k-means responsibilities), so one copy of it
    is compiled."""
    k, d = num_experts, X.shape[1]
    var_y = jnp.sum(w * (y - jnp.sum(w * y) / jnp.sum(w)) ** 2) / jnp.sum(w)
    var_y = jnp.where(var_y > 0, var_y, 1.0)
    zeros = jnp.zeros((k, d), X.dtype)
    params = MoEParams(jnp.zeros(k, X.dtype), zeros, jnp.zeros(k, X.dtype), zeros, jnp.full(k, jnp.sqrt(var_y)))
    r = _initial_responsibilities(rng_key, X, y, w, k)
    trace = jnp.full((max_iter,), jnp.nan, X.dtype)
    inf = jnp.asarray(jnp.inf, X.dtype)

    def cond(carry):
        _, _, i, value, prev, _ = carry
        small = jnp.abs(value - prev) <= tol * (1.0 + jnp.abs(value))
        return (i < max_iter) & ~((i >= 2) & small)

    def body(carry):
        p, r, i, value, _, trace = carry
        p = _m_step(X, y, w, r, p, penalty, expert, var_y)
        terms = joint_log_terms(p, X, y, expert)
        new = jnp.sum(w * logsumexp(terms, -1)) + _log_prior(p, penalty)
        return p, jax.nn.softmax(terms, -1), i + 1, new, value, trace.at[i].set(new)

    params, _, iters, value, prev, trace = lax.while_loop(cond, body, (params, r, 0, -inf, -inf, trace))
    converged = jnp.abs(value - prev) <= tol * (1.0 + jnp.abs(value))
    return sort_experts(params, X, y, w, expert), trace, iters, converged


def _check(X, y, num_experts, expert):
    if isinstance(num_experts, bool) or not isinstance(num_experts, numbers.Integral) or num_experts < 1:
        raise ValueError(f"num_experts must be a positive integer, got {num_experts!r}")
    if not isinstance(expert, str) or expert not in EXPERTS:
        raise ValueError(f"expert must be one of {EXPERTS}, got {expert!r}")
    X = np.asarray(X, dtype=float)
    X = X[:, None] if X.ndim == 1 else X
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != X.shape[:1] or not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError(f"X must be a finite (n, d) array and y a finite (n,) array, got {X.shape} and {y.shape}")
    if expert == "logistic" and not np.all((y == 0) | (y == 1)):
        raise ValueError("y must hold 0/1 labels for logistic experts")
    return X, y


def em(X, y, num_experts: int, *, expert: str = "linear", max_iter: int = 500, tol: float = 1e-8,
       num_restarts: int = 4, seed: int = 0, ridge: float = 1e-6) -> EMResult:
    """Maximum-likelihood EM (with a ``ridge`` x n penalty on every coefficient, see the module
    docstring) from ``num_restarts`` k-means starts; the run with the highest objective is kept.

    Example:
        >>> import numpy as np
        >>> from inference.moe_em import em
        >>> rng = np.random.default_rng(1)
        >>> x = rng.uniform(-3, 3, 200); y = np.where(x < 0, -1 - 2 * x, 1 + x) + 0.1 * rng.normal(size=200)
        >>> res = em(x, y, 2)
        >>> bool(res.converged), np.round(np.asarray(res.params.scales), 1).tolist()
        (True, [0.1, 0.1])
    """
    X, y = _check(X, y, num_experts, expert)
    if isinstance(num_restarts, bool) or not isinstance(num_restarts, numbers.Integral) or num_restarts < 1:
        raise ValueError(f"num_restarts must be a positive integer, got {num_restarts!r}")
    dtype = jnp.result_type(float)
    Xj, yj = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    d, n = X.shape[1], X.shape[0]
    # host arrays moved once: eager jnp.full / jnp.zeros / jnp.stack / jnp.argmax each compiled a
    # program, and so did every operation of an eager `objective` (45 compilations a first call)
    lam = np.full((d + 1,), ridge * n, dtype)
    zero = np.zeros((), dtype)
    penalty = Penalty(*(jnp.asarray(a) for a in (lam, np.zeros((d + 1,), dtype), lam, zero, zero)))
    w = jnp.asarray(np.ones((n,), dtype))
    runs = [fit(key, Xj, yj, w, int(num_experts), expert, penalty, int(max_iter), tol)
            for key in jax.random.split(jax.random.PRNGKey(seed), int(num_restarts))]
    finals = np.array([float(_objective(r[0], Xj, yj, w, penalty, expert)) for r in runs])
    best = int(np.argmax(np.where(np.isfinite(finals), finals, -np.inf)))
    params, trace, iters, converged = runs[best]
    return EMResult(params, _log_likelihood(params, Xj, yj, expert), trace, iters, converged, jnp.asarray(finals))


_objective = jax.jit(objective, static_argnames="expert")


@functools.partial(jax.jit, static_argnames="expert")
def _log_likelihood(params, X, y, expert):
    return jnp.sum(logsumexp(joint_log_terms(params, X, y, expert), -1))


__all__ = ["EXPERTS", "EMResult", "MoEParams", "Penalty", "em", "expert_log_likelihood", "fit", "joint_log_terms",
           "log_gates", "objective", "sort_experts"]
