"""``inference.ep(..., hyper="map" | "integrate")``: EP's evidence of the latent Gaussian plugged
into the engine-agnostic search and integration (`inference.hyper.fit`).

Scope: hyperparameters of the latent Gaussian's *prior* (a kernel's lengthscale or variance, a
weight prior's scale) and of *Gaussian likelihoods* (a noise scale). EP's recognition
(`inference.ep.recognise`: the projections ``A``, ``b``, the site kinds and their data) is
concrete, so it runs once, on the model with the hyperparameters fixed at the search's start; it
runs again at a second point (once per model structure, `inference.compiled.memo`). A Gaussian
site group whose data (``y``, ``noise_var``, ``log_const``) changed between the two, its
projection not, is read again at every ``phi`` inside the programs (`_gaussian_data`: the site's
log likelihood and its first two derivatives along the latent, exact for a quadratic); any
other change of the likelihood (a Student-t scale, a probit's slope) is refused with a
ValueError naming the site (`inference.laplace(..., hyper=...)` handles those). The prior ``(m0(phi), S0(phi))`` is read
inside the compiled programs from a trace of the model with ``phi`` substituted (`sites.run`),
and the EP problem built from it: ``K = A S0 A'`` (function space; ``a a' * S0`` elementwise
when ``A`` is diagonal, as a GP classifier's label signs) or ``P = A chol(S0)`` (weight space),
offset ``b + A m0``.

``evidence``: EP's parallel (or sequential) sweeps from the warm sites on ``stop_gradient(phi)``
(undamped and Anderson-accelerated, `inference.ep.anderson`, for at most 50 sweeps, then plain
sweeps with damping 0.5 from the warm start again if that did not converge, as the plain driver
does; a given ``damping`` is used throughout, without acceleration), then EP's log
evidence at the converged sites and its gradient in ``phi`` with the sites held fixed (log Z_EP
is stationary in the sites at a fixed point): in function space GPML's closed form
``tr(F dK) / 2 + alpha' d offset`` (`inference.ep.gaussian.gaussian_gradient_terms`: one
factorisation and solve, only the kernel differentiated) plus, for a Gaussian likelihood's
hyperparameters, the tilted normalisers' derivatives at the fixed cavities (log Z_EP is stationary
in the cavities too), in weight space by differentiating log Z_EP at the fixed sites (``d x d``
factorisations). At n = 1000 (twonorm) this, the
acceleration and the kernels' matrix-product derivatives (`probmodels.kernels`) took a warm
``hyper="map"`` fit from 17.2 s to 9.2 s (benchmarks/RESULTS.md).
``draw``: the EP Gaussian of the latent at ``phi`` (`inference.ep.gaussian.to_latent`), sampled
through a Cholesky factor with the smallest jitter that works.

Programs are kept per model structure with the data as arguments (`inference.compiled`); the
recognised arrays travel with the data, so a refit on new data of the same shapes compiles
nothing and never sees stale projections.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference import _model, _options, compiled, linalg
from inference.ep import anderson
from inference.ep.evidence import log_evidence
from inference.ep.gaussian import LatentMap, gaussian_gradient_terms, site_moments, to_latent
from inference.ep.problem import EPProblem, SiteGroup, tilted
from inference.ep.recognise import recognise
from inference.ep.recognise import _site_log_lik
from inference.ep.state import EPState
from inference.ep.update import _run, cavity
from inference.hyper import fit, laplace_evidence, sites
from inference.trace_reading import gaussian_prior

UNDAMPED_SWEEPS = 50  # default damping: undamped sweeps before the damped (0.5) restart
# EP's sites run to tol (plain EP's tolerance, floored at the working precision) at every evaluation:
# the gradient with the sites held fixed is then within 3e-8 (relative) of the one with sites run to
# 1e-12 (twonorm, n = 500; 5e-8 at 1e-5), and each evaluation takes ~5 fewer sweeps than at 1e-10
SWEEP_TOL_FACTOR = 1.0
# At the search's line-search trial points the sweeps stop at LOOSE_FACTOR x the gradient norm of
# the last accepted point (at most LOOSE_MAX, at least the tolerance above): far from the mode the
# search needs the gradient's direction, not its eighth digit (`optimize.maximize` evaluates a
# point again to tol before judging or returning it). twonorm, n = 1000, 5 splits: warm fits
# 8.97 -> 7.32 s median, log losses equal to 4 digits (benchmarks/RESULTS.md); a factor 1e-2 took
# 21-23 iterations where 1e-3 takes 13-14 (the gradient's error misleads BFGS).
LOOSE_FACTOR = 1e-3
LOOSE_MAX = 1e-2
PROBE_SHIFT = 0.5  # the second recognition's phi: the start plus this in every coordinate
ADVICE = "use inference.laplace(..., hyper=...) for hyperparameters of a non-Gaussian likelihood"


class Setup(NamedTuple):
    """What a fit needs: the sites, the compiled programs and the data to pass them, the start."""

    hs: sites.HyperSites
    progs: fit.Programs
    data: tuple  # (the model's arrays, the recognised EP arrays and sweep settings)
    phi0: jax.Array
    warm0: tuple  # (tau, nu) site natural parameters
    space: str
    site_kinds: dict
    sweep_tol: float
    varying: tuple  # (group index, observed site) of each Gaussian group read again at every phi


# ----------------------------------------------------------------------------- recognition
def _recognise_at(model, args, kwargs, hs, theta, seed):
    """EP's recognition of ``model`` with the hyperparameters fixed (observed) at ``theta``; the
    conditioned sites are left out of the trace it reads, so they are neither latents nor sites."""
    fixed, kwargs = sites.fixed(model), {**kwargs, sites.THETA: {n: np.asarray(v) for n, v in theta.items()}}
    trace = _model.trace_model(fixed, args, kwargs, seed=seed)
    trace = type(trace)((n, s) for n, s in trace.items() if n not in hs.hyper)
    rec = recognise(fixed, args, kwargs, trace, seed=seed)
    names = tuple(b.name for b in rec.blocks)
    if names != tuple(hs.latent):
        raise ValueError(f"hyper=: EP's latent sites {list(names)} are not the latent Gaussian {list(hs.latent)} "
                         "of the hyperparameter search")
    return rec


def _site_rows(rec):
    """``(observed site, row slice, group)`` of each non-constant observed site (recognition order)."""
    names = [n for n, k in rec.site_kinds.items() if k != "constant"]
    out, start = [], 0
    for name, group in zip(names, rec.problem.groups):
        out.append((name, slice(start, start + group.size), group))
        start += group.size
    return out


def _varying_groups(hs, rec0, rec1, double: bool) -> tuple:
    """The likelihood part of the recognition (kinds, projections, site data, constants) at two
    hyperparameter values: ``(group index, observed site)`` of each Gaussian group whose data
    changed (its projection the same); any other change is refused (EP's hyper= learns the
    prior's hyperparameters and Gaussian likelihoods')."""
    rtol = 1e-6 if double else 1e-2

    def same(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        # the scale from the finite entries: an infinite one (a quadrature bound) made atol inf and
        # the comparison vacuous; infinities must match exactly (allclose compares them as equal)
        scale = np.max(np.abs(a[np.isfinite(a)]), initial=0.0)
        return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=rtol * (1.0 + scale))

    def refuse(names, why):
        raise ValueError(
            f"hyper=: the likelihood of observed site(s) {names} depends on the hyperparameters {list(hs.hyper)} "
            f"({why}); EP's hyper= supports hyperparameters of the latent Gaussian prior and of Gaussian "
            f"likelihoods only; {ADVICE}")

    if rec0.site_kinds != rec1.site_kinds:
        changed = [n for n in rec0.site_kinds if rec0.site_kinds[n] != rec1.site_kinds.get(n)]
        refuse(changed, "its EP site kind changes")
    varying = []
    for index, ((name, rows, g0), (_, _, g1)) in enumerate(zip(_site_rows(rec0), _site_rows(rec1))):
        A0, A1 = np.asarray(rec0.A[rows], float), np.asarray(rec1.A[rows], float)
        leaves0, leaves1 = jax.tree_util.tree_leaves(g0.data), jax.tree_util.tree_leaves(g1.data)
        if (same(A0, A1) and same(rec0.b[rows], rec1.b[rows]) and len(leaves0) == len(leaves1)
                and all(same(a, b) for a, b in zip(leaves0, leaves1))):
            continue
        if g0.kind != "gaussian":
            refuse([name], f"its {g0.kind} site's projection or constants change")
        # a Gaussian site in eta = a_i u + b_i is one in any k_i a_i u + b'_i: rows may rescale
        # (a noise scale dividing the residual), the data are then read in the first projection
        k = np.sum(A1 * A0, axis=1) / np.maximum(np.sum(A0 * A0, axis=1), 1e-300)
        if not same(k[:, None] * A0, A1):
            refuse([name], "its projection changes direction")
        varying.append((index, name))
    if not same(rec0.const_log_lik, rec1.const_log_lik):
        refuse([n for n, k in rec0.site_kinds.items() if k == "constant"], "its constant log likelihood changes")
    return tuple(varying)


def _directions(rec, rows, diagonal: bool) -> np.ndarray:
    """Latent directions ``(D, K)`` along which `_gaussian_data` differentiates a Gaussian group
    with projection rows ``rows``: ``1 / a_ii`` (K = 1, every site's ``eta`` moves by one) when the
    problem's ``A`` is diagonal, else the coordinate axes (K = D): each site then sees the whole
    of its row (``sum_k (a_i e_k)^2 = |a_i|^2``), never a near-cancellation of a random one."""
    A = np.asarray(rec.A, float)
    if diagonal:
        delta = np.zeros(A.shape[1])
        d = np.diagonal(A)[rows]
        delta[rows] = 1.0 / d
        return delta[:, None]
    return np.eye(A.shape[1])


def _gaussian_data(model, hs, args, kwargs, phi, name, directions, c, b):
    """The Gaussian site data ``{y, noise_var, log_const}`` of observed site ``name`` at ``phi``,
    traceable and differentiable: its log likelihood ``l_i = log_const - log(2 pi s) / 2 -
    (eta_i - y_i)^2 / (2 s)`` at the latent ``0`` (``eta = b``) and its first two derivatives along
    each direction ``k`` (``eta`` moves by ``c_ik``): ``l'' = -c^2 / s`` and ``l' = (y - b) c / s``."""
    unravel = laplace_evidence.latent_model(model, hs, None).unravel

    def along(delta):
        def lik(t):
            tr = sites.run(model, args, kwargs, hs, phi, unravel(t * delta))
            return jnp.ravel(_site_log_lik(dict(tr[name], name=name)))

        def first(t):
            return jax.jvp(lik, (t,), (jnp.ones_like(t),))

        (l0, l1), (_, l2) = jax.jvp(first, (jnp.zeros((), phi.dtype),), (jnp.ones((), phi.dtype),))
        return l0, l1, l2

    l0, l1, l2 = jax.vmap(along, in_axes=1, out_axes=1)(directions)
    cc = jnp.sum(c * c, axis=1)
    noise_var = -cc / jnp.sum(l2, axis=1)
    y = b + noise_var * jnp.sum(c * l1, axis=1) / cc
    log_const = l0[:, 0] + 0.5 * jnp.log(2 * jnp.pi * noise_var) + 0.5 * (b - y) ** 2 / noise_var
    return {"y": y, "noise_var": noise_var, "log_const": log_const}


# ----------------------------------------------------------------------------- traced problem
def _problem(model, hs, model_inputs, space, phi, data, varying=()):
    """``(EPProblem, LatentMap)`` at ``phi``: the prior read from a trace with ``phi``
    substituted, the likelihood's arrays from the recognition (in ``data[1]``), those of the
    ``varying`` Gaussian groups read at ``phi`` (`_gaussian_data`). ``space``:
    ``"weight"``, ``"function"``, or ``"diagonal"`` (function space with a diagonal ``A``, each site
    seeing one coordinate of the latent times a number, as a GP classifier's ``y_i f_i``:
    ``K = a a' * S0`` elementwise, without the two n^3 products and their gradients). Traceable."""
    arrays, ep = data
    args, kwargs = model_inputs(arrays)
    tr = sites.run(model, args, kwargs, hs, phi)
    parts = [gaussian_prior(n, tr[n]) for n in hs.latent]
    m0 = jnp.concatenate([p[0] for p in parts])
    S0 = jax.scipy.linalg.block_diag(*[p[1] for p in parts])
    A, b, groups = ep["A"], ep["b"], ep["groups"]
    if varying:
        groups = list(groups)
        for (index, name), (directions, c, b_rows) in zip(varying, ep["varying"]):
            data_at = _gaussian_data(model, hs, args, kwargs, phi, name, directions, c, b_rows)
            groups[index] = SiteGroup(groups[index].site, data_at, groups[index].size)
        groups = tuple(groups)
    if space == "diagonal":
        a = jnp.diagonal(A)
        AS0 = a[:, None] * S0
        K = AS0 * a[None, :]
        return EPProblem("function", None, 0.5 * (K + K.T), b + a * m0, groups), LatentMap(m0, None, S0, AS0)
    offset = b + A @ m0
    if space == "weight":
        L0 = jnp.linalg.cholesky(S0)
        return EPProblem("weight", A @ L0, None, offset, groups), LatentMap(m0, L0, None, None)
    AS0 = A @ S0
    K = AS0 @ A.T
    return EPProblem("function", None, 0.5 * (K + K.T), offset, groups), LatentMap(m0, None, S0, AS0)


def _finite(*xs):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in xs]))


