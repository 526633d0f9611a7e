"""Gaussian VI for latent-Gaussian models: the ELBO's optimum over all Gaussians of the latent
vector, by natural-gradient steps in EP's site parameters.

A model read by EP's recogniser (`inference.ep.recognise`: Gaussian prior, likelihood a sum of
scalar sites ``h_i(eta_i)`` of affine projections ``eta = z + offset``) has its full-rank Gaussian
ELBO optimum in the form ``q(z) ~ N(z; 0, K) prod_i exp(nu_i z_i - tau_i z_i^2 / 2)`` (Opper &
Archambeau 2009) with, there, ``tau_i = -E_q[h_i'']`` and ``nu_i = E_q[h_i'] + tau_i m_i``
(``m_i, v_i``: q's marginal of ``z_i``). Conjugate-computation VI (Khan & Lin 2017) steps the sites
toward those targets, ``(tau, nu) <- (1 - r) (tau, nu) + r target``: a natural-gradient step of
size ``r``. Here ``r`` starts at 1 and is halved until the ELBO (exact: Gauss-Hermite for
``E_q[h]``, the KL to the prior in closed form) does not fall. The sites start at Laplace's
(`start`): a Gaussian likelihood at its optimum, a probit GP classifier 6-9 steps from it.
Stochastic gradients on a whitened guide crawl on such posteriors (GP regression with noise
0.01: mean-field means 4.5-5.2 posterior sds off at 20000 steps; issue 21).

A non-log-concave likelihood (Student-t) has a negative expected curvature at outlying sites: their
site precisions go negative, and the Gaussian is formed as EP's (`inference.ep.gaussian`: an LU of
``sign(T) + S K S``, valid while the covariance is positive definite; a step that leaves it is
halved like one that lowers the ELBO).

Example (two probit sites on ``f ~ N(0, I)`` at ``+-1``: q's means are equal and opposite):
    >>> import jax.numpy as jnp
    >>> from inference.ep.problem import EPProblem, SiteGroup
    >>> p = EPProblem("function", None, jnp.eye(2), jnp.zeros(2), (SiteGroup("probit", {"s": jnp.array([1.0, -1.0])}),))
    >>> res = fit(p, jnp.zeros(2), jnp.zeros(2), 1e-6, 100)
    >>> bool(res.change <= 1e-6), int(res.iteration) < 20, round(float(res.mean[0] + res.mean[1]), 6)
    (True, True, 0.0)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import cho_solve, solve_triangular
from scipy.special import logsumexp

from inference import latent_newton
from inference.ep import sites
from inference.ep.gaussian import site_alpha
from inference.ep.update import initial_sites, site_change
from inference.latent_newton import log_lik

GH_POINTS = 32  # Gauss-Hermite nodes for E_q[h], E_q[h'], E_q[h''] per site
MAX_HALVINGS = 30


def _nodes(dtype):
    """Nodes and weights of E over a standard normal (EP's Gauss-Hermite rule, rescaled)."""
    x, log_w = sites._hermite(GH_POINTS)
    return jnp.asarray(x * np.sqrt(2.0), dtype), jnp.asarray(np.exp(log_w) / np.sqrt(np.pi), dtype)


def expectations(problem, m, v):
    """``(E h_i, E h_i', E h_i'', E |h_i'|, E |h_i''|)`` under ``z_i ~ N(m_i, v_i)``, ``eta_i =
    z_i + offset_i`` (the last two bound the quadrature's round-off)."""
    x, w = _nodes(m.dtype)
    eta = m[None] + jnp.sqrt(jnp.maximum(v, 0.0))[None] * x[:, None] + problem.offset[None]

    def at(e):  # sites are elementwise: one JVP of the gradient gives the diagonal
        total = lambda e: jnp.sum(log_lik(problem, e))  # noqa: E731
        d1, d2 = jax.jvp(jax.grad(total), (e,), (jnp.ones_like(e),))
        return log_lik(problem, e), d1, d2

    h, d1, d2 = jax.vmap(at)(eta)
    return w @ h, w @ d1, w @ d2, w @ jnp.abs(d1), w @ jnp.abs(d2)


def gaussian(problem, tau, nu):
    """``(m, v, KL(q || prior), ok)`` of the Gaussian with sites ``tau >= 0``, ``nu``: q's
    marginals of every ``z_i`` and its KL divergence to the prior, through the well-conditioned
    ``I + S K S`` (function space) or ``I + P' T P`` (weight space); no ``K^-1``."""
    if problem.space == "function":
        return lax.cond(jnp.all(tau >= 0), _function_positive, _function_general, problem.prior_cov, tau, nu)
    else:
        P = problem.proj
        d = P.shape[1]
        L = jnp.linalg.cholesky(jnp.eye(d, dtype=P.dtype) + P.T @ (tau[:, None] * P))
        mu = cho_solve((L, True), P.T @ nu)
        Linv = solve_triangular(L, jnp.eye(d, dtype=P.dtype), lower=True)  # C^-1 = Linv' Linv
        m = P @ mu
        v = jnp.sum((P @ Linv.T) ** 2, axis=1)
        kl = 0.5 * (jnp.sum(Linv * Linv) + jnp.dot(mu, mu) - d) + jnp.sum(jnp.log(jnp.diag(L)))
    ok = jnp.all(jnp.isfinite(L)) & jnp.all(jnp.isfinite(m)) & jnp.all(v > 0) & jnp.isfinite(kl)
    return m, v, kl, ok


def _function_positive(K, tau, nu):
    """Function space, every ``tau >= 0``: ``B = I + S K S`` by Cholesky; ``tr(K^-1 Sigma) =
    tr(B^-1)``, ``m' K^-1 m = alpha' m``, ``|K| / |Sigma| = |B|``."""
    n = K.shape[0]
    s = jnp.sqrt(tau)
    SK = s[:, None] * K
    L = jnp.linalg.cholesky(jnp.eye(n, dtype=K.dtype) + SK * s[None, :])
    V = solve_triangular(L, SK, lower=True)
    alpha = site_alpha(K, tau, nu, s, lambda X: cho_solve((L, True), X))
    m = K @ alpha
    v = jnp.diag(K) - jnp.sum(V * V, axis=0)
    Linv = solve_triangular(L, jnp.eye(n, dtype=K.dtype), lower=True)
    kl = 0.5 * (jnp.sum(Linv * Linv) + jnp.dot(alpha, m) - n) + jnp.sum(jnp.log(jnp.diag(L)))
    ok = jnp.all(jnp.isfinite(L)) & jnp.all(jnp.isfinite(m)) & jnp.all(v > 0) & jnp.isfinite(kl)
    return m, v, kl, ok


def _function_general(K, tau, nu):
    """Function space with negative site precisions (a non-log-concave likelihood, Student-t):
    ``M = sign(T) + S K S`` by LU, as EP's `inference.ep.gaussian`; ``tr(K^-1 Sigma) = tr(M^-1
    sign(T))``, ``|K| / |Sigma| = |det M|``; valid only where ``Sigma`` is positive definite (a
    Cholesky factor of it is finite)."""
    n = K.shape[0]
    s = jnp.sqrt(jnp.abs(tau))
    sign = jnp.where(tau >= 0, 1.0, -1.0).astype(K.dtype)
    SK = s[:, None] * K
    factors = jax.scipy.linalg.lu_factor(jnp.diag(sign) + SK * s[None, :])

    def solve(X):
        return jax.scipy.linalg.lu_solve(factors, X)

    alpha = site_alpha(K, tau, nu, s, solve)
    m = K @ alpha
    R = solve(SK)
    cov = K - SK.T @ R
    v = jnp.diag(cov)
    tr = jnp.sum(jnp.diag(solve(jnp.diag(sign))))
    kl = 0.5 * (tr + jnp.dot(alpha, m) - n) + 0.5 * jnp.sum(jnp.log(jnp.abs(jnp.diag(factors[0]))))
    chol = jnp.linalg.cholesky(0.5 * (cov + cov.T))
    ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.isfinite(m)) & jnp.all(v > 0) & jnp.isfinite(kl)
    return m, v, kl, ok


