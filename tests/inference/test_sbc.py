"""Simulation-based calibration: an exact posterior sampler passes, mis-scaled or shifted ones are
caught and their miscalibration measured in the right direction; a real engine passes (slow)."""

import types

import numpy as np
import pytest
from numpyro import handlers

import probmodels
from inference.sbc import sbc, summarise
from probmodels import conjugate

rng = np.random.default_rng(3)
X = rng.normal(size=(15, 2))
Y = X @ np.array([0.5, -1.0])


def exact_engine(scale=1.0, shift=0.0):
    """Samples the exact conjugate posterior, optionally with its sd scaled / mean shifted (in sd)."""

    def engine(model, *args, seed=0, **kwargs):
        trace = handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs)
        y = np.asarray(trace["y"]["value"])
        post = conjugate.linear_regression_posterior(args[0], y, noise_scale=kwargs["noise_scale"])
        sd = np.sqrt(np.diag(post.cov))
        chol = np.linalg.cholesky(post.cov)
        z = np.random.default_rng(seed).normal(size=(400, len(sd)))
        draws = post.mean + shift * sd + scale * z @ chol.T
        return types.SimpleNamespace(samples={"w": draws[None]})

    engine.__name__ = f"exact(scale={scale}, shift={shift})"
    return engine


def test_exact_posterior_passes():
    n = 400
    res = sbc(probmodels.linear_regression, X, Y, engine=exact_engine(), num_replicates=n,
              noise_scale=1.0, seed=1, progress=False)
    assert res.names == ("w[0]", "w[1]")
    assert res.ranks.shape == (n, 2) and res.ranks.min() >= 0 and res.ranks.max() <= 99
    assert res.passed()
    # 4 sampling sds of each summary under exact calibration (u uniform on (0, 1))
    assert np.all(np.abs(res.bias) < 4 * np.sqrt(1 / 12 / n))
    assert np.all(np.abs(res.dispersion - 1) < 4 * 12 * np.sqrt((1 / 80 - 1 / 144) / n))
    assert np.all(np.abs(res.coverage_90 - 0.9) < 4 * np.sqrt(0.09 / n))


def test_over_confident_posterior_fails_with_dispersion_above_one():
    res = sbc(probmodels.linear_regression, X, Y, engine=exact_engine(scale=0.5), num_replicates=200,
              noise_scale=1.0, seed=1, progress=False)
    assert not res.passed()
    assert np.all(res.dispersion > 1.3)
    assert np.all(res.coverage_90 < 0.8)


def test_under_confident_posterior_fails_with_dispersion_below_one():
    res = sbc(probmodels.linear_regression, X, Y, engine=exact_engine(scale=2.0), num_replicates=200,
              noise_scale=1.0, seed=1, progress=False)
    assert not res.passed()
    assert np.all(res.dispersion < 0.7)
    assert np.all(res.coverage_90 > 0.97)


def test_shifted_posterior_shows_its_bias():
    res = sbc(probmodels.linear_regression, X, Y, engine=exact_engine(shift=1.0), num_replicates=200,
              noise_scale=1.0, seed=1, progress=False)
    assert not res.passed()
    assert np.all(res.bias < -0.15)  # posterior above the truth: the truth ranks low


def test_summary_and_plot(tmp_path):
    ranks = np.random.default_rng(0).integers(0, 100, size=(100, 3))
    res = summarise("demo", ("a", "b", "c"), ranks, 99)
    assert "| a |" in res.table()
    res.plot(str(tmp_path / "ranks.png"))
    assert (tmp_path / "ranks.png").stat().st_size > 1000


@pytest.mark.parametrize("kwargs, match", [
    (dict(engine="nope"), "engine must be one of"),
    (dict(engine=3), "engine must be an engine name"),
    (dict(num_replicates=2), "num_replicates"),
    (dict(params=["y"]), "params"),
    (dict(num_draws=3), "num_draws"),
])
def test_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sbc(probmodels.linear_regression, X, Y, noise_scale=1.0, **kwargs)


def test_needs_observed_sites():
    with pytest.raises(ValueError, match="observed"):
        sbc(probmodels.linear_regression, X, None, noise_scale=1.0, engine=exact_engine())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_laplace_is_calibrated_on_conjugate_regression(dtype):
    """A library engine through `sbc`'s conditioned model (the faster version of the NUTS check
    below): Laplace is exact for linear regression with known noise, so it passes, in float32
    (JAX's default) as in float64. Its programs
    are compiled by the first replicate and reused by the others (a call of 60 replicates compiles
    no more than one of 10), and the process's other compiled functions are left alone (SBC once
    cleared every JAX cache every 25 replicates, recompiling its own programs and the user's)."""
    import jax

    with jax.enable_x64(dtype == "float64"):
        user = jax.jit(lambda x: 2 * x)
        user(1.0)
        compiles = []
        listener = lambda event, secs, **kw: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            sbc(probmodels.linear_regression, X[:8], Y[:8], engine="laplace", num_replicates=10, num_draws=19,
                noise_scale=1.0, seed=1, progress=False)
        finally:
            jax._src.monitoring.unregister_event_duration_listener(listener)
        first, compiles = len(compiles), []
        listener = lambda event, secs, **kw: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            res = sbc(probmodels.linear_regression, X[:8], Y[:8], engine="laplace", num_replicates=60,
                      noise_scale=1.0, seed=0, progress=False)
        finally:
            jax._src.monitoring.unregister_event_duration_listener(listener)
    assert len(compiles) <= first and user._cache_size() == 1
    assert res.failures == 0 and res.ranks.shape == (60, 2)
    assert res.passed()


@pytest.mark.slow
def test_nuts_is_calibrated_on_conjugate_regression():
    res = sbc(probmodels.linear_regression, X[:8], Y[:8], engine="mcmc", num_replicates=100,
              noise_scale=1.0, seed=0, progress=False)
    assert res.failures == 0
    assert res.passed()
