"""Public Kalman filter, RTS smoother and log likelihood: one signature, one result type each
for the sequential (``lax.scan``) and parallel (associative-scan) passes.

A linear dynamical system is six arrays, ``init_mean`` (N,), ``init_cov`` (N, N), ``F`` (N, N),
``Q`` (N, N), ``H`` (D, N), ``R`` (D, D), and ``obs`` (T, D) holds the observations (a batch
(B, T, D) runs every sequence with the same parameters; pad shorter ones with NaN rows, which
are missing observations and change neither the log likelihood nor the earlier states).
Inputs are validated before tracing (errors name the argument); a non-finite result raises
``FloatingPointError`` instead of returning NaN (concrete inputs; under a user's ``jit`` the
NaN is theirs to see).

Example:
    >>> import numpy as np
    >>> from inference import kalman
    >>> eye = np.eye(2)
    >>> y = np.random.default_rng(0).normal(size=(4, 2))
    >>> y[1] = np.nan   # step 1 unobserved
    >>> ll, means, covs = kalman.filter(np.zeros(2), eye, 0.9 * eye, 0.1 * eye, eye, eye, y)
    >>> means.shape, covs.shape, bool(np.isfinite(ll))
    ((4, 2), (4, 2, 2), True)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.kalman import _checks
from inference.kalman import parallel as par
from inference.kalman import sequential as seq


class Filtered(NamedTuple):
    """``log_likelihood`` log p(y_{0:T-1}), () or (B,); filtered ``means`` E[x_t | y_{0:t}]
    (…, T, N) and ``covs`` (…, T, N, N). Unpacks as ``ll, means, covs``."""

    log_likelihood: jax.Array
    means: jax.Array
    covs: jax.Array


class Smoothed(NamedTuple):
    """``log_likelihood`` log p(y_{0:T-1}); smoothed ``means`` E[x_t | y_{0:T-1}] (…, T, N)
    and ``covs`` (…, T, N, N). Unpacks as ``ll, means, covs``."""

    log_likelihood: jax.Array
    means: jax.Array
    covs: jax.Array


def _one(params, obs, what: str, parallel: bool, masked: bool):
    passes = par if parallel else seq
    lls, means, covs = passes.filter_pass(params, obs, masked)
    ll = jnp.sum(lls)
    if what == "loglik":
        return ll
    if what == "filter":
        return Filtered(ll, means, covs)
    smoothed = passes.smooth_pass(params, means, covs)
    if what == "smooth":
        return Smoothed(ll, *smoothed[:2])
    return (ll,) + smoothed  # "gains": what EM needs


@partial(jax.jit, static_argnames=("what", "parallel", "masked"))
def run(params, obs, what: str, parallel: bool, masked: bool):
    """The passes for one sequence (T, D) or a batch (B, T, D), and whether every output is finite.

    ``what``: ``"loglik"``, ``"filter"``, ``"smooth"`` or ``"gains"`` ((ll, means, covs, gains))."""
    one = partial(_one, what=what, parallel=parallel, masked=masked)
    out = jax.vmap(lambda o: one(params, o))(obs) if obs.ndim == 3 else one(params, obs)
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(out)]))
    return out, ok


def raise_if_not_finite(ok, name: str, dtype) -> None:
    if not _checks.is_traced(ok) and not bool(ok):
        raise FloatingPointError(
            f"kalman.{name}: the result is not finite (NaN or inf): the model is too ill-conditioned for "
            f"{jnp.dtype(dtype).name} (try float64) or its parameters make the states overflow")


def _call(name, what, init_mean, init_cov, F, Q, H, R, obs, parallel):
    parallel = _checks.check_parallel(parallel)
    params, obs, _, masked = _checks.prepare(init_mean, init_cov, F, Q, H, R, obs)
    out, ok = run(params, obs, what=what, parallel=parallel, masked=masked)
    raise_if_not_finite(ok, name, obs.dtype)
    return out


def filter(init_mean, init_cov, F, Q, H, R, obs, parallel: bool = False) -> Filtered:  # noqa: A001
    """Kalman filter: ``Filtered(log_likelihood, means, covs)`` with the filtered moments of
    x_t given y_{0:t}. NaN entries of ``obs`` are missing. ``parallel=True``: associative scan
    (O(log T) depth; same results).

    >>> import numpy as np
    >>> from inference import kalman
    >>> one = np.ones((1, 1))   # x ~ N(0, 1), y = x + N(0, 1), y = 2: E[x | y] = 1, var 1/2
    >>> ll, means, covs = kalman.filter(np.zeros(1), one, one, one, one, one, np.array([[2.0]]))
    >>> float(means[0, 0]), float(covs[0, 0, 0])
    (1.0, 0.5)
    """
    return _call("filter", "filter", init_mean, init_cov, F, Q, H, R, obs, parallel)


def smoother(init_mean, init_cov, F, Q, H, R, obs, parallel: bool = False) -> Smoothed:
    """Rauch-Tung-Striebel smoother: ``Smoothed(log_likelihood, means, covs)`` with the moments
    of x_t given every observation. Arguments as :func:`filter`.

    >>> import numpy as np
    >>> from inference import kalman
    >>> one = np.ones((1, 1))   # x_1 = x_0 exactly: both steps see both observations
    >>> ll, means, covs = kalman.smoother(np.zeros(1), one, one, 0 * one, one, one, np.array([[1.0], [2.0]]))
    >>> np.round(means[:, 0], 6).tolist(), np.round(covs[:, 0, 0], 6).tolist()
    ([1.0, 1.0], [0.333333, 0.333333])
    """
    return _call("smoother", "smooth", init_mean, init_cov, F, Q, H, R, obs, parallel)


def log_likelihood(init_mean, init_cov, F, Q, H, R, obs, parallel: bool = False):
    """log p(y_{0:T-1}) alone, () or (B,): the function to differentiate (jax.grad works through
    it in every parameter).

    >>> import jax, numpy as np
    >>> from inference import kalman
    >>> one = np.ones((1, 1))
    >>> g = jax.grad(lambda r: kalman.log_likelihood(np.zeros(1), one, one, one, one, r, np.ones((3, 1))))(one)
    >>> g.shape
    (1, 1)
    """
    return _call("log_likelihood", "loglik", init_mean, init_cov, F, Q, H, R, obs, parallel)
