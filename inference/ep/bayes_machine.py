"""Kernel-form expectation propagation for the Bayes machine (Hernández-Lobato 2009, ch. 6, app. B).

Model: ``f ~ N(m0, K)`` at the n training inputs, ``eps ~ Beta(a0, b0)``, and for labels
``t_i`` in {-1, +1}: ``P(t_i | f_i, eps) = eps + (1 - 2 eps) step(t_i f_i)``.

Approximation ``q(f, eps) = N(f | mu, Sigma) Beta(eps | a, b)``: each likelihood term becomes a site
``exp(-tau_i f_i^2 / 2 + nu_i f_i) eps^(a_i) (1 - eps)^(b_i)``. The tilted distribution of a term
mixes the cavity Gaussian with a step and the cavity Beta with a linear term in ``eps``, so its
moments are closed-form (``tilted``): a two-piece Gaussian for ``f`` and a two-component Beta
mixture, ``Beta(a+1, b)`` and ``Beta(a, b+1)``, for ``eps``. Sites match the Gaussian moments of
``f`` and the first two moments of ``eps``.

The tilted distribution of a point on the wrong side of the boundary is wider than its cavity, so
moment matching asks for a negative site precision. ``negative_sites="clip"`` (the default) gives
such a site precision 0 and matches the mean only: a well-defined projection, so both schedules
share one fixed point, and (with the damping escalation of `fit`) it converged on all 60 noisy
circle problems we tried (n = 40-100, 10-20% flipped labels) with both schedules, against 56
(parallel) and 57 (sequential) with ``"allow"`` (Minka's BPM rule: keep the negative precision
while cavity and posterior stay proper), which is also offered. Skipping
such updates instead (keeping the old site) biased the learnt noise rate towards 0 (E[eps] 0.02
at 10% flips) and made the result depend on the schedule, so it is not offered. A site whose
cavity is improper or whose moments are not finite is skipped (kept) and counted, never turned
into NaN; in the parallel schedule a joint update that would make the posterior indefinite (only
possible with ``"allow"``) falls back to keeping every site whose precision would decrease, which
is provably proper, and counts those as skipped.
``damping`` is the fraction of each site update taken, in (0, 1] (1: plain EP), as in
`inference.ep`. Convergence is `inference.ep`'s rule (`_change`): the largest effect of a sweep's
site updates on their own marginals beyond what round-off alone moves them by
(`inference.ep.update.site_change` for ``f``; for ``eps`` the relative change of the Beta's ``a``
and ``b``) falls below ``tol``.

Everything runs in one jitted ``lax.while_loop`` over a NamedTuple state; ``damping``, ``tol`` and
``max_iter`` are traced (tuning them never recompiles); the schedule is structure.

Example:
    >>> import numpy as np
    >>> from inference.ep.bayes_machine import fit, predict
    >>> X = np.random.default_rng(0).uniform(-1, 1, (30, 2)); t = np.sign(X[:, 0] + 1e-9)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / 0.5**2) + 1e-6 * np.eye(30)
    >>> res = fit(K, t)
    >>> bool(res.converged), res.f_mean.shape
    (True, (30,))
    >>> f_mean, f_var, p_plus = predict(res, K[:3], np.diag(K)[:3])
    >>> bool(np.all((p_plus > 0.5) == (t[:3] > 0)))
    True
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.special import gammaln, log_ndtr, ndtr

from inference import _options
from inference.bayes_machine_model import jittered_cholesky
from inference.ep import update

SCHEDULES = ("parallel", "sequential")
NEGATIVE_SITES = ("clip", "allow")
MAX_DAMPING_RAISES = 2
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


class BMState(NamedTuple):
    """EP state: site parameters and what a sweep reads of the global approximation."""

    tau: jax.Array  # (n,) site precisions
    nu: jax.Array  # (n,) site precision x mean
    site_a: jax.Array  # (n,) site exponents of eps
    site_b: jax.Array  # (n,) site exponents of 1 - eps
    mean: jax.Array  # (n,) posterior mean of f - m0
    var: jax.Array  # (n,) posterior variances of f (the covariance is formed once, at the end: `run`)
    a: jax.Array  # Beta posterior of eps
    b: jax.Array
    iteration: jax.Array
    max_change: jax.Array
    num_skipped: jax.Array  # site updates skipped so far (all sweeps)
    num_clipped: jax.Array  # sites whose precision was clipped at 0 in the last sweep
    failed: jax.Array  # the posterior could not be kept proper (loop stops)


class BMResult(NamedTuple):
    """What ``fit`` returns. ``f_mean``/``f_cov`` include the prior mean; ``eps_a``/``eps_b`` are
    the Beta approximation of eps (0, 0 when eps is fixed: then ``eps_mean`` is the fixed value)."""

    f_mean: jax.Array
    f_cov: jax.Array
    eps_a: jax.Array
    eps_b: jax.Array
    eps_mean: jax.Array
    tau: jax.Array
    nu: jax.Array
    site_a: jax.Array
    site_b: jax.Array
    log_evidence: jax.Array
    num_iter: jax.Array
    max_change: jax.Array
    converged: jax.Array
    num_skipped: jax.Array
    num_clipped: jax.Array
    chol_K: jax.Array  # L with K = L L^T (prediction)
    chol_B: jax.Array
    beta: jax.Array  # B^-1 L^T nu: predictive mean is (L^-1 k*)^T beta
    jitter: jax.Array  # added to K's diagonal to factorise it
    damping: jax.Array  # damping in use at the end (raised when EP oscillated, see fit)


# --------------------------------------------------------------------------- site maths


def tilted(m, v, t, ebar, a, b):
    """Moments of ``[eps + (1 - 2 eps) step(t f)] N(f | m, v) Beta(eps | a, b)``.

    ``ebar`` is the cavity mean of eps (or the fixed eps). Returns ``(log Z, mean_f, var_f,
    a_new, b_new)``: the normaliser, the Gaussian moments of ``f`` and the Beta with the tilted
    first two moments of ``eps`` (meaningless when eps is fixed).
    """
    sd = jnp.sqrt(v)
    z = t * m / sd
    # log P(sign(f) = t), log P(sign(f) != t): one log_ndtr on the small tail, log1p for the other.
    tail = log_ndtr(-jnp.abs(z))
    bulk = jnp.log1p(-jnp.exp(tail))
    lp_right, lp_wrong = jnp.where(z > 0, bulk, tail), jnp.where(z > 0, tail, bulk)
    log_e, log_1me = jnp.log(ebar), jnp.log1p(-ebar)
    log_z = jnp.logaddexp(log_e + lp_wrong, log_1me + lp_right)
    # d log Z / d m = t (1 - 2 ebar) phi(z) / (Z sd); r = that times sd.
    r = (1.0 - 2.0 * ebar) * jnp.exp(-0.5 * z * z - _LOG_SQRT_2PI - log_z)
    mean = m + t * sd * r
    var = v * (1.0 - r * (z + r))
    # eps: mixture of Beta(a+1, b) (weight w1) and Beta(a, b+1), exact mean and variance.
    w1 = jnp.exp(log_e + lp_wrong - log_z)
    w2 = 1.0 - w1
    s = a + b
    m1 = (a + w1) / (s + 1.0)
    var_e = (w1 * (a + 1.0) * b + w2 * a * (b + 1.0)) / ((s + 1.0) ** 2 * (s + 2.0)) + w1 * w2 / (s + 1.0) ** 2
    kappa = m1 * (1.0 - m1) / var_e - 1.0
    return log_z, mean, var, m1 * kappa, (1.0 - m1) * kappa


class _Tilted(NamedTuple):
    """What `_site_proposals` computes besides the proposals: the tilted normaliser, the cavity
    (``m_c, v_c`` of f, ``a_c, b_c`` of eps), the clipped sites and the tilted moments."""

    log_z: jax.Array
    m_c: jax.Array
    v_c: jax.Array
    a_c: jax.Array
    b_c: jax.Array
    clipped: jax.Array
    mu_hat: jax.Array
    var_hat: jax.Array
    a_new: jax.Array
    b_new: jax.Array


def _site_proposals(mean, var, tau, nu, site_a, site_b, a, b, t, offset, fixed_eps, learn, clip=True):
    """Cavities from the marginals and the sites, tilted moments, proposed site parameters and a
    validity flag, vectorised over whichever sites are passed."""
    tau_c = 1.0 / var - tau
    nu_c = mean / var - nu
    a_c, b_c = a - site_a, b - site_b
    ok_cav = tau_c > 0
    if learn:
        ok_cav &= (a_c > 0) & (b_c > 0)
    v_c = 1.0 / jnp.where(ok_cav, tau_c, 1.0)
    m_c = nu_c * v_c
    a_s, b_s = jnp.where(ok_cav, a_c, 1.0), jnp.where(ok_cav, b_c, 1.0)
    ebar = a_s / (a_s + b_s) if learn else jnp.full_like(m_c, fixed_eps)
    log_z, mu_hat, var_hat, a_new, b_new = tilted(m_c + offset, v_c, t, ebar, a_s, b_s)
    mu_hat = mu_hat - offset
    tau_p = 1.0 / var_hat - tau_c
    nu_p = mu_hat / var_hat - nu_c
    a_p, b_p = a_new - a_c, b_new - b_c
    ok = ok_cav & (var_hat > 0) & jnp.isfinite(tau_p) & jnp.isfinite(nu_p)
    clipped = jnp.zeros_like(ok)
    if clip:
        # A tilted variance above the cavity's would need a negative site precision: use precision
        # 0 and match the mean only (a well-defined projection, so the fixed point does not depend
        # on the schedule).
        clipped = ok & (tau_p < 0)
        nu_p = jnp.where(clipped, mu_hat * tau_c - nu_c, nu_p)
        tau_p = jnp.where(clipped, 0.0, tau_p)
    if learn:
        ok &= (a_new > 0) & (b_new > 0) & jnp.isfinite(a_p) & jnp.isfinite(b_p)
    return (tau_p, nu_p, a_p, b_p), ok, _Tilted(log_z, m_c, v_c, a_c, b_c, clipped, mu_hat, var_hat, a_new, b_new)


class _Gaussian(NamedTuple):
    mean: jax.Array
    cov: jax.Array
    chol_B: jax.Array  # Cholesky factor of I + L^T diag(tau) L


def _marginals(L, K, tau, nu):
    """``(mean, var, ok)`` of the posterior of f without forming its covariance: what a parallel
    sweep needs. In float64 with all site precisions >= 0 (always so with
    ``negative_sites="clip"``): Rasmussen & Williams' ``B = I + S K S`` (one Cholesky, one
    triangular solve: ~1.3 n^3 flops, against ~5.3 n^3 for `_posterior`). Otherwise
    ``B = I + L^T diag(tau) L`` as in `_posterior` (~3.3 n^3), valid while B is positive definite
    and free of cancellation: ``var = diag(K) - ...`` loses the small variances of confidently
    classified points to round-off in float32, which kept EP from converging there."""
    n = L.shape[0]
    eye = jnp.eye(n, dtype=L.dtype)

    def nonnegative(_):
        s = jnp.sqrt(tau)
        SK = s[:, None] * K
        chol = jnp.linalg.cholesky(eye + SK * s[None, :])
        V = solve_triangular(chol, SK, lower=True)
        return K @ nu - V.T @ (V @ nu), jnp.diag(K) - jnp.sum(V * V, axis=0), chol

    def general(_):
        B = eye + L.T @ (tau[:, None] * L)
        chol = jnp.linalg.cholesky(0.5 * (B + B.T))
        V = solve_triangular(chol, L.T, lower=True)
        return V.T @ (V @ nu), jnp.sum(V * V, axis=0), chol

    if L.dtype == jnp.float64:
        mean, var, chol = jax.lax.cond(jnp.all(tau >= 0), nonnegative, general, None)
    else:
        mean, var, chol = general(None)
    ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.diag(chol) > 0) & jnp.all(var > 0) & jnp.all(jnp.isfinite(mean))
    return mean, var, ok


def _posterior(L, tau, nu):
    """Sigma = (K^-1 + diag(tau))^-1 = L B^-1 L^T with B = I + L^T diag(tau) L; mean Sigma nu.
    Valid for negative entries of tau as long as B is positive definite (else NaN chol_B)."""
    n = L.shape[0]
    B = jnp.eye(n, dtype=L.dtype) + L.T @ (tau[:, None] * L)
    chol_B = jnp.linalg.cholesky(0.5 * (B + B.T))
    V = solve_triangular(chol_B, L.T, lower=True)
    cov = V.T @ V
    return cov @ nu, cov, chol_B


# --------------------------------------------------------------------------- one sweep


class _Consts(NamedTuple):
    L: jax.Array
    K: jax.Array  # L L^T: the prior covariance EP works with (jitter included)
    t: jax.Array
    offset: jax.Array
    a0: jax.Array
    b0: jax.Array
    fixed_eps: jax.Array


def _floor(var, extra, a, b, learn: bool):
    """Per-site round-off allowances of `_change`: `inference.ep.update.roundoff` for ``f``'s
    site, and ``ROUNDOFF`` epsilons of ``(a_tilted + a_cavity) / a`` (and of b) for eps's."""
    f = update.roundoff(var, extra.mu_hat, extra.var_hat, extra.m_c, extra.v_c)
    if not learn:
        return f, jnp.zeros_like(f)
    eps = jnp.finfo(var.dtype).eps
    amp = jnp.maximum((jnp.abs(extra.a_new) + jnp.abs(extra.a_c)) / a, (jnp.abs(extra.b_new) + jnp.abs(extra.b_c)) / b)
    return f, jnp.where(jnp.isfinite(amp), update.ROUNDOFF * eps * amp, 0.0)


