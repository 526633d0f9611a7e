"""EP for linear regression with a spike-and-slab prior (Hernandez-Lobato, Hernandez-Lobato &
Suarez 2015, Machine Learning 99:437-487).

The Gaussian likelihood is kept exactly; each prior factor ``p_j N(w_j|0, v_j) + (1-p_j) delta(w_j)``
is replaced by a Gaussian site ``exp(-tau_j w_j^2/2 + nu_j w_j)``, so the approximation is
``Q(w) = N(m, V)`` with ``V = (diag(tau) + beta X^T X)^-1`` (full covariance) and the inclusion
probabilities are those of the tilted distributions. ``V`` is never formed when d > n: its diagonal
and the mean come from the n x n Woodbury form (O(n^2 d) per parallel sweep, memory O(n d)); the
sequential schedule then keeps ``B^-1`` (n x n) up to date by rank-one updates, also O(n^2 d) per
sweep and O(n d) memory. Except up to `DXD_MAX_D` coefficients in float32, and for sequential
sweeps (`use_woodbury`): a clipped site (``1/tau`` ~ 1e6 times its marginal variance) puts a huge
rank-one term in ``B``; in float32 the Woodbury form's ``1/tau - a`` then loses every digit (EP
went to NaN, or stalled with inclusion probabilities off by up to 0.036: 30 x 40), and the
sequential sweep's rank-one updates of ``B^-1`` lose every digit even in float64 (one sweep from
the same sites off by 20% to 1e7 relative from the d x d sweep's: the "limit cycles" of 30 x 60
designs). The d x d Cholesky does not care how small ``tau`` is.

Sites whose new precision would be negative (the tilted mixture is wider than the cavity) are
clipped to a tiny positive precision (mean still matched) and counted; sites with a non-positive
cavity precision are skipped and counted. Damping and tolerance are traced: no recompiles. A sweep's
``max_change`` is the generic EP engine's (`inference.ep.update.site_change`: each site's change in
units of its marginal, beyond the round-off `inference.ep.update.roundoff` allows).

Unknown noise precision (Normal-Gamma prior) is handled by EP on a grid of precisions weighted by
EP evidence times the Gamma prior (trapezoid rule in log tau): see ``precision_grid``.

Example:
    >>> import numpy as np, jax.numpy as jnp
    >>> X = np.random.default_rng(0).normal(size=(30, 4)); y = 2 * X[:, 0]
    >>> data = make_data(X, y, beta=1.0, slab_var=np.ones(4), p_incl=np.full(4, 0.2))
    >>> state = run(data, jnp.asarray(0.5), jnp.asarray(1e-8), jnp.asarray(200))
    >>> [round(float(p), 2) for p in state.incl]
    [1.0, 0.05, 0.05, 0.04]
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.ep.update import ROUNDOFF, roundoff, site_change
from inference.spikeslab.sites import log_partition, spike_slab_tilted

TAU_MIN = 1e-6  # smallest site precision, in units of the slab precision
TAU_MAX = 1e10  # largest site precision, in units of the slab precision
# the d x d form up to this many coefficients even when d > n (O(d^3) per sweep and grid point), in
# float32 and for sequential sweeps; beyond it float32 is refused (`check_precision`)
DXD_MAX_D = 200


def use_woodbury(n: int, d: int, dtype, sequential: bool = False) -> bool:
    """Whether the n x n (Woodbury) form is used: d > n, and, in float32 or for sequential sweeps,
    d > `DXD_MAX_D` (see the module docstring).

    Example:
        >>> import jax.numpy as jnp
        >>> use_woodbury(30, 300, jnp.float64), use_woodbury(30, 60, jnp.float64, sequential=True)
        (True, False)
        >>> use_woodbury(30, 60, jnp.float32), use_woodbury(60, 30, jnp.float64)
        (False, False)
    """
    return d > n and (d > DXD_MAX_D or (jnp.finfo(dtype).bits == 64 and not sequential))


def check_precision(n: int, d: int, dtype) -> None:
    """Refuse, before any work, float32 where `use_woodbury` (d > n and d > `DXD_MAX_D`): there
    the n x n form gives NaN or stalls off the answer.

    Example:
        >>> import jax.numpy as jnp
        >>> check_precision(30, 300, jnp.float64); check_precision(30, 200, jnp.float32)
        >>> check_precision(30, 300, jnp.float32)
        Traceback (most recent call last):
        ...
        ValueError: X: spike-and-slab regression EP with 300 coefficients and 30 observations needs float64 ...
    """
    if jnp.finfo(dtype).bits < 64 and use_woodbury(n, d, dtype):
        raise ValueError(f"X: spike-and-slab regression EP with {d} coefficients and {n} observations needs float64 "
                         f"(in float32 its n x n Woodbury updates lose every digit at weakly constrained sites; up to "
                         f"{DXD_MAX_D} coefficients it runs float32 in the d x d form): enable float64 with "
                         "jax.config.update('jax_enable_x64', True), or use inference.vi or inference.mcmc")


class EPData(NamedTuple):
    X: jax.Array  # (n, d), unit noise scale
    y: jax.Array  # (n,)
    beta: jax.Array  # noise precision
    slab_var: jax.Array  # (d,)
    logit_p: jax.Array  # (d,)


class EPState(NamedTuple):
    tau: jax.Array  # (d,) site precisions
    nu: jax.Array  # (d,) site precision-times-mean
    m: jax.Array  # (d,) mean of Q
    v: jax.Array  # (d,) diagonal of V
    incl: jax.Array  # (d,) inclusion probabilities
    iteration: jax.Array
    max_change: jax.Array  # largest site change of the last sweep (`inference.ep.update.site_change`)
    num_clipped: jax.Array  # sites clipped to a positive precision in the last sweep
    num_skipped: jax.Array  # sites skipped (cavity precision <= 0) in the last sweep


def make_data(X, y, *, beta, slab_var, p_incl) -> EPData:
    d = np.shape(X)[1]
    p = np.broadcast_to(np.asarray(p_incl, float), (d,))
    return EPData(jnp.asarray(X, float), jnp.asarray(y, float), jnp.asarray(beta, float),
                  jnp.broadcast_to(jnp.asarray(slab_var, float), (d,)), jnp.asarray(np.log(p) - np.log1p(-p)))


def _global(data: EPData, tau, nu):
    """Mean and diagonal covariance of Q; also ``log|P|`` with ``P = diag(tau) + beta X^T X``."""
    X, beta = data.X, data.beta
    n, d = X.shape
    if not use_woodbury(n, d, X.dtype):
        P = jnp.diag(tau) + beta * (X.T @ X)
        L = jnp.linalg.cholesky(P)
        Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(d), lower=True)
        m = Linv.T @ (Linv @ (nu + beta * (X.T @ data.y)))
        return m, jnp.sum(Linv**2, axis=0), 2 * jnp.sum(jnp.log(jnp.diag(L)))
    A, Linv, logdet_b = _woodbury(X, beta, tau)
    v = 1.0 / tau - jnp.sum(A**2, axis=0)
    mu0 = nu / tau
    m = mu0 + A.T @ (Linv @ (data.y - X @ mu0))
    return m, v, jnp.sum(jnp.log(tau)) + n * jnp.log(beta) + logdet_b


def _woodbury(X, beta, tau):
    """``A = L^-1 X Lam^-1`` with ``L L^T = B = I / beta + X Lam^-1 X^T`` (so ``V = Lam^-1 - A^T A``),
    ``L^-1`` and ``log|B|``: n x n factorisations only, the O(n^2 d) work in two matrix products."""
    n = X.shape[0]
    XL = X / tau
    L = jnp.linalg.cholesky(jnp.eye(n) / beta + XL @ X.T)
    Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(n), lower=True)
    return Linv @ XL, Linv, 2 * jnp.sum(jnp.log(jnp.diag(L)))


def _site_targets(tau_c, nu_c, slab_var, logit_p):
    """New site parameters from the tilted moments, with clipping of negative precisions."""
    t = spike_slab_tilted(tau_c, nu_c, slab_var, logit_p)
    lo, hi = TAU_MIN / slab_var, TAU_MAX / slab_var
    tau_new = 1.0 / jnp.maximum(t.var, 1e-300) - tau_c
    clipped = tau_new < lo
    tau_new = jnp.clip(tau_new, lo, hi)
    nu_new = t.mean * (tau_c + tau_new) - nu_c  # matches the tilted mean even when clipped
    return tau_new, nu_new, t, clipped


def init(data: EPData) -> EPState:
    """Sites start at the Gaussian with the prior's variance ``p v_s``."""
    p = jax.nn.sigmoid(data.logit_p)
    tau = 1.0 / (p * data.slab_var)
    nu = jnp.zeros_like(tau)
    m, v, _ = _global(data, tau, nu)
    z = jnp.asarray(0, jnp.int32)
    return EPState(tau, nu, m, v, p, z, jnp.asarray(jnp.inf, tau.dtype), z, z)


