"""EP against NUTS on user-written models (written here, inline): probit regression, a probit GP
classifier (n = 200), Poisson and logistic regression through quadrature.

Criterion (issue 3): EP posterior means within 0.1 NUTS posterior SD and SDs within 15%, for every
coordinate. NUTS is seeded; its Monte Carlo standard error (from the effective sample size) is
checked to stay below 0.04 SD, so the 0.1 SD tolerance measures EP's error, not MC noise."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.stats import norm
from numpyro.diagnostics import effective_sample_size

import inference
from inference.ep.driver import ep

NUTS = dict(num_warmup=400, num_samples=700, num_chains=2, progress=False, seed=1)


def compare(ep_mean, ep_sd, draws):
    """Max |mean diff| / SD, max |log SD ratio|, max MCSE / SD over coordinates."""
    draws = np.asarray(draws).reshape(draws.shape[0], draws.shape[1], -1)
    mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    ess = np.asarray(effective_sample_size(draws))
    return (np.max(np.abs(ep_mean - mean) / sd), np.max(np.abs(ep_sd / sd - 1.0)), np.max(1.0 / np.sqrt(ess)))


def check(ep_post, nuts_draws):
    m = ep_post.approximation["mean"]
    sd = np.sqrt(np.diag(ep_post.approximation["cov"]))
    z, sd_err, mcse = compare(m, sd, nuts_draws)
    assert mcse < 0.04, f"NUTS MC error {mcse:.3f} SD too large for the test"
    assert z < 0.1, f"EP mean off by {z:.3f} posterior SD"
    assert sd_err < 0.15, f"EP SD off by {100 * sd_err:.1f}%"
    return z, sd_err


def probit_regression(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(X @ w)), obs=y)


def logistic_regression(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w + b), obs=y)


def poisson_regression(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Poisson(rate=jnp.exp(X @ w)), obs=y)


def rbf(X, lengthscale=0.8, variance=2.0):
    d2 = jnp.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    return variance * jnp.exp(-0.5 * d2 / lengthscale**2) + 1e-6 * jnp.eye(X.shape[0])


def gp_classifier(X, y=None):
    f = numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(X.shape[0]), rbf(X)))
    numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(f)), obs=y)


def gp_classifier_whitened(L, y=None):
    """The same posterior over f, parametrised for NUTS (f = L v, v ~ N(0, I))."""
    v = numpyro.sample("v", dist.Normal(0.0, 1.0).expand([L.shape[0]]).to_event(1))
    f = numpyro.deterministic("f", L @ v)
    numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(f)), obs=y)


@pytest.fixture(scope="module")
def regression_data():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(100, 3))
    w = np.array([0.8, -0.5, 0.3])
    return {
        "X": X,
        "probit": (rng.uniform(size=100) < norm.cdf(X @ w)).astype(float),
        "logistic": (rng.uniform(size=100) < 1 / (1 + np.exp(-(X @ w + 0.5)))).astype(float),
        "poisson": rng.poisson(np.exp(X @ w)).astype(float),
    }


@pytest.mark.parametrize("name,model,kind", [
    ("probit", probit_regression, "probit"),
    ("logistic", logistic_regression, "quadrature"),
    # slow only: the same check on quadrature sites runs by default on logistic regression
    pytest.param("poisson", poisson_regression, "quadrature", marks=pytest.mark.slow),
])
def test_regression_agrees_with_nuts(regression_data, name, model, kind):
    X, y = regression_data["X"], regression_data[name]
    post = ep(model, X, y, progress=False)
    assert post.diagnostics["converged"] and post.diagnostics["site_kinds"]["y"] == kind
    ref = inference.mcmc(model, X, y, **NUTS)
    # Measured (seed 1, 2 x 700 draws): max mean error 0.030 / 0.030 / 0.023 SD and max SD error
    # 3.2% / 3.8% / 4.8% (probit / logistic / Poisson); MC error of the NUTS means <= 0.032 SD.
    names = [b for b in ("w", "b") if b in ref.samples]
    draws = np.concatenate([ref.samples[n].reshape(2, 700, -1) for n in names], axis=-1)
    check(post, draws)


def test_gp_classifier_agrees_with_nuts():
    # n = 200 points in 2-D; EP on the model as a user writes it (kernel matrix inside), NUTS on the
    # whitened version of the same model (NUTS on the model as written does not mix: R-hat > 3).
    # Measured (seed 1, 2 x 1000 draws): max mean error 0.047 SD, max SD error 6.6%, MC error of the
    # NUTS means <= 0.024 SD (and about 2% on each SD).
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(200, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=200) > 0).astype(float)
    post = ep(gp_classifier, X, y, progress=False)
    assert post.diagnostics["converged"] and post.diagnostics["space"] == "function"
    L = np.linalg.cholesky(np.asarray(rbf(jnp.asarray(X))))
    ref = inference.mcmc(gp_classifier_whitened, L, y, **{**NUTS, "num_warmup": 500, "num_samples": 1000})
    check(post, ref.samples["f"])