def _change(old, new, var, a, b, floor, learn: bool):
    """`inference.ep`'s convergence measure: the largest effect of a site update on its own
    marginal beyond round-off (``floor``: `_floor`), scale-free. For ``f`` that is
    `inference.ep.update.site_change` at marginal variances ``var``; for ``eps`` the relative change
    ``|d a_i| / a``, ``|d b_i| / b`` of the Beta ``(a, b)`` each site's exponents add to."""
    change = update.site_change(old[0], old[1], new[0], new[1], var, floor[0])
    if not learn:
        return change
    each = jnp.maximum(jnp.abs(new[2] - old[2]) / a, jnp.abs(new[3] - old[3]) / b)
    return jnp.maximum(change, jnp.max(jnp.maximum(each - floor[1], 0.0), initial=0.0))


def _parallel_update(state: BMState, c: _Consts, damping, learn: bool, clip: bool) -> BMState:
    old = (state.tau, state.nu, state.site_a, state.site_b)
    prop, ok, extra = _site_proposals(state.mean, state.var, *old, state.a, state.b, c.t, c.offset, c.fixed_eps,
                                      learn, clip)
    num_clipped = jnp.sum(extra.clipped).astype(jnp.int32)
    new = tuple(jnp.where(ok, damping * p + (1.0 - damping) * o, o) for p, o in zip(prop, old))
    if not learn:
        new = (new[0], new[1], old[2], old[3])

    def attempt(sites):
        mean, var, good = _marginals(c.L, c.K, sites[0], sites[1])
        a, b = c.a0 + jnp.sum(sites[2]), c.b0 + jnp.sum(sites[3])
        good &= (a > 0) & (b > 0) if learn else True
        return (mean, var, a, b), good

    def fallback(_):
        # Keep every site whose precision would decrease, and the eps sites: B only grows (stays PD).
        keep = new[0] < old[0]
        sites = (jnp.where(keep, old[0], new[0]), jnp.where(keep, old[1], new[1]), old[2], old[3])
        post, good = attempt(sites)
        return sites, post, good, jnp.sum(keep | ~ok)

    post, good = attempt(new)
    sites, post, good, skipped = jax.lax.cond(
        good, lambda _: (new, post, good, jnp.sum(~ok)), fallback, operand=None
    )
    failed = ~good
    sites = tuple(jnp.where(failed, o, s) for o, s in zip(old, sites))
    mean, var, a, b = (jnp.where(failed, o, p) for o, p in zip((state.mean, state.var, state.a, state.b), post))
    floor = tuple(jnp.where(ok, f, 0.0) for f in _floor(state.var, extra, state.a, state.b, learn))
    change = _change(old, sites, state.var, state.a, state.b, floor, learn)
    return BMState(*sites, mean, var, a, b, state.iteration + 1, change,
                   state.num_skipped + skipped.astype(jnp.int32), num_clipped, failed)