def _roundoff(v, tau_c, nu_c, mt, vt, ok):
    """`inference.ep.update.roundoff` of sites with marginal variance ``v``, cavity natural
    parameters ``tau_c``, ``nu_c`` and tilted mean and variance ``mt``, ``vt``; zero where skipped
    (``~ok``: a zero cavity variance, which `roundoff` reads as a skipped site)."""
    cv = jnp.where(ok, 1.0 / jnp.where(ok, tau_c, 1.0), 0.0)
    return roundoff(v, mt, vt, nu_c * cv, cv)


def _prior_roundoff(v, tau_c, nu_c, mt, vt, ok):
    """`_roundoff` of spike-and-slab prior sites, plus the round-off their cavity brings:
    ``tau_c = 1/v - tau`` carries ``eps (1/v + tau)``, and the tilted precision of a mixture moves
    with its cavity's in proportion (``1/vt`` over ``tau_c``), so the new site moves by
    ``eps (1 + tau v) cv / vt`` of its marginal (`ROUNDOFF` times that). It matters where the site
    holds most of its marginal (``tau v`` -> 1: excluded genes): float32, 60 x 50, such a site at
    ``tau v = 0.992`` moved by 2e-5 a sweep for ever (0.7 of this term) and EP never converged,
    although its inclusion probabilities were within 8e-7 of float64's."""
    eps = jnp.finfo(v.dtype).eps
    good = ok & (vt > 0) & (tau_c > 0)
    cavity = ROUNDOFF * eps * (2.0 - tau_c * v) / jnp.where(good, tau_c * vt, 1.0)
    return _roundoff(v, tau_c, nu_c, mt, vt, ok) + jnp.where(good & jnp.isfinite(cavity), cavity, 0.0)


