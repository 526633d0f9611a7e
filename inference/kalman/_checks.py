"""Input checks shared by the Kalman functions (concrete inputs only, before any tracing).

Every public function validates its numpy / concrete jax inputs here and raises a ``ValueError`` /
``TypeError`` naming the argument. Traced values (inside a user's ``jit`` / ``grad`` or a NumPyro
model under an engine) pass through unchecked, as in :mod:`inference.hmm._checks`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference.hmm._checks import check_positive_int, is_traced  # noqa: F401 - re-exported

# Symmetry and positive-definiteness tolerances, relative to the matrix's largest diagonal entry
# (loose enough for float32 inputs: a covariance computed in float32 is symmetric to ~1e-7).
SYMMETRY_TOL = 1e-5
PSD_TOL = 1e-6

PARAMS = ("init_mean", "init_cov", "F", "Q", "H", "R")


def _numeric(x, name: str):
    if is_traced(x):
        return x
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be an array of numbers ({exc})") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
    return arr


def _shape(x, name: str, expected: tuple, what: str):
    if tuple(np.shape(x)) != expected:
        raise ValueError(f"{name} must have shape {what} = {expected}, got {tuple(np.shape(x))}")


def _finite(arr, name: str):
    if not is_traced(arr) and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")


def check_covariance(arr, name: str, definite: bool) -> None:
    """Symmetric and positive (semi-)definite, relative to the largest diagonal entry."""
    if is_traced(arr):
        return
    a = np.asarray(arr, dtype=np.float64)
    scale = max(float(np.max(np.abs(np.diag(a)))), np.finfo(np.float64).tiny)
    if np.max(np.abs(a - a.T)) > SYMMETRY_TOL * scale:
        raise ValueError(f"{name} must be symmetric (max |{name} - {name}.T| = {np.max(np.abs(a - a.T)):.3g})")
    low = float(np.linalg.eigvalsh(0.5 * (a + a.T))[0])
    if definite and low <= PSD_TOL * scale:
        raise ValueError(f"{name} must be positive definite, its smallest eigenvalue is {low:.3g}")
    if not definite and low < -PSD_TOL * scale:
        raise ValueError(f"{name} must be positive semi-definite, its smallest eigenvalue is {low:.3g}")


def check_params(init_mean, init_cov, F, Q, H, R):
    """Shapes, finiteness and covariances of the model; returns (state_dim, obs_dim).

    ``R`` must be positive definite (the likelihood needs it); ``Q`` and ``init_cov`` may be
    singular (e.g. noise on a velocity only, or a known start) but not indefinite."""
    arrays = {n: _numeric(v, n) for n, v in zip(PARAMS, (init_mean, init_cov, F, Q, H, R))}
    if np.ndim(arrays["init_mean"]) != 1 or np.shape(arrays["init_mean"])[0] < 1:
        raise ValueError(f"init_mean must have shape (N,) with N >= 1, got {tuple(np.shape(init_mean))}")
    n = np.shape(arrays["init_mean"])[0]
    if np.ndim(arrays["H"]) != 2 or np.shape(arrays["H"])[0] < 1:
        raise ValueError(f"H must have shape (D, N) with D >= 1, got {tuple(np.shape(H))}")
    d = np.shape(arrays["H"])[0]
    for name, shape, what in (("init_cov", (n, n), "(N, N)"), ("F", (n, n), "(N, N)"), ("Q", (n, n), "(N, N)"),
                              ("H", (d, n), "(D, N)"), ("R", (d, d), "(D, D)")):
        _shape(arrays[name], name, shape, what)
    for name, arr in arrays.items():
        _finite(arr, name)
    check_covariance(arrays["init_cov"], "init_cov", definite=False)
    check_covariance(arrays["Q"], "Q", definite=False)
    check_covariance(arrays["R"], "R", definite=True)
    return n, d


def check_obs(obs, obs_dim: int):
    """``obs`` (T, D) or a batch (B, T, D); NaN marks a missing entry. Returns (obs, batched,
    maybe_missing): ``maybe_missing`` is False only for concrete obs without NaN (the filter then
    skips the masking work)."""
    obs = _numeric(obs, "obs")
    shape = tuple(np.shape(obs))
    if len(shape) not in (2, 3):
        hint = " (one scalar series: obs[:, None])" if len(shape) == 1 else ""
        raise ValueError(f"obs must have shape (T, D) or (B, T, D){hint}, got {shape}")
    if shape[-1] != obs_dim:
        raise ValueError(f"obs has {shape[-1]} columns but H has {obs_dim} rows (D)")
    if shape[-2] < 1:
        raise ValueError(f"obs must hold at least one time step, got shape {shape}")
    if len(shape) == 3 and shape[0] < 1:
        raise ValueError(f"obs must hold at least one sequence, got shape {shape}")
    if is_traced(obs):
        return obs, len(shape) == 3, True
    if np.isinf(obs).any():
        raise ValueError("obs contains inf (mark missing entries with NaN)")
    return obs, len(shape) == 3, bool(np.isnan(obs).any())


def check_parallel(parallel) -> bool:
    if not isinstance(parallel, (bool, np.bool_)):
        raise TypeError(f"parallel must be a bool, got {type(parallel).__name__}")
    return bool(parallel)


def check_key(key):
    if is_traced(key):
        return key
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key, got shape {key.shape}")
        return key
    arr = np.asarray(key)
    if arr.dtype != np.uint32 or arr.shape != (2,):
        raise TypeError(f"key must be a jax PRNG key (jax.random.PRNGKey(seed)), got {arr.dtype} {arr.shape}")
    return key


def prepare(init_mean, init_cov, F, Q, H, R, obs):
    """Validate and convert: (params tuple, obs, batched, maybe_missing), one float dtype."""
    _, d = check_params(init_mean, init_cov, F, Q, H, R)
    obs, batched, maybe_missing = check_obs(obs, d)
    params = (init_mean, init_cov, F, Q, H, R)
    dtype = jnp.result_type(float, *params, obs)
    # host inputs stay host arrays (the jitted call moves them in one go); jax arrays stay jax
    to = lambda x: jnp.asarray(x, dtype) if isinstance(x, jax.Array) else np.asarray(x, dtype)  # noqa: E731
    return tuple(to(p) for p in params), to(obs), batched, maybe_missing
