"""inference.spikeslab.engines, reached through the public drivers (``inference.mcmc`` / ``.vi`` /
``.ep`` hand spike-and-slab models to it): the Posterior each engine returns, inclusion
probabilities in the DataTree, LOO, prediction, persistence, degenerate genes, option checks, and
EP against MCMC on a 500-gene probit problem
(that one in test_spikeslab_probit_vs_mcmc.py)."""

import warnings

import arviz as az
import jax
import numpy as np
import pytest

import inference
from inference._model import trace_model
from inference.posterior import load
from inference.spikeslab import ep_posterior, exact_posterior, mcmc_posterior, vi_posterior
from probmodels.spike_slab import spike_and_slab_probit, spike_and_slab_regression

RNG = np.random.default_rng(11)
XR = RNG.normal(size=(30, 6))
XR[:, 4] = 0.0  # an all-zero gene: no information
XR[:, 5] = 1.0  # a constant gene: acts as an intercept
YR = 1.0 + XR[:, 0] - 0.8 * XR[:, 2] + 0.5 * RNG.normal(size=30)
XP = XR.copy()
YP = (XR[:, 0] - XR[:, 2] + 0.3 * RNG.normal(size=30)) > 0
FAST = {"ep": {"num_samples": 400}, "mcmc": {"num_samples": 1000, "num_warmup": 200, "num_chains": 2},  # bulk ESS ~340 >= 200
        "vi": {"num_samples": 400}}
ENGINES = {"ep": inference.ep, "mcmc": inference.mcmc, "vi": inference.vi}
CASES = {"regression": (spike_and_slab_regression, (XR, YR), {"p_incl": 0.3}),
         "probit": (spike_and_slab_probit, (XP, YP), {"p_incl": 0.3})}


@pytest.fixture(scope="module")
def posteriors():
    out = {}
    for case, (model, args, kw) in CASES.items():
        for engine, fn in ENGINES.items():
            out[case, engine] = fn(model, *args, **kw, seed=1, progress=False, **FAST[engine])
    return out


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("engine", list(ENGINES))
def test_posterior_contents(posteriors, case, engine):
    post = posteriors[case, engine]
    z, w = post.samples["z"], post.samples["w"]
    assert post.engine == engine and z.shape[:2] == w.shape[:2] and z.shape[2] == 6
    assert np.issubdtype(z.dtype, np.integer) and set(np.unique(z)) <= {0, 1}
    assert np.all(w[z == 0] == 0.0)
    assert ("precision" in post.samples) == (case == "regression")
    incl = np.asarray(post.diagnostics["inclusion_probability"])
    assert incl.shape == (6,) and np.all(np.isfinite(incl))
    assert post.log_likelihood["y"].shape == z.shape[:2] + (30,)
    assert np.all(np.isfinite(post.log_likelihood["y"]))
    assert post.diagnostics["converged"]
    if engine != "mcmc":
        np.testing.assert_allclose(post.approximation["inclusion_probability"], incl)
        assert post.evidence_method == ("ep" if engine == "ep" else "elbo")
        assert np.isfinite(post.log_evidence)
        for name in ("lp", "log_q"):
            assert post.sample_stats[name].shape == z.shape[:2] and np.all(np.isfinite(post.sample_stats[name]))
    # the all-zero gene carries no information: EP keeps the prior exactly, the others nearly
    tol = {"ep": 1e-9, "vi": 0.05, "mcmc": 0.08}[engine]
    assert abs(incl[4] - 0.3) < tol


def test_inclusion_probabilities_in_the_datatree(posteriors):
    """Every engine writes P(z_j = 1 | data) to the DataTree's ``approximation`` group (MCMC: the
    mean of its indicator draws) and the indicator draws to ``posterior`` with dims (chain, draw)."""
    for (case, engine), post in posteriors.items():
        dt = post.to_arviz()
        incl = np.asarray(dt["approximation"]["inclusion_probability"])
        np.testing.assert_allclose(incl, post.diagnostics["inclusion_probability"])
        z = dt["posterior"]["z"]
        assert z.dims[:2] == ("chain", "draw") and z.shape[2] == 6
        if engine == "mcmc":
            np.testing.assert_allclose(incl, np.asarray(z).mean(axis=(0, 1)))
        else:  # draws from the approximation: their mean within 4 binomial SE of its probabilities
            se = np.sqrt(incl * (1 - incl) / z.shape[1]) + 1e-12
            assert np.all(np.abs(np.asarray(z).mean(axis=(0, 1)) - incl) < 4 * se + 1e-9), (case, engine)


