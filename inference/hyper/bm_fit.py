"""``inference.ep(bayes_machine, ..., hyper="map" | "integrate")``: the Bayes machine's EP evidence
plugged into the engine-agnostic search and integration (`inference.hyper.fit`); the thesis
chooses the kernel width by this evidence (Hernandez-Lobato 2009, ch. 6).

The noise rate ``eps`` (a Beta site) stays with EP, which integrates it as always; the
hyperparameters are the other non-Gaussian latent sites (a kernel's lengthscale or variance given
as a prior). Recognition (`inference.bayes_machine_model.bayes_machine_parts`: labels, noise
prior, fixed noise) runs on the model with the hyperparameters observed at the search's start and
again at a second point, once per model structure: labels or a noise prior that change with the
hyperparameters are refused, naming the sites.

``evidence``: the Bayes machine's EP sweeps (`inference.ep.bayes_machine.run`, the clipped
site precisions of its default) from the warm sites on ``stop_gradient(phi)``, with the damping
halved and the sweeps resumed when they did not converge (at most twice, as `bayes_machine.fit`
does), then EP's log evidence at ``phi`` with the converged sites held fixed and the marginals
recomputed from them: its gradient in ``phi`` is GPML's. ``draw``: ``q(f) q(eps)`` at ``phi``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference import _model, _options, compiled, linalg, random_draws
from inference.bayes_machine_model import bayes_machine_parts
from inference.distributions import NoisyStep
from inference.ep import bayes_machine as bm
from inference.hyper import fit, laplace_evidence, sites
from inference.hyper.ep_fit import start_and_probe
from inference.trace_reading import gaussian_prior, unwrap

DEFAULT_DAMPING = 0.5  # the Bayes machine's EP default
CLIP = True  # the Bayes machine's default (negative_sites='clip'): the fixed point of bayes_machine.fit
ADJOINT_DAMPING = 0.5  # of the map whose fixed-point derivative the adjoint iteration solves for
# the sweeps (and the adjoint) run to tol times this at each evaluation: at tol itself, log Z
# (not stationary in the sites, so first order in their error) was noisy at ~1e-6, above the
# search's stopping gain (tol / 100), and BFGS stalled just short of the mode (11 of 44 fits of
# benchmarks/hyper_bm.py reported converged=False, 0.003 from the mode in log width)
SWEEP_TOL_FACTOR = 1e-3


class Setup(NamedTuple):
    hs: sites.HyperSites
    progs: fit.Programs
    data: tuple  # (the model's arrays, the recognised labels, noise prior and sweep settings)
    phi0: jax.Array
    warm0: tuple  # (tau, nu, site_a, site_b)
    learn: bool
    sweep_tol: float


def _parts_at(model, args, kwargs, hyper, theta, seed):
    """The Bayes machine's parts of ``model`` with the hyperparameters observed at ``theta``."""
    kw = {**kwargs, sites.THETA: {n: np.asarray(v) for n, v in theta.items()}}
    trace = _model.trace_model(sites.fixed(model), args, kw, seed=seed)
    return bayes_machine_parts(type(trace)((n, s) for n, s in trace.items() if n not in hyper))


def _hyper_sites(model, args, kwargs, trace):
    """``(HyperSites, eps site or None)``: `sites.find`'s split with the Beta noise rate of the
    NoisyStep likelihood moved from the hyperparameters to the latent side."""
    full = sites.find(model, args, kwargs, trace)
    steps = [unwrap(s["fn"]) for s in trace.values() if s["type"] == "sample" and s["is_observed"]
             and isinstance(unwrap(s["fn"]), NoisyStep)]
    eps = np.ravel(np.asarray(steps[0].eps))[0] if steps else None  # as bayes_machine_parts reads it
    eps_site = next((n for n in full.hyper if eps is not None and np.ndim(trace[n]["value"]) == 0
                     and float(trace[n]["value"]) == float(eps)), None)
    hyper = tuple(n for n in full.hyper if n != eps_site)
    if not hyper:
        raise ValueError("hyper=: the Bayes machine has no hyperparameter sites besides its noise rate, which EP "
                         "integrates; give a kernel parameter a prior (e.g. RBF(lengthscale=dist.LogNormal(0, 1))), "
                         "or use hyper=None")
    shapes = dict(zip(full.hyper, full.hyper_shapes))
    latent = tuple(n for n in trace if n in full.latent or n == eps_site)
    latent_shapes = tuple(tuple(np.shape(trace[n]["value"])) for n in latent)
    return sites.HyperSites(hyper, latent, tuple(shapes[n] for n in hyper), latent_shapes), eps_site


