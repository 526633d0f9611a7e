"""The three engine entries for spike-and-slab models, called by ``inference.ep`` /
``inference.mcmc`` / ``inference.vi`` when :func:`~inference.spikeslab.matches` says the traced
model holds a :class:`SpikeSlab` site. Each has the signature
``X_posterior(model, args, kwargs, trace, **engine_options) -> Posterior``.

Example:
    >>> import numpy as np
    >>> from probmodels.spike_slab import spike_and_slab_probit
    >>> from inference._model import trace_model
    >>> X = np.random.default_rng(0).normal(size=(40, 30)); y = X[:, 0] > 0
    >>> args, kw = (X, y), {}
    >>> post = ep_posterior(spike_and_slab_probit, args, kw, trace_model(spike_and_slab_probit, args, kw), num_samples=50)
    >>> post.samples["z"].shape, int(np.argmax(post.approximation["inclusion_probability"]))
    ((1, 50, 30), 0)
"""

from __future__ import annotations

import functools
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from inference import _options, convergence, random_draws
from inference import progress as progress_bar

from inference.spikeslab import ep_probit, ep_probit_full, ep_regression, family, gibbs, gibbs_hyper, precision_grid, vi
from inference.spikeslab.assemble import build, draw_predictor, flat_draws, new_inputs
from inference.spikeslab.structure import Problem, extract, prior_hyperparameters

EP_DEFAULTS = {"damping": 0.5, "tol": 1e-6, "max_iter": 200}  # inference.ep passes its tol and max_iter (same values)
# how far off an unconverged precision-grid point's weight may be (its evidence by 7 nats): `_ep_regression`
GRID_WEIGHT_MARGIN = 1e3
UNDAMPED_MAX_ITER = 200  # default full-covariance probit EP: sweeps allowed undamped before the damped run


def _problem(model, args, kwargs, trace, engine) -> Problem:
    hyper = prior_hyperparameters(model, args, kwargs, trace)
    if hyper and engine != "mcmc":  # MCMC samples them (`inference.spikeslab.gibbs_hyper`)
        how = ("inference.ep(..., hyper='map' or 'integrate') learns them (spike-and-slab regression with a known "
               "noise_scale)" if engine == "ep" else "inference.ep(..., hyper='map' or 'integrate') learns them "
               f"(regression with a known noise_scale); {engine} takes them fixed")
        raise ValueError(f"the spike-and-slab model has hyperparameter sites {hyper} (priors on the prior's "
                         f"inclusion probability or slab scale): {how}; inference.mcmc samples them; or give "
                         "them as numbers")
    # MCMC's start: the prior's structure at the trace's draw of the hyperparameters
    prob = extract(model, args, kwargs, type(trace)((n, s) for n, s in trace.items() if n not in hyper))
    if prob.y is None:
        raise ValueError(f"site {prob.y_site!r}: {engine} needs observed data (pass the model's y=...)")
    return prob


def _check_int(value, name, minimum):
    return _options.positive_int(value, name, minimum=minimum)


FLOAT32_HINT = ("; in float32 (JAX's default) the full-covariance (Woodbury) updates lose most of their digits "
                "and may not converge at all: enable float64 with jax.config.update('jax_enable_x64', True)")


def _not_converged(what, iterations, change, tol, hint):
    hint += "" if jax.config.jax_enable_x64 else FLOAT32_HINT
    warnings.warn(f"{what} did not converge in {iterations} sweeps (largest change {change:.3g} > tol={tol:g}); "
                  f"{hint}", RuntimeWarning, skip_file_prefixes=_options.INTERNAL)


