"""The spike-and-slab prior as a NumPyro distribution the engines recognise by type.

``SpikeSlab(indicators, scale)`` is the distribution of the weights *given* the 0/1 inclusion
indicators: ``w_j = 0`` exactly where ``indicators_j = 0`` (the spike, a point mass) and
``w_j ~ N(0, scale_j^2)`` where ``indicators_j = 1`` (the slab). The indicators are an ordinary
``Bernoulli`` site sampled just before, so a model reads::

    z = numpyro.sample("z", dist.Bernoulli(p_incl).expand([d]).to_event(1))
    w = numpyro.sample("w", SpikeSlab(z, slab_scale).to_event(1))

Densities are with respect to the natural base measure of the pair (z, w): counting measure on
``z`` and, per coordinate, a unit point mass at 0 where ``z_j = 0`` and Lebesgue measure where
``z_j = 1``. So ``log_prob`` is the slab's Normal log density on included coordinates, 0 on
excluded coordinates that are exactly 0, and ``-inf`` on excluded coordinates that are not.
Every engine that writes ``log_q`` for spike-and-slab sites uses the same base measure.

Example:
    >>> import jax, jax.numpy as jnp
    >>> d = SpikeSlab(jnp.array([1, 0, 1]), 2.0)
    >>> w = d.sample(jax.random.PRNGKey(0))
    >>> bool(w[1] == 0.0), d.log_prob(w).shape
    (True, (3,))
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax, random
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution
from numpyro.distributions.util import promote_shapes, validate_sample

from inference.trace_reading import unwrap

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class SpikeSlab(Distribution):
    """Weights given inclusion indicators: point mass at 0 (z = 0) or ``N(0, scale^2)`` (z = 1)."""

    arg_constraints = {"indicators": constraints.boolean, "scale": constraints.positive}
    support = constraints.real
    reparametrized_params = ["scale"]

    def __init__(self, indicators, scale=1.0, *, validate_args=None):
        self.indicators, self.scale = promote_shapes(indicators, scale)
        batch_shape = lax.broadcast_shapes(jnp.shape(indicators), jnp.shape(scale))
        self.indicators = jnp.broadcast_to(self.indicators, batch_shape)
        self.scale = jnp.broadcast_to(self.scale, batch_shape)
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = random.normal(key, sample_shape + self.batch_shape)
        return jnp.where(self.indicators != 0, eps * self.scale, 0.0)

    @validate_sample
    def log_prob(self, value):
        slab = -0.5 * (value / self.scale) ** 2 - jnp.log(self.scale) - _HALF_LOG_2PI
        spike = jnp.where(value == 0, 0.0, -jnp.inf)
        return jnp.where(self.indicators != 0, slab, spike)

    @property
    def mean(self):
        return jnp.zeros(self.batch_shape)

    @property
    def variance(self):
        return jnp.where(self.indicators != 0, self.scale**2, 0.0)


def is_spike_slab(fn) -> bool:
    return isinstance(unwrap(fn), SpikeSlab)
