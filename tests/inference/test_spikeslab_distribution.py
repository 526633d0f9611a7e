"""inference.spikeslab.distribution: the SpikeSlab site (point mass or Normal slab given z)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from inference.spikeslab.distribution import SpikeSlab, is_spike_slab, unwrap


def test_log_prob_mixed_measure():
    d = SpikeSlab(jnp.array([1, 0, 0]), jnp.array([2.0, 1.0, 1.0]))
    lp = np.asarray(d.log_prob(jnp.array([0.5, 0.0, 0.3])))
    slab = -0.5 * (0.5 / 2.0) ** 2 - math.log(2.0) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(lp[0], slab, rtol=1e-12)
    assert lp[1] == 0.0  # excluded weight exactly at the spike: unit point mass
    assert lp[2] == -np.inf  # excluded weight off the spike: impossible


def test_sample_zero_where_excluded_and_slab_moments():
    z = jnp.array([1, 0] * 5)
    w = np.asarray(SpikeSlab(z, 3.0).sample(jax.random.PRNGKey(0), (4000,)))
    assert np.all(w[:, 1::2] == 0.0)
    sd = w[:, ::2].std()
    assert abs(sd - 3.0) < 4 * 3.0 / np.sqrt(2 * w[:, ::2].size)  # SE of an SD estimate
    np.testing.assert_allclose(np.asarray(SpikeSlab(z, 3.0).variance), np.where(np.asarray(z) == 1, 9.0, 0.0))


def test_recognised_through_wrappers():
    d = SpikeSlab(jnp.ones(4, jnp.int32), 1.0).to_event(1)
    assert is_spike_slab(d) and isinstance(unwrap(d), SpikeSlab)
    assert not is_spike_slab(dist.Normal(0.0, 1.0).expand([4]).to_event(1))
