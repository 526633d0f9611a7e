"""Mean-field VI for the IBP (inference.ibp_vi): the multinomial bound against its exact case and
Monte Carlo, and the feature and precision updates as exact maximisers of the bound (its gradient
vanishes there). The bound's monotone increase over a whole fit is checked in tests/probmodels/test_ibp.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import digamma

from inference import ibp_vi
from inference.ibp_vi import IBPPrior, Structure

RNG = np.random.default_rng(0)
Y = (RNG.uniform(size=(30, 2)) < 0.5) @ np.array([[2.0, 0, 1, 0], [0, 2.0, 0, 1]]) + 0.4 * RNG.normal(size=(30, 4))
PRIOR = IBPPrior.create(alpha=1.2, noise_shape=1.0, noise_rate=0.2, noise_precision=6.0, feature_shape=1.0,
                        feature_rate=1.0, feature_precision=0.5)


def test_multinomial_bound_is_exact_for_the_first_stick_and_a_lower_bound_after():
    tau1, tau2 = jnp.array([2.0, 3.0, 1.5]), jnp.array([1.5, 0.7, 2.0])
    bound, q = ibp_vi.multinomial_bound(tau1, tau2)
    assert float(bound[0]) == pytest.approx(float(digamma(tau2[0]) - digamma(tau1[0] + tau2[0])), rel=1e-12)
    assert np.allclose(np.asarray(q).sum(1), 1.0) and np.all(np.triu(np.asarray(q), 1) == 0)
    v = np.random.default_rng(1).beta(np.asarray(tau1), np.asarray(tau2), size=(400_000, 3))
    mc = np.log1p(-np.cumprod(v, 1))
    se = mc.std(0) / np.sqrt(len(mc))
    assert np.all(np.asarray(bound) <= mc.mean(0) + 4 * se), (bound, mc.mean(0))
    assert np.all(np.asarray(bound) >= mc.mean(0) - 0.3)  # and not far below (the paper's bound is tight-ish)


def _state(structure, seed=0):
    s = ibp_vi.init(jax.random.PRNGKey(seed), jnp.asarray(Y), PRIOR, 4, structure)
    for _ in range(3):
        s = ibp_vi.update(jnp.asarray(Y), PRIOR, s, structure)
    return s


def test_feature_and_precision_updates_are_the_exact_maximisers():
    learn = True  # the Gamma factors learnt: every block is checked (the bound's monotonicity: test_ibp.py)
    structure = Structure(learn, learn)
    s = _state(structure)
    Yj = jnp.asarray(Y)
    e_x = s.noise_shape / s.noise_rate if learn else PRIOR.noise_precision
    e_a = s.feature_shape / s.feature_rate if learn else PRIOR.feature_precision
    phi, cov = ibp_vi._update_features(Yj, s.nu, e_x, e_a)
    s = s._replace(phi=phi, cov=cov)
    g = jax.grad(lambda p, c: ibp_vi.elbo(Yj, PRIOR, s._replace(phi=p, cov=c), structure), argnums=(0, 1))(phi, cov)
    assert float(jnp.max(jnp.abs(g[0]))) < 1e-8 and float(jnp.max(jnp.abs(g[1] + g[1].T))) < 1e-8
    if learn:  # the Gamma factors come last in a sweep: optimal given everything else
        s = ibp_vi.update(Yj, PRIOR, s, structure)
        grad = jax.grad(lambda a, b: ibp_vi.elbo(Yj, PRIOR, s._replace(noise_shape=a, noise_rate=b), structure),
                        argnums=(0, 1))(s.noise_shape, s.noise_rate)
        assert max(abs(float(grad[0])), abs(float(grad[1]))) < 1e-6
