"""Coordinate-ascent VI for the conjugate Bayesian Gaussian mixture (Bishop 2006, sec. 10.2; the
stick-breaking weights of Blei & Jordan 2006).

The model (site names as in ``probmodels.gaussian_mixture`` / ``probmodels.dp_mixture``)::

    weights ~ Dirichlet(alpha0 1_K)                                    weights="dirichlet"
    sticks_k ~ Beta(1, alpha), k < K, weights by stick breaking,       weights="stick"
        alpha fixed or ~ Gamma(shape, rate) (learn_concentration)
    cov_k ~ InverseWishart(nu0, Psi0), locs_k | cov_k ~ N(m0, cov_k / beta0)          covariance="full"
    var_kj ~ InverseGamma(nu0 / 2, Psi0_j / 2), locs_kj | var ~ N(m0_j, var_kj / beta0),
        scales = sqrt(var)                                                            covariance="diag"
    x_n ~ sum_k weights_k N(locs_k, cov_k)

The variational family is q(z) prod_k q(locs_k, cov_k) q(weights) [q(alpha)] with conjugate
factors (Normal-inverse-Wishart / Normal-inverse-gamma, Dirichlet / Beta, Gamma). One `update` is
a sweep: responsibilities from q(theta), then every q(theta) block in turn; each step is the exact
maximiser of the ELBO in its block, so the ELBO never decreases. The ELBO is computed with q(z)
optimal, ``sum_n logsumexp_k log rho_nk - KL(q(theta) || p(theta))``. The data are standardised
inside (the prior is affine-equivariant), so velocities of 2e4 km/s and unit-scale data behave
alike; results are mapped back exactly, the ELBO included.

Example:
    >>> import jax, numpy as np
    >>> from inference.mixture_cavi import MixturePrior, Structure, fit
    >>> X = np.r_[np.random.default_rng(0).normal(-3, 1, (50, 1)), np.random.default_rng(1).normal(3, 1, (50, 1))]
    >>> prior = MixturePrior.create(loc=[0.0], strength=0.01, df=3.0, scale=[[1.0]], concentration=1.0)
    >>> res = fit(X, prior, 2, jax.random.PRNGKey(0), structure=Structure("full", "dirichlet", False))
    >>> np.sort(np.round(np.asarray(res.state.loc[:, 0])))
    array([-3.,  3.])
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import lax
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import betaln, digamma, gammaln, logsumexp, multigammaln
from numpyro.infer.util import log_density

from inference import _model, compiled, convergence, random_draws
from inference.posterior import Posterior
from inference.trace_reading import unwrap

LOG_2PI = math.log(2.0 * math.pi)
MAX_EXACT_PERMUTATIONS = 6  # ordered models: log q sums over K! relabellings up to this K


class MixturePrior(NamedTuple):
    """Conjugate prior hyperparameters (arrays only)."""

    loc: jax.Array  # (d,) m0
    strength: jax.Array  # () beta0: locs_k | cov_k ~ N(m0, cov_k / beta0)
    df: jax.Array  # () nu0
    scale: jax.Array  # (d, d) Psi0, or (d,) its diagonal for covariance="diag"
    concentration: jax.Array  # () Dirichlet alpha0, or the fixed DP concentration
    concentration_shape: jax.Array  # () Gamma prior of a learned DP concentration
    concentration_rate: jax.Array

    @classmethod
    def create(cls, loc, strength, df, scale, concentration=1.0, concentration_shape=1.0,
               concentration_rate=1.0) -> "MixturePrior":
        f = lambda v: jnp.asarray(v, dtype=jnp.result_type(float))  # noqa: E731
        return cls(f(loc), f(strength), f(df), f(scale), f(concentration), f(concentration_shape),
                   f(concentration_rate))


class Structure(NamedTuple):
    """What is fixed when the update is built: ``covariance`` ("full" | "diag"), ``weights``
    ("dirichlet" | "stick") and whether the DP concentration has a Gamma prior."""

    covariance: str
    weights: str
    learn_concentration: bool = False


class CaviState(NamedTuple):
    """Parameters of q(theta) and the ELBO bookkeeping."""

    weight_a: jax.Array  # (K,) Dirichlet parameters, or (K-1,) first Beta parameters of the sticks
    weight_b: jax.Array  # (K-1,) second Beta parameters of the sticks ((K,) zeros for Dirichlet)
    conc_shape: jax.Array  # () q(alpha) = Gamma(shape, rate) when learned
    conc_rate: jax.Array
    loc: jax.Array  # (K, d) m_k
    strength: jax.Array  # (K,) beta_k
    df: jax.Array  # (K,) nu_k
    scale: jax.Array  # (K, d, d) Psi_k, or (K, d)
    elbo: jax.Array  # ELBO of the q(theta) this sweep started from
    prev_elbo: jax.Array
    iteration: jax.Array


class CaviResult(NamedTuple):
    state: CaviState  # in the data's own units
    elbo: jax.Array  # ELBO of the final q(theta) (a lower bound on log p(X))
    elbo_trace: jax.Array  # (TRACE_LENGTH,): ELBO of the first sweeps, NaN past the last
    converged: jax.Array
    restart_elbos: jax.Array  # (num_restarts,)


# ----------------------------------------------------------------------------- expectations
def _alpha_moments(state, prior, structure):
    """E[alpha], E[log alpha] of the DP concentration."""
    if structure.learn_concentration:
        return state.conc_shape / state.conc_rate, digamma(state.conc_shape) - jnp.log(state.conc_rate)
    return prior.concentration, jnp.log(prior.concentration)


def expected_log_weights(state, structure):
    """E_q[log weights_k], (K,)."""
    if structure.weights == "dirichlet":
        return digamma(state.weight_a) - digamma(jnp.sum(state.weight_a))
    a, b = state.weight_a, state.weight_b
    e_log_v, e_log_1mv = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
    return jnp.concatenate([e_log_v, jnp.zeros(1)]) + jnp.concatenate([jnp.zeros(1), jnp.cumsum(e_log_1mv)])


def expected_weights(state, structure):
    """E_q[weights], (K,)."""
    if structure.weights == "dirichlet":
        return state.weight_a / jnp.sum(state.weight_a)
    ev = state.weight_a / (state.weight_a + state.weight_b)
    rest = jnp.concatenate([jnp.ones(1), jnp.cumprod(1.0 - ev)])
    return jnp.concatenate([ev, jnp.ones(1)]) * rest


def _component_terms(X, state, structure):
    """(E log|Lambda_k|, E[(x_n - mu_k)' Lambda_k (x_n - mu_k)]) with shapes (K,), (n, K)."""
    d = X.shape[1]
    nu, beta = state.df, state.strength
    if structure.covariance == "full":
        chol = jnp.linalg.cholesky(state.scale)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
        e_logdet = jnp.sum(digamma(0.5 * (nu[:, None] - jnp.arange(d))), -1) + d * jnp.log(2.0) - logdet
        # L_k^{-1} (x_n - m_k) as one matmul of X with the stacked inverse factors: much faster
        # on CPU than a batched triangular solve with n right-hand sides.
        inv = solve_triangular(chol, jnp.broadcast_to(jnp.eye(d, dtype=X.dtype), chol.shape), lower=True)
        k = inv.shape[0]
        y = (X @ jnp.transpose(inv, (2, 0, 1)).reshape(d, k * d)).reshape(-1, k, d)  # (n, K, d)
        y = y - jnp.einsum("kj,kij->ki", state.loc, inv)[None]
        maha = jnp.sum(y**2, axis=-1).T  # (K, n)
    else:
        e_logdet = jnp.sum(digamma(0.5 * nu)[:, None] + jnp.log(2.0) - jnp.log(state.scale), -1)
        maha = jnp.einsum("knj,kj->kn", (X[None] - state.loc[:, None]) ** 2, 1.0 / state.scale)
    quad = d / beta[None, :] + nu[None, :] * maha.T
    return e_logdet, quad


def log_rho(X, state, structure):
    """Unnormalised log responsibilities, (n, K)."""
    e_logdet, quad = _component_terms(X, state, structure)
    d = X.shape[1]
    return expected_log_weights(state, structure)[None] + 0.5 * e_logdet[None] - 0.5 * d * LOG_2PI - 0.5 * quad


@functools.partial(jax.jit, static_argnames=("structure",))
def responsibilities(X, state, structure):
    """q(z_n = k), (n, K)."""
    return jax.nn.softmax(log_rho(X, state, structure), axis=-1)


# ----------------------------------------------------------------------------- KL terms
def _kl_components(state, prior, structure):
    """KL(q(locs_k, cov_k) || p(locs_k, cov_k)) per component, (K,)."""
    nu, beta, nu0, beta0 = state.df, state.strength, prior.df, prior.strength
    dm = state.loc - prior.loc
    if structure.covariance == "full":
        d = state.loc.shape[1]
        chol = jnp.linalg.cholesky(state.scale)
        chol0 = jnp.linalg.cholesky(prior.scale)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
        logdet0 = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol0)))
        tr = jnp.sum(solve_triangular(chol, jnp.broadcast_to(chol0, chol.shape), lower=True) ** 2, (-2, -1))
        maha = jnp.sum(solve_triangular(chol, dm[..., None], lower=True)[..., 0] ** 2, -1)
        mvdig = jnp.sum(digamma(0.5 * (nu[:, None] - jnp.arange(d))), -1)
        kl_w = (0.5 * (nu - nu0) * mvdig + 0.5 * nu * (tr - d) - 0.5 * nu0 * (logdet0 - logdet)
                + multigammaln(0.5 * nu0, d) - multigammaln(0.5 * nu, d))
        kl_n = 0.5 * (d * beta0 / beta - d + d * jnp.log(beta / beta0) + beta0 * nu * maha)
        return kl_w + kl_n
    nu_, beta_ = nu[:, None], beta[:, None]
    kl_w = (0.5 * (nu_ - nu0) * digamma(0.5 * nu_) + 0.5 * nu_ * (prior.scale / state.scale - 1.0)
            - 0.5 * nu0 * (jnp.log(prior.scale) - jnp.log(state.scale)) + gammaln(0.5 * nu0) - gammaln(0.5 * nu_))
    kl_n = 0.5 * (beta0 / beta_ - 1.0 + jnp.log(beta_ / beta0) + beta0 * nu_ * dm**2 / state.scale)
    return jnp.sum(kl_w + kl_n, -1)


