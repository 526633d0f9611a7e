"""The Bayesian LDS (probmodels/lds.py): the obs site's log_prob is the Kalman filter's marginal
likelihood (missing entries, batches), the identified form, parameter and state recovery by
Laplace (float64) and mean-field VI (float32) at default options on data simulated from the model
(T = 100), NUTS with the slow checks, bad input. (Prior predictive draws: the docstring.)"""

import pathlib

import jax
import numpy as np
import numpyro
import pytest
from numpyro import handlers

import inference
from inference import kalman
from probmodels.lds import EXAMPLE, LinearGaussianSSM, free_entries, identify, lds, simulate_example

PARAMS = ("transition", "loadings", "state_noise", "obs_noise", "offset")
ROWS, COLS = free_entries(3, 2)
TRUTH = {**EXAMPLE, "loadings": EXAMPLE["emission"][ROWS, COLS]}
T = 100  # the docstring example's length: its compiled programs serve the Laplace test


def trace(obs, **kw):
    return handlers.trace(handlers.seed(lds, 0)).get_trace(obs, **kw)


# ----------------------------------------------------------------------------- structure
def test_sites_and_log_prob_equal_the_kalman_filter_with_missing_values_and_batches():
    # two 12-step sequences cut from one T-step simulation: the simulation program the recovery
    # tests' data use (a (2, 12) batch simulated directly compiled its own, ~2-3 s)
    ys = simulate_example(T, seed=3)[:24].reshape(2, 12, 3)
    ys[0, 4] = np.nan
    ys[1, 7, 1] = np.nan
    ys[1, 10:] = np.nan  # padding: sequence 1 is 10 steps long
    tr = trace(ys, state_dim=2)
    assert list(tr) == ["transition", "loadings", "emission", "state_noise", "obs_noise", "offset", "obs"]
    H = np.asarray(tr["emission"]["value"])
    np.testing.assert_allclose(H[:2], np.array([[1.0, 0.0], [H[1, 0], 1.0]]))  # unit lower triangular top
    fn = tr["obs"]["fn"]
    assert isinstance(fn, LinearGaussianSSM) and fn.batch_shape == (2,) and fn.event_shape == (12, 3)
    lp = np.asarray(fn.log_prob(ys))
    q, r = np.asarray(tr["state_noise"]["value"]), np.asarray(tr["obs_noise"]["value"])
    args = (np.zeros(2), np.asarray(fn.init_cov), np.asarray(tr["transition"]["value"]), np.diag(q**2), H, np.diag(r**2))
    want = kalman.log_likelihood(*args, ys - np.asarray(tr["offset"]["value"]))
    np.testing.assert_allclose(lp, want, rtol=0, atol=1e-10)
    # the recovered states: one FFBS draw per sequence, (B, T, N); a shape check, so an abstract
    # trace (`jax.eval_shape`): the batched sampler, compiled for it alone, was this test's
    # largest program
    assert jax.eval_shape(fn.sample_states, jax.random.PRNGKey(0), ys).shape == (2, 12, 2)


def test_identify_keeps_the_likelihood_and_gives_the_identified_form():
    rng = np.random.default_rng(0)
    F, H = 0.5 * rng.normal(size=(2, 2)), rng.normal(size=(3, 2))
    a = rng.normal(size=(2, 2))
    Q, R = a @ a.T + 0.1 * np.eye(2), np.diag([0.3, 0.2, 0.4])
    m0, p0 = np.array([0.5, -0.2]), np.eye(2)
    F2, Q2, H2, m2, p2 = identify(F, Q, H, m0, p0)
    np.testing.assert_allclose(H2[:2], np.tril(H2[:2]), atol=1e-12)
    np.testing.assert_allclose(np.diag(H2[:2]), 1.0, atol=1e-12)
    np.testing.assert_allclose(Q2, np.diag(np.diag(Q2)), atol=1e-12)
    y = rng.normal(size=(6, 3))
    np.testing.assert_allclose(kalman.log_likelihood(m0, p0, F, Q, H, R, y),
                               kalman.log_likelihood(m2, p2, F2, Q2, H2, R, y), rtol=1e-12)


# ----------------------------------------------------------------------------- recovery
def z_scores(post, sd=None):
    """|posterior mean - truth| / posterior sd per parameter (sd from the dict ``sd`` if given)."""
    out = {}
    for k in PARAMS:
        mean = np.asarray(post.samples[k]).reshape((-1,) + np.shape(TRUTH[k])).mean(0)
        s = np.asarray(post.samples[k]).reshape((-1,) + np.shape(TRUTH[k])).std(0) if sd is None else sd[k]
        out[k] = np.abs(mean - TRUTH[k]) / s
    return out


