"""Every engine against the exact posterior of conjugate linear regression and Beta-Bernoulli.

Tolerances (from the issue): posterior means within 0.1 posterior SD of the exact ones, SDs within
10%. With 4000 draws the Monte Carlo error of a sample mean is ~0.016 SD (NUTS: ESS ~4000) and of a
sample SD ~1.1%, so these bounds leave room only for the engine's own error.
"""

import functools

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import special

import inference
import probmodels
from probmodels import conjugate

N, D = 200, 3  # the rows of the tight-posterior test's data too: the normal guide's programs serve both


@functools.cache
def _data():
    rng = np.random.default_rng(42)
    X = rng.normal(size=(N, D))
    X[:, 1] += 0.6 * X[:, 0]  # correlated design
    y = X @ np.array([0.8, -1.2, 0.3]) + 0.7 * rng.normal(size=N)
    return X, y


@pytest.fixture(scope="module")
def data():
    return _data()


# The known-noise model, with a prior scale other than the default (the unknown-noise fits keep
# the default): the Laplace evidence, the ELBO and the other guides' tests fit this same model, so
# its programs (and the shared fits below) are compiled once for all of them. The scales as arrays:
# arguments of the compiled programs, not constants, so the float64 tight-posterior fit below (other
# scales, the same shapes) runs the programs of the mean-field fit of test_other_guides_on_known_noise.
KNOWN = dict(prior_scale=np.asarray(1.5), noise_scale=np.asarray(0.7))
UNKNOWN = dict(noise_prior=(2.0, 1.0))


@functools.cache
def _fit(engine, noise):
    """One fit per engine and noise model (``"known"``: `KNOWN`, ``"unknown"``: `UNKNOWN`) of the
    module's data, shared: the known/unknown-noise tests use every one; the Laplace evidence test
    the known-noise Laplace fit, the ELBO test the known-noise VI fit."""
    X, y = _data()
    kw = KNOWN if noise == "known" else UNKNOWN
    if engine == "mcmc":
        return inference.mcmc(probmodels.linear_regression, X, y, num_samples=1000, num_warmup=500,
                              num_chains=4, seed=1, progress=False, **kw)
    if engine == "vi":
        return inference.vi(probmodels.linear_regression, X, y, guide="mvn", num_samples=4000, seed=1,
                            progress=False, **kw)
    return inference.laplace(probmodels.linear_regression, X, y, num_samples=4000, seed=1, **kw)


@pytest.mark.parametrize("engine", ["mcmc", "vi", "laplace"])
def test_known_noise_matches_exact(engine, data):
    X, y = data
    exact = conjugate.linear_regression_posterior(X, y, **KNOWN)
    post = _fit(engine, "known")
    sd = np.sqrt(np.diag(exact.cov))
    assert np.all(np.abs(post.mean("w") - exact.mean) < 0.1 * sd)
    assert np.all(np.abs(post.std("w") / sd - 1) < 0.10)
    assert post.samples["w"].shape[:2] == (post.num_chains, post.num_draws)
    if engine != "mcmc":  # q (full-rank VI, Laplace) holds this Gaussian posterior: k-hat ~ 0
        assert post.diagnostics["pareto_k"] < 0.5


@pytest.mark.parametrize("engine", ["mcmc", "vi", "laplace"])
def test_unknown_noise_matches_exact(engine, data):
    X, y = data
    exact = conjugate.linear_regression_posterior(X, y, prior_scale=1.0, **UNKNOWN)
    post = _fit(engine, "unknown")
    sd = np.sqrt(np.diag(exact.cov))
    assert np.all(np.abs(post.mean("w") - exact.mean) < 0.1 * sd)
    assert np.all(np.abs(post.std("w") / sd - 1) < 0.10)
    if engine == "laplace":
        # Laplace centres on the joint mode of (w, log precision): tau* = (a_n + d/2) / b_n, not the
        # posterior mean a_n / b_n (0.2 SD away here): check that exact analytic value instead.
        log_tau = post.approximation["loc"][0]  # sites are flattened alphabetically: precision, w
        assert abs(np.exp(log_tau) - (exact.shape + D / 2) / exact.rate) < 1e-6
    else:
        assert abs(post.mean("precision") - exact.precision_mean) < 0.1 * exact.precision_sd
    assert abs(post.std("precision") / exact.precision_sd - 1) < 0.10


