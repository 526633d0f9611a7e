"""One EP sweep (``update``) and the loop that repeats it (``run``), as pure jittable functions.

Parallel schedule: every site's cavity and tilted moments from the current global Gaussian at
once, a damped step of all site parameters, then the sites' marginals recomputed
(:func:`~inference.ep.gaussian.site_moments`: in function space without forming the global
covariance); if the new global Gaussian is not valid the step is halved (up to 8 times) before
giving up on the sweep. Sequential schedule: the global Gaussian rebuilt from the sites, sites
one at a time with rank-one updates of it, then the marginals recomputed fresh from the sites
(against round-off drift). In both, a site whose cavity variance is
not positive, or whose tilted moments are not finite, is skipped and counted.

``damping`` is the fraction of the step taken (1 = undamped): ``new = old + damping (target -
old)``. ``damping``, ``tol`` and the iteration limit are traced, so changing them never
recompiles; the schedule and the problem's structure are static.

Example:
    >>> import jax.numpy as jnp
    >>> from inference.ep.problem import EPProblem, SiteGroup
    >>> p = EPProblem("function", None, jnp.eye(1), jnp.zeros(1), (SiteGroup("probit", {"s": jnp.ones(1)}),))
    >>> state, it, skipped, change = run(p, init(p), 1.0, 1e-10, 50)
    >>> int(it) <= 3, int(skipped)
    (True, 0)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from inference.ep.gaussian import from_sites, marginals, site_moments
from inference.ep.problem import tilted, tilted_site
from inference.ep.state import EPInfo, EPState

MAX_HALVINGS = 8
TRACE_COUNT = {"run": 0}  # incremented each time `run` is traced (tests count compilations)


def initial_sites(problem):
    """Each group's starting sites (`SiteGroup.initial`): zero, except exact likelihoods (Gaussian),
    which start at their final values."""
    taus, nus, start = [], [], 0
    for g in problem.groups:
        tau, nu = g.initial(problem.offset[start:start + g.size], problem.offset.dtype)
        taus.append(tau)
        nus.append(nu)
        start += g.size
    return jnp.concatenate(taus), jnp.concatenate(nus)


def init(problem) -> EPState:
    tau, nu = initial_sites(problem)
    mean, var, _ = site_moments(problem, tau, nu)
    return EPState(tau, nu, jnp.zeros_like(tau), mean, var)


def cavity(m, v, tau, nu):
    """Cavity (mean, var, ok) of sites with marginals ``N(m, v)`` and site parameters tau, nu."""
    prec = 1.0 / v - tau
    ok = (prec > 0) & jnp.isfinite(prec) & (v > 0)
    cv = jnp.where(ok, 1.0 / jnp.where(ok, prec, 1.0), 1.0)
    cm = jnp.where(ok, cv * (m / v - nu), 0.0)
    return cm, cv, ok


def site_log_scale(log_z, cm, cv, tau, nu):
    """``log Z_i - log int N(z | cm, cv) exp(-tau z^2 / 2 + nu z) dz``."""
    log_gauss = (-0.5 * jnp.log1p(tau * cv) - 0.5 * cm * cm / cv
                 + 0.5 * (cm / cv + nu) ** 2 / (1.0 / cv + tau))
    return log_z - log_gauss


def _targets(log_z, mt, vt, cm, cv, ok, tau, nu):
    tau_t = 1.0 / vt - 1.0 / cv
    nu_t = mt / vt - cm / cv
    ok = ok & (vt > 0) & jnp.isfinite(log_z) & jnp.isfinite(tau_t) & jnp.isfinite(nu_t)
    return jnp.where(ok, tau_t, tau), jnp.where(ok, nu_t, nu), ok


ROUNDOFF = 10.0  # round-off allowance of a site change, in units of eps times its amplification


def roundoff(v, mt, vt, cm, cv):
    """What round-off alone can move a site by, in `site_change`'s units: ``ROUNDOFF`` machine epsilons
    times the amplification of its update, ``tau = 1/vt - 1/cv`` and ``nu = mt/vt - cm/cv`` (a
    difference of terms of size ``1/vt + 1/cv`` and ``|mt|/vt + |cm|/cv``), as `site_change` scales it
    (by ``v`` and ``sqrt(v)``). ~2 eps for a log-concave site; a site of a heavy-tailed likelihood
    far from its cavity (a Student-t outlier, negative precision) reaches ~50 eps in its mean,
    which kept float32 EP from reaching tol (largest change 1.2e-5 to 2.6e-5 after 400 sweeps,
    5.5 eps times its amplification at most, on the float64 answer). Zero at a skipped site.

    Example (float32; arguments ``v, mt, vt, cm, cv``):
        >>> import jax.numpy as jnp
        >>> f32, eps = jnp.float32, float(jnp.finfo(jnp.float32).eps)
        >>> float(roundoff(f32(0.25), f32(0.5), f32(0.5), f32(0.25), f32(1.0))) / eps  # amplification 0.75
        7.5
        >>> float(roundoff(f32(0.25), f32(0.5), f32(-0.5), f32(0.25), f32(1.0)))  # a skipped site
        0.0
    """
    eps = jnp.finfo(v.dtype).eps
    ok = (v > 0) & (vt > 0) & (cv > 0)
    v, vt, cv = jnp.where(ok, v, 0.0), jnp.where(ok, vt, 1.0), jnp.where(ok, cv, 1.0)
    amp = jnp.maximum(v / vt + v / cv, jnp.sqrt(v) * (jnp.abs(mt) / vt + jnp.abs(cm) / cv))
    return jnp.where(ok & jnp.isfinite(amp), ROUNDOFF * eps * amp, 0.0)


def site_change(tau, nu, tau_new, nu_new, v, floor=0.0):
    """Largest effect of a site update on its own marginal ``N(m, v)`` beyond round-off
    (``floor``, per site: `roundoff`), in units that do not depend on how the data are scaled:
    the relative change of the marginal precision ``|d tau| v`` and the shift of the marginal mean
    in standard deviations ``|d nu| sqrt(v)``.

    (An absolute or ``1 + |tau|``-relative measure is not scale-free: with features scaled by 1e-6
    the projections have variance ~1e-12 and the round-off in ``1/v_tilted - 1/v_cavity``, ~1e-5,
    would keep EP from ever "converging" although the posterior no longer moves.)

    Example (two sites at marginal variances 0.25 and 4; the second's mean moves by 0.1 sd):
        >>> import jax.numpy as jnp
        >>> tau, nu, v = jnp.array([1.0, 1.0]), jnp.array([0.0, 0.0]), jnp.array([0.25, 4.0])
        >>> round(float(site_change(tau, nu, tau, jnp.array([0.0, 0.05]), v)), 6)
        0.1
    """
    v = jnp.where(v > 0, v, 0.0)
    each = jnp.maximum(jnp.abs(tau_new - tau) * v, jnp.abs(nu_new - nu) * jnp.sqrt(v))
    return jnp.max(jnp.maximum(each - floor, 0.0), initial=0.0)


def update_parallel(problem, state: EPState, damping):
    m, v = state.mean, state.var
    cm, cv, ok = cavity(m, v, state.tau, state.nu)
    log_z, mt, vt = tilted(problem, cm, cv)
    tau_t, nu_t, ok = _targets(log_z, mt, vt, cm, cv, ok, state.tau, state.nu)

    def attempt(carry):
        k, step, *_ = carry
        tau = state.tau + step * (tau_t - state.tau)
        nu = state.nu + step * (nu_t - state.nu)
        mean, var, good = site_moments(problem, tau, nu)
        return k + 1, 0.5 * step, tau, nu, mean, var, good, step

    dt = state.tau.dtype
    start = (jnp.asarray(0, jnp.int32), jnp.asarray(damping, dt), state.tau, state.nu, state.mean, state.var,
             jnp.asarray(False), jnp.asarray(0.0, dt))
    k, _, tau, nu, mean, var, good, step = lax.while_loop(
        lambda c: (~c[6]) & (c[0] < MAX_HALVINGS), attempt, start)
    tau = jnp.where(good, tau, state.tau)
    nu = jnp.where(good, nu, state.nu)
    mean = jnp.where(good, mean, state.mean)
    var = jnp.where(good, var, state.var)
    n = state.tau.shape[0]
    skipped = jnp.where(good, n - jnp.sum(ok), n)
    floor = roundoff(v, mt, vt, cm, cv)
    change = jnp.where(good, site_change(state.tau, state.nu, tau, nu, v, floor), jnp.inf)
    log_scale = jnp.where(ok, site_log_scale(log_z, cm, cv, tau, nu), state.log_scale)
    return EPState(tau, nu, log_scale, mean, var), EPInfo(change, skipped, jnp.where(good, step, 0.0))


def update_sequential(problem, state: EPState, damping):
    n = state.tau.shape[0]
    weight = problem.space == "weight"

    def site(i, carry):
        tau, nu, log_scale, mean, cov, skipped, floor = carry
        if weight:
            a = problem.proj[i]
            Sa = cov @ a
            mi, vi = jnp.dot(a, mean), jnp.dot(a, Sa)
        else:
            Sa = lax.dynamic_index_in_dim(cov, i, axis=1, keepdims=False)
            mi, vi = mean[i], Sa[i]
        cm, cv, ok = cavity(mi, vi, tau[i], nu[i])
        log_z, mt, vt = tilted_site(problem, i, cm, cv)
        tau_t, nu_t, ok = _targets(log_z, mt, vt, cm, cv, ok, tau[i], nu[i])
        d_tau = damping * (tau_t - tau[i])
        d_nu = damping * (nu_t - nu[i])
        denom = 1.0 + d_tau * vi
        ok = ok & (denom > 0) & jnp.isfinite(denom)
        d_tau, d_nu = jnp.where(ok, d_tau, 0.0), jnp.where(ok, d_nu, 0.0)
        denom = jnp.where(ok, denom, 1.0)
        cov = cov - (d_tau / denom) * jnp.outer(Sa, Sa)
        mean = mean + Sa * (d_nu - d_tau * mi) / denom
        new_tau, new_nu = tau[i] + d_tau, nu[i] + d_nu
        ls = jnp.where(ok, site_log_scale(log_z, cm, cv, new_tau, new_nu), log_scale[i])
        return (tau.at[i].set(new_tau), nu.at[i].set(new_nu), log_scale.at[i].set(ls), mean, cov,
                skipped + (~ok).astype(jnp.int32), floor.at[i].set(jnp.where(ok, roundoff(vi, mt, vt, cm, cv), 0.0)))

    mean0, cov0, valid = from_sites(problem, state.tau, state.nu)  # the sweep's rank-one updates act on these
    carry = (state.tau, state.nu, state.log_scale, mean0, cov0, jnp.asarray(0, jnp.int32), jnp.zeros_like(state.tau))
    tau, nu, log_scale, mean1, cov1, skipped, floor = lax.fori_loop(0, n, site, carry)
    m1, v1 = marginals(problem, mean1, cov1)
    mean, var, good = site_moments(problem, tau, nu)  # fresh, against round-off drift
    mean, var = jnp.where(good, mean, m1), jnp.where(good, var, v1)
    change = site_change(state.tau, state.nu, tau, nu, var, floor)
    new = EPState(tau, nu, log_scale, mean, var)
    # a state whose global Gaussian cannot be rebuilt (round-off) is kept, and the sweep reported as failed
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(valid, a, b), new, state)
    info = EPInfo(jnp.where(valid, change, jnp.inf), jnp.where(valid, skipped, n),
                  jnp.asarray(damping, tau.dtype) * valid)
    return new, info


def update(problem, state: EPState, damping, schedule: str = "parallel"):
    """One EP sweep. Returns ``(state, info)``."""
    if schedule == "parallel":
        return update_parallel(problem, state, damping)
    if schedule == "sequential":
        return update_sequential(problem, state, damping)
    raise ValueError(f"schedule must be 'parallel' or 'sequential', got {schedule!r}")


def _run(problem, state, damping, tol, stop, schedule="parallel", start=0, skipped=0, change=jnp.inf):
    TRACE_COUNT["run"] += 1
    dt = state.tau.dtype

    def cond(c):
        _, it, _, ch, failed = c
        return (it < stop) & (ch > tol) & ~failed

    def body(c):
        st, it, sk, _, _ = c
        st, info = update(problem, st, damping, schedule)
        # a sweep with no valid global Gaussian leaves the state as it was (change inf): the next
        # would repeat it exactly, so the run stops there instead of spending its sweeps on it
        return st, it + 1, sk + info.num_skipped.astype(jnp.int32), info.max_site_change, info.step == 0

    carry = (state, jnp.asarray(start, jnp.int32), jnp.asarray(skipped, jnp.int32), jnp.asarray(change, dt),
             jnp.asarray(False))
    return lax.while_loop(cond, body, carry)[:4]


_run_jit = jax.jit(_run, static_argnames=("schedule",))


def run_arguments(state, damping, tol, stop, start=0, skipped=0, change=float("inf")):
    """The traced arguments of `_run` after ``problem`` and ``state``, as arrays of the state's
    dtype (changing them never recompiles)."""
    dt = state.tau.dtype
    f = lambda x: jnp.asarray(x, dt)  # noqa: E731
    i = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
    return f(damping), f(tol), i(stop), i(start), i(skipped), f(change)


def sweeps(schedule):
    """``fn(problem, state, *run_arguments(...))``: `_run` for one schedule, all arguments traced
    (for programs kept on disk, :func:`inference.exported.flat`)."""
    def fn(problem, state, damping, tol, stop, start, skipped, change):
        return _run(problem, state, damping, tol, stop, schedule, start, skipped, change)

    return fn


def run(problem, state, damping, tol, stop, schedule="parallel", start=0, skipped=0, change=float("inf")):
    """Sweep until the largest site change is at most ``tol``, the sweep count reaches ``stop``,
    or a sweep finds no valid global Gaussian at any step (its change is inf; it would repeat).

    Returns ``(state, iterations, total_skipped, last_change)``; continue an interrupted run by
    passing those back as ``start``, ``skipped`` and ``change`` (the driver does, to show
    progress). Compiled once per problem structure and schedule."""
    damping, tol, stop, start, skipped, change = run_arguments(state, damping, tol, stop, start, skipped, change)
    return _run_jit(problem, state, damping, tol, stop, schedule=schedule, start=start, skipped=skipped,
                    change=change)