def _weights_term(state, prior, structure):
    """E_q[log p(weights [, alpha])] - E_q[log q(weights [, alpha])]."""
    if structure.weights == "dirichlet":
        a, a0 = state.weight_a, prior.concentration
        k = a.shape[0]
        e_log = digamma(a) - digamma(jnp.sum(a))
        kl = (gammaln(jnp.sum(a)) - jnp.sum(gammaln(a)) - gammaln(k * a0) + k * gammaln(a0)
              + jnp.sum((a - a0) * e_log))
        return -kl
    a, b = state.weight_a, state.weight_b
    e_alpha, e_log_alpha = _alpha_moments(state, prior, structure)
    e_log_1mv = digamma(b) - digamma(a + b)
    entropy = betaln(a, b) - (a - 1) * digamma(a) - (b - 1) * digamma(b) + (a + b - 2) * digamma(a + b)
    term = jnp.sum(e_log_alpha + (e_alpha - 1.0) * e_log_1mv + entropy)
    if structure.learn_concentration:
        w1, w2, s1, s2 = state.conc_shape, state.conc_rate, prior.concentration_shape, prior.concentration_rate
        kl_gamma = (w1 - s1) * digamma(w1) - gammaln(w1) + gammaln(s1) + s1 * (jnp.log(w2) - jnp.log(s2)) + w1 * (s2 - w2) / w2
        term = term - kl_gamma
    return term


