"""Laplace approximation: MAP in unconstrained space, the Hessian there, a Gaussian around the mode.

The mode is found by Newton steps in the latent space for a latent-Gaussian model with a correlated
prior such as a GP classifier (`inference.latent_newton`, Rasmussen & Williams alg. 3.1), by
damped Newton steps on the model's potential up to ``NEWTON_MAX_DIM`` unconstrained dimensions,
by L-BFGS above, then polished by Newton steps on the model's potential (so a Gaussian posterior
is recovered to machine precision). ``diagnostics``: ``grad_norm`` and ``newton_decrement`` at the
mode returned, ``mode_finder``, ``iterations``, ``polish_steps``; ``converged`` as README.md's
table says (`inference.convergence.laplace`). The log evidence is
``-U(x*) + d/2 log 2 pi - 1/2 log det H`` with ``U`` the potential (negative log joint including
the change-of-variables term). A mode search may stop at any stationary point: where the Hessian there has
a clearly negative eigenvalue (a saddle, e.g. a mixture component sitting between two clusters),
the search restarts below it along that direction, up to ``MAX_SADDLE_ESCAPES`` times
(``diagnostics["saddle_escapes"]``). A singular or indefinite
Hessian at the point returned raises `SingularHessianError` naming the sites involved, never NaN.

Example:
    >>> import numpy as np, inference, probmodels
    >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
    >>> post = inference.laplace(probmodels.linear_regression, X, y, noise_scale=1.0, num_samples=100)
    >>> post.evidence_method
    'laplace'
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import constrain_fn, initialize_model, potential_energy
from numpyro.infer import init_to_value

from inference import _model, _options, _special, compiled, convergence, latent_newton, sharding
from inference.trace_reading import DISCRETE_ADVICE
from inference.hyper import sites as hyper_sites
from inference.latent import init_to_prior_mean
from inference.posterior import Posterior
from inference.progress import Bar


class SingularHessianError(ValueError):
    """The Hessian of the negative log posterior at the mode is not positive definite.

    Example (a flat direction: only the sum ``a + b`` is identified):
        >>> import numpy as np, numpyro, numpyro.distributions as dist, inference
        >>> def model(y):
        ...     a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), ()))
        ...     b = numpyro.sample("b", dist.ImproperUniform(dist.constraints.real, (), ()))
        ...     numpyro.sample("y", dist.Normal(a + b, 1.0), obs=y)
        >>> try:
        ...     inference.laplace(model, np.zeros(5))
        ... except inference.SingularHessianError as err:
        ...     print("singular:", "['a', 'b']" in str(err))
        singular: True
    """


class _RanOff(FloatingPointError):
    """The Newton search's potential, gradient or Hessian became non-finite after ``x``, its last
    finite point: the search ran off towards a boundary of the unconstrained space."""

    def __init__(self, x, message):
        super().__init__(message)
        self.x = x


class MapState(NamedTuple):
    x: jax.Array
    value: jax.Array
    grad_norm: jax.Array
    opt_state: optax.OptState
    iteration: jax.Array


@compiled.scoped
def laplace(
    model,
    *args,
    num_samples: int = 1000,
    max_iter: int = 1000,
    tol: float = 1e-8,
    seed: int = 0,
    progress: bool | None = None,
    model_kwargs: dict | None = None,
    shard_data=False,
    hyper: str | None = None,
    **kwargs,
) -> Posterior:
    """Gaussian approximation at the posterior mode of ``model(*args, **kwargs)``.

    ``tol`` is the gradient-norm tolerance of the mode search (relative to ``max(1, |U|)``);
    ``max_iter`` caps its iterations (damped Newton steps up to ``NEWTON_MAX_DIM`` unconstrained
    dimensions, L-BFGS above).
    ``progress``: a bar over the fit's two stages (mode and Hessian; draws), shown only once the
    fit has run for a second (the mode search is one compiled loop, so the bar cannot move inside it).
    ``shard_data``: ``True`` (all devices) or a `jax.sharding.Mesh` splits the data rows over
    devices for the mode search and the Hessian (see `inference.sharding`; same result as one
    device up to summation order).
    ``hyper``: ``None`` (one joint Gaussian over every continuous site), ``"map"`` (the
    hyperparameter sites at the mode of their posterior, the latent Gaussian marginalised by
    Laplace, ``evidence_method="laplace-map"``) or ``"integrate"`` (an INLA-style mixture over a
    design of hyperparameter values, ``"laplace-integrated"``); see `inference.hyper`. With
    ``hyper``, ``tol / 100`` bounds the predicted gain in ``log Z + log p`` left at the mode and
    ``max_iter`` caps the BFGS iterations.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
        >>> post = inference.laplace(probmodels.linear_regression, X, y, noise_scale=1.0, num_samples=100)
        >>> post.evidence_method, post.diagnostics["converged"]
        ('laplace', True)
    """
    num_samples = _options.positive_int(num_samples, "num_samples")
    max_iter = _options.positive_int(max_iter, "max_iter")
    tol = _options.positive_float(tol, "tol")
    seed = _options.seed(seed)
    hyper_sites.check_option(hyper)
    _model.check_offered(model, "laplace")
    bar = Bar(_options.progress(progress), 2, "laplace", "stage")  # shown only on a fit of over a second
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _options.model_arguments(laplace, model, args, kwargs)
    mesh = sharding.resolve_mesh(shard_data)
    # the sites from one abstract trace (the model's own input checks still raise first); an eager
    # one paid a compilation per operation in a new process. Sharding reads concrete observations.
    trace = (_model.structure_trace if mesh is None else _model.trace_model)(model, args, kwargs, seed)
    _model.refuse_subsampling(trace, "inference.laplace")
    latent = _model.latent_sites(trace)
    if not latent:
        raise ValueError("model has no latent sample sites: nothing to infer")
    discrete = _model.discrete_latent_sites(trace)
    if _special.has_spike_and_slab(trace) or discrete:
        name = discrete[0] if discrete else "z"
        other = ("inference.mcmc, inference.vi or inference.ep" if _special.has_spike_and_slab(trace) else
                 f"{DISCRETE_ADVICE}; or sum it out in the model (see inference.latent.recovered)")
        raise ValueError(f"site {name!r} is discrete: the Laplace approximation needs continuous latents; use {other}")
    if _special.has_noisy_step(trace):
        raise ValueError("the noisy-step likelihood has no curvature (a step function): the Laplace "
                         "approximation does not apply; use inference.ep or inference.mcmc")
    if hyper is not None:
        if mesh is not None:
            raise ValueError("shard_data: not supported with hyper= (the hyperparameter search runs on one device)")
        from inference.hyper.laplace_fit import laplace_hyper

        post = laplace_hyper(model, args, kwargs, trace, hyper, num_samples=num_samples, max_iter=max_iter, tol=tol,
                             seed=seed)
        bar.close()
        return _model.postprocess(model, post)

    key = jax.random.PRNGKey(seed)
    own = _model.init_values(model, args, kwargs, seed)  # the model's own start, if it offers one
    x0, unravel = ravel_pytree(_initial_point(model, args, kwargs, seed, trace, own))
    if mesh is None:  # programs kept per model structure, the data passed as arguments
        progs, data = compiled.get("laplace", model, args, kwargs, (max_iter, tol), lambda rebuild: _programs(
            model, unravel, lambda arrays: rebuild(arrays), max_iter, tol), persist=True)
    else:  # the sharded data cross the jit boundary as arguments: GSPMD splits the likelihood by rows
        data = sharding.prepare(model, args, kwargs, trace, mesh)
        progs = _programs(model, unravel, lambda d: sharding.merge_data(args, kwargs, d), max_iter, tol)
    found = _latent_gaussian_mode(model, args, kwargs, trace, seed, x0.dtype) if mesh is None else None
    if found is not None:  # Newton in the latent space (R&W alg. 3.1): a few steps, no L-BFGS
        x, iters, stable_evidence = found
        mode_finder = "latent-newton"
    else:  # Newton on the potential for a few dimensions (no L-BFGS program to compile), else L-BFGS
        mode_finder = "newton" if x0.shape[0] <= NEWTON_MAX_DIM else "lbfgs"
        x0 = _valid_start(model, args, kwargs, key, own, x0, progs, data)
        x, _, iters = _search(mode_finder, progs, x0, data, max_iter, tol, unravel)
    x, H, g, polish_steps = _newton_polish(progs, x, data)
    escapes = 0
    while True:
        if not np.all(np.isfinite(H)):
            raise SingularHessianError(
                f"the Hessian at the mode is not finite (sites {latent}): the posterior may be improper "
                "or the mode at infinity (e.g. separable data with a flat prior); use a proper prior")
        H = 0.5 * (H + H.T)
        dsc, Hs = _jacobi(H)
        evals, evecs = np.linalg.eigh(Hs)
        scale = max(1.0, float(np.max(np.abs(evals))))
        if evals[0] > -1e-6 * scale or mode_finder == "latent-newton" or escapes == MAX_SADDLE_ESCAPES:
            break
        # negative curvature: a saddle point, not a mode (a search may stop at any stationary point)
        moved = _escape_saddle(progs, x, evals[0], evecs[:, 0] / dsc, data)
        if moved is None:
            break
        x, _, more = _search(mode_finder, progs, moved, data, max_iter, tol, unravel)
        iters, escapes = iters + more, escapes + 1
        x, H, g, steps = _newton_polish(progs, x, data)
        polish_steps += steps
    evals_h, evecs_h = np.linalg.eigh(np.asarray(H, np.float64))  # the curvature in the model's own units
    # singular: relative to the scaled Hessian (units-free), or vanishing in absolute terms (an sd of
    # 1e5 in the unconstrained space): a likelihood that saturates along a direction with nothing
    # else curving it (separable data under a flat prior: the search stopped at w ~ 600, where the
    # gradient fell under tol, and the scaled Hessian alone reads a well-conditioned curvature)
    vanishing = evals_h[0] <= ABSOLUTE_FLAT and evals[0] > 1e-10 * scale
    if evals[0] <= 1e-10 * scale or vanishing:
        direction = evecs_h[:, 0] if vanishing else evecs[:, 0] / dsc
        sites = _sites_of(direction, unravel, x0.shape[0])
        kind = "singular" if vanishing or abs(evals[0]) <= 1e-10 * scale else "indefinite"
        where = (f"smallest eigenvalue {evals_h[0]:.3g}, largest {evals_h[-1]:.3g}" if vanishing else
                 f"smallest eigenvalue {evals[0]:.3g}, largest {evals[-1]:.3g}, its diagonal scaled to ones")
        raise SingularHessianError(
            f"the Hessian at the mode is {kind} ({where}); the flat or negatively curved direction involves "
            f"sites {sites}. The posterior is not locally Gaussian there: add prior information, reparameterise, "
            "or use inference.mcmc")
    bar.update(1)  # the mode and the Hessian there
    chol_s = np.linalg.cholesky(Hs)  # H = D Hs D: the factor and every solve through the scaled one
    d = x.shape[0]
    logdet_h = 2.0 * np.sum(np.log(np.diag(chol_s))) + 2.0 * np.sum(np.log(dsc))
    u_star = float(progs.value(jnp.asarray(x), data))
    log_evidence = -u_star + 0.5 * d * np.log(2 * np.pi) - 0.5 * logdet_h
    if mode_finder == "latent-newton" and stable_evidence is not None:
        log_evidence = stable_evidence  # the same quantity without K^-1 (float32 keeps its digits)

    eps = np.asarray(jax.random.normal(jax.random.fold_in(key, 3), (num_samples, d), dtype=x.dtype))
    draws = (x + np.linalg.solve(chol_s.T, eps.T).T / dsc).astype(x.dtype)  # cov = H^-1
    log_q = -0.5 * np.sum(eps**2, axis=1) - 0.5 * d * np.log(2 * np.pi) + 0.5 * logdet_h
    lp = -np.asarray(progs.values(jnp.asarray(draws), data))
    flat = {k: v for k, v in progs.constrain(jnp.asarray(draws), data).items() if k in latent}
    samples, loglik, observed = _model.finish_samples(
        model, flat, args, kwargs, jax.random.fold_in(key, 5), 1, trace=trace)
    cov = np.linalg.solve(Hs, np.eye(d)) / np.outer(dsc, dsc)
    grad_norm = float(np.linalg.norm(g))
    decrement = 0.5 * float(np.sum(np.linalg.solve(chol_s, g / dsc) ** 2))  # g' H^-1 g / 2
    diagnostics = {
        "converged": convergence.laplace(grad_norm, u_star, tol, hessian_pd=True, decrement=decrement,
                                         dtype=x.dtype),  # README.md: what `converged` means
        "grad_norm": grad_norm, "newton_decrement": decrement, "mode_finder": mode_finder,
        "iterations": int(iters), "polish_steps": int(polish_steps),
        "min_eigenvalue": float(evals_h[0]), "condition_number": float(evals_h[-1] / evals_h[0]),
        "saddle_escapes": escapes,
        "dimension": int(d),
        "pareto_k": convergence.pareto_k(lp - log_q),  # q as an importance proposal (> 0.7: poor)
    }
    if mesh is not None:
        diagnostics.update(sharding.diagnostics(mesh))
    post = Posterior(
        engine="laplace", samples=samples, log_likelihood=loglik, observed_data=observed,
        sample_stats={"lp": lp[None], "log_q": log_q[None]}, log_evidence=float(log_evidence),
        evidence_method="laplace", diagnostics=diagnostics,
        approximation={"loc": np.asarray(x), "cov": cov, "precision": H},
        model=model, model_args=args, model_kwargs=kwargs, seed=seed,
    )
    bar.update(1)  # the draws
    bar.close()
    return _model.postprocess(model, post)


def _initial_point(model, args, kwargs, seed, trace, own) -> dict:
    """The start of the mode search (unconstrained values by site): each site's declared start or
    its prior mean (`inference.latent.init_to_prior_mean`: no prior draws to compile), overridden
    by the model's own starting values ``own`` (`_model.init_values`) where it offers them. The
    constrained start comes from the program VI and the mixture diagnostics run too
    (`_model.start_values`); only its map to
    unconstrained space is this engine's (a small program kept per structure). NumPyro's
    ``initialize_model`` in one program compiled the start, the potential and its gradient inside
    its validity loop: ~1.7 s of a mixture's or an HMM's first Laplace fit, the start again apart
    from the diagnostics' copy. Whether the start is valid is checked on the potential, by the
    caller (`_valid_start`)."""
    from numpyro.infer.util import unconstrain_fn

    values = _model.start_values(model, args, kwargs, seed, default=init_to_prior_mean, trace=trace)
    if own is not None:
        values = {**values, **{k: jnp.asarray(v) for k, v in own.items() if k in values}}

    def build(rebuild):
        def run(arrays, values):
            a, kw = rebuild(arrays)
            return unconstrain_fn(model, a, kw, values)

        return jax.jit(run)

    return compiled.call("unconstrain", model, args, kwargs, (), build, values, persist=True)


def _valid_start(model, args, kwargs, key, own, x0, progs, data):
    """``x0`` where the potential is finite there; else NumPyro's own search for a valid start
    (its eager ``initialize_model``: it raises its error naming the site, or finds one)."""
    x0 = np.asarray(x0)  # uncommitted: sharded data decide where the programs run
    if np.isfinite(float(progs.value(jnp.asarray(x0), data))):
        return x0
    strategy = init_to_value(values=own) if own is not None else _model.site_init(init_to_prior_mean)
    z = initialize_model(key, model, model_args=args, model_kwargs=kwargs, init_strategy=strategy)[0].z
    return np.asarray(ravel_pytree(z)[0])


class _Programs(NamedTuple):
    """The compiled pieces of a Laplace fit, each a function of ``(x, data)``."""

    mode: Callable  # L-BFGS loop -> (x, value, grad_norm, iteration)
    value: Callable  # potential energy U
    values: Callable  # U over a batch of points
    derivs: Callable  # (gradient, Hessian) of U: one program (~0.5-0.8 s of compilation each saved)
    constrain: Callable  # batch of unconstrained points -> constrained sites


def _programs(model, unravel, model_inputs, max_iter, tol) -> _Programs:
    """``model_inputs(data) -> (args, kwargs)``; the potential is NumPyro's, in unconstrained space."""

    def U(x, data):
        a, kw = model_inputs(data)
        return potential_energy(model, a, kw, unravel(x))

    def constrain(z, data):
        a, kw = model_inputs(data)
        return constrain_fn(model, a, kw, unravel(z))

    return _Programs(
        mode=jax.jit(lambda x, data: _final(_mode_loop(lambda z: U(z, data), x, max_iter, tol))),
        value=jax.jit(U), values=jax.jit(jax.vmap(U, in_axes=(0, None))),
        derivs=jax.jit(lambda x, data: (jax.grad(U)(x, data), jax.hessian(U)(x, data))),
        constrain=jax.jit(jax.vmap(constrain, in_axes=(0, None))))