@jax.jit
def start(problem):
    """Starting sites: Laplace's, at the mode (`inference.latent_newton`, a few Newton steps),
    ``tau = max(-h'', 0)`` and ``nu = h' + tau z``; exact for a Gaussian likelihood. From the
    prior instead, q's marginals are so wide that 32 Gauss-Hermite nodes miss a peaked
    likelihood's shape (Student-t with scale 0.1 under a prior sd of 1: the first steps went
    wrong and the line search stalled at the prior's ELBO, 137 nats below EP's log Z)."""
    dtype = problem.offset.dtype
    a = latent_newton.newton(problem, jnp.zeros(problem.dim, dtype), 10 * float(jnp.finfo(dtype).eps), 100).a
    z = problem.prior_cov @ a if problem.space == "function" else problem.proj @ a
    _, d1, w = latent_newton.derivatives(problem, z + problem.offset)
    ok = jnp.all(jnp.isfinite(d1)) & jnp.all(jnp.isfinite(w)) & jnp.all(jnp.isfinite(z))
    tau0, nu0 = initial_sites(problem)
    return jnp.where(ok, w, tau0), jnp.where(ok, d1 + w * z, nu0)


class _Point(NamedTuple):
    tau: jax.Array
    nu: jax.Array
    elbo: jax.Array  # without the likelihood's constant terms (`Recognised.const_log_lik`)
    m: jax.Array
    v: jax.Array
    target_tau: jax.Array  # -E[h'']
    target_nu: jax.Array
    floor: jax.Array  # round-off of the targets, per site, in site_change's units