def _sweep(problem, warm, ep, schedule):
    """EP's sweeps from the warm sites (or from zero sites where those give no valid Gaussian):
    a first run, then a second from the same start if the first did not converge (``ep["sweeps"]``:
    each run's damping and sweep count; no second run when its count is zero). ``schedule``
    ``"anderson"``: the first run is Anderson-accelerated undamped parallel sweeps
    (`inference.ep.anderson`; the default damping's), the second plain parallel ones.
    ``(state, converged)``."""
    tau_w, nu_w = warm
    mean_w, var_w, good = site_moments(problem, tau_w, nu_w)
    good = good & _finite(tau_w, nu_w, mean_w, var_w)
    # the fallback: zero sites, whose marginals are the prior's (no second `site_moments` to compile)
    zero = jnp.zeros_like(tau_w)
    prior_var = jnp.diag(problem.prior_cov) if problem.space == "function" else jnp.sum(problem.proj**2, axis=1)
    pick = lambda a, b: jnp.where(good, a, b)  # noqa: E731
    start = EPState(pick(tau_w, zero), pick(nu_w, zero), zero, pick(mean_w, zero), pick(var_w, prior_var))
    tol, sweeps = ep["tol"], ep["sweeps"]
    plain = "parallel" if schedule == "anderson" else schedule

    def run(k):
        st, _, _, change = _run(problem, start, sweeps[2 * k], tol, sweeps[2 * k + 1].astype(jnp.int32), plain)
        return st, (change <= tol) & _finite(st.tau, st.nu)

    if schedule == "anderson":
        st, _, change = anderson.run(problem, start, tol, sweeps[1].astype(jnp.int32))
        first = (st, (change <= tol) & _finite(st.tau, st.nu))
        return lax.cond(first[1] | (sweeps[3] <= 0), lambda: first, lambda: run(1))

    def step(c):  # one traced copy of the sweeps for both runs (half the compilation)
        k, _, _ = c
        return k + 1, *run(k)

    more = lambda c: (c[0] == 0) | ((c[0] == 1) & ~c[2] & (sweeps[3] > 0))  # noqa: E731 - no empty second run
    _, state, converged = lax.while_loop(more, step, (jnp.asarray(0, jnp.int32), start, jnp.asarray(False)))
    return state, converged