def test_laplace_evidence_exact_for_gaussian_posterior(data):
    X, y = data
    exact = conjugate.linear_regression_posterior(X, y, **KNOWN)
    post = _fit("laplace", "known")  # the known-noise test's fit (prior scale 1.5)
    assert post.evidence_method == "laplace"
    assert abs(post.log_evidence - exact.log_evidence) < 1e-6
    np.testing.assert_allclose(post.approximation["loc"], exact.mean, atol=1e-8)
    np.testing.assert_allclose(post.approximation["cov"], exact.cov, rtol=1e-6)


def test_vi_elbo_is_a_lower_bound(data):
    X, y = data
    exact = conjugate.linear_regression_posterior(X, y, **KNOWN)
    post = _fit("vi", "known")  # the known-noise test's fit: full-rank guide, 4000 draws
    assert post.evidence_method == "elbo"
    # Full-rank Gaussian family contains the exact posterior: the bound is nearly tight.
    assert post.log_evidence <= exact.log_evidence + 0.02
    assert post.log_evidence > exact.log_evidence - 0.1
    assert abs(post.diagnostics["importance_log_evidence"] - exact.log_evidence) < 0.02
    assert post.diagnostics["converged"]


def test_a_guide_instance_refit_on_new_data_gives_the_new_answer(data):
    """A guide the user built is kept with the programs of its model structure: a second fit on
    new data of the same shapes starts from and fits the new data (its state comes from this
    call's data, not the first call's)."""
    from numpyro.infer.autoguide import AutoMultivariateNormal

    X, y = data
    guide = AutoMultivariateNormal(probmodels.linear_regression)
    # the known-noise model and draws of the shared fits: only the guide's own programs are new
    opts = dict(**KNOWN, guide=guide, seed=0, num_samples=4000, progress=False)
    inference.vi(probmodels.linear_regression, X, y, **opts)
    y2 = X @ np.array([-1.5, 0.4, 2.0]) + 0.7 * np.random.default_rng(7).normal(size=N)
    post = inference.vi(probmodels.linear_regression, X, y2, **opts)
    exact = conjugate.linear_regression_posterior(X, y2, **KNOWN)
    sd = np.sqrt(np.diag(exact.cov))
    assert np.all(np.abs(post.mean("w") - exact.mean) < 0.15 * sd)


def test_a_named_guide_is_set_up_inside_the_compiled_programs():
    """NumPyro sets an autoguide up eagerly: a trace of the model and the potential's value and
    gradient at the start, op by op, one compilation per operation and shape (a linear
    regression's first VI fit in a new process compiled 174 programs, a Gaussian mixture's ~540,
    ~17 s). A named guide is set up inside the fit's own programs, so a fit at shapes no earlier
    fit used compiles a handful of programs (5, or 11 as the first fit in a new process; 88 and
    174 when set up eagerly), and is right."""
    import jax
    import jax.numpy as jnp

    def model(X, y=None):
        w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 2.0).to_event(1))
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        numpyro.sample("y", dist.Normal(X @ w, s), obs=y)

    rng = np.random.default_rng(8)
    X = rng.normal(size=(53, 11))
    y = X @ np.linspace(-1, 1, 11) + 0.5 * rng.normal(size=53)
    compiles = []
    listener = lambda event, secs, **kw: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        post = inference.vi(model, X, y, steps=2000, num_samples=500, seed=0, progress=False)
    finally:
        jax._src.monitoring.unregister_event_duration_listener(listener)
    assert len(compiles) <= 25, len(compiles)
    w_ls = np.linalg.lstsq(X, y, rcond=None)[0]  # the data overwhelm the N(0, 2^2) prior
    assert np.all(np.abs(post.mean("w") - w_ls) < 0.1) and abs(post.mean("s") - 0.5) < 0.15


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_vi_traces_a_declared_start_once_and_starts_there(dtype):
    """A site's declared start (`inference.latent.Start`, e.g. a mixture's k-means) comes from its
    own kept program; inside the guide's set-up NumPyro traced it twice (its transforms, then its
    validity loop), 2.6 s instead of 0.7 s of compilation for a Gaussian mixture. The fit starts
    at the declared value: with a start far in the tail and few steps, the fit is still near it."""
    import jax.numpy as jnp

    from inference.latent import Start

    calls = []

    def start(key):
        calls.append(1)
        return jnp.full(2, 40.0)

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(jnp.zeros(2), 100.0).to_event(1), infer={"init": Start(start, "far")})
        numpyro.sample("y", dist.Normal(mu, 50.0).to_event(1), obs=y)

    import jax

    with jax.enable_x64(dtype == "float64"):
        post = inference.vi(model, np.zeros(2), steps=20, num_samples=10, seed=0, progress=False)
    assert post.samples["mu"].dtype == np.dtype(dtype)
    assert len(calls) == 2, len(calls)  # the fit's start, and the fingerprint of the model's program (3 before)
    assert np.all(post.mean("mu") > 30.0)  # 20 Adam steps of 0.01 from 40 (0 from the prior mean)


