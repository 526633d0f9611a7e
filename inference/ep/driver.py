"""``ep``: expectation propagation on a latent-Gaussian NumPyro program, returning a Posterior.

Example:
    >>> import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
    >>> from jax.scipy.stats import norm
    >>> def probit_regression(X, y=None):
    ...     w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    ...     numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(X @ w)), obs=y)
    >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = (X[:, 0] > 0).astype(float)
    >>> post = ep(probit_regression, X, y=y, num_samples=200, progress=False)
    >>> post.engine, post.samples["w"].shape, post.diagnostics["converged"]
    ('ep', (1, 200, 2), True)
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro

from inference import _options, _special, compiled, convergence, exported
from inference._model import finish_samples, log_joint, observed_sites, refuse_subsampling, structure_trace, support_point, trace_model
from inference.ep.evidence import log_evidence
from inference.ep.gaussian import site_moments, to_latent
from inference.ep.predict import make_predictor, robust_cholesky
from inference.ep.recognise import recognise, working_space
from inference.ep.state import EPState
from inference.ep.update import init, run_arguments, sweeps
from inference.hyper import sites as hyper_sites
from inference.posterior import Posterior
from inference.progress import Bar, next_chunk
from inference.trace_reading import GAUSSIAN_PRIORS, latent_sites, unwrap

SCHEDULES = ("parallel", "sequential")


# EP's programs, each kept on disk per problem structure (`inference.exported.flat`): a new process
# does not trace them again (~0.3 s of a first fit), and every model with that structure shares them.
_STATE, _PAIR = EPState(*range(5)), jax.tree.structure((0, 0))  # output trees
_init = exported.flat(init, "ep-init", (), jax.tree.structure(_STATE))
_SWEEPS = {s: exported.flat(sweeps(s), f"ep-sweeps-{s}", (), jax.tree.structure((_STATE, 0, 0, 0)))
           for s in SCHEDULES}
_evidence = exported.flat(log_evidence, "ep-evidence", (), _PAIR)
_to_latent = exported.flat(to_latent, "ep-to-latent", (), _PAIR)


@compiled.scoped
def ep(model, *args, schedule: str = "parallel", damping: float | None = None, tol: float = 1e-6,
       max_iter: int = 200, num_samples: int = 1000, seed: int = 0, progress: bool | None = None,
       covariance: str | None = None, active_set_size: int | None = None, hyper: str | None = None,
       model_kwargs: dict | None = None, **model_kw) -> Posterior:
    """Expectation propagation for a NumPyro program with a Gaussian latent vector.

    The model's latent sites must be Gaussian (``Normal`` / ``MultivariateNormal``, jointly
    forming ``u``), and each observation's likelihood a function of one affine projection
    ``a_i^T u + b_i`` (``Bernoulli(logits=X @ w)``, ``Normal(X @ w + b, sigma)``,
    ``Poisson(jnp.exp(X @ w))``, ``Bernoulli(probs=norm.cdf(f))`` for a GP ``f``, ...); the
    structure is read from the program, see :mod:`inference.ep.recognise`. Probit and Gaussian
    likelihoods use closed forms, others quadrature. A model with the Bayes machine's
    ``NoisyStep`` likelihood or spike-and-slab sites is handed to its dedicated EP.

    Args:
        model, *args, **model_kw: the NumPyro program and its own arguments.
        schedule: ``"parallel"`` (all sites at once, damped) or ``"sequential"`` (one at a time).
        damping: fraction of each site update taken, in (0, 1]; 1 is undamped. Lower it if EP
            oscillates or does not converge. Default (None): the parallel schedule runs undamped
            first and restarts with damping 0.5 if that run does not converge (same fixed point,
            about half the sweeps where undamped EP converges), then, if that fails too, runs the
            sequential schedule (damping 0.5; ``diagnostics["schedule"]`` says which ran:
            parallel EP can diverge where sequential EP converges, e.g. a logistic regression
            with a broad prior); the sequential schedule uses 0.5;
            the Bayes machine and spike-and-slab EPs keep their own defaults (spike-and-slab
            probit with full covariance also starts undamped).
        tol: convergence threshold on the largest effect of a site update on its marginal
            (relative change of the marginal precision, or mean shift in marginal sds); at
            least 30 machine epsilons of the working precision (3.6e-6 in float32, JAX's default,
            where round-off moves the sites by ~1e-6 each sweep). The value used is in
            ``diagnostics["tol"]``.
        max_iter: maximum number of sweeps.
        num_samples: draws from the EP Gaussian stored as ``samples`` (one chain).
        seed: seeds the draws (and the model's trace).
        progress: a bar over sweeps, shown once EP has run for a second (`inference.progress`);
            default on unless ``INFERENCE_PROGRESS=0``. The Bayes machine and spike-and-slab EPs
            run one compiled loop each and show no bar.
        covariance: spike-and-slab models only: ``"full"`` (default there in float64; O(n^2 d) per
            sweep, closest to MCMC) or ``"factorized"`` (the thesis' fully factorised O(n d) EP; the
            default in float32, where the full form's Woodbury updates do not converge).
        active_set_size: Bayes-machine models only (``probmodels.bayes_machine``): ``d`` runs the
            sparse Bayes machine, EP on an active set of ``d`` training points chosen by the
            evidence (`inference.ep.sparse_bm`; O(n d^2) per pass instead of O(n^3)). Its
            ``log_evidence`` is None (the evidence of the active labels is in
            ``diagnostics["active_log_evidence"]``).
        hyper: ``None`` (default: every latent site must be Gaussian; a model with
            hyperparameter sites, e.g. ``RBF(lengthscale=dist.LogNormal(0.0, 1.0))``, is refused
            with an error naming them), ``"map"`` (the hyperparameters at the mode of
            ``log Z_EP + log p``, by BFGS on the gradient of EP's converged log evidence with the
            sites held fixed, warm-started between steps; ``evidence_method="ep-map"``) or
            ``"integrate"`` (an INLA-style mixture over a design of hyperparameter values,
            ``"ep-integrated"``); see `inference.hyper` and `inference.hyper.ep_fit`.
            Hyperparameters of the latent Gaussian's prior (kernel parameters, a weight prior's
            scale) and of Gaussian likelihoods (a noise level); one another likelihood depends on
            (a Student-t's scale, a probit's slope) is refused, ``inference.laplace(...,
            hyper=...)`` handles it. With ``hyper``, ``tol / 100`` bounds
            the predicted gain left at the mode and ``tol`` (floored at the working precision,
            as without ``hyper``) is the sweeps' tolerance at each evaluation; ``max_iter`` caps both the BFGS iterations and
            each EP run's sweeps; ``schedule`` and ``damping`` are used as above (with the default
            damping, a parallel search whose evidence is not finite at its start runs again with
            the sequential schedule); no progress
            bar is shown. The Bayes machine learns its kernel's hyperparameters by its own EP's
            evidence (the noise rate stays with EP; `inference.hyper.bm_fit`: the sites'
            implicit derivative is added, as its log Z is not stationary in them); so does the
            spike-and-slab regression with a known noise scale, for priors on ``p_incl`` and
            ``slab_scale`` (`inference.hyper.ss_fit`); the sparse Bayes
            machine, the spike-and-slab probit and the unknown-noise regression do not take it.
        model_kwargs: model arguments whose names collide with the options above.

    Returns a :class:`~inference.posterior.Posterior` with ``engine="ep"``, ``log_evidence`` the
    EP log marginal likelihood (``evidence_method="ep"``), diagnostics ``converged`` (README.md,
    "What `converged` means"),
    ``iterations``, ``max_site_change``, ``num_skipped_updates`` (site updates skipped: cavity
    variance not positive, or tilted moments not finite), ``num_negative_site_precisions``
    (sites ending with a negative precision, e.g. Student-t outliers), the Gaussian over the
    concatenated latents in ``approximation`` (``mean``, ``cov``) with the site parameters, and a
    predictor (GP latents are conditioned at new inputs, see :mod:`inference.ep.predict`).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = (X[:, 0] > 0).astype(float)
        >>> post = inference.ep(probmodels.probit_regression, X, y, num_samples=200, progress=False)
        >>> post.diagnostics["converged"], post.evidence_method, post.samples["w"].shape
        (True, 'ep', (1, 200, 2))
    """
    hyper_sites.check_option(hyper)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if damping is not None:
        damping = _options.unit_interval(damping, "damping", closed_right=True)
    tol = _options.positive_float(tol, "tol")
    max_iter = _options.positive_int(max_iter, "max_iter")
    num_samples = _options.positive_int(num_samples, "num_samples")
    seed = _options.seed(seed)
    progress = _options.progress(progress)
    kwargs = _options.model_kwargs(model_kw, model_kwargs)
    _options.model_arguments(ep, model, args, kwargs)
    # the sites from one abstract trace (the model's own input checks still raise first; a Gram
    # matrix is still computed and checked concretely): the generic EP reads types and observed
    # values only. An eager run compiled each operation of the model apart (~1.5 s of a GP
    # classifier's first fit: its prior draw, its Cholesky, log_ndtr of the draw)
    trace = structure_trace(model, args, kwargs, seed)
    refuse_subsampling(trace, "inference.ep")
    options = dict(schedule=schedule, damping=damping, tol=tol, max_iter=max_iter,
                   num_samples=num_samples, seed=seed, progress=progress)
    hook = _dispatch(trace)
    if hook is not None or hyper is not None:  # these read the concrete trace
        trace = trace_model(model, args, kwargs, seed=seed)
    if active_set_size is not None:
        active_set_size = _options.positive_int(active_set_size, "active_set_size")
        if not _special.has_noisy_step(trace):
            raise ValueError("active_set_size: only the Bayes machine's EP (a NoisyStep likelihood) takes it")
        options["active_set_size"] = active_set_size
    if covariance is not None and not _special.has_spike_and_slab(trace):
        raise ValueError("covariance: only spike-and-slab EP takes it ('full' or 'factorized')")
    if hyper is not None:
        if hook is not None and _special.has_noisy_step(trace) and active_set_size is None:
            from inference.hyper.bm_fit import bm_hyper

            return bm_hyper(model, args, kwargs, trace, hyper, schedule=schedule, damping=damping,
                            num_samples=num_samples, max_iter=max_iter, tol=tol, seed=seed)
        if hook is not None and _special.has_spike_and_slab(trace) and covariance in (None, "full"):
            from inference.hyper.ss_fit import ss_hyper

            return ss_hyper(model, args, kwargs, trace, hyper, schedule=schedule, damping=damping,
                            num_samples=num_samples, max_iter=max_iter, tol=tol, seed=seed)
        if hook is not None:
            raise ValueError(f"hyper={hyper!r}: the sparse Bayes machine's (active_set_size) EP and the factorised "
                             "spike-and-slab EP (covariance='factorized') do not learn hyperparameters; use "
                             "inference.laplace(..., hyper=...), the full Bayes machine, or the spike-and-slab "
                             "regression with a known noise_scale")
        from inference.hyper.ep_fit import ep_hyper

        return ep_hyper(model, args, kwargs, trace, hyper, schedule=schedule, damping=damping,
                        num_samples=num_samples, max_iter=max_iter, tol=tol, seed=seed)
    if hook is not None:
        # the float32 floor of tol, as for the generic EP below: a float32 fit otherwise reported
        # converged=False at tol 1e-6 (Bayes machine: site change 2.7e-6 after 200 sweeps)
        options["tol"] = _options.working_tol(tol, jax.dtypes.canonicalize_dtype(np.float64))
        if covariance is not None:
            options["covariance"] = covariance
        if damping is None:  # each dedicated EP keeps its own default
            del options["damping"]
        post = hook(model, args, kwargs, trace, **options)
        post.diagnostics.update(_kernel_jitter(trace))
        return post
    _refuse_hyperparameters(model, args, kwargs, trace, seed)
    rec = recognition_kept(model, args, kwargs, trace, seed)
    tol = _options.working_tol(tol, rec.problem.offset.dtype)
    state, iterations, skipped, change, damping, schedule = _default_damping_run(rec.problem, schedule, damping,
                                                                                 tol, max_iter, progress)
    converged = bool(change <= tol)
    if not converged:
        other = ", or schedule='sequential'" if schedule == "parallel" else ""
        warnings.warn(
            f"EP did not converge in {iterations} sweeps ({schedule} schedule; largest site change "
            f"{float(change):.3g} > tol={tol:g}); try a smaller damping (e.g. damping={damping / 2:g}), "
            f"a larger max_iter{other}", RuntimeWarning, skip_file_prefixes=_options.INTERNAL)
    log_z, ok = _evidence(rec.problem, state)
    log_z = float(log_z) + rec.const_log_lik if bool(ok) else None
    if log_z is None:
        warnings.warn("EP's log evidence is undefined at the final state (a cavity variance is not positive)",
                      RuntimeWarning, skip_file_prefixes=_options.INTERNAL)
    draws = gaussian_draws(model, args, kwargs, trace, rec, state, num_samples, seed)
    mean_u, cov_u, u_draws, samples, log_lik, observed = (draws.mean, draws.cov, draws.u, draws.samples,
                                                          draws.log_lik, draws.observed)
    diagnostics = {
        "converged": convergence.ep(change, tol, log_z),  # README.md: what `converged` means
        "iterations": int(iterations),
        "max_site_change": float(change),
        "num_skipped_updates": int(skipped),
        # sites left with a negative precision (non-log-concave likelihoods, e.g. Student-t): valid
        # while every cavity is, which the sweeps check (a site whose cavity is not is skipped)
        "num_negative_site_precisions": int(np.sum(np.asarray(state.tau) < 0)),
        "schedule": schedule,
        "damping": damping,
        "tol": tol,
        "space": rec.problem.space,
        "site_kinds": dict(rec.site_kinds),
        "sampling_jitter": draws.jitter,
        "pareto_k": convergence.pareto_k(draws.lp - draws.log_q),  # q as an importance proposal (> 0.7: poor)
        **_kernel_jitter(trace),
    }
    approximation = {
        "mean": mean_u, "cov": cov_u,
        "site_tau": np.asarray(state.tau), "site_nu": np.asarray(state.nu),
        "site_log_scale": np.asarray(state.log_scale),
    }
    predictor = make_predictor(model, args, kwargs, rec, u_draws, list(observed_sites(trace)))
    return Posterior(
        engine="ep", samples=samples, log_likelihood=log_lik, observed_data=observed,
        sample_stats={"lp": draws.lp[None], "log_q": draws.log_q[None]}, log_evidence=log_z,
        evidence_method="ep" if log_z is not None else None, diagnostics=diagnostics,
        approximation=approximation, predictor=predictor, model=model, model_args=tuple(args),
        model_kwargs=dict(kwargs), seed=seed)


class _Draws(NamedTuple):
    """What `gaussian_draws` returns."""

    mean: np.ndarray  # the latent vector's EP Gaussian
    cov: np.ndarray
    jitter: float  # relative jitter its Cholesky factor needed
    u: np.ndarray  # (num_samples, D) draws of the latent vector
    log_q: np.ndarray  # their log density under the Gaussian
    lp: np.ndarray  # their log joint under the model
    samples: dict  # every site's draws, one chain (`inference._model.finish_samples`)
    log_lik: dict
    observed: dict


def gaussian_draws(model, args, kwargs, trace, rec, state, num_samples, seed) -> _Draws:
    """``num_samples`` draws from the Gaussian of the sites ``state.tau, state.nu`` (EP's converged
    state; VI's optimum, `inference.latent_vi`) and what is computed per draw (log density, log
    joint, the model's other sites, the pointwise log likelihood): the part of a fit that grows
    with ``num_samples``."""
    mean_u, cov_u = (np.asarray(x, float) for x in _to_latent(rec.problem, rec.latent_map, state.tau, state.nu))
    if not (np.all(np.isfinite(mean_u)) and np.all(np.isfinite(cov_u))):
        raise FloatingPointError("the sites give a non-finite Gaussian approximation (EP: lower the damping)")
    key = jax.random.PRNGKey(seed)
    L, jitter = robust_cholesky(cov_u, "posterior covariance of the sites' Gaussian", rec.problem.offset.dtype)
    eps = np.asarray(jax.random.normal(key, (num_samples, mean_u.size), dtype=jnp.result_type(float)))
    u_draws = mean_u + eps @ L.T
    log_q = (-0.5 * np.sum(eps ** 2, axis=1) - np.sum(np.log(np.diag(L)))
             - 0.5 * mean_u.size * np.log(2 * np.pi))
    flat = {b.name: u_draws[:, b.offset:b.offset + b.size].reshape((num_samples,) + b.shape) for b in rec.blocks}
    lp = log_joint(model, flat, args, kwargs)
    samples, log_lik, observed = finish_samples(model, flat, args, kwargs, jax.random.fold_in(key, 3), 1, trace=trace)
    log_q = _stable_log_q(rec, state, u_draws, lp, log_q, log_lik)
    return _Draws(mean_u, cov_u, jitter, u_draws, log_q, lp, samples, log_lik, observed)


def _stable_log_q(rec, state, u_draws, lp, log_q, log_lik):
    """``log_q`` such that the importance log weights ``lp - log_q`` are computed without the
    prior's inverse: q is the prior times the Gaussian sites, so ``log p(u, y) - log q(u) =
    sum_i h_i(eta_i) - sum_i (nu_i z_i - tau_i z_i^2 / 2) + C`` with ``z = A (u - m0)``, the
    likelihood ``h`` the model's own pointwise log likelihood, and ``C`` a constant, calibrated as
    the median of its direct estimate over the draws. In float32 the model's log joint of a GP
    latent carries the round-off of ``K^-1`` (condition number ~1e8 with jitter 1e-6): on a
    Poisson GP (n = 50) EP's weights gave Pareto k 1.37 and PSIS-LOO 2.8 nats off float64's
    (-78.84 against -81.68), natural-gradient VI k 1.06 and 0.95 nats; this form gives float64's
    weights to round-off. Returned: ``lp`` minus these weights (q's log density up to ``lp``'s
    round-off), where every term is finite; else ``log_q`` as given."""
    dtype = rec.problem.offset.dtype
    um = np.asarray(u_draws).astype(dtype).astype(float) - np.asarray(rec.m0, float)  # as the model saw them
    A = np.asarray(rec.A, float)
    tau, nu = np.asarray(state.tau, float), np.asarray(state.nu, float)
    if A.shape[0] <= A.shape[1]:  # no more sites than latent dimensions (a GP): z itself
        z = um @ A.T
        sites = z @ nu - 0.5 * (z * z) @ tau
    else:  # many sites (a GLM): through A' nu and A' T A, no draws x sites array
        sites = um @ (A.T @ nu) - 0.5 * np.sum((um @ (A.T @ (tau[:, None] * A))) * um, axis=1)
    n = um.shape[0]
    loglik = sum(np.asarray(v).reshape(n, -1).sum(axis=1, dtype=np.float64) for v in log_lik.values())
    log_w = loglik - sites
    offset = np.asarray(lp, float) - np.asarray(log_q, float) - log_w
    if not (np.all(np.isfinite(log_w)) and np.all(np.isfinite(offset))):
        return log_q
    return np.asarray(lp, float) - (log_w + np.median(offset))


class GaussianFit(NamedTuple):
    """What `gaussian_fit` returns: the latent's EP Gaussian, the evidence, and what a next call on
    the same model and data reuses (the recognition, the converged sites)."""

    mean: np.ndarray
    cov: np.ndarray
    log_evidence: float | None
    converged: bool
    recognised: object
    sites: tuple  # (tau, nu)
    sweeps: int


def gaussian_fit(model, args, kwargs, *, schedule="parallel", damping=None, tol=1e-6, max_iter=200, seed=0,
                 prior=None, recognised=None, sites=None) -> GaussianFit:
    """EP's Gaussian approximation of the latent vector only, without draws or a `Posterior`, for
    methods built on EP (distributed EP) that call it many times on the same structure (one
    compilation). ``damping=None`` is `inference.ep`'s default (undamped, then 0.5 if that fails,
    then the sequential schedule).

    ``prior=(m0, S0)`` replaces the latent's Gaussian prior, and ``recognised`` (the recognition
    a previous call returned, of the same model and data) skips reading the model again: the
    likelihood's projections, site kinds and constants do not depend on the prior, so a loop that
    changes only the prior (distributed EP's cavities) traces and recognises once, not per call.
    ``sites`` (a previous call's) start the sweeps there instead of at the initial sites, where
    they give a valid Gaussian with this prior: a loop whose prior moves little converges in a
    few sweeps (distributed EP, n = 4000 logistic regression, 4 shards: a warm fit 5.5 s -> 1.5 s)."""
    if recognised is None:
        recognised = recognition(model, args, kwargs, seed)
    rec = recognised
    if prior is not None:
        m0, S0 = (np.asarray(x, float) for x in prior)
        problem, latent_map = working_space(rec.A, rec.b, m0, S0, rec.problem.groups, rec.blocks)
        rec = dataclasses.replace(rec, problem=problem, latent_map=latent_map, m0=m0, S0=S0)
    tol = _options.working_tol(tol, rec.problem.offset.dtype)
    start = None
    if sites is not None:
        start, ok = _state_at(rec.problem, *sites)
        start = start if bool(ok) else None
    state, iterations, _, change, *_ = _default_damping_run(rec.problem, schedule, damping, tol, max_iter, False, start)
    log_z, ok = _evidence(rec.problem, state)
    log_z = float(log_z) + rec.const_log_lik if bool(ok) else None
    mean_u, cov_u = (np.asarray(x, float) for x in _to_latent(rec.problem, rec.latent_map, state.tau, state.nu))
    return GaussianFit(mean_u, cov_u, log_z, convergence.ep(float(change), tol, log_z), recognised,
                       (state.tau, state.nu), int(iterations))


MAX_KEPT_LATENT = 2000  # recognitions kept in memory only up to this latent size (its D x D prior, x3)


def recognition_kept(model, args, kwargs, trace, seed):
    """`recognise`, kept per model computation and data contents (`inference.compiled.memo`): a
    fit with other options, seed or number of draws on the same model and data reads it once
    (~50 ms of a warm n = 500 GP classifier call). Not kept above `MAX_KEPT_LATENT` latent
    dimensions (its D x D matrices would fill memory). The seed only picks the check points."""
    size = sum(int(np.prod(np.shape(trace[name]["value"]))) for name in latent_sites(trace))
    read = lambda: recognise(model, args, kwargs, trace, seed=seed)  # noqa: E731
    return compiled.memo("ep-recognition", model, args, kwargs, read, contents=True) if size <= MAX_KEPT_LATENT else read()


def recognition(model, args, kwargs, seed=0):
    """The EP recognition of ``model`` on these arguments (what `gaussian_fit` takes as
    ``recognised``). It runs the model under NumPyro's handlers, whose stack is global: call it
    from one thread at a time; `gaussian_fit` given a recognition runs compiled programs only.

    Example:
        >>> import numpy as np, probmodels
        >>> X = np.array([[1.0], [-1.0], [2.0]]); y = np.array([1, 0, 1])
        >>> rec = recognition(probmodels.probit_regression, (X, y), {})
        >>> rec.problem.space, dict(rec.site_kinds)
        ('weight', {'y': 'probit'})
    """
    return recognise(model, args, kwargs, structure_trace(model, args, kwargs, seed), seed=seed)


@jax.jit
def _state_at(problem, tau, nu):
    """``(EPState, ok)`` of given sites under ``problem`` (their marginals recomputed)."""
    mean, var, ok = site_moments(problem, tau, nu)
    ok = ok & jnp.all(jnp.isfinite(tau)) & jnp.all(jnp.isfinite(nu))
    return EPState(tau, nu, jnp.zeros_like(tau), mean, var), ok


def _refuse_hyperparameters(model, args, kwargs, trace, seed) -> None:
    """``hyper=None`` with continuous non-Gaussian latent sites (a kernel parameter, a prior scale
    given as a distribution): a ValueError naming them and the options, or, where the model is no
    latent-Gaussian model even with those sites fixed (a multivariate likelihood, a discrete
    latent, a mixture of experts' gate), `recognise`'s own reason: advice to fix them or pass
    ``hyper=`` would only lead to that second error. Discrete or Gaussian sites are left to
    `recognise`."""
    found = []
    for name in latent_sites(trace):
        fn = trace[name]["fn"]
        if not (getattr(fn.support, "is_discrete", False) or isinstance(unwrap(fn), GAUSSIAN_PRIORS)):
            found.append(name)
    if found:
        # a value in each site's support (the trace's values are abstract): only the structure of
        # the fixed model matters here, and an eager prior draw compiled ~160 small programs
        fixed = numpyro.handlers.condition(model, data=support_point(model, args, kwargs, seed, found))
        try:
            recognition(fixed, args, kwargs, seed)
        except ValueError as exc:
            raise ValueError(f"EP does not apply to this model, even with {found} fixed: {exc}") from None
        priors = ", ".join(f"{n!r} has a {type(unwrap(trace[n]['fn'])).__name__} prior" for n in found)
        raise ValueError(
            f"the model has hyperparameter sites {found} ({priors}; EP needs Gaussian latent sites): pass "
            "hyper='map' (their mode by EP's evidence) or hyper='integrate' (integrated over), or give them "
            "fixed values as model arguments")


def _kernel_jitter(trace) -> dict:
    """``{"kernel_jitter": {site: jitter}}`` for GP latents whose model recorded the jitter added to
    the kernel matrix (`probmodels.kernels.gram`), else ``{}``."""
    found = {name: float(site["infer"]["kernel_jitter"]) for name, site in trace.items()
             if site.get("type") == "sample" and "kernel_jitter" in (site.get("infer") or {})}
    return {"kernel_jitter": found} if found else {}


UNDAMPED_MAX_ITER = 50  # default damping: sweeps allowed undamped before the damped run (0.5) takes over


def _default_damping_run(problem, schedule, damping, tol, max_iter, progress, start=None):
    """``_iterate`` plus the damping and schedule used. With ``damping=None`` EP first runs
    undamped (about half the sweeps of damping 0.5 where it converges: 11 vs 28 on a probit GP
    classifier, n = 500, same fixed point to 2e-6) and, if that run has not converged within
    `UNDAMPED_MAX_ITER` sweeps or left non-finite sites, restarts damped (0.5) from the same
    start (``start``, an `EPState`, or the initial sites). If the damped parallel run does not
    converge either, the sequential schedule (damping 0.5) runs from that start: parallel EP
    can diverge where sequential EP converges (a logistic regression with a broad prior, n = 200,
    prior sd 30: damped parallel sweeps grew the cavities until no step gave a valid Gaussian;
    sequential converged in 21 sweeps to the fixed point parallel EP reaches at damping 0.1)."""
    if damping is not None:
        return (*_iterate(problem, schedule, damping, tol, max_iter, progress, start), damping, schedule)
    if schedule == "parallel":
        out = _iterate(problem, schedule, 1.0, tol, min(max_iter, UNDAMPED_MAX_ITER), progress, start)
        if _finished(out, tol):
            return (*out, 1.0, schedule)
        out = _iterate(problem, schedule, 0.5, tol, max_iter, progress, start)
        if _finished(out, tol):
            return (*out, 0.5, schedule)
    return (*_iterate(problem, "sequential", 0.5, tol, max_iter, progress, start), 0.5, "sequential")


def _finished(out, tol) -> bool:
    """Whether an `_iterate` run converged with finite sites."""
    state, change = out[0], float(out[3])
    return change <= tol and bool(np.all(np.isfinite(np.asarray(state.tau))) and np.all(np.isfinite(np.asarray(state.nu))))


def _iterate(problem, schedule, damping, tol, max_iter, progress, start=None):
    state = _init(problem) if start is None else start
    sweep = _SWEEPS[schedule]
    if not progress:
        return sweep(problem, state, *run_arguments(state, damping, tol, max_iter))
    # in chunks sized by the measured rate (`progress.next_chunk`): a short run is two calls and
    # shows no bar; the sweeps and so the answer are those of one call
    it, skipped, change, start = 0, 0, float("inf"), time.perf_counter()
    with Bar(True, max_iter, "EP", "sweep") as bar:
        while it < max_iter and change > tol:
            stop = it + next_chunk(it, time.perf_counter() - start, max_iter - it)
            state, it_new, skipped, change = sweep(problem, state, *run_arguments(state, damping, tol, stop, it,
                                                                                  skipped, change))
            bar.update(int(it_new) - it, change=f"{float(change):.2e}")
            it, change = int(it_new), float(change)
            if not np.isfinite(change):  # a sweep found no valid Gaussian: the next would repeat it
                break
    return state, it, skipped, change


def _dispatch(trace):
    """The dedicated EP for Bayes-machine (``NoisyStep``) or spike-and-slab models, else None."""
    if _special.has_noisy_step(trace):
        try:
            from inference.ep.bm_posterior import ep_posterior
        except ModuleNotFoundError as exc:
            if exc.name != "inference.ep.bm_posterior":
                raise
            raise NotImplementedError(
                "the model has a NoisyStep (Bayes machine) likelihood, whose EP (inference.ep.bm_posterior) "
                "is not available in this installation") from exc
        return ep_posterior
    if _special.has_spike_and_slab(trace):
        try:
            from inference.spikeslab import ep_posterior
        except ImportError as exc:
            raise NotImplementedError("spike-and-slab EP (inference.spikeslab.ep_posterior) is not available") from exc
        return ep_posterior
    return None
