"""The global Gaussian of EP from the site parameters, in the problem's working coordinates.

Weight space: precision ``C = I + P^T T P`` (one ``d x d`` Cholesky). Function space:
``Sigma = K - K S M^{-1} S K`` with ``S = sqrt|T|`` and ``M = sign(T) + S K S`` (Rasmussen &
Williams' ``B`` when every site precision is non-negative, then a Cholesky; an LU solve and a
positive-definiteness check when some are negative). No inverse of ``K`` is ever formed, so
near-singular kernel matrices are fine.

Example:
    >>> import jax.numpy as jnp
    >>> from inference.ep.problem import EPProblem
    >>> p = EPProblem("function", None, jnp.eye(2), jnp.zeros(2), ())
    >>> mean, cov, ok = from_sites(p, jnp.ones(2), jnp.ones(2))
    >>> [round(float(x), 12) for x in jnp.diag(cov)], bool(ok)
    ([0.5, 0.5], True)
    >>> [round(float(x), 12) for x in site_moments(p, jnp.ones(2), jnp.ones(2))[1]]
    [0.5, 0.5]
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import cho_solve, solve_triangular


def _finite(*xs):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in xs]))


def _sym(a):
    return 0.5 * (a + a.T)


def _weight(problem, tau, nu):
    P = problem.proj
    d = P.shape[1]
    C = jnp.eye(d, dtype=P.dtype) + P.T @ (tau[:, None] * P)
    L = jnp.linalg.cholesky(C)
    return C, L, _finite(L)


def _function_parts(K, tau):
    """(S, M factor, log|det M|, solve) with S = sqrt|tau|; solve(X) = M^{-1} X."""
    n = K.shape[0]
    eye = jnp.eye(n, dtype=K.dtype)
    s = jnp.sqrt(jnp.abs(tau))
    SKS = s[:, None] * K * s[None, :]

    def positive(_):
        L = jnp.linalg.cholesky(eye + SKS)
        return L, 2.0 * jnp.sum(jnp.log(jnp.diag(L))), jnp.zeros((n, n), K.dtype), jnp.zeros(n, jnp.int32)

    def general(_):
        M = jnp.diag(jnp.where(tau >= 0, 1.0, -1.0).astype(K.dtype)) + SKS
        lu, piv, _perm = lax.linalg.lu(M)
        logdet = jnp.sum(jnp.log(jnp.abs(jnp.diag(lu))))
        return jnp.zeros((n, n), K.dtype), logdet, lu, piv.astype(jnp.int32)

    pos = jnp.all(tau >= 0)
    L, logdet, lu, piv = lax.cond(pos, positive, general, None)

    def solve(X):
        def chol_solve(X):
            return cho_solve((L, True), X)

        def lu_solve(X):
            return jax.scipy.linalg.lu_solve((lu, piv), X)

        return lax.cond(pos, chol_solve, lu_solve, X)

    return s, logdet, solve, pos


def large_sites(tau):
    """Sites whose precision is read as ``1 / |tau|`` noise (``sqrt|tau| > eps``): `site_alpha`
    divides by ``sqrt|tau|`` there, and `reduced_log_normaliser` takes ``nu^2 / (2 tau)`` out."""
    return jnp.sqrt(jnp.abs(tau)) > jnp.finfo(tau.dtype).eps


def site_alpha(K, tau, nu, s, solve):
    """``alpha = (I + T K)^-1 nu``: the prior-covariance weights of the posterior mean (``mean =
    K alpha``), for ``solve(X) = M^-1 X``, ``M = sign(T) + S K S``, ``S = sqrt|T|``.

    Written ``S M^-1 (sign(T) nu / S)`` at sites with ``S > 0`` (GPML's ``alpha = (K + T^-1)^-1
    T^-1 nu``), and by Woodbury ``r - S M^-1 S K r`` only for the part ``r`` of ``nu`` at sites
    with ``S = 0``, then one step of iterative refinement. The Woodbury form for all of ``nu``
    cancels terms of size ``nu = y / noise^2``: in float32 on GP regression with noise 0.01 it left
    the mean 1.2-3 posterior sds off at n = 60 and 11-64 sds at n = 500-1000, with or without a
    refinement step; this form is 0.02-0.14 sds, as good as a Cholesky of ``K + noise^2 I``
    (benchmarks/ep_mean_refinement.py)."""
    big = large_sites(tau)
    sign = jnp.where(tau >= 0, 1.0, -1.0).astype(K.dtype)
    inv_s = jnp.where(big, 1.0 / jnp.where(big, s, 1.0), 0.0)

    def apply(r):
        r0 = jnp.where(big, 0.0, r)
        return r0 + s * solve(sign * r * inv_s - s * (K @ r0))

    alpha = apply(nu)
    return alpha + apply(nu - alpha - tau * (K @ alpha))


def from_sites(problem, tau, nu):
    """(mean, cov, ok) of the global Gaussian; ``ok`` is False when it is not a valid Gaussian."""
    if problem.space == "weight":
        P = problem.proj
        _, L, ok = _weight(problem, tau, nu)
        cov = cho_solve((L, True), jnp.eye(P.shape[1], dtype=P.dtype))
        mean = cov @ (P.T @ nu)
        return mean, _sym(cov), ok & _finite(cov, mean)
    K = problem.prior_cov
    n = K.shape[0]
    eye = jnp.eye(n, dtype=K.dtype)

    def positive(_):  # Rasmussen & Williams alg. 3.5: B = I + S K S, Cholesky
        s = jnp.sqrt(tau)
        SK = s[:, None] * K
        L = jnp.linalg.cholesky(eye + SK * s[None, :])

        def solve(X):
            return cho_solve((L, True), X)

        # cho_solve then a product: measured faster on CPU than one triangular solve and V^T V
        cov = _sym(K - SK.T @ solve(SK))
        return K @ site_alpha(K, tau, nu, s, solve), cov, _finite(L)

    def general(_):  # some negative site precisions: M = sign(T) + S K S, LU; check PD after
        s = jnp.sqrt(jnp.abs(tau))
        SK = s[:, None] * K
        M = jnp.diag(jnp.where(tau >= 0, 1.0, -1.0).astype(K.dtype)) + SK * s[None, :]
        factors = jax.scipy.linalg.lu_factor(M)

        def solve(X):
            return jax.scipy.linalg.lu_solve(factors, X)

        cov = _sym(K - SK.T @ solve(SK))
        jitter = 1e-10 * jnp.mean(jnp.diag(K)) * eye
        ok = _finite(cov) & jnp.all(jnp.diag(cov) > 0) & _finite(jnp.linalg.cholesky(cov + jitter))
        return K @ site_alpha(K, tau, nu, s, solve), cov, ok

    mean, cov, ok = lax.cond(jnp.all(tau >= 0), positive, general, None)
    return mean, cov, ok & _finite(mean)


def site_moments(problem, tau, nu):
    """(mean, var, ok) of every site's projection ``z_i`` under the global Gaussian, without
    forming its covariance where that is avoidable: all a parallel EP sweep needs.

    Function space with non-negative site precisions: ``V = L^{-1} S K`` (one Cholesky, one
    triangular solve), ``var = diag(K) - colsum(V^2)``, ``mean = K alpha`` (`site_alpha`): ~1.3 n^3
    flops against ~4.3 n^3 for ``from_sites`` (Cholesky, two triangular solves and a product);
    measured 2-2.5x faster sweeps at n = 500-2000 (``benchmarks/ep_sweep_cost.py``).
    Otherwise (weight space, or some negative site precision) it reads them off ``from_sites``."""
    if problem.space == "function":
        K = problem.prior_cov
        n = K.shape[0]

        def positive(_):
            s = jnp.sqrt(tau)
            SK = s[:, None] * K
            L = jnp.linalg.cholesky(jnp.eye(n, dtype=K.dtype) + SK * s[None, :])
            V = solve_triangular(L, SK, lower=True)
            mean = K @ site_alpha(K, tau, nu, s, lambda X: cho_solve((L, True), X))
            var = jnp.diag(K) - jnp.sum(V * V, axis=0)
            return mean, var, _finite(L)

        def general(_):
            mean, cov, ok = from_sites(problem, tau, nu)
            return mean, jnp.diag(cov), ok

        mean, var, ok = lax.cond(jnp.all(tau >= 0), positive, general, None)
        return mean, var, ok & _finite(mean, var)
    mean, cov, ok = from_sites(problem, tau, nu)
    m, v = marginals(problem, mean, cov)
    return m, v, ok & _finite(m, v)


def marginals(problem, mean, cov):
    """Mean and variance of every site's projection ``z_i`` under ``N(mean, cov)``."""
    if problem.space == "weight":
        P = problem.proj
        return P @ mean, jnp.sum((P @ cov) * P, axis=1)
    return mean, jnp.diag(cov)