# --------------------------------------------------------------------------- EP
def ep_posterior(model, args, kwargs, trace, *, schedule="parallel", damping=None, tol=None, max_iter=None,
                 num_samples=1000, seed=0, progress=None, covariance=None):
    """EP with spike-and-slab prior sites.

    Regression: exact Gaussian likelihood, full covariance (Hernandez-Lobato et al. 2015; in float32
    the d x d form, refused before any work beyond 200 genes when d > n:
    `ep_regression.check_precision`), on a grid of noise precisions when the precision is unknown; grid points where the parallel schedule
    has not converged go on with sequential sweeps (``diagnostics["grid_points_not_converged"]``
    and ``["grid_weight_not_converged"]`` report what is left; ``converged`` and
    ``max_site_change`` leave out such points when their total weight is below ``tol / 1000``:
    the grid's far tails, which cannot move the answer by ``tol``). Probit: ``covariance="full"`` (the
    default in float64; O(n^2 d) per sweep, keeps weight correlations) or ``"factorized"``
    (thesis ch. 7, O(n d) per sweep; the default in float32, where the full form's Woodbury
    updates lose most of their digits and do not converge: a leukemia split stalls at a change
    of ~1e-4 after 200 sweeps, and converges in 19 in float64). ``damping`` is the step size in
    (0, 1] (1 = undamped); evidence method ``"ep"``; draws come from the spike-and-slab family of the tilted marginals, with ``lp`` and
    ``log_q`` for LOO. ``progress`` is accepted and ignored (one compiled loop, seconds)."""
    if schedule not in ("parallel", "sequential"):
        raise ValueError(f"schedule: needs 'parallel' or 'sequential', got {schedule!r}")
    if covariance not in (None, "full", "factorized"):
        raise ValueError(f"covariance: needs 'full' or 'factorized', got {covariance!r}")
    auto = damping is None
    damping = _options.unit_interval(EP_DEFAULTS["damping"] if damping is None else damping, "damping",
                                     closed_right=True)
    tol = _options.positive_float(EP_DEFAULTS["tol"] if tol is None else tol, "tol")
    tol = _options.working_tol(tol, jnp.result_type(float))  # float32: round-off alone moves sites by ~1e-6
    max_iter = _check_int(EP_DEFAULTS["max_iter"] if max_iter is None else max_iter, "max_iter", 1)
    num_samples = _check_int(num_samples, "num_samples", 1)
    seed = _options.seed(seed)
    prob = _problem(model, args, kwargs, trace, "ep")
    seq = schedule == "sequential"
    key = jax.random.PRNGKey(seed)
    common = {"schedule": schedule, "damping": damping}
    if prob.likelihood == "probit":
        if covariance is None:
            covariance = "full" if jax.config.jax_enable_x64 else "factorized"
        return _ep_probit(prob, model, args, kwargs, key, seq, damping, tol, max_iter, num_samples, seed, common,
                          covariance, auto)
    if covariance not in (None, "full"):
        raise ValueError("covariance: regression EP keeps the exact Gaussian likelihood, only 'full' applies")
    return _ep_regression(prob, model, args, kwargs, key, seq, damping, tol, max_iter, num_samples, seed, common)


def _stable_run(run, finalize, attempts, state_of=lambda s: s, tol=None, quiet_first=False):
    """Run EP with the first (damping, sequential) setting whose result is finite; a diverged run
    (non-finite site parameters) is retried with the next setting and reported in the diagnostics,
    never returned as NaN. With ``tol``, a parallel run must also converge to be kept (the
    factorised probit EP oscillates on correlated genes where the sequential schedule converges).
    ``quiet_first``: the first setting is an optimistic default (undamped), so any run must converge
    and falling back to the second setting is not warned about."""
    for damping, seq in attempts:
        state = run(damping, seq)
        out = finalize(state)
        change = np.asarray(state_of(state).max_change)
        finite = all(bool(np.all(np.isfinite(np.asarray(x)))) for x in out) and bool(np.all(np.isfinite(change)))
        if (finite and tol is not None and (not seq or quiet_first) and not np.all(change <= tol)
                and (damping, seq) != attempts[-1]):
            finite = False
        if finite:
            if (damping, seq) != attempts[0] and not (quiet_first and (damping, seq) == attempts[1]):
                warnings.warn(f"spike-and-slab EP diverged or oscillated with damping={attempts[0][0]:g}, schedule="
                              f"{'sequential' if attempts[0][1] else 'parallel'}; used damping={damping:g}, "
                              f"schedule={'sequential' if seq else 'parallel'}", RuntimeWarning, skip_file_prefixes=_options.INTERNAL)
            return state, out, (damping, seq)
    raise FloatingPointError(f"spike-and-slab EP diverged (non-finite site parameters) even with damping="
                             f"{attempts[-1][0]:g}; check the data scale (standardise the genes)"
                             + ("" if jax.config.jax_enable_x64 else FLOAT32_HINT))