def _final(s: MapState) -> tuple:
    """What the mode search returns: plain arrays (no optimizer state), so that its program can be
    exported (`inference.exported`)."""
    return s.x, s.value, s.grad_norm, s.iteration


NEWTON_MAX_DIM = 128  # Newton's Hessian costs ~d gradients: L-BFGS above this many dimensions


def _search(finder, progs, x0, data, max_iter, tol, unravel):
    """``(x, gradient norm, iterations)`` of the mode search ``finder`` ("newton" or "lbfgs"); a
    Newton search that runs off (`_RanOff`) raises a SingularHessianError naming the sites it ran
    along (the centred eight-schools model, its density unbounded as the group scale goes to 0,
    said "the gradient or Hessian became non-finite during the mode search")."""
    try:
        return _newton_mode(progs, x0, data, max_iter, tol) if finder == "newton" else _find_mode(progs, x0, data)
    except _RanOff as err:
        sites = _sites_of(np.asarray(err.x, np.float64) - np.asarray(x0, np.float64), unravel, len(x0))
        raise SingularHessianError(
            f"the log posterior has no mode: the mode search ran off along sites {sites} until its density was no "
            "longer finite (it grows without bound that way, e.g. a hierarchical scale going to 0 with its group "
            "effects in the centred form). The posterior is not locally Gaussian: reparameterise (non-centred), "
            "add prior information, or use inference.mcmc") from None