@functools.partial(jax.jit, static_argnames=("structure",))
def elbo(X, prior, state, structure):
    """ELBO of q(theta) with q(z) at its optimum."""
    data = jnp.sum(logsumexp(log_rho(X, state, structure), axis=-1))
    return data - jnp.sum(_kl_components(state, prior, structure)) + _weights_term(state, prior, structure)


# ----------------------------------------------------------------------------- updates
def _update_theta(X, r, prior, state, structure):
    """Every q(theta) block given responsibilities ``r`` (n, K), in ELBO-ascending order."""
    counts = jnp.sum(r, axis=0)
    xbar = (r.T @ X) / jnp.maximum(counts, 1e-300)[:, None]
    beta = prior.strength + counts
    nu = prior.df + counts
    loc = (prior.strength * prior.loc + counts[:, None] * xbar) / beta[:, None]
    dm = xbar - prior.loc
    coef = (prior.strength * counts / beta)
    if structure.covariance == "full":
        # sum_n r_nk (x_n - xbar_k)(x_n - xbar_k)' = sum_n r_nk x_n x_n' - N_k xbar_k xbar_k': one
        # matmul (the data are standardised inside `fit`, so the difference loses little precision).
        d = X.shape[1]
        second = (r.T @ (X[:, :, None] * X[:, None, :]).reshape(X.shape[0], d * d)).reshape(-1, d, d)
        scatter = second - counts[:, None, None] * xbar[:, :, None] * xbar[:, None, :]
        scale = prior.scale + scatter + coef[:, None, None] * dm[:, :, None] * dm[:, None, :]
        scale = 0.5 * (scale + jnp.swapaxes(scale, -1, -2))
    else:
        diff = X[None] - xbar[:, None]  # (K, n, d)
        scale = prior.scale + jnp.einsum("nk,kni->ki", r, diff**2) + coef[:, None] * dm**2
    state = state._replace(loc=loc, strength=beta, df=nu, scale=scale)
    if structure.weights == "dirichlet":
        return state._replace(weight_a=prior.concentration + counts)
    e_alpha, _ = _alpha_moments(state, prior, structure)
    tail = jnp.cumsum(counts[::-1])[::-1]  # tail[k] = sum_{j >= k} counts_j
    a, b = 1.0 + counts[:-1], e_alpha + tail[1:]
    state = state._replace(weight_a=a, weight_b=b)
    if structure.learn_concentration:
        e_log_1mv = digamma(b) - digamma(a + b)
        state = state._replace(conc_shape=prior.concentration_shape + a.shape[0],
                               conc_rate=prior.concentration_rate - jnp.sum(e_log_1mv))
    return state