def _sequential_update(state: BMState, c: _Consts, damping, learn: bool, clip: bool) -> BMState:
    old = (state.tau, state.nu, state.site_a, state.site_b)

    def body(i, carry):
        tau, nu, sa, sb, mean, cov, a, b, skipped, clipped, f_floor, e_floor = carry
        var_i = cov[i, i]
        prop, ok, extra = _site_proposals(mean[i], var_i, tau[i], nu[i], sa[i], sb[i], a, b, c.t[i],
                                          c.offset[i], c.fixed_eps, learn, clip)
        clipped = clipped + extra.clipped.astype(jnp.int32)
        cur = (tau[i], nu[i], sa[i], sb[i])
        new = [damping * p + (1.0 - damping) * o for p, o in zip(prop, cur)]
        d_tau, d_nu = new[0] - cur[0], new[1] - cur[1]
        denom = 1.0 + d_tau * var_i
        ok &= denom > 0
        if learn:
            ok &= (a + new[2] - cur[2] > 0) & (b + new[3] - cur[3] > 0)
        d_tau, d_nu = jnp.where(ok, d_tau, 0.0), jnp.where(ok, d_nu, 0.0)
        d_a = jnp.where(ok, new[2] - cur[2], 0.0) if learn else 0.0
        d_b = jnp.where(ok, new[3] - cur[3], 0.0) if learn else 0.0
        s = cov[:, i]
        denom = jnp.where(ok, denom, 1.0)
        cov = cov - (d_tau / denom) * jnp.outer(s, s)
        mean = mean + ((d_nu - d_tau * mean[i]) / denom) * s
        ff, fe = _floor(var_i, extra, a, b, learn)
        return (tau.at[i].add(d_tau), nu.at[i].add(d_nu), sa.at[i].add(d_a), sb.at[i].add(d_b),
                mean, cov, a + d_a, b + d_b, skipped + (~ok).astype(jnp.int32), clipped,
                f_floor.at[i].set(jnp.where(ok, ff, 0.0)), e_floor.at[i].set(jnp.where(ok, fe, 0.0)))

    zero = jnp.zeros((), jnp.int32)
    mean0, cov0, chol0 = _posterior(c.L, state.tau, state.nu)  # the sweep's rank-one updates act on these
    valid = jnp.all(jnp.isfinite(chol0)) & jnp.all(jnp.isfinite(cov0))
    carry = (*old, mean0, cov0, state.a, state.b, zero, zero, jnp.zeros_like(state.tau), jnp.zeros_like(state.tau))
    tau, nu, sa, sb, _, _, _, _, skipped, num_clipped, *floor = jax.lax.fori_loop(0, c.t.shape[0], body, carry)
    # Marginals afresh from the sites: rank-one updates accumulate round-off.
    mean, var, good = _marginals(c.L, c.K, tau, nu)
    a, b = c.a0 + jnp.sum(sa), c.b0 + jnp.sum(sb)
    failed = ~(good & valid)
    sites = tuple(jnp.where(failed, o, s) for o, s in zip(old, (tau, nu, sa, sb)))
    mean, var = jnp.where(failed, state.mean, mean), jnp.where(failed, state.var, var)
    a, b = jnp.where(failed, state.a, a), jnp.where(failed, state.b, b)
    change = _change(old, sites, var, a, b, floor, learn)
    return BMState(*sites, mean, var, a, b, state.iteration + 1, change,
                   state.num_skipped + skipped.astype(jnp.int32), num_clipped, failed)


