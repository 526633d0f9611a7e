"""Logistic regression (500 x 5): VI and Laplace means within 0.2 posterior SD of NUTS; LOO runs on
every engine and the engines' elpd estimates agree."""

import arviz as az
import numpy as np
import pytest

import inference
import probmodels


@pytest.fixture(scope="module")
def fits():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(500, 5))
    w = np.array([1.0, -0.5, 0.25, 0.0, 2.0])
    y = (rng.uniform(size=500) < 1 / (1 + np.exp(-X @ w))).astype(int)
    common = dict(seed=0, progress=False)
    return {
        # 4 x 5000 draws: Monte Carlo error of the reference means ~0.007 SD, small beside the
        # 0.2 SD tolerance (Laplace's true gap here is 0.19 SD on the largest weight)
        "mcmc": inference.mcmc(probmodels.logistic_regression, X, y, num_samples=5000, num_warmup=500,
                               num_chains=4, **common),
        "vi": inference.vi(probmodels.logistic_regression, X, y, guide="mvn", num_samples=2000, **common),
        "laplace": inference.laplace(probmodels.logistic_regression, X, y, num_samples=2000, seed=0),
    }


@pytest.mark.parametrize("engine", ["vi", "laplace"])
def test_means_close_to_nuts(fits, engine):
    ref = fits["mcmc"]
    sd = ref.std("w")
    # Laplace: the exact mean of its Gaussian (the MAP), free of the Monte Carlo error of its draws
    mean = fits["laplace"].approximation["loc"] if engine == "laplace" else fits[engine].mean("w")
    assert np.all(np.abs(mean - ref.mean("w")) < 0.2 * sd), (mean - ref.mean("w")) / sd


def test_loo_on_every_engine(fits):
    dt = fits["mcmc"].to_arviz()
    ref = az.loo(dt)
    assert np.isfinite(ref.elpd)
    for engine in ("vi", "laplace"):
        dt = fits[engine].to_arviz()
        res = az.loo_approximate_posterior(dt, log_p=dt.sample_stats["lp"], log_q=dt.sample_stats["log_q"])
        assert np.isfinite(res.elpd)
        assert abs(res.elpd - ref.elpd) < 1.0, (engine, res.elpd, ref.elpd)  # ~0.2 SE of elpd here


def test_datatree_groups_and_dims(fits):
    for engine, post in fits.items():
        dt = post.to_arviz()
        for group in ("posterior", "sample_stats", "log_likelihood", "observed_data"):
            assert group in dt.children, (engine, group)
        assert dt["posterior"]["w"].dims[:2] == ("chain", "draw")
        assert dt["log_likelihood"]["y"].shape[-1] == 500
        assert dt.attrs["inference_engine"] == engine
