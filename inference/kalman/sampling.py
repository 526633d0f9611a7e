"""Forward-filter backward-sample (FFBS): exact joint draws of the state path from p(x | y).

Filter once, then draw backwards from p(x_t | x_{t+1}, y_{0:t}) = N(E_t x_{t+1} + g_t, L_t)
(the smoother's affine elements, :func:`inference.kalman.parallel.smoother_elements`), every
path at once: x_t = E_t x_{t+1} + g_t + L_t^{1/2} z_t. Sequentially that is one reversed
``lax.scan``; with ``parallel=True`` the same affine maps are composed by an associative scan.
``L_t^{1/2}`` is a symmetric eigendecomposition factor (eigenvalues below 0 from rounding are
set to 0), so a singular conditional (e.g. noise on a velocity only) samples exactly.
This is how the Bayesian LDS (``probmodels.lds``) recovers its marginalised states per draw.

Example:
    >>> import jax, numpy as np
    >>> from inference import kalman
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> kalman.sample_states(jax.random.PRNGKey(0), np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y, 5).shape
    (5, 4, 2)
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from inference.kalman import _checks
from inference.kalman import parallel as par
from inference.kalman import sequential as seq
from inference.kalman.driver import raise_if_not_finite
from inference.kalman.linalg import psd_sqrt


def sample_pass(rng_key, params, obs, masked: bool, num_samples: int, parallel: bool = False):
    """FFBS for one sequence: (num_samples, T, N) draws of the states."""
    passes = par if parallel else seq
    _, means, covs = passes.filter_pass(params, obs, masked)
    gains, g, L = par.smoother_elements(params, means, covs)
    z = jax.random.normal(rng_key, g.shape + (num_samples,), g.dtype)  # (T, N, S)
    c = g[..., None] + psd_sqrt(L) @ z  # x_t = E_t x_{t+1} + c_t
    if parallel:
        _, paths = lax.associative_scan(par.affine_combine, (gains, c), reverse=True)
    else:
        def step(x_next, inputs):
            e, c_t = inputs
            x = e @ x_next + c_t
            return x, x

        _, paths = lax.scan(step, c[-1], (gains[:-1], c[:-1]), reverse=True, unroll=seq.UNROLL)
        paths = jnp.concatenate([paths, c[-1:]])
    return jnp.moveaxis(paths, -1, 0)


@partial(jax.jit, static_argnames=("num_samples", "parallel", "masked"))
def _run(rng_key, params, obs, num_samples: int, parallel: bool, masked: bool):
    one = lambda k, o: sample_pass(k, params, o, masked, num_samples, parallel)  # noqa: E731
    if obs.ndim == 3:
        draws = jax.vmap(one)(jax.random.split(rng_key, obs.shape[0]), obs)
        draws = jnp.moveaxis(draws, 0, 1)  # (num_samples, B, T, N)
    else:
        draws = one(rng_key, obs)
    return draws, jnp.all(jnp.isfinite(draws))


def sample_states(key, init_mean, init_cov, F, Q, H, R, obs, num_samples: int, parallel: bool = False):
    """Draw ``num_samples`` state paths from p(x | y): (num_samples, T, N), or (num_samples, B,
    T, N) for a batch. Arguments as :func:`inference.kalman.filter`."""
    key = _checks.check_key(key)
    num_samples = _checks.check_positive_int(num_samples, "num_samples")
    parallel = _checks.check_parallel(parallel)
    params, obs, _, masked = _checks.prepare(init_mean, init_cov, F, Q, H, R, obs)
    draws, ok = _run(key, params, obs, num_samples=num_samples, parallel=parallel, masked=masked)
    raise_if_not_finite(ok, "sample_states", obs.dtype)
    return draws