def update(state: EPState, data: EPData, damping) -> EPState:
    """One parallel (all sites at once, damped) sweep."""
    tau_c = 1.0 / state.v - state.tau
    nu_c = state.m / state.v - state.nu
    ok = tau_c > 0
    tau_new, nu_new, t, clipped = _site_targets(jnp.where(ok, tau_c, 1.0), nu_c, data.slab_var, data.logit_p)
    tau = jnp.where(ok, damping * tau_new + (1 - damping) * state.tau, state.tau)
    nu = jnp.where(ok, damping * nu_new + (1 - damping) * state.nu, state.nu)
    m, v, _ = _global(data, tau, nu)
    incl = jnp.where(ok, t.incl, state.incl)
    floor = _prior_roundoff(state.v, tau_c, nu_c, t.mean, t.var, ok)
    change = site_change(state.tau, state.nu, tau, nu, state.v, floor)
    return EPState(tau, nu, m, v, incl, state.iteration + 1, change,
                   jnp.sum(clipped & ok).astype(jnp.int32), jnp.sum(~ok).astype(jnp.int32))


def update_sequential(state: EPState, data: EPData, damping) -> EPState:
    """One sequential sweep: sites one at a time, ``V`` kept exactly by rank-one updates.

    Stores the d x d covariance (O(d^2) memory, O(d^3) per sweep): used unless `use_woodbury`."""
    X, beta = data.X, data.beta
    d = X.shape[1]
    P = jnp.diag(state.tau) + beta * (X.T @ X)
    V = jnp.linalg.inv(P)
    V = 0.5 * (V + V.T)
    m = V @ (state.nu + beta * (X.T @ data.y))

    def body(carry, j):
        tau, nu, V, m, incl, nclip, nskip = carry
        vj, mj = V[j, j], m[j]
        tau_c, nu_c = 1.0 / vj - tau[j], mj / vj - nu[j]
        ok = tau_c > 0
        tn, nn, t, clipped = _site_targets(jnp.where(ok, tau_c, 1.0), nu_c, data.slab_var[j], data.logit_p[j])
        d_tau = jnp.where(ok, damping * (tn - tau[j]), 0.0)
        d_nu = jnp.where(ok, damping * (nn - nu[j]), 0.0)
        col = V[:, j]
        den = 1.0 + d_tau * vj
        V = V - (d_tau / den) * jnp.outer(col, col)
        m = m + col * (d_nu - d_tau * mj) / den
        carry = (tau.at[j].add(d_tau), nu.at[j].add(d_nu), V, m, incl.at[j].set(jnp.where(ok, t.incl, incl[j])),
                 nclip + (clipped & ok), nskip + (~ok))
        return carry, _prior_roundoff(vj, tau_c, nu_c, t.mean, t.var, ok)

    z = jnp.asarray(0, jnp.int32)
    (tau, nu, V, _, incl, nclip, nskip), floor = lax.scan(body, (state.tau, state.nu, V, m, state.incl, z, z),
                                                          jnp.arange(d))
    m, v, _ = _global(data, tau, nu)
    return EPState(tau, nu, m, v, incl, state.iteration + 1, site_change(state.tau, state.nu, tau, nu, v, floor),
                   nclip, nskip)


