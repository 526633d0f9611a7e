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

from inference._model import to_chains
from inference.ep.recognise import abstract_trace, latent_blocks, prior_of


def robust_cholesky(cov, what="covariance"):
    """Cholesky factor with the smallest jitter (relative to the mean diagonal) that works."""
    cov = np.asarray(cov, float)
    scale = max(float(np.mean(np.abs(np.diag(cov)))), 1e-300)
    for jitter in (0.0, 1e-12, 1e-10, 1e-8, 1e-6):
        try:
            return np.linalg.cholesky(cov + jitter * scale * np.eye(cov.shape[0])), jitter
        except np.linalg.LinAlgError:
            continue
    raise ValueError(f"the {what} is not positive definite (even with jitter 1e-6 of its mean diagonal)")


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
            latents.update(_conditional(model, train_args, train_kwargs, rec, u_draws, changed,
                                        new_blocks, args, kwargs, jax.random.fold_in(rng_key, 7)))
        sites = list(observed_names) + [b.name for b in changed]
        def forward(key, samples):  # one compiled program instead of one per operation
            return Predictive(model, posterior_samples=samples, return_sites=sites, batch_ndims=1)(key, *args, **kwargs)

        out = dict(jax.jit(forward)(rng_key, {k: jnp.asarray(v) for k, v in latents.items()}))
        out.update({b.name: latents[b.name] for b in changed})
        return to_chains({k: np.asarray(v) for k, v in out.items()}, num_chains)

    return predictor


def _stack(train, new, n_rows):
    if (isinstance(new, (np.ndarray, jax.Array)) and isinstance(train, (np.ndarray, jax.Array))
            and np.ndim(new) >= 1 and np.ndim(new) == np.ndim(train)
            and np.shape(train)[0] == n_rows and np.shape(new)[1:] == np.shape(train)[1:]):
        return np.concatenate([np.asarray(train), np.asarray(new)]), True
    return new, False


def _conditional(model, train_args, train_kwargs, rec, u_draws, changed, new_blocks, args, kwargs, key):
    n_rows = {b.shape[0] for b in changed if b.shape}
    if len(n_rows) != 1:
        raise ValueError(f"cannot predict: latent sites {[b.name for b in changed]} change shape with the "
                         f"inputs but do not share one leading (data) axis")
    (n,) = n_rows
    stacked = [_stack(t, a, n) for t, a in zip(train_args, args)] + [_stack(None, a, n) for a in args[len(train_args):]]
    joint_args = tuple(v for v, _ in stacked)
    joint_kwargs = {k: _stack(train_kwargs.get(k), v, n)[0] for k, v in kwargs.items()}
    if not any(flag for _, flag in stacked) and joint_kwargs.keys() == kwargs.keys() and all(
            joint_kwargs[k] is kwargs[k] for k in kwargs):
        raise ValueError(f"cannot predict: no argument of predict() looks like new rows of a training input "
                         f"with {n} rows (same trailing shape), so the GP latent cannot be extended")
    names = {tb.name for tb in rec.blocks}
    joint_blocks = latent_blocks(abstract_trace(model, joint_args, joint_kwargs), names)
    if [b.name for b in joint_blocks] != [b.name for b in rec.blocks]:
        raise ValueError("cannot predict: the model's latent sites differ on the stacked [training; new] inputs")
    m0j, S0j = prior_of(model, joint_args, joint_kwargs, joint_blocks)
    train_idx, new_idx, new_shapes = [], [], {}
    by_name = {b.name: b for b in rec.blocks}
    for jb in joint_blocks:
        tb = by_name[jb.name]
        idx = np.arange(jb.offset, jb.offset + jb.size)
        if tb in changed:
            m = new_blocks[jb.name].shape[0]
            if jb.shape != (n + m,) + tb.shape[1:]:
                raise ValueError(f"cannot predict: latent site {jb.name!r} has shape {jb.shape} on the stacked "
                                 f"inputs, expected {(n + m,) + tb.shape[1:]}")
            rest = tb.size // n
            train_idx.append(idx[: n * rest])
            new_idx.append(idx[n * rest:])
            new_shapes[jb.name] = (m,) + tb.shape[1:]
        else:
            train_idx.append(idx)
    t = np.concatenate(train_idx)
    s = np.concatenate(new_idx)
    Ktt, Kst, Kss = S0j[np.ix_(t, t)], S0j[np.ix_(s, t)], S0j[np.ix_(s, s)]
    big = max(float(np.max(np.abs(rec.S0))), 1e-300)
    if not (np.allclose(Ktt, rec.S0, atol=1e-6 * big, rtol=0) and np.allclose(m0j[t], rec.m0, atol=1e-6 * max(big, 1.0) ** 0.5)):
        raise ValueError("cannot predict: the prior of the latent on the stacked [training; new] inputs does not "
                         "reproduce the training prior; pass predict() the same hyperparameters as the fit")
    L, _ = robust_cholesky(Ktt, "training prior covariance")
    C = np.linalg.solve(L.T, np.linalg.solve(L, Kst.T)).T  # Kst Ktt^-1
    cond_cov = Kss - C @ Kst.T
    Lc, _ = robust_cholesky(0.5 * (cond_cov + cond_cov.T), "conditional prior covariance at the new inputs")
    eps = np.asarray(jax.random.normal(key, (u_draws.shape[0], s.size), dtype=jnp.result_type(float)))
    new_u = m0j[s] + (u_draws - rec.m0) @ C.T + eps @ Lc.T
    out, start = {}, 0
    for name, shape in new_shapes.items():
        size = int(np.prod(shape))
        out[name] = new_u[:, start:start + size].reshape((-1,) + shape)
        start += size
    return out
