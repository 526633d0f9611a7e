"""Gibbs over the spike-and-slab prior's hyperparameters: ``p_incl`` and ``slab_scale`` given as
priors (`inference.spikeslab.structure.prior_hyperparameters`), sampled by ``inference.mcmc``.

Each scan runs the collapsed sampler's step (`inference.spikeslab.gibbs.step`: indicators,
utilities for probit, then the weights and the precision) at the current hyperparameters, then
updates each unconstrained hyperparameter ``phi_i`` in turn by slice sampling (Neal 2003:
stepping out, then shrinkage) from its full conditional

    p(phi | z, w, tau)  propto  p(theta(phi)) |d theta / d phi| p(z | theta) p(w | z, theta, tau),

read from the model itself (`inference.hyper.sites.run`: the sites' own log densities at the
current draws), so any prior with a bijection to the real line is sampled exactly, and the
likelihood, which does not depend on them, is not evaluated. The step for the hyperparameters
conditions on ``w`` (drawn exactly given ``z``), so the scan is a blocked Gibbs sampler of the
joint posterior. ``C_z^-1`` is rebuilt after each step: a new slab variance changes ``C_z``
beyond what the collapsed sampler's Newton-Schulz refresh corrects.

Example:
    >>> import numpy as np, numpyro.distributions as dist, inference, probmodels
    >>> rng = np.random.default_rng(0); X = rng.normal(size=(40, 6)); y = X[:, 0] * 2 + 0.5 * rng.normal(size=40)
    >>> post = inference.mcmc(probmodels.spike_and_slab_regression, X, y, noise_scale=0.5, p_incl=dist.Beta(1.0, 1.0),
    ...                       num_samples=200, num_warmup=100, num_chains=2, progress=False)
    >>> post.samples["p_incl"].shape, bool(0 < post.mean("p_incl") < 1)
    ((2, 200), True)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from inference import compiled
from inference.hyper import sites
from inference.spikeslab import gibbs
from inference.trace_reading import unwrap

STEP_WIDTH = 1.0  # the slice's initial width in unconstrained space (a logit, a log scale)
MAX_STEPS_OUT = 16  # stepping out: at most this many widths in all
MAX_SHRINK = 60  # shrinkage steps (a slice narrower than 2^-60 widths keeps the current value)
INIT_RADIUS = 2.0  # each chain starts at a uniform point of (-2, 2) per coordinate, as NumPyro's init_to_uniform


class HyperState(NamedTuple):
    gibbs: gibbs.GibbsState
    phi: jax.Array  # (k,) the hyperparameters, unconstrained
    logit_prior: jax.Array  # (d,) log odds of inclusion at phi
    slab_var: jax.Array  # (d,) slab variance at phi (noise-scale units with an unknown precision)
    theta: jax.Array  # (k,) the hyperparameters, constrained (what the draws record)


def hyper_sites(trace, hyper, prob) -> sites.HyperSites:
    """The hyperparameters and the latent sites they are read against (indicators, weights and,
    with an unknown noise, the precision)."""
    latent = (prob.z_site, prob.w_site) + ((prob.precision_site,) if prob.precision_site else ())
    return sites.HyperSites(tuple(hyper), latent, sites.unconstrained_shapes(trace, hyper),
                            tuple(np.shape(trace[n]["value"]) for n in latent))


def _parts(model, hs, args, kwargs, phi, z, w, tau):
    """``(logit p (d,), slab scale (d,), log p(phi | z, w, tau) up to a constant, theta (k,))``
    at ``phi``."""
    values = dict(zip(hs.latent, (z, w, tau)))
    tr = sites.run(model, args, kwargs, hs, phi, values)
    z_site, w_site = hs.latent[:2]
    d = z.shape[0]
    logit = jnp.broadcast_to(unwrap(tr[z_site]["fn"]).logits, (d,))
    scale = jnp.broadcast_to(unwrap(tr[w_site]["fn"]).scale, (d,))
    log_cond = (sites.log_prior(tr, hs) + jnp.sum(tr[z_site]["fn"].log_prob(z))
                + jnp.sum(tr[w_site]["fn"].log_prob(w)))
    theta = jnp.concatenate([jnp.ravel(v) for v in sites.constrained(tr, hs).values()])
    return logit, scale, log_cond, theta


def _slice(key, x0, log_f):
    """One slice-sampling update of the scalar ``x0`` under ``log_f`` (Neal 2003: stepping out
    by at most `MAX_STEPS_OUT` widths, then shrinkage). One loop whose phases (0: the level at
    ``x0``, 1 / 2: stepping out left / right, 3: shrinking) each evaluate ``log_f`` once, so the
    compiled program holds one copy of the model's log density (four copies compiled ~4x longer)."""
    k_level, k_place, k_split, k_shrink = random.split(key, 4)
    lo = x0 - STEP_WIDTH * random.uniform(k_place, dtype=x0.dtype)
    left = jnp.floor(MAX_STEPS_OUT * random.uniform(k_split, dtype=x0.dtype)).astype(jnp.int32)
    log_u = jnp.log(random.uniform(k_level, dtype=x0.dtype))
    propose = lambda lo, hi, i: lo + (hi - lo) * random.uniform(random.fold_in(k_shrink, i), dtype=x0.dtype)  # noqa: E731

    def body(c):
        phase, at, lo, hi, x, steps, i, level, _ = c
        f = log_f(at)
        inside = f > level
        # phase 0: the level under log_f(x0); go to stepping out left from lo
        level = jnp.where(phase == 0, f + log_u, level)
        # phases 1 and 2: step out while inside and steps remain (left's share, then right's)
        out = (phase > 0) & (phase < 3) & inside & (steps > 0)
        lo = jnp.where(out & (phase == 1), lo - STEP_WIDTH, lo)
        hi = jnp.where(out & (phase == 2), hi + STEP_WIDTH, hi)
        steps = jnp.where(out, steps - 1, steps)
        to_right = (phase == 1) & ~out
        steps = jnp.where(to_right, MAX_STEPS_OUT - 1 - left, steps)
        # phase 3: accept inside the slice, else shrink towards x0
        shrink = phase == 3
        accept = shrink & inside
        lo = jnp.where(shrink & ~inside & (at < x0), at, lo)
        hi = jnp.where(shrink & ~inside & (at >= x0), at, hi)
        x = jnp.where(accept, at, x)
        i = jnp.where(shrink, i + 1, i)
        phase = jnp.where(phase == 0, 1, jnp.where(to_right, 2, jnp.where((phase == 2) & ~out, 3, phase)))
        at = jnp.where(phase == 1, lo, jnp.where(phase == 2, hi, propose(lo, hi, i)))
        done = accept | (i >= MAX_SHRINK)
        return phase, at, lo, hi, x, steps, i, level, done

    zero = jnp.asarray(0, jnp.int32)
    c = (zero, x0, lo, lo + STEP_WIDTH, x0, left, zero, jnp.asarray(-jnp.inf, x0.dtype), jnp.asarray(False))
    return lax.while_loop(lambda c: ~c[-1], body, c)[4]


