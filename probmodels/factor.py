"""Bayesian factor analysis and probabilistic PCA with the factors summed out (Tipping & Bishop
1999; Bishop 2006, sec. 12.2; Alpaydin ch. 6), and the closed-form maximum-likelihood PPCA.

    f_i ~ N(0, I_q),  y_i | f_i ~ N(loc + loadings f_i, Psi)   =>   y_i ~ N(loc, loadings loadings^T + Psi)

``factor_analysis``: Psi = diag(``noise``), one variance per feature; ``ppca``: Psi = ``noise`` I,
one variance. The engines see the marginal (one log-likelihood term per row, a low-rank-plus-
diagonal Gaussian, O(p q^2) per row), and the factors are recovered per draw from their Gaussian
conditional, N(M^-1 W^T Psi^-1 (y - loc), M^-1) with M = I + W^T Psi^-1 W (site ``factors``, (n, q)).

Rotations: the likelihood depends on the loadings W only through W W^T, so W R fits as well for any
orthogonal R, and chains would wander among rotations and sign flips. The loadings are therefore
lower triangular with a positive diagonal (W_jk = 0 for k > j, W_jj > 0; Geweke & Zhou 1996,
Lopes & West 2004): that fixes R whenever the first q rows are linearly independent. The first q
features are the anchors: feature j has no loading on factors after the j-th, so put features that
each measure a different factor first. Sites ``loadings_diag`` (q,) > 0 and ``loadings_lower``
(the p q - q (q + 1) / 2 entries below the diagonal), and the deterministic ``loadings`` (p, q).
`lower_triangular` rotates any W into that form (e.g. `ppca_ml`'s, for comparison).

Priors (in units of each feature's standard deviation s_j; without data s_j = 1, mean 0):
``loc_j ~ N(mean_j, s_j^2)``, every free loading in row j ~ N(0, (loading_scale s_j)^2) (the
diagonal half-normal), and each noise variance ~ InverseGamma(a, b s_j^2) with ``noise_prior=(a, b)``,
default (2, 0.5) (PPCA: b times the mean variance): prior mean half the variance, vanishing density
at 0 (no Heywood cases at zero noise).

Every engine (NUTS, autoguide VI, Laplace; EP does not apply) starts from `start`: the ML PPCA of a
Bayesian bootstrap of the rows (a new one per chain), rotated to the lower-triangular form.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.factor import ppca, ppca_ml, simulate
    >>> sim = simulate(3000, 6, 2, seed=0)
    >>> post = inference.laplace(ppca, sim.Y, num_factors=2, num_samples=50)
    >>> ml = ppca_ml(sim.Y, 2)
    >>> bool(np.max(np.abs(post.mean("loadings") - ml.loadings)) < 0.05), post.samples["factors"].shape
    (True, (1, 50, 3000, 2))
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from inference.latent import Start, bootstrap_weights, recovered
from probmodels import _checks

NOISE_PRIOR = (2.0, 0.5)


# ----------------------------------------------------------------------------- rotations, ML PPCA
def lower_triangular(W):
    """``W R`` for the orthogonal ``R`` that makes it lower triangular with a non-negative diagonal
    (the rotation fixed by the models): from the QR decomposition of the first q rows. Works on
    NumPy and JAX arrays (p, q), p >= q.

    Example:
        >>> import numpy as np
        >>> W = np.random.default_rng(0).normal(size=(4, 2))
        >>> L = lower_triangular(W)
        >>> bool(np.allclose(L @ L.T, W @ W.T)), float(L[0, 1]), bool(L[0, 0] > 0 and L[1, 1] > 0)
        (True, 0.0, True)
    """
    xp = jnp if isinstance(W, jax.Array) else np
    q = W.shape[1]
    rot, _ = xp.linalg.qr(W[:q].T)
    L = W @ rot
    sign = xp.where(xp.diagonal(L[:q]) < 0, -1.0, 1.0)
    L = L * sign
    return xp.where(xp.arange(q)[None, :] > xp.arange(L.shape[0])[:, None], 0.0, L)


class PPCAFit(NamedTuple):
    """Closed-form ML PPCA: ``loc`` (p,), ``loadings`` (p, q) in the lower-triangular form,
    ``noise`` (the variance sigma^2), ``log_likelihood`` at them."""

    loc: np.ndarray
    loadings: np.ndarray
    noise: float
    log_likelihood: float


def ppca_ml(Y, num_factors: int) -> PPCAFit:
    """Maximum-likelihood PPCA (Tipping & Bishop 1999, eqs. 7-8): with the eigenvalues l_1 >= ... of
    the sample covariance S (divisor n), sigma^2 = mean(l_{q+1..p}) and W = U_q (L_q - sigma^2 I)^(1/2),
    rotated by `lower_triangular`.

    Example:
        >>> import numpy as np
        >>> from probmodels.factor import ppca_ml, simulate
        >>> sim = simulate(20000, 4, 1, seed=0, noise=0.25)
        >>> fit = ppca_ml(sim.Y, 1)
        >>> round(fit.noise, 2), bool(np.allclose(fit.loadings, sim.loadings, atol=0.03))
        (0.25, True)
    """
    Y = _checks.matrix(Y, "Y")
    n, p = Y.shape
    q = _num_factors(num_factors, p)
    loc = Y.mean(0)
    S = np.cov(Y, rowvar=False, bias=True).reshape(p, p)
    evals, evecs = np.linalg.eigh(S)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    sigma2 = float(evals[q:].mean())
    W = lower_triangular(evecs[:, :q] * np.sqrt(np.maximum(evals[:q] - sigma2, 0.0)))
    C = W @ W.T + sigma2 * np.eye(p)
    _, logdet = np.linalg.slogdet(C)
    ll = -0.5 * n * (p * np.log(2 * np.pi) + logdet + np.trace(np.linalg.solve(C, S)))
    return PPCAFit(loc, W, sigma2, float(ll))


# ----------------------------------------------------------------------------- inputs
def _num_factors(value, p):
    q = _checks.positive_int(value, "num_factors")
    if q >= p:
        raise ValueError(f"num_factors must be smaller than the number of features ({p}), got {q}")
    return q


def _data(Y, num_points, num_features):
    if Y is None:
        if num_points is None or num_features is None:
            raise ValueError("num_points and num_features are required when Y is None (what to simulate)")
        return None, _checks.positive_int(num_points, "num_points"), _checks.positive_int(num_features, "num_features")
    if num_points is not None or num_features is not None:
        raise ValueError("num_points and num_features apply only when Y is None (Y's shape is used)")
    Y = _checks.matrix(Y, "Y")
    return Y, Y.shape[0], Y.shape[1]


def _lower_indices(p, q):
    """Row and column indices of the free entries strictly below the diagonal of a (p, q) matrix."""
    return np.tril_indices(p, -1, q)


# ----------------------------------------------------------------------------- start
@functools.partial(jax.jit, static_argnames=("num_factors", "isotropic"))
def start(rng_key, Y, num_factors: int, isotropic: bool) -> dict:
    """A data-driven start: ML PPCA (`ppca_ml`'s formulas) of a Bayesian bootstrap of the rows
    (each key another start), loadings in the lower-triangular form; factor analysis starts its
    noise variances at diag(S - W W^T), floored at 5% of each feature's variance."""
    n, p = Y.shape
    q = num_factors
    w = bootstrap_weights(rng_key, jnp.ones((n,), bool))
    w = w / w.sum()
    loc = w @ Y
    R = Y - loc
    S = (R * w[:, None]).T @ R
    evals, evecs = jnp.linalg.eigh(S)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    sigma2 = jnp.mean(evals[q:])
    var = jnp.diag(S)
    tiny = 1e-3 * jnp.sqrt(jnp.mean(var))
    W = lower_triangular(evecs[:, :q] * jnp.sqrt(jnp.maximum(evals[:q] - sigma2, tiny**2)))
    rows, cols = _lower_indices(p, q)
    out = {"loc": loc, "loadings_diag": jnp.maximum(jnp.diagonal(W[:q]), tiny), "loadings_lower": W[rows, cols]}
    if isotropic:
        out["noise"] = jnp.maximum(sigma2, 1e-3 * jnp.mean(var))
    else:
        out["noise"] = jnp.maximum(var - jnp.sum(W**2, 1), 0.05 * var)
    return out


def _infer(Y, q, isotropic):
    if Y is None:
        return lambda name: {}
    memo = {}

    def value(name, rng_key):
        if "start" not in memo:
            memo["start"] = start(rng_key, Y, q, isotropic)
        return memo["start"][name]

    return lambda name: {"init": Start(functools.partial(value, name), f"probmodels.factor.start {name}")}


# ----------------------------------------------------------------------------- model
def _model(Y, num_factors, isotropic, loading_scale, noise_prior, num_points, num_features):
    Y, n, p = _data(Y, num_points, num_features)
    q = _num_factors(num_factors, p)
    loading_scale = _checks.positive(loading_scale, "loading_scale")
    a, b = _checks.positive_pair(noise_prior, "noise_prior")
    dtype = jnp.result_type(float)
    if Y is None:
        mean, var = jnp.zeros(p, dtype), jnp.ones(p, dtype)
    else:  # NumPy for concrete data: no eager JAX dispatch (one compilation per operation in a new process)
        xp = jnp if _checks.is_traced(Y) else np
        mean, var = xp.mean(Y, 0), xp.var(Y, 0)
        var = xp.where(var > 0, var, 1.0)
        mean, var = jnp.asarray(mean, dtype), jnp.asarray(var, dtype)
    sd = jnp.sqrt(var)
    infer = _infer(Y, q, isotropic)
    loc = numpyro.sample("loc", dist.Normal(mean, sd).to_event(1), infer=infer("loc"))
    rows, cols = _lower_indices(p, q)
    diag = numpyro.sample("loadings_diag", dist.HalfNormal(loading_scale * sd[:q]).to_event(1),
                          infer=infer("loadings_diag"))
    lower = numpyro.sample("loadings_lower", dist.Normal(jnp.zeros(len(rows), dtype), loading_scale * sd[rows]).to_event(1),
                           infer=infer("loadings_lower"))
    W = jnp.zeros((p, q), dtype).at[rows, cols].set(lower).at[np.arange(q), np.arange(q)].set(diag)
    W = numpyro.deterministic("loadings", W)
    if isotropic:
        noise = numpyro.sample("noise", dist.InverseGamma(a, b * jnp.mean(var)), infer=infer("noise"))
        psi = jnp.broadcast_to(noise, (p,))
    else:
        psi = numpyro.sample("noise", dist.InverseGamma(a, b * var).to_event(1), infer=infer("noise"))
    with numpyro.plate("point", n):
        obs = numpyro.sample("Y", dist.LowRankMultivariateNormal(loc, W, psi), obs=Y)
    if Y is not None:
        recovered("factors", lambda key: factor_draws(key, obs, loc, W, psi))


def factor_draws(rng_key, Y, loc, loadings, noise):
    """One draw of the factors (n, q) from their conditional given the data and parameters (``noise``
    the (p,) diagonal of Psi): N(M^-1 W^T Psi^-1 (y - loc), M^-1), M = I + W^T Psi^-1 W."""
    q = loadings.shape[1]
    Wp = loadings / noise[:, None]
    M = jnp.eye(q, dtype=loadings.dtype) + loadings.T @ Wp
    chol = jnp.linalg.cholesky(M)
    mean = jax.scipy.linalg.cho_solve((chol, True), Wp.T @ (Y - loc).T).T
    eps = jax.random.normal(rng_key, mean.shape, mean.dtype)
    # M^-1 = L^-T L^-1: L^-T eps has covariance M^-1
    return mean + jax.scipy.linalg.solve_triangular(chol, eps.T, lower=True, trans="T").T


def factor_analysis(Y, num_factors=1, *, loading_scale=1.0, noise_prior=NOISE_PRIOR, num_points=None, num_features=None):
    """Bayesian factor analysis, one noise variance per feature; sites ``loc`` (p,),
    ``loadings_diag``, ``loadings_lower``, deterministic ``loadings`` (p, q), ``noise`` (p,)
    variances, ``Y``, recovered ``factors`` (n, q). ``Y=None`` (with ``num_points``,
    ``num_features``) simulates.

    Example (a draw from the prior; ``inference.laplace(factor_analysis, Y, num_factors=2)`` fits):
        >>> import numpyro
        >>> from probmodels.factor import factor_analysis, simulate
        >>> sim = simulate(50, 5, 2, seed=0, noise=[0.1, 0.2, 0.3, 0.4, 0.5])
        >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(factor_analysis, 0)).get_trace(sim.Y, 2)
        >>> tr["loadings"]["value"].shape, tr["noise"]["value"].shape, float(tr["loadings"]["value"][0, 1])
        ((5, 2), (5,), 0.0)
    """
    _model(Y, num_factors, False, loading_scale, noise_prior, num_points, num_features)


def ppca(Y, num_factors=1, *, loading_scale=1.0, noise_prior=NOISE_PRIOR, num_points=None, num_features=None):
    """Bayesian probabilistic PCA: `factor_analysis` with one noise variance ``noise`` (a scalar
    site) for every feature. `ppca_ml` is its closed-form maximum-likelihood fit.

    Example (the module's example, whose fit it reuses):
        >>> import numpy as np, inference
        >>> from probmodels.factor import ppca, ppca_ml, simulate
        >>> sim = simulate(3000, 6, 2, seed=0)
        >>> post = inference.laplace(ppca, sim.Y, num_factors=2, num_samples=50)
        >>> bool(abs(post.mean("noise") - ppca_ml(sim.Y, 2).noise) < 0.01)
        True
    """
    _model(Y, num_factors, True, loading_scale, noise_prior, num_points, num_features)


# ----------------------------------------------------------------------------- simulation, demo
class FactorData(NamedTuple):
    """Simulated factor-analysis data: ``Y`` (n, p), the ``factors`` (n, q), ``loc``, ``loadings``
    (lower triangular, positive diagonal) and ``noise`` (p,) variances."""

    Y: np.ndarray
    factors: np.ndarray
    loc: np.ndarray
    loadings: np.ndarray
    noise: np.ndarray


def simulate(n: int, num_features: int, num_factors: int, seed: int = 0, *, noise=0.25, loadings=None) -> FactorData:
    """Draw ``n`` rows: loadings N(0, 1) in the lower-triangular form (diagonal made >= 0.5)
    unless given, loc N(0, 1), ``noise`` a variance or (p,) variances.

    Example:
        >>> sim = simulate(10, 4, 2, seed=0)
        >>> sim.Y.shape, sim.factors.shape, float(sim.loadings[0, 1])
        ((10, 4), (10, 2), 0.0)
    """
    n = _checks.positive_int(n, "n")
    p = _checks.positive_int(num_features, "num_features")
    q = _num_factors(num_factors, p)
    rng = np.random.default_rng(seed)
    if loadings is None:
        W = lower_triangular(rng.normal(size=(p, q)))
        W[np.arange(q), np.arange(q)] = np.maximum(W[np.arange(q), np.arange(q)], 0.5)
    else:
        W = np.asarray(loadings, float)
    psi = np.broadcast_to(np.asarray(noise, float), (p,)).copy()
    loc = rng.normal(size=p)
    F = rng.normal(size=(n, q))
    Y = loc + F @ W.T + rng.normal(size=(n, p)) * np.sqrt(psi)
    return FactorData(Y, F, loc, W, psi)


def demo_cases():
    """Simulated data (400 rows, 6 features, 2 factors, unequal noise) under factor analysis with
    NUTS, mean-field VI and Laplace, scored by the largest error of the posterior-mean noise
    variances against the truth, and PPCA scored against its closed-form ML fit (`ppca_ml`)."""
    from probmodels.demo import Case

    sim = simulate(400, 6, 2, seed=0, noise=[0.1, 0.2, 0.3, 0.2, 0.1, 0.3])
    ml = ppca_ml(sim.Y, 2)

    def score_fa(post):
        err = float(np.max(np.abs(post.mean("noise") - sim.noise)))
        return "max |noise - truth|", err, f"{err:.3f} (true variances {sim.noise.tolist()})"

    def score_ppca(post):
        ww = post.mean("loadings") @ post.mean("loadings").T
        err = float(np.max(np.abs(ww - ml.loadings @ ml.loadings.T)))
        return "max |W W^T - ML|", err, f"{err:.3f}; noise {float(post.mean('noise')):.3f} (ML {ml.noise:.3f})"

    options = {"mcmc": {"num_samples": 500, "num_warmup": 500, "num_chains": 2}, "laplace": {"num_samples": 500}}
    return [Case("factor_analysis", factor_analysis, (sim.Y,), {"num_factors": 2}, ("mcmc", "vi", "laplace"),
                 score_fa, options),
            Case("ppca", ppca, (sim.Y,), {"num_factors": 2}, ("mcmc", "vi", "laplace"), score_ppca, options)]


__all__ = ["factor_analysis", "ppca", "ppca_ml", "PPCAFit", "lower_triangular", "factor_draws", "simulate",
           "FactorData", "start", "demo_cases"]