def _ep_diag(states, tol, incl, extra, log_evidence, counted=None):
    """EP diagnostics (key names as in ``inference.ep``; ``converged``: `inference.convergence.ep`);
    warns when EP did not converge. ``counted``: which of a batch of runs (grid points) the verdict
    and ``max_site_change`` are over (all by default)."""
    changes = np.asarray(states.max_change)
    max_change = float(np.max(changes if counted is None else np.where(counted, changes, 0.0)))
    iterations = int(np.max(np.asarray(states.iteration)))
    if not max_change <= tol:
        where = ""
        if "grid_points" in extra:  # which precision-grid points, and how much posterior weight they hold
            where = (f" at {extra['grid_points_not_converged']} of {extra['grid_points']} noise-precision grid points "
                     f"holding {100 * extra['grid_weight_not_converged']:.3g}% of the weight")
        # sequential sweeps can cycle where parallel ones converge
        more = ", a larger max_iter or schedule='parallel'" if extra.get("schedule") == "sequential" else \
            " or a larger max_iter"
        _not_converged(f"spike-and-slab EP{where}", iterations, max_change, tol,
                       f"try a smaller damping (e.g. damping={extra['damping'] / 2:g}){more}")
    return {"converged": convergence.ep(max_change, tol, log_evidence), "iterations": iterations,
            "max_site_change": max_change,
            "num_clipped_sites": int(np.max(np.asarray(states.num_clipped))),
            "num_skipped_updates": int(np.max(np.asarray(states.num_skipped))), "inclusion_probability": incl,
            **extra}


