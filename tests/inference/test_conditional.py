"""Posterior.predict for latents that grow with the data (a GP's f), for engines other than EP:
the new block is drawn from the prior conditioned on each training draw (inference.conditional),
checked against the library's independent GP conditional (probmodels.gp.latent_predictive); latents
that cannot be extended get a ValueError instead of a silently wrong prediction."""

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import inference
from probmodels import bayes_machine, gp_classifier
from probmodels.gp import latent_predictive
from probmodels.kernels import RBF, gram

RNG = np.random.default_rng(3)
X = RNG.uniform(-1, 1, (30, 1))
Y = X[:, 0] > 0.1
X_NEW = np.array([[-0.95], [-0.2], [0.15], [0.6], [2.5]])  # the last one far from the data
KERNEL = RBF(0.5)


def _check_against_gp_conditional(post, draws, z=5.0, var_tol=0.15):
    pp = post.predict(X_NEW, kernel=KERNEL, seed=4)
    f_new = post.predictions["f"]
    assert np.shape(pp["y"]) == (post.num_chains, draws, len(X_NEW)) and f_new.shape == (post.num_chains, draws, len(X_NEW))
    mean, var = latent_predictive(post.samples["f"], X, X_NEW, KERNEL)  # per-draw K*n K^-1 f, and the variance
    resid = f_new.reshape(-1, len(X_NEW)) - mean
    s = resid.shape[0]
    assert np.all(np.abs(resid.mean(0)) < z * np.sqrt(var / s)), (resid.mean(0), np.sqrt(var / s))
    # the variance under the model's own prior on [X; X_NEW] (its jitter on the diagonal, new points
    # included, which latent_predictive leaves out), computed here in NumPy
    K = np.asarray(gram(KERNEL, np.concatenate([X, X_NEW]))[0])
    n = len(X)
    exact = np.diag(K[n:, n:] - K[n:, :n] @ np.linalg.solve(K[:n, :n], K[:n, n:]))
    np.testing.assert_allclose(resid.var(0, ddof=1), exact, rtol=var_tol)
    return pp


def test_laplace_gp_predict_conditions_f_on_each_draw():
    post = inference.laplace(gp_classifier, X, Y, kernel=KERNEL, num_samples=4000, seed=1, progress=False)
    pp = _check_against_gp_conditional(post, 4000)
    # far from the data f* reverts to its prior N(0, 1): P(y = 1) -> 1/2
    assert abs(float(np.mean(pp["y"][..., -1])) - 0.5) < 0.05


def test_mcmc_gp_predict_conditions_f_on_each_draw():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = inference.mcmc(gp_classifier, X, Y, kernel=KERNEL, num_samples=1000, num_warmup=300,
                              num_chains=1, seed=2, progress=False)
    _check_against_gp_conditional(post, 1000)


# Slow: the same behaviour on the same path (`inference.mcmc` hands the Bayes machine to
# `inference.ess.mcmc_posterior`, whose predictor `Posterior.predict` runs) is checked by default,
# with values, by tests/inference/test_ess.py::test_predict_conditions_the_gp_on_the_draws (f
# extended to 150 new inputs, P(y = 1) with the eps draws against EP's predictive); this shape
# check compiled its own elliptical slice + Gibbs sampler (a third of this file's time).
@pytest.mark.slow
def test_bayes_machine_predict_under_mcmc_keeps_eps_and_extends_f():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = inference.mcmc(bayes_machine, X, Y, kernel=KERNEL, num_samples=200, num_warmup=100,
                              num_chains=1, seed=0, progress=False)
    pp = post.predict(X_NEW, kernel=KERNEL)
    assert np.shape(pp["y"]) == (1, 200, len(X_NEW)) and post.predictions["f"].shape == (1, 200, len(X_NEW))


def _positive_latent(X, y=None):
    u = numpyro.sample("u", dist.Exponential(1.0).expand([X.shape[0]]).to_event(1))
    numpyro.sample("y", dist.Normal(u, 1.0).to_event(1), obs=y)


def _gp_with_lengthscale(X, y=None):
    ell = numpyro.sample("ell", dist.LogNormal(0.0, 0.3))
    d2 = (X[:, None, 0] - X[None, :, 0]) ** 2
    K = jnp.exp(-0.5 * d2 / ell**2) + 1e-6 * jnp.eye(X.shape[0])
    f = numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(X.shape[0]), covariance_matrix=K))
    numpyro.sample("y", dist.Normal(f, 0.3).to_event(1), obs=y)


@pytest.mark.parametrize("model, message", [(_positive_latent, "not Gaussian in the prior"),
                                            (_gp_with_lengthscale, "depends on other latent")])
def test_latents_that_cannot_be_extended_raise(model, message):
    y = np.abs(np.sin(3 * X[:, 0])) + 0.1
    post = inference.laplace(model, X, y, num_samples=50, progress=False)
    with pytest.raises(ValueError, match=message):
        post.predict(X_NEW)
    assert post.predict(X + 0.01)  # same number of rows: substitution is the model's own business
