"""EP state and per-sweep info: NamedTuples of arrays only.

Sites are Gaussian factors ``exp(-tau/2 z^2 + nu z)`` on each site's projection ``z_i`` (natural
parameters: precision ``tau``, precision-times-mean ``nu``) times a scale ``exp(log_scale)``; the
state keeps what a sweep reads of the global Gaussian: the mean and variance of each site's
projection (the global Gaussian itself is rebuilt from the sites when it is needed, by
:func:`inference.ep.gaussian.from_sites`; in function space that costs two to three times a sweep's
work, see :func:`inference.ep.gaussian.site_moments`).

Example:
    >>> import jax.numpy as jnp
    >>> s = EPState(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.ones(3))
    >>> s.tau.shape, s.var.shape
    ((3,), (3,))
"""

from __future__ import annotations

from typing import NamedTuple

import jax


class EPState(NamedTuple):
    tau: jax.Array  # (n,) site precisions
    nu: jax.Array  # (n,) site precision-times-mean
    log_scale: jax.Array  # (n,) site log-scales (log Z_i minus the Gaussian part), last sweep
    mean: jax.Array  # (n,) mean of each site's projection z_i under the global Gaussian
    var: jax.Array  # (n,) variance of each site's projection z_i under the global Gaussian


class EPInfo(NamedTuple):
    max_site_change: jax.Array  # max over sites of |d tau| v, |d nu| sqrt(v), beyond round-off (update.roundoff)
    num_skipped: jax.Array  # site updates skipped this sweep (bad cavity or invalid tilted moments)
    step: jax.Array  # damping actually applied (halved while the global Gaussian was invalid)