def _ep_probit(prob, model, args, kwargs, key, seq, damping, tol, max_iter, num_samples, seed, common, covariance,
               auto=False):
    data = ep_probit.make_data(prob.X, prob.y, slab_var=prob.slab_var, p_incl=prob.p_incl, offset=prob.offset)
    hyper = (jnp.asarray(damping), jnp.asarray(tol), jnp.asarray(max_iter))
    start = time.perf_counter()
    if covariance == "full" and auto:  # undamped first (about half the sweeps); damped if it fails to converge
        # the undamped parallel attempt is Anderson-accelerated (about a third fewer sweeps); the damped
        # fallbacks are plain sweeps
        attempts = [(1.0, seq), (damping, seq)]
        module = ep_probit_full
    elif covariance == "full":
        attempts = [(damping, seq)]
        module = ep_probit_full
    else:  # the parallel factorised schedule can diverge on correlated genes: fall back to sequential
        attempts = [(damping, seq)] + ([] if seq else [(damping, True)])
        module = ep_probit
    attempts += [(damping / 2**k, attempts[-1][1]) for k in (1, 2, 3)]
    accelerated = lambda dmp, sq: module is ep_probit_full and auto and dmp == 1.0 and not sq  # noqa: E731
    state, out, used = _stable_run(
        lambda dmp, sq: module.run(data, jnp.asarray(dmp), hyper[1],
                                   jnp.asarray(min(max_iter, UNDAMPED_MAX_ITER)) if auto and dmp == 1.0 else hyper[2],
                                   sequential=sq, **({"accelerate": True} if accelerated(dmp, sq) else {})),
        lambda st: module.finalize(st, data), attempts, tol=tol if module is ep_probit or auto else None,
        quiet_first=auto)
    m, v, incl, a, b, log_z = (np.asarray(x) for x in out)
    if module is ep_probit_full:
        prob_fn = lambda X, off: ep_probit_full.predictive_probability(state, data, X, off)  # noqa: E731
    else:
        prob_fn = lambda X, off: ep_probit.predictive_probability(jnp.asarray(m), jnp.asarray(v), X, off)  # noqa: E731
    common = {**common, "fit_seconds": time.perf_counter() - start, "damping_used": used[0],
              "schedule_used": "sequential" if used[1] else "parallel", "anderson": accelerated(*used)}
    fam = family.Family(jnp.asarray(incl), jnp.asarray(a), jnp.asarray(b))
    z, w = family.sample(key, fam, num_samples)
    log_q = family.log_density(fam, z, w)

    def predictor(rng_key, *new_args, **new_kwargs):
        new, X, off, _ = new_inputs(model, new_args, new_kwargs, prob.X.shape[1])
        p = prob_fn(X, off)
        y = jax.random.bernoulli(rng_key, p, (1, num_samples) + p.shape).astype(jnp.int32)
        return {prob.y_site: np.asarray(y), f"{prob.y_site}_mean": np.broadcast_to(np.asarray(p), y.shape)}

    approx = {"inclusion_probability": incl, "slab_mean": a, "slab_var": b, "w_mean": m, "w_var": v}
    return build("ep", prob, model, args, kwargs, flat_draws(prob, z, w), 1, seed, log_q=log_q,
                 log_evidence=float(log_z), evidence_method="ep", approximation=approx, predictor=predictor,
                 diagnostics=_ep_diag(state, tol, incl, {**common, "method": f"probit-{covariance}"}, float(log_z)))