@functools.partial(jax.jit, static_argnames=("structure",))
def update(X, prior, state, structure):
    """One sweep: q(z) from q(theta), then q(theta) from q(z). ``state.elbo`` becomes the ELBO of
    the q(theta) the sweep started from (computed on the way, at no extra cost)."""
    lr = log_rho(X, state, structure)
    lse = logsumexp(lr, axis=-1)
    value = jnp.sum(lse) - jnp.sum(_kl_components(state, prior, structure)) + _weights_term(state, prior, structure)
    r = jnp.exp(lr - lse[:, None])
    new = _update_theta(X, r, prior, state, structure)
    return new._replace(elbo=value, prev_elbo=state.elbo, iteration=state.iteration + 1)


@functools.partial(jax.jit, static_argnames=("num_components", "num_iter"))
def kmeans_responsibilities(rng_key, X, num_components, num_iter: int = 10):
    """Hard responsibilities (n, K) from k-means++ seeding and ``num_iter`` Lloyd steps."""
    n = X.shape[0]
    key0, key = jax.random.split(rng_key)
    first = X[jax.random.randint(key0, (), 0, n)]
    centers = jnp.zeros((num_components, X.shape[1]), X.dtype).at[0].set(first)
    d2 = jnp.sum((X - first) ** 2, -1)

    def seed_step(i, carry):
        centers, d2 = carry
        pick = X[jax.random.categorical(jax.random.fold_in(key, i), jnp.log(d2 + 1e-12))]
        return centers.at[i].set(pick), jnp.minimum(d2, jnp.sum((X - pick) ** 2, -1))

    centers, _ = lax.fori_loop(1, num_components, seed_step, (centers, d2))

    def assign(centers):
        return jnp.argmin(jnp.sum((X[:, None] - centers[None]) ** 2, -1), axis=1)

    def lloyd(_, centers):
        onehot = jax.nn.one_hot(assign(centers), num_components, dtype=X.dtype)
        counts = onehot.sum(0)
        means = onehot.T @ X / jnp.maximum(counts, 1.0)[:, None]
        return jnp.where(counts[:, None] > 0, means, centers)

    centers = lax.fori_loop(0, num_iter, lloyd, centers)
    return jax.nn.one_hot(assign(centers), num_components, dtype=X.dtype)


@functools.partial(jax.jit, static_argnames=("num_components", "structure"))
def init(rng_key, X, prior, num_components, structure):
    """q(theta) from k-means responsibilities."""
    k, d = num_components, X.shape[1]
    nw = 1 if structure.weights == "stick" else 0
    scale_shape = (k, d, d) if structure.covariance == "full" else (k, d)
    zero = jnp.zeros((), X.dtype)
    state = CaviState(
        weight_a=jnp.ones(k - nw, X.dtype), weight_b=jnp.ones(k - nw, X.dtype) if nw else jnp.zeros(k, X.dtype),
        conc_shape=prior.concentration_shape, conc_rate=prior.concentration_rate,
        loc=jnp.zeros((k, d), X.dtype), strength=jnp.ones(k, X.dtype), df=jnp.ones(k, X.dtype),
        scale=jnp.zeros(scale_shape, X.dtype), elbo=-jnp.inf + zero, prev_elbo=-jnp.inf + zero,
        iteration=jnp.zeros((), jnp.int32))
    r = kmeans_responsibilities(rng_key, X, k)
    return _update_theta(X, r, prior, state, structure)


