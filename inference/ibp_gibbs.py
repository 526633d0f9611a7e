"""Blocked Gibbs sampling for the linear-Gaussian latent feature model with a truncated stick-breaking
Indian buffet prior (the model of `inference.ibp_vi`; Teh, Gorur & Ghahramani 2007 for the sticks).

One scan, all rows at once:
- each column k of ``z`` in turn: z_nk | rest ~ Bernoulli, log-odds log probs_k - log(1 - probs_k)
  + (y_n . A_k - |A_k|^2 / 2 - sum_{l != k} z_nl A_l . A_k) / noise^2 (rows are independent given
  the features, so a column is one vectorised draw);
- the features jointly: every column of A | z is N(P^-1 Z^T y_d / noise^2, P^-1), P = I /
  feature_scale^2 + Z^T Z / noise^2 (uncollapsed, so a scan costs O(n K^2 + K^3 + n K D));
- each stick in turn by slice sampling on (0, 1) with shrinkage from the whole interval (exact:
  p(v_k | rest) is proportional to v_k^(alpha - 1) prod_{j >= k} probs_j^m_j (1 - probs_j)^(n - m_j));
- the precisions from their Gamma conditionals (when learnt).

Chains start from the mean-field VI fit (`inference.ibp_vi`, best of its random starts), each with
its own draw of ``z`` from q: every chain starts with the same labelling of the features (the
stick-breaking order), so R-hat compares like with like, and away from the poor local modes
(a feature split in two) a random start can take thousands of scans to leave.

Example:
    >>> import jax, numpy as np
    >>> from inference.ibp_gibbs import GibbsState, scan
    >>> from inference.ibp_vi import IBPPrior, Structure
    >>> rng = np.random.default_rng(0)
    >>> A = np.eye(2, 6) * 3; Z = rng.integers(0, 2, (40, 2)); Y = Z @ A + 0.3 * rng.normal(size=(40, 6))
    >>> prior = IBPPrior.create(alpha=1.0, noise_precision=1 / 0.09, feature_precision=1 / 9.0)
    >>> s = GibbsState(Z.astype(float), A, np.array([0.6, 0.9]), np.asarray(1 / 0.09), np.asarray(1 / 9.0))
    >>> s = scan(jax.random.PRNGKey(0), jax.tree.map(np.asarray, s), Y, prior, Structure(False, False))
    >>> float(np.mean(np.asarray(s.z) == Z))
    1.0
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.infer.util import log_density

from inference import compiled, convergence, ibp_vi, random_draws
from inference.posterior import Posterior

MAX_SHRINK = 60  # slice-sampling shrinkage steps per stick (a slice narrower than 2^-60 is accepted as is)


class GibbsState(NamedTuple):
    z: jax.Array  # (n, K) floats in {0, 1}
    features: jax.Array  # (K, D)
    sticks: jax.Array  # (K,)
    noise_precision: jax.Array  # ()
    feature_precision: jax.Array  # ()


def _stick_log_density(v, k, sticks, m, n, alpha):
    """log p(v_k = v | other sticks, z) up to a constant."""
    sticks = sticks.at[k].set(v)
    probs = jnp.cumprod(sticks)
    after = jnp.arange(sticks.shape[0]) >= k
    tiny = jnp.finfo(sticks.dtype).tiny
    terms = m * jnp.log(jnp.maximum(probs, tiny)) + (n - m) * jnp.log(jnp.maximum(1.0 - probs, tiny))
    return (alpha - 1.0) * jnp.log(jnp.maximum(v, tiny)) + jnp.sum(jnp.where(after, terms, 0.0))


def _slice_stick(key, k, sticks, m, n, alpha):
    """One slice-sampling update of stick k on (0, 1), shrinking from the whole interval."""
    key_u, key_s = jax.random.split(key)
    v0 = sticks[k]
    level = _stick_log_density(v0, k, sticks, m, n, alpha) + jnp.log(jax.random.uniform(key_u, (), sticks.dtype))
    eps = jnp.finfo(sticks.dtype).eps

    def cond(c):
        i, lo, hi, v, accepted = c
        return ~accepted & (i < MAX_SHRINK)

    def body(c):
        i, lo, hi, _, _ = c
        v = jnp.clip(jax.random.uniform(jax.random.fold_in(key_s, i), (), sticks.dtype, lo, hi), eps, 1.0 - eps)
        ok = _stick_log_density(v, k, sticks, m, n, alpha) >= level
        lo, hi = jnp.where(v < v0, v, lo), jnp.where(v >= v0, v, hi)
        return i + 1, lo, hi, v, ok

    _, _, _, v, ok = lax.while_loop(cond, body, (0, jnp.zeros((), sticks.dtype), jnp.ones((), sticks.dtype), v0, False))
    return sticks.at[k].set(jnp.where(ok, v, v0))


@functools.partial(jax.jit, static_argnames=("structure",))
def scan(rng_key, state: GibbsState, Y, prior: ibp_vi.IBPPrior, structure: ibp_vi.Structure) -> GibbsState:
    """One Gibbs scan (module docstring)."""
    n, d = Y.shape
    k = state.z.shape[1]
    keys = jax.random.split(rng_key, 5)
    tiny = jnp.finfo(Y.dtype).tiny
    A, tau_x, tau_a = state.features, state.noise_precision, state.feature_precision
    probs = jnp.cumprod(state.sticks)
    prior_logit = jnp.log(jnp.maximum(probs, tiny)) - jnp.log(jnp.maximum(1.0 - probs, tiny))
    G, YA = A @ A.T, Y @ A.T

    def column(j, z):
        others = z @ G[:, j] - z[:, j] * G[j, j]
        logit = prior_logit[j] + tau_x * (YA[:, j] - 0.5 * G[j, j] - others)
        return z.at[:, j].set(jax.random.bernoulli(jax.random.fold_in(keys[0], j), jax.nn.sigmoid(logit)).astype(Y.dtype))

    z = lax.fori_loop(0, k, column, state.z)
    prec = tau_a * jnp.eye(k, dtype=Y.dtype) + tau_x * z.T @ z
    chol = jnp.linalg.cholesky(prec)
    mean = jax.scipy.linalg.cho_solve((chol, True), tau_x * z.T @ Y)
    A = mean + jax.scipy.linalg.solve_triangular(chol, jax.random.normal(keys[1], mean.shape, Y.dtype), lower=True,
                                                 trans="T")
    m = jnp.sum(z, 0)
    sticks = lax.fori_loop(0, k, lambda j, s: _slice_stick(jax.random.fold_in(keys[2], j), j, s, m, n, prior.alpha),
                           state.sticks)
    if structure.learn_noise:
        ssr = jnp.sum((Y - z @ A) ** 2)
        tau_x = random_draws.gamma(keys[3], prior.noise_shape + 0.5 * n * d, dtype=Y.dtype) / (prior.noise_rate + 0.5 * ssr)
    if structure.learn_features:
        tau_a = random_draws.gamma(keys[4], prior.feature_shape + 0.5 * k * d, dtype=Y.dtype) / (
            prior.feature_rate + 0.5 * jnp.sum(A**2))
    return GibbsState(z, A, sticks, tau_x, tau_a)


@functools.partial(jax.jit, static_argnames=("structure", "num_warmup", "num_samples"))
def sample_chains(keys, states: GibbsState, Y, prior, structure, num_warmup: int, num_samples: int) -> GibbsState:
    """Warmup then ``num_samples`` scans per chain (chains vectorised); the kept states, (chain, draw, ...)."""

    def chain(key, state):
        def step(s, i):
            s = scan(jax.random.fold_in(key, i), s, Y, prior, structure)
            return s, s

        state, _ = lax.scan(step, state, jnp.arange(num_warmup))
        _, kept = lax.scan(step, state, num_warmup + jnp.arange(num_samples))
        return kept

    return jax.vmap(chain)(keys, states)


def initial_states(rng_key, Y, prior, truncation, structure, num_chains, num_restarts=20) -> GibbsState:
    """Each chain: the VI fit's (best of ``num_restarts``) sticks, features and precisions at q's
    means, ``z`` drawn from q(z)."""
    res = ibp_vi.fit(Y, prior, truncation, jax.random.fold_in(rng_key, 0), structure=structure,
                     num_restarts=num_restarts)
    q = res.state
    z = jax.random.bernoulli(jax.random.fold_in(rng_key, 1), q.nu, (num_chains,) + q.nu.shape).astype(Y.dtype)
    e_x = q.noise_shape / q.noise_rate if structure.learn_noise else prior.noise_precision
    e_a = q.feature_shape / q.feature_rate if structure.learn_features else prior.feature_precision
    sticks = jnp.clip(q.tau1 / (q.tau1 + q.tau2), 1e-6, 1.0 - 1e-6)
    rep = lambda v: jnp.broadcast_to(jnp.asarray(v, Y.dtype), (num_chains,) + jnp.shape(v))  # noqa: E731
    return GibbsState(z, rep(q.phi), rep(sticks), rep(e_x), rep(e_a))


def posterior(model, args, kwargs, Y, prior, truncation, *, structure, num_samples=1000, num_warmup=1000,
              num_chains=4, seed=0, num_restarts=20) -> Posterior:
    """Run the chains and return a `Posterior` (engine "mcmc") with the model's sites, its log joint
    ``lp`` and the per-row log likelihood at every draw; ``converged`` by `inference.convergence.mcmc`
    over the continuous sites."""
    Y = jnp.asarray(Y, jnp.result_type(float))
    key = jax.random.PRNGKey(seed)
    states = initial_states(jax.random.fold_in(key, 0), Y, prior, truncation, structure, num_chains, num_restarts)
    start = time.perf_counter()
    kept = sample_chains(jax.random.split(jax.random.fold_in(key, 1), num_chains), states, Y, prior, structure,
                         num_warmup, num_samples)
    kept = jax.tree.map(np.asarray, kept)
    seconds = time.perf_counter() - start
    samples = {"sticks": kept.sticks, "z": kept.z.astype(np.int32), "features": kept.features}
    if structure.learn_noise:
        samples["noise_scale"] = kept.noise_precision ** -0.5
    if structure.learn_features:
        samples["feature_scale"] = kept.feature_precision ** -0.5
    flat = {k: jnp.asarray(v.reshape((-1,) + v.shape[2:])) for k, v in samples.items()}

    def build(rebuild):
        def run(arrays, values):
            a, kw = rebuild(arrays)

            def densities(v):
                lp, tr = log_density(model, a, kw, v)
                return lp, tr["Y"]["fn"].log_prob(tr["Y"]["value"]), tr["probs"]["value"]

            return jax.vmap(densities)(values)

        return jax.jit(run)

    lp, loglik, probs = compiled.call("ibp-gibbs-densities", model, args, kwargs, (), build, flat)
    samples["probs"] = np.asarray(probs).reshape(kept.sticks.shape)
    if not (np.all(np.isfinite(kept.features)) and np.all(np.isfinite(np.asarray(lp)))):
        raise FloatingPointError("IBP Gibbs produced non-finite draws: check Y for huge values and the priors' scales")
    chains = lambda v: np.asarray(v).reshape((num_chains, num_samples) + np.shape(v)[1:])  # noqa: E731
    continuous = {k: v for k, v in samples.items() if k != "z"}
    diagnostics = {**convergence.mcmc(continuous), "sampler": "ibp-gibbs", "sampling_seconds": seconds}
    return Posterior(
        engine="mcmc", samples=samples, log_likelihood={"Y": chains(loglik)}, observed_data={"Y": np.asarray(Y)},
        sample_stats={"lp": chains(lp)}, diagnostics=diagnostics, model=model, model_args=args, model_kwargs=kwargs,
        seed=seed, dims={"z": ["point", "feature"], "Y": ["point", "dimension"], "features": ["feature", "dimension"]},
    )


__all__ = ["GibbsState", "scan", "sample_chains", "initial_states", "posterior"]