def evidence(model, hs, model_inputs, space, schedule, phi, warm, data, varying=()):
    """``(log Z_EP, ((tau, nu), ok))``: the engine function of `inference.hyper` (module docstring).

    Function space: the value at the converged sites, and a gradient through
    `gaussian_gradient_terms` (``tr(F dK(phi)) / 2 + alpha' d offset(phi)``, only the kernel and the
    offset differentiated), plus the tilted normalisers at the fixed cavities for the ``varying``
    Gaussian groups' data. Weight space: log Z_EP at the fixed sites differentiated as a whole
    (``d x d`` factorisations, cheap)."""
    sg = lax.stop_gradient
    ep = data[1]
    fixed, _ = _problem(model, hs, model_inputs, space, sg(phi), data, varying)
    state, converged = _sweep(fixed, jax.tree_util.tree_map(sg, warm), ep, schedule)
    tau, nu = sg(state.tau), sg(state.nu)
    problem, _ = _problem(model, hs, model_inputs, space, phi, data, varying)
    if problem.space == "function":
        value, ok_value = log_evidence(fixed, EPState(tau, nu, jnp.zeros_like(tau), state.mean, state.var))
        F, alpha = sg(gaussian_gradient_terms(fixed.prior_cov, tau, nu))
        surrogate = 0.5 * jnp.sum(F * problem.prior_cov) + jnp.dot(alpha, problem.offset)
        if varying:  # d log Z_EP / d data = d log Z_i / d data at the (stationary) cavities
            cm, cv, _ = cavity(sg(state.mean), sg(state.var), tau, nu)
            surrogate = surrogate + jnp.sum(tilted(problem, cm, cv)[0])
        log_z = sg(value) + ep["const"] + (surrogate - sg(surrogate))
        ok = converged & ok_value & jnp.isfinite(log_z) & _finite(F, alpha)
        return log_z, ((tau, nu), ok)
    mean, var, ok_moments = site_moments(problem, tau, nu)  # differentiable in phi at fixed sites
    value, ok_value = log_evidence(problem, EPState(tau, nu, jnp.zeros_like(tau), mean, var))
    log_z = value + ep["const"]
    ok = converged & ok_moments & ok_value & jnp.isfinite(log_z)
    return log_z, ((tau, nu), ok)