# ----------------------------------------------------------------------------- driver
def _standardise(X, prior, structure):
    shift = jnp.mean(X, 0)
    spread = jnp.std(X, 0)
    spread = jnp.where(spread > 0, spread, 1.0)
    Xs = (X - shift) / spread
    outer = spread[:, None] * spread[None, :] if structure.covariance == "full" else spread**2
    prior_s = prior._replace(loc=(prior.loc - shift) / spread, scale=prior.scale / outer)
    return Xs, prior_s, shift, spread, outer


TRACE_LENGTH = 1000  # sweeps whose ELBO is kept in the trace (a static buffer size)


@functools.partial(jax.jit, static_argnames=("num_components", "structure"))
def _fit_one(X, prior, num_components, rng_key, structure, max_iter, tol):
    """One k-means++ start, standardised data; returns (state, trace, final ELBO, converged).
    ``max_iter`` and ``tol`` are traced: one compilation serves every setting of them."""
    n = X.shape[0]
    Xs, prior_s, shift, spread, outer = _standardise(X, prior, structure)
    state = init(rng_key, Xs, prior_s, num_components, structure)

    def cond(carry):
        s, _ = carry
        small = jnp.abs(s.elbo - s.prev_elbo) <= tol * n
        return (s.iteration < max_iter) & ~((s.iteration >= 2) & small)

    def body(carry):
        s, trace = carry
        s = update(Xs, prior_s, s, structure)
        return s, trace.at[s.iteration - 1].set(s.elbo, mode="drop")  # sweeps past the buffer: dropped

    state, trace = lax.while_loop(cond, body, (state, jnp.full((TRACE_LENGTH,), jnp.nan, X.dtype)))
    converged = jnp.abs(state.elbo - state.prev_elbo) <= tol * n
    final = elbo(Xs, prior_s, state, structure)
    jac = n * jnp.sum(jnp.log(spread))  # log-density change of the data under standardisation
    state = state._replace(loc=shift + spread * state.loc, scale=state.scale * outer,
                           elbo=state.elbo - jac, prev_elbo=state.prev_elbo - jac)
    return state, trace - jac, final - jac, converged


def fit(X, prior, num_components, rng_key, *, structure, max_iter: int = 1000, tol=1e-6,
        num_restarts: int = 1) -> CaviResult:
    """Run `update` under ``lax.while_loop`` until the ELBO gains less than ``tol`` nats per data
    point in a sweep (``tol`` and ``max_iter`` are traced: no recompile when tuning them; ``tol = 1e-3 / n`` is
    scikit-learn's rule), from ``num_restarts`` k-means++ starts (one compiled start, run in turn;
    start i uses key i of ``jax.random.split(rng_key, num_restarts)``); keep the start with the best
    final ELBO (the objective itself, no held-out data: a mixture's ELBO has many local optima, tens
    of nats apart on 200 points, so a few starts pay). The data are standardised inside and the
    result mapped back."""
    if isinstance(num_restarts, bool) or not isinstance(num_restarts, (int, np.integer)) or num_restarts < 1:
        raise ValueError(f"num_restarts must be a positive integer, got {num_restarts!r}")
    X = jnp.asarray(X, jnp.result_type(float))
    tol = jnp.asarray(tol, X.dtype)
    max_iter = jnp.asarray(max_iter, jnp.int32)
    runs = [_fit_one(X, prior, num_components, key, structure, max_iter, tol)
            for key in jax.random.split(rng_key, num_restarts)]
    finals = jnp.stack([r[2] for r in runs])
    best = int(jnp.argmax(jnp.where(jnp.isfinite(finals), finals, -jnp.inf)))
    state, trace, final, converged = runs[best]
    return CaviResult(state, final, trace, converged, finals)