def _prior(model, hs, model_inputs, f_site, phi, arrays):
    """``(m0, L)``: the GP prior mean of ``f`` at ``phi`` and the Cholesky factor of its covariance
    plus the smallest jitter that factorises it (the jitter held constant in ``phi``)."""
    args, kwargs = model_inputs(arrays)
    m0, K = gaussian_prior(f_site, sites.run(model, args, kwargs, hs, phi)[f_site])
    K = 0.5 * (K + K.T)
    jitter, _ = linalg.jitter_search_traced(lax.stop_gradient(K))
    L = jnp.linalg.cholesky(K + lax.stop_gradient(jitter) * jnp.eye(K.shape[0], dtype=K.dtype))
    return m0, L


def _consts(L, m0, c):
    return bm._Consts(L, L @ L.T, c["t"], m0, c["a0"], c["b0"], c["fixed_eps"])


def evidence(model, hs, model_inputs, f_site, learn, schedule, phi, warm, data):
    """``(log Z_EP, (warm sites, ok))`` (module docstring)."""
    sg = lax.stop_gradient
    arrays, c = data
    m0_s, L_s = _prior(model, hs, model_inputs, f_site, sg(phi), arrays)

    def attempt(carry):
        k, sites_k, damping, _ = carry
        state, _, _, _ = bm.run(L_s, c["t"], m0_s, c["a0"], c["b0"], c["fixed_eps"], damping, c["tol"],
                                c["max_iter"], sites_k, schedule=schedule, learn=learn, clip=CLIP)
        converged = ~state.failed & (state.max_change < c["tol"])
        return k + 1, (state.tau, state.nu, state.site_a, state.site_b), 0.5 * damping, converged

    def more(carry):
        k, _, _, converged = carry
        return (k == 0) | ((k <= bm.MAX_DAMPING_RAISES) & ~converged)

    start = (jnp.asarray(0, jnp.int32), jax.tree_util.tree_map(sg, warm), c["damping"], jnp.asarray(False))
    _, new_sites, _, converged = lax.while_loop(more, attempt, start)
    fixed_sites = tuple(sg(x) for x in new_sites)
    log_z, ok_value = _log_z(model, hs, model_inputs, f_site, learn, phi, fixed_sites, data)
    # the sites' own dependence on phi (implicit differentiation at the fixed point): the clipped
    # sites and the Beta's mean-and-variance matching make log Z_EP not stationary in the sites
    g_sites = jax.grad(lambda s: _log_z(model, hs, model_inputs, f_site, learn, sg(phi), s, data)[0])(fixed_sites)
    step = lambda s, p: _damped_map(model, hs, model_inputs, f_site, learn, p, s, data)  # noqa: E731
    _, vjp = jax.vjp(lambda s: step(s, sg(phi)), fixed_sites)

    def adjoint(carry):
        k, lam, _ = carry
        new = jax.tree_util.tree_map(jnp.add, g_sites, vjp(lam)[0])
        change = jnp.max(jnp.stack([jnp.max(jnp.abs(n - o) / (1.0 + jnp.abs(n))) for n, o in zip(new, lam)]))
        return k + 1, new, change

    # lam = g_sites (I - dG/ds)^-1 by fixed-point iteration (G contracts at EP's converged fixed point)
    lam_start = (jnp.asarray(0, jnp.int32), g_sites, jnp.asarray(jnp.inf, log_z.dtype))
    _, lam, change = lax.while_loop(lambda a: (a[0] < c["max_iter"]) & (a[2] >= c["tol"]), adjoint, lam_start)
    moved = step(fixed_sites, phi)
    correction = sum(jnp.vdot(sg(l), m - sg(m)) for l, m in zip(lam, moved))  # 0, gradient lam' dG/dphi
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in lam]))
    ok = converged & ok_value & (change < c["tol"]) & finite
    return log_z + correction, (fixed_sites, ok)


