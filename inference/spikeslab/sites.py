"""Tilted moments of the two EP site types in spike-and-slab models (pure leaf functions).

* :func:`spike_slab_tilted` -- the prior site ``p N(w | 0, v_s) + (1 - p) delta(w)`` times a
  Gaussian cavity given in natural form ``exp(-tau_c w^2 / 2 + nu_c w)``. Written in natural
  parameters so that a flat cavity (``tau_c = 0``, e.g. an all-zero column) is exact, not NaN.
* :func:`probit_tilted` -- ``Phi(y f)`` times a Gaussian cavity ``N(f | mean, var)`` on the
  linear predictor (the usual closed form).

Example:
    >>> import jax.numpy as jnp
    >>> t = spike_slab_tilted(jnp.array(0.0), jnp.array(0.0), 2.0, 0.0)
    >>> float(t.incl), float(t.mean), float(t.var)        # flat cavity: the prior itself
    (0.5, 0.0, 1.0)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr

_LOG_2PI = math.log(2 * math.pi)


class SpikeSlabTilted(NamedTuple):
    log_z: jax.Array  # log of int exp(-tau_c w^2/2 + nu_c w) prior(w) dw (unnormalised cavity)
    mean: jax.Array  # tilted mean of w
    var: jax.Array  # tilted variance of w
    incl: jax.Array  # tilted P(z = 1)
    slab_mean: jax.Array  # mean of w given z = 1
    slab_var: jax.Array  # variance of w given z = 1


def spike_slab_tilted(tau_c, nu_c, slab_var, logit_p) -> SpikeSlabTilted:
    """Moments of ``exp(-tau_c w^2/2 + nu_c w) [p N(w|0, slab_var) + (1-p) delta_0(w)]``."""
    k = 1.0 + tau_c * slab_var
    b = slab_var / k
    a = nu_c * b
    log_ratio = -0.5 * jnp.log(k) + 0.5 * nu_c * a  # slab integral over spike integral (= 1)
    incl = jax.nn.sigmoid(logit_p + log_ratio)
    log_z = jnp.logaddexp(-jax.nn.softplus(logit_p), -jax.nn.softplus(-logit_p) + log_ratio)
    mean = incl * a
    var = incl * b + incl * (1.0 - incl) * a**2
    return SpikeSlabTilted(log_z, mean, var, incl, a, b)


def log_partition(tau, nu):
    """``log int exp(-tau w^2/2 + nu w) dw`` for ``tau > 0``."""
    return 0.5 * (_LOG_2PI - jnp.log(tau)) + 0.5 * nu**2 / tau


def probit_tilted(mean, var, y):
    """For ``Phi(y f) N(f | mean, var)``: ``(log Z, dlogZ/dmean, -d2logZ/dmean2)``.

    >>> lz, alpha, beta = probit_tilted(jnp.array(0.0), jnp.array(1.0), 1.0)
    >>> round(float(jnp.exp(lz)), 6)
    0.5
    """
    s = jnp.sqrt(1.0 + var)
    zz = y * mean / s
    log_z = log_ndtr(zz)
    ratio = jnp.exp(-0.5 * zz**2 - 0.5 * _LOG_2PI - log_z)  # phi(z) / Phi(z), stable for z << 0
    alpha = y * ratio / s
    beta = ratio * (zz + ratio) / (1.0 + var)
    return log_z, alpha, beta
