"""``inference.ep(spike_and_slab_regression, ..., hyper="map" | "integrate")``: the prior's
inclusion probability and slab scale learnt by EP's evidence (type-II maximum likelihood, how
the thesis sets ``p0`` and ``v_s``: Hernandez-Lobato 2009, ch. 3-4) or integrated over, through
the engine-agnostic search and integration (`inference.hyper.fit`).

The hyperparameters are the continuous sites only the indicators or the weights depend on
(`inference.spikeslab.structure.prior_hyperparameters`: ``p_incl`` and ``slab_scale`` given as
priors). The likelihood must be Gaussian with a known noise scale: the Gamma noise precision's
EP runs on a grid of precisions (`inference.spikeslab.precision_grid`) and the probit EPs have
their own loops; both are refused with ``hyper=``, naming the reason.

``evidence``: EP's sweeps (`inference.spikeslab.ep_regression`; ``schedule`` as asked, parallel by
default) from the warm sites at ``stop_gradient(phi)``, then, where they did not converge,
sequential sweeps with the damping halved each time (at most `MAX_DAMPING_HALVINGS` times, as the
engine falls back), then EP's log evidence at ``phi``
with the converged sites held fixed and Q's marginals recomputed from them, plus the adjoint
term for the sites' own dependence on ``phi``: clipped and skipped sites make ``log Z_EP`` not
stationary in the sites, so ``lam = (I - dG/ds)^-T d log Z / ds`` (GMRES, ``G`` one damped
parallel update, whose fixed point is EP's) and the gradient gains ``lam' dG/dphi``.
``draw``: the spike-and-slab family of the tilted marginals at ``phi`` (as the engine draws).

Example:
    >>> import numpy as np, numpyro.distributions as dist, inference, probmodels
    >>> rng = np.random.default_rng(0); X = rng.normal(size=(40, 6)); y = X[:, :2] @ [2.0, -1.5] + 0.5 * rng.normal(size=40)
    >>> post = inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=0.5, p_incl=dist.Beta(1.0, 1.0),
    ...                     hyper="map", num_samples=100, progress=False)
    >>> round(post.diagnostics["hyper"]["values"]["p_incl"], 2), np.round(post.diagnostics["inclusion_probability"], 1).tolist()
    (0.41, [1.0, 1.0, 0.1, 0.0, 0.1, 0.1])
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference import _options, compiled
from inference.hyper import fit, sites
from inference.hyper.ep_fit import start_and_probe
from inference.spikeslab import ep_regression, family
from inference.spikeslab.structure import extract, prior_hyperparameters, spike_slab_sites
from inference.trace_reading import unwrap

DAMPING = 0.5  # the spike-and-slab EP's default
MAX_DAMPING_HALVINGS = 3  # the engine's fallback: damping / 2, / 4, / 8
ADJOINT_DAMPING = 0.5  # of the parallel update whose fixed-point derivative the adjoint solves for
# the sweeps run to tol times this at each evaluation: log Z is first order in the sites' error
# (not stationary in them where sites are clipped), as for the Bayes machine (`bm_fit`)
SWEEP_TOL_FACTOR = 1e-3


class Setup(NamedTuple):
    hs: sites.HyperSites
    progs: fit.Programs
    point: object  # jitted (phi, data) -> (incl, w mean, w var, converged): EP from its start at phi
    data: tuple
    phi0: jax.Array
    warm0: tuple  # (tau, nu)
    sweep_tol: float


def _indicator_site(trace, w_site):
    d = np.shape(trace[w_site]["value"])[0]
    for name, site in trace.items():
        if site["type"] == "sample" and not site["is_observed"] and name != w_site \
                and np.shape(site["value"]) == (d,) and site["fn"].support.is_discrete:
            return name
    raise ValueError(f"site {w_site!r}: no indicator site of shape ({d},) found for it")


def _hyper_sites(model, args, kwargs, trace) -> sites.HyperSites:
    hyper = prior_hyperparameters(model, args, kwargs, trace)
    if not hyper:
        raise ValueError("hyper=: the spike-and-slab model has no hyperparameter sites; give p_incl or slab_scale "
                         "a prior (e.g. p_incl=dist.Beta(1.0, 9.0), slab_scale=dist.HalfNormal(2.0)), or use "
                         "hyper=None")
    for name in hyper:
        if type(unwrap(trace[name]["fn"])).__name__ == "ImproperUniform":
            raise ValueError(f"hyperparameter site {name!r} has an improper prior: hyper= needs a proper prior")
    (w_site,) = spike_slab_sites(trace)
    z_site = _indicator_site(trace, w_site)
    others = [n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]
              and n not in (*hyper, z_site, w_site)]
    if others:  # refused from the trace, before anything is compiled
        raise ValueError(f"hyper=: with an unknown noise precision (site {others[0]!r}) spike-and-slab EP runs on a "
                         f"grid of precisions and does not learn {hyper}; give noise_scale (a known noise), or give "
                         "the hyperparameters as numbers")
    observed = [s for s in trace.values() if s["type"] == "sample" and s["is_observed"]]
    if any(type(unwrap(s["fn"])).__name__.startswith("Bernoulli") for s in observed):
        raise ValueError(f"hyper=: the spike-and-slab probit EP does not learn its hyperparameters {hyper}; give them "
                         "as numbers, or use the spike-and-slab regression with a known noise_scale")
    d = np.shape(trace[w_site]["value"])[0]
    return sites.HyperSites(tuple(hyper), (z_site, w_site), sites.unconstrained_shapes(trace, hyper), ((d,), (d,)))


def _problem_at(model, args, kwargs, hs, theta):
    """The engine's `Problem` of ``model`` with the hyperparameters observed at ``theta``."""
    from inference._model import trace_model

    kw = {**kwargs, sites.THETA: {n: np.asarray(v) for n, v in theta.items()}}
    fixed = sites.fixed(model)
    trace = trace_model(fixed, args, kw)
    return extract(fixed, args, kw, type(trace)((n, s) for n, s in trace.items() if n not in hs.hyper))