def _at(model, hs, model_inputs, f_site, learn, phi, sites4, data):
    """``(consts, mean, var, a, b, ok)``: the prior at ``phi`` and the marginals of the sites."""
    arrays, c = data
    tau, nu, sa, sb = sites4
    m0, L = _prior(model, hs, model_inputs, f_site, phi, arrays)
    consts = _consts(L, m0, c)
    mean, var, ok = bm._marginals(L, consts.K, tau, nu)
    a, b = (c["a0"] + jnp.sum(sa), c["b0"] + jnp.sum(sb)) if learn else (c["a0"], c["b0"])
    return consts, mean, var, a, b, ok


def _log_z(model, hs, model_inputs, f_site, learn, phi, sites4, data):
    """``(log Z_EP, ok)`` at ``phi`` with the sites fixed and the marginals recomputed from them."""
    consts, mean, var, a, b, ok_marginals = _at(model, hs, model_inputs, f_site, learn, phi, sites4, data)
    tau, nu, sa, sb = sites4
    zero = jnp.zeros((), jnp.int32)
    state = bm.BMState(tau, nu, sa, sb, mean, var, a, b, zero, jnp.zeros((), mean.dtype), zero, zero,
                       jnp.asarray(False))
    _, _, chol_B = bm._posterior(consts.L, tau, nu)
    log_z, num_bad = bm.log_evidence(state, chol_B, consts, learn)
    return log_z, ok_marginals & (num_bad == 0) & jnp.isfinite(log_z)


def _damped_map(model, hs, model_inputs, f_site, learn, phi, sites4, data):
    """One damped parallel EP update of the sites at ``phi``; its fixed point is EP's (any damping)."""
    consts, mean, var, a, b, _ = _at(model, hs, model_inputs, f_site, learn, phi, sites4, data)
    tau, nu, sa, sb = sites4
    prop, ok, _ = bm._site_proposals(mean, var, tau, nu, sa, sb, a, b, consts.t, consts.offset, consts.fixed_eps,
                                     learn, CLIP)
    d = ADJOINT_DAMPING
    new = tuple(jnp.where(ok, d * p + (1.0 - d) * o, o) for p, o in zip(prop, sites4))
    return new if learn else (new[0], new[1], sa, sb)


def draw(model, hs, model_inputs, f_site, eps_site, learn, phi, warm, key, num: int, data):
    """``(x (num, d), log q (num,))``: draws of ``(f, eps)`` (in the latent sites' order) from
    ``q(f) q(eps)`` at ``phi`` with the converged sites ``warm``, and their density."""
    arrays, c = data
    tau, nu, sa, sb = warm
    m0, L = _prior(model, hs, model_inputs, f_site, phi, arrays)
    mean, cov, _ = bm._posterior(L, tau, nu)
    C = linalg.cholesky_jitter_traced(0.5 * (cov + cov.T))
    k_f, k_e = jax.random.split(key)
    n = mean.shape[0]
    z = jax.random.normal(k_f, (num, n), mean.dtype)
    values = {f_site: m0 + mean + z @ C.T}
    log_q = -0.5 * jnp.sum(z * z, axis=1) - jnp.sum(jnp.log(jnp.diag(C))) - 0.5 * n * jnp.log(2 * jnp.pi)
    if learn:
        a, b = c["a0"] + jnp.sum(sa), c["b0"] + jnp.sum(sb)
        tiny = jnp.finfo(mean.dtype).tiny
        eps = jnp.clip(random_draws.beta(k_e, a, b, (num,), mean.dtype), tiny, 1.0 - jnp.finfo(mean.dtype).epsneg)
        values[eps_site] = eps
        log_q = log_q + jax.scipy.stats.beta.logpdf(eps, a, b)
    x = jnp.concatenate([values[name].reshape(num, -1) for name in hs.latent], axis=1)
    return x, log_q


