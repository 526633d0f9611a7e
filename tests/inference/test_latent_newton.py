"""Laplace's Newton mode for latent-Gaussian models (inference/latent_newton.py) in float32."""

import jax
import numpy as np

import inference
from probmodels.conjugate import gp_regression_posterior
from probmodels.gp import gp_regression
from probmodels.kernels import RBF


def test_float32_gp_regression_mode_and_evidence_with_little_noise():
    # Noise 0.01 in float32 (JAX's default): R&W's Newton point b - W^1/2 B^-1 W^1/2 K b cancels
    # terms of size y / noise^2, and the evidence at that point was off by 3457 nats at n = 500
    # (4.3 at n = 60) while converged=True; EP's `site_alpha` form: measured 0.005 nats (n = 500).
    # Here n = 200 (before: -291 nats). Reference: the float64 closed form on the same float32
    # Gram matrix (`gp_regression_posterior`).
    with jax.enable_x64(False):
        rng = np.random.default_rng(0)
        X = np.sort(rng.uniform(-3, 3, size=(200, 1)), 0)
        y = np.sin(2 * X[:, 0]) + 0.01 * rng.normal(size=200)
        post = inference.laplace(gp_regression, X, y, kernel=RBF(2.0), noise=0.01, progress=False)
        ref = gp_regression_posterior(X, y, kernel=RBF(2.0), noise=0.01)
        sd = np.sqrt(np.diag(ref.cov))
        f = np.asarray(post.samples["f"], np.float64).reshape(-1, 200)
    assert post.diagnostics["converged"]
    assert abs(post.log_evidence - ref.log_evidence) < 0.5, (post.log_evidence, ref.log_evidence)
    assert np.max(np.abs(f.mean(0) - ref.mean) / sd) < 0.3  # 1000 draws: Monte Carlo floor ~0.1
