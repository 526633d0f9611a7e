"""EM (maximum likelihood) for the six arrays of a linear dynamical system: the point-estimate
baseline (Bishop 2006, section 13.3.2; Shumway and Stoffer 1982).

E step: the RTS smoother (:mod:`inference.kalman.sequential`, or the parallel passes) gives
E[x_t], E[x_t x_t'] and E[x_{t+1} x_t'] = P_{t+1} G_t' + m_{t+1} m_t' (G_t the smoother gain).
M step, in closed form (Bishop eqs. 13.110-13.116): ``F = S10 S00^-1``, ``Q = (S11 - F S10') /
(T - 1)``, ``H = Syx Sxx^-1``, ``R = (Syy - H Syx') / T``, ``init_mean`` and ``init_cov`` from
E[x_0] (averaged over the sequences of a batch). Every update is the exact maximiser of the
expected complete-data log likelihood, so the log likelihood never decreases (tested). Rows of
``obs`` that are all NaN are missing (the states there are still inferred); a partly observed row
is refused (its M step would need the missing entries' conditional moments). ``R`` and ``Q`` keep
their smallest eigenvalue >= ``min_var`` (a floor, like Baum-Welch's ``min_scale``).

The parameters are not identified: any invertible A gives the same likelihood with
(A F A^-1, A Q A', H A^-1, A init_mean, A init_cov A'); compare fits by invariants (eigenvalues
of F, R, the observations' autocovariances H F^k P H').

Example:
    >>> import numpy as np
    >>> from inference import kalman
    >>> rng = np.random.default_rng(0)
    >>> x = np.zeros(200)
    >>> for t in range(1, 200):
    ...     x[t] = 0.9 * x[t - 1] + rng.normal()
    >>> y = (x + 0.5 * rng.normal(size=200))[:, None]
    >>> fit = kalman.em(y, 1)
    >>> round(float(fit.params["F"][0, 0]), 1), bool(np.all(np.diff(fit.log_likelihood) > -1e-8))
    (0.9, True)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.kalman import _checks
from inference.kalman.driver import _one
from inference.kalman.sequential import sym


class EM(NamedTuple):
    """``params``: dict with keys ``init_mean``, ``init_cov``, ``F``, ``Q``, ``H``, ``R`` (the
    arguments of :func:`inference.kalman.filter`, so ``kalman.smoother(**fit.params, obs=y)``
    works); ``log_likelihood`` trace (one entry per E step, the last at the returned params);
    ``num_iters``; ``converged`` (relative gain below ``tol``)."""

    params: dict
    log_likelihood: jax.Array
    num_iters: int
    converged: bool


def _floor(cov, min_var):
    """Symmetrise and lift the smallest eigenvalue to ``min_var`` (a shift of the diagonal)."""
    cov = sym(cov)
    low = jnp.linalg.eigvalsh(cov)[0]
    return cov + jnp.maximum(min_var - low, 0.0) * jnp.eye(cov.shape[-1], dtype=cov.dtype)


def _statistics(params, obs, seen, masked, parallel):
    """Log likelihood and the expected sufficient statistics of a batch (B, T, D)."""
    one = partial(_one, what="gains", parallel=parallel, masked=masked)
    ll, means, covs, gains = jax.vmap(lambda o: one(tuple(params[k] for k in _checks.PARAMS), o))(obs)
    outer = lambda a, b: a[..., :, None] * b[..., None, :]  # noqa: E731
    exx = covs + outer(means, means)  # E[x_t x_t']
    cross = covs[:, 1:] @ jnp.swapaxes(gains, -1, -2) + outer(means[:, 1:], means[:, :-1])  # E[x_{t+1} x_t']
    w = seen.astype(obs.dtype)[..., None]
    y = jnp.where(seen[..., None], obs, 0.0)
    stats = {"s00": exx[:, :-1].sum((0, 1)), "s11": exx[:, 1:].sum((0, 1)), "s10": cross.sum((0, 1)),
             "sxx": (exx * w[..., None]).sum((0, 1)), "syx": jnp.einsum("btd,btn->dn", y * w, means),
             "syy": jnp.einsum("btd,bte->de", y * w, y), "n": w.sum(), "m0": means[:, 0], "p0": covs[:, 0]}
    return ll.sum(), stats


def _m_step(s, num_pairs, min_var):
    F = jnp.linalg.solve(s["s00"], s["s10"].T).T
    H = jnp.linalg.solve(s["sxx"], s["syx"].T).T
    mu = s["m0"].mean(0)
    dev = s["m0"] - mu
    return {"init_mean": mu, "init_cov": _floor((s["p0"] + dev[:, :, None] * dev[:, None, :]).mean(0), 0.0),
            "F": F, "Q": _floor((s["s11"] - F @ s["s10"].T) / num_pairs, min_var),
            "H": H, "R": _floor((s["syy"] - H @ s["syx"].T) / s["n"], min_var)}


@partial(jax.jit, static_argnames=("max_iter", "masked", "parallel"))
def _fit(params, obs, seen, tol, min_var, max_iter, masked, parallel):
    num_pairs = obs.shape[0] * (obs.shape[1] - 1)

    def cond(state):
        _, _, i, done = state
        return (i < max_iter) & ~done

    def body(state):
        params, trace, i, _ = state
        ll, stats = _statistics(params, obs, seen, masked, parallel)
        trace = trace.at[i].set(ll)
        prev = trace[jnp.maximum(i - 1, 0)]
        done = (i > 0) & (ll - prev < tol * jnp.maximum(1.0, jnp.abs(ll)))
        last = done | (i == max_iter - 1)  # the returned params are the ones the last ll was computed at
        updated = _m_step(stats, num_pairs, min_var)
        params = jax.tree.map(lambda old, new: jnp.where(last, old, new), params, updated)
        return params, trace, i + 1, done

    trace = jnp.full((max_iter,), jnp.nan, obs.dtype)
    return lax.while_loop(cond, body, (params, trace, 0, False))


# ----------------------------------------------------------------------------- inputs and start
def check_obs(obs):
    """(obs (B, T, D) float, seen (B, T) rows observed, batched). Whole NaN rows only."""
    if _checks.is_traced(obs):
        raise TypeError("obs must be concrete data (em is a driver; call it outside jit)")
    arr = _checks._numeric(obs, "obs")
    if arr.ndim not in (2, 3):
        hint = " (one scalar series: obs[:, None])" if arr.ndim == 1 else ""
        raise ValueError(f"obs must have shape (T, D) or (B, T, D){hint}, got {arr.shape}")
    batched = arr.ndim == 3
    arr = np.asarray(arr if batched else arr[None], dtype=np.float64)
    if arr.shape[1] < 2 or arr.shape[2] < 1 or arr.shape[0] < 1:
        raise ValueError(f"obs must hold at least 2 time steps of at least 1 value, got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ValueError("obs contains inf (mark missing rows with NaN)")
    nan = np.isnan(arr)
    if np.any(nan.any(-1) & ~nan.all(-1)):
        raise ValueError("obs has partly missing rows; em handles only whole missing rows (all NaN). "
                         "The filter and smoother handle partly missing rows")
    seen = ~nan.all(-1)
    if seen.sum() < 2:
        raise ValueError("obs must hold at least 2 observed rows")
    return arr, seen, batched


def default_params(obs, seen, state_dim, seed):
    """Start: H from the principal axes of the observed rows' second moments (no offset in the
    model), states by projection, F and Q from their lag-one regression, R from the residuals."""
    rng = np.random.default_rng(seed)
    y = obs[seen]
    d, n = y.shape[1], state_dim
    val, vec = np.linalg.eigh(y.T @ y / len(y))
    k = min(n, d)
    H = np.zeros((d, n))
    H[:, :k] = vec[:, ::-1][:, :k] * np.sqrt(np.maximum(val[::-1][:k], 1e-12))
    scale = float(np.sqrt(np.mean(val))) or 1.0
    H[:, k:] = 0.1 * scale * rng.normal(size=(d, n - k))
    proj = np.linalg.pinv(H)
    x = np.where(seen[..., None], obs, 0.0) @ proj.T  # (B, T, N); 0 where unobserved
    pair = seen[:, 1:] & seen[:, :-1]
    a, b = x[:, :-1][pair], x[:, 1:][pair]
    if len(a) > n:
        F = np.linalg.lstsq(a, b, rcond=None)[0].T
        Q = np.cov((b - a @ F.T).T).reshape(n, n) + 0.01 * np.eye(n)
    else:
        F, Q = 0.9 * np.eye(n), 0.19 * np.eye(n)
    resid = y - x[seen] @ H.T
    R = np.diag(np.maximum(resid.var(0), 0.01 * np.maximum(y.var(0), 1e-12)) + 1e-12)
    return {"init_mean": x[:, 0].mean(0), "init_cov": np.eye(n), "F": F, "Q": Q, "H": H, "R": R}


def _check_init_params(init_params, params):
    for name, value in dict(init_params).items():
        if name not in _checks.PARAMS:
            raise ValueError(f"init_params: unknown key {name!r} (allowed {_checks.PARAMS})")
        value = np.asarray(value, dtype=np.float64)
        if value.shape != np.shape(params[name]):
            raise ValueError(f"init_params[{name!r}] must have shape {np.shape(params[name])}, got {value.shape}")
        params[name] = value
    _checks.check_params(*(params[k] for k in _checks.PARAMS))
    return params


def em(obs, state_dim: int, *, max_iter: int = 200, tol: float = 1e-7, init_params: dict | None = None,
       min_var: float | None = None, parallel: bool = False, seed: int = 0) -> EM:
    """Maximum-likelihood LDS parameters by EM.

    Args:
        obs: (T, D) one sequence or (B, T, D) a batch (T >= 2); whole NaN rows are missing.
        state_dim: N >= 1.
        max_iter, tol: stop after ``max_iter`` E steps or when the log likelihood gains less than
            ``tol * max(1, |log likelihood|)``.
        init_params: start values for any of the six keys (default: principal axes, see
            `default_params`).
        min_var: floor on the eigenvalues of ``R`` and ``Q`` (default 1e-6 times the observed
            values' mean square).
        parallel: run the E step's passes by associative scan.
        seed: randomness of the default start (only when ``state_dim`` > D).

    Returns ``EM(params, log_likelihood, num_iters, converged)``.
    """
    state_dim = _checks.check_positive_int(state_dim, "state_dim")
    max_iter = _checks.check_positive_int(max_iter, "max_iter")
    parallel = _checks.check_parallel(parallel)
    if not np.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol}")
    obs, seen, _ = check_obs(obs)
    params = default_params(obs, seen, state_dim, seed)
    if init_params is not None:
        params = _check_init_params(init_params, params)
    if min_var is None:
        min_var = 1e-6 * (float(np.mean(obs[seen] ** 2)) or 1.0)
    elif not np.isfinite(min_var) or min_var <= 0:
        raise ValueError(f"min_var must be a positive number, got {min_var}")
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    params = {k: jnp.asarray(v, dtype) for k, v in params.items()}
    fitted, trace, n, done = _fit(params, jnp.asarray(obs, dtype), jnp.asarray(seen), tol, min_var,
                                  max_iter=max_iter, masked=bool((~seen).any()), parallel=parallel)
    n = int(n)
    trace = trace[:n]
    if not bool(jnp.all(jnp.isfinite(trace))) or not all(bool(jnp.all(jnp.isfinite(v))) for v in fitted.values()):
        raise FloatingPointError("kalman.em: the log likelihood or the parameters became non-finite; check obs "
                                 "and init_params (or use float64)")
    return EM(fitted, trace, n, bool(done))