def reduced_log_normaliser(problem, tau, nu):
    """The Gaussian part of EP's log Z, ``log E_prior[prod_i exp(-tau_i z_i^2 / 2 + nu_i z_i)]``,
    less ``sum nu_i^2 / (2 tau_i)`` over `large_sites`: the site scales hold the same terms with
    the opposite sign, and `inference.ep.evidence.reduced_site_log_scale` takes them out there.

    Both halves are of size ``y^2 / noise^2`` for Gaussian sites of little noise and cancel in the
    evidence: summed as computed they left float32 log Z tens of nats off (GP regression, noise
    0.01, n = 500). Here the difference is formed in closed form: with ``m`` the site means and
    ``E`` the prior energy of the posterior mean (``alpha' K alpha``; weight space ``|v|^2``),
    ``nu' Sigma nu - sum_large nu^2 / tau = -E - sum_large tau (nu / tau - m)^2 + sum_other
    (2 nu m - tau m^2)``: the value at its stationary point of ``2 nu' f - f' T f - f' K^-1 f``,
    so round-off in ``m`` enters at second order only."""
    big = large_sites(tau)
    if problem.space == "weight":
        P = problem.proj
        _, L, _ = _weight(problem, tau, nu)
        v = cho_solve((L, True), P.T @ nu)
        m, energy = P @ v, jnp.dot(v, v)
        half_logdet = jnp.sum(jnp.log(jnp.diag(L)))
    else:
        K = problem.prior_cov
        s, logdet, solve, _ = _function_parts(K, tau)
        alpha = site_alpha(K, tau, nu, s, solve)
        m = K @ alpha
        energy, half_logdet = jnp.dot(alpha, m), 0.5 * logdet
    safe = jnp.where(big, tau, 1.0)
    fit = jnp.where(big, safe * (nu / safe - m) ** 2, tau * m * m - 2.0 * nu * m)
    return -0.5 * (energy + jnp.sum(fit)) - half_logdet