def draw(model, hs, model_inputs, space, phi, warm, key, num: int, data, varying=()):
    """``(x (num, d), log q (num,))``: draws of the flat latent (the latent sites in model
    order) from EP's Gaussian at ``phi`` with the converged sites ``warm``, and its density."""
    problem, latent_map = _problem(model, hs, model_inputs, space, phi, data, varying)
    tau, nu = warm
    mean, cov = to_latent(problem, latent_map, tau, nu)
    L = linalg.cholesky_jitter_traced(cov)
    d = mean.shape[0]
    eps = jax.random.normal(key, (num, d), mean.dtype)
    x = mean + eps @ L.T
    log_q = -0.5 * jnp.sum(eps**2, axis=1) - jnp.sum(jnp.log(jnp.diag(L))) - 0.5 * d * jnp.log(2 * jnp.pi)
    return x, log_q


# ----------------------------------------------------------------------------- the fit
def loosen(data, grad_norm: float):
    """``data`` with EP's sweep tolerance for a trial point of the search (`LOOSE_FACTOR`)."""
    arrays, ep = data
    tol = max(float(ep["tol"]), min(LOOSE_MAX, LOOSE_FACTOR * grad_norm))
    return arrays, {**ep, "tol": jnp.asarray(tol, ep["tol"].dtype)}


