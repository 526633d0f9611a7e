"""Input checks shared by the model library.

Every check runs on concrete NumPy values when a model is first called (the engines trace every
model eagerly once before any JAX compilation), so bad input fails with a ValueError naming the
argument. Under JAX tracing (values are Tracers: engines pass the data as arguments of their
compiled programs) the checks step aside but still convert (shape, labels) the same way.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _float_array(value, name: str, what: str = "a numeric array") -> np.ndarray:
    """``value`` as a float NumPy array, or a TypeError naming the argument."""
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}") from exc


def matrix(X, name: str = "X", *, allow_1d: bool = False) -> np.ndarray:
    """A finite, non-empty float matrix (n, d); a 1-D array becomes (n, 1) if ``allow_1d``."""
    if is_traced(X):
        return X[:, None] if (X.ndim == 1 and allow_1d) else X
    arr = _float_array(X, name)
    if arr.ndim == 1 and allow_1d:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} contains NaN or inf (first at row {bad[0]}, column {bad[1]})")
    return arr


def vector(y, n: int, name: str = "y") -> np.ndarray:
    """A finite float vector of length n."""
    if y is None or is_traced(y):
        return y
    arr = _float_array(y, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} entries but X has {n} rows")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf (first at index {int(np.argmax(~np.isfinite(arr)))})")
    return arr


def binary_labels(y, n: int, name: str = "y") -> np.ndarray:
    """Labels given as {0, 1}, {-1, +1} or bool, returned as int32 in {0, 1}."""
    if y is None:
        return y
    if is_traced(y):
        return (y > 0).astype("int32")  # the same map for each of the three encodings
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} labels but X has {n} rows")
    if arr.dtype == bool:
        return arr.astype(np.int32)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must hold binary labels {{0, 1}}, {{-1, +1}} or bool, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    values = set(np.unique(arr).tolist())
    if values <= {0, 1}:
        return arr.astype(np.int32)
    if values <= {-1, 1}:
        return (arr > 0).astype(np.int32)
    raise ValueError(
        f"{name} must hold binary labels {{0, 1}}, {{-1, +1}} or bool, got values {sorted(values)[:5]}"
    )


def positive(value, name: str) -> float:
    if is_traced(value):
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        try:
            value = float(np.asarray(value).item())
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a positive number, got {value!r}") from exc
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def positive_or_prior(value, name: str, model: str):
    """A positive number, or a prior on it (a proper, continuous NumPyro distribution on (0, inf)
    drawing a scalar): then it is sampled as site ``name``, a hyperparameter that
    ``inference.laplace`` / ``inference.ep`` learn or integrate over with ``hyper=``."""
    import numpyro

    from probmodels.kernels import _check_prior, _is_prior

    if not _is_prior(value):
        return positive(value, name)
    prior = _check_prior(value, name, model, allow_zero=False)
    if tuple(prior.batch_shape) + tuple(prior.event_shape):
        raise ValueError(f"{model}: the prior of {name} ({type(prior).__name__}) must draw a scalar, "
                         f"got shape {tuple(prior.batch_shape) + tuple(prior.event_shape)}")
    return numpyro.sample(name, prior)


def probability(value, name: str) -> float:
    if is_traced(value):
        return value
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number in (0, 1), got {value!r}") from exc
    if not (0.0 < v < 1.0):
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return v


def positive_pair(value, name: str) -> tuple[float, float]:
    try:
        a, b = value
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a pair of positive numbers (a, b), got {value!r}") from exc
    return positive(a, f"{name}[0]"), positive(b, f"{name}[1]")


def positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def categories(y, n: int, num_categories: int, name: str = "y") -> np.ndarray:
    """Ordered categories: ``n`` integers in {0, ..., num_categories - 1}, returned as int32."""
    if y is None or is_traced(y):
        return y
    arr = _float_array(y, name, "a numeric array of categories")
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be 1-D with one category per row of X ({n}), got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < 0) | (arr > num_categories - 1)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must hold integer categories in {{0, ..., {num_categories - 1}}}, got {y[i]!r} "
                         f"at index {i}")
    return arr.astype(np.int32)