# ----------------------------------------------------------------------------- q as draws
def _component_dists(state, structure):
    if structure.covariance == "full":
        return dist.InverseWishart(state.df, scale_matrix=state.scale)
    base = dist.InverseGamma(0.5 * state.df[:, None], 0.5 * state.scale)
    return dist.TransformedDistribution(base, dist.transforms.PowerTransform(0.5))


@functools.partial(jax.jit, static_argnames=("structure", "num_samples"))
def sample_q(rng_key, state, structure, num_samples: int) -> dict:
    """Draws of the model's latent sites from q: ``weights`` or ``sticks`` [``concentration``],
    ``locs``, ``cov`` or ``scales``; each with a leading ``num_samples`` axis. Every Gamma-family
    variate (the Bartlett chi-squares of the inverse Wishart, the inverse gammas, Dirichlet, Beta
    and Gamma) comes from one `inference.random_draws.log_gammas` call: NumPyro's samplers
    compiled one rejection sampler each (1.5 s of a 2-s program for the DP mixture)."""
    k_gamma, k_loc, k_tril = jax.random.split(rng_key, 3)
    dtype = state.loc.dtype
    k, d = state.loc.shape
    s = num_samples
    if structure.covariance == "full":  # Bartlett: chi-square(df - i) = 2 Gamma((df - i) / 2)
        spread_a = 0.5 * (state.df[:, None] - jnp.arange(d, dtype=dtype))
    else:
        spread_a = jnp.broadcast_to(0.5 * state.df[:, None], (k, d))
    shapes = [jnp.broadcast_to(spread_a, (s, k, d)), jnp.broadcast_to(state.weight_a, (s,) + state.weight_a.shape)]
    if structure.weights != "dirichlet":
        shapes.append(jnp.broadcast_to(state.weight_b, (s,) + state.weight_b.shape))
        if structure.learn_concentration:
            shapes.append(jnp.broadcast_to(state.conc_shape, (s,)))
    log_g = random_draws.log_gammas(k_gamma, shapes, dtype)
    eps = jax.random.normal(k_loc, (s, k, d), dtype)
    root = jnp.sqrt(state.strength)[:, None]
    out = {}
    if structure.covariance == "full":
        # cov ~ IW(df, Psi) is W^-1 with W ~ Wishart(df, Psi^-1) = C^-T A A^T C^-1 (Psi = C C^T,
        # A lower triangular, chi-square roots on its diagonal, standard normals below): cov = B B^T
        # with B = C A^-T, and B eps / sqrt(strength) has covariance cov / strength
        below = jnp.tril(jax.random.normal(k_tril, (s, k, d, d), dtype), -1)
        A = below + jnp.sqrt(2.0 * jnp.exp(log_g[0]))[..., None] * jnp.eye(d, dtype=dtype)
        C = jnp.linalg.cholesky(state.scale)
        A_inv = solve_triangular(A, jnp.broadcast_to(jnp.eye(d, dtype=dtype), A.shape), lower=True)
        B = C @ jnp.swapaxes(A_inv, -1, -2)
        cov = B @ jnp.swapaxes(B, -1, -2)
        out["cov"] = 0.5 * (cov + jnp.swapaxes(cov, -1, -2))
        out["locs"] = state.loc + jnp.einsum("skij,skj->ski", B, eps) / root
    else:  # var ~ InverseGamma(df / 2, scale / 2) = (scale / 2) / Gamma(df / 2)
        out["scales"] = jnp.sqrt(0.5 * state.scale * jnp.exp(-log_g[0]))
        out["locs"] = state.loc + out["scales"] * eps / root
    if structure.weights == "dirichlet":
        out["weights"] = jax.nn.softmax(log_g[1], axis=-1)
    else:
        out["sticks"] = random_draws.beta_from_log_gammas(log_g[1], log_g[2])
        if structure.learn_concentration:
            out["concentration"] = jnp.exp(log_g[3]) / state.conc_rate
    return out


def _component_log_q(values, state, structure):
    """log q of each component's (locs, cov | scales) and weight factor: (..., K), plus the
    constant part of the weights' density."""
    if structure.covariance == "full":
        comp = _component_dists(state, structure).log_prob(values["cov"])
        chol = jnp.linalg.cholesky(values["cov"]) / jnp.sqrt(state.strength)[:, None, None]
        comp = comp + dist.MultivariateNormal(state.loc, scale_tril=chol).log_prob(values["locs"])
    else:
        comp = jnp.sum(_component_dists(state, structure).log_prob(values["scales"]), -1)
        sd = values["scales"] / jnp.sqrt(state.strength)[:, None]
        comp = comp + jnp.sum(dist.Normal(state.loc, sd).log_prob(values["locs"]), -1)
    return comp


