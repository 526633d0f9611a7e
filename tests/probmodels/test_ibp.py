"""The IBP linear-Gaussian latent feature model: its density against SciPy, bad input, and both
inference paths (mean-field VI, blocked Gibbs) recovering the four cambridge features, with the
posterior of the number of active features and the truncation check."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer.util import log_density
from scipy import stats

import inference
from probmodels.ibp import cambridge, ibp_linear_gaussian, match_features, summarise

DATA = cambridge(100, seed=0)
K = 8  # one truncation everywhere (tests, docstrings, demo): one set of compiled programs


def test_sites_shapes_and_density_against_scipy():
    rng = np.random.default_rng(0)
    values = {"sticks": np.array([0.8, 0.6, 0.3]), "z": rng.integers(0, 2, (10, 3)), "feature_scale": 0.7,
              "features": rng.normal(size=(3, 36)), "noise_scale": 0.4}
    kw = {"alpha": 1.7}
    # one compiled program (run eagerly, log_density compiled each of its operations apart)
    def density(v):
        lp, tr = log_density(ibp_linear_gaussian, (DATA.Y[:10], 3), kw, v)
        names.extend(n for n, s in tr.items() if s["type"] in ("sample", "deterministic"))
        return lp

    names = []
    lp = jax.jit(density)({k: jnp.asarray(v) for k, v in values.items()})
    assert names == ["sticks", "probs", "z", "feature_scale", "features", "noise_scale", "Y"]
    var = np.mean(DATA.Y[:10] ** 2)
    probs = np.cumprod(values["sticks"])
    ref = np.sum(stats.beta.logpdf(values["sticks"], 1.7, 1.0))
    ref += np.sum(stats.bernoulli.logpmf(values["z"], probs))
    for name, (a, b) in (("feature_scale", (1.0, 1.0)), ("noise_scale", (1.0, 0.1))):
        s = values[name]
        ref += stats.invgamma.logpdf(s**2, a, scale=b * var) + np.log(2 * s)
    ref += np.sum(stats.norm.logpdf(values["features"], 0, 0.7))
    ref += np.sum(stats.norm.logpdf(DATA.Y[:10], values["z"] @ values["features"], 0.4))
    assert float(lp) == pytest.approx(ref, rel=1e-10)
    # the prior predictive's structure: an abstract trace (`jax.eval_shape`), no sampler compiled
    sites = []

    def simulate():
        tr = numpyro.handlers.trace(numpyro.handlers.seed(ibp_linear_gaussian, 1)).get_trace(
            None, 4, num_points=7, num_features=5, noise_scale=0.1, feature_scale=1.0)
        sites.extend(tr)
        return tr["Y"]["value"]

    assert jax.eval_shape(simulate).shape == (7, 5) and "Y" in sites and "noise_scale" not in sites


@pytest.mark.parametrize("args,kwargs,match,error", [
    ((np.where(np.arange(36) == 5, np.nan, DATA.Y),), {}, "Y contains NaN", ValueError),
    ((DATA.Y[0],), {}, "Y must be 2-D", ValueError),
    ((DATA.Y, 0), {}, "truncation", ValueError),
    ((DATA.Y, 2.5), {}, "truncation", TypeError),
    ((DATA.Y,), {"alpha": -1.0}, "alpha", ValueError),
    ((DATA.Y,), {"noise_scale": 0.0}, "noise_scale", ValueError),
    ((DATA.Y,), {"noise_prior": (1.0,)}, "noise_prior", TypeError),
    ((DATA.Y,), {"feature_prior": (1.0, -2.0)}, "feature_prior", ValueError),
    ((None,), {}, "num_points", ValueError),
])
def test_bad_input_is_named_before_any_tracing(args, kwargs, match, error):
    with pytest.raises(error, match=match):
        numpyro.handlers.trace(numpyro.handlers.seed(ibp_linear_gaussian, 0)).get_trace(*args, **kwargs)
    with pytest.raises(error, match=match):
        inference.vi(ibp_linear_gaussian, *args, **kwargs)


def test_engines_that_do_not_apply_say_why():
    with pytest.raises(ValueError, match="'z' is a discrete"):
        inference.vi(ibp_linear_gaussian, DATA.Y, method="svi")
    with pytest.raises(ValueError, match="discrete"):
        inference.laplace(ibp_linear_gaussian, DATA.Y)
    with pytest.raises(ValueError, match="target_accept"):
        inference.mcmc(ibp_linear_gaussian, DATA.Y, target_accept=0.9)


def _check_recovery(post, tol_max=0.4, tol_mean=0.1):
    _, matched = match_features(post.mean("features"), DATA.features)
    err = np.abs(matched - DATA.features)
    assert err.max() < tol_max and err.mean() < tol_mean, (err.max(), err.mean())
    ibp = post.diagnostics["ibp"]
    assert sum(ibp["active_features_probs"].values()) == pytest.approx(1.0)
    assert ibp["truncation_ok"] and ibp["last_feature_prob_mean"] < 0.01
    for name, value in post.samples.items():
        assert np.all(np.isfinite(value)), name


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_vi_recovers_the_four_cambridge_features(x64):
    with jax.enable_x64(x64), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = inference.vi(ibp_linear_gaussian, DATA.Y, truncation=K, num_samples=100)
    assert not [w for w in caught if "truncation" in str(w.message) or "VI" in str(w.message)]
    assert post.samples["features"].dtype == (np.float64 if x64 else np.float32)
    _check_recovery(post)
    assert post.diagnostics["ibp"]["active_features_probs"] == {4: 1.0}
    assert post.diagnostics["converged"] and post.evidence_method == "elbo"
    trace = post.diagnostics["elbo_trace"]  # coordinate ascent: the bound never decreases
    assert len(trace) > 5 and np.all(np.diff(trace) >= -1e-5 * np.abs(trace[1:])), np.diff(trace).min()
    assert abs(float(post.mean("noise_scale")) - 0.5) < 0.03  # the simulated noise sd
    dt = post.to_arviz()
    assert dt.posterior["z"].dims == ("chain", "draw", "point", "feature")


def test_gibbs_recovers_the_features_and_reports_the_active_count_posterior():
    post = inference.mcmc(ibp_linear_gaussian, DATA.Y, truncation=K, num_warmup=100, num_samples=200, num_chains=2)
    _check_recovery(post)
    ibp = post.diagnostics["ibp"]
    # The active-count posterior of a long run (4 chains x 3000 draws after 500, seed 11, R-hat
    # 1.03-1.05, with this sampler and with jax.random.gamma in it): mean 5.25-5.36, mode 5,
    # P(4) 0.22-0.28, P(6) 0.23-0.26, chain means 5.14-5.62. The mode of 2 x 200 draws is 5 or 6
    # by seed, so the check is on the mean: its spread over seeds is ~0.3, and a sampler that
    # cannot open a feature (4) or keeps all K = 8 fails.
    assert abs(ibp["active_features_mean"] - 5.3) < 0.8 and ibp["active_features_mode"] in (4, 5, 6), ibp
    assert ibp["feature_active_prob"][:4].min() == 1.0  # the four true features, in the stick-breaking order
    assert post.diagnostics["sampler"] == "ibp-gibbs" and np.isfinite(post.diagnostics["max_rhat"])
    assert post.samples["z"].shape == (2, 200, 100, K) and post.log_likelihood["Y"].shape == (2, 200, 100)


def test_truncation_check_warns_when_the_last_feature_is_used():
    class Post:  # only what summarise reads
        samples = {"z": np.ones((1, 5, 10, 3), np.int32), "probs": np.full((1, 5, 3), 0.4)}

    with pytest.warns(UserWarning, match="raise truncation"):
        out = summarise(Post())
    assert not out["truncation_ok"] and out["active_features_probs"] == {3: 1.0}
    Post.samples = {"z": np.zeros((1, 5, 10, 3), np.int32), "probs": np.full((1, 5, 3), 1e-4)}
    Post.samples["z"][..., 0] = 1
    out = summarise(Post())
    assert out["truncation_ok"] and out["active_features_mean"] == 1.0
