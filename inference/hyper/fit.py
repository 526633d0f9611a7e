"""From an engine's evidence to a `Posterior` over the latent and the hyperparameters.

`programs` turns the engine's two functions (`inference.hyper`, "The engine's side") into the
compiled programs the search needs; `run` finds the mode (`optimize.maximize`), integrates over
a design when asked (`design.rule`), draws from the result and assembles the `Posterior`:

- ``"map"``: the hyperparameters fixed at their mode (every draw holds the same values), the
  latent drawn from the engine's approximation there; ``log_evidence`` is ``log p(y | theta*)``
  (``evidence_method`` ``ENGINE-map``: type-II maximum likelihood's evidence, as GPML reports it).
- ``"integrate"``: the mixture over the design points, each weighted by its posterior mass;
  draws pick their point by systematic resampling of the weights, then the latent from the
  engine's approximation at that point; ``log_evidence`` is ``log int p(y | theta) p(theta)``
  by the design's rule (``evidence_method`` ``ENGINE-integrated``).

``sample_stats``: ``lp`` is the model's log joint density at the draw with the hyperparameters
in unconstrained space (``log p(y, x, theta) + log |d theta / d phi|``), ``log_q`` the
approximation's: the latent's Gaussian density, plus for ``"integrate"`` the log of the point's
mass per unit of ``phi``-volume its rule gives it (so ``lp - log_q`` is an importance ratio up to
one constant, as LOO needs).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp

from inference import _model
from inference.hyper import design, optimize, sites
from inference.posterior import Posterior


class Programs(NamedTuple):
    """Compiled functions of ``(..., data)``; see `programs`."""

    value_and_grad: Callable  # (phi, warm, data) -> (F, grad F, warm, ok, log Z)
    draw: Callable  # (phi, warm, seed, num, data) -> (x (num, d), log q (num,), lp (num,), {site: theta})


def programs(model, hs, model_inputs, evidence, draw, unravel_latent) -> Programs:
    """The jitted programs over the engine's ``evidence(phi, warm, data) -> (log_z, (warm, ok))``
    and ``draw(phi, warm, key, num, data) -> (x, log_q)``; ``model_inputs(data) -> (args, kwargs)``.
    ``draw`` also gives the model's log joint at each draw (``lp``, module docstring) and the
    hyperparameters' constrained values at ``phi``; ``num`` is static, ``seed`` an integer."""

    def log_prior(phi, data):
        args, kwargs = model_inputs(data)
        return sites.log_prior(sites.run(model, args, kwargs, hs, phi), hs)

    def value_and_grad(phi, warm, data):
        def total(p):
            log_z, aux = evidence(p, warm, data)
            return log_z + log_prior(p, data), (aux, log_z)

        (F, ((new_warm, ok), log_z)), g = jax.value_and_grad(total, has_aux=True)(phi)
        return F, g, new_warm, ok, log_z

    def draw_and_joint(phi, warm, seed, num, data):
        args, kwargs = model_inputs(data)
        x, log_q = draw(phi, warm, jax.random.PRNGKey(seed), num, data)

        def joint(xi):
            tr = sites.run(model, args, kwargs, hs, phi, unravel_latent(xi))
            lp = sites.log_prior(tr, hs) + sites.log_likelihood(tr, hs)
            return lp + sum(jnp.sum(tr[n]["fn"].log_prob(tr[n]["value"])) for n in hs.latent)

        theta = sites.constrained(sites.run(model, args, kwargs, hs, phi), hs)
        return x, log_q, jax.vmap(joint)(x), theta

    return Programs(value_and_grad=jax.jit(value_and_grad), draw=jax.jit(draw_and_joint, static_argnums=3))


