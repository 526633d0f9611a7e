"""Bayesian mixture of experts: its density against SciPy, bad input, and NUTS, VI and Laplace on
simulated piecewise-linear data (break at 0): the experts and the gating boundary recovered, held-out
predictive density above a single Bayesian linear model's and scikit-learn's Gaussian-mixture
regression's, the assignments in ArviZ, collapse flagged, float32 and float64."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats
from scipy.special import logsumexp

import inference
from probmodels import conjugate
from probmodels.experts import (expert_distances, gating_boundary, mixture_of_experts, piecewise_linear,
                                predictive_log_density)

X, Y = piecewise_linear(400, seed=0)  # slopes -2 | 1, intercepts -1 | 1, noise 0.3, break at 0
TRAIN, TEST = slice(0, 200), slice(200, 400)


def _density(model_kw, values, X_, y_):
    fn = jax.jit(lambda v: log_density(mixture_of_experts, (X_, y_), model_kw, v)[0])
    return float(fn({k: jnp.asarray(v) for k, v in values.items()}))


@pytest.mark.parametrize("expert", ["linear", "logistic"])
def test_joint_density_is_the_gated_mixture(expert):
    rng = np.random.default_rng(0)
    Xs = rng.normal(2.0, 3.0, size=(30, 2))
    ys = rng.normal(size=30) if expert == "linear" else (rng.uniform(size=30) < 0.5).astype(float)
    values = {"gating_bias": [0.3, -0.2, 0.1], "gating": rng.normal(size=(3, 2)), "intercept": [0.5, -1.0, 0.2],
              "coef": rng.normal(size=(3, 2))}
    if expert == "linear":
        values["scales"] = [0.5, 1.0, 2.0]
    kw = {"num_experts": 3, "expert": expert, "prior_scale": 1.5, "gating_scale": 2.0}
    lp = _density(kw, values, Xs, ys)
    v = {k: np.asarray(a, float) for k, a in values.items()}
    m, s = Xs.mean(0), Xs.std(0)
    c = 1 + np.sum((m / s) ** 2)
    ref = np.sum(stats.norm.logpdf(v["gating_bias"], 0, 2.0 * np.sqrt(c)))
    ref += np.sum(stats.norm.logpdf(v["gating"], 0, 2.0 / s))
    sy, my = (ys.std(), ys.mean()) if expert == "linear" else (1.0, 0.0)
    ref += np.sum(stats.norm.logpdf(v["intercept"], my, 1.5 * sy * np.sqrt(c)))
    ref += np.sum(stats.norm.logpdf(v["coef"], 0, 1.5 * sy / s))
    eta = v["intercept"] + Xs @ v["coef"].T
    if expert == "linear":
        ref += np.sum(stats.invgamma.logpdf(v["scales"] ** 2, 2.0, scale=0.1 * ys.var()) + np.log(2 * v["scales"]))
        comp = stats.norm.logpdf(ys[:, None], eta, v["scales"])
    else:
        comp = stats.bernoulli.logpmf(ys[:, None], 1 / (1 + np.exp(-eta)))
    logits = v["gating_bias"] + Xs @ v["gating"].T
    ref += np.sum(logsumexp(logits - logsumexp(logits, 1, keepdims=True) + comp, 1))
    assert lp == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("args,kwargs,match,error", [
    ((X, Y), {"num_experts": 0}, "num_experts", ValueError),
    ((X, Y), {"expert": "tree"}, "expert", ValueError),
    ((X, Y), {"gating": "probit"}, "gating", ValueError),
    ((X, Y[:10]), {}, "y has 10 entries", ValueError),
    ((np.where(np.arange(400)[:, None] == 3, np.nan, X), Y), {}, "X contains NaN", ValueError),
    ((X, np.where(np.arange(400) == 3, 2.0, Y > 0)), {"expert": "logistic"}, "binary labels", ValueError),
    ((X, Y > 0), {"expert": "logistic", "noise_prior": (2.0, 1.0)}, "noise_prior", ValueError),
    ((X, Y), {"prior_scale": -1.0}, "prior_scale", ValueError),
    ((X, Y), {"noise_prior": (2.0,)}, "noise_prior", TypeError),
])
def test_bad_input_is_named_before_any_tracing(args, kwargs, match, error):
    for engine in (inference.laplace, inference.mcmc):
        with pytest.raises(error, match=match):
            engine(mixture_of_experts, *args, **kwargs)


# ----------------------------------------------------------------------------- engines
def _single_linear_lpd(X_train, y_train, X_test, y_test):
    """Held-out log density per point of one conjugate Bayesian linear model (Student-t predictive)."""
    A = np.c_[np.ones(len(X_train)), X_train]
    post = conjugate.linear_regression_posterior(A, y_train, prior_scale=10.0)
    At = np.c_[np.ones(len(X_test)), X_test]
    scale = np.sqrt(post.rate / post.shape * (1 + np.einsum("ij,jk,ik->i", At, post.scale_matrix, At)))
    return float(np.mean(stats.t.logpdf(y_test, 2 * post.shape, At @ post.mean, scale)))


def _gmm_regression_lpd(X_train, y_train, X_test, y_test):
    """scikit-learn's Gaussian mixture on (x, y) (components 1-6 by BIC), conditioned on x."""
    from sklearn.mixture import GaussianMixture

    data = np.c_[X_train, y_train]
    fits = [GaussianMixture(k, random_state=0, n_init=3).fit(data) for k in range(1, 7)]
    gmm = min(fits, key=lambda g: g.bic(data))
    x, y = X_test[:, 0], y_test
    log_joint = np.zeros((len(x), gmm.n_components))
    log_x = np.zeros_like(log_joint)
    for k, (w, mu, cov) in enumerate(zip(gmm.weights_, gmm.means_, gmm.covariances_)):
        lx = np.log(w) + stats.norm.logpdf(x, mu[0], np.sqrt(cov[0, 0]))
        cond_mu = mu[1] + cov[1, 0] / cov[0, 0] * (x - mu[0])
        cond_sd = np.sqrt(cov[1, 1] - cov[1, 0] ** 2 / cov[0, 0])
        log_x[:, k], log_joint[:, k] = lx, lx + stats.norm.logpdf(y, cond_mu, cond_sd)
    return float(np.mean(logsumexp(log_joint, 1) - logsumexp(log_x, 1))), gmm.n_components