def start_and_probe(tag, model, args, kwargs, hs, dtype):
    """``(phi0, theta(phi0), theta(phi0 + PROBE_SHIFT))``: the search's start and the hyperparameters'
    values there and at a second point (where the recognition is checked), one kept program."""
    def build_init(rebuild):
        def init(data):
            a, kw = rebuild(data)
            phi0 = sites.initial_phi(sites.run(model, a, kw, hs, jnp.zeros(sites.size(hs), dtype)), hs).astype(dtype)
            theta = lambda phi: sites.constrained(sites.run(model, a, kw, hs, phi), hs)  # noqa: E731
            return phi0, theta(phi0), theta(phi0 + PROBE_SHIFT)

        return jax.jit(init)

    return compiled.call(tag, model, args, kwargs, (hs,), build_init)


def setup(model, args, kwargs, trace, *, schedule: str = "parallel", damping: float | None = None,
          tol: float = 1e-6, max_iter: int = 200, seed: int = 0) -> Setup:
    """The hyperparameter sites of ``model``, EP's recognition (checked, module docstring) and the
    compiled programs, kept per model structure; ``trace`` is the model's concrete trace."""
    hs = compiled.memo("hyper-sites", model, args, kwargs, lambda: sites.find(model, args, kwargs, trace))
    dtype = jnp.result_type(float)
    double = dtype == jnp.float64

    phi0, theta0, theta1 = start_and_probe("ep-hyper-init", model, args, kwargs, hs, dtype)
    rec0 = _recognise_at(model, args, kwargs, hs, theta0, seed)

    def varying_groups():  # a fact of what the model computes: checked once per model structure
        return _varying_groups(hs, rec0, _recognise_at(model, args, kwargs, hs, theta1, seed), double)

    varying = compiled.memo("ep-hyper-varying-groups", model, args, kwargs, varying_groups)
    space = rec0.problem.space
    A = np.asarray(rec0.A)
    diagonal = A.ndim == 2 and A.shape[0] == A.shape[1] and not np.any(A - np.diag(np.diagonal(A)))
    form = "diagonal" if space == "function" and diagonal else space
    rows = {name: r for name, r, _ in _site_rows(rec0)}
    lik = []
    for _, name in varying:
        directions = _directions(rec0, rows[name], form == "diagonal")
        c = np.asarray(rec0.A, float)[rows[name]] @ directions
        lik.append(tuple(jnp.asarray(x, dtype) for x in (directions, c, np.asarray(rec0.b, float)[rows[name]])))
    sweep_tol = _options.working_tol(SWEEP_TOL_FACTOR * tol, dtype)
    sweep_schedule = schedule
    if damping is None and schedule == "parallel":
        sweeps = (1.0, min(max_iter, UNDAMPED_SWEEPS), 0.5, max_iter)
        sweep_schedule = "anderson"  # the undamped first run accelerated (`_sweep`)
    else:  # a given damping throughout; the sequential schedule's default is 0.5 (as the driver's)
        sweeps = (0.5 if damping is None else damping, max_iter, 0.5 if damping is None else damping, 0)
    ep = {"A": jnp.asarray(rec0.A, dtype), "b": jnp.asarray(rec0.b, dtype), "groups": rec0.problem.groups,
          "const": jnp.asarray(rec0.const_log_lik, dtype), "tol": jnp.asarray(sweep_tol, dtype),
          "sweeps": jnp.asarray(sweeps, dtype), "varying": tuple(lik)}

    def build(rebuild):
        inputs = lambda d: rebuild(d[0])  # noqa: E731
        ev = lambda phi, warm, data: evidence(model, hs, rebuild, form, sweep_schedule, phi, warm, data, varying)  # noqa: E731
        dr = lambda phi, warm, key, num, data: draw(model, hs, rebuild, form, phi, warm, key, num, data, varying)  # noqa: E731
        return fit.programs(model, hs, inputs, ev, dr, laplace_evidence.latent_model(model, hs, None).unravel)

    progs, arrays = compiled.get("ep-hyper", model, args, kwargs, (hs, form, sweep_schedule, varying), build)
    n = rec0.problem.num_sites
    warm0 = (jnp.zeros(n, dtype), jnp.zeros(n, dtype))
    return Setup(hs, progs, (arrays, ep), jnp.asarray(phi0), warm0, space, dict(rec0.site_kinds), sweep_tol, varying)


