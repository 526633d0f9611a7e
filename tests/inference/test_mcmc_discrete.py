"""`inference.mcmc` on a program whose latents are all discrete (NumPyro's Gibbs steps beside
NUTS): the posterior marginals of a small Bayesian network against exact variable elimination,
in float32 and float64, within Monte Carlo error (MCSE from the effective sample size)."""

import jax
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

import inference
import probmodels
from probmodels.bayes_net import SPRINKLER  # Alpaydin's cloudy, sprinkler, rain, wet grass; W observed


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_gibbs_marginals_of_a_bayes_net_agree_with_exact_inference(x64):
    net = probmodels.bayes_net(SPRINKLER)
    exact = inference.exact(net, W=1)
    with jax.enable_x64(x64):
        post = inference.mcmc(net, W=1, num_samples=2000, num_warmup=300, num_chains=2, seed=1, progress=False)
    d = post.diagnostics
    assert d["sampler"] == "discrete-hmc-gibbs"
    # `converged` reads the discrete draws (R-hat 1.002-1.008, bulk ESS 527-593 at seeds 1-3,
    # float64): before, it looked at float sites only, found none, and said False
    assert d["converged"] is True and d["max_rhat"] < 1.01
    for node in ("C", "S", "R"):
        draws = np.asarray(post.samples[node], float).reshape(2, -1)  # (chain, draw)
        assert set(np.unique(draws)) <= {0.0, 1.0}
        p = float(exact.marginals[node][1])
        ess = float(effective_sample_size(draws))
        assert ess > 200, (node, ess)
        mcse = np.sqrt(p * (1 - p) / ess)
        assert abs(draws.mean() - p) < 4 * mcse, (node, draws.mean(), p, mcse)
