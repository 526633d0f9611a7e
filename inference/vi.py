"""Stochastic variational inference: NumPyro autoguides, Optax optimisers, an ELBO stopping rule.

The step size is reduced tenfold each time the ELBO stops improving (its change over a window of
``check_every`` steps is within noise or below ``tol``); the fit stops at a plateau of the smallest
step size, or after ``steps`` steps. The answer at a plateau is the last chunk's average iterate.
For the named autoguides a plateau must also pass the ELBO's first-order optimum conditions
(`_stationarity_fn`), else the step sizes restart: a noisy ELBO can hide a steady drift. Draws
come from the fitted guide, with the guide's log density (``log_q``) and the model's log joint (``lp``) at each draw, both in the constrained space, so
``arviz.loo_approximate_posterior`` works. ``log_evidence`` is the ELBO (a lower bound).

Example:
    >>> import numpy as np, inference, probmodels
    >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
    >>> post = inference.vi(probmodels.linear_regression, X, y, noise_scale=1.0, guide="mvn",
    ...                     steps=3000, learning_rate=0.05, check_every=250, num_samples=100, progress=False)
    >>> post.evidence_method
    'elbo'
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro import distributions as dist
from numpyro.infer import SVI, Trace_ELBO, init_to_uniform, init_to_value
from numpyro.infer import autoguide
from numpyro.infer.util import log_density, potential_energy
from numpyro.optim import optax_to_numpyro

from inference import _model, _options, _special, compiled, convergence, sharding, whiten
from inference.latent import init_to_prior_mean
from inference.posterior import Posterior
from inference.progress import Bar
from inference.trace_reading import DISCRETE_ADVICE

GUIDES = {
    "normal": autoguide.AutoDiagonalNormal,
    "mvn": autoguide.AutoMultivariateNormal,
    "lowrank": autoguide.AutoLowRankMultivariateNormal,
    "flow": autoguide.AutoIAFNormal,
}
LR_LEVELS = (1.0, 0.1, 0.01)
# Antithetic pairs of draws of q for the optimum check of the autoguides (`_stationarity_fn`).
STATIONARITY_PAIRS = 256
# A mean-field q's check draws 4 pairs per coordinate (its joint Newton step fits the curvature to
# them), up to this many: the joint step covers up to MAX_PAIRS / 4 coordinates.
MAX_PAIRS = 2048
# q is "at its optimum" unless, beyond Monte Carlo error, a coordinate's scale is off by more than
# this factor from the one its own curvature asks for, or its mean is further than MEAN_OFF sds
# from where one Newton step would put it.
SCALE_OFF = 1.2
MEAN_OFF = 0.2


@compiled.scoped
def vi(
    model,
    *args,
    guide="normal",
    steps: int = 20_000,
    optimizer=None,
    learning_rate: float = 0.01,
    num_particles: int = 1,
    num_samples: int = 1000,
    tol: float = 1e-5,
    check_every: int = 500,
    method: str | None = None,
    seed: int = 0,
    progress: bool | None = None,
    model_kwargs: dict | None = None,
    shard_data=False,
    **kwargs,
) -> Posterior:
    """Fit ``guide`` to the posterior of ``model(*args, **kwargs)`` by maximising the ELBO.

    ``guide``: ``"normal"`` (mean-field), ``"mvn"`` (full-rank), ``"lowrank"``, ``"flow"`` (inverse
    autoregressive flow) or any NumPyro guide (not ``AutoLaplaceApproximation``, a point during
    SVI: `inference.laplace` is the Laplace approximation); a named guide fits a multivariate-normal
    latent (a GP's ``f``) in whitened coordinates, ``f = loc + L z`` (`inference.whiten`). ``optimizer``: an Optax transformation (default Adam
    at ``learning_rate`` with plateau reductions). ``method``: ``"svi"``, or a coordinate-ascent
    scheme a model family offers (listed in ``model.vi_methods``); ``None`` (default): the family's
    ``"default"`` scheme where it lists one (LDA: online VB), else ``"svi"``. ``shard_data``: ``True`` (all
    devices) or a `jax.sharding.Mesh` splits the data rows over devices for the ELBO steps (see
    `inference.sharding`; same result as one device up to summation order). ``progress``: a bar,
    shown once the fit has run for a second (`inference.progress`).

    A latent-Gaussian model whose latent includes a multivariate normal (a GP's ``f``; read by
    EP's recogniser: Gaussian priors, every likelihood site a smooth function of one projection)
    with ``guide="mvn"``, or ``"normal"`` where every latent is such a site, and no SVI option
    given (``method="svi"``, ``optimizer``, ``learning_rate``, ``num_particles``, ``check_every``):
    q is the full-rank Gaussian at the ELBO's optimum, found by natural-gradient steps in EP's site
    parameters (`inference.latent_vi`; at most ``min(steps, 200)``, ``tol`` on the site change;
    ``diagnostics["updates"] == "natural-gradient"``). Mean-field SVI on a GP's whitened ``f``
    ended 4.5-5.2 posterior sds off at the step cap (GP regression, noise 0.01) or with sds up
    to 7x off. Non-log-concave likelihoods (Student-t) are handled (negative site precisions).

    A coordinate-ascent ``method`` and spike-and-slab models (mean-field Bernoulli-Gaussian VI)
    take of the SVI options (``guide``, ``optimizer``, ``learning_rate``, ``num_particles``,
    ``check_every``) only those their own function names (LDA's ``"stochastic"``:
    ``learning_rate``, ``check_every``; spike-and-slab: ``guide="normal"``); any other given a
    value other than its default raises ValueError naming it.

    Autoguide SVI runs at most ``steps`` steps, in whole chunks of ``check_every`` (the ELBO is
    compared chunk to chunk; a ``steps`` below ``check_every`` is one chunk of ``steps``);
    ``diagnostics["steps"]`` is the number run.

    ``diagnostics["converged"]``: the ELBO plateau reached before ``steps``, the ELBO finite, and
    q at the ELBO's optimum (the named autoguides and NumPyro's AutoNormal; the flow's from its draws): ``diagnostics["stationarity"]`` holds the
    largest scale ratio (q's scale over the one its curvature asks for), the largest Newton step of
    a mean in sds, and the restarts it caused (README.md, "What `converged` means";
    `inference.convergence`).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
        >>> post = inference.vi(probmodels.linear_regression, X, y, noise_scale=1.0, guide="mvn", steps=3000,
        ...                     learning_rate=0.05, check_every=250, num_samples=100, progress=False)
        >>> post.evidence_method, "log_q" in post.sample_stats
        ('elbo', True)
    """
    steps = _options.positive_int(steps, "steps")
    num_particles = _options.positive_int(num_particles, "num_particles")
    num_samples = _options.positive_int(num_samples, "num_samples")
    check_every = _options.positive_int(check_every, "check_every", minimum=10)
    learning_rate = _options.positive_float(learning_rate, "learning_rate")
    tol = _options.positive_float(tol, "tol")
    seed = _options.seed(seed)
    progress = _options.progress(progress)
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer must be an optax.GradientTransformation, got {type(optimizer).__name__}")
    if not isinstance(guide, str) and not callable(guide):
        raise TypeError(f"guide must be one of {sorted(GUIDES)} or a NumPyro guide, got {guide!r}")
    if isinstance(guide, str) and guide not in GUIDES:
        raise ValueError(f"guide must be one of {sorted(GUIDES)} or a NumPyro guide, got {guide!r}")
    if isinstance(guide, autoguide.AutoLaplaceApproximation):
        # during SVI this guide is a point (a Delta at its loc); its Laplace approximation is built
        # afterwards from the Hessian: drawn from the guide, every draw was the mode (sds 0)
        raise ValueError("guide=AutoLaplaceApproximation: inference.vi draws from the fitted guide, which for "
                         "this guide is a point mass at the mode (its Laplace approximation is built "
                         "afterwards); use inference.laplace(model, ...) for the Laplace approximation")
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _options.model_arguments(vi, model, args, kwargs)
    svi_options = dict(guide=(guide, "normal"), optimizer=(optimizer, None), learning_rate=(learning_rate, 0.01),
                       num_particles=(num_particles, 1), check_every=(check_every, 500))
    methods = getattr(model, "vi_methods", {})
    svi_asked = method == "svi"  # explicitly: stochastic VI, not the natural-gradient steps below
    if method is None:  # a family's own default scheme (LDA: online VB), else autoguide SVI
        method = "default" if "default" in methods else "svi"
    forwarded = _forwarded(methods[method], f"vi(method={method!r})", **svi_options) if method in methods else {}
    mesh = sharding.resolve_mesh(shard_data)
    # the sites from one abstract trace (the model's own input checks still raise first); an eager
    # one paid a compilation per operation in a new process
    trace = _model.structure_trace(model, args, kwargs, seed)
    if method == "svi":  # a family's own scheme says what it does with a subsample (LDA's stochastic VI)
        _model.refuse_subsampling(trace, "inference.vi")
    if not _model.latent_sites(trace):
        raise ValueError("model has no latent sample sites: nothing to infer")
    if mesh is not None and method != "svi":
        raise ValueError(f"shard_data applies to method='svi' only, got method={method!r}")
    if method == "svi" and _special.has_spike_and_slab(trace):  # its own VI: refuse what it cannot honour
        from inference.spikeslab import vi_posterior

        _options.unsupported("spike-and-slab VI", shard_data=(shard_data, False))
        forwarded = _forwarded(vi_posterior, "spike-and-slab VI", **svi_options)
    if mesh is not None or _special.has_spike_and_slab(trace):
        trace = _model.concrete_trace(model, args, kwargs, seed)  # these read concrete priors and data
    # a family's own scheme gets the abstract trace and reads concrete values where it needs them
    # (LDA); an eager one here ran the mixture's model op by op for a CAVI that never reads it

    options = dict(steps=steps, num_samples=num_samples, seed=seed, progress=progress, tol=tol)
    if method != "svi" or "svi" in methods:  # a family may refuse autoguide SVI (LDA does)
        if method not in methods:
            raise ValueError(f"method must be 'svi' or one of {sorted(methods)} for this model, got {method!r}")
        return methods[method](model, args, kwargs, trace, **options, **forwarded)
    if _special.has_spike_and_slab(trace):
        return vi_posterior(model, args, kwargs, trace, **options, **forwarded)
    discrete = _model.discrete_latent_sites(trace)
    if discrete:
        raise ValueError(
            f"site {discrete[0]!r} is a discrete latent: autoguides need continuous latents; "
            f"marginalise it in the model (see inference.latent.recovered), or use {DISCRETE_ADVICE}"
        )
    # an SVI option given (its value not its default): stochastic VI, not `inference.latent_vi`
    svi_only = svi_asked or any(v is not d and v != d for k, (v, d) in svi_options.items() if k != "guide")
    # at most `steps` ELBO steps, in whole chunks of check_every (a cap below it is one chunk):
    # the cap was rounded up to a chunk before (steps=10 ran 500 steps)
    check_every = min(check_every, steps)
    # Sharded data cross the jit boundary as arguments (GSPMD splits the likelihood by rows);
    # without sharding they stay closed-over constants, as before.
    data = None if mesh is None else sharding.prepare(model, args, kwargs, trace, mesh)

    guide_name = guide if isinstance(guide, str) else type(guide).__name__
    tunable = optimizer is None
    # an autoguide is fitted to multivariate-normal latents (a GP's f) in whitened coordinates
    starts = _model.init_values(model, args, kwargs, seed)
    white = whiten.sites(trace) if isinstance(guide, str) and starts is None else []
    fit_model = whiten.whitened(model, white) if white else model
    if white and mesh is None and not svi_only:
        # a latent-Gaussian model (a GP): q at the ELBO's optimum over full-rank Gaussians by
        # natural-gradient steps (`inference.latent_vi`); SGD on the whitened guide crawled there
        from inference import latent_vi

        rec = latent_vi.recognised(model, args, kwargs, trace, seed, guide, white)
        post = None if rec is None else latent_vi.posterior(model, args, kwargs, trace, rec, guide=guide, tol=tol,
                                                             steps=steps, num_samples=num_samples, seed=seed,
                                                             progress=progress)
        if post is not None:
            return _model.postprocess(model, post)

    def build(model_inputs):
        """The jitted programs of one model structure: start, chunk of ELBO steps and draws."""
        optim = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate) if tunable else optimizer
        loss = Trace_ELBO(num_particles=num_particles)
        if not isinstance(guide, str):  # a guide the user built: set up eagerly, as NumPyro does
            svi = SVI(fit_model, guide, optax_to_numpyro(optim), loss)

            def init(key, data, values):  # eager, on this call's data
                a, kw = model_inputs(data)
                return svi.init(key, *a, **kw)

            def traced_svi():
                return svi
        else:
            # A named guide is built and set up inside each program's own trace, never eagerly:
            # NumPyro's eager set-up (a prototype trace, the potential's value and gradient at the
            # start) ran op by op, one compilation each (~330 of them, ~17 s, of a Gaussian
            # mixture's first VI fit in a new process). Its parameter names do not depend on the
            # instance, so every program reads the same state. In the steps and the draws the
            # set-up's start is unused (the parameters come in the state) and compiled away.
            def traced_svi(loc_fn=init_to_uniform, key=None, a=None, kw=None):
                g = GUIDES[guide](fit_model, init_loc_fn=loc_fn)
                svi = SVI(fit_model, g, optax_to_numpyro(optim), loss)
                return svi, svi.init(jax.random.PRNGKey(0) if key is None else key, *a, **kw)

            @jax.jit
            def init(key, data, values):  # the start: the model's own (values) or each site's
                a, kw = model_inputs(data)
                loc_fn = init_to_value(values=values) if values is not None else start_strategy
                return traced_svi(loc_fn, key, a, kw)[1]

        def svi_for(a, kw):
            return traced_svi(a=a, kw=kw)[0] if isinstance(guide, str) else traced_svi()

        @jax.jit
        def run_chunk(state, data):
            """``check_every`` steps: the state, the losses and the chunk's average raw parameters
            (Polyak averaging: the answer at a plateau, free of Adam's jitter around the optimum)."""
            a, kw = model_inputs(data)
            svi = svi_for(a, kw)

            def step(carry, _):
                s, total = carry
                s, loss = svi.update(s, *a, **kw)
                return (s, jax.tree.map(jnp.add, total, _raw(s))), loss

            zero = jax.tree.map(jnp.zeros_like, _raw(state))
            (state, total), losses = lax.scan(step, (state, zero), None, length=check_every)
            return state, losses, jax.tree.map(lambda t: t / check_every, total)

        return _Programs(init, run_chunk, _draw_fn(model, svi_for, model_inputs, num_samples, fit_model, white),
                         _stationarity_fn(svi_for, model_inputs, fit_model, STATIONARITY_PAIRS, MAX_PAIRS))

    start_strategy = _model.site_init(init_to_prior_mean)
    if mesh is not None:  # sharded data cross the jit boundary as arguments (GSPMD splits the rows)
        data = sharding.prepare(model, args, kwargs, trace, mesh)
        progs = build(lambda d: sharding.merge_data(args, kwargs, d))
    else:  # kept per model structure and options, the data passed as arguments
        opts = (guide, optimizer, learning_rate, num_particles, check_every, num_samples)
        # the draws' program is kept on disk too; the ELBO steps' state (optimizer NamedTuples)
        # cannot be exported
        progs, data = compiled.get("vi", model, args, kwargs, opts,
                                   lambda rebuild: build(lambda arrays: rebuild(arrays)), persist=("draw",))
    key, draw_key = jax.random.split(jax.random.PRNGKey(seed))
    # this data's start, from the kept program (the model's starting values, when it offers them,
    # as arguments: a closure over them recompiled every fit, 3.5 s of a warm 150-point HMM refit)
    if starts is None and not white and isinstance(guide, str) and _model.has_site_init(trace):
        # the sites' declared starts (a mixture's k-means) from their own kept program: inside the
        # guide's set-up NumPyro traces the start twice (its transforms, then its validity loop),
        # which made the start program 2.6 s of compilation instead of 0.7 (Gaussian mixture)
        starts = _model.start_values(model, args, kwargs, seed, default=init_to_prior_mean, trace=trace)
    state = progs.init(key, data, None if starts is None else {k: jnp.asarray(v) for k, v in starts.items()})

    losses, level, prev, converged, done = [], 0, None, False, 0
    checked = _gaussian_guide(guide) or _flow_guide(guide)
    stationarity, restarts = None, 0

    def optimum_check(raw_params):
        return _stationarity(*progs.stationarity(raw_params, jax.random.fold_in(key, 11 + done), data))

    bar = _progress_bar(progress, steps // check_every * check_every)
    while done + check_every <= steps:
        state, chunk, average = progs.run_chunk(state, data)
        chunk = np.asarray(chunk)
        done += check_every
        losses.append(chunk)
        if not np.all(np.isfinite(chunk)):
            raise FloatingPointError(
                f"the ELBO became non-finite after {done} steps: lower learning_rate (now "
                f"{learning_rate}) or check the model's support and priors")
        mean, se = chunk.mean(), chunk.std() / np.sqrt(len(chunk)) * 4.0  # x4: autocorrelated losses
        if bar is not None:
            bar.update(check_every)
            bar.set_postfix(elbo=f"{-mean:.4g}", lr=f"{learning_rate * LR_LEVELS[level]:.2g}")
        if prev is not None and abs(mean - prev) <= max(tol * (1.0 + abs(mean)), 2.0 * se):
            if not tunable or level == len(LR_LEVELS) - 1:
                if checked:  # a plateau of the ELBO's noise, not its optimum: go on at the first step size
                    stationarity = optimum_check(average)
                    if not stationarity["at_optimum"] and tunable and done + check_every <= steps:
                        level, prev, restarts = 0, None, restarts + 1
                        state = _set_learning_rate(state, learning_rate)
                        continue
                converged = True
                break
            level += 1
            state = _set_learning_rate(state, learning_rate * LR_LEVELS[level])
            prev = None
            continue
        prev = mean
    if bar is not None:
        bar.close()
    if not converged:
        # (plateaus that failed the optimum check, if any, restarted the step sizes: said here)
        failed = f" ({restarts} plateaus were not the ELBO's optimum, diagnostics['stationarity'])" if restarts else ""
        warnings.warn(f"VI did not reach an ELBO plateau in {done} steps{failed}: raise steps or learning_rate",
                      skip_file_prefixes=_options.INTERNAL)
    # at a plateau the last chunk's average; at the step cap (perhaps still moving) the last iterate
    raw = average if converged else _raw(state)
    if checked and not converged:
        stationarity = optimum_check(raw)
    if checked:
        stationarity["restarts"] = restarts
        if converged and not stationarity["at_optimum"]:
            warnings.warn(
                f"VI reached an ELBO plateau that is not the ELBO's optimum: q's scales are up to "
                f"{stationarity['scale_ratio']:.3g}x off those its curvature asks for, its means up to "
                f"{np.fmax(stationarity['mean_offset_sd'], stationarity['joint_offset_sd']):.3g} sds off "
                f"(diagnostics['stationarity']); "
                f"converged=False: raise steps or learning_rate, or rescale the model's parameters",
                skip_file_prefixes=_options.INTERNAL)
    params, values, log_q, lp = progs.draw(raw, draw_key, data)
    flat, log_q, lp = dict(values), np.asarray(log_q), np.asarray(lp)
    samples, loglik, observed = _model.finish_samples(
        model, flat, args, kwargs, jax.random.fold_in(draw_key, 7), 1, trace=trace
    )
    log_w = lp - log_q
    pareto_k = convergence.pareto_k(log_w)
    far = bool(white) and guide in ("normal", "lowrank", "mvn") and pareto_k is not None and pareto_k > 1.0
    if far:
        # a whitened GP's mean-field (or low-rank) optimum: sds up to ~7x off (GP regression, noise
        # 0.3; a GP with Student-t noise, k 1.8); the full-rank guide stopped 8-12 nats below its
        # optimum on GP classifiers with n = 300 (k 1.4-2.0); all reported converged=True until
        # session 66. The full-rank optimum (`inference.latent_vi`) gave k 0.22-0.57 there.
        advice = "guide='mvn', " if guide != "mvn" else ""
        warnings.warn(
            f"VI's q ({guide_name} on the whitened latent {list(white)}) is far from the posterior: the "
            f"Pareto k of its importance weights is {pareto_k:.2f} > 1 (diagnostics['pareto_k']), so its sds "
            f"may be off several-fold; converged=False: use {advice}the default SVI options (natural-gradient "
            f"steps to the full-rank optimum where the model is latent-Gaussian), or inference.laplace / "
            f"inference.ep", skip_file_prefixes=_options.INTERNAL)
    elbo = float(np.mean(log_w))
    trace_elbo = -np.concatenate(losses)
    top = np.max(log_w)  # NumPy: the eager JAX logsumexp compiled 14 small programs in a new process
    is_log_ev = float(top + np.log(np.mean(np.exp(log_w - top)))) if np.isfinite(top) else float(top)
    diagnostics = {
        "converged": convergence.vi(converged, elbo, stationarity) and not far, "elbo": elbo,
        "elbo_trace": trace_elbo[:: max(1, len(trace_elbo) // 2000)],
        "steps": done, "guide": guide_name, "importance_log_evidence": is_log_ev,
        # how far q is from the posterior as an importance proposal (> 0.7: sds, tails may be off)
        "pareto_k": pareto_k,
        "whitened": list(white),  # sites whose guide parameters (approximation) are in z = L^-1 (f - loc)
    }
    if stationarity is not None:
        diagnostics["stationarity"] = stationarity
    if mesh is not None:
        diagnostics.update(sharding.diagnostics(mesh))
    # Nested parameters (a flow's networks) are stored flattened; arrays keep their shape.
    approximation = {f"param_{k}": np.asarray(v) if isinstance(v, (jax.Array, np.ndarray))
                     else np.asarray(ravel_pytree(v)[0]) for k, v in params.items()}
    post = Posterior(
        engine="vi", samples=samples, log_likelihood=loglik, observed_data=observed,
        sample_stats={"lp": lp[None], "log_q": log_q[None]}, log_evidence=elbo,
        evidence_method="elbo", diagnostics=diagnostics, approximation=approximation,
        model=model, model_args=args, model_kwargs=kwargs, seed=seed,
    )
    return _model.postprocess(model, post)


def _raw(state):
    """The raw (unconstrained) guide parameters of an SVI state."""
    return state.optim_state[1][0]  # numpyro's optax wrapper keeps (step, (params, optax_state))


def _set_learning_rate(state, lr):
    # numpyro's optax wrapper keeps (step, (params, optax_state)).
    i, (params, opt_state) = state.optim_state
    hyper = dict(opt_state.hyperparams)
    hyper["learning_rate"] = jnp.asarray(lr, dtype=jnp.asarray(hyper["learning_rate"]).dtype)
    return state._replace(optim_state=(i, (params, opt_state._replace(hyperparams=hyper))))


class _Programs(NamedTuple):
    """What a VI fit compiles, kept per model structure: the start ``init(key, data, values)``
    (SVI's state; ``values``: the model's own starting values or None), the chunk of ELBO steps
    ``run_chunk(state, data)``, the draws ``draw(raw_params, key, data)`` (the constrained
    parameters, draws of the latent sites, log q and the log joint) and the optimum check
    ``stationarity(raw_params, key, data)`` (the named autoguides; `_stationarity_fn`)."""

    init: Callable
    run_chunk: Callable
    draw: Callable
    stationarity: Callable


def _gaussian_guide(guide) -> bool:
    """A guide whose optimum `_stationarity_fn` checks in full: mean-field (the named "normal",
    or NumPyro's AutoDiagonalNormal or AutoNormal built by the user), low-rank or full-rank normal."""
    if isinstance(guide, str):
        return guide in ("normal", "mvn", "lowrank")
    return isinstance(guide, (autoguide.AutoDiagonalNormal, autoguide.AutoMultivariateNormal,
                              autoguide.AutoLowRankMultivariateNormal, autoguide.AutoNormal))


def _auto_normal_posterior(guide, params):
    """NumPyro's AutoNormal (a Normal per site, unconstrained) as one mean-field q over the
    concatenated latent: ``(Normal(loc, scale), unpack)``, ``unpack(z)`` the sites' unconstrained
    values (as `AutoContinuous._unpack_latent`)."""
    names = list(guide._init_locs)
    shapes = [jnp.shape(guide._init_locs[n]) for n in names]
    loc = jnp.concatenate([jnp.ravel(params[f"{n}_{guide.prefix}_loc"]) for n in names])
    scale = jnp.concatenate([jnp.ravel(params[f"{n}_{guide.prefix}_scale"]) for n in names])
    splits = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]

    def unpack(z):
        return {n: part.reshape(shape) for n, part, shape in zip(names, jnp.split(z, splits), shapes)}

    return dist.Normal(loc, scale), unpack


def _flow_guide(guide) -> bool:
    """The inverse autoregressive flow guide (`_stationarity_fn` checks it from its draws)."""
    return guide == "flow" if isinstance(guide, str) else isinstance(guide, autoguide.AutoIAFNormal)


def _stationarity_fn(svi_for, model_inputs, fit_model, pairs, max_pairs=None):
    """The ELBO's first-order optimum conditions for a Gaussian ``q = N(m, L L')`` over the
    unconstrained latent ``z``, as effect sizes per coordinate, from ``pairs`` antithetic pairs
    ``m +- L eps``. With ``g = grad log p(z)`` (Stein's lemma):

    - ``c_i = -E[g_i (z_i - m_i)] = (E[-H] Sigma)_ii``, 1 at the optimum of a mean-field, a
      low-rank or a full-rank q: the squared ratio of q's scale to the one the curvature asks
      for. (Low rank, NumPyro's ``Sigma = S (W W' + I) S`` with ``S = diag(s)``: the ELBO's
      derivative in ``s_i`` is ``((E[H] + Sigma^-1) Sigma)_ii / s_i``, zero iff ``c_i = 1``; in
      ``W`` it is zero iff ``B V = V`` with ``B = L' E[-H] L``, ``V = L^-1 S W``, ``Sigma = L L'``:
      checked along each column ``v``, ``v' B v / v' v = 1``, one more ``c`` column each (a column
      turned away from its optimum with the right variance along itself is not seen);
    - ``o_i = (Sigma E[g])_i / sd_i``, 0 at the optimum of any Gaussian family: one Newton step
      of the mean in q's sds (divided by ``sqrt(c_i)`` in `_stationarity`: in the sds the
      curvature asks for).

    The flow guide (``z = T(eps)``, inverse autoregressive layers): its family holds every map
    ``z -> m + a * (z - m) + b`` of q (the last layer's mean weights and bias, and its log-scale
    bias, while that stays inside NumPyro's clip), under which the ELBO changes, to first order in
    ``a - 1`` and ``b``, by ``E[g (a - 1) (z - m)] + E[g] b + sum(a - 1)``: at its optimum ``E[g] = 0`` and
    ``c_i = -E[g_i (z_i - m_i)] = 1`` as above, with q's mean and covariance estimated from the
    draws (antithetic in ``eps``: ``T(eps)``, ``T(-eps)``). A q held off by the clip fails it.

    - for a mean-field q (``Sigma`` diagonal: ``o`` is a step of each coordinate alone) with up
      to ``max_pairs / 4`` coordinates (the pairs raised to 4 per coordinate, up to ``max_pairs``;
      512 coordinates in `inference.vi`), ``n_i = (P^-1 E[g])_i / sqrt((P^-1)_ii)``: the
      joint Newton step of the mean in the marginal sds of ``P^-1``, ``P = E_q[-H]`` estimated
      from the pairs' gradient differences; 0 at the optimum. ``o`` does not see a nearly flat
      joint direction: on the centred eight-schools model mean-field SVI stalled with ``mu`` at
      0.6 +- 0.6 where the posterior has 4.4 +- 3.3 (each coordinate's own step small; the
      common move of ``mu`` and the ``theta``s, nearly flat, not) and said converged. (A full-rank, low-rank or flow q's ``o`` is already a joint
      step: ``Sigma E[g]`` with its full ``Sigma``.)

    An ELBO plateau can hide a q far from both (a tight posterior fitted from wide scales: the
    noisy ELBO changes less per chunk than its noise while the scales still drift). Returns the
    per-pair values of ``c``, ``o`` and ``n`` (pairs x dim; ``n`` pairs x 0 where not taken); for
    a Gaussian posterior ``o`` and ``n`` are exact."""

    def check(raw_params, key, data):
        a, kw = model_inputs(data)
        svi = svi_for(a, kw)
        guide = svi.guide
        if isinstance(guide, autoguide.AutoNormal):
            q, unpack = _auto_normal_posterior(guide, svi.constrain_fn(raw_params))
        else:
            q, unpack = guide.get_posterior(svi.constrain_fn(raw_params)), guide._unpack_latent

        def grad_log_p(z):
            return -jax.grad(lambda u: potential_energy(fit_model, a, kw, unpack(u)))(z)

        def none(g):  # no joint step (the guides whose ``o`` is one already, or too many coordinates)
            return jnp.zeros(g.shape[:-1] + (0,), g.dtype)

        def joint(eps, scale, dg, g):
            """A mean-field q's joint Newton step ``P^-1 g`` of each pair in the marginal sds of
            ``P^-1``, the curvature in q's scaled coordinates ``Q = S P S`` from the pairs' secants
            (``dg = E S H`` for ``P = -H``, by least squares: exact for a Gaussian posterior,
            ``E_q[-H]`` otherwise), its eigenvalues taken in absolute value."""
            if 4 * g.shape[-1] > g.shape[0]:  # a quarter of the pairs' count at most: a well-posed fit
                return none(g)
            keep = jnp.all(jnp.isfinite(dg), axis=1, keepdims=True)  # a pair off the density's domain
            e, dg = jnp.where(keep, eps, 0.0), jnp.where(keep, dg, 0.0)  # stays out (as in `_stationarity`)
            B = jnp.linalg.solve(e.T @ e, e.T @ dg)  # S H
            w, V = jnp.linalg.eigh(-(B * scale + (B * scale).T) / 2)
            w = jnp.maximum(jnp.abs(w), jnp.finfo(w.dtype).eps * jnp.max(jnp.abs(w)))
            step = (((g * scale) @ V) / w) @ V.T  # Q^-1 S g = S^-1 P^-1 g
            return step / jnp.sqrt(jnp.sum(V * V / w, axis=1))

        if isinstance(q, dist.TransformedDistribution):  # the flow guide: its draws give m, Sigma, c, o
            eps = jax.random.normal(key, (pairs, guide.latent_dim), jax.tree.leaves(raw_params)[0].dtype)
            zp, zm = q.transforms[0](eps), q.transforms[0](-eps)
            for t in q.transforms[1:]:
                zp, zm = t(zp), t(zm)
            gp, gm = jax.vmap(grad_log_p)(zp), jax.vmap(grad_log_p)(zm)
            z = jnp.concatenate([zp, zm])
            m, cov = z.mean(0), jnp.atleast_2d(jnp.cov(z.T))
            c = -(gp * (zp - m) + gm * (zm - m)) / 2
            return c, ((gp + gm) / 2 @ cov) / jnp.sqrt(jnp.diagonal(cov)), none(gp)
        loc = q.loc
        full = isinstance(q, (dist.MultivariateNormal, dist.LowRankMultivariateNormal))
        # a mean-field q's joint step fits its curvature to the pairs: 4 per coordinate at least
        n = pairs if full else max(pairs, min(4 * loc.shape[-1], max_pairs or pairs))
        eps = jax.random.normal(key, (n,) + loc.shape, loc.dtype)
        L = q.scale_tril if full else None  # low rank: the Cholesky factor of W W' + D
        d = eps @ L.T if full else eps * q.scale
        gp, gm = jax.vmap(grad_log_p)(loc + d), jax.vmap(grad_log_p)(loc - d)
        c = -(gp - gm) * d / 2
        g = (gp + gm) / 2
        if isinstance(q, dist.LowRankMultivariateNormal):  # and along each column of the factor
            U = q.cov_factor
            V = jax.scipy.linalg.solve_triangular(L, U, lower=True)
            c = jnp.concatenate([c, -((gp - gm) / 2 @ U) * (eps @ V) / jnp.sum(V * V, 0)], axis=1)
        if full:  # Sigma g / sd
            cov = L @ L.T
            return c, (g @ cov) / jnp.sqrt(jnp.diagonal(cov)), none(g)
        return c, g * q.scale, joint(eps, q.scale, (gp - gm) / 2, g)

    return jax.jit(check)


def _stationarity(c, o, joint=None) -> dict:
    """Summary of `_stationarity_fn`'s per-pair values: q is at its optimum unless some coordinate's
    scale ratio or mean offset (coordinate-wise, or by the ``joint`` Newton step) is beyond
    ``SCALE_OFF`` / ``MEAN_OFF`` by more than a Bonferroni z over the coordinates times its Monte
    Carlo standard error. Non-finite gradients at more than 1% of the pairs (q putting mass where
    the model's density is undefined) also fail it."""
    from scipy.special import ndtri

    c, o = np.asarray(c, float), np.asarray(o, float)
    joint = np.zeros((len(c), 0)) if joint is None else np.asarray(joint, float)
    ok = np.all(np.isfinite(c), axis=1) & np.all(np.isfinite(o), axis=1) & np.all(np.isfinite(joint), axis=1)
    n, dim = int(ok.sum()), c.shape[1]
    if n < 0.99 * len(ok) or n < 8:
        return {"at_optimum": False, "scale_ratio": float("nan"), "mean_offset_sd": float("nan"),
                "joint_offset_sd": float("nan"), "finite_pairs": n, "pairs": len(ok)}
    c, o, joint = c[ok], o[ok], joint[ok]
    cm, cs = c.mean(0), c.std(0, ddof=1) / np.sqrt(n)
    om, osd = o.mean(0), o.std(0, ddof=1) / np.sqrt(n)
    tests = 2 if joint.shape[1] == 0 else 3  # per coordinate: scale, mean, joint mean
    z = float(ndtri(1.0 - 0.005 / (tests * dim)))  # 1% over every test (two-sided)
    r2 = SCALE_OFF ** 2
    too_wide = cm - z * cs > r2
    too_narrow = cm + z * cs < 1.0 / r2
    ratio = np.sqrt(np.clip(cm, 1e-12, None))
    # the Newton step in the sds the curvature asks for (q's sds / ratio)
    om, osd = om / ratio[: o.shape[1]], osd / ratio[: o.shape[1]]
    off = np.abs(om) - z * osd > MEAN_OFF
    jm, jsd = joint.mean(0), joint.std(0, ddof=1) / np.sqrt(n)
    joint_off = np.abs(jm) - z * jsd > MEAN_OFF
    return {"at_optimum": not bool(np.any(too_wide | too_narrow) or np.any(off) or np.any(joint_off)),
            "scale_ratio": float(np.max(np.maximum(ratio, 1.0 / ratio))),
            "mean_offset_sd": float(np.max(np.abs(om))),
            "joint_offset_sd": float(np.max(np.abs(jm))) if jm.size else float("nan"),
            "finite_pairs": n, "pairs": len(ok)}


def _draw_fn(model, svi_for, model_inputs, num_samples, fit_model, white):
    """Draws of the model's latent sites from the guide (fitted to ``fit_model``: ``model``, or
    ``model`` with the sites ``white`` whitened), with log q and the model's log joint at each
    (both densities in the constrained space of ``model``'s latent sites). ``svi_for(args,
    kwargs)``: the SVI whose guide draws (set up in the draws' own trace for a named guide)."""

    def latent_names(m, a, kw):
        return [n for n, s in handlers.trace(handlers.seed(m, 0)).get_trace(*a, **kw).items()
                if s["type"] == "sample" and not s["is_observed"]]

    def draw(raw_params, key, data):
        a, kw = model_inputs(data)
        svi = svi_for(a, kw)
        guide, params = svi.guide, svi.constrain_fn(raw_params)
        latent = latent_names(model, a, kw)
        fit_latent = latent if fit_model is model else latent_names(fit_model, a, kw)

        def one(k):
            tr = handlers.trace(handlers.seed(handlers.substitute(guide, data=params), k)).get_trace(*a, **kw)
            log_q = 0.0
            for site in tr.values():
                if site["type"] == "sample" and not site["is_observed"]:
                    inter = site.get("intermediates")
                    lq = site["fn"].log_prob(site["value"], inter) if inter else site["fn"].log_prob(site["value"])
                    log_q = log_q + jnp.sum(lq) * (site.get("scale") or 1.0)
            if fit_model is model:
                values = {n: tr[n]["value"] for n in latent}
                lp, _ = log_density(model, a, kw, values)
                return values, log_q, lp
            # whitened: f = loc + L z; q and the joint both change by the Jacobian |L| from z to f
            # (taken from L's diagonal: in float32 the density of f itself needs L^-1 f, far less
            # accurate than z for an ill-conditioned kernel matrix)
            z = {n: tr[n]["value"] for n in fit_latent}
            ftr = handlers.trace(handlers.substitute(handlers.seed(fit_model, 0), data=z)).get_trace(*a, **kw)
            values = {n: ftr[n]["value"] for n in latent}
            lp_z, _ = log_density(fit_model, a, kw, z)
            log_det = whiten.log_abs_det(model, a, kw, values, white)
            return values, log_q - log_det, lp_z - log_det

        return (params,) + tuple(jax.vmap(one)(jax.random.split(key, num_samples)))

    return jax.jit(draw)


def _forwarded(fn, path: str, **options) -> dict:
    """The SVI options (``name=(value, default)``) given a non-default value, for a dedicated path
    ``fn``: those its signature names are passed on, any other raises ValueError naming it (a
    default value is left out, so the path keeps its own default)."""
    import inspect

    named = {p.name for p in inspect.signature(fn).parameters.values()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    given = {k: v for k, v in options.items() if not _options.is_default(*v)}
    _options.unsupported(path, **{k: v for k, v in given.items() if k not in named})
    return {k: value for k, (value, _) in given.items()}


def _progress_bar(on, total):
    return Bar(True, total, "vi") if on else None
