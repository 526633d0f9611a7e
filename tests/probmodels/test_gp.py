"""GP classifier and Bayes machine models (`probmodels.gp`), the NoisyStep likelihood
(`inference.distributions.NoisyStep`) and width selection by EP evidence (`probmodels.selection`)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density
from scipy import stats

from inference.distributions import NoisyStep
from probmodels.gp import bayes_machine, gp_classifier
from probmodels.kernels import RBF, Matern, gram

RNG = np.random.default_rng(1)
X = RNG.uniform(-1, 1, size=(12, 2))
Y01 = (X[:, 0] > 0).astype(int)


def trace(model, *args, **kwargs):
    with handlers.seed(rng_seed=0):
        return handlers.trace(model).get_trace(*args, **kwargs)


# --------------------------------------------------------------------------- NoisyStep


def test_noisy_step_log_prob_matches_definition():
    """log P(y | f, eps) = log(eps + (1 - 2 eps) step(f)) for y = 1 and its complement for y = 0."""
    f = jnp.array([-2.0, -0.1, 0.3, 4.0])

    @jax.jit  # one compiled program for the three eps (run eagerly: ~30 operations compiled apart)
    def probs(eps):
        d = NoisyStep(f, eps)
        return jnp.exp(d.log_prob(jnp.ones(4, jnp.int32))), jnp.exp(d.log_prob(jnp.zeros(4, jnp.int32))), d.mean

    for eps in (0.0, 0.05, 0.3):
        p1 = eps + (1 - 2 * eps) * (np.asarray(f) > 0)
        got1, got0, mean = probs(eps)
        np.testing.assert_allclose(got1, p1, atol=1e-15)
        np.testing.assert_allclose(got0, 1 - p1, atol=1e-15)
        np.testing.assert_allclose(mean, p1)
    # Broadcasting of f (n,) with a per-draw eps (s, 1).
    d = NoisyStep(jnp.ones((3, 4)) * f, jnp.array([[0.1], [0.2], [0.3]]))
    assert d.batch_shape == (3, 4)


def test_noisy_step_sample_frequencies():
    """Empirical P(y = 1) over 40000 draws within 4 binomial standard errors of the definition."""
    f = jnp.array([-1.0, 2.0, -0.5, 0.5])
    eps = 0.15
    draws = NoisyStep(f, eps).sample(jax.random.PRNGKey(0), (40000,))
    assert draws.shape == (40000, 4) and set(np.unique(draws)) <= {0, 1}
    p = eps + (1 - 2 * eps) * (np.asarray(f) > 0)
    se = np.sqrt(p * (1 - p) / 40000)
    assert np.all(np.abs(np.asarray(draws).mean(0) - p) < 4 * se)
    np.testing.assert_array_equal(NoisyStep(f, 0.0).sample(jax.random.PRNGKey(1)), (np.asarray(f) > 0).astype(int))


# --------------------------------------------------------------------------- models


def test_bayes_machine_sites_and_density():
    """Sites f, eps, y; the log joint equals the explicit MVN + Beta + step-likelihood sum."""
    k = RBF(0.8)
    tr = trace(bayes_machine, X, Y01, kernel=k, noise_prior=(2.0, 8.0))
    assert [n for n, s in tr.items() if s["type"] == "sample"] == ["f", "eps", "y"]
    assert tr["y"]["is_observed"] and isinstance(tr["y"]["fn"], NoisyStep)
    f = np.asarray(tr["f"]["value"])
    eps = 0.07
    # one compiled program: run eagerly, log_density compiled each of its ~45 operations apart
    # (labels and inputs are constants here, so the model's checks still run)
    lp = jax.jit(lambda f, eps: log_density(bayes_machine, (X,), {"y": Y01, "kernel": k, "noise_prior": (2.0, 8.0)},
                                            {"f": f, "eps": eps})[0])(f, eps)
    K, _ = gram(k, X)
    agree = (Y01 == 1) == (f > 0)
    expected = (stats.multivariate_normal(np.zeros(12), np.asarray(K)).logpdf(f) + stats.beta(2, 8).logpdf(eps)
                + np.sum(np.where(agree, np.log1p(-eps), np.log(eps))))
    assert float(lp) == pytest.approx(expected, rel=1e-10)


def test_gp_classifier_probit_and_logit_likelihoods():
    f = RNG.normal(size=12)
    t = 2 * Y01 - 1
    for link, loglik in (("probit", stats.norm.logcdf(t * f)), ("logit", -np.log1p(np.exp(-t * f)))):
        lp, tr = log_density(gp_classifier, (X,), {"y": Y01, "link": link}, {"f": f})
        K, _ = gram(RBF(), X)
        prior = stats.multivariate_normal(np.zeros(12), np.asarray(K)).logpdf(f)
        assert float(lp) == pytest.approx(prior + loglik.sum(), rel=1e-10)
        assert set(tr) >= {"f", "y"}


def test_labels_in_three_codings_give_the_same_observations():
    obs = [np.asarray(trace(bayes_machine, X, y)["y"]["value"]) for y in (Y01, 2 * Y01 - 1, Y01.astype(bool))]
    np.testing.assert_array_equal(obs[0], obs[1])
    np.testing.assert_array_equal(obs[0], obs[2])
    assert set(obs[0].tolist()) <= {0, 1}


def test_prior_predictive_samples_labels():
    tr = trace(bayes_machine, X, kernel=Matern(nu=2.5))
    y = np.asarray(tr["y"]["value"])
    assert y.shape == (12,) and set(np.unique(y)) <= {0, 1} and not tr["y"]["is_observed"]
    tr = trace(gp_classifier, X[:, 0])  # 1-D inputs become a column
    assert tr["f"]["value"].shape == (12,)


@pytest.mark.parametrize("model", [gp_classifier, bayes_machine])
def test_bad_input_is_named(model):
    with pytest.raises(ValueError, match="y"):
        trace(model, X, np.arange(12))
    with pytest.raises(ValueError, match="y"):
        trace(model, X, Y01[:5])
    with pytest.raises(ValueError, match="X"):
        trace(model, np.where(np.eye(12, 2) > 0, np.nan, X), Y01)
    with pytest.raises(ValueError, match="X"):
        trace(model, np.ones((2, 2, 2)))
    with pytest.raises(TypeError, match="kernel"):
        trace(model, X, Y01, kernel="rbf")


def test_bad_model_options_are_named():
    with pytest.raises(ValueError, match="noise_prior"):
        trace(bayes_machine, X, Y01, noise_prior=(-1.0, 10.0))
    with pytest.raises(ValueError, match="link"):
        trace(gp_classifier, X, Y01, link="cauchit")


def test_traced_labels_skip_checks():
    """Under jit the checks step aside (values are tracers)."""

    def lp(f, y):
        return log_density(gp_classifier, (X,), {"y": y}, {"f": f})[0]

    assert np.isfinite(jax.jit(lp)(jnp.zeros(12), jnp.asarray(Y01)))


# --------------------------------------------------------------------------- width selection


def test_select_lengthscale_picks_the_best_evidence():
    """On the demo's circle problem (100 points): its EP program (one per number of points) then
    serves test_demo_circle_case_draws_the_decision_boundary too. Evidences -59.6, -44.4, -44.6:
    the middle width wins, every width converges."""
    from inference.ep.bayes_machine import fit
    from probmodels.gp import demo_cases
    from probmodels.selection import select_lengthscale

    Xc, yc = demo_cases()[2].args
    grid = [0.1, 0.5, 2.5]
    sel = select_lengthscale(Xc, yc, grid)
    direct = [float(fit(np.asarray(gram(RBF(g), Xc)[0]), yc).log_evidence) for g in grid]
    np.testing.assert_allclose(sel.log_evidence, direct, rtol=1e-10)
    assert sel.lengthscale == grid[int(np.argmax(direct))]
    assert sel.converged.all()
    with pytest.raises(ValueError, match="grid"):
        select_lengthscale(Xc, yc, [0.5, -1.0])


def test_numpyro_model_runs_under_predictive():
    pred = numpyro.infer.Predictive(bayes_machine, num_samples=3)(jax.random.PRNGKey(0), X)
    assert pred["y"].shape == (3, 12) and pred["eps"].shape == (3,)


# --------------------------------------------------------------------------- prediction, demo


def test_latent_predictive_is_the_gp_conditional():
    """At a training input the conditional returns each prior draw's own value (up to the jitter's
    effect, 1e-2); at new inputs it is K*n K^-1 f and k** - K*n K^-1 Kn* (dense algebra, 1e-8)."""
    from probmodels.gp import latent_predictive

    k = RBF(0.7)
    K = np.asarray(gram(k, X)[0])
    f = np.random.default_rng(0).normal(size=(5, 12)) @ np.linalg.cholesky(K).T
    mean, var = latent_predictive(f, X, X[:3], k)
    np.testing.assert_allclose(mean, f[:, :3], atol=1e-2)
    assert np.all(var < 1e-4)
    Xn = np.array([[0.1, 0.2], [-0.5, 0.9]])
    Kx = np.asarray(k(Xn, X))
    mean, var = latent_predictive(f, X, Xn, k)
    np.testing.assert_allclose(mean, f @ np.linalg.solve(K, Kx.T), atol=1e-8)
    np.testing.assert_allclose(var, 1.0 - np.sum(Kx * np.linalg.solve(K, Kx.T).T, 1), atol=1e-8)
    with pytest.raises(ValueError, match="X_new"):
        latent_predictive(f, X, np.zeros((2, 3)), k)


def test_demo_cases_fit_and_score():
    """The demo cases are well formed, and the Bayes machine by EP classifies crabs well
    (measured 97.8% test accuracy; threshold 90%)."""
    import inference
    from probmodels.demo import Case
    from probmodels.gp import demo_cases

    cases = demo_cases()
    assert [c.name for c in cases] == ["gp_classifier", "bayes_machine", "bayes_machine_circle"]
    assert all(isinstance(c, Case) for c in cases)
    assert set(cases[0].engines) <= {"mcmc", "vi", "laplace", "ep"} and "ep" in cases[1].engines
    bm_case = cases[1]
    post = inference.ep(bm_case.model, *bm_case.args, **bm_case.kwargs, num_samples=200, progress=False)
    metric, value, _ = bm_case.score(post)
    assert metric == "test accuracy" and value > 0.9


def test_demo_circle_case_draws_the_decision_boundary(tmp_path):
    """The 2-D circle case: EP's boundary scores like the thesis (test error near 5.7% at 10%
    noise; threshold 90% accuracy) and the picture is written."""
    import inference
    from probmodels.gp import demo_cases

    case = demo_cases()[2]
    post = inference.ep(case.model, *case.args, **case.kwargs, num_samples=200, progress=False)
    assert case.score(post)[1] > 0.9
    paths = case.plot(post, str(tmp_path / "bm"))
    assert paths and all((tmp_path / p.split("/")[-1]).stat().st_size > 1000 for p in paths)


def test_bayes_machine_warns_when_the_noise_prior_mean_is_not_below_one_half():
    """eps and 1 - eps (with f -> -f) fit the labels equally well: a Beta prior with mean >= 0.5
    cannot pull E[eps] below 0.5, which the model says; the default (1, 10) is silent."""
    with pytest.warns(UserWarning, match="noise_prior=\\(1, 1\\) has mean 0.50"):
        trace(bayes_machine, X, Y01, noise_prior=(1.0, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace(bayes_machine, X, Y01)
        trace(bayes_machine, X, Y01, noise_prior=(2.0, 8.0))
