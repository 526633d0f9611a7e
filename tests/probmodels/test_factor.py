"""Factor analysis and PPCA: the marginal density against SciPy, the lower-triangular rotation,
the closed-form ML PPCA against scikit-learn's PCA, the recovered factors' conditional, bad input,
the posterior against ML PPCA as the data grow and against scikit-learn's FactorAnalysis, chains
that agree (the rotation is fixed), float32 and float64."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

import inference
from probmodels.factor import factor_analysis, factor_draws, lower_triangular, ppca, ppca_ml, simulate

NOISE = [0.1, 0.2, 0.3, 0.2, 0.4, 0.3]
BIG = simulate(3000, 6, 2, seed=0, noise=0.25)  # the docstrings' data: their Laplace programs are reused
FA = simulate(3000, 6, 2, seed=1, noise=NOISE)


@pytest.mark.parametrize("model", [ppca, factor_analysis])
def test_marginal_density_against_scipy(model):
    Y = BIG.Y[:40]
    rng = np.random.default_rng(0)
    values = {"loc": rng.normal(size=6), "loadings_diag": np.array([0.7, 1.2]),
              "loadings_lower": rng.normal(size=6 * 2 - 3),
              "noise": 0.3 if model is ppca else np.array(NOISE)}
    def fn(v):
        lp, tr = log_density(model, (Y, 2), {"loading_scale": 1.5}, v)
        return lp, tr["loadings"]["value"]

    lp, W = jax.jit(fn)({k: jnp.asarray(v) for k, v in values.items()})
    W = np.asarray(W)
    assert W[0, 1] == 0.0 and np.allclose(np.diag(W[:2]), [0.7, 1.2])
    assert np.allclose(W[np.tril_indices(6, -1, 2)], values["loadings_lower"])
    psi = np.broadcast_to(values["noise"], (6,))
    m, v = Y.mean(0), Y.var(0)
    ref = np.sum(stats.multivariate_normal.logpdf(Y, values["loc"], W @ W.T + np.diag(psi)))
    ref += np.sum(stats.norm.logpdf(values["loc"], m, np.sqrt(v)))
    ref += np.sum(stats.halfnorm.logpdf(values["loadings_diag"], scale=1.5 * np.sqrt(v[:2])))
    rows = np.tril_indices(6, -1, 2)[0]
    ref += np.sum(stats.norm.logpdf(values["loadings_lower"], 0, 1.5 * np.sqrt(v[rows])))
    scale = 0.5 * (v.mean() if model is ppca else v)
    ref += np.sum(stats.invgamma.logpdf(values["noise"], 2.0, scale=scale))
    assert float(lp) == pytest.approx(ref, rel=1e-10)


def test_lower_triangular_rotation_and_ml_ppca_against_scikit_learn():
    from sklearn.decomposition import PCA

    W = np.random.default_rng(0).normal(size=(5, 3))
    L = lower_triangular(W)
    assert np.allclose(L @ L.T, W @ W.T) and np.all(np.triu(L[:3], 1) == 0) and np.all(np.diag(L) > 0)
    assert np.allclose(np.asarray(jax.jit(lower_triangular)(jnp.asarray(W))), L)  # one program, not one per op
    fit = ppca_ml(BIG.Y, 2)
    n = len(BIG.Y)
    pca = PCA(2).fit(BIG.Y)  # Tipping & Bishop's ML covariance (scikit-learn divides by n - 1)
    assert np.allclose(fit.loadings @ fit.loadings.T + fit.noise * np.eye(6), pca.get_covariance() * (n - 1) / n,
                       atol=1e-10)
    assert fit.noise == pytest.approx(pca.noise_variance_ * (n - 1) / n, rel=1e-10)
    C = fit.loadings @ fit.loadings.T + fit.noise * np.eye(6)
    assert fit.log_likelihood == pytest.approx(stats.multivariate_normal.logpdf(BIG.Y, fit.loc, C).sum(), rel=1e-10)


def test_recovered_factors_follow_their_gaussian_conditional():
    W, psi, loc = BIG.loadings, np.array(NOISE), BIG.loc
    y = BIG.Y[:3]
    # jitted: one program (eagerly, each of its operations was compiled apart)
    draws = jax.jit(jax.vmap(lambda k: factor_draws(k, jnp.asarray(y), jnp.asarray(loc), jnp.asarray(W),
                                                    jnp.asarray(psi))))(jax.random.split(jax.random.PRNGKey(0), 20000))
    draws = np.asarray(draws)  # (S, 3, 2)
    M = np.eye(2) + W.T @ np.diag(1 / psi) @ W
    cov = np.linalg.inv(M)
    mean = (cov @ W.T @ np.diag(1 / psi) @ (y - loc).T).T
    se = np.sqrt(np.diag(cov) / 20000)
    assert np.all(np.abs(draws.mean(0) - mean) < 4.5 * se)
    assert np.allclose(np.cov(draws[:, 0].T), cov, atol=0.03 * np.abs(cov).max())


@pytest.mark.parametrize("model,args,kwargs,match,error", [
    (ppca, (BIG.Y, 6), {}, "num_factors must be smaller", ValueError),
    (ppca, (BIG.Y, 0), {}, "num_factors", ValueError),
    (factor_analysis, (BIG.Y[:, 0],), {}, "Y must be 2-D", ValueError),
    (factor_analysis, (np.where(np.arange(6) == 2, np.inf, BIG.Y),), {}, "Y contains NaN or inf", ValueError),
    (factor_analysis, (BIG.Y,), {"loading_scale": 0.0}, "loading_scale", ValueError),
    (ppca, (BIG.Y,), {"noise_prior": (2.0, -1.0)}, "noise_prior", ValueError),
    (ppca, (None, 2), {}, "num_points", ValueError),
])
def test_bad_input_is_named_before_any_tracing(model, args, kwargs, match, error):
    for engine in (inference.laplace, inference.vi):
        with pytest.raises(error, match=match):
            engine(model, *args, **kwargs)


@pytest.mark.slow  # eager prior draws compile a Gamma sampler (~4 s); the model's data path is tested above
def test_prior_predictive_simulates():
    import numpyro

    tr = numpyro.handlers.trace(numpyro.handlers.seed(ppca, 0)).get_trace(None, 2, num_points=7, num_features=4)
    assert tr["Y"]["value"].shape == (7, 4) and "factors" not in tr


# ----------------------------------------------------------------------------- engines
def _ww(post):
    W = post.samples["loadings"].reshape((-1,) + post.samples["loadings"].shape[2:])
    return np.einsum("sij,skj->ik", W, W) / len(W)


def _ppca_against_ml(n):
    Y = BIG.Y[:n]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = inference.laplace(ppca, Y, num_factors=2)
    ml = ppca_ml(Y, 2)
    assert post.diagnostics["converged"]
    assert abs(float(post.mean("noise")) - ml.noise) < 3 * float(post.std("noise"))
    assert np.max(np.abs(post.mean("loadings") - ml.loadings)) < 4 * np.max(post.std("loadings"))
    return np.max(np.abs(_ww(post) - ml.loadings @ ml.loadings.T))


def test_ppca_posterior_mean_matches_ml_on_3000_rows():
    """E[W W^T | Y] (Laplace: the mode, the mean of its draws) against the ML W W^T, and the
    loadings themselves (both in the lower-triangular form), within a fraction of a posterior sd."""
    assert _ppca_against_ml(3000) < 0.01


@pytest.mark.slow
def test_ppca_posterior_mean_approaches_ml_as_the_data_grow():
    """The gap shrinks like 1/n (prior and Jacobian terms) while the posterior sd shrinks like
    1/sqrt(n): 300 against 3000 rows."""
    small, large = _ppca_against_ml(300), _ppca_against_ml(3000)
    assert large < 0.3 * small and large < 0.01, (small, large)


def test_factor_analysis_noise_variances_agree_with_scikit_learn():
    from sklearn.decomposition import FactorAnalysis

    sk = FactorAnalysis(2, tol=1e-8, max_iter=5000).fit(FA.Y)
    post = inference.laplace(factor_analysis, FA.Y, num_factors=2)
    gap = np.abs(post.mean("noise") - sk.noise_variance_)
    assert np.all(gap < 3 * post.std("noise")) and np.all(gap < 0.02), (post.mean("noise"), sk.noise_variance_)
    assert np.allclose(post.mean("noise"), NOISE, atol=0.05)
    W = post.mean("loadings")
    assert np.allclose(W @ W.T, sk.components_.T @ sk.components_, atol=0.03)
    f = post.samples["factors"].mean((0, 1))  # the recovered factors, up to the rotation
    assert f.shape == (3000, 2) and np.linalg.lstsq(f, FA.factors, rcond=None)[1].sum() / FA.factors.var(0).sum() < 0.2 * 3000


@pytest.mark.slow
def test_nuts_chains_agree_and_match_ml_ppca():
    post = inference.mcmc(ppca, BIG.Y[:1000], num_factors=2, num_warmup=500, num_samples=500, num_chains=4)
    assert post.diagnostics["converged"], post.diagnostics
    ml = ppca_ml(BIG.Y[:1000], 2)
    assert np.max(np.abs(post.mean("loadings") - ml.loadings)) < 3 * np.max(post.std("loadings"))


def test_two_short_nuts_chains_agree():
    """The rotation fixed and a data-driven start: two chains sample the same mode (R-hat)."""
    post = inference.mcmc(ppca, BIG.Y[:300], num_factors=2, num_warmup=200, num_samples=200, num_chains=2)
    assert post.diagnostics["max_rhat"] < 1.05 and post.diagnostics["divergences"] == 0, post.diagnostics
    per_chain = post.samples["loadings"].mean(1)
    assert np.max(np.abs(per_chain[0] - per_chain[1])) < 4 * np.max(post.std("loadings"))


def test_float32_default_fit_is_finite_and_right():
    Y = BIG.Y
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = inference.laplace(ppca, Y, num_factors=2)
    assert post.samples["loadings"].dtype == np.float32
    assert all(np.all(np.isfinite(v)) for v in post.samples.values())
    ml = ppca_ml(Y, 2)
    assert np.max(np.abs(post.mean("loadings") - ml.loadings)) < 4 * np.max(post.std("loadings"))