def test_loo_for_every_engine(posteriors):
    for (case, engine), post in posteriors.items():
        dt = post.to_arviz()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if engine == "mcmc":
                res = az.loo(dt)
            else:
                res = az.loo_approximate_posterior(dt, log_p=dt.sample_stats.lp, log_q=dt.sample_stats.log_q)
        assert np.isfinite(float(res.elpd)), (case, engine)


def test_predict_and_save_roundtrip(posteriors, tmp_path):
    Xnew = XR[:4] + 0.1
    for (case, engine), post in posteriors.items():
        # another number of columns: an error naming it (was dot_general's TypeError)
        with pytest.raises(ValueError, match=r"predict: the new inputs have 7 features .*, the fit had 6"):
            post.predict(np.c_[Xnew, Xnew[:, :1]])
        pp = post.predict(Xnew)
        mean = np.asarray(pp["y_mean"]).mean(axis=(0, 1))
        assert np.asarray(pp["y"]).shape[-1] == 4 and np.all(np.isfinite(mean))
        if case == "probit":
            assert np.all((mean >= 0) & (mean <= 1))
        path = tmp_path / f"{case}_{engine}.nc"
        post.save(path)
        back = load(path)
        np.testing.assert_array_equal(back.samples["z"], post.samples["z"])
        np.testing.assert_array_equal(back.samples["w"], post.samples["w"])


def test_engines_agree_with_exact_regression(posteriors):
    ex = exact_posterior(spike_and_slab_regression, XR, YR, p_incl=0.3)
    for engine, tol in [("ep", 0.05), ("mcmc", 0.06), ("vi", 0.1)]:
        incl = np.asarray(posteriors["regression", engine].diagnostics["inclusion_probability"])
        assert np.max(np.abs(incl - np.asarray(ex.inclusion))) < tol, engine
    assert abs(posteriors["regression", "ep"].log_evidence - float(ex.log_evidence)) < 0.1
    assert posteriors["regression", "vi"].log_evidence <= float(ex.log_evidence) + 1e-9


def test_option_and_input_checks():
    """Inside an engine call's `inference.compiled.scope`, where the drivers call these (its
    matrix-product precision is part of the key of every program): the model's eager trace and
    the problem's reading reuse what the fixture's fits compiled (~30 programs, ~4 s, outside it)."""
    from inference import compiled

    model, args, kw = CASES["regression"]
    with compiled.scope():
        tr = trace_model(model, args, kw)
        with pytest.raises(ValueError, match="schedule"):
            ep_posterior(model, args, kw, tr, schedule="random")
        with pytest.raises(ValueError, match="damping"):
            ep_posterior(model, args, kw, tr, damping=0.0)
        with pytest.raises(ValueError, match="covariance"):
            ep_posterior(model, args, kw, tr, covariance="diagonal")
        with pytest.raises(ValueError, match="num_samples"):
            mcmc_posterior(model, args, kw, tr, num_samples=0)
        with pytest.raises(ValueError, match="guide"):
            vi_posterior(model, args, kw, tr, guide="flow")
        no_y = trace_model(model, (XR,), kw)
        with pytest.raises(ValueError, match="'y'"):
            mcmc_posterior(model, (XR,), kw, no_y)


def test_ep_covariance_option_reaches_spike_and_slab_ep_and_is_rejected_elsewhere(posteriors):
    """On the fixture's probit problem (genes 0 and 2 relevant) and with its options, so that the
    full-covariance fits reuse the programs the fixture compiled."""
    import probmodels

    model, (X, y), kw = CASES["probit"]
    opts = dict(kw, seed=1, progress=False, **FAST["ep"])
    full = inference.ep(model, X, y, covariance="full", **opts)
    fact = inference.ep(model, X, y, covariance="factorized", **opts)
    default = posteriors["probit", "ep"]  # inference.ep(model, X, y, **opts)
    p_full, p_fact = full.approximation["inclusion_probability"], fact.approximation["inclusion_probability"]
    np.testing.assert_array_equal(default.approximation["inclusion_probability"], p_full)
    assert not np.allclose(p_full, p_fact)  # two different approximations ...
    assert np.all(p_full[[0, 2]] > 0.9) and np.all(p_fact[[0, 2]] > 0.9)  # ... that agree on the relevant genes
    with pytest.raises(ValueError, match="covariance"):
        inference.ep(probmodels.probit_regression, X, y, covariance="full")


