"""inference.spikeslab.engines on the issue's probit check: EP vs MCMC inclusion probabilities and
predictive probabilities on a simulated n = 60, d = 500 problem with 5 true genes.

The default run uses 4 x 1500 Gibbs scans and scales the predictive tolerance by the Monte Carlo
standard error; the slow test (``-m slow``, ``RUN_SLOW=1``) runs 4 x 12,000 scans and holds 0.05 flat."""

import os

import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

from inference._model import trace_model
from inference.spikeslab import ep_posterior, mcmc_posterior
from probmodels.spike_slab import spike_and_slab_probit


def _genes(seed, n=60, d=500, n_test=200, shift=1.0):
    """Microarray-like simulation: 5 differentially expressed genes (class means +-shift) among
    500 standard-normal genes; labels +-1 with equal probability."""
    rng = np.random.default_rng(seed)
    sign = np.array([1, -1, 1, -1, 1.0])
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X = rng.normal(size=(n, d))
    X[:, :5] += shift * y[:, None] * sign
    yt = np.where(rng.random(n_test) < 0.5, 1.0, -1.0)
    Xt = rng.normal(size=(n_test, d))
    Xt[:, :5] += shift * yt[:, None] * sign
    return X, y, Xt


def _ep_vs_mcmc(seed, num_samples, num_warmup):
    X, y, Xt = _genes(seed)
    tr = trace_model(spike_and_slab_probit, (X, y), {})
    ep = ep_posterior(spike_and_slab_probit, (X, y), {}, tr, num_samples=200)
    mc = mcmc_posterior(spike_and_slab_probit, (X, y), {}, tr, num_samples=num_samples, num_warmup=num_warmup,
                        num_chains=4, seed=1)
    p_ep, p_mc = ep.approximation["inclusion_probability"], mc.diagnostics["inclusion_probability"]
    f_ep = np.asarray(ep.predict(Xt)["y_mean"]).mean(axis=(0, 1))
    draws = np.asarray(mc.predict(Xt)["y_mean"])  # (chain, draw, test point)
    se = np.sqrt(draws.var(axis=(0, 1)) / np.asarray(effective_sample_size(draws)))
    return p_ep, p_mc, f_ep, draws.mean(axis=(0, 1)), se


def test_probit_ep_vs_mcmc_500_genes():
    """n = 60, d = 500, 5 true genes. Both rank the true genes first; EP's predictive probabilities
    on 200 test points agree with MCMC's within 0.05 + 3 Monte Carlo SE (this short run's MCSE is
    up to ~0.03; the slow test below runs long chains and holds 0.05 flat). Measured against
    4 x 12,000 scans (seeds 0/1): max |EP - MCMC| predictive 0.021 / 0.019, inclusion 0.021 /
    0.032; the factorised EP of thesis ch. 7 gives 0.115 / 0.069 and 0.166 / 0.117."""
    p_ep, p_mc, f_ep, f_mc, se = _ep_vs_mcmc(0, num_samples=1500, num_warmup=300)
    assert set(np.argsort(-p_ep)[:5]) == set(range(5)) and set(np.argsort(-p_mc)[:5]) == set(range(5))
    assert np.all(np.abs(f_ep - f_mc) < 0.05 + 3 * se)
    assert np.mean(np.abs(f_ep - f_mc)) < 0.02


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RUN_SLOW") != "1", reason="long MCMC reference; RUN_SLOW=1 to run")
@pytest.mark.parametrize("seed", [0, 1])
def test_probit_ep_vs_long_mcmc_500_genes(seed):
    p_ep, p_mc, f_ep, f_mc, se = _ep_vs_mcmc(seed, num_samples=12000, num_warmup=1000)
    assert set(np.argsort(-p_ep)[:5]) == set(range(5)) and set(np.argsort(-p_mc)[:5]) == set(range(5))
    assert np.max(se) < 0.02
    assert np.max(np.abs(f_ep - f_mc)) < 0.05
    assert np.max(np.abs(p_ep - p_mc)) < 0.05
