"""The IBP's blocked Gibbs sampler against brute force: on a problem small enough to enumerate every
binary z (3 rows x 2 features: 64 matrices), with the features integrated out in closed form and
the two sticks by a fine midpoint grid, the exact posterior of z and of the first stick; the
sampler's marginals must agree within their Monte Carlo error (batch means)."""

import itertools

import jax
import numpy as np
from scipy.stats import multivariate_normal

from inference import ibp_gibbs
from inference.ibp_vi import IBPPrior, Structure

ALPHA, SD_X, SD_A = 1.5, 0.5, 1.0


def _problem():
    rng = np.random.default_rng(3)
    Y = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]) + SD_X * rng.normal(size=(3, 2))
    return Y


def _exact(Y, grid=1500):
    """P(z_nk = 1 | Y) (3, 2) and E[sticks_1 | Y] by enumeration and a grid over the sticks."""
    n, d = Y.shape
    v = (np.arange(grid) + 0.5) / grid
    v1, v2 = np.meshgrid(v, v, indexing="ij")
    prior_v = ALPHA**2 * v1 ** (ALPHA - 1) * v2 ** (ALPHA - 1)
    p1, p2 = v1, v1 * v2
    marg, total, ev1 = np.zeros((n, 2)), 0.0, 0.0
    for bits in itertools.product([0, 1], repeat=n * 2):
        z = np.array(bits, float).reshape(n, 2)
        cov = SD_A**2 * z @ z.T + SD_X**2 * np.eye(n)
        lik = np.exp(sum(multivariate_normal.logpdf(Y[:, j], np.zeros(n), cov) for j in range(d)))
        m = z.sum(0)
        w = prior_v * p1 ** m[0] * (1 - p1) ** (n - m[0]) * p2 ** m[1] * (1 - p2) ** (n - m[1])
        mass = w.mean() * lik
        total += mass
        marg += mass * z
        ev1 += (w * v1).mean() * lik
    return marg / total, ev1 / total


def _batch_se(x, batches=50):
    """Monte Carlo standard error of the mean of each column of x (draws, ...) by batch means."""
    b = x[: len(x) // batches * batches].reshape((batches, -1) + x.shape[1:]).mean(1)
    return b.std(0, ddof=1) / np.sqrt(batches)


def test_gibbs_matches_the_enumerated_posterior():
    Y = _problem()
    exact_z, exact_v1 = _exact(Y)
    prior = IBPPrior.create(alpha=ALPHA, noise_precision=SD_X**-2, feature_precision=SD_A**-2)
    structure = Structure(False, False)
    num_chains, num_samples = 4, 4000
    states = ibp_gibbs.GibbsState(np.zeros((num_chains, 3, 2)), np.zeros((num_chains, 2, 2)),
                                  np.full((num_chains, 2), 0.5), np.full(num_chains, SD_X**-2),
                                  np.full(num_chains, SD_A**-2))
    kept = ibp_gibbs.sample_chains(jax.random.split(jax.random.PRNGKey(0), num_chains), states, Y, prior,
                                   structure, 200, num_samples)
    z = np.asarray(kept.z).reshape(-1, 3, 2)
    v1 = np.asarray(kept.sticks)[..., 0].reshape(-1)
    se_z = np.sqrt(np.sum([_batch_se(np.asarray(kept.z)[c]) ** 2 for c in range(num_chains)], 0)) / num_chains
    se_v = np.sqrt(np.sum([_batch_se(np.asarray(kept.sticks)[c, :, 0]) ** 2 for c in range(num_chains)])) / num_chains
    assert np.all(np.abs(z.mean(0) - exact_z) <= 4.5 * se_z + 0.003), (z.mean(0), exact_z, se_z)
    assert abs(v1.mean() - exact_v1) <= 4.5 * se_v + 0.003, (v1.mean(), exact_v1, se_v)