ACCEPT = 1e-4  # a Newton step is taken when it gains this fraction of its predicted decrease
ABSOLUTE_FLAT = 1e-10  # a Hessian eigenvalue at most this (in the model's units) is a flat direction


def _newton_mode(progs, x0, data, max_iter, tol):
    """Newton steps on the potential ``U`` with Levenberg-Marquardt damping (Marquardt's ``H + lam
    diag|H|``, `_jacobi`; ``lam`` raised until the step lowers ``U`` by `ACCEPT` of its quadratic
    model's prediction, lowered after good steps), driven from Python with the programs a Laplace
    fit needs anyway (``derivs`` and ``value``): the L-BFGS loop with its line search was the largest program of a fit (a 2-state
    HMM: ~11 of ~40 s of CPU compiling; ~9 s of a linear regression's ~18 s). Stops at the
    gradient tolerance of `_mode_loop`, at a Newton decrement at the working precision, when no
    damping lowers ``U`` (round-off), or after ``max_iter`` steps."""
    x = np.asarray(x0)
    eps = float(np.finfo(x.dtype).eps)
    floor = float(np.sqrt(eps))
    u = float(progs.value(jnp.asarray(x), data))
    if not np.isfinite(u):
        raise FloatingPointError("the log posterior is not finite at the start of the mode search")
    lam, g_norm, steps = 0.0, np.inf, 0
    while steps < max_iter:
        g, H = (np.asarray(v, np.float64) for v in progs.derivs(jnp.asarray(x), data))
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
            raise _RanOff(x, "the log posterior's gradient or Hessian became non-finite during the mode search")
        H = 0.5 * (H + H.T)
        g_norm, size = float(np.linalg.norm(g)), max(1.0, abs(u))
        if g_norm <= (max(tol, floor * size) if floor > 1e-7 else tol):
            break
        dsc, Hs = _jacobi(H)  # damping in the scaled problem: H + lam diag|H| (Marquardt)
        evals = np.linalg.eigvalsh(Hs)
        h_scale = max(1.0, float(np.max(np.abs(evals))))
        if evals[0] <= 1e-8 * h_scale:  # not positive definite here: damp at least to make it so
            lam = max(lam, 1e-8 * h_scale - evals[0])
        accepted = False
        for _ in range(40):
            step = -np.linalg.solve(Hs + lam * np.eye(len(g)), g / dsc) / dsc
            predicted = -(g @ step + 0.5 * step @ H @ step)
            if lam == 0.0 and 0.5 * predicted <= 10 * eps * size:  # the Newton decrement: at the mode
                return x, g_norm, steps
            x_new = (x + step).astype(x.dtype)
            u_new = float(progs.value(jnp.asarray(x_new), data))
            # any real decrease is taken (a trust region's ratio > ACCEPT): at a kink of the model's
            # code the gradient can be off (NumPyro's Bernoulli(logits) at logits exactly 0, the
            # zero start of a logistic regression: d/d intercept = sum(1 - y), not sum(1/2 - y)),
            # and a tenth of its predicted gain was never reached, so the search stopped at its start
            if np.isfinite(u_new) and predicted > 0 and u - u_new >= ACCEPT * predicted:
                good = (u - u_new) >= 0.75 * predicted
                x, u, accepted = x_new, u_new, True
                lam = 0.0 if (good and lam < 1e-6 * h_scale) else (lam / 10.0 if good else lam)
                break
            lam = max(10.0 * lam, 1e-6 * h_scale)
        if not accepted:  # no damping lowers U: round-off at the mode, or a flat direction
            break
        steps += 1
    return x, g_norm, steps