def _ep_regression(prob, model, args, kwargs, key, seq, damping, tol, max_iter, num_samples, seed, common):
    ep_regression.check_precision(*np.shape(prob.X), jnp.result_type(float))
    k1, k2 = jax.random.split(key)
    counted = None
    if prob.noise_prior is None:
        data = ep_regression.make_data(prob.X, prob.y, beta=1.0, slab_var=prob.slab_var, p_incl=prob.p_incl)
        state, out, used = _stable_run(
            lambda dmp, sq: ep_regression.run(data, jnp.asarray(dmp), jnp.asarray(tol), jnp.asarray(max_iter),
                                              sequential=sq),
            lambda st: ep_regression.finalize(st, data), [(damping / 2**k, seq) for k in range(4)])
        incl, a, b, log_z = (np.asarray(x) for x in out)
        common = {**common, "damping_used": used[0]}
        log_ev = float(log_z) + prob.log_scale_adjust
        fam = family.Family(jnp.asarray(incl), jnp.asarray(a), jnp.asarray(b))
        z, w = family.sample(k2, fam, num_samples)
        log_q, tau, idx = family.log_density(fam, z, w), None, jnp.zeros(num_samples, jnp.int32)
        states = jax.tree.map(lambda x: x[None], state)
        datas, log_w = jax.tree.map(lambda x: x[None], data), np.zeros(1)
        approx = {"inclusion_probability": incl, "slab_mean": a, "slab_var": b, "w_mean": np.asarray(state.m),
                  "w_var": np.asarray(state.v)}
    else:
        fit, _, used = _stable_run(
            lambda dmp, sq: precision_grid.fit_grid(prob.X, prob.y, slab_var=prob.slab_var, p_incl=prob.p_incl,
                                                    noise_prior=prob.noise_prior, damping=dmp, tol=tol,
                                                    max_iter=max_iter, sequential=sq,
                                                    log_scale_adjust=prob.log_scale_adjust),
            lambda f: (f.incl, f.log_weights, np.asarray(f.log_evidence), f.states.max_change),
            [(damping / 2**k, seq) for k in range(4)], state_of=lambda f: f.states)
        tau, idx, log_q_tau = precision_grid.sample_precision(k1, fit, num_samples)
        idx = np.asarray(idx)
        fam = family.Family(fit.incl_k[idx], fit.slab_mean_k[idx], fit.slab_var_k[idx])
        z, w = family.sample(k2, fam, 1)
        z, w = z[0], w[0]
        log_q = family.log_density(fam, z, w) + log_q_tau
        states, log_w, log_ev, incl = fit.states, fit.log_weights, fit.log_evidence, fit.incl
        tau_k = np.exp(fit.log_tau)
        datas = ep_regression.make_data(prob.X, prob.y, beta=1.0, slab_var=prob.slab_var, p_incl=prob.p_incl)
        datas = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(tau_k),) + jnp.shape(x)), datas)
        datas = datas._replace(beta=jnp.asarray(tau_k), slab_var=jnp.asarray(prob.slab_var[None] / tau_k[:, None]))
        approx = {"inclusion_probability": incl, "w_mean": fit.w_mean, "w_var": fit.w_var,
                  "precision_grid": tau_k, "precision_log_weights": log_w, "grid_inclusion_probability": fit.incl_k,
                  "grid_slab_mean": fit.slab_mean_k, "grid_slab_var": fit.slab_var_k}
        late = ~(np.asarray(states.max_change) <= tol)
        late_weight = float(np.exp(log_w)[late].sum())
        # The grid reaches the 1e-10 tails of the precision's posterior, where EP can oscillate
        # (noise-free fits with p > n). Points that did not converge are left out of the verdict
        # when their total weight, even GRID_WEIGHT_MARGIN times larger (their evidence off by 7
        # nats), cannot move any inclusion or predictive probability, or a moment's share, by tol.
        counted = ~late | (late_weight * GRID_WEIGHT_MARGIN > tol)
        common = {**common, "grid_points": len(tau_k), "grid_points_not_converged": int(late.sum()),
                  "grid_weight_not_converged": late_weight, "damping_used": used[0]}

    def predictor(rng_key, *new_args, **new_kwargs):
        _, X, off, c = new_inputs(model, new_args, new_kwargs, prob.X.shape[1])
        y, y_mean = _regression_predict(rng_key, states, datas, jnp.asarray(np.exp(log_w)), jnp.asarray(idx), X, off, c)
        return {prob.y_site: np.asarray(y)[None], f"{prob.y_site}_mean": np.broadcast_to(np.asarray(y_mean), (1,) + y.shape)}

    return build("ep", prob, model, args, kwargs, flat_draws(prob, z, w, tau), 1, seed, log_q=log_q,
                 log_evidence=log_ev, evidence_method="ep", approximation=approx, predictor=predictor,
                 diagnostics=_ep_diag(states, tol, np.asarray(incl), {**common, "method": "gaussian-likelihood"},
                                      log_ev, counted))


@jax.jit
def _regression_predict(rng_key, states, datas, weights, idx, X, off, c):
    """Predictive of the EP grid mixture: a draw per posterior draw (its grid cell) and the mean."""
    Xs = X / c[:, None]  # unit-noise form, as the states were fitted
    mean_k, var_k = jax.vmap(lambda s, dd: ep_regression.predictive(s, dd, Xs))(states, datas)
    mean_k = mean_k * c + off
    var_k = var_k * c**2 + c**2 / datas.beta[:, None]
    y = mean_k[idx] + jnp.sqrt(var_k[idx]) * jax.random.normal(rng_key, (idx.shape[0], X.shape[0]))
    return y, weights @ mean_k