@pytest.fixture(scope="module")
def fits():
    cache = {}

    def get(engine):
        if engine not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if engine == "mcmc":
                    post = inference.mcmc(mixture_of_experts, X[TRAIN], Y[TRAIN], num_warmup=300, num_samples=300,
                                          num_chains=2)
                else:
                    post = getattr(inference, engine)(mixture_of_experts, X[TRAIN], Y[TRAIN])
            cache[engine] = post
        return cache[engine]

    return get


ENGINES = ["laplace", "vi", pytest.param("mcmc", marks=pytest.mark.slow)]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_recovers_the_experts_and_the_boundary(engine, fits):
    post = fits(engine)
    assert np.allclose(post.mean("coef")[:, 0], [-2.0, 1.0], atol=0.12), post.mean("coef")
    assert np.allclose(post.mean("intercept"), [-1.0, 1.0], atol=0.15), post.mean("intercept")
    assert np.allclose(post.mean("scales"), 0.3, atol=0.06), post.mean("scales")
    assert abs(float(np.median(gating_boundary(post)))) < 0.1
    assert post.diagnostics["converged"] and not post.diagnostics["collapsed"]["flagged"]
    assert post.diagnostics["experts"]["label_switching_within_chain"] == 0.0
    z = post.to_arviz().posterior["z"]
    assert z.dims == ("chain", "draw", "point") and np.issubdtype(z.dtype, np.integer)
    modal = (np.asarray(z).reshape(-1, 200).mean(0) > 0.5).astype(int)  # expert 1 is the right-hand one
    assert np.mean(modal == (X[TRAIN, 0] > 0)) > 0.95


def test_held_out_density_beats_one_linear_model_and_gaussian_mixture_regression(fits):
    post = fits("laplace")
    lpd = float(np.mean(predictive_log_density(post, X[TEST], Y[TEST])))
    single = _single_linear_lpd(X[TRAIN], Y[TRAIN], X[TEST], Y[TEST])
    gmm, k = _gmm_regression_lpd(X[TRAIN], Y[TRAIN], X[TEST], Y[TEST])
    truth = float(np.mean(stats.norm.logpdf(Y[TEST], np.where(X[TEST, 0] < 0, -1 - 2 * X[TEST, 0], 1 + X[TEST, 0]), 0.3)))
    assert lpd > single + 1.0, (lpd, single)  # measured: about -0.27 against -1.6
    assert lpd > gmm - 0.02, (lpd, gmm, k)
    assert abs(lpd - truth) < 0.1, (lpd, truth)


def test_collapsed_experts_are_flagged(fits):
    """Both experts set to one line (the draws of a fit that found one expert): flagged, not converged."""
    from inference import _model, mixture_diagnostics

    post = fits("laplace")
    s = dict(post.samples)
    for name in ("intercept", "coef", "scales"):
        s[name] = np.broadcast_to(s[name].mean(-1 if name != "coef" else -2, keepdims=True), s[name].shape).copy()
    s["scales"] = np.full_like(s["scales"], 2.0)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in s.items() if k != "z"}
    ll = _model.pointwise_log_likelihood(mixture_of_experts, flat, post.model_args, post.model_kwargs)
    bad = post.replace(samples=s, log_likelihood={k: v.reshape(post.samples["z"].shape) for k, v in ll.items()},
                       diagnostics={"converged": True})
    assert float(np.max(expert_distances(bad))) < 1e-6
    with pytest.warns(UserWarning, match="degenerate"):
        out = mixture_diagnostics.check_collapse(bad, distances=expert_distances(bad))
    assert out.diagnostics["collapsed"]["flagged"] and out.diagnostics["collapsed"]["pairs"] == [[0, 1]]
    assert not out.diagnostics["converged"]


def test_float32_default_fit_is_finite_and_right():
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = inference.laplace(mixture_of_experts, X[TRAIN], Y[TRAIN])
    assert post.samples["coef"].dtype == np.float32
    assert all(np.all(np.isfinite(v)) for v in post.samples.values())
    assert np.allclose(post.mean("coef")[:, 0], [-2.0, 1.0], atol=0.12) and post.diagnostics["converged"]
