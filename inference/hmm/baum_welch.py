"""Baum-Welch (EM) maximum-likelihood fit of an HMM: the point-estimate baseline.

E step: :func:`inference.hmm.forward_backward` machinery gives the smoothed marginals and the
expected transition counts of every sequence (vmapped over a padded batch). M step: closed form
for the initial and transition probabilities and for univariate ``"gaussian"`` (locs, scales),
``"categorical"`` (probs, K x C) and ``"poisson"`` (rates) emissions. The loop runs under
``lax.while_loop``; ``tol`` is traced, so changing it does not recompile.

Parameters are a dict keyed like the Bayesian model's sites (``init``, ``trans``, ``locs`` /
``scales``, ``probs``, ``rates``), so a fit and a posterior compare name by name.

Example:
    >>> import numpy as np
    >>> from inference.hmm import baum_welch
    >>> rng = np.random.default_rng(0)
    >>> z = np.repeat([0, 1, 0, 1], 50)
    >>> x = rng.normal(np.array([-2.0, 2.0])[z], 0.5)
    >>> fit = baum_welch(x, 2)
    >>> np.round(np.asarray(fit.params["locs"]), 1).tolist()
    [-2.0, 2.0]
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln

from inference.hmm import _checks
from inference.hmm.forward_backward import _run

EMISSIONS = ("gaussian", "categorical", "poisson")
EMISSION_PARAMS = {"gaussian": ("locs", "scales"), "categorical": ("probs",), "poisson": ("rates",)}


class BaumWelch(NamedTuple):
    """``params`` dict of fitted arrays; ``log_likelihood`` trace (one entry per E step, the last
    one at the returned params); ``num_iters``; ``converged`` (gain below ``tol``)."""

    params: dict
    log_likelihood: jax.Array
    num_iters: int
    converged: bool


# ----------------------------------------------------------------------------- emissions
def emission_log_likelihood(obs, emission: str, params: dict):
    """log p(x_t | z_t = k) for every step and state: obs (…, T) -> (…, T, K)."""
    x = jnp.asarray(obs)[..., None]
    if emission == "gaussian":
        locs, scales = params["locs"], params["scales"]
        return -0.5 * ((x - locs) / scales) ** 2 - jnp.log(scales) - 0.5 * jnp.log(2 * jnp.pi)
    if emission == "poisson":
        rates = params["rates"]
        return x * jnp.log(rates) - rates - gammaln(x + 1.0)
    if emission == "categorical":
        log_probs = jnp.log(params["probs"])  # (K, C)
        return jnp.moveaxis(log_probs[:, jnp.asarray(obs, jnp.int32)], 0, -1)
    raise ValueError(f"emission must be one of {EMISSIONS}, got {emission!r}")


def _m_step_emission(emission, x, weights, old, num_categories, min_scale):
    """Weighted ML emission parameters; states with no weight keep their old values."""
    n = weights.sum(0)  # (K,)
    has = n > 1e-12
    safe_n = jnp.where(has, n, 1.0)
    if emission == "gaussian":
        locs = (weights * x[:, None]).sum(0) / safe_n
        var = (weights * (x[:, None] - locs) ** 2).sum(0) / safe_n
        scales = jnp.sqrt(jnp.maximum(var, min_scale**2))
        return {"locs": jnp.where(has, locs, old["locs"]), "scales": jnp.where(has, scales, old["scales"])}
    if emission == "poisson":
        rates = jnp.maximum((weights * x[:, None]).sum(0) / safe_n, 1e-10)
        return {"rates": jnp.where(has, rates, old["rates"])}
    onehot = jax.nn.one_hot(x.astype(jnp.int32), num_categories, dtype=weights.dtype)
    probs = weights.T @ onehot / safe_n[:, None]
    return {"probs": jnp.where(has[:, None], probs, old["probs"])}


# ----------------------------------------------------------------------------- EM
def _e_step(params, obs, mask, emission):
    log_init, log_trans = jnp.log(params["init"]), jnp.log(params["trans"])
    le = emission_log_likelihood(obs, emission, params)

    # the fused scaled passes (exact log-space fallback on underflow), batched (B, T, K)
    sm = _run(log_init, log_trans, le, mask, what="smooth", parallel=False)
    return sm.log_likelihood.sum(), sm.marginals * mask[..., None], sm.transition_counts.sum(0)


def _m_step(params, obs, mask, gamma, counts, emission, num_categories, min_scale):
    init = gamma[:, 0, :].mean(0)
    rows = counts.sum(1, keepdims=True)
    trans = jnp.where(rows > 0, counts / jnp.where(rows > 0, rows, 1.0), params["trans"])
    k = gamma.shape[-1]
    new = _m_step_emission(emission, obs.reshape(-1), gamma.reshape(-1, k), params, num_categories, min_scale)
    return {"init": init, "trans": trans, **new}


@partial(jax.jit, static_argnames=("emission", "max_iter", "num_categories"))
def _fit(params, obs, mask, tol, min_scale, emission, max_iter, num_categories):
    def cond(state):
        _, _, i, done = state
        return (i < max_iter) & ~done

    def body(state):
        params, trace, i, _ = state
        ll, gamma, counts = _e_step(params, obs, mask, emission)
        trace = trace.at[i].set(ll)
        done = (i > 0) & (ll - trace[jnp.maximum(i - 1, 0)] < tol)
        last = done | (i == max_iter - 1)  # the returned params are the ones the last ll was computed at
        updated = _m_step(params, obs, mask, gamma, counts, emission, num_categories, min_scale)
        params = jax.tree.map(lambda old, upd: jnp.where(last, old, upd), params, updated)
        return params, trace, i + 1, done

    trace = jnp.full((max_iter,), jnp.nan, obs.dtype)
    params, trace, n, done = lax.while_loop(cond, body, (params, trace, 0, False))
    return params, trace, n, done


# ----------------------------------------------------------------------------- inputs
def check_obs(obs, emission: str, lengths=None, num_categories=None):
    """Validate observations (concrete only). Returns (obs (B, T) float, mask (B, T), batched,
    num_categories). Padded entries (past ``lengths``) are ignored and may hold anything."""
    if not isinstance(emission, str) or emission not in EMISSIONS:
        raise ValueError(f"emission must be one of {EMISSIONS}, got {emission!r}")
    if _checks.is_traced(obs):
        raise TypeError("obs must be concrete data (baum_welch is a driver; call it outside jit)")
    try:
        arr = np.asarray(obs)
    except Exception as exc:
        raise TypeError(f"obs must be an array of numbers ({exc})") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"obs must be numeric, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2) or arr.shape[-1] < 1:
        raise ValueError(f"obs must have shape (T,) or (B, T) with T >= 1, got {arr.shape}")
    batched = arr.ndim == 2
    if batched and arr.shape[1] == 1 and arr.shape[0] > 1 and lengths is None:
        # scikit-learn / hmmlearn write one sequence as (T, 1); here that shape is T sequences of
        # one step each (no transitions at all): refused unless lengths says it is meant
        raise ValueError(
            f"obs has shape {arr.shape}: read as {arr.shape[0]} sequences of one step each. Pass one "
            f"sequence as shape (T,) (e.g. obs[:, 0]); for a batch of one-step sequences give "
            f"lengths=np.ones({arr.shape[0]}, int)")
    arr2 = arr if batched else arr[None]
    if lengths is not None and not batched and np.ndim(lengths) != 0:
        raise ValueError(f"lengths must be a scalar for one sequence, got shape {np.shape(lengths)}")
    lens = _checks.check_lengths(lengths, arr2.shape[:1] if batched else (), arr2.shape[1])
    lens = np.full(arr2.shape[:1], arr2.shape[1]) if lens is None else np.broadcast_to(lens, arr2.shape[:1])
    mask = np.arange(arr2.shape[1]) < lens[:, None]
    valid = arr2[mask].astype(np.float64)
    if np.isnan(valid).any():
        raise ValueError("obs contains NaN (mark padding with lengths instead)")
    if np.isinf(valid).any():
        raise ValueError("obs contains inf")
    if emission in ("categorical", "poisson"):
        if np.any(valid != np.round(valid)):
            raise ValueError(f"obs must hold integers for {emission} emissions, got non-integer values")
        if np.any(valid < 0):
            raise ValueError(f"obs must be non-negative for {emission} emissions, got min {valid.min()}")
    if emission == "categorical":
        top = int(valid.max()) + 1
        if num_categories is None:
            num_categories = top
        num_categories = _checks.check_positive_int(num_categories, "num_categories")
        if top > num_categories:
            raise ValueError(f"obs holds category {top - 1} but num_categories={num_categories}")
    filled = np.where(mask, arr2, valid[0]).astype(np.float64)
    return filled, mask, batched, num_categories


def default_params(obs, mask, num_states, emission, num_categories, rng_key):
    """Data-based start: states spread over the data's quantiles, sticky transitions."""
    k = num_states
    x = np.asarray(obs)[np.asarray(mask)]
    q = np.quantile(x, (np.arange(k) + 0.5) / k)
    stay = 0.8 if k > 1 else 1.0
    trans = np.full((k, k), (1 - stay) / max(k - 1, 1)) + (stay - (1 - stay) / max(k - 1, 1)) * np.eye(k)
    params = {"init": np.full(k, 1.0 / k), "trans": trans}
    spread = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
    if emission == "gaussian":
        sd = x.std() if x.std() > 0 else 1.0
        # scales sd / K: with every state as wide as the whole data set, EM can settle on the
        # saddle where all states merge (it did on geyser waiting times)
        params.update(locs=q + 0.01 * sd * spread, scales=np.full(k, sd / k))
    elif emission == "poisson":
        params.update(rates=np.maximum(q, 0.1 * max(x.mean(), 1e-3)) * np.exp(0.1 * spread))
    else:
        freq = np.bincount(x.astype(int), minlength=num_categories) + 1.0
        noise = np.exp(0.5 * np.asarray(jax.random.normal(rng_key, (k, num_categories))))
        probs = freq * noise
        params.update(probs=probs / probs.sum(1, keepdims=True))
    return params