def beta_bernoulli(y=None, n=10):
    theta = numpyro.sample("theta", dist.Beta(1.0, 1.0))
    numpyro.sample("y", dist.Bernoulli(theta).expand([n]), obs=y)


Y_BB = np.array([1, 1, 1, 0, 1, 1, 0, 1, 0, 1])  # 7 successes in 10 trials


def test_beta_bernoulli_closed_forms():
    s, f = 7, 3
    exact = conjugate.beta_bernoulli_log_evidence(s, s + f)
    assert abs(exact - (special.betaln(8, 4) - special.betaln(1, 1))) < 1e-12
    # Laplace in logit space has its own closed form: g(eta) = 8 log theta + 4 log(1 - theta)
    # (likelihood x Jacobian theta (1 - theta)), mode theta* = 8/12, curvature 12 theta*(1-theta*).
    t = 8 / 12
    g = 8 * np.log(t) + 4 * np.log(1 - t)
    laplace_closed = g + 0.5 * np.log(2 * np.pi) - 0.5 * np.log(12 * t * (1 - t))
    post = inference.laplace(beta_bernoulli, Y_BB)
    assert abs(post.log_evidence - laplace_closed) < 1e-6
    assert abs(post.log_evidence - exact) < 0.05  # the Laplace error itself: 0.02 nats here
    # NUTS mean against the Beta(8, 4) posterior mean 2/3, within 4 Monte Carlo standard errors.
    mc = inference.mcmc(beta_bernoulli, Y_BB, num_samples=2000, num_warmup=500, num_chains=2, seed=3,
                        progress=False)
    sd = np.sqrt(8 * 4 / (12**2 * 13))
    se = sd / np.sqrt(mc.diagnostics["min_ess"])
    assert abs(mc.mean("theta") - 2 / 3) < 4 * se
    assert abs(mc.std("theta") / sd - 1) < 0.05


@pytest.mark.parametrize("guide", ["normal", "lowrank", "flow"])
def test_other_guides_on_known_noise(guide, data):
    """Mean-field gets the means of a Gaussian posterior right but not its SDs (it under-disperses
    on a correlated design: checked against the exact conditional SDs 1/sqrt(diag(precision)));
    low-rank and flow guides represent correlation."""
    X, y = data
    exact = conjugate.linear_regression_posterior(X, y, **KNOWN)
    post = inference.vi(probmodels.linear_regression, X, y, **KNOWN, guide=guide, seed=2,
                        num_samples=4000, progress=False)
    sd = np.sqrt(np.diag(exact.cov))
    assert np.all(np.abs(post.mean("w") - exact.mean) < 0.15 * sd)
    if guide == "normal":
        cond_sd = 1 / np.sqrt(np.diag(np.linalg.inv(exact.cov)))
        np.testing.assert_allclose(post.std("w"), cond_sd, rtol=0.1)
        assert post.std("w")[1] < 0.95 * sd[1]  # the correlated coordinate is under-dispersed
    else:
        assert np.all(np.abs(post.std("w") / sd - 1) < 0.15)
    assert post.diagnostics["guide"] == guide


