"""EP state and per-sweep info: NamedTuples of arrays only.

Sites are Gaussian factors ``exp(-tau/2 z^2 + nu z)`` on each site's projection ``z_i`` (natural
parameters: precision ``tau``, precision-times-mean ``nu``) times a scale ``exp(log_scale)``; the
global Gaussian ``N(mean, cov)`` lives in the problem's working coordinates (see
:mod:`inference.ep.problem`).

Example:
    >>> import jax.numpy as jnp
    >>> s = EPState(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(2), jnp.eye(2))
    >>> s.tau.shape, s.cov.shape
    ((3,), (2, 2))
"""

from __future__ import annotations

from typing import NamedTuple

import jax


class EPState(NamedTuple):
    tau: jax.Array  # (n,) site precisions
    nu: jax.Array  # (n,) site precision-times-mean
    log_scale: jax.Array  # (n,) site log-scales (log Z_i minus the Gaussian part), last sweep
    mean: jax.Array  # (d,) global mean, working coordinates
    cov: jax.Array  # (d, d) global covariance, working coordinates


class EPInfo(NamedTuple):
    max_site_change: jax.Array  # max over sites of |d tau| / (1 + |tau|), |d nu| / (1 + |nu|)
    num_skipped: jax.Array  # site updates skipped this sweep (bad cavity or invalid tilted moments)
    step: jax.Array  # damping actually applied (halved while the global Gaussian was invalid)