def _point(problem, tau, nu):
    m, v, kl, ok = gaussian(problem, tau, nu)
    eh, d1, d2, a1, a2 = expectations(problem, m, v)
    t_tau = -d2
    t_nu = d1 + t_tau * m
    eps = jnp.finfo(m.dtype).eps
    sv = jnp.sqrt(jnp.maximum(v, 0.0))
    # the targets' round-off: of sums over the nodes whose terms may cancel (Student-t's h'')
    floor = 16 * eps * jnp.maximum((a1 + a2 * jnp.abs(m)) * sv, a2 * v)
    elbo = jnp.where(ok, jnp.sum(eh) - kl, -jnp.inf)
    return _Point(tau, nu, elbo, m, v, t_tau, t_nu, floor)


class Result(NamedTuple):
    tau: jax.Array
    nu: jax.Array
    elbo: jax.Array
    mean: jax.Array  # q's marginals of z
    var: jax.Array
    change: jax.Array  # site change of a full step from the final sites (0 at the optimum)
    iteration: jax.Array
    stalled: jax.Array  # no step size kept the ELBO from falling
    trace: jax.Array  # the ELBO after each step (NaN past the last)


def _change(p):
    return site_change(p.tau, p.nu, p.target_tau, p.target_nu, p.v, p.floor)


@partial(jax.jit, static_argnames=("max_iter",))
def fit(problem, tau0, nu0, tol, max_iter: int) -> Result:
    """Natural-gradient steps from the sites ``(tau0, nu0)`` until a full step would change no site
    by more than ``tol`` (`inference.ep.update.site_change`: relative marginal precision, mean
    shift in sds, beyond the targets' round-off), the line search stalls, or ``max_iter`` steps."""
    dtype = problem.offset.dtype

    def step(c):
        p, it, stalled, trace = c
        slack = 100 * jnp.finfo(dtype).eps * jnp.maximum(1.0, jnp.abs(p.elbo))

        def candidate(r):
            return _point(problem, p.tau + r * (p.target_tau - p.tau), p.nu + r * (p.target_nu - p.nu))

        def shorter(s):
            r, q = s
            return ~(q.elbo + slack >= p.elbo) & (r > 2.0 ** -MAX_HALVINGS)

        def halve(s):
            r = s[0] * 0.5
            return r, candidate(r)

        _, q = lax.while_loop(shorter, halve, (jnp.ones((), dtype), candidate(jnp.ones((), dtype))))
        ok = jnp.isfinite(q.elbo) & (q.elbo + slack >= p.elbo)
        p = jax.tree.map(lambda a, b: jnp.where(ok, a, b), q, p)
        return p, it + 1, ~ok, trace.at[it].set(jnp.where(ok, p.elbo, jnp.nan))

    def cond(c):
        p, it, stalled, _ = c
        return (it < max_iter) & ~stalled & (_change(p) > tol)

    p0 = _point(problem, tau0, nu0)
    trace0 = jnp.full((max_iter,), jnp.nan, dtype)
    p, it, stalled, trace = lax.while_loop(cond, step, (p0, jnp.zeros((), jnp.int32), jnp.zeros((), bool), trace0))
    return Result(p.tau, p.nu, p.elbo, p.m, p.v, _change(p), it, stalled, trace)


MAX_STEPS = 200  # natural-gradient steps at most (a probit GP classifier takes ~10)