def _check_init_params(init_params, params, emission):
    allowed = ("init", "trans") + EMISSION_PARAMS[emission]
    for name, value in dict(init_params).items():
        if name not in allowed:
            raise ValueError(f"init_params: unknown key {name!r} for {emission} emissions (allowed {allowed})")
        value = np.asarray(value, dtype=np.float64)
        if value.shape != np.shape(params[name]):
            raise ValueError(f"init_params[{name!r}] must have shape {np.shape(params[name])}, got {value.shape}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"init_params[{name!r}] contains NaN or inf")
        if name in ("scales", "rates", "probs", "init", "trans") and np.any(value < 0):
            raise ValueError(f"init_params[{name!r}] must be non-negative")
        if name in ("init", "trans", "probs") and not np.allclose(value.sum(-1), 1.0, atol=1e-6):
            raise ValueError(f"init_params[{name!r}] must sum to 1 along its last axis")
        params[name] = value
    return params


def baum_welch(obs, num_states: int, emission: str = "gaussian", *, lengths=None, max_iter: int = 200,
               tol: float = 1e-4, init_params: dict | None = None, num_categories: int | None = None,
               min_scale: float | None = None, seed: int = 0) -> BaumWelch:
    """Maximum-likelihood HMM parameters by EM.

    Args:
        obs: (T,) one sequence or (B, T) padded batch (``lengths`` (B,) true lengths); floats for
            ``"gaussian"``, non-negative integers for ``"poisson"`` and ``"categorical"``.
        num_states: K >= 1.
        emission: ``"gaussian"``, ``"categorical"`` or ``"poisson"``.
        max_iter, tol: stop after ``max_iter`` E steps or when the log likelihood gains < ``tol``.
        init_params: start values for any of the parameter keys (defaults: data quantiles).
        num_categories: C for categorical emissions (default max(obs) + 1).
        min_scale: floor on Gaussian scales (default 1e-3 * std(obs)), against collapse onto a point.
        seed: randomness of the default categorical start.

    Returns ``BaumWelch(params, log_likelihood, num_iters, converged)``.
    """
    num_states = _checks.check_positive_int(num_states, "num_states")
    max_iter = _checks.check_positive_int(max_iter, "max_iter")
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol}")
    x, mask, _, num_categories = check_obs(obs, emission, lengths, num_categories)
    params = default_params(x, mask, num_states, emission, num_categories, jax.random.PRNGKey(seed))
    if init_params is not None:
        params = _check_init_params(init_params, params, emission)
    if min_scale is None:
        min_scale = 1e-3 * (float(x[mask].std()) or 1.0)
    elif not np.isfinite(min_scale) or min_scale <= 0:
        raise ValueError(f"min_scale must be a positive number, got {min_scale}")
    params = {k: jnp.asarray(v, jnp.float64 if jax.config.jax_enable_x64 else jnp.float32) for k, v in params.items()}
    fitted, trace, n, done = _fit(params, jnp.asarray(x, params["init"].dtype), jnp.asarray(mask), tol, min_scale,
                                  emission=emission, max_iter=max_iter, num_categories=num_categories or 0)
    n = int(n)
    trace = trace[:n]
    if not bool(jnp.all(jnp.isfinite(trace))):
        raise FloatingPointError("baum_welch: the log likelihood became non-finite; check obs and init_params")
    return BaumWelch(fitted, trace, n, bool(done))
