"""inference.linalg (the jittered Cholesky and the GP conditional every engine uses) and
inference.trace_reading (distribution unwrapping, Gaussian prior reading): against dense NumPy."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers

from inference import linalg, trace_reading


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cholesky_jitter_takes_the_smallest_jitter_that_works(dtype):
    rng = np.random.default_rng(0)
    B = rng.normal(size=(6, 6))
    K = B @ B.T + np.eye(6)
    L, jitter = linalg.cholesky_jitter(K, "K", dtype=dtype)
    assert jitter == 0.0 and L.dtype == np.dtype(dtype)
    np.testing.assert_allclose(L @ L.T, K, rtol=1e-5 if dtype == "float32" else 1e-12)
    v = rng.normal(size=6)
    singular = np.outer(v, v)  # rank one: needs a jitter
    L, jitter = linalg.cholesky_jitter(singular, "K", dtype=dtype)
    scale = np.mean(np.diag(singular))
    assert jitter > 0 and jitter / scale in linalg.LADDER
    np.testing.assert_allclose(L @ L.T, singular + jitter * np.eye(6), atol=1e-5 * scale if dtype == "float32" else 1e-10)


def test_cholesky_jitter_names_the_matrix():
    with pytest.raises(ValueError, match="my_K is not positive definite"):
        linalg.cholesky_jitter(np.array([[1.0, 2.0], [2.0, 1.0]]), "my_K")
    with pytest.raises(ValueError, match="my_K is not symmetric"):
        linalg.cholesky_jitter(np.array([[1.0, 0.5], [0.0, 1.0]]), "my_K")
    with pytest.raises(ValueError, match="my_K contains NaN"):
        linalg.cholesky_jitter(np.array([[np.nan, 0.0], [0.0, 1.0]]), "my_K")
    with pytest.raises(ValueError, match="my_K must be a square"):
        linalg.cholesky_jitter(np.ones((2, 3)), "my_K")


def test_conditional_is_the_dense_gaussian_conditional():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 2))
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, -1)) + 1e-8 * np.eye(9)
    t, s = np.arange(6), np.arange(6, 9)
    L = np.linalg.cholesky(K[np.ix_(t, t)])
    A, cov = linalg.conditional(L, K[np.ix_(s, t)], K[np.ix_(s, s)])
    want_A = K[np.ix_(s, t)] @ np.linalg.inv(K[np.ix_(t, t)])
    np.testing.assert_allclose(A, want_A, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(cov, K[np.ix_(s, s)] - want_A @ K[np.ix_(t, s)], atol=1e-8)
    _, var = linalg.conditional(L, K[np.ix_(s, t)], np.diag(K)[s])
    np.testing.assert_allclose(var, np.diag(cov), atol=1e-10)


def test_trace_reading_unwraps_and_reads_gaussian_priors():
    def model():
        numpyro.sample("w", dist.Normal(1.0, 2.0).expand([3]).to_event(1))
        numpyro.sample("f", dist.MultivariateNormal(np.zeros(2), np.array([[2.0, 0.5], [0.5, 1.0]])))
        numpyro.sample("y", dist.Normal(0.0, 1.0).expand([2]).mask(np.array([True, False])).to_event(1), obs=np.ones(2))

    tr = handlers.trace(handlers.seed(model, 0)).get_trace()
    assert trace_reading.latent_sites(tr) == ["w", "f"] and list(trace_reading.observed_sites(tr)) == ["y"]
    assert isinstance(trace_reading.unwrap(tr["y"]["fn"]), dist.Normal)
    assert isinstance(trace_reading.unwrap(tr["y"]["fn"], masked=False), dist.MaskedDistribution)
    m, S = (np.asarray(x) for x in trace_reading.gaussian_prior("w", tr["w"]))
    np.testing.assert_allclose(m, np.ones(3))
    np.testing.assert_allclose(S, 4.0 * np.eye(3))
    m, S = (np.asarray(x) for x in trace_reading.gaussian_prior("f", tr["f"]))
    np.testing.assert_allclose(S, [[2.0, 0.5], [0.5, 1.0]])
    with pytest.raises(ValueError, match="'y' has a Normal|discrete|'z'"):
        trace_reading.gaussian_prior("z", {"fn": dist.Bernoulli(0.5), "value": jax.numpy.zeros(())})