def _at(logit, slab, data):
    """The sampler's data at the hyperparameters' log odds and slab variance."""
    return data._replace(logit_prior=logit.astype(data.slab_var.dtype), slab_var=slab.astype(data.slab_var.dtype))


def _make(model, hs, rebuild, config, num_warmup, num_samples, progress):
    """The jitted ``init(keys, data, arrays)`` and ``sample(keys, states, data, arrays)``."""

    def parts(arrays, phi, z, w, tau):
        args, kwargs = rebuild(arrays)
        return _parts(model, hs, args, kwargs, phi, z, w, tau)

    def prior_at(arrays, phi, d, dtype):
        one = jnp.ones((), dtype)
        logit, scale, _, theta = parts(arrays, phi, jnp.ones(d, jnp.int32), jnp.zeros(d, dtype), one)
        return logit, scale**2, theta  # at tau = 1: the slab variance in noise-scale units

    @jax.jit
    def init(keys, data, arrays):
        d, dtype = data.slab_var.shape[0], data.slab_var.dtype
        k = sites.size(hs)

        def one(key):
            k1, k2 = random.split(key)
            phi = random.uniform(k1, (k,), dtype, -INIT_RADIUS, INIT_RADIUS)
            logit, slab, theta = prior_at(arrays, phi, d, dtype)
            return HyperState(gibbs.init(k2, _at(logit, slab, data), config), phi, logit, slab, theta)

        return jax.vmap(one)(keys)

    def step(key, state, data, arrays):
        k_gibbs, k_hyper = random.split(key)
        g, info = gibbs.step(k_gibbs, state.gibbs, _at(state.logit_prior, state.slab_var, data), config)

        def coordinate(i, phi):  # each in turn (one or two: p_incl, slab_scale), one traced copy
            log_f = lambda x: parts(arrays, phi.at[i].set(x), g.z, g.w, g.precision)[2]  # noqa: E731
            return phi.at[i].set(_slice(random.fold_in(k_hyper, i), phi[i], log_f))

        phi = lax.fori_loop(0, state.phi.shape[0], coordinate, state.phi)
        logit, slab, theta = prior_at(arrays, phi, g.z.shape[0], phi.dtype)
        g = g._replace(Cinv=gibbs._c_inverse(data.X, g.z, slab.astype(data.X.dtype)))
        return HyperState(g, phi, logit, slab, theta), info

    def record(state, info):
        return gibbs.record(state.gibbs, info) + (state.theta,)

    @jax.jit
    def sample(keys, states, data, arrays):
        return gibbs.scan_chains(keys, states, lambda k, s: step(k, s, data, arrays), record, num_warmup,
                                 num_samples, progress)

    return init, sample


def programs(model, args, kwargs, hs, config, num_warmup: int, num_samples: int, progress: bool):
    """``((init, sample), arrays)``, kept per model structure and options (`inference.compiled`):
    ``init(keys, data, arrays)`` starts one chain per key; ``sample(keys, states, data, arrays)``
    returns ``(states, (z, w, precision, flips, theta))`` with leading (chain, draw) axes,
    ``theta`` (chain, draw, number of hyperparameters) in `HyperSites` order."""
    options = (hs, config, num_warmup, num_samples, bool(progress))
    return compiled.get("ss-gibbs-hyper", model, args, kwargs, options,
                        partial(_make, model, hs, config=config, num_warmup=num_warmup, num_samples=num_samples,
                                progress=bool(progress)))
