"""Exact posterior of conjugate spike-and-slab regression by enumerating all 2^d models.

For each inclusion pattern ``A`` the weights (and, in the Normal-Gamma case, the noise precision)
integrate out in closed form, so ``p(A | y)`` and hence the inclusion probabilities and the log
evidence are exact. This is the reference the tests hold MCMC, EP and VI to; it is only practical
for d <= ~14.

In unit-noise form (rows already divided by the noise scale; see ``structure.extract``), with
``C_A = I + X_A S_A X_A^T``, ``S_A`` the slab variances:

* fixed noise: ``y | A ~ N(0, C_A)``;
* Gamma(a, b) precision, slab ``S / tau``: ``y | A ~ Student``, ``log p = log G(a + n/2) - log G(a)
  + a log b - n/2 log(2 pi) - 1/2 log|C_A| - (a + n/2) log(b + y^T C_A^-1 y / 2)``.

Example:
    >>> import numpy as np
    >>> res = enumerate_models(np.eye(2), np.array([3.0, 0.0]), p_incl=np.full(2, 0.5), slab_var=np.ones(2))
    >>> [round(float(v), 3) for v in res.inclusion]
    [0.87, 0.414]
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, logsumexp

from inference import compiled

MAX_FEATURES = 16


class ExactResult(NamedTuple):
    log_evidence: jax.Array  # log p(y)
    inclusion: jax.Array  # (d,) P(z_j = 1 | y)
    w_mean: jax.Array  # (d,) E[w | y]
    models: jax.Array  # (2^d, d) inclusion patterns
    model_log_prob: jax.Array  # (2^d,) log p(A | y)
    precision_mean: jax.Array  # E[tau | y] (1.0 with fixed noise)


@compiled.scoped  # full-precision matrix products (a GPU's default is TF32 for float32)
def enumerate_models(X, y, *, p_incl, slab_var, noise_prior=None, log_scale_adjust=0.0) -> ExactResult:
    """Exact model probabilities for unit-noise data (see module docstring)."""
    X, y = np.asarray(X, float), np.asarray(y, float)
    n, d = X.shape
    if d > MAX_FEATURES:
        raise ValueError(f"X: exact enumeration needs d <= {MAX_FEATURES} features, got {d}")
    models = np.asarray(list(itertools.product((0, 1), repeat=d)), dtype=float)
    p = np.broadcast_to(np.asarray(p_incl, float), (d,))
    s2 = np.broadcast_to(np.asarray(slab_var, float), (d,))
    a, b = (1.0, 1.0) if noise_prior is None else (float(v) for v in noise_prior)
    return _enumerate(X, y, models, p, s2, a, b, log_scale_adjust, gamma=noise_prior is not None)


@partial(jax.jit, static_argnames=("gamma",))
def _enumerate(X, y, models, p, s2, a, b, log_scale_adjust, gamma):
    n = X.shape[0]
    G, Xty, yty = X.T @ X, X.T @ y, y @ y

    def one(m):
        M = jnp.diag(jnp.where(m > 0, 1.0 / s2, 1.0)) + (m[:, None] * G * m[None, :])
        L = jnp.linalg.cholesky(M)
        v = jax.scipy.linalg.solve_triangular(L, m * Xty, lower=True)
        logdet_c = 2 * jnp.sum(jnp.log(jnp.diag(L))) + jnp.sum(m * jnp.log(s2))
        mean = jax.scipy.linalg.solve_triangular(L.T, v, lower=False)
        log_prior = jnp.sum(m * jnp.log(p) + (1 - m) * jnp.log1p(-p))
        return log_prior, logdet_c, yty - v @ v, mean

    log_prior, logdet_c, quad, means = jax.vmap(one)(models)
    if gamma:
        an = a + 0.5 * n
        loglik = (gammaln(an) - gammaln(a) + a * jnp.log(b) - 0.5 * n * math.log(2 * math.pi)
                  - 0.5 * logdet_c - an * jnp.log(b + 0.5 * quad))
        prec_mean = an / (b + 0.5 * quad)
    else:
        loglik = -0.5 * n * math.log(2 * math.pi) - 0.5 * logdet_c - 0.5 * quad
        prec_mean = jnp.ones_like(quad)
    joint = log_prior + loglik + log_scale_adjust
    log_ev = logsumexp(joint)
    post = joint - log_ev
    wts = jnp.exp(post)
    return ExactResult(log_ev, wts @ models, wts @ means, models.astype(jnp.int32), post, wts @ prec_mean)


@compiled.scoped  # full-precision matrix products (a GPU's default is TF32 for float32)
def exact_posterior(model, *args, **kwargs) -> ExactResult:
    """Enumerate a conjugate spike-and-slab regression model directly (a testing reference).

    >>> import numpy as np
    >>> from probmodels.spike_slab import spike_and_slab_regression
    >>> X = np.random.default_rng(0).normal(size=(30, 4)); y = 2 * X[:, 0]
    >>> float(exact_posterior(spike_and_slab_regression, X, y, p_incl=0.3).inclusion[0]) > 0.99
    True
    """
    from inference._model import trace_model
    from inference.spikeslab.structure import extract

    prob = extract(model, args, kwargs, trace_model(model, args, kwargs))
    if prob.likelihood != "gaussian" or prob.y is None:
        raise ValueError("model: exact enumeration needs a Gaussian likelihood with observed y")
    return enumerate_models(prob.X, prob.y, p_incl=prob.p_incl, slab_var=prob.slab_var,
                            noise_prior=prob.noise_prior, log_scale_adjust=prob.log_scale_adjust)


class ExactProbit(NamedTuple):
    log_evidence: float
    inclusion: np.ndarray  # (d,)
    model_log_prob: np.ndarray  # (2^d,)


@compiled.scoped  # full-precision matrix products (a GPU's default is TF32 for float32)
def enumerate_probit(X, y, *, p_incl, slab_var, offset=None, num_nodes=40) -> ExactProbit:
    """Reference posterior of spike-and-slab probit for tiny d (<= 4): every inclusion pattern, with
    the weights integrated by a tensor Gauss-Hermite rule (``num_nodes`` per included weight).

    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = np.sign(X[:, 0])
    >>> float(enumerate_probit(X, y, p_incl=np.full(2, 0.5), slab_var=np.ones(2)).inclusion[0]) > 0.99
    True
    """
    from scipy.special import log_ndtr as np_log_ndtr
    from scipy.special import logsumexp as np_logsumexp

    X, y = np.asarray(X, float), np.asarray(y, float)
    n, d = X.shape
    if d > 4:
        raise ValueError(f"X: probit enumeration integrates up to d = 4 weights by quadrature, got d = {d}")
    b = np.zeros(n) if offset is None else np.asarray(offset, float)
    p = np.broadcast_to(np.asarray(p_incl, float), (d,))
    s = np.sqrt(np.broadcast_to(np.asarray(slab_var, float), (d,)))
    nodes, weights = np.polynomial.hermite_e.hermegauss(num_nodes)
    log_w = np.log(weights / np.sqrt(2 * np.pi))
    models = np.array(list(itertools.product((0, 1), repeat=d)))
    joint = []
    for m in models:
        active = np.flatnonzero(m)
        log_prior = np.sum(np.where(m == 1, np.log(p), np.log1p(-p)))
        grid = np.array(list(itertools.product(range(num_nodes), repeat=len(active))), dtype=int)
        grid = grid.reshape(num_nodes ** len(active), len(active))
        W = nodes[grid] * s[active]
        f = W @ X[:, active].T + b
        joint.append(log_prior + np_logsumexp(log_w[grid].sum(1) + np_log_ndtr(y * f).sum(1)))
    joint = np.array(joint)
    log_ev = float(np_logsumexp(joint))
    post = np.exp(joint - log_ev)
    return ExactProbit(log_ev, post @ models, joint - log_ev)
