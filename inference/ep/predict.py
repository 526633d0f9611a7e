"""Posterior predictive of an EP fit at new inputs.

Weight-space latents (whose shapes do not change with the inputs, e.g. regression weights): the
EP draws are reused and the model is run forward at the new inputs.

Function-space latents (a site whose leading axis grows with the data, e.g. a GP's ``f``): the
rule is to trace the model on the training inputs stacked with the new ones, read the joint
Gaussian prior of the latent there, and condition the new block on each posterior draw of the
training block (``f* | f ~ N(m* + K*n Kn^-1 (f - mn), K** - K*n Kn^-1 Kn*)``). An argument is
stacked when it is an array passed at prediction whose training counterpart has the same
trailing shape and as many rows as the latent has (e.g. ``X``); every other argument is taken as
passed to ``predict`` (pass the same hyperparameters as at training; observations default to
``None``). The training block of the stacked prior must reproduce the training prior, otherwise
a ``ValueError`` says so.
"""

from __future__ import annotations

import numpy as np
from numpyro.infer import Predictive

import jax
import jax.numpy as jnp

from inference import compiled, linalg
from inference._model import to_chains
from inference.conditional import check_trailing_shapes, extend_draws
from inference.trace_reading import abstract_trace, latent_blocks


def robust_cholesky(cov, what="covariance", computed_in=None):
    """Cholesky factor with the smallest jitter (relative to the mean diagonal) that works:
    ``(L, relative jitter)``. ``computed_in``: the dtype ``cov`` was computed in; the jitters
    tried then go up to 1000 of its epsilons (float32: 1e-4), the size of its round-off: a float32
    GP posterior covariance ``K - K S B^-1 S K`` (Poisson GP, n = 50) had an eigenvalue of -1.25e-6
    x its mean diagonal, beyond the float64 ladder's 1e-6, and the fit raised."""
    cov = np.asarray(cov, float)
    ladder = linalg.LADDER
    if computed_in is not None:
        top = 1000 * float(np.finfo(np.dtype(computed_in)).eps)
        ladder = ladder + tuple(r for r in (1e-5, 1e-4) if ladder[-1] < r <= top)
    L, jitter = linalg.cholesky_jitter(cov, f"the {what}", ladder=ladder)
    return L, jitter / max(float(np.mean(np.diag(cov))), 1e-300)


def make_predictor(model, train_args, train_kwargs, rec, u_draws, observed_names, num_chains=1):
    """``predictor(rng_key, *args, **kwargs) -> {site: (chain, draw, ...)}`` for Posterior.predict."""
    blocks = rec.blocks
    u_draws = np.asarray(u_draws)

    def predictor(rng_key, *args, **kwargs):
        names = {b.name for b in blocks}
        new_blocks = {b.name: b for b in latent_blocks(abstract_trace(model, args, kwargs), names)}
        changed = [b for b in blocks if b.name in new_blocks and new_blocks[b.name].shape != b.shape]
        latents = {b.name: u_draws[:, b.offset:b.offset + b.size].reshape((-1,) + b.shape)
                   for b in blocks if b not in changed}
        if changed:
            check_trailing_shapes(model, train_args, train_kwargs, args, kwargs, [b.name for b in changed])
            latents.update(extend_draws(model, train_args, train_kwargs, rec.blocks, rec.m0, rec.S0, u_draws,
                                        changed, new_blocks, args, kwargs, jax.random.fold_in(rng_key, 7)))
        sites = list(observed_names) + [b.name for b in changed]
        def build(rebuild):  # one program per model structure (`inference.compiled`): a closure
            def forward(arrays, key, samples):  # over the inputs was compiled on every call
                a, kw = rebuild(arrays)
                return Predictive(model, posterior_samples=samples, return_sites=sites, batch_ndims=1)(key, *a, **kw)

            return jax.jit(forward)

        out = dict(compiled.call("ep-predict", model, args, kwargs, tuple(sites), build, rng_key,
                                 {k: jnp.asarray(v) for k, v in latents.items()}))
        out.update({b.name: latents[b.name] for b in changed})
        return to_chains({k: np.asarray(v) for k, v in out.items()}, num_chains)

    return predictor