def run(model, args, kwargs, trace, hs, hyper: str, progs: Programs, data, warm0, phi0, *,
        engine: str, num_samples: int, seed: int, tol: float, max_iter: int, diagnostics=None,
        approximation=None, loosen=None) -> Posterior:
    """The mode, the design (``"integrate"``), the draws and the `Posterior` (module docstring).
    ``loosen(data, grad_norm) -> data``: the engine's data for a line-search trial point of the
    search (`optimize.maximize`'s ``loose``), or None."""
    vg = lambda phi, warm: progs.value_and_grad(jnp.asarray(phi), warm, data)  # noqa: E731
    loose = None if loosen is None else (
        lambda phi, warm, g_norm: progs.value_and_grad(jnp.asarray(phi), warm, loosen(data, g_norm)))
    mode = optimize.maximize(vg, phi0, warm0, tol=tol, max_iter=max_iter, loose=loose)
    if not np.isfinite(mode.value):
        raise FloatingPointError("the hyperparameters' log posterior is not finite at the mode found")
    k = mode.phi.size
    info = {
        "sites": list(hs.hyper), "iterations": mode.iterations, "evaluations": mode.evaluations,
        "grad_norm": float(np.linalg.norm(mode.grad)), "predicted_gain": mode.gain, "stalled": mode.stalled,
        "saddle": mode.saddle,
        "trace": [float(v) for v in mode.trace], "log_evidence_at_mode": mode.log_z,
        "log_posterior_at_mode": mode.value, "unconstrained": mode.phi.tolist(),
        "converged": mode.converged, "method": hyper,
    }
    converged = mode.converged
    if mode.saddle:
        warnings.warn("hyper=: the search for the hyperparameters' mode stopped at a saddle of their log posterior "
                      "(it curves upward along some direction there), not at a maximum: converged=False "
                      "(diagnostics['hyper']['saddle'])", RuntimeWarning, stacklevel=3)
    if hyper == "map":
        points, log_mass, warms = mode.phi[None], np.zeros(1), [mode.warm]
        log_evidence, cell = mode.log_z, np.zeros(1)
    else:
        H = optimize.hessian(vg, mode.phi, mode.warm)
        lam = np.linalg.eigvalsh(H)
        if not (np.all(np.isfinite(lam)) and lam[0] > 0):
            raise ValueError(
                f"hyper='integrate': the log posterior of the hyperparameters {list(hs.hyper)} is not concave at "
                f"its mode (Hessian eigenvalues {np.round(lam, 6).tolist()}): a Gaussian-based design does not "
                "apply; use hyper='map', a more informative prior, or inference.mcmc")
        sigma = np.linalg.inv(H)
        z, log_w = design.rule(k, sigma)
        points = (mode.phi.astype(np.float64) + z @ design.scale(sigma).T).astype(mode.phi.dtype)
        F, warms, ok = np.empty(len(z)), [], np.empty(len(z), bool)
        for j, phi_j in enumerate(points):
            F_j, _, w_j, ok_j, _ = vg(phi_j, mode.warm)
            F[j], ok[j] = float(F_j), bool(ok_j)
            warms.append(w_j)
        failed = ~(ok & np.isfinite(F))
        if failed.any():
            converged = False
            warnings.warn(f"hyper='integrate': the engine failed at {int(failed.sum())} of {len(z)} design points "
                          "(dropped); the integral may be off", RuntimeWarning, stacklevel=3)
        keep = ~failed
        log_post = np.where(keep, F + log_w, -np.inf)
        log_evidence = float(logsumexp(log_post[keep]))
        log_mass = log_post - log_evidence
        cell = log_w - 0.5 * np.linalg.slogdet(sigma)[1]  # log volume per point (up to a constant)
        info.update({"design": "grid" if k <= 2 else "ccd", "points": int(len(z)), "failed_points": int(failed.sum()),
                     "hessian": H.tolist(), "weights": np.exp(log_mass).tolist()})
    # draws: systematic resampling of the points' masses, then the latent at each (host RNG: no
    # compiled key operations)
    rng = np.random.default_rng(seed)
    u = (rng.uniform() + np.arange(num_samples)) / num_samples
    which = np.minimum(np.searchsorted(np.cumsum(np.exp(log_mass)), u), len(points) - 1)
    parts = []
    for j in np.unique(which):
        count = int(np.sum(which == j))
        x_j, lq_j, lp_j, theta_j = progs.draw(jnp.asarray(points[j]), warms[j], (1000 * seed + int(j)) % 2**31, num_samples,
                                              data)
        theta_j = {n: np.broadcast_to(np.asarray(v), (count,) + np.shape(v)) for n, v in theta_j.items()}
        parts.append((np.asarray(x_j)[:count], np.asarray(lq_j)[:count] + log_mass[j] - cell[j],
                      np.asarray(lp_j)[:count], theta_j))
    order = rng.permutation(num_samples)  # iid draws: no runs of one design point
    x, log_q, lp = (np.concatenate([p[i] for p in parts])[order] for i in range(3))
    theta = {n: np.concatenate([p[3][n] for p in parts])[order] for n in hs.hyper}
    latent_values = {n: v.reshape((num_samples,) + s) for n, v, s in _split(x, hs)}
    flat = {**theta, **latent_values}
    flat = {n: flat[n] for n in _model.latent_sites(trace) if n in flat}
    samples, loglik, observed = _model.finish_samples(model, flat, args, kwargs, seed + 5, 1,
                                                      trace=trace)
    info["values"] = _constrain(trace, hs, mode.phi)
    if not (np.all(np.isfinite(lp)) and np.all(np.isfinite(log_q))):
        converged = False
    diag = {**(diagnostics or {}), "converged": bool(converged), "hyper": info}
    return Posterior(
        engine=engine, samples=samples, log_likelihood=loglik, observed_data=observed,
        sample_stats={"lp": lp[None], "log_q": log_q[None]}, log_evidence=float(log_evidence),
        evidence_method=f"{engine}-map" if hyper == "map" else f"{engine}-integrated", diagnostics=diag,
        approximation={**(approximation or {}), "hyper_points": np.asarray(points), "hyper_weights": np.exp(log_mass)},
        predictor=_predictor(model, args, kwargs, hs, flat, observed),
        model=model, model_args=args, model_kwargs=kwargs, seed=seed,
    )