def update_sequential_dual(state: EPState, data: EPData, damping) -> EPState:
    """One sequential sweep in the n x n Woodbury form, for d > n: keeps ``B^-1`` (``B = I / beta +
    X Lam^-1 X^T``) and ``r = B^-1 (y - X mu0)`` (``mu0 = nu / tau``), from which ``v_j = 1/tau_j -
    x_j^T B^-1 x_j / tau_j^2`` and ``m_j = mu0_j + x_j^T r / tau_j``; a site update changes ``B`` by
    the rank one ``delta(1/tau_j) x_j x_j^T``. O(n^2) per site, O(n^2 d) per sweep (as a parallel
    sweep), memory O(n d): no d x d covariance."""
    X, beta = data.X, data.beta
    n = X.shape[0]
    L = jnp.linalg.cholesky(jnp.eye(n) / beta + (X / state.tau) @ X.T)
    Binv = jax.scipy.linalg.cho_solve((L, True), jnp.eye(n))
    r = Binv @ (data.y - X @ (state.nu / state.tau))

    def body(carry, j):
        tau, nu, Binv, r, incl, nclip, nskip = carry
        xj = X[:, j]
        u = Binv @ xj
        s, xr = xj @ u, xj @ r
        tj, nj = tau[j], nu[j]
        vj = 1.0 / tj - s / tj**2
        mj = nj / tj + xr / tj
        tau_c, nu_c = 1.0 / vj - tj, mj / vj - nj
        ok = tau_c > 0
        tn, nn, t, clipped = _site_targets(jnp.where(ok, tau_c, 1.0), nu_c, data.slab_var[j], data.logit_p[j])
        t2 = jnp.where(ok, tj + damping * (tn - tj), tj)
        n2 = jnp.where(ok, nj + damping * (nn - nj), nj)
        delta = 1.0 / t2 - 1.0 / tj  # change of Lam^-1_jj
        c = delta / (1.0 + delta * s)
        dmu = n2 / t2 - nj / tj
        r = r - u * (c * xr + dmu * (1.0 - c * s))  # B'^-1 (e - dmu x_j), with u^T e = x_j^T r
        Binv = Binv - c * jnp.outer(u, u)
        carry = (tau.at[j].set(t2), nu.at[j].set(n2), Binv, r, incl.at[j].set(jnp.where(ok, t.incl, incl[j])),
                 nclip + (clipped & ok), nskip + (~ok))
        return carry, _prior_roundoff(vj, tau_c, nu_c, t.mean, t.var, ok)

    z = jnp.asarray(0, jnp.int32)
    (tau, nu, _, _, incl, nclip, nskip), floor = lax.scan(
        body, (state.tau, state.nu, Binv, r, state.incl, z, z), jnp.arange(X.shape[1]))
    m, v, _ = _global(data, tau, nu)
    return EPState(tau, nu, m, v, incl, state.iteration + 1, site_change(state.tau, state.nu, tau, nu, v, floor),
                   nclip, nskip)