def recognised(model, args, kwargs, trace, seed, guide: str, white: list):
    """EP's recognition of ``model`` where this VI applies, else ``None``: a named Gaussian guide
    (``"mvn"``; ``"normal"`` only where every latent site is a multivariate normal, whose
    correlations its prior declares: a GP's ``f``), every latent Gaussian with at least one
    multivariate normal among them (`inference.whiten` would whiten it), and every likelihood
    site differentiable."""
    from inference import _model, latent_newton
    from inference.ep.driver import recognition_kept
    from inference.trace_reading import GAUSSIAN_PRIORS, unwrap

    latent = _model.latent_sites(trace)
    if not white or guide not in ("normal", "mvn") or (guide == "normal" and sorted(white) != sorted(latent)):
        return None
    if not all(isinstance(unwrap(trace[n]["fn"]), GAUSSIAN_PRIORS) for n in latent):
        return None
    try:
        rec = recognition_kept(model, args, kwargs, trace, seed)  # EP's, kept per model and data
    except ValueError:  # not latent-Gaussian after all (a prior depending on a latent, ...)
        return None
    return rec if latent_newton.differentiable(rec.problem) else None


def posterior(model, args, kwargs, trace, rec, *, guide: str, tol: float, steps: int, num_samples: int,
              seed: int, progress: bool = False):
    """The `Posterior` of this VI (``engine="vi"``), or ``None`` where no valid Gaussian was found
    (a non-finite ELBO): the caller then runs stochastic VI. ``tol`` is the site-change tolerance
    (floored at the working precision); ``progress``: a bar over the fit's two stages (the steps,
    one compiled loop; the draws), shown only once the fit has run for a second."""
    import warnings

    from inference import _model, _options, convergence
    from inference.ep.driver import gaussian_draws
    from inference.ep.predict import make_predictor
    from inference.posterior import Posterior
    from inference.progress import Bar

    bar = Bar(progress, 2, "vi", "stage")
    problem = rec.problem
    tol = _options.working_tol(tol, problem.offset.dtype)
    max_iter = min(int(steps), MAX_STEPS)
    res = fit(problem, *start(problem), tol, max_iter)
    if not bool(jnp.isfinite(res.elbo)):
        bar.close()
        return None
    bar.update(1)
    change, iterations = float(res.change), int(res.iteration)
    converged = change <= tol
    if not converged:
        warnings.warn(
            f"VI (natural-gradient steps on the latent Gaussian) stopped after {iterations} steps with a site "
            f"change of {change:.3g} > tol={tol:g}{' (no step size raised the ELBO)' if bool(res.stalled) else ''}: "
            "the Gaussian may not be the ELBO's optimum", skip_file_prefixes=_options.INTERNAL)
    draws = gaussian_draws(model, args, kwargs, trace, rec, res, num_samples, seed)
    elbo = float(res.elbo) + rec.const_log_lik
    log_w = draws.lp - draws.log_q
    is_log_ev = float(logsumexp(log_w) - np.log(len(log_w)))
    trace_elbo = np.asarray(res.trace)[:iterations] + rec.const_log_lik
    diagnostics = {
        "converged": convergence.vi(converged, elbo), "elbo": elbo, "elbo_trace": trace_elbo,
        "steps": iterations, "guide": guide, "importance_log_evidence": is_log_ev,
        "pareto_k": convergence.pareto_k(log_w),
        # q: a full-rank Gaussian over every latent, at the ELBO's optimum (this module)
        "updates": "natural-gradient", "max_site_change": change, "tol": tol, "space": problem.space,
        "whitened": [],
    }
    approximation = {"mean": draws.mean, "cov": draws.cov, "site_tau": np.asarray(res.tau),
                     "site_nu": np.asarray(res.nu)}
    predictor = make_predictor(model, args, kwargs, rec, draws.u, list(_model.observed_sites(trace)))
    bar.update(1)
    bar.close()
    return Posterior(
        engine="vi", samples=draws.samples, log_likelihood=draws.log_lik, observed_data=draws.observed,
        sample_stats={"lp": draws.lp[None], "log_q": draws.log_q[None]}, log_evidence=elbo,
        evidence_method="elbo", diagnostics=diagnostics, approximation=approximation, predictor=predictor,
        model=model, model_args=tuple(args), model_kwargs=dict(kwargs), seed=seed)
