"""inference.random_draws: `log_gammas` (each array of concentrations gets its own Gamma
variates, Kolmogorov-Smirnov against scipy's CDF, concentrations from 1e-3 to 1e4), `gamma` and
`beta` (small and large shapes), float32 and float64, several seeds; one Gamma sampler in a
program where jax.random.beta compiles two; invalid traced concentrations give NaN, never a
sampler that runs forever."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from inference.random_draws import beta, gamma, log_gammas

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


_LOG_GAMMAS = jax.jit(log_gammas, static_argnums=2)


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_log_gammas_gives_each_array_its_own_gamma_draws(x64):
    """Six arrays of different concentrations and shapes in one call: each block follows
    Gamma(a, 1) (KS p > 1e-4 for each of 3 seeds x 6 blocks; a block read from another block's
    draws fails with p ~ 0), and ``log G`` stays finite where ``G`` underflows (a = 0.01, 1e-3)."""
    dtype = "float64" if x64 else "float32"
    shapes = [np.full(12000, 0.01), np.full((3, 4000), 2.5), np.full((2, 2, 3000), 40.0), np.full(9000, 1e-3),
              np.full(9000, 1.0), np.full(9000, 1e4)]
    with jax.enable_x64(x64):
        for seed in range(3):
            out = [np.asarray(x) for x in _LOG_GAMMAS(jax.random.PRNGKey(seed), shapes, dtype)]
            assert [x.shape for x in out] == [a.shape for a in shapes]
            for x, a in zip(out, shapes):
                assert x.dtype == np.dtype(dtype) and np.all(np.isfinite(x))
                # log G for small a: compare on the log scale (G itself underflows in float32)
                ref = scipy.stats.loggamma(a.flat[0]).cdf
                assert scipy.stats.kstest(x.ravel(), ref).pvalue > 1e-4, (seed, a.flat[0])


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


_GAMMA = jax.jit(gamma, static_argnums=2)


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_gamma_follows_the_gamma_distribution_and_broadcasts(x64):
    """`gamma` is Gamma(a, 1) with ``a`` broadcast to ``shape`` (KS p > 1e-3, 3 seeds x 2 columns)."""
    with jax.enable_x64(x64):
        for seed in range(3):
            g = np.asarray(_GAMMA(jax.random.PRNGKey(seed), jnp.array([0.7, 30.0]), (20000, 2)))
            assert g.dtype == (np.float64 if x64 else np.float32) and np.all(g > 0)
            for j, a in enumerate((0.7, 30.0)):
                assert scipy.stats.kstest(g[:, j], scipy.stats.gamma(a).cdf).pvalue > 1e-3, (seed, a)


def test_invalid_traced_concentrations_give_nan_and_the_sampler_stops():
    """Inside a program the positivity check cannot run: a negative, infinite or NaN concentration
    gives NaN (a rejection loop waiting for it to accept would never stop), a zero one log G = -inf,
    and the valid ones beside them are drawn as usual."""
    a = jnp.array([2.0, -1.0, jnp.inf, jnp.nan, 0.0, 0.5])
    out = np.asarray(_LOG_GAMMAS(jax.random.PRNGKey(0), [a], None)[0])
    assert np.isfinite(out[[0, 5]]).all() and np.isnan(out[1:4]).all() and out[4] == -np.inf


def test_log_gammas_names_bad_concentrations():
    """One array instead of a list (its rows would be read as separate arrays) and a concentration
    that is not positive are refused, naming the argument."""
    with pytest.raises(TypeError, match="concentrations: needs a non-empty list"):
        log_gammas(jax.random.PRNGKey(0), np.ones((3, 4)))
    with pytest.raises(ValueError, match="concentrations: Gamma concentrations must be positive"):
        log_gammas(jax.random.PRNGKey(0), [np.ones(3), np.array([1.0, 0.0])])