def test_default_probit_ep_starts_undamped_and_falls_back_to_damped(monkeypatch):
    """Default (damping=None) full-covariance probit EP runs undamped (Anderson-accelerated); it reaches the fixed point of
    the damped run (damping=0.5), in fewer sweeps (both run to tol=1e-9, so that "the same fixed
    point" can be checked to 1e-6 in the sites' moments and the evidence). When the undamped run has not converged
    within its sweep budget it is replaced by the damped run, silently (it is a default, not the
    user's setting)."""
    model, args, kw = CASES["probit"]
    # num_samples as in the fixture: its sampling program is reused (the draws are not checked here)
    auto = inference.ep(model, *args, **kw, seed=1, progress=False, **FAST["ep"], tol=1e-9)
    damped = inference.ep(model, *args, **kw, seed=1, progress=False, **FAST["ep"], damping=0.5, tol=1e-9)
    assert auto.diagnostics["damping_used"] == 1.0 and damped.diagnostics["damping_used"] == 0.5
    assert auto.diagnostics["anderson"] and not damped.diagnostics["anderson"]
    assert auto.diagnostics["converged"] and damped.diagnostics["converged"]
    assert auto.diagnostics["iterations"] < damped.diagnostics["iterations"]
    for key in ("inclusion_probability", "w_mean", "w_var"):
        np.testing.assert_allclose(auto.approximation[key], damped.approximation[key], atol=1e-6)
    assert abs(auto.log_evidence - damped.log_evidence) < 1e-6

    from inference.spikeslab import engines

    monkeypatch.setattr(engines, "UNDAMPED_MAX_ITER", 2)  # the undamped run cannot converge in 2 sweeps
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a fallback warning nor a non-convergence warning
        fallback = inference.ep(model, *args, **kw, seed=1, progress=False, **FAST["ep"], tol=1e-9)
    assert fallback.diagnostics["damping_used"] == 0.5 and fallback.diagnostics["converged"]
    assert not fallback.diagnostics["anderson"]
    np.testing.assert_allclose(fallback.approximation["inclusion_probability"],
                               damped.approximation["inclusion_probability"], atol=1e-12)


def test_float32_default_is_the_factorised_ep_and_full_says_to_enable_float64():
    """In float32 (JAX's default) the full-covariance probit EP's Woodbury updates lose most of
    their digits and do not converge (a leukemia split stalls at a change of ~1e-4): the default
    there is the factorised EP, which converges and finds the true genes; asking for "full" warns
    with the way out (float64). (``jax.enable_x64(False)`` is what ``jax.config.jax_enable_x64``,
    which picks the default, reads; a child process with float64 off cost ~4 s more.)"""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 500))
    y = np.sign(X[:, :5].sum(1) + 0.3 * rng.normal(size=60))
    res = {}
    with jax.enable_x64(False):
        for cov in (None, "full"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                kw = {} if cov is None else {"covariance": cov}
                post = inference.ep(spike_and_slab_probit, X, y, progress=False, num_samples=10, **kw)
            d = post.diagnostics
            assert post.samples["w"].dtype == np.float32
            res[str(cov)] = {"method": d["method"], "converged": d["converged"],
                             "warnings": [str(m.message) for m in caught],
                             "top5": sorted(np.argsort(-np.asarray(post.approximation["inclusion_probability"]))[:5].tolist())}
    assert res["None"]["method"] == "probit-factorized" and res["None"]["converged"]
    assert res["None"]["top5"] == [0, 1, 2, 3, 4] and not res["None"]["warnings"]
    assert res["full"]["method"] == "probit-full"
    if not res["full"]["converged"]:
        assert any("jax_enable_x64" in m for m in res["full"]["warnings"])
