"""inference.kalman.univariate (the log likelihood the Bayesian LDS differentiates): equal to the
dense Gaussian joint with diagonal R, missing entries included, and its gradient equal to finite
differences of the dense log likelihood."""

import jax
import jax.numpy as jnp
import numpy as np

from inference.kalman.univariate import log_likelihood_diagonal

from _kalman_reference import dense_posterior, random_lds, simulate, with_missing


def test_value_and_gradient_match_the_dense_joint():
    m0, p0, F, Q, H, R = random_lds(5)
    r = np.diag(R).copy()
    params = (m0, p0, F, Q, H, np.diag(r))
    y = with_missing(simulate(params, 5))

    def ll(F, r):
        return log_likelihood_diagonal((m0, p0, F, Q, H), r, jnp.asarray(y))

    value, (g_f, g_r) = jax.jit(jax.value_and_grad(ll, argnums=(0, 1)))(F, r)
    np.testing.assert_allclose(value, dense_posterior(params, y)[3], rtol=0, atol=1e-8)
    h = 1e-6
    for name, i, j in (("F", 0, 0), ("F", 1, 2), ("r", 1, None)):
        up = [F.copy(), r.copy()]
        down = [F.copy(), r.copy()]
        k = 0 if name == "F" else 1
        idx = (i, j) if j is not None else i
        up[k][idx] += h
        down[k][idx] -= h
        dense = [dense_posterior((m0, p0, a[0], Q, H, np.diag(a[1])), y)[3] for a in (up, down)]
        fd = (dense[0] - dense[1]) / (2 * h)
        np.testing.assert_allclose((g_f if k == 0 else g_r)[idx], fd, rtol=1e-6, atol=1e-6)
