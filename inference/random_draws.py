"""Random variates whose JAX samplers are costly to compile.

`jax.random.beta` draws its two Gamma variates with two `jax.random.loggamma` calls: two
rejection samplers (``while_loop``s) in every program that draws a Beta, and NumPyro's Gamma-family
distributions one each. Here all the Gamma variates a program needs come from one call on the
concatenated concentrations (`log_gammas`): the same distributions, one sampler to compile. For draws made once,
outside a compiled loop, the host's NumPy sampler compiles nothing (the Bayes machine's EP noise
rate, `inference.ep.bm_posterior`); this is for draws inside one (a Gibbs step, a kept program).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def log_gammas(key, concentrations, dtype=None):
    """``log G`` for independent ``G ~ Gamma(a, 1)``, one array per array of concentrations ``a``
    in ``concentrations`` (same shapes), all from one `jax.random.loggamma` call on the
    concatenated concentrations: one rejection sampler to compile however many Gamma-family
    draws (Beta, Dirichlet, chi-square, inverse gamma, Wishart) a program makes.

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
    flat = jnp.concatenate([jnp.ravel(c) for c in arrays])
    log_g = jax.random.loggamma(key, flat, flat.shape, dtype)
    out, start = [], 0
    for c in arrays:
        out.append(log_g[start:start + c.size].reshape(c.shape))
        start += c.size
    return out


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