def _prior_at(model, hs, model_inputs, phi, arrays):
    """``(logit p, slab variance)`` (d,) of the spike-and-slab prior at ``phi`` (traceable)."""
    args, kwargs = model_inputs(arrays)
    tr = sites.run(model, args, kwargs, hs, phi)
    z_site, w_site = hs.latent
    d = hs.latent_shapes[1][0]
    logit_p = jnp.broadcast_to(unwrap(tr[z_site]["fn"]).logits, (d,))
    slab_var = jnp.broadcast_to(unwrap(tr[w_site]["fn"]).scale, (d,)) ** 2
    return logit_p, slab_var


def _ep_data(c, logit_p, slab_var):
    return ep_regression.EPData(c["X"], c["y"], jnp.ones((), c["X"].dtype), slab_var, logit_p)


def _state(data, tau, nu):
    m, v, _ = ep_regression._global(data, tau, nu)
    zero = jnp.zeros((), jnp.int32)
    return ep_regression.EPState(tau, nu, m, v, jax.nn.sigmoid(data.logit_p), zero,
                                 jnp.asarray(jnp.inf, tau.dtype), zero, zero)


def _sweeps(data, sites0, c, schedule):
    """EP's sweeps from ``sites0``: the ``schedule`` asked for, then (not converged) sequential
    sweeps with the damping halved each time, as the engine falls back."""
    def converged(st):
        return jnp.isfinite(st.max_change) & (st.max_change <= c["tol"])

    def attempt(carry):
        k, st, damping, _ = carry
        st = ep_regression.resume(st._replace(max_change=jnp.asarray(jnp.inf, st.tau.dtype)), data, damping,
                                  c["tol"], c["max_iter"], sequential=True)
        return k + 1, st, 0.5 * damping, converged(st)

    st = _state(data, *sites0)
    if schedule == "parallel":
        st = ep_regression.resume(st, data, c["damping"], c["tol"], c["max_iter"], sequential=False)
    done = converged(st) if schedule == "parallel" else jnp.asarray(False)
    start = (jnp.asarray(0, jnp.int32), st, c["damping"], done)
    _, st, _, done = lax.while_loop(lambda a: (a[0] <= MAX_DAMPING_HALVINGS) & ~a[3], attempt, start)
    return st, done