def laplace_reference():
    """The Laplace fit's posterior sds and means on ``data`` (T = 100, seed 0), stored by
    tests/fixtures/make_hmm_lds_laplace_reference.py, with the data it was fitted to."""
    with np.load(pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "hmm_lds_laplace_reference.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def data():
    return simulate_example(T, seed=0, states=True)


@pytest.fixture(scope="module")
def laplace_fit(data):
    return inference.laplace(lds, data[0], state_dim=2)


def test_laplace_float64_recovers_parameters_and_states(data, laplace_fit):
    """Default options: converged; every parameter's posterior mean within 4 posterior sds of the
    truth (measured max 1.6 here; 2.9 over seeds 0-2); the true states inside the central 95%
    interval of the recovered ones at 85-100% of the steps; the posterior sds and means the VI
    test reads from tests/fixtures/hmm_lds_laplace_reference.npz are this fit's (1e-5)."""
    post = laplace_fit
    assert post.diagnostics["converged"]
    for k, z in z_scores(post).items():
        assert np.all(z < 4.0), (k, z)
    states = np.asarray(post.samples["states"]).reshape(-1, T, 2)
    lo, hi = np.percentile(states, [2.5, 97.5], axis=0)
    inside = np.mean((data[1] >= lo) & (data[1] <= hi))
    assert 0.85 <= inside <= 1.0, inside
    assert "states" in post.to_arviz()["posterior"]
    ref = laplace_reference()  # the VI test's stored sds are this fit's (else regenerate them)
    for k in PARAMS:
        shape = (-1,) + np.shape(TRUTH[k])
        draws = np.asarray(post.samples[k]).reshape(shape)
        np.testing.assert_allclose(draws.std(0), ref[f"{k}_sd"], rtol=1e-5, err_msg=k)
        np.testing.assert_allclose(draws.mean(0), ref[f"{k}_mean"], rtol=1e-5, atol=1e-8, err_msg=k)


def test_vi_float32_default_options_recovers_the_parameters(data):
    """Mean-field VI in float32 at default options: converged, every posterior mean within 4
    Laplace posterior sds of the truth (mean-field sds are too small to judge by: the offsets'
    0.035 against Laplace's 0.125, their correlation with the slow states ignored). The Laplace
    sds are stored (tests/fixtures/make_hmm_lds_laplace_reference.py): this float32 test runs
    after all float64 ones, so the module's Laplace fit was torn down and refitted for it (~7 s)."""
    ref = laplace_reference()
    np.testing.assert_allclose(ref["y"], data[0], rtol=1e-10, atol=1e-12)  # the data the stored fit saw
    with jax.enable_x64(False):
        post = inference.vi(lds, data[0].astype(np.float32), state_dim=2, progress=False)
        assert post.samples["transition"].dtype == np.float32
    assert post.diagnostics["converged"]
    for k, z in z_scores(post, sd={k: ref[f"{k}_sd"] for k in PARAMS}).items():
        assert np.all(z < 4.0), (k, z)


@pytest.mark.slow  # NUTS; the Laplace and VI recoveries above run by default
def test_nuts_recovers_the_parameters_and_agrees_with_laplace(data, laplace_fit):
    """NUTS (2 chains x 1000, converged: R-hat 1.004, ESS 745) recovers every parameter within 4
    posterior sds, and Laplace agrees with it in the reference's units: Laplace's means within
    0.5 NUTS posterior sd of NUTS's (measured max 0.38, obs_noise[2], seed 0; 0.27 with data
    seed 1; NUTS's Monte Carlo error ~0.04 sd), Laplace's sds 0.65-1.1 of NUTS's (measured
    0.67-0.99: the Gaussian at the mode is over-confident on the offsets and noise scales at
    T = 100). 2 x 500 draws left the chains below the ESS the convergence check asks for."""
    post = inference.mcmc(lds, data[0], state_dim=2, num_samples=1000, num_warmup=1000, num_chains=2, seed=0,
                          progress=False)
    assert post.diagnostics["converged"], post.diagnostics
    for k, z in z_scores(post).items():
        assert np.all(z < 4.0), (k, z)
    for k in PARAMS:
        shape = (-1,) + np.shape(TRUTH[k])
        nuts, lap = (np.asarray(p.samples[k]).reshape(shape) for p in (post, laplace_fit))
        assert np.all(np.abs(lap.mean(0) - nuts.mean(0)) < 0.5 * nuts.std(0)), k
        ratio = lap.std(0) / nuts.std(0)
        assert np.all((ratio > 0.65) & (ratio < 1.1)), (k, ratio)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,error,match", [
    ({"state_dim": 4}, ValueError, "state_dim=4 exceeds the number of observed columns D=3"),
    ({"state_dim": 0}, ValueError, "state_dim must be >= 1"),
    ({"state_dim": 1.5}, TypeError, "state_dim must be an int"),
    ({"transition_scale": -1.0}, ValueError, "transition_scale must be a positive finite number"),
    ({"loading_scale": "big"}, TypeError, "loading_scale must be a positive number"),
    ({"offset_prior": (0.0, -1.0)}, ValueError, r"offset_prior must be \(mean, scale > 0\)"),
    ({"num_steps": 5}, ValueError, "num_steps and obs_dim apply only when obs is None"),
])
def test_bad_input_names_the_argument(kwargs, error, match):
    y = simulate_example(T, seed=0)  # T steps: the simulation program the other tests compile
    with pytest.raises(error, match=match):
        trace(y, **kwargs)


def test_bad_observations():
    with pytest.raises(ValueError, match=r"obs must have shape \(T, D\) or \(B, T, D\).*obs\[:, None\]"):
        trace(np.ones(5))
    with pytest.raises(ValueError, match="obs holds no observed value"):
        trace(np.full((4, 2), np.nan), state_dim=1)
    with pytest.raises(ValueError, match="obs contains inf"):
        trace(np.full((4, 2), np.inf), state_dim=1)
    with pytest.raises(ValueError, match="num_steps and obs_dim are required"):
        trace(None, state_dim=1, num_steps=3)
