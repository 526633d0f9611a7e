"""The point-mass mean-field family ``q(z, w) = prod_j Bern(z_j | pi_j) [N(w_j | a_j, b_j)]^z_j``,
with ``w_j = 0`` exactly where ``z_j = 0``: draws and their log density.

This is the variational family of spike-and-slab VI, and the family EP draws from (its tilted
marginals at convergence). ``log_density`` is taken with respect to the same base measure as the
model's :class:`SpikeSlab` site (counting measure on ``z``; a unit point mass at 0 for excluded
weights, Lebesgue measure for included ones), so ``lp - log_q`` is a proper log importance ratio.

Example:
    >>> import jax, jax.numpy as jnp
    >>> fam = Family(jnp.array([0.9, 0.1]), jnp.zeros(2), jnp.ones(2))
    >>> z, w = sample(jax.random.PRNGKey(0), fam, 5)
    >>> bool(jnp.all(jnp.where(z == 0, w == 0, True))), log_density(fam, z, w).shape
    (True, (5,))
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import random


class Family(NamedTuple):
    incl: jax.Array  # (..., d) inclusion probabilities
    slab_mean: jax.Array  # (..., d) mean of w_j given z_j = 1
    slab_var: jax.Array  # (..., d) variance of w_j given z_j = 1


@partial(jax.jit, static_argnames=("num",))
def sample(rng_key, fam: Family, num: int):
    """``num`` draws ``(z, w)``; z int32 (num, d), w exactly 0 where z = 0."""
    k1, k2 = random.split(rng_key)
    shape = (num,) + jnp.shape(fam.incl)
    z = random.bernoulli(k1, fam.incl, shape).astype(jnp.int32)
    w = fam.slab_mean + jnp.sqrt(fam.slab_var) * random.normal(k2, shape)
    return z, jnp.where(z == 1, w, 0.0)


@jax.jit
def log_density(fam: Family, z, w):
    """``log q(z, w)`` per draw (summed over the last axis)."""
    inc = jnp.clip(fam.incl, 1e-300, 1.0)
    exc = jnp.clip(1.0 - fam.incl, 1e-300, 1.0)
    slab = -0.5 * ((w - fam.slab_mean) ** 2 / fam.slab_var + jnp.log(fam.slab_var) + math.log(2 * math.pi))
    per = jnp.where(z == 1, jnp.log(inc) + slab, jnp.log(exc) + jnp.where(w == 0, 0.0, -jnp.inf))
    return jnp.sum(per, axis=-1)


def gamma_log_density(x, shape, rate):
    return shape * jnp.log(rate) - jax.scipy.special.gammaln(shape) + (shape - 1) * jnp.log(x) - rate * x