def gaussian_gradient_terms(K, tau, nu):
    """``(F, alpha)`` of GPML's EP gradient at fixed sites ``(tau, nu)`` (Rasmussen & Williams
    sec. 5.5.2): ``d log Z_EP = tr(F dK) / 2 + alpha' d offset`` at EP's fixed point, with
    ``alpha = (K + T^-1)^-1 T^-1 nu`` and ``F = alpha alpha' - (K + T^-1)^-1``, computed through
    ``M = sign(T) + S K S`` (``S = sqrt|T|``, `_function_parts`) so that zero or negative
    site precisions need no special case: ``(K + T^-1)^-1 = S M^-1 S``. One factorisation and one
    solve with n right-hand sides; no derivative of a factorisation."""
    s, _, solve, _ = _function_parts(K, tau)
    alpha = site_alpha(K, tau, nu, s, solve)
    R = s[:, None] * solve(jnp.diag(s))
    return jnp.outer(alpha, alpha) - 0.5 * (R + R.T), alpha


class LatentMap(NamedTuple):
    """How working coordinates map back to the model's latent vector ``u`` (arrays only).

    Weight space: ``u = m0 + L0 v`` (``L0`` the prior Cholesky factor). Function space: ``u``'s
    posterior from the sites through ``AS0 = A S0`` and the prior ``(m0, S0)``."""

    m0: jax.Array
    L0: jax.Array | None
    S0: jax.Array | None
    AS0: jax.Array | None


def to_latent(problem, latent: LatentMap, tau, nu):
    """(mean, cov) of the latent vector ``u`` under the EP approximation."""
    if problem.space == "weight":
        mean, cov, _ = from_sites(problem, tau, nu)
        L0 = latent.L0
        return latent.m0 + L0 @ mean, _sym(L0 @ cov @ L0.T)
    K = problem.prior_cov
    s, _, solve, _ = _function_parts(K, tau)
    W = s[:, None] * latent.AS0
    alpha = site_alpha(K, tau, nu, s, solve)
    mean = latent.m0 + latent.AS0.T @ alpha
    cov = latent.S0 - W.T @ solve(W)
    return mean, _sym(cov)
