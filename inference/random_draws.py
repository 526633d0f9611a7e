"""Random variates whose JAX samplers are costly to compile.

`jax.random.loggamma` runs Marsaglia and Tsang's rejection sampler one element at a time (a
``while_loop`` vmapped over per-element keys): ~1.8 s of XLA compilation in every program that
draws a Gamma, Beta, Dirichlet or chi-square variate, and `jax.random.beta` compiles two. Here
`log_gammas` runs the same sampler on whole arrays (each round proposes for every element at once;
an element keeps its first accepted proposal; rounds go on until every element has one): the same
distribution, ~0.8 s to compile, and all the Gamma variates a program needs come from one call on
the concatenated concentrations. For draws made once, outside a compiled loop, the host's NumPy
sampler compiles nothing (the Bayes machine's EP noise rate, `inference.ep.bm_posterior`); this is
for draws inside one (a Gibbs step, a kept program).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def log_gammas(key, concentrations, dtype=None):
    """``log G`` for independent ``G ~ Gamma(a, 1)``, one array per array of concentrations ``a``
    in ``concentrations`` (same shapes), all from one whole-array rejection sampler on the
    concatenated concentrations: one sampler to compile however many Gamma-family draws (Beta,
    Dirichlet, chi-square, inverse gamma, Wishart) a program makes.

    Example:
        >>> import jax, numpy as np
        >>> a, b = log_gammas(jax.random.PRNGKey(0), [np.full(20000, 3.0), np.full((2, 5000), 0.5)])
        >>> a.shape, b.shape
        ((20000,), (2, 5000))
        >>> bool(abs(float(np.exp(a).mean()) - 3.0) < 0.05 and abs(float(np.exp(b).mean()) - 0.5) < 0.03)
        True
    """
    if not isinstance(concentrations, (list, tuple)) or not concentrations:
        raise TypeError(f"concentrations: needs a non-empty list or tuple of arrays, got {type(concentrations).__name__}")
    for c in concentrations:  # checked where concrete (inside a program they are traced)
        if not isinstance(c, jax.core.Tracer) and not np.all(np.asarray(c) > 0):
            raise ValueError("concentrations: Gamma concentrations must be positive")
    dtype = dtype or jnp.result_type(float)
    arrays = [jnp.asarray(c, dtype) for c in concentrations]
    log_g = _log_gamma(key, jnp.concatenate([jnp.ravel(c) for c in arrays]))
    out, start = [], 0
    for c in arrays:
        out.append(log_g[start:start + c.size].reshape(c.shape))
        start += c.size
    return out


@jax.jit  # at module level: an eager call (spike-and-slab q draws) compiles once per shape, not per call
def _log_gamma(key, a):
    """``log G``, ``G ~ Gamma(a, 1)`` elementwise (``a`` 1-D): Marsaglia and Tsang (2000) on whole
    arrays. ``a < 1`` is boosted, ``G(a) = G(a + 1) U^(1/a)``, in log space (no underflow for small
    ``a``). Round ``i`` proposes ``d v`` with ``v = (1 + c x)^3``, ``x ~ N(0, 1)``, for every element
    (key ``fold_in(key, i)``), and an element not yet accepted takes it when
    ``log u < x^2 / 2 + d - d v + d log v``: each element gets its first accepted proposal from an
    i.i.d. sequence, so the draw is exact. Acceptance is >= 95% per round, so ``n`` elements need
    about ``1 + log(n) / 3`` rounds. A concentration that is negative, infinite or NaN (possible
    when traced) gives NaN and takes no round."""
    dtype = a.dtype
    valid = (a >= 0) & jnp.isfinite(a)
    a = jnp.where(valid, a, 1.0)
    boost = a < 1
    d = jnp.where(boost, a + 1, a) - 1.0 / 3.0
    c = lax.rsqrt(9.0 * d)
    k_boost, k_rounds = jax.random.split(key)
    log_boost = jnp.where(boost, jnp.log1p(-jax.random.uniform(k_boost, a.shape, dtype)) / a, 0.0)

    def round_(carry):
        i, done, value = carry
        k_x, k_u = jax.random.split(jax.random.fold_in(k_rounds, i))
        x = jax.random.normal(k_x, a.shape, dtype)
        u = jax.random.uniform(k_u, a.shape, dtype)
        root = 1.0 + c * x
        log_v = 3.0 * jnp.log(jnp.where(root > 0, root, 1.0))
        accept = (root > 0) & (jnp.log(u) < 0.5 * x * x + d - d * jnp.exp(log_v) + d * log_v)
        return i + 1, done | accept, jnp.where(done | ~accept, value, jnp.log(d) + log_v)

    start = (jnp.zeros((), jnp.int32), ~valid, jnp.full(a.shape, jnp.nan, dtype))
    _, _, log_g = lax.while_loop(lambda carry: ~jnp.all(carry[1]), round_, start)
    return log_g + log_boost


def gamma(key, a, shape=None, dtype=None):
    """Gamma(a, 1) draws of ``shape`` (default: ``a``'s) from `log_gammas`; what
    `jax.random.gamma` returns, at half its compilation.

    Example:
        >>> import jax
        >>> g = gamma(jax.random.PRNGKey(0), 4.0, (20000,))
        >>> bool(abs(float(g.mean()) - 4.0) < 0.06 and float(g.min()) > 0.0)
        True
    """
    dtype = dtype or jnp.result_type(float)
    shape = jnp.shape(a) if shape is None else tuple(shape)
    return jnp.exp(log_gammas(key, [jnp.broadcast_to(jnp.asarray(a, dtype), shape)], dtype)[0])


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) draws of ``shape`` (default: ``a`` and ``b`` broadcast) as
    ``G_a / (G_a + G_b)`` with ``log G`` from one `log_gammas` call, computed in log space
    as `jax.random.beta` does (no underflow for small ``a``, ``b``).

    Example:
        >>> import jax, numpy as np
        >>> x = beta(jax.random.PRNGKey(0), 2.0, 6.0, (20000,))
        >>> bool(abs(float(x.mean()) - 0.25) < 0.01 and float(x.min()) > 0.0)
        True
    """
    dtype = dtype or jnp.result_type(float)
    shape = lax.broadcast_shapes(jnp.shape(a), jnp.shape(b)) if shape is None else tuple(shape)
    log_a, log_b = log_gammas(key, [jnp.broadcast_to(jnp.asarray(a, dtype), shape),
                                    jnp.broadcast_to(jnp.asarray(b, dtype), shape)], dtype)
    return beta_from_log_gammas(log_a, log_b)


def beta_from_log_gammas(log_a, log_b):
    """``G_a / (G_a + G_b)`` from ``log G_a``, ``log G_b`` (log space: no underflow)."""
    log_max = jnp.maximum(log_a, log_b)
    ga, gb = jnp.exp(log_a - log_max), jnp.exp(log_b - log_max)
    return ga / (ga + gb)