@functools.partial(jax.jit, static_argnames=("structure",))
def log_q(values, state, structure):
    """log q at one draw (same sites and space as the model's log joint)."""
    total = jnp.sum(_component_log_q(values, state, structure))
    if structure.weights == "dirichlet":
        total = total + dist.Dirichlet(state.weight_a).log_prob(values["weights"])
    else:
        total = total + jnp.sum(dist.Beta(state.weight_a, state.weight_b).log_prob(values["sticks"]))
        if structure.learn_concentration:
            total = total + dist.Gamma(state.conc_shape, state.conc_rate).log_prob(values["concentration"])
    return total


def sort_components(values, structure):
    """Relabel one draw so that ``locs[:, 0]`` increases (the ordered model's labelling)."""
    order = jnp.argsort(values["locs"][:, 0])
    keys = ("weights", "locs", "cov", "scales")
    return {k: (v[order] if k in keys else v) for k, v in values.items()}


@functools.partial(jax.jit, static_argnames=("structure",))
def log_q_ordered(values, state, structure):
    """log density at a sorted draw of the sorted q: sum over the K! relabellings of q (exact for
    K <= MAX_EXACT_PERMUTATIONS; beyond, the best single relabelling, a lower bound)."""
    k = state.loc.shape[0]
    comps = {n: v for n, v in values.items() if n in ("locs", "cov", "scales")}
    # F[i, j]: log q_i at the draw's component j.
    per = jax.vmap(lambda j: _component_log_q(
        {n: jnp.broadcast_to(v[j], v.shape) for n, v in comps.items()}, state, structure), out_axes=1)(jnp.arange(k))
    a = state.weight_a
    const = gammaln(jnp.sum(a)) - jnp.sum(gammaln(a))
    per = per + (a[:, None] - 1.0) * jnp.log(values["weights"])[None, :]
    if k <= MAX_EXACT_PERMUTATIONS:
        perms = jnp.asarray(list(itertools.permutations(range(k))))
        terms = jnp.sum(per[jnp.arange(k)[None, :], perms], -1)
        return const + logsumexp(terms)
    order = jnp.argsort(jnp.argsort(state.loc[:, 0]))
    return const + jnp.sum(per[jnp.arange(k), order])


@functools.partial(jax.jit, static_argnames=("structure",))
def log_predictive(X_new, state, structure):
    """log of the variational predictive density at each row of ``X_new`` (m,): a mixture of
    Student-t densities with weights E_q[weights] (Bishop eq. 10.81)."""
    X_new = jnp.asarray(X_new, state.loc.dtype)
    d = state.loc.shape[1]
    beta, nu = state.strength, state.df
    logw = jnp.log(expected_weights(state, structure))
    if structure.covariance == "full":
        df = nu + 1.0 - d
        sc = state.scale * ((1.0 + beta) / (beta * df))[:, None, None]
        comp = dist.MultivariateStudentT(df, state.loc, jnp.linalg.cholesky(sc)).log_prob(X_new[:, None])
    else:
        sc = jnp.sqrt(state.scale * ((1.0 + beta) / (beta * nu))[:, None])
        comp = jnp.sum(dist.StudentT(nu[:, None], state.loc, sc).log_prob(X_new[:, None]), -1)
    return logsumexp(logw + comp, axis=-1)


