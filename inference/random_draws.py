"""Random variates whose JAX samplers are costly to compile.

`jax.random.beta` draws its two Gamma variates with two `jax.random.loggamma` calls: two
rejection samplers (``while_loop``s) in every program that draws a Beta. Here both come from one
call on the stacked shapes: the same distribution, one sampler to compile. For draws made once,
outside a compiled loop, the host's NumPy sampler compiles nothing (the Bayes machine's EP noise
rate, `inference.ep.bm_posterior`); this is for draws inside one (a Gibbs step, a kept program).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) draws of ``shape`` (default: ``a`` and ``b`` broadcast) as
    ``G_a / (G_a + G_b)`` with ``log G`` from one `jax.random.loggamma` call, computed in log space
    as `jax.random.beta` does (no underflow for small ``a``, ``b``).

    Example:
        >>> import jax, numpy as np
        >>> x = beta(jax.random.PRNGKey(0), 2.0, 6.0, (20000,))
        >>> bool(abs(float(x.mean()) - 0.25) < 0.01 and float(x.min()) > 0.0)
        True
    """
    dtype = dtype or jnp.result_type(float)
    shape = lax.broadcast_shapes(jnp.shape(a), jnp.shape(b)) if shape is None else tuple(shape)
    ab = jnp.stack([jnp.broadcast_to(jnp.asarray(a, dtype), shape), jnp.broadcast_to(jnp.asarray(b, dtype), shape)])
    log_g = jax.random.loggamma(key, ab, ab.shape, dtype)
    log_max = jnp.maximum(log_g[0], log_g[1])
    ga, gb = jnp.exp(log_g[0] - log_max), jnp.exp(log_g[1] - log_max)
    return ga / (ga + gb)
