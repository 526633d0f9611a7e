"""The Bayes machine under ``inference.ep``: recognise the model from its trace, run kernel-form EP
(`inference.ep.bayes_machine`, or the sparse version with ``active_set_size``), return a `Posterior`.

What is recognised (by distribution types and values in the trace, never by the model's name):

- one observed site whose distribution is `inference.distributions.NoisyStep(f, eps)`;
- its ``f`` is the value of a latent site that is ``MultivariateNormal(loc, cov)`` (or an
  independent ``Normal``): the GP prior ``N(m0, K)``;
- its ``eps`` is either the value of a scalar ``Beta(a0, b0)`` latent site (the noise rate is
  learnt) or a constant (fixed noise, e.g. 0: the "eps=0 machine").

Any other latent or observed site is an error naming it.

Prediction at new inputs (``post.predict(X_new)``) needs the kernel between training and new
points, which the model computes but does not expose. The predictor therefore re-runs the model
on the training inputs stacked over the new ones (every array argument whose leading axis has the
training length is concatenated with the new one given at the same position or keyword; array
arguments not given anew, such as the labels, are dropped so they default to ``None``) and reads
the joint prior covariance of the latent site. The training block must reproduce the training
covariance, else a ValueError says so. New points go through in chunks of 512 rows. Each draw of
the training latents is extended by a draw from the GP conditional (`inference.bayes_machine_model.predictor`,
as under MCMC), so predictive draws are paired with the posterior's.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.gp import bayes_machine
    >>> X = np.random.default_rng(0).uniform(-1, 1, (30, 2)); y = X[:, 0] > 0
    >>> post = inference.ep(bayes_machine, X, y, num_samples=50, progress=False)
    >>> post.predict(X[:4])["y"].shape
    (1, 50, 4)
"""

from __future__ import annotations

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from inference import _model, _options, convergence
from inference.bayes_machine_model import BMParts, bayes_machine_parts, jittered_cholesky  # noqa: F401
from inference.bayes_machine_model import predictor as bm_predictor
from inference.ep import bayes_machine as bm
from inference.ep.sparse_bm import fit_sparse
from inference.posterior import Posterior


@partial(jax.jit, static_argnames=("num_samples",))
def _draws(key, mean, C, logdet, num_samples):
    """``(key for the rest, f draws, log q(f))`` from ``q(f)``: one program (op by op, a new
    process compiled each operation: ~0.3 s)."""
    k_f, k_fin = jax.random.split(key)
    n = mean.shape[0]
    z = jax.random.normal(k_f, (num_samples, n), dtype=mean.dtype)
    log_q = -0.5 * jnp.sum(z * z, axis=1) - logdet - 0.5 * n * np.log(2 * np.pi)
    return k_fin, mean + z @ C.T, log_q


def _noise_draws(seed, a, b, num_samples, dtype):
    """``(eps draws, log q(eps))`` from the noise rate's ``Beta(a, b)``, on the host: JAX's Beta
    sampler (two gamma rejection loops) was ~2.8 of the 3.4 s the draws' program compiled."""
    from scipy.stats import beta

    a, b = float(a), float(b)
    eps = np.random.default_rng([seed, 2]).beta(a, b, num_samples)
    info = np.finfo(dtype)
    eps = np.clip(eps, info.tiny, 1.0 - info.epsneg)  # in (0, 1) in the working dtype too
    return eps.astype(dtype), beta.logpdf(eps, a, b)


@jax.jit
def _full_factor(chol_K, chol_B):
    C = chol_K @ solve_triangular(chol_B, jnp.eye(chol_B.shape[0], dtype=chol_B.dtype), lower=True).T
    return C, jnp.sum(jnp.log(jnp.diag(chol_K))) - jnp.sum(jnp.log(jnp.diag(chol_B)))


def _posterior_factor(parts, res, sparse):
    """Mean and a square root C (Sigma = C C^T) of q(f) over all n training points, log|det C|."""
    if sparse is None:
        C, logdet = _full_factor(res.chol_K, res.chol_B)
        return res.f_mean, C, logdet
    A = np.asarray(sparse.active)
    sub = sparse.result
    W = solve_triangular(sub.chol_K, jnp.asarray(parts.K[A]), lower=True)
    U = solve_triangular(sub.chol_B, W, lower=True)
    cov = jnp.asarray(parts.K) - W.T @ W + U.T @ U
    L, _ = jittered_cholesky(np.asarray(0.5 * (cov + cov.T)), "posterior covariance")
    return sparse.f_mean, L, jnp.sum(jnp.log(jnp.diag(L)))