def _tight_fit(x64, **options):
    """VI on the tight regression (n = 200, 3 features, noise 0.01, seed 0) in the working dtype:
    the fit and its largest errors against the closed form (mean in sds, sd ratio)."""
    import jax

    with jax.enable_x64(x64):
        rng = np.random.default_rng(0)
        X = rng.normal(size=(200, 3))
        y = X @ np.array([1.0, -0.5, 0.25]) + 0.01 * rng.normal(size=200)
        exact = conjugate.linear_regression_posterior(X, y, noise_scale=0.01)
        post = inference.vi(probmodels.linear_regression, X, y, seed=0, num_samples=4000, progress=False, **options)
    sd = np.sqrt(np.diag(exact.cov))
    return post, np.max(np.abs(post.mean("w") - exact.mean) / sd), np.max(np.abs(post.std("w") / sd - 1))


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_mean_field_vi_with_a_tight_posterior_is_right_or_not_converged(x64):
    # Noise 0.01 (posterior sds ~7e-4, q's scales start at 0.1): the ELBO's noise hides a steady
    # shrinking of q's scales; the plateau test alone stopped at 6000 steps with scales 11.7x the
    # posterior's, means 0.85 (float32) / 0.68 (float64) sds off, converged=True. The optimum
    # check (inference.vi, `_stationarity_fn`) restarts the step sizes from such a plateau:
    # converged=True must mean a right answer (Monte Carlo floor of 1000 draws: ~0.1 sd on a mean,
    # 0.05 on an sd ratio; 4000 draws here, as the other guides' fits); benchmarks/RESULTS.md
    # ("VI's plateau test"). float64: the scales as arrays, as `KNOWN` (the same programs as the
    # mean-field fit of test_other_guides_on_known_noise); float32 as a user writes them.
    scales = dict(prior_scale=np.asarray(1.0), noise_scale=np.asarray(0.01)) if x64 else dict(noise_scale=0.01)
    post, mean_err, sd_err = _tight_fit(x64, **scales)
    right = mean_err < 0.2 and sd_err < 0.15
    assert right or not post.diagnostics["converged"], (mean_err, sd_err, post.diagnostics["steps"])


@pytest.mark.parametrize("guide", ["lowrank", "flow", "AutoNormal"])
@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_other_guides_with_a_tight_posterior_are_near_or_not_converged(x64, guide):
    # AutoNormal: NumPyro's own mean-field guide built by the user (session 65). Its optimum was
    # not checked: plateau at 5000-6000 steps with sds 4-25x the posterior's, means up to 1.0 sd
    # off, converged=True (2 seeds, float32 and float64, benchmarks/RESULTS.md).
    # The data of the mean-field test above with the low-rank and flow guides. Before session 62
    # neither had an optimum check: low rank stopped at 4500-6500 steps with sds 9-20x the
    # posterior's (means 0.2-0.8 sds off; seeds 0-2), flow at 5000-6000 steps with sds 5-13x
    # (seeds 0-1), converged=True, float32 and float64. With the check (`_stationarity_fn`: c_i =
    # -E[g_i (z_i - m_i)] = 1 and E[g] = 0, the flow's from its draws) they restart and stop with
    # scale ratios within its allowance (1.2x beyond Monte Carlo error, ~1.3x at 256 pairs;
    # measured sd errors 0.03-0.35, means <= 0.15 sds) or run to the step cap, converged=False
    # (flow, float64, seed 1): held to 0.5 on an sd ratio, 0.2 sds on a mean.
    if guide == "AutoNormal":
        from numpyro.infer.autoguide import AutoNormal

        guide = AutoNormal(probmodels.linear_regression)
    post, mean_err, sd_err = _tight_fit(x64, noise_scale=0.01, guide=guide)
    assert "stationarity" in post.diagnostics
    near = mean_err < 0.2 and sd_err < 0.5
    assert near or not post.diagnostics["converged"], (mean_err, sd_err, post.diagnostics["steps"])