# --------------------------------------------------------------------------- MCMC
def mcmc_posterior(model, args, kwargs, trace, *, num_samples=1000, num_warmup=1000, num_chains=4, seed=0,
                   progress=None):
    """Collapsed Gibbs (see ``inference.spikeslab.gibbs``): one draw per full scan; priors on
    ``p_incl`` / ``slab_scale`` are sampled too, by slice sampling in each scan
    (`inference.spikeslab.gibbs_hyper`). The inclusion probabilities (mean of the indicator
    draws) go to ``approximation`` as for EP and VI, so the DataTree's ``approximation`` group
    holds them for every engine."""
    num_samples = _check_int(num_samples, "num_samples", 1)
    num_warmup = _check_int(num_warmup, "num_warmup", 0)
    num_chains = _check_int(num_chains, "num_chains", 1)
    seed = _options.seed(seed)
    prob = _problem(model, args, kwargs, trace, "mcmc")
    if prob.likelihood == "probit":
        data, cfg = gibbs.probit_data(prob.X, prob.y, p_incl=prob.p_incl, slab_var=prob.slab_var, offset=prob.offset)
    else:
        data, cfg = gibbs.regression_data(prob.X, prob.y, p_incl=prob.p_incl, slab_var=prob.slab_var,
                                          noise_prior=prob.noise_prior)
    key = jax.random.PRNGKey(seed)
    k_init, k_warm, k_draw = jax.random.split(key, 3)
    progress = _options.progress(progress)
    hyper = prior_hyperparameters(model, args, kwargs, trace)
    if hyper:
        hs = gibbs_hyper.hyper_sites(trace, hyper, prob)
        (init, sample), arrays = gibbs_hyper.programs(model, args, kwargs, hs, cfg, num_warmup, num_samples, progress)
        states = init(jax.random.split(k_init, num_chains), data, arrays)
        start = time.perf_counter()
        bar = progress_bar.Bar(progress, num_chains * (num_warmup + num_samples), "gibbs", "scan")
        with progress_bar.running(bar):
            _, out = sample(jax.random.split(k_draw, num_chains), states, data, arrays)
        z, w, tau, flips, theta = jax.tree.map(np.asarray, out)
        thetas = {name: theta[..., i] for i, name in enumerate(hs.hyper)}
    else:
        states = _init_chains(jax.random.split(k_init, num_chains), data, cfg)
        start = time.perf_counter()
        states, (z, w, tau, flips) = _advance(states, data, cfg, k_warm, k_draw, num_warmup, num_samples, progress)
        thetas = {}
    sampling_seconds = time.perf_counter() - start
    z = np.asarray(z, np.int32)
    incl = z.mean(axis=(0, 1))
    draws = {"z": z, "w": np.asarray(w)} | ({"precision": np.asarray(tau)} if cfg.gamma else {}) | thetas
    diag = {**convergence.mcmc(draws), "inclusion_probability": incl,  # README.md: what `converged` means
            "mean_flips_per_scan": float(np.mean(np.asarray(flips))), "sampler": "collapsed-gibbs",
            "sampling_seconds": sampling_seconds}
    if hyper:
        diag["hyperparameters"] = list(hyper)  # slice-sampled in each scan
    flat = flat_draws(prob, z.reshape(-1, z.shape[-1]), np.asarray(w).reshape(-1, z.shape[-1]),
                      np.asarray(tau).reshape(-1) if cfg.gamma else None) | {n: v.reshape(-1) for n, v in thetas.items()}
    w_c, tau_c = np.asarray(w), np.asarray(tau)
    return build("mcmc", prob, model, args, kwargs, flat, num_chains, seed, diagnostics=diag,
                 approximation={"inclusion_probability": incl},
                 predictor=draw_predictor(model, prob, lambda: (w_c, tau_c)))


@functools.partial(jax.jit, static_argnums=2)
def _init_chains(keys, data, cfg):
    """Each chain's Gibbs start (one program; run eagerly, the vmap compiled ~15 small ones)."""
    return jax.vmap(lambda k: gibbs.init(k, data, cfg))(keys)


