"""inference.spikeslab.structure: recognising spike-and-slab models, library and user-written."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import ndtr

from inference._model import trace_model
from inference.spikeslab import SpikeSlab, extract, matches
from probmodels.spike_slab import spike_and_slab_probit, spike_and_slab_regression

RNG = np.random.default_rng(3)
X = RNG.normal(size=(15, 4))
Y = X[:, 0] + RNG.normal(size=15)


def _extract(model, *args, **kwargs):
    return extract(model, args, kwargs, trace_model(model, args, kwargs))


def test_library_regression_forms():
    prob = _extract(spike_and_slab_regression, X, Y, p_incl=0.2, slab_scale=2.0)
    assert prob.likelihood == "gaussian" and prob.noise_prior == (1.0, 1.0) and prob.precision_site == "precision"
    np.testing.assert_allclose(prob.X, X, atol=1e-12)
    np.testing.assert_allclose(prob.y, Y, atol=1e-12)
    np.testing.assert_allclose(prob.slab_var, 4.0)
    np.testing.assert_allclose(prob.p_incl, 0.2)
    fixed = _extract(spike_and_slab_regression, X, Y, noise_scale=0.5)
    assert fixed.noise_prior is None and fixed.precision_site is None
    np.testing.assert_allclose(fixed.X, X / 0.5, atol=1e-12)  # unit-noise form
    np.testing.assert_allclose(fixed.log_scale_adjust, -15 * np.log(0.5))


def test_library_probit_labels_pm1():
    prob = _extract(spike_and_slab_probit, X, Y > 0)
    assert prob.likelihood == "probit"
    np.testing.assert_array_equal(prob.y, np.where(Y > 0, 1.0, -1.0))
    np.testing.assert_allclose(prob.X, X, atol=1e-10)


def test_user_model_with_offset_and_probs_parameterisation():
    """A user-written probit with a fixed bias, probabilities given directly as Phi(f)."""

    def model(X, y=None):
        z = numpyro.sample("incl", dist.Bernoulli(0.25).expand([X.shape[1]]).to_event(1))
        w = numpyro.sample("beta", SpikeSlab(z, 1.5).to_event(1))
        numpyro.sample("obs", dist.Bernoulli(probs=ndtr(jnp.asarray(X) @ w + 0.3)), obs=y)

    tr = trace_model(model, (X, (Y > 0).astype(int)), {})
    assert matches(tr)
    prob = extract(model, (X, (Y > 0).astype(int)), {}, tr)
    assert (prob.z_site, prob.w_site, prob.y_site) == ("incl", "beta", "obs")
    np.testing.assert_allclose(prob.offset, 0.3, atol=1e-8)
    np.testing.assert_allclose(prob.X, X, atol=1e-7)
    np.testing.assert_allclose(prob.slab_var, 2.25)


def test_not_a_spike_slab_model():
    def model(X, y=None):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Normal(jnp.asarray(X) @ w, 1.0), obs=y)

    assert not matches(trace_model(model, (X, Y), {}))


def test_logistic_link_rejected_naming_the_site():
    def model(X, y=None):
        z = numpyro.sample("z", dist.Bernoulli(0.25).expand([X.shape[1]]).to_event(1))
        w = numpyro.sample("w", SpikeSlab(z, 1.0).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=jnp.asarray(X) @ w), obs=y)

    with pytest.raises(ValueError, match="'y'.*probit"):
        _extract(model, X, (Y > 0).astype(int))


def test_extra_latent_site_rejected_naming_it():
    def model(X, y=None):
        z = numpyro.sample("z", dist.Bernoulli(0.25).expand([X.shape[1]]).to_event(1))
        w = numpyro.sample("w", SpikeSlab(z, 1.0).to_event(1))
        bias = numpyro.sample("bias", dist.Normal(0, 1))
        numpyro.sample("y", dist.Normal(jnp.asarray(X) @ w + bias, 1.0), obs=y)

    with pytest.raises(ValueError, match="'bias'"):
        _extract(model, X, Y)


def test_non_conjugate_slab_with_unknown_precision_rejected():
    def model(X, y=None):
        z = numpyro.sample("z", dist.Bernoulli(0.25).expand([X.shape[1]]).to_event(1))
        tau = numpyro.sample("tau", dist.Gamma(1.0, 1.0))
        w = numpyro.sample("w", SpikeSlab(z, 1.0).to_event(1))  # slab not scaled by the noise
        numpyro.sample("y", dist.Normal(jnp.asarray(X) @ w, 1.0 / jnp.sqrt(tau)), obs=y)

    with pytest.raises(ValueError, match="'w'.*Normal-Gamma"):
        _extract(model, X, Y)


def test_nonlinear_mean_rejected():
    def model(X, y=None):
        z = numpyro.sample("z", dist.Bernoulli(0.25).expand([X.shape[1]]).to_event(1))
        w = numpyro.sample("w", SpikeSlab(z, 1.0).to_event(1))
        numpyro.sample("y", dist.Normal(jnp.tanh(jnp.asarray(X) @ w), 1.0), obs=y)

    with pytest.raises(ValueError, match="'y'.*affine"):
        _extract(model, X, Y)