def ep_hyper(model, args, kwargs, trace, hyper: str, *, schedule: str, damping: float | None, num_samples: int,
             max_iter: int, tol: float, seed: int):
    """The `Posterior` of ``inference.ep`` with ``hyper`` (see `inference.hyper`); ``trace`` is the
    model's concrete trace. With the default damping, a parallel search whose evidence is not
    finite at its start is run again with the sequential schedule, as the plain driver falls back
    (`inference.ep.driver`): a logistic regression with a prior scale ~ LogNormal(log 100, 0.05),
    n = 300, failed so in float32 (damped parallel EP diverges from the broad prior), where the
    sequential search finds float64's mode (99.25) and log evidence (-171.321)."""
    if damping is None and schedule == "parallel":
        try:
            return _ep_hyper(model, args, kwargs, trace, hyper, schedule, damping, num_samples, max_iter, tol, seed)
        except FloatingPointError:
            schedule = "sequential"
    return _ep_hyper(model, args, kwargs, trace, hyper, schedule, damping, num_samples, max_iter, tol, seed)


def _ep_hyper(model, args, kwargs, trace, hyper, schedule, damping, num_samples, max_iter, tol, seed):
    st = setup(model, args, kwargs, trace, schedule=schedule, damping=damping, tol=tol, max_iter=max_iter, seed=seed)
    return fit.run(model, args, kwargs, trace, st.hs, hyper, st.progs, st.data, st.warm0, st.phi0,
                   engine="ep", num_samples=num_samples, seed=seed, tol=1e-2 * tol, max_iter=max_iter, loosen=loosen,
                   diagnostics={"schedule": schedule, "damping": damping, "tol": st.sweep_tol, "space": st.space,
                                "site_kinds": st.site_kinds})