def _find_mode(progs, x0, data):
    """L-BFGS with a zoom line search under ``lax.while_loop``, compiled with ``data`` an argument."""
    x, value, grad_norm, iteration = progs.mode(x0, data)
    if not np.isfinite(float(value)):
        raise FloatingPointError("the log posterior became non-finite during the mode search")
    return np.asarray(x), float(grad_norm), int(iteration)


def _mode_loop(U, x0, max_iter, tol):
    """The L-BFGS loop itself (traced): ``U(x)`` is the potential."""
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(U)

    def init(x):
        v, g = jax.value_and_grad(U)(x)
        return MapState(x, v, jnp.linalg.norm(g), opt.init(x), jnp.asarray(0))

    # In float32 a gradient norm of 1e-8 is below round-off: stop at what the dtype can resolve
    # (relative to the size of the objective) and let the Newton polish finish.
    floor = float(np.sqrt(np.finfo(x0.dtype).eps))

    def cond(s):
        gtol = jnp.maximum(tol, floor * jnp.maximum(1.0, jnp.abs(s.value))) if floor > 1e-7 else tol
        return (s.iteration < max_iter) & (s.grad_norm > gtol) & jnp.isfinite(s.value)

    def step(s):
        v, g = value_and_grad(s.x, state=s.opt_state)
        updates, opt_state = opt.update(g, s.opt_state, s.x, value=v, grad=g, value_fn=U)
        x = optax.apply_updates(s.x, updates)
        v_new, g_new = jax.value_and_grad(U)(x)
        return MapState(x, v_new, jnp.linalg.norm(g_new), opt_state, s.iteration + 1)

    return lax.while_loop(cond, step, init(x0))