def _step(data: EPData, sequential: bool):
    """The sweep: parallel, or sequential in the d x d form or the n x n form (`use_woodbury`)."""
    if not sequential:
        return update
    return update_sequential_dual if use_woodbury(*data.X.shape, data.X.dtype, sequential=True) else update_sequential


@partial(jax.jit, static_argnames=("sequential",))
def run(data: EPData, damping, tol, max_iter, sequential: bool = False) -> EPState:
    """Iterate sweeps under ``lax.while_loop`` until the largest change is below ``tol``."""
    return _iterate(_step(data, sequential), data, damping, tol, max_iter, init(data))


@partial(jax.jit, static_argnames=("sequential",))
def resume(state: EPState, data: EPData, damping, tol, max_iter, sequential: bool = True) -> EPState:
    """``run`` continued from ``state`` for up to ``max_iter`` more sweeps (the grid's second pass)."""
    return _iterate(_step(data, sequential), data, damping, tol, state.iteration + max_iter, state)


def _iterate(step, data, damping, tol, stop_at, state):
    return lax.while_loop(lambda s: (s.iteration < stop_at) & (s.max_change > tol),
                          lambda s: step(s, data, damping), state)


@jax.jit
def finalize(state: EPState, data: EPData):
    """Inclusion probabilities, the spike-and-slab marginals ``q*(z_j, w_j)`` (tilted at the final
    cavity) and the EP log evidence ``log Z_EP``."""
    tau_c = jnp.maximum(1.0 / state.v - state.tau, 0.0)
    nu_c = state.m / state.v - state.nu
    t = spike_slab_tilted(tau_c, nu_c, data.slab_var, data.logit_p)
    n, d = data.X.shape
    _, _, logdet = _global(data, state.tau, state.nu)
    h = state.nu + data.beta * (data.X.T @ data.y)
    log_gauss = (-0.5 * n * jnp.log(2 * jnp.pi) + 0.5 * n * jnp.log(data.beta) - 0.5 * data.beta * (data.y @ data.y)
                 + 0.5 * d * jnp.log(2 * jnp.pi) - 0.5 * logdet + 0.5 * h @ state.m)
    log_z = log_gauss + jnp.sum(t.log_z - log_partition(1.0 / state.v, state.m / state.v))
    return t.incl, t.slab_mean, t.slab_var, log_z


@jax.jit
def predictive(state: EPState, data: EPData, X_new):
    """Mean and variance of ``f* = X_new w`` under ``Q`` (full covariance, `use_woodbury` form)."""
    X, beta = data.X, data.beta
    n, d = X.shape
    mean = X_new @ state.m
    if not use_woodbury(n, d, X.dtype):
        P = jnp.diag(state.tau) + beta * (X.T @ X)
        L = jnp.linalg.cholesky(P)
        A = jax.scipy.linalg.solve_triangular(L, X_new.T, lower=True)
        return mean, jnp.sum(A**2, axis=0)
    A, _, _ = _woodbury(X, beta, state.tau)
    return mean, jnp.sum(X_new**2 / state.tau, axis=1) - jnp.sum((A @ X_new.T) ** 2, axis=0)
