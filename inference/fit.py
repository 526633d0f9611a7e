"""One entry point for every engine: change the engine by changing one word."""

from __future__ import annotations

from inference.posterior import ENGINES


def fit(model, *args, engine: str = "mcmc", **kwargs):
    """Run ``engine`` (``"mcmc"``, ``"vi"``, ``"laplace"``, ``"ep"`` or ``"exact"``) on ``model(*args, ...)``.

    Keywords are the engine's options and the model's arguments, exactly as for the engine itself.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, 2.0])
        >>> inference.fit(probmodels.linear_regression, X, y, engine="laplace", noise_scale=1.0).engine
        'laplace'
    """
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    import inference

    return getattr(inference, engine)(model, *args, **kwargs)