# --------------------------------------------------------------------------- evidence and driver


def betaln(a, b):
    """log B(a, b) through lgamma (compiles much faster than jax.scipy.special.betaln)."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def log_evidence(state: BMState, chol_B, c: _Consts, learn: bool):
    """EP's log Z: sum_i log(Z_i / C_i) + log of the integral of prior x all sites, where Z_i is
    the tilted normaliser and C_i the integral of cavity x site (both at the final state; ``chol_B``
    its `_posterior` factor). Returns ``(log Z, number of sites whose cavity is improper)`` (those
    terms are left out)."""
    var = state.var
    _, ok, (log_z, m_c, v_c, a_c, b_c, *_) = _site_proposals(
        state.mean, var, state.tau, state.nu, state.site_a, state.site_b, state.a, state.b,
        c.t, c.offset, c.fixed_eps, learn)
    log_c = 0.5 * jnp.log(var / v_c) + 0.5 * state.mean**2 / var - 0.5 * m_c**2 / v_c
    if learn:
        log_c += betaln(state.a, state.b) - betaln(a_c, b_c)
    per_site = jnp.where(ok, log_z - log_c, 0.0)
    gauss = -jnp.sum(jnp.log(jnp.diag(chol_B))) + 0.5 * state.nu @ state.mean
    total = jnp.sum(per_site) + gauss
    if learn:
        total += betaln(state.a, state.b) - betaln(c.a0, c.b0)
    return total, jnp.sum(~ok)


@partial(jax.jit, static_argnames=("schedule", "learn", "clip"))
def run(L, t, offset, a0, b0, fixed_eps, damping, tol, max_iter, init_sites, *, schedule, learn, clip=True):
    """Jitted EP loop from site parameters ``init_sites = (tau, nu, site_a, site_b)``. Returns
    ``(final BMState, its _Gaussian, log evidence, number of improper cavities at the end)``: the
    sweeps carry the marginals only, the covariance is formed once here."""
    c = _Consts(L, L @ L.T, t, offset, a0, b0, fixed_eps)
    tau, nu, sa, sb = init_sites
    mean, var, ok = _marginals(L, c.K, tau, nu)
    a, b = (a0 + jnp.sum(sa), b0 + jnp.sum(sb)) if learn else (a0, b0)
    zero = jnp.zeros((), jnp.int32)
    state = BMState(tau, nu, sa, sb, mean, var, a, b, zero, jnp.asarray(jnp.inf, L.dtype), zero, zero, ~ok)
    update = _parallel_update if schedule == "parallel" else _sequential_update

    def cond(s):
        return (~s.failed) & (s.iteration < max_iter) & (s.max_change >= tol)

    state = jax.lax.while_loop(cond, lambda s: update(s, c, damping, learn, clip), state)
    gauss = _Gaussian(*_posterior(L, state.tau, state.nu))
    log_z, num_bad = log_evidence(state, gauss.chol_B, c, learn)
    return state, gauss, log_z, num_bad


_KEPT_RUNS: dict = {}


def _kept_run(*args, schedule, learn, clip=True):
    """`run`, kept on disk per static options and argument shapes (`inference.exported.flat`)."""
    options = (schedule, learn, clip)
    if options not in _KEPT_RUNS:
        from inference import exported

        out = jax.tree.structure((BMState(*range(len(BMState._fields))), _Gaussian(0, 0, 0), 0, 0))
        _KEPT_RUNS[options] = exported.flat(partial(run, schedule=schedule, learn=learn, clip=clip),
                                            "bm-run", options, out)
    return _KEPT_RUNS[options](*args)


# --------------------------------------------------------------------------- public API


def labels_pm1(y, n: int, name: str = "y") -> np.ndarray:
    """Binary labels {0, 1}, {-1, +1} or bool as float {-1., +1.}; anything else is a ValueError."""
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be 1-D with {n} labels, got shape {arr.shape}")
    if arr.dtype == bool:
        return np.where(arr, 1.0, -1.0)
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must hold finite binary labels {{0, 1}}, {{-1, +1}} or bool")
    values = set(np.unique(arr).tolist())
    if values <= {0, 1}:
        return np.where(arr > 0, 1.0, -1.0)
    if values <= {-1, 1}:
        return arr.astype(float)
    raise ValueError(f"{name} must hold binary labels {{0, 1}}, {{-1, +1}} or bool, got values {sorted(values)[:5]}")


def check_options(noise_prior, schedule, damping, tol, max_iter, learn_noise, fixed_eps):
    try:
        a0, b0 = (float(v) for v in noise_prior)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"noise_prior must be a pair of positive numbers (a0, b0), got {noise_prior!r}") from exc
    if not (a0 > 0 and b0 > 0 and np.isfinite(a0) and np.isfinite(b0)):
        raise ValueError(f"noise_prior must be a pair of positive finite numbers, got {noise_prior!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not (0.0 < float(damping) <= 1.0):
        raise ValueError(f"damping must lie in (0, 1] (fraction of each site update taken), got {damping!r}")
    if not (float(tol) > 0):
        raise ValueError(f"tol must be positive, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not isinstance(learn_noise, (bool, np.bool_)):
        raise TypeError(f"learn_noise must be a bool, got {learn_noise!r}")
    if not (0.0 <= float(fixed_eps) < 0.5):
        raise ValueError(f"fixed_eps must lie in [0, 0.5), got {fixed_eps!r}")
    return a0, b0


def fit(K, y, noise_prior=(1.0, 10.0), *, schedule="parallel", damping=0.5, tol=1e-6, max_iter=200,
        learn_noise=True, fixed_eps=0.0, prior_mean=None, init_sites=None, negative_sites="clip") -> BMResult:
    """EP for the Bayes machine with prior covariance ``K`` (n, n) and labels ``y`` (n,).

    ``learn_noise=False`` fixes eps at ``fixed_eps`` (0: the "eps=0 machine", a noise-free step).
    ``prior_mean`` (n,) is the prior mean of f (default 0). ``init_sites`` warm-starts from
    ``(tau, nu, site_a, site_b)``. ``negative_sites``: ``"clip"`` (default) or ``"allow"``, see
    the module doc. Cost O(n^3) per sweep; `run`'s program is kept on disk per shapes and options
    (`_kept_run`), so a new process does not trace it again.

    If EP has not converged after ``max_iter`` sweeps (it oscillates on a few noisy problems), it
    continues from the last sites with ``damping`` halved (more damping), at most twice;
    ``num_iter`` counts all sweeps and ``damping`` in the result is the one in use at the end.
    """
    a0, b0 = check_options(noise_prior, schedule, damping, tol, max_iter, learn_noise, fixed_eps)
    if negative_sites not in NEGATIVE_SITES:
        raise ValueError(f"negative_sites must be one of {NEGATIVE_SITES}, got {negative_sites!r}")
    L, jitter = jittered_cholesky(K, "K")
    tol = _options.working_tol(tol, L.dtype)  # float32: round-off alone moves the sites by ~1e-6
    n = L.shape[0]
    t = jnp.asarray(labels_pm1(y, n, "y"), dtype=L.dtype)
    offset = jnp.zeros(n, L.dtype) if prior_mean is None else jnp.broadcast_to(jnp.asarray(prior_mean, L.dtype), (n,))
    if not bool(jnp.all(jnp.isfinite(offset))):
        raise ValueError("prior_mean contains NaN or inf")
    zeros = jnp.zeros(n, L.dtype)
    sites = (zeros, zeros, zeros, zeros) if init_sites is None else tuple(jnp.asarray(s, L.dtype) for s in init_sites)
    f = lambda v: jnp.asarray(v, L.dtype)  # noqa: E731
    iters = skipped = 0
    for attempt in range(1 + MAX_DAMPING_RAISES):
        state, gauss, log_z, _ = _kept_run(L, t, offset, f(a0), f(b0), f(fixed_eps), f(damping), f(tol),
                                     jnp.asarray(max_iter), sites, schedule=schedule, learn=bool(learn_noise),
                                     clip=negative_sites == "clip")
        iters, skipped = iters + int(state.iteration), skipped + int(state.num_skipped)
        if bool(state.failed) or float(state.max_change) < tol or attempt == MAX_DAMPING_RAISES:
            break
        # Not converged: EP oscillates; continue from the last sites with more damping.
        sites, damping = (state.tau, state.nu, state.site_a, state.site_b), 0.5 * float(damping)
    state = state._replace(iteration=jnp.asarray(iters, jnp.int32), num_skipped=jnp.asarray(skipped, jnp.int32))
    return result_from_state(state, gauss, log_z, L, offset, jitter, tol, learn_noise, fixed_eps, damping)


def result_from_state(state, gauss, log_z, L, offset, jitter, tol, learn_noise, fixed_eps, damping) -> BMResult:
    beta = cho_solve((gauss.chol_B, True), L.T @ state.nu)
    if learn_noise:
        eps_a, eps_b = state.a, state.b
        eps_mean = state.a / (state.a + state.b)
    else:
        eps_a = eps_b = jnp.zeros((), L.dtype)
        eps_mean = jnp.asarray(fixed_eps, L.dtype)
    converged = (~state.failed) & (state.max_change < tol)
    return BMResult(gauss.mean + offset, gauss.cov, eps_a, eps_b, eps_mean, state.tau, state.nu,
                    state.site_a, state.site_b, log_z, state.iteration, state.max_change, converged,
                    state.num_skipped, state.num_clipped, L, gauss.chol_B, beta, jnp.asarray(jitter, L.dtype),
                    jnp.asarray(damping, L.dtype))


def predict(result: BMResult, K_cross, k_diag, prior_mean=None):
    """Predictive at m new points from ``K_cross = k(X_new, X_train)`` (m, n) and
    ``k_diag = k(x, x)`` (m,): returns ``(f_mean, f_var, p_plus)`` with
    ``p_plus = E[eps] + (1 - 2 E[eps]) Phi(f_mean / sqrt(f_var))`` = P(y = +1). O(n^2) per point."""
    K_cross = jnp.atleast_2d(jnp.asarray(K_cross, result.chol_K.dtype))
    n = result.chol_K.shape[0]
    if K_cross.shape[1] != n:
        raise ValueError(f"K_cross must have shape (m, {n}) = k(X_new, X_train), got {K_cross.shape}")
    k_diag = jnp.broadcast_to(jnp.asarray(k_diag, K_cross.dtype), (K_cross.shape[0],))
    return _predict(result.chol_K, result.chol_B, result.beta, result.eps_mean, K_cross, k_diag,
                    0.0 if prior_mean is None else jnp.asarray(prior_mean, K_cross.dtype))


@jax.jit
def _predict(chol_K, chol_B, beta, eps_mean, K_cross, k_diag, prior_mean):
    w = solve_triangular(chol_K, K_cross.T, lower=True)
    u = solve_triangular(chol_B, w, lower=True)
    f_mean = w.T @ beta + prior_mean
    f_var = jnp.maximum(k_diag - jnp.sum(w * w, 0) + jnp.sum(u * u, 0), 1e-12 * jnp.maximum(k_diag, 1e-300))
    p_plus = eps_mean + (1.0 - 2.0 * eps_mean) * ndtr(f_mean / jnp.sqrt(f_var))
    return f_mean, f_var, p_plus