def _split(x, hs):
    """``(site, columns of x, shape)`` for each latent site (flat draws ``(num, d)``)."""
    start = 0
    for name, shape in zip(hs.latent, hs.latent_shapes):
        size = int(np.prod(shape))
        yield name, x[:, start:start + size], shape
        start += size


def _constrain(trace, hs, phi) -> dict:
    """The hyperparameters' values at ``phi`` (lists, for the diagnostics)."""
    from numpyro.distributions.transforms import biject_to

    parts = sites.unravel(hs, jnp.asarray(phi))
    return {n: np.asarray(biject_to(trace[n]["fn"].support)(parts[n])).tolist() for n in hs.hyper}


def _predictor(model, args, kwargs, hs, flat, observed):
    """Posterior predictive at new inputs: the draws grouped by their hyperparameter values, each
    group predicted by the model with the hyperparameters fixed there (observed; `sites.fixed`,
    the values as data), so a GP's latent at the new inputs is conditioned on the training draw
    under that group's kernel. Each group's draws are repeated to the full number of draws, so
    every group (and every later call) runs the same compiled programs: with a program per group
    and group size, predicting 15 points from a 17-point integration took ~50 s on every call."""

    def predict(rng_key, *new_args, **new_kwargs):
        theta = np.concatenate([np.asarray(flat[n]).reshape(len(flat[n]), -1) for n in hs.hyper], axis=1)
        _, group = np.unique(theta, axis=0, return_inverse=True)
        out = {}
        for g in np.unique(group):
            idx = np.flatnonzero(group == g)
            padded = np.resize(idx, len(group))  # idx repeated: the first len(idx) are the group's draws
            values = {sites.THETA: {n: np.asarray(flat[n][idx[0]]) for n in hs.hyper}}
            part = SimpleNamespace(
                model=sites.fixed(model), model_args=args, model_kwargs={**kwargs, **values}, observed_data=observed,
                num_chains=1, flat_samples=lambda p=padded: {n: v[p] for n, v in flat.items() if n not in hs.hyper})
            draws = _model.predictive_draws(part, jax.random.fold_in(rng_key, int(g)), *new_args,
                                            **{**new_kwargs, **values})
            for name, v in draws.items():
                out.setdefault(name, np.empty((len(group),) + np.shape(v)[2:], np.asarray(v).dtype))[idx] = \
                    v[0][:len(idx)]
        return {k: v[None] for k, v in out.items()}

    return predict