MAX_SADDLE_ESCAPES = 5


def _escape_saddle(progs, x, eigenvalue, direction, data):
    """A point below the saddle ``x`` along its direction of negative curvature ``direction``
    (eigenvalue ``eigenvalue`` < 0 of the Hessian): the step whose quadratic model lowers the
    potential by one nat, to whichever side is lower; ``None`` when neither side is lower."""
    t = np.sqrt(2.0 / abs(eigenvalue))
    u0 = float(progs.value(jnp.asarray(x), data))
    best, best_u = None, u0
    for sign in (1.0, -1.0):
        for scale in (1.0, 0.25, 4.0):
            cand = (x + sign * scale * t * direction).astype(x.dtype)
            u = float(progs.value(jnp.asarray(cand), data))
            if np.isfinite(u) and u < best_u:
                best, best_u = cand, u
                break
    return best


def _newton_polish(progs, x, data, steps: int = 5):
    """Newton steps on the model's own potential from the mode found; exact in one step for a
    Gaussian posterior. Stops when the Newton decrement ``g' H^-1 g / 2`` (the predicted gain in
    log density) is at the working precision of ``U`` -- a criterion that means the same in
    float32 and float64 -- or a step does not lower ``U``. Returns ``(x, H at x, gradient at x,
    steps taken)``;
    whether ``x`` is a mode is judged by the caller (`inference.convergence.laplace`).
    """
    value = lambda z: progs.value(z, data)  # noqa: E731
    eps = float(np.finfo(np.asarray(x).dtype).eps)
    taken = 0
    for _ in range(steps):
        g, H = (np.asarray(v) for v in progs.derivs(jnp.asarray(x), data))
        dsc, Hs = _jacobi(0.5 * (H + H.T))
        try:
            chol = np.linalg.cholesky(Hs)
        except np.linalg.LinAlgError:
            return x, H, g, taken
        delta = np.linalg.solve(chol.T, np.linalg.solve(chol, g / dsc)) / dsc
        u_old = float(value(jnp.asarray(x)))
        if 0.5 * float(g @ delta) <= 10 * eps * max(1.0, abs(u_old)):
            return x, H, g, taken
        x_new = (x - delta).astype(x.dtype)
        u_new = float(value(jnp.asarray(x_new)))
        if not np.isfinite(u_new) or u_new > u_old + 10 * eps * max(1.0, abs(u_old)):
            break
        x, taken = x_new, taken + 1
    g, H = (np.asarray(v) for v in progs.derivs(jnp.asarray(x), data))
    return x, H, g, taken


