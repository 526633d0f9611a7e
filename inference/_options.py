"""Checks of engine options (raised before any tracing) and the shared model-argument rule.

Engine options are keyword-only and named explicitly in each engine's signature; every other
keyword goes to the model. A model argument whose name collides with an engine option (say a model
with its own ``seed``) is passed through ``model_kwargs={"seed": ...}``.
"""

from __future__ import annotations

import inspect
import numbers
import os

import numpy as np


def positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def seed(value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"seed must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"seed must be >= 0, got {value}")
    return int(value)


def unit_interval(value, name: str, *, closed_right: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number, got {value!r}") from exc
    if not (0.0 < v < 1.0 or (closed_right and v == 1.0)):
        bounds = "(0, 1]" if closed_right else "(0, 1)"
        raise ValueError(f"{name} must lie in {bounds}, got {value!r}")
    return v


def positive_float(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a positive number, got {value!r}") from exc
    if not (v > 0 and v < float("inf")):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def progress(value) -> bool:
    """``None`` means the default: on, unless the environment sets INFERENCE_PROGRESS=0."""
    if value is None:
        return os.environ.get("INFERENCE_PROGRESS", "1") not in ("0", "false", "False", "")
    return bool(value)


def is_default(value, default) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except (TypeError, ValueError):  # arrays, objects without a boolean ==
        return False


def unsupported(path: str, **options) -> None:
    """Refuse options that ``path`` (an engine's dedicated path) cannot honour: each keyword is
    ``name=(value, default)``; the first whose value is not its default raises ValueError naming
    it. Defaults pass, so the same call works on every path."""
    for name, (value, default) in options.items():
        if not is_default(value, default):
            raise ValueError(f"{name}={value!r}: {path} cannot honour this option; leave it at its "
                             f"default ({default!r})")


def model_arguments(engine, model, args: tuple, kwargs: dict) -> None:
    """Raise TypeError, before any tracing, when ``model`` cannot be called with ``args`` and
    ``kwargs``. A keyword that is not an option of ``engine`` (the public engine function) goes to
    the model, so an option misspelt or meant for another engine (``num_chains`` given to
    ``inference.ep``) used to surface as the model's own TypeError, read as the model's fault.
    Models whose signature cannot be read, or that take ``**kwargs``, are left to raise their own.
    The signature is the callable's own, not that of a function it wraps (``functools.wraps``
    sets ``__wrapped__``): a wrapper that takes keywords of its own (`inference.sbc`'s
    conditioned model, a user's decorator) is called with them."""
    try:
        signature = inspect.signature(model, follow_wrapped=False)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        name = getattr(model, "__name__", type(model).__name__)
        options = [p for p, v in inspect.signature(engine).parameters.items()
                   if v.kind is inspect.Parameter.KEYWORD_ONLY or v.default is not inspect.Parameter.empty]
        raise TypeError(f"inference.{engine.__name__}: the model {name}{signature} cannot take these arguments: {exc}. "
                        f"Keywords that are not options of inference.{engine.__name__} ({', '.join(options)}) go to "
                        "the model") from None


def model_kwargs(kwargs: dict, extra) -> dict:
    if extra is None:
        return dict(kwargs)
    if not isinstance(extra, dict):
        raise TypeError(f"model_kwargs must be a dict, got {type(extra).__name__}")
    clash = set(kwargs) & set(extra)
    if clash:
        raise ValueError(f"model_kwargs repeats keyword(s) {sorted(clash)} also given directly")
    return {**kwargs, **extra}


# Warnings point at the user's line that called into the project, however deep they are raised
# (``warnings.warn(..., skip_file_prefixes=INTERNAL)``): a fixed stacklevel points into the
# engine whenever a call goes through one more function (`inference.compiled.scoped`).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERNAL = (os.path.join(_ROOT, "inference") + os.sep, os.path.join(_ROOT, "probmodels") + os.sep)

TOL_FLOOR_EPS = 30  # the smallest usable tol, in machine epsilons of the working precision


def working_tol(tol: float, dtype) -> float:
    """``tol``, raised to `TOL_FLOOR_EPS` epsilons of ``dtype``: in float32 (JAX's default) the
    round-off of a sweep moves sites by ~5e-7 (closed-form probit) to ~1.5e-6 (quadrature) of
    their marginals, so a tol of 1e-6 is met by chance or never (logistic regression, n = 300:
    95 sweeps at 1e-6, 10 at 3.6e-6; 9 in float64). In float64 the floor is 6.7e-15."""
    return max(float(tol), TOL_FLOOR_EPS * float(np.finfo(np.dtype(dtype)).eps))
