"""inference.random_draws.beta: the Beta distribution (Kolmogorov-Smirnov against scipy's CDF,
small and large shapes, float32 and float64, several seeds), in (0, 1], and one Gamma sampler in
its program where jax.random.beta compiles two."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from inference.random_draws import beta

_DRAW = jax.jit(beta, static_argnums=3)  # one program per dtype and shape


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("a, b", [(0.1, 0.3), (2.0, 6.0), (40.0, 5000.0), (1.0, 1.0)])
def test_draws_follow_the_beta_distribution(x64, a, b):
    with jax.enable_x64(x64):
        for seed in range(3):
            x = np.asarray(_DRAW(jax.random.PRNGKey(seed), a, b, (20000,)))
            assert x.dtype == (np.float64 if x64 else np.float32)
            assert np.all(np.isfinite(x)) and np.all(x >= 0) and np.all(x <= 1)
            # p > 1e-3 for each of 3 seeds x 8 cells: a wrong distribution fails with p ~ 0
            assert scipy.stats.kstest(x, scipy.stats.beta(a, b).cdf).pvalue > 1e-3, (seed, a, b)


def test_array_shapes_broadcast_and_are_drawn_independently():
    a, b = jnp.array([1.0, 50.0, 0.5]), jnp.array([[3.0], [7.0]])
    assert jax.eval_shape(beta, jax.random.PRNGKey(1), a, b).shape == (2, 3)
    many = np.asarray(_DRAW(jax.random.PRNGKey(2), a, b, (4000, 2, 3)))
    np.testing.assert_allclose(many.mean(0), np.asarray(a / (a + b)), atol=0.02)
    assert abs(np.corrcoef(many[:, 0, 0], many[:, 1, 0])[0, 1]) < 0.06


def test_one_gamma_sampler_per_program():
    """Counted in the optimised XLA program: about half of jax.random.beta's loops."""
    def loops(f):
        return jax.jit(f).lower(jax.random.PRNGKey(0), 2.0, 3.0).compile().as_text().count(" while(")

    ours, theirs = loops(lambda k, a, b: beta(k, a, b)), loops(lambda k, a, b: jax.random.beta(k, a, b))
    assert 0 < ours and 2 * ours <= theirs + 1, (ours, theirs)
