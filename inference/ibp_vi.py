"""Mean-field VI for the linear-Gaussian latent feature model with a truncated stick-breaking
Indian buffet prior (Doshi-Velez, Miller, Van Gael & Teh 2009, "Variational inference for the
Indian buffet process", the infinite variational approach).

The model (site names as in ``probmodels.ibp_linear_gaussian``)::

    sticks_k ~ Beta(alpha, 1),  probs_k = prod_{j <= k} sticks_j        k = 1..K (the truncation)
    z_nk ~ Bernoulli(probs_k),  features_k ~ N(0, feature_scale^2 I_D)
    Y_n ~ N(z_n features, noise_scale^2 I_D)
    noise_scale^-2 ~ Gamma(a, b), feature_scale^-2 ~ Gamma(a', b')     (or fixed numbers)

q = q(sticks) q(z) q(features) [q(noise precision)] [q(feature precision)] with q(sticks_k) =
Beta(tau1_k, tau2_k), q(z_nk) = Bernoulli(nu_nk), q(features[:, d]) = N(phi[:, d], Sigma) (one
K x K covariance shared by the D columns: the exact block update, richer than the paper's
per-feature factors) and Gamma factors for the precisions. E[log(1 - probs_k)] has no closed form;
the paper's multinomial lower bound (Jensen over the stick that ends the product) replaces it, so
the objective is a lower bound of the ELBO, still a lower bound of log p(Y). One `update` is a
sweep: features, then each column of z in turn, then the sticks (auxiliary multinomials first),
then the precisions; each step maximises the bound in its block, so it never decreases. Several
random starts (``num_restarts``, vmapped: one compilation) are run and the highest bound kept.

Example (the bound is exact for the first stick, whose product has one factor):
    >>> import jax.numpy as jnp
    >>> from jax.scipy.special import digamma
    >>> from inference.ibp_vi import multinomial_bound
    >>> bound, q = multinomial_bound(jnp.array([2.0, 3.0]), jnp.array([1.5, 0.7]))
    >>> bool(jnp.isclose(bound[0], digamma(1.5) - digamma(3.5))), q.shape
    (True, (2, 2))
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import lax
from jax.scipy.special import digamma, gammaln, logsumexp
from numpyro.infer.util import log_density

from inference import _model, compiled, convergence, random_draws
from inference.posterior import Posterior

LOG_2PI = math.log(2.0 * math.pi)
TRACE_LENGTH = 1000  # sweeps whose bound is kept in the trace (a static buffer)


class IBPPrior(NamedTuple):
    """Hyperparameters (arrays only): the IBP ``alpha``; each precision's Gamma(shape, rate) prior,
    or its fixed value (used when the `Structure` says it is not learnt)."""

    alpha: jax.Array
    noise_shape: jax.Array
    noise_rate: jax.Array
    noise_precision: jax.Array
    feature_shape: jax.Array
    feature_rate: jax.Array
    feature_precision: jax.Array

    @classmethod
    def create(cls, alpha=1.0, noise_shape=1.0, noise_rate=1.0, noise_precision=1.0, feature_shape=1.0,
               feature_rate=1.0, feature_precision=1.0) -> "IBPPrior":
        f = lambda v: jnp.asarray(v, dtype=jnp.result_type(float))  # noqa: E731
        return cls(f(alpha), f(noise_shape), f(noise_rate), f(noise_precision), f(feature_shape), f(feature_rate),
                   f(feature_precision))


class Structure(NamedTuple):
    """Fixed when the update is built: whether the noise and feature precisions are learnt."""

    learn_noise: bool
    learn_features: bool


class IBPState(NamedTuple):
    nu: jax.Array  # (n, K) q(z_nk = 1)
    phi: jax.Array  # (K, D) mean of the features
    cov: jax.Array  # (K, K) covariance of each column of the features
    tau1: jax.Array  # (K,) Beta parameters of the sticks
    tau2: jax.Array
    noise_shape: jax.Array  # q of the noise precision: Gamma(shape, rate)
    noise_rate: jax.Array
    feature_shape: jax.Array
    feature_rate: jax.Array
    elbo: jax.Array
    prev_elbo: jax.Array
    iteration: jax.Array


class FitResult(NamedTuple):
    state: IBPState
    elbo: jax.Array
    elbo_trace: jax.Array
    converged: jax.Array
    restart_elbos: jax.Array


# ----------------------------------------------------------------------------- expectations
def _precision(shape, rate, fixed, learn):
    """(E[tau], E[log tau]) of a learnt Gamma factor, or of the fixed value."""
    if learn:
        return shape / rate, digamma(shape) - jnp.log(rate)
    return fixed, jnp.log(fixed)


def expected_log_probs(tau1, tau2):
    """E[log probs_k] = sum_{j <= k} E[log sticks_j]: (K,)."""
    return jnp.cumsum(digamma(tau1) - digamma(tau1 + tau2))


def multinomial_bound(tau1, tau2):
    """The lower bound of E[log(1 - probs_k)] (K,) and its optimal auxiliary multinomials q (K, K)
    (row k over the stick i <= k that ends the product): log(1 - prod v) >= sum_i q_i (log(1 - v_i)
    + sum_{m < i} log v_m) + H(q)."""
    k = tau1.shape[0]
    d1, d2, d12 = digamma(tau1), digamma(tau2), digamma(tau1 + tau2)
    log_w = d2 + (jnp.cumsum(d1) - d1) - jnp.cumsum(d12)  # (K,) over i
    mask = jnp.arange(k)[None, :] <= jnp.arange(k)[:, None]
    lw = jnp.where(mask, log_w[None, :], -jnp.inf)
    bound = logsumexp(lw, axis=1)
    return bound, jnp.where(mask, jnp.exp(lw - bound[:, None]), 0.0)


def _second_moment(phi, cov):
    """E[features features^T] (K, K) = phi phi^T + D Sigma."""
    return phi @ phi.T + phi.shape[1] * cov


def expected_ssr(Y, nu, phi, cov):
    """E_q[sum_n ||y_n - z_n features||^2]."""
    M = _second_moment(phi, cov)
    quad = jnp.sum((nu @ M) * nu) + jnp.sum(nu * (1.0 - nu) * jnp.diag(M))
    return jnp.sum(Y**2) - 2.0 * jnp.sum(nu * (Y @ phi.T)) + quad


# ----------------------------------------------------------------------------- updates
def _update_features(Y, nu, e_noise, e_feat):
    k = nu.shape[1]
    ezz = nu.T @ nu + jnp.diag(jnp.sum(nu * (1.0 - nu), 0))
    prec = e_feat * jnp.eye(k, dtype=Y.dtype) + e_noise * ezz
    chol = jnp.linalg.cholesky(prec)
    cov = jax.scipy.linalg.cho_solve((chol, True), jnp.eye(k, dtype=Y.dtype))
    phi = jax.scipy.linalg.cho_solve((chol, True), e_noise * nu.T @ Y)
    return phi, 0.5 * (cov + cov.T)


def _update_z(Y, nu, phi, cov, e_noise, prior_logit):
    """Each column of q(z) in turn (all rows at once): the exact update given the others."""
    M = _second_moment(phi, cov)
    yphi = Y @ phi.T  # (n, K)
    lo, hi = jnp.log(jnp.finfo(Y.dtype).tiny), -jnp.log(jnp.finfo(Y.dtype).eps)

    def one(k, nu):
        others = nu @ M[:, k] - nu[:, k] * M[k, k]
        logit = prior_logit[k] + e_noise * (yphi[:, k] - 0.5 * M[k, k] - others)
        return nu.at[:, k].set(jax.nn.sigmoid(jnp.clip(logit, lo, hi)))

    return lax.fori_loop(0, nu.shape[1], one, nu)


def _update_sticks(nu, tau1, tau2, alpha):
    n = nu.shape[0]
    m = jnp.sum(nu, 0)
    rest = n - m
    _, q = multinomial_bound(tau1, tau2)
    tail = jnp.cumsum(q[:, ::-1], axis=1)[:, ::-1] - q  # tail[k, i] = sum_{j > i} q[k, j]
    new1 = alpha + jnp.cumsum(m[::-1])[::-1] + rest @ tail
    new2 = 1.0 + rest @ q
    return new1, new2


def _gamma_terms(shape0, rate0, shape, rate):
    """E_q[log Gamma(tau; shape0, rate0)] + H(q) for q = Gamma(shape, rate)."""
    e, elog = shape / rate, digamma(shape) - jnp.log(rate)
    return (shape0 * jnp.log(rate0) - gammaln(shape0) + (shape0 - 1.0) * elog - rate0 * e
            + dist.Gamma(shape, rate).entropy())


@functools.partial(jax.jit, static_argnames=("structure",))
def elbo(Y, prior: IBPPrior, state: IBPState, structure: Structure):
    """The bound on log p(Y) that CAVI increases (module docstring)."""
    n, d = Y.shape
    k = state.nu.shape[1]
    e_noise, elog_noise = _precision(state.noise_shape, state.noise_rate, prior.noise_precision, structure.learn_noise)
    e_feat, elog_feat = _precision(state.feature_shape, state.feature_rate, prior.feature_precision,
                                   structure.learn_features)
    nu = state.nu
    out = 0.5 * n * d * (elog_noise - LOG_2PI) - 0.5 * e_noise * expected_ssr(Y, nu, state.phi, state.cov)
    m = jnp.sum(nu, 0)
    bound, _ = multinomial_bound(state.tau1, state.tau2)
    out += jnp.sum(m * expected_log_probs(state.tau1, state.tau2) + (n - m) * bound)
    e_log_v = digamma(state.tau1) - digamma(state.tau1 + state.tau2)
    out += jnp.sum(jnp.log(prior.alpha) + (prior.alpha - 1.0) * e_log_v)
    out += jnp.sum(dist.Beta(state.tau1, state.tau2).entropy())
    sq = jnp.sum(state.phi**2) + d * jnp.trace(state.cov)
    out += 0.5 * k * d * (elog_feat - LOG_2PI) - 0.5 * e_feat * sq
    _, logdet = jnp.linalg.slogdet(state.cov)
    out += 0.5 * d * (k * (1.0 + LOG_2PI) + logdet)
    out -= jnp.sum(jax.scipy.special.xlogy(nu, nu) + jax.scipy.special.xlogy(1.0 - nu, 1.0 - nu))
    if structure.learn_noise:
        out += _gamma_terms(prior.noise_shape, prior.noise_rate, state.noise_shape, state.noise_rate)
    if structure.learn_features:
        out += _gamma_terms(prior.feature_shape, prior.feature_rate, state.feature_shape, state.feature_rate)
    return out


@functools.partial(jax.jit, static_argnames=("structure",))
def update(Y, prior: IBPPrior, state: IBPState, structure: Structure) -> IBPState:
    """One sweep (module docstring); the new state carries its bound."""
    n, d = Y.shape
    k = state.nu.shape[1]
    e_noise, _ = _precision(state.noise_shape, state.noise_rate, prior.noise_precision, structure.learn_noise)
    e_feat, _ = _precision(state.feature_shape, state.feature_rate, prior.feature_precision, structure.learn_features)
    phi, cov = _update_features(Y, state.nu, e_noise, e_feat)
    bound, _ = multinomial_bound(state.tau1, state.tau2)
    nu = _update_z(Y, state.nu, phi, cov, e_noise, expected_log_probs(state.tau1, state.tau2) - bound)
    tau1, tau2 = _update_sticks(nu, state.tau1, state.tau2, prior.alpha)
    noise_shape, noise_rate = state.noise_shape, state.noise_rate
    if structure.learn_noise:
        noise_shape = prior.noise_shape + 0.5 * n * d
        noise_rate = prior.noise_rate + 0.5 * expected_ssr(Y, nu, phi, cov)
    feature_shape, feature_rate = state.feature_shape, state.feature_rate
    if structure.learn_features:
        feature_shape = prior.feature_shape + 0.5 * k * d
        feature_rate = prior.feature_rate + 0.5 * (jnp.sum(phi**2) + d * jnp.trace(cov))
    new = IBPState(nu, phi, cov, tau1, tau2, noise_shape, noise_rate, feature_shape, feature_rate,
                   state.elbo, state.elbo, state.iteration + 1)
    return new._replace(elbo=elbo(Y, prior, new, structure))


def init(rng_key, Y, prior: IBPPrior, truncation: int, structure: Structure) -> IBPState:
    """Random q(z) (uniform probabilities), sticks at their prior, precisions at their prior mean
    (the noise: twice the data's precision), features from their first update."""
    n, d = Y.shape
    k = truncation
    nu = jax.random.uniform(rng_key, (n, k), Y.dtype, 0.05, 0.95)
    var = jnp.maximum(jnp.mean(Y**2), jnp.finfo(Y.dtype).tiny)
    noise_shape = prior.noise_shape + 0.5 * n * d
    feature_shape = prior.feature_shape + 0.5 * k * d
    state = IBPState(nu, jnp.zeros((k, d), Y.dtype), jnp.eye(k, dtype=Y.dtype), jnp.full((k,), prior.alpha),
                     jnp.ones((k,), Y.dtype), noise_shape, noise_shape * var / 2.0, feature_shape, feature_shape * var,
                     jnp.asarray(-jnp.inf, Y.dtype), jnp.asarray(-jnp.inf, Y.dtype), jnp.zeros((), jnp.int32))
    return state


@functools.partial(jax.jit, static_argnames=("truncation", "structure"))
def _fit_one(Y, prior, truncation, rng_key, structure, max_iter, tol):
    n = Y.shape[0]
    state = init(rng_key, Y, prior, truncation, structure)

    def cond(carry):
        s, _ = carry
        small = jnp.abs(s.elbo - s.prev_elbo) <= tol * n
        return (s.iteration < max_iter) & ~((s.iteration >= 2) & small)

    def body(carry):
        s, trace = carry
        s = update(Y, prior, s, structure)
        return s, trace.at[s.iteration - 1].set(s.elbo, mode="drop")

    state, trace = lax.while_loop(cond, body, (state, jnp.full((TRACE_LENGTH,), jnp.nan, Y.dtype)))
    return state, trace, jnp.abs(state.elbo - state.prev_elbo) <= tol * n


def fit(Y, prior: IBPPrior, truncation: int, rng_key, *, structure: Structure, max_iter: int = 1000,
        tol=1e-6, num_restarts: int = 5) -> FitResult:
    """CAVI from ``num_restarts`` random starts (vmapped), stopping when the bound gains less than
    ``tol`` nats per row in a sweep or after ``max_iter`` sweeps (both traced); the start with the
    highest final bound is kept."""
    Y = jnp.asarray(Y, jnp.result_type(float))
    keys = jax.random.split(rng_key, num_restarts)
    run = jax.vmap(lambda key: _fit_one(Y, prior, truncation, key, structure, jnp.asarray(max_iter, jnp.int32),
                                        jnp.asarray(tol, Y.dtype)))
    states, traces, converged = run(keys)
    finals = jnp.where(jnp.isfinite(states.elbo), states.elbo, -jnp.inf)
    best = int(jnp.argmax(finals))
    state = jax.tree.map(lambda v: v[best], states)
    return FitResult(state, state.elbo, traces[best], converged[best], states.elbo)


# ----------------------------------------------------------------------------- q as draws
def _scale_dist(shape, rate):
    """q of a scale sigma = tau^-1/2 when tau ~ Gamma(shape, rate)."""
    return dist.TransformedDistribution(dist.InverseGamma(shape, rate), dist.transforms.PowerTransform(0.5))


def sample_q(rng_key, state: IBPState, structure: Structure, num_samples: int) -> dict:
    """Draws of the model's latent sites from q (leading ``num_samples`` axis). Every Gamma variate
    (the sticks' Beta as a ratio, the precisions) comes from one `inference.random_draws.log_gammas`
    call: one rejection sampler to compile, not four."""
    keys = jax.random.split(rng_key, 3)
    s, k = num_samples, state.tau1.shape[0]
    shapes = jnp.concatenate([state.tau1, state.tau2, jnp.stack([state.noise_shape, state.feature_shape])])
    dtype = state.phi.dtype
    (log_g,) = random_draws.log_gammas(keys[0], [jnp.broadcast_to(shapes, (s, 2 * k + 2))], dtype)
    g = jnp.maximum(jnp.exp(log_g), jnp.finfo(dtype).tiny)
    sticks = random_draws.beta_from_log_gammas(log_g[:, :k], log_g[:, k:2 * k])
    out = {"sticks": jnp.clip(sticks, jnp.finfo(dtype).tiny, 1.0 - jnp.finfo(dtype).epsneg),
           "z": jax.random.bernoulli(keys[1], state.nu, (s,) + state.nu.shape).astype(jnp.int32)}
    chol = jnp.linalg.cholesky(state.cov)
    eps = jax.random.normal(keys[2], (s,) + state.phi.shape, state.phi.dtype)
    out["features"] = state.phi + jnp.einsum("ij,sjd->sid", chol, eps)
    if structure.learn_noise:  # sigma = tau^-1/2, tau ~ Gamma(shape, rate)
        out["noise_scale"] = jnp.sqrt(state.noise_rate / g[:, 2 * k])
    if structure.learn_features:
        out["feature_scale"] = jnp.sqrt(state.feature_rate / g[:, 2 * k + 1])
    return out


def log_q(values, state: IBPState, structure: Structure):
    """log q at one draw (the model's sites, constrained space)."""
    out = jnp.sum(dist.Beta(state.tau1, state.tau2).log_prob(values["sticks"]))
    out += jnp.sum(dist.Bernoulli(probs=state.nu).log_prob(values["z"]))
    chol = jnp.linalg.cholesky(state.cov)
    out += jnp.sum(dist.MultivariateNormal(state.phi.T, scale_tril=chol).log_prob(values["features"].T))
    if structure.learn_noise:
        out += _scale_dist(state.noise_shape, state.noise_rate).log_prob(values["noise_scale"])
    if structure.learn_features:
        out += _scale_dist(state.feature_shape, state.feature_rate).log_prob(values["feature_scale"])
    return out


def posterior(model, args, kwargs, Y, prior: IBPPrior, truncation: int, *, structure: Structure,
              max_iter: int = 1000, tol: float = 1e-6, num_samples: int = 1000, seed: int = 0,
              num_restarts: int = 5) -> Posterior:
    """Fit by CAVI and return a `Posterior` (engine "vi", evidence the bound) whose draws are the
    model's sites drawn from q, with ``lp`` and ``log_q`` per draw and the pointwise (per row) log
    likelihood given each draw's ``z`` and ``features``."""
    key = jax.random.PRNGKey(seed)
    Y = jnp.asarray(Y, jnp.result_type(float))
    res = fit(Y, prior, truncation, jax.random.fold_in(key, 0), structure=structure, max_iter=max_iter, tol=tol,
              num_restarts=num_restarts)
    state = res.state
    if not bool(jnp.all(jnp.isfinite(state.phi))) or not bool(jnp.isfinite(res.elbo)):
        raise FloatingPointError("IBP CAVI produced a non-finite q: check Y for constant or huge columns and the "
                                 "priors' scales")

    def build(rebuild):
        def run(arrays, rng_key, state):
            a, kw = rebuild(arrays)

            def densities(values):
                lq = log_q(values, state, structure)
                lp, tr = log_density(model, a, kw, values)
                extra = {n: site["value"] for n, site in tr.items() if site["type"] == "deterministic"}
                return {**values, **extra}, lq, lp, tr["Y"]["fn"].log_prob(tr["Y"]["value"])

            return jax.vmap(densities)(sample_q(rng_key, state, structure, num_samples))

        return jax.jit(run)

    # draws and their densities in one program, kept per model structure (the data and q are arguments)
    draws, lq, lp, loglik = compiled.call("ibp-vi-draws", model, args, kwargs, (structure, num_samples), build,
                                          jax.random.fold_in(key, 1), state)
    lq, lp = np.asarray(lq), np.asarray(lp)
    samples = _model.to_chains({k: np.asarray(v) for k, v in draws.items()}, 1)
    iters = int(state.iteration)
    log_w = lp - lq
    diagnostics = {
        "converged": convergence.vi(bool(res.converged), float(res.elbo)), "method": "cavi",
        "elbo": float(res.elbo), "elbo_trace": np.asarray(res.elbo_trace)[:iters], "iterations": iters,
        "num_restarts": num_restarts, "restart_elbos": np.asarray(res.restart_elbos),
        "importance_log_evidence": float(logsumexp(log_w) - np.log(len(log_w))),
    }
    approximation = {f"q_{k}": np.asarray(getattr(state, k)) for k in
                     ("nu", "phi", "cov", "tau1", "tau2", "noise_shape", "noise_rate", "feature_shape", "feature_rate")}
    return Posterior(
        engine="vi", samples=samples, log_likelihood={"Y": np.asarray(loglik)[None]}, observed_data={"Y": np.asarray(Y)},
        sample_stats={"lp": lp[None], "log_q": lq[None]}, log_evidence=float(res.elbo), evidence_method="elbo",
        diagnostics=diagnostics, approximation=approximation, model=model, model_args=args, model_kwargs=kwargs,
        seed=seed, dims={"z": ["point", "feature"], "Y": ["point", "dimension"], "features": ["feature", "dimension"]},
    )


__all__ = ["IBPPrior", "Structure", "IBPState", "FitResult", "elbo", "update", "init", "fit", "sample_q", "log_q",
           "posterior", "expected_log_probs", "multinomial_bound", "expected_ssr"]