def _log_z(data, tau, nu, c):
    """EP's log evidence with the sites fixed and Q's marginals recomputed from them."""
    return ep_regression.finalize(_state(data, tau, nu), data)[3] + c["log_adjust"]


def _update_map(data, s):
    """One damped parallel EP update of the sites ``s = (tau, nu)``; its fixed point is EP's."""
    new = ep_regression.update(_state(data, *s), data, ADJOINT_DAMPING)
    return new.tau, new.nu


def evidence(model, hs, model_inputs, schedule, phi, warm, data):
    """``(log Z_EP, (converged sites, ok))`` (module docstring)."""
    sg = lax.stop_gradient
    arrays, c = data
    fixed_data = _ep_data(c, *_prior_at(model, hs, model_inputs, sg(phi), arrays))
    st, done = _sweeps(fixed_data, jax.tree_util.tree_map(sg, warm), c, schedule)
    s = (sg(st.tau), sg(st.nu))
    live = _ep_data(c, *_prior_at(model, hs, model_inputs, phi, arrays))
    log_z = _log_z(live, *s, c)
    g_sites = jax.grad(lambda s_: _log_z(fixed_data, *s_, c))(s)
    _, vjp = jax.vjp(lambda s_: _update_map(fixed_data, s_), s)
    lam, _ = jax.scipy.sparse.linalg.gmres(lambda l: jax.tree_util.tree_map(jnp.subtract, l, vjp(l)[0]), g_sites,
                                           tol=c["tol"], restart=min(40, 2 * st.tau.shape[0]), maxiter=20)
    residual = jax.tree_util.tree_map(lambda a, b, g: jnp.max(jnp.abs(a - b - g)) / (1.0 + jnp.max(jnp.abs(g))),
                                      lam, vjp(lam)[0], g_sites)
    moved = _update_map(live, s)
    correction = sum(jnp.vdot(sg(l_), m - sg(m)) for l_, m in zip(lam, moved))  # 0; its gradient lam' dG/dphi
    finite = jnp.isfinite(log_z) & jnp.all(jnp.isfinite(lam[0])) & jnp.all(jnp.isfinite(lam[1]))
    ok = done & finite & (jnp.maximum(*residual) < jnp.sqrt(c["tol"]))
    return log_z + correction, (s, ok)


def draw(model, hs, model_inputs, phi, warm, key, num: int, data):
    """``(x (num, 2 d), log q (num,))``: ``(z, w)`` from the tilted marginals' family at ``phi``."""
    arrays, c = data
    ep_data = _ep_data(c, *_prior_at(model, hs, model_inputs, phi, arrays))
    incl, a, b, _ = ep_regression.finalize(_state(ep_data, *warm), ep_data)
    fam = family.Family(incl, a, b)
    z, w = family.sample(key, fam, num)
    return jnp.concatenate([z.astype(w.dtype), w], axis=1), family.log_density(fam, z, w)


def _unravel(hs):
    d = hs.latent_shapes[1][0]
    return lambda x: {hs.latent[0]: x[:d], hs.latent[1]: x[d:]}


