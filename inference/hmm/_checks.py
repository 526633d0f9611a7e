"""Input checks shared by the HMM message-passing functions.

Every public function validates concrete (numpy / concrete jax) inputs here, before any tracing,
and raises a ``ValueError`` / ``TypeError`` that names the argument. Traced values (inside a user's
``jit`` / ``vmap`` / ``grad``, or inside a NumPyro model under NUTS) are passed through unchecked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# Row sums of exp(log_init) / exp(log_trans) must be 1 to within this (float32 inputs included).
NORMALISATION_TOL = 1e-4


def is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _float_array(x, name: str):
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


def _no_nan_or_posinf(arr, name: str) -> None:
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if np.isposinf(arr).any():
        raise ValueError(f"{name} contains +inf (log probabilities must be <= 0 or -inf)")


def check_model(log_init, log_trans) -> None:
    """Shapes and normalisation of the initial and transition log probabilities."""
    log_init = _float_array(log_init, "log_init")
    log_trans = _float_array(log_trans, "log_trans")
    if np.ndim(log_init) != 1 or np.shape(log_init)[0] < 1:
        raise ValueError(f"log_init must have shape (K,) with K >= 1, got {np.shape(log_init)}")
    k = np.shape(log_init)[0]
    if np.shape(log_trans) != (k, k):
        raise ValueError(f"log_trans must have shape (K, K) = ({k}, {k}), got {np.shape(log_trans)}")
    for name, arr in (("log_init", log_init), ("log_trans", log_trans)):
        if is_traced(arr):
            continue
        _no_nan_or_posinf(arr, name)
        with np.errstate(divide="ignore", invalid="ignore"):
            sums = np.exp(np.asarray(arr, dtype=np.float64)).sum(axis=-1)
        if np.any(np.abs(sums - 1.0) > NORMALISATION_TOL):
            what = "exp(log_init) must sum to 1" if name == "log_init" else "each row of exp(log_trans) must sum to 1"
            raise ValueError(f"{name}: {what}, got sums {np.round(np.atleast_1d(sums), 6).tolist()}")


def check_emission(log_emission, num_states: int):
    """``log_emission`` is (T, K) or a batch (B, T, K); returns whether it is batched."""
    log_emission = _float_array(log_emission, "log_emission")
    shape = np.shape(log_emission)
    if len(shape) not in (2, 3):
        raise ValueError(f"log_emission must have shape (T, K) or (B, T, K), got {shape}")
    if shape[-1] != num_states:
        raise ValueError(f"log_emission has {shape[-1]} states in its last axis, log_init has {num_states}")
    if shape[-2] < 1:
        raise ValueError(f"log_emission must hold at least one time step, got shape {shape}")
    if not is_traced(log_emission):
        _no_nan_or_posinf(log_emission, "log_emission")
    return len(shape) == 3


def check_lengths(lengths, batch_shape: tuple, num_steps: int):
    """``lengths``: one int per sequence (padding after the end), 1 <= length <= T."""
    if lengths is None or is_traced(lengths):
        return lengths
    arr = np.asarray(lengths)
    if not (np.issubdtype(arr.dtype, np.integer) or
            (np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))):
        raise TypeError(f"lengths must hold integers, got {arr.dtype} values")
    if arr.shape != tuple(batch_shape):
        raise ValueError(f"lengths must have shape {tuple(batch_shape)} (one per sequence), got {arr.shape}")
    if np.any(arr < 1) or np.any(arr > num_steps):
        raise ValueError(f"lengths must lie in [1, T={num_steps}], got min {arr.min()} max {arr.max()}")
    return arr.astype(np.int32)


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def step_mask(lengths, num_steps: int):
    """Boolean (…, T) mask, True where a step belongs to the sequence (None -> all True)."""
    if lengths is None:
        return np.ones((num_steps,), dtype=bool)
    if is_traced(lengths):
        return jnp.arange(num_steps) < jnp.asarray(lengths)[..., None]
    # concrete lengths: a host array, moved with the other arguments by the jitted call (separate
    # jnp ops here cost a dispatch each, which dominated short sequences)
    return np.arange(num_steps) < np.asarray(lengths)[..., None]