def setup(model, args, kwargs, trace, *, schedule: str, damping: float | None, tol: float, max_iter: int,
          seed: int) -> Setup:
    """The sites, the recognition (checked at a second point) and the compiled programs, kept
    per model structure; ``trace`` is the model's concrete trace."""
    hs, eps_site = compiled.memo("bm-hyper-sites", model, args, kwargs, lambda: _hyper_sites(model, args, kwargs, trace))
    dtype = jnp.result_type(float)

    phi0, theta0, theta1 = start_and_probe("bm-hyper-init", model, args, kwargs, hs, dtype)
    parts = _parts_at(model, args, kwargs, hs.hyper, theta0, seed)

    def likelihood_fixed():  # a fact of what the model computes: checked once per model structure
        other = _parts_at(model, args, kwargs, hs.hyper, theta1, seed)
        if not (np.array_equal(parts.t, other.t) and parts.noise_prior == other.noise_prior
                and parts.fixed_eps == other.fixed_eps and parts.eps_site == other.eps_site):
            raise ValueError(f"hyper=: the Bayes machine's labels or noise rate depend on the hyperparameters "
                             f"{list(hs.hyper)}; hyper= learns the kernel's hyperparameters only")
        return True

    compiled.memo("bm-hyper-likelihood-fixed", model, args, kwargs, likelihood_fixed)
    learn = parts.learn_noise
    a0, b0 = parts.noise_prior or (1.0, 1.0)
    sweep_tol = _options.working_tol(SWEEP_TOL_FACTOR * tol, dtype)
    f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    c = {"t": f(parts.t), "a0": f(a0), "b0": f(b0), "fixed_eps": f(parts.fixed_eps), "tol": f(sweep_tol),
         "damping": f(DEFAULT_DAMPING if damping is None else damping), "max_iter": jnp.asarray(max_iter)}

    def build(rebuild):
        inputs = lambda d: rebuild(d[0])  # noqa: E731
        ev = lambda phi, warm, data: evidence(model, hs, rebuild, parts.latent, learn, schedule,  # noqa: E731
                                              phi, warm, data)
        dr = lambda phi, warm, key, num, data: draw(model, hs, rebuild, parts.latent, eps_site, learn,  # noqa: E731
                                                    phi, warm, key, num, data)
        return fit.programs(model, hs, inputs, ev, dr, laplace_evidence.latent_model(model, hs, None).unravel)

    progs, arrays = compiled.get("bm-hyper", model, args, kwargs, (hs, schedule, learn), build)
    n = len(parts.t)
    zeros = jnp.zeros(n, dtype)
    return Setup(hs, progs, (arrays, c), jnp.asarray(phi0), (zeros, zeros, zeros, zeros), learn, sweep_tol)


def bm_hyper(model, args, kwargs, trace, hyper: str, *, schedule: str, damping: float | None, num_samples: int,
             max_iter: int, tol: float, seed: int):
    """The `Posterior` of ``inference.ep`` on a Bayes machine with ``hyper`` (`inference.hyper`)."""
    st = setup(model, args, kwargs, trace, schedule=schedule, damping=damping, tol=tol, max_iter=max_iter, seed=seed)
    return fit.run(model, args, kwargs, trace, st.hs, hyper, st.progs, st.data, st.warm0, st.phi0,
                   engine="ep", num_samples=num_samples, seed=seed, tol=1e-2 * tol, max_iter=max_iter,
                   diagnostics={"schedule": schedule, "damping": DEFAULT_DAMPING if damping is None else damping,
                                "tol": st.sweep_tol, "algorithm": "bayes-machine-ep", "learn_noise": st.learn})