def setup(model, args, kwargs, trace, *, schedule: str, damping: float | None, tol: float, max_iter: int) -> Setup:
    """The sites, the recognition (checked at a second point) and the programs, kept per model
    structure; ``trace`` is the model's concrete trace."""
    hs = compiled.memo("ss-hyper-sites", model, args, kwargs, lambda: _hyper_sites(model, args, kwargs, trace))
    dtype = jnp.result_type(float)
    phi0, theta0, theta1 = start_and_probe("ss-hyper-init", model, args, kwargs, hs, dtype)
    prob = _problem_at(model, args, kwargs, hs, theta0)
    if prob.likelihood != "gaussian" or prob.noise_prior is not None:  # refused by _hyper_sites already
        raise ValueError(f"hyper=: not offered for this spike-and-slab model ({prob.likelihood} likelihood)")
    ep_regression.check_precision(*np.shape(prob.X), dtype)

    def likelihood_fixed():  # a fact of what the model computes: checked once per model structure
        other = _problem_at(model, args, kwargs, hs, theta1)
        if not (np.array_equal(prob.X, other.X) and np.array_equal(prob.y, other.y)
                and np.array_equal(prob.noise_scale, other.noise_scale)):
            raise ValueError(f"hyper=: the likelihood depends on the hyperparameters {list(hs.hyper)}; spike-and-slab "
                             "EP's hyper= learns the prior's inclusion probability and slab scale only")
        return True

    compiled.memo("ss-hyper-likelihood-fixed", model, args, kwargs, likelihood_fixed)
    sweep_tol = _options.working_tol(SWEEP_TOL_FACTOR * tol, dtype)
    f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    c = {"X": f(prob.X), "y": f(prob.y), "log_adjust": f(prob.log_scale_adjust), "tol": f(sweep_tol),
         "damping": f(DAMPING if damping is None else damping), "max_iter": jnp.asarray(max_iter)}

    def build(rebuild):
        inputs = lambda d: rebuild(d[0])  # noqa: E731
        ev = lambda phi, warm, data: evidence(model, hs, rebuild, schedule, phi, warm, data)  # noqa: E731
        dr = lambda phi, warm, key, num, data: draw(model, hs, rebuild, phi, warm, key, num, data)  # noqa: E731

        def point(phi, data):  # EP from its own start at phi: the inclusion probabilities there
            arrays, c_ = data
            ep_data = _ep_data(c_, *_prior_at(model, hs, rebuild, phi, arrays))
            start = ep_regression.init(ep_data)
            st, done = _sweeps(ep_data, (start.tau, start.nu), c_, schedule)
            incl, _, _, _ = ep_regression.finalize(st, ep_data)
            return incl, st.m, st.v, done

        return fit.programs(model, hs, inputs, ev, dr, _unravel(hs)), jax.jit(point)

    (progs, point), arrays = compiled.get("ss-hyper", model, args, kwargs, (hs, schedule), build)
    # EP's start at phi0 (`ep_regression.init`: the Gaussian with the prior's variance p v_s)
    tau0 = 1.0 / (np.asarray(prob.p_incl, float) * np.asarray(prob.slab_var, float))
    return Setup(hs, progs, point, (arrays, c), jnp.asarray(phi0), (f(tau0), f(np.zeros_like(tau0))), sweep_tol)


def ss_hyper(model, args, kwargs, trace, hyper: str, *, schedule: str, damping: float | None, num_samples: int,
             max_iter: int, tol: float, seed: int):
    """The `Posterior` of ``inference.ep`` on a spike-and-slab regression with ``hyper``: the
    latent ``(z, w)`` and the hyperparameters (`inference.hyper.fit`), the indicators as integers,
    and the inclusion probabilities (at the mode, or mixed over the design points by their
    weights) in ``diagnostics`` and ``approximation`` as the engine reports them."""
    st = setup(model, args, kwargs, trace, schedule=schedule, damping=damping, tol=tol, max_iter=max_iter)
    post = fit.run(model, args, kwargs, trace, st.hs, hyper, st.progs, st.data, st.warm0, st.phi0,
                   engine="ep", num_samples=num_samples, seed=seed, tol=1e-2 * tol, max_iter=max_iter,
                   diagnostics={"method": "gaussian-likelihood", "schedule": schedule,
                                "damping": DAMPING if damping is None else damping, "tol": st.sweep_tol})
    z_site = st.hs.latent[0]
    post.samples[z_site] = np.rint(post.samples[z_site]).astype(np.int32)
    incl, mean, second, ok = 0.0, 0.0, 0.0, True  # the mixture over the points (one point for "map")
    for phi, weight in zip(post.approximation["hyper_points"], post.approximation["hyper_weights"]):
        i, m, v, done = (np.asarray(x, np.float64) for x in st.point(jnp.asarray(phi), st.data))
        incl, mean, second, ok = incl + weight * i, mean + weight * m, second + weight * (v + m**2), ok and bool(done)
    post.diagnostics["inclusion_probability"] = incl
    post.diagnostics["converged"] = bool(post.diagnostics["converged"] and ok)
    post.approximation.update({"inclusion_probability": incl, "w_mean": mean, "w_var": second - mean**2})
    return post
