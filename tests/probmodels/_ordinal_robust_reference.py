"""Seeded data sets of `test_ordinal_robust.py` and the long NUTS run that gave its reference
posterior moments. Regenerate the constants with ``python tests/probmodels/_ordinal_robust_reference.py``
(float64; 4 chains x 10,000 draws after 2,000 warm-up each; ~2-4 minutes)."""

import numpy as np

TRUE_W = np.array([1.0, -0.7, 0.4])


def ordinal_data(n=120, seed=0):
    """Ordinal probit data with the model's defaults: K = 4, cut points -1, 0, 1, noise scale 1."""
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 3))
    latent = X @ TRUE_W + r.normal(size=n)
    return X, np.searchsorted(np.array([-1.0, 0.0, 1.0]), latent)


def robust_data(n=100, seed=0):
    """Linear data with Student-t (df 3, scale 1) noise and 10% gross outliers (+12 or +18): a
    Gaussian-noise fit is pulled far off the true weights."""
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 3))
    y = X @ TRUE_W + r.standard_t(3.0, size=n)
    out = r.choice(n, n // 10, replace=False)
    y[out] += np.where(X[out, 0] > 0, 18.0, 12.0)
    return X, y


if __name__ == "__main__":
    import jax

    jax.config.update("jax_enable_x64", True)
    import inference
    import probmodels

    for name, model, data in [("ORDINAL", probmodels.ordinal_regression, ordinal_data()),
                              ("ROBUST", probmodels.robust_regression, robust_data())]:
        post = inference.mcmc(model, *data, num_samples=10000, num_warmup=2000, num_chains=4, seed=123, progress=False)
        w = np.asarray(post.samples["w"]).reshape(-1, 3)
        print(f"{name}_MEAN = {np.round(w.mean(0), 5).tolist()}")
        print(f"{name}_SD = {np.round(w.std(0), 5).tolist()}")
        print(f"# {name}: max R-hat {post.diagnostics['max_rhat']:.4f}, min ESS {post.diagnostics['min_ess']:.0f}")
