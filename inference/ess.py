"""Reference MCMC for latent-GP models whose likelihood has no gradient (the Bayes machine).

Elliptical slice sampling (Murray, Adams & MacKay 2010) updates the latent ``f ~ N(m0, K)`` given
the noise rate: it needs only likelihood evaluations and no step size, and every proposal stays on
an ellipse through the current state and a prior draw, so the Gaussian prior is respected exactly.
The noise rate gets an exact Gibbs update: with a ``Beta(a0, b0)`` prior and ``k`` labels that
disagree with ``sign(f)`` out of ``n``, ``eps | f, y ~ Beta(a0 + k, b0 + n - k)``.

Layers as in BlackJAX: ``init`` and ``step(rng_key, state, ...) -> (state, info)`` are pure
functions over NamedTuples; ``sample_chain`` drives them with ``lax.scan``; ``mcmc_posterior`` is
what ``inference.mcmc`` calls for a model with a `NoisyStep` likelihood.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.gp import bayes_machine
    >>> X = np.random.default_rng(0).uniform(-1, 1, (20, 1)); y = X[:, 0] > 0
    >>> post = inference.mcmc(bayes_machine, X, y, num_samples=200, num_warmup=100, num_chains=2,
    ...                       progress=False)
    >>> post.samples["eps"].shape
    (2, 200)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference import _model, random_draws
from inference import progress as progress_bar
from inference import convergence as _convergence
from inference.bayes_machine_model import bayes_machine_parts, jittered_cholesky
from inference.bayes_machine_model import predictor as bm_predictor
from inference.posterior import Posterior

MAX_SHRINKS = 100


class ESSState(NamedTuple):
    f: jax.Array  # (n,) latent values (prior mean included)
    eps: jax.Array  # noise rate
    log_lik: jax.Array


class ESSInfo(NamedTuple):
    num_shrinks: jax.Array  # bracket shrinks before acceptance
    num_disagree: jax.Array  # labels that disagree with sign(f)


def _disagree(f, t):
    """Labels whose sign differs from sign(f) (f = 0 counts as negative, as in NoisyStep)."""
    return jnp.sum((t > 0) != (f > 0))


def step_log_lik(f, eps, t):
    """log prod_i [eps + (1 - 2 eps) step(t_i f_i)] (``-inf`` if eps = 0 and a label disagrees)."""
    k = _disagree(f, t)
    return (t.shape[0] - k) * jnp.log1p(-eps) + jnp.where(k > 0, k * jnp.log(jnp.where(k > 0, eps, 1.0)), 0.0)


def init(f, eps, t) -> ESSState:
    return ESSState(f, eps, step_log_lik(f, eps, t))


def step(rng_key, state: ESSState, chol_K, prior_mean, t, a0, b0, *, learn: bool):
    """One elliptical slice update of ``f`` then (if ``learn``) a Gibbs draw of ``eps``."""
    k_nu, k_u, k_theta, k_shrink, k_eps = jax.random.split(rng_key, 5)
    g = state.f - prior_mean
    nu = chol_K @ jax.random.normal(k_nu, g.shape, g.dtype)
    log_y = state.log_lik + jnp.log(jax.random.uniform(k_u, dtype=g.dtype))
    theta = jax.random.uniform(k_theta, minval=0.0, maxval=2 * jnp.pi, dtype=g.dtype)

    def propose(theta):
        f = prior_mean + g * jnp.cos(theta) + nu * jnp.sin(theta)
        return f, step_log_lik(f, state.eps, t)

    def cond(c):
        _, _, _, ll, i, _ = c
        return (ll <= log_y) & (i < MAX_SHRINKS)

    def body(c):
        theta, lo, hi, _, i, key = c
        lo, hi = jnp.where(theta < 0, theta, lo), jnp.where(theta < 0, hi, theta)
        key, sub = jax.random.split(key)
        theta = jax.random.uniform(sub, minval=lo, maxval=hi, dtype=g.dtype)
        _, ll = propose(theta)
        return theta, lo, hi, ll, i + 1, key

    _, ll0 = propose(theta)
    theta, _, _, ll, shrinks, _ = jax.lax.while_loop(
        cond, body, (theta, theta - 2 * jnp.pi, theta, ll0, jnp.zeros((), jnp.int32), k_shrink))
    # After MAX_SHRINKS (bracket ~ 2 pi 2^-100) stay put: theta -> 0 is the current state.
    theta = jnp.where(ll > log_y, theta, 0.0)
    f, _ = propose(theta)
    k = _disagree(f, t)
    if learn:
        eps = random_draws.beta(k_eps, a0 + k, b0 + t.shape[0] - k, dtype=g.dtype)
    else:
        eps = state.eps
    return ESSState(f, eps, step_log_lik(f, eps, t)), ESSInfo(shrinks, k)


@partial(jax.jit, static_argnames=("num_steps", "learn", "progress"))
def sample_chain(rng_key, state, chol_K, prior_mean, t, a0, b0, thinning, *, num_steps, learn, progress=False):
    """``num_steps`` draws, each after ``thinning`` (traced) steps, under ``lax.scan``;
    returns (final state, (f, eps, info) per draw; info summed over the thinned steps). With
    ``progress`` a host callback advances the running bar (`inference.progress`); same draws."""

    def one(s, inp):
        i, key = inp
        if progress:
            progress_bar.every(i, num_steps)
        def inner(i, carry):
            s, shrinks = carry
            s, info = step(jax.random.fold_in(key, i), s, chol_K, prior_mean, t, a0, b0, learn=learn)
            return s, shrinks + info.num_shrinks

        s, shrinks = jax.lax.fori_loop(0, thinning, inner, (s, jnp.zeros((), jnp.int32)))
        return s, (s.f, s.eps, ESSInfo(shrinks, _disagree(s.f, t)))

    return jax.lax.scan(one, state, (jnp.arange(num_steps), jax.random.split(rng_key, num_steps)))


def _run(keys, states, consts, num_steps, learn, progress):
    """All chains (vmapped) for ``num_steps`` in one compiled program; with ``progress`` a lazy bar
    (`inference.progress`: shown once sampling has run for a second) advanced by a host callback,
    the draws being the same as without it."""
    bar = progress_bar.Bar(progress, keys.shape[0] * num_steps, "elliptical slice")
    with progress_bar.running(bar):
        return jax.vmap(lambda k, s: sample_chain(k, s, *consts, num_steps=num_steps, learn=learn,
                                                  progress=bool(progress)))(keys, states)


def default_thinning(n: int) -> int:
    """Steps per kept draw: the step likelihood makes ESS mix slowly (autocorrelation times of
    a few hundred steps at n = 40), so keep one draw in ``clip(n // 4, 1, 50)``."""
    return int(min(50, max(1, n // 4)))


def mcmc_posterior(model, args, kwargs, trace, *, num_samples, num_warmup, num_chains, seed, progress,
                   thinning=None) -> Posterior:
    """Elliptical slice sampling of the latent GP + Gibbs for the Beta noise rate, for a model that
    `inference.bayes_machine_model.bayes_machine_parts` recognises (GP latent, NoisyStep likelihood,
    Beta or fixed noise rate). ``num_warmup`` and ``num_samples`` count kept draws, each
    ``thinning`` steps apart (default `default_thinning`). ``converged`` as for every MCMC run
    (`inference.convergence.mcmc`)."""
    parts = bayes_machine_parts(trace)
    chol_K, _ = jittered_cholesky(parts.K, "prior covariance")
    dtype = chol_K.dtype
    t = jnp.asarray(parts.t, dtype)
    m0 = jnp.asarray(parts.prior_mean, dtype)
    a0, b0 = parts.noise_prior or (1.0, 1.0)
    key = jax.random.PRNGKey(seed)
    k_init, k_eps, k_run, k_fin = jax.random.split(key, 4)
    n = t.shape[0]
    if parts.learn_noise:
        # Start from prior draws of f with eps = 1/2 (a flat likelihood): the chain then anneals
        # into the posterior as eps's Gibbs update follows the disagreements. Starting where every
        # label agrees with sign(f) instead traps the chain in the over-fitted eps ~ 0 mode
        # (split R-hat > 4 on the thesis circle problem with 10% flipped labels).
        f0 = m0 + (chol_K @ jax.random.normal(k_init, (n, num_chains), dtype)).T
        eps0 = jnp.full((num_chains,), 0.5, dtype)
    else:
        # fixed noise (possibly 0): start inside the support, every label agreeing with sign(f)
        sd = jnp.sqrt(jnp.diag(jnp.asarray(parts.K)))
        f0 = t * sd * jnp.abs(jax.random.normal(k_init, (num_chains, n), dtype))
        eps0 = jnp.full((num_chains,), parts.fixed_eps, dtype)
    states = jax.vmap(lambda f, e: init(f, e, t))(f0, eps0)
    thinning = default_thinning(n) if thinning is None else int(thinning)
    if thinning < 1:
        raise ValueError(f"thinning must be an integer >= 1, got {thinning}")
    consts = (chol_K, m0, t, jnp.asarray(a0, dtype), jnp.asarray(b0, dtype), jnp.asarray(thinning))
    keys = jax.random.split(k_run, num_chains)
    from inference._options import progress as _progress

    _, (f, eps, info) = _run(keys, states, consts, num_warmup + num_samples, parts.learn_noise,
                             _progress(progress))
    f, eps = f[:, num_warmup:], eps[:, num_warmup:]
    flat = {parts.latent: f.reshape(-1, n)}
    if parts.learn_noise:
        flat[parts.eps_site] = eps.reshape(-1)
    samples, loglik, observed = _model.finish_samples(model, flat, args, kwargs, k_fin, num_chains)
    lp = _model.log_joint(model, flat, args, kwargs)
    sample_stats = {"lp": np.asarray(lp).reshape(num_chains, num_samples),
                    "n_steps": np.asarray(info.num_shrinks[:, num_warmup:]) + thinning,
                    "num_disagree": np.asarray(info.num_disagree[:, num_warmup:])}
    diagnostics = _convergence.mcmc({k: samples[k] for k in flat})  # no divergences: no gradients
    diagnostics["sampler"] = "elliptical-slice+gibbs" if parts.learn_noise else "elliptical-slice"
    diagnostics["thinning"] = thinning
    predictor = bm_predictor(model, args, kwargs, parts, samples)
    return Posterior(engine="mcmc", samples=samples, log_likelihood=loglik, observed_data=observed,
                     sample_stats=sample_stats, diagnostics=diagnostics, model=model, model_args=args,
                     model_kwargs=kwargs, seed=seed, predictor=predictor)
