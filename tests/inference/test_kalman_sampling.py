"""inference.kalman.sample_states (forward-filter backward-sample): the draws' means and their
full joint covariance over all steps match the dense Gaussian posterior within Monte Carlo error
(each entry within 5 standard errors, the standard errors from the exact moments), sequential
and parallel, with missing entries; batch shapes."""

import jax
import numpy as np
import pytest

from inference import kalman

from _kalman_reference import N, T, dense_posterior, random_lds, simulate, with_missing

S = 4000  # draws


@pytest.mark.parametrize("parallel", [False, pytest.param(True, marks=pytest.mark.slow)])  # parallel: slow compile
def test_draws_match_the_exact_posterior_within_monte_carlo_error(parallel):
    params = random_lds(7)
    y = with_missing(simulate(params, 7))
    mean, _, cov, _ = dense_posterior(params, y)
    draws = np.asarray(kalman.sample_states(jax.random.PRNGKey(1), *params, y, S, parallel=parallel))
    assert draws.shape == (S, T, N)
    flat = draws.reshape(S, -1)
    sd = np.sqrt(np.diag(cov))
    z_mean = (flat.mean(0) - mean.reshape(-1)) / (sd / np.sqrt(S))
    assert np.max(np.abs(z_mean)) < 5.0
    # sample covariance entry (i, j) has variance (S_ii S_jj + S_ij^2) / S for Gaussian draws
    emp = np.cov(flat.T)
    se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / S)
    assert np.max(np.abs(emp - cov) / se) < 5.0
    # the joint structure is exercised: neighbouring steps are correlated a posteriori
    assert np.max(np.abs(cov[:N, N:2 * N])) > 0.05


@pytest.mark.slow  # a vmapped program of its own; the sampling pass itself is checked above
def test_batch_shape_and_independent_sequences():
    params = random_lds(8)
    ys = np.stack([with_missing(simulate(params, s)) for s in (8, 9)])
    draws = kalman.sample_states(jax.random.PRNGKey(0), *params, ys, 3)
    assert draws.shape == (3, 2, T, N)
    assert not np.allclose(draws[:, 0], draws[:, 1])