def _latent_gaussian_mode(model, args, kwargs, trace, seed, dtype):
    """``(x, Newton steps, stable log evidence or None)`` for a latent-Gaussian model with a
    correlated prior, e.g. a GP
    (`inference.latent_newton`: EP's recogniser reads the structure, Newton runs in the latent
    space), or ``None`` for any other model, which L-BFGS then handles. L-BFGS crawls on such a
    prior: its curvature is ``K^-1`` (condition number ~5e7 for an RBF Gram matrix with jitter
    1e-6: a GP classifier with n = 300 spent all 1000 iterations, gradient norm 79 in float64);
    an independent Gaussian prior (a GLM) leaves it well conditioned (about 10 iterations), where
    recognising the model would cost more than it saves. ``x`` is the flat unconstrained point
    (Gaussian sites: their own values)."""
    from inference.ep.recognise import GAUSSIAN_PRIORS, recognise, unflatten, unwrap

    priors = [unwrap(trace[n]["fn"]) for n in _model.latent_sites(trace)]
    if not (all(isinstance(p, GAUSSIAN_PRIORS) for p in priors)
            and any(isinstance(p, GAUSSIAN_PRIORS[1:]) for p in priors)):
        return None
    try:
        rec = recognise(model, args, kwargs, trace, seed=seed)  # abstract serves
    except ValueError:  # not latent-Gaussian after all (a prior depending on a latent, ...)
        return None
    if not latent_newton.differentiable(rec.problem):
        return None
    a0 = jnp.zeros(rec.problem.dim, dtype)
    res = latent_newton.newton(rec.problem, a0, 10 * float(np.finfo(dtype).eps), max_iter=100)
    u = latent_newton.to_latent(rec.problem, rec.latent_map, res.a)
    if not bool(jnp.all(jnp.isfinite(u))):
        return None
    x = np.asarray(ravel_pytree(unflatten(u, rec.blocks))[0], dtype)
    return x, int(res.iteration), latent_newton.log_evidence(rec.problem, res.a)


def _jacobi(H):
    """``(d, H / (d d'))`` with ``d = sqrt|diag H|`` (1 where zero), in float64: the Hessian with
    its diagonal scaled to ones. Positive definiteness, damping and factors are judged and taken on
    the scaled matrix, so a posterior in badly scaled units (a logistic regression on incomes of
    ~5e4 next to ages: an eigenvalue ratio ~1e-11, while the scaled matrix is well conditioned) is
    not refused as singular, and its damping is invariant to the units."""
    H = np.asarray(H, np.float64)
    d = np.sqrt(np.abs(np.diag(H)))
    d = np.where(d > 0, d, 1.0)
    return d, H / np.outer(d, d)


def _sites_of(direction, unravel, d):
    """Names of the sites carrying the bulk of an eigenvector of the Hessian."""
    parts = unravel(jnp.asarray(np.abs(direction)))
    weight = {k: float(jnp.sum(jnp.asarray(v) ** 2)) for k, v in parts.items()}
    total = sum(weight.values()) or 1.0
    return sorted((k for k, w in weight.items() if w / total > 0.05), key=lambda k: -weight[k])