def ep_posterior(model, args, kwargs, trace, *, schedule="parallel", damping=0.5, tol=1e-6, max_iter=200,
                 num_samples=1000, seed=0, progress=None, active_set_size=None, num_passes=2,
                 negative_sites="clip") -> Posterior:
    """Kernel-form EP for a Bayes-machine model (see module doc); ``active_set_size=d`` runs the
    sparse Bayes machine. ``damping`` is the fraction of each site update taken (1: undamped).
    Draws ``num_samples`` from ``q(f) q(eps)`` in one chain. Diagnostics: ``converged``,
    ``iterations``, ``max_site_change``, ``num_skipped_updates``, ``num_clipped_sites`` (sites
    whose precision is clipped at 0 at the end), the final ``damping``."""
    del progress  # EP is fast; nothing to show
    parts = bayes_machine_parts(trace)
    opts = dict(schedule=schedule, damping=damping, tol=tol, max_iter=max_iter, negative_sites=negative_sites,
                learn_noise=parts.learn_noise, fixed_eps=parts.fixed_eps, prior_mean=parts.prior_mean)
    noise_prior = parts.noise_prior or (1.0, 1.0)
    sparse = None
    if active_set_size is None:
        res = bm.fit(parts.K, parts.t, noise_prior, **opts)
    else:
        sparse = _sparse_fit(parts, noise_prior, opts, active_set_size, num_passes)
        res = sparse.result
    mean, C, logdet = _posterior_factor(parts, res, sparse)
    k_fin, f, log_q = _draws(jax.random.PRNGKey(seed), mean, C, logdet, num_samples)
    flat = {parts.latent: f}
    if parts.learn_noise:
        flat[parts.eps_site], log_q_eps = _noise_draws(seed, res.eps_a, res.eps_b, num_samples, np.dtype(f.dtype))
        log_q = np.asarray(log_q) + log_q_eps.astype(log_q.dtype)
    lp = _model.log_joint(model, flat, args, kwargs)
    samples, loglik, observed = _model.finish_samples(model, flat, args, kwargs, k_fin, 1)
    diagnostics = {
        "converged": convergence.ep(float(res.max_change), tol, float(res.log_evidence)) and bool(res.converged),
        "iterations": int(res.num_iter),
        "max_site_change": float(res.max_change), "num_skipped_updates": int(res.num_skipped),
        "num_clipped_sites": int(res.num_clipped), "schedule": schedule, "damping": float(res.damping),
        "jitter": float(res.jitter), "algorithm": "bayes-machine-ep", "learn_noise": parts.learn_noise,
        "negative_sites": negative_sites, "tol": tol,
        "pareto_k": convergence.pareto_k(np.asarray(lp, float) - np.asarray(log_q, float)),
    }
    if not diagnostics["converged"]:
        warnings.warn(
            f"Bayes-machine EP did not converge in {diagnostics['iterations']} sweeps (largest site change "
            f"{diagnostics['max_site_change']:.3g} > tol={tol:g}, final damping {float(res.damping):g}); try "
            f"a smaller damping (e.g. damping={float(res.damping) / 2:g}), schedule='sequential' or a larger "
            f"max_iter", RuntimeWarning, skip_file_prefixes=_options.INTERNAL)
    log_evidence, method = float(res.log_evidence), "ep"
    if not np.isfinite(log_evidence):
        warnings.warn("Bayes-machine EP's log evidence is not finite at the final state", RuntimeWarning,
                      skip_file_prefixes=_options.INTERNAL)
        log_evidence, method = None, None
    if sparse is not None:
        diagnostics.update(active_set_size=int(active_set_size), num_swaps=int(sparse.num_swaps),
                           active_log_evidence=float(sparse.log_evidence))
        log_evidence, method = None, None  # the evidence of the active labels only: not p(y)
    approximation = {"mean": np.asarray(mean), "eps_a": np.asarray(res.eps_a),
                     "eps_b": np.asarray(res.eps_b), "eps_mean": np.asarray(res.eps_mean),
                     "site_tau": np.asarray(res.tau), "site_nu": np.asarray(res.nu),
                     "site_a": np.asarray(res.site_a), "site_b": np.asarray(res.site_b)}
    if sparse is None:
        approximation["cov"] = np.asarray(res.f_cov)
    else:
        approximation["active"] = np.asarray(sparse.active)
    predictor = bm_predictor(model, args, kwargs, parts, samples)
    return Posterior(engine="ep", samples=samples, log_likelihood=loglik, observed_data=observed,
                     sample_stats={"lp": np.asarray(lp)[None], "log_q": np.asarray(log_q)[None]},
                     log_evidence=log_evidence, evidence_method=method, diagnostics=diagnostics,
                     approximation=approximation, predictor=predictor, model=model, model_args=args,
                     model_kwargs=kwargs, seed=seed)


def _sparse_fit(parts, noise_prior, opts, active_set_size, num_passes):
    return fit_sparse(parts.K, parts.t, noise_prior, active_set_size=active_set_size,
                      num_passes=num_passes, **opts)
