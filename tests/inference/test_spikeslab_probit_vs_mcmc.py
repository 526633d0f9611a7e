"""inference.spikeslab.engines on the issue's probit check: EP vs MCMC inclusion probabilities and
predictive probabilities on a simulated n = 60, d = 500 problem with 5 true genes.

The default test holds EP to a stored long MCMC run (4 x 12,000 Gibbs scans, seed 1; made by
tests/fixtures/make_ss_probit_reference.py) within 0.05 flat; the slow test (``-m slow``,
``RUN_SLOW=1``) runs that MCMC itself, on two data seeds."""

import os
import pathlib

import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

from inference._model import trace_model
from inference.spikeslab import ep_posterior, mcmc_posterior
from _stored_reference import data_digest
from probmodels.spike_slab import spike_and_slab_probit

REFERENCE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "ss_probit_reference.npz"


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


def _ep(X, y, Xt):
    tr = trace_model(spike_and_slab_probit, (X, y), {})
    ep = ep_posterior(spike_and_slab_probit, (X, y), {}, tr, num_samples=200)
    return tr, ep.approximation["inclusion_probability"], np.asarray(ep.predict(Xt)["y_mean"]).mean(axis=(0, 1))


def test_probit_ep_vs_mcmc_500_genes():
    """n = 60, d = 500, 5 true genes. EP ranks the true genes first (as the reference does); its
    predictive probabilities on 200 test points and its inclusion probabilities agree with the
    stored 4 x 12,000-scan MCMC reference within 0.05 (its MCSE is below 0.02), the predictive
    ones within 0.02 on average. Measured (2026-12-04): max |EP - reference| predictive 0.018
    (mean 0.005), inclusion 0.016; the factorised EP of thesis ch. 7 gave 0.115 and 0.166 against
    a 4 x 12,000-scan run."""
    X, y, Xt = _genes(0)
    with np.load(REFERENCE) as ref:
        assert str(ref["data_sha256"]) == data_digest(X, y, Xt), "data changed: rerun make_ss_probit_reference.py"
        p_mc, f_mc, se = ref["p_incl"], ref["p_test"], ref["p_test_mcse"]
    _, p_ep, f_ep = _ep(X, y, Xt)
    assert set(np.argsort(-p_ep)[:5]) == set(range(5)) and set(np.argsort(-p_mc)[:5]) == set(range(5))
    assert np.max(se) < 0.02
    assert np.max(np.abs(f_ep - f_mc)) < 0.05
    assert np.mean(np.abs(f_ep - f_mc)) < 0.02
    assert np.max(np.abs(p_ep - p_mc)) < 0.05


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RUN_SLOW") != "1", reason="long MCMC reference; RUN_SLOW=1 to run")
@pytest.mark.parametrize("seed", [0, 1])
def test_probit_ep_vs_long_mcmc_500_genes(seed):
    X, y, Xt = _genes(seed)
    tr, p_ep, f_ep = _ep(X, y, Xt)
    mc = mcmc_posterior(spike_and_slab_probit, (X, y), {}, tr, num_samples=12000, num_warmup=1000, num_chains=4, seed=1)
    p_mc = mc.diagnostics["inclusion_probability"]
    draws = np.asarray(mc.predict(Xt)["y_mean"])  # (chain, draw, test point)
    se = np.sqrt(draws.var(axis=(0, 1)) / np.asarray(effective_sample_size(draws)))
    f_mc = draws.mean(axis=(0, 1))
    assert set(np.argsort(-p_ep)[:5]) == set(range(5)) and set(np.argsort(-p_mc)[:5]) == set(range(5))
    assert np.max(se) < 0.02
    assert np.max(np.abs(f_ep - f_mc)) < 0.05
    assert np.max(np.abs(p_ep - p_mc)) < 0.05