def posterior(model, args, kwargs, X, prior: MixturePrior, num_components: int, *, structure: Structure,
              ordered: bool = False, max_iter: int = 1000, tol: float = 1e-6, num_samples: int = 1000,
              seed: int = 0, num_restarts: int = 4) -> Posterior:
    """Fit by CAVI and return a `Posterior` (engine "vi", evidence the ELBO) whose draws are the
    model's sites drawn from q, with ``lp`` and ``log_q`` per draw and ``z`` recovered."""
    key = jax.random.PRNGKey(seed)
    X = jnp.asarray(X, jnp.result_type(float))
    res = fit(X, prior, num_components, jax.random.fold_in(key, 0), structure=structure,
              max_iter=max_iter, tol=tol, num_restarts=num_restarts)
    state = res.state
    if not bool(jnp.all(jnp.isfinite(state.loc))) or not bool(jnp.isfinite(res.elbo)):
        raise FloatingPointError("CAVI produced a non-finite q: check X for constant or duplicated columns "
                                 "and the prior's scale")
    if ordered:  # relabel q itself (a product over components, so exactly) to the sorted order
        order = jnp.argsort(state.loc[:, 0])
        state = state._replace(loc=state.loc[order], strength=state.strength[order], df=state.df[order],
                               scale=state.scale[order], weight_a=state.weight_a[order])
    draws = sample_q(jax.random.fold_in(key, 1), state, structure, num_samples)
    keys = jax.random.split(jax.random.fold_in(key, 2), num_samples)

    # one program per model structure, q and the data its arguments (`inference.compiled`): a
    # closure over them was compiled again on every fit (3.5 s of a 100-point refit's 5 s)
    draws, lq, lp, loglik = compiled.call("cavi-densities", model, args, kwargs, (structure, bool(ordered)),
                                          functools.partial(_densities_program, model, structure, bool(ordered)),
                                          draws, keys, state, X)
    lq, lp = np.asarray(lq), np.asarray(lp)
    samples = _model.to_chains({k: np.asarray(v) for k, v in draws.items()}, 1)
    observed = {"X": np.asarray(X)}
    loglik = {"X": np.asarray(loglik)[None]}
    iters = int(state.iteration)
    log_w = lp - lq
    diagnostics = {
        "converged": convergence.vi(bool(res.converged), float(res.elbo)), "method": "cavi", "elbo": float(res.elbo),
        "elbo_trace": np.asarray(res.elbo_trace)[:iters], "iterations": iters, "num_restarts": num_restarts,
        "restart_elbos": np.asarray(res.restart_elbos), "covariance": structure.covariance,
        "weights": structure.weights, "learn_concentration": structure.learn_concentration,
        "importance_log_evidence": float(logsumexp(log_w) - np.log(len(log_w))),
    }
    approximation = {f"q_{k}": np.asarray(getattr(state, k)) for k in
                     ("weight_a", "weight_b", "conc_shape", "conc_rate", "loc", "strength", "df", "scale")}
    return Posterior(
        engine="vi", samples=samples, log_likelihood=loglik, observed_data=observed,
        sample_stats={"lp": lp[None], "log_q": lq[None]}, log_evidence=float(res.elbo), evidence_method="elbo",
        diagnostics=diagnostics, approximation=approximation, model=model, model_args=args,
        model_kwargs=kwargs, seed=seed,
        dims={"z": ["point"], "X": ["point", "feature"]},
    )


def _densities_program(model, structure, ordered, rebuild):
    """``run(arrays, draws, keys, state, X)``: per draw of q, the relabelled draw with its
    deterministic sites and recovered ``z`` (z | theta, X, as the model recovers it), log q, the
    model's log joint and each row's log likelihood (the model's own mixture density)."""
    def run(arrays, draws, keys, state, X):
        args, kwargs = rebuild(arrays)

        def densities(values, rng_key):
            if ordered:
                values = sort_components(values, structure)
                lq = log_q_ordered(values, state, structure)
            else:
                lq = log_q(values, state, structure)
            lp, tr = log_density(model, args, kwargs, values)
            extra = {n: site["value"] for n, site in tr.items() if site["type"] == "deterministic"}
            comp = unwrap(tr["X"]["fn"]).component_log_probs(X)  # (n, K): log w_k + log N(x_n | component k)
            extra["z"] = jax.random.categorical(rng_key, comp, axis=-1)
            return {**values, **extra}, lq, lp, logsumexp(comp, axis=-1)

        return jax.vmap(densities)(draws, keys)

    return jax.jit(run)



def state_from_posterior(post: Posterior) -> tuple[CaviState, Structure]:
    """The q of a CAVI `Posterior` (also after `inference.load`), for `log_predictive`."""
    a = post.approximation
    if "q_loc" not in a:
        raise ValueError("post: not a CAVI posterior (no q_loc in its approximation)")
    zero = jnp.zeros(())
    state = CaviState(*(jnp.asarray(a[f"q_{k}"]) for k in ("weight_a", "weight_b", "conc_shape", "conc_rate",
                                                           "loc", "strength", "df", "scale")),
                      elbo=zero, prev_elbo=zero, iteration=jnp.zeros((), jnp.int32))
    d = post.diagnostics
    return state, Structure(d["covariance"], d["weights"], bool(d["learn_concentration"]))