def _advance(states, data, cfg, k_warm, k_draw, num_warmup, num_samples, progress):
    """Warmup then sampling in one compiled program; with ``progress`` a lazy bar
    (`inference.progress`: shown once sampling has run for a second), the draws unchanged.
    ``k_warm`` is unused: the one program draws every scan's key from ``k_draw``."""
    del k_warm
    nc = states.z.shape[0]
    bar = progress_bar.Bar(progress, nc * (num_warmup + num_samples), "gibbs", "scan")
    with progress_bar.running(bar):
        states, out = gibbs.sample_chains(jax.random.split(k_draw, nc), states, data, cfg, num_warmup, num_samples,
                                          bool(progress))
    return states, jax.tree.map(np.asarray, out)


# --------------------------------------------------------------------------- VI
def vi_posterior(model, args, kwargs, trace, *, steps=1000, seed=0, num_samples=1000, progress=None, tol=1e-6,
                 guide=None, optimizer=None):
    """Coordinate-ascent VI in the mean-field Bernoulli-Gaussian family (``inference.spikeslab.vi``);
    ``steps`` bounds the sweeps; evidence method ``"elbo"``. ``guide`` / ``optimizer`` are accepted
    for the generic signature: only ``None`` / ``"normal"`` (the default) are meaningful here."""
    if guide not in (None, "normal", "spike_slab"):
        raise ValueError(f"guide: spike-and-slab models use the mean-field Bernoulli-Gaussian family; got {guide!r}")
    if optimizer is not None:
        raise ValueError("optimizer: spike-and-slab VI is closed-form coordinate ascent and takes no optimizer")
    steps = _check_int(steps, "steps", 1)
    num_samples = _check_int(num_samples, "num_samples", 1)
    seed = _options.seed(seed)
    tol = _options.positive_float(tol, "tol")
    prob = _problem(model, args, kwargs, trace, "vi")
    data, cfg = vi.make_data(prob.X, prob.y, slab_var=prob.slab_var, p_incl=prob.p_incl, offset=prob.offset,
                             noise_prior=prob.noise_prior, probit=prob.likelihood == "probit")
    state = vi.run(data, cfg, jnp.asarray(tol), jnp.asarray(steps))
    fam = family.Family(state.alpha, state.mu, state.s2)
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    z, w = family.sample(k1, fam, num_samples)
    log_q = family.log_density(fam, z, w)
    tau = None
    approx = {"inclusion_probability": np.asarray(state.alpha), "slab_mean": np.asarray(state.mu),
              "slab_var": np.asarray(state.s2)}
    if cfg.gamma:
        tau = random_draws.gamma(k2, state.shape, (num_samples,)) / state.rate
        log_q = log_q + family.gamma_log_density(tau, state.shape, state.rate)
        approx |= {"precision_shape": np.asarray(state.shape), "precision_rate": np.asarray(state.rate)}
    iters = int(state.iteration)
    if not float(state.max_change) <= tol:
        _not_converged("spike-and-slab VI", iters, float(state.max_change), tol, "raise steps")
    elbo = float(state.elbo) + prob.log_scale_adjust
    trace_elbo = np.asarray(state.elbo_trace)[: min(iters, vi.TRACE_LEN)] + prob.log_scale_adjust
    diag = {"converged": convergence.vi(float(state.max_change) <= tol, elbo), "elbo": elbo, "elbo_trace": trace_elbo,
            "iterations": iters, "max_change": float(state.max_change),
            "inclusion_probability": np.asarray(state.alpha), "method": "cavi-bernoulli-gaussian"}
    w_c = np.asarray(w)[None]
    tau_c = np.ones((1, num_samples)) if tau is None else np.asarray(tau)[None]
    return build("vi", prob, model, args, kwargs, flat_draws(prob, z, w, tau), 1, seed, log_q=log_q,
                 log_evidence=elbo, evidence_method="elbo",
                 diagnostics=diag, approximation=approx, predictor=draw_predictor(model, prob, lambda: (w_c, tau_c)))
