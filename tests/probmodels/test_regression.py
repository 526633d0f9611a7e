"""The regression models' scales given as priors (issue 23): ``prior_scale`` (and a known
``noise_scale``) become hyperparameter sites that ``hyper=`` learns, checked against the closed
form (linear regression) and against the engine's own evidence at fixed values (logistic)."""

import jax
import numpy as np
import numpyro.distributions as dist
import pytest
import scipy.optimize
from scipy import stats

import inference
from probmodels import conjugate, linear_regression, logistic_regression, probit_regression

RNG = np.random.default_rng(5)
X = RNG.normal(size=(40, 3))
Y_LIN = X @ np.array([1.5, -0.8, 0.3]) + 0.5 * RNG.normal(size=40)
Y_BIN = (RNG.random(40) < 1 / (1 + np.exp(-(X @ np.array([2.0, -1.0, 0.0]))))).astype(int)
NOISE = 0.5


def _closed_form_map_scale():
    """argmax over phi = log s of log Z(s) + log N(phi; 0, 1) (a LogNormal(0, 1) prior on s,
    Jacobian included): the closed-form evidence of `probmodels.conjugate`, scipy's bounded search."""
    def neg(phi):
        z = conjugate.linear_regression_posterior(X, Y_LIN, prior_scale=np.exp(phi), noise_scale=NOISE).log_evidence
        return -(z + stats.norm.logpdf(phi))

    res = scipy.optimize.minimize_scalar(neg, bounds=(-5.0, 5.0), method="bounded", options={"xatol": 1e-10})
    return float(np.exp(res.x))


# Laplace's hyper="map" in float32 is checked on GP regression (tests/inference/test_hyper.py)
@pytest.mark.parametrize("engine, dtype", [("ep", "float64"), ("laplace", "float64"), ("ep", "float32")])
def test_linear_regression_prior_scale_map_is_the_closed_form_optimum(engine, dtype):
    """Known noise: the weights' Gaussian posterior is exact under EP and Laplace, so hyper="map"
    must find the closed-form type-II MAP of the prior scale: 1e-4 relative in float64; in float32
    3e-3, three times the resolution of the objective there: F = log Z + log p = -36.5 has
    curvature -6.9 in phi = log s, so points within sqrt(2 eps32 |F| / 6.9) = 1.1e-3 of the mode
    differ by less than F's round-off (measured: 1.1e-5 and 2e-8 in float64, 8.3e-4 in float32)."""
    ref = _closed_form_map_scale()
    with jax.enable_x64(dtype == "float64"):
        post = getattr(inference, engine)(linear_regression, X, Y_LIN, noise_scale=NOISE,
                                          prior_scale=dist.LogNormal(0.0, 1.0), hyper="map", num_samples=50)
    h = post.diagnostics["hyper"]
    found = float(np.asarray(h["values"]["prior_scale"]))
    print(f"{engine} {dtype}: prior_scale {found:.6f}, closed form {ref:.6f}")
    assert h["sites"] == ["prior_scale"] and post.diagnostics["converged"]
    assert abs(found / ref - 1) < (1e-4 if dtype == "float64" else 3e-3)
    assert post.samples["w"].dtype == dtype


def test_logistic_prior_scale_map_is_the_mode_of_eps_own_evidence():
    """EP's hyper="map" against EP run at fixed prior scales: log Z_EP(s) + log p(log s) on a grid
    of log s (HalfNormal(3) prior, Jacobian s) peaks where the search stopped (a parabola through
    the grid's best three points, spacing 0.02: within 2e-3 in log s)."""
    prior = dist.HalfNormal(3.0)
    with jax.enable_x64(True):
        post = inference.ep(logistic_regression, X, Y_BIN, prior_scale=prior, hyper="map", num_samples=50,
                            progress=False)
        mode = float(np.log(post.diagnostics["hyper"]["values"]["prior_scale"]))
        grid = mode + 0.02 * np.arange(-5, 6)
        total = []
        for phi in grid:
            # a 0-d array, not a float: a float enters the compiled program's key (one compile per
            # grid point), an array is an argument (one compile for the grid; the same numbers)
            fit = inference.ep(logistic_regression, X, Y_BIN, prior_scale=np.asarray(np.exp(phi)), num_samples=10,
                               tol=1e-10, progress=False)
            total.append(fit.log_evidence + float(prior.log_prob(np.exp(phi))) + phi)
    total = np.asarray(total)
    i = int(np.clip(np.argmax(total), 1, len(grid) - 2))
    a, b, c = total[i - 1:i + 2]
    peak = grid[i] + 0.02 * 0.5 * (a - c) / (a - 2 * b + c)
    print(f"EP map log prior_scale {mode:.5f}, fixed-value evidence peak {peak:.5f}")
    assert post.diagnostics["converged"] and abs(peak - mode) < 2e-3


def test_a_scale_prior_must_be_proper_positive_and_scalar():
    with pytest.raises(ValueError, match="prior_scale.*must be positive"):
        inference.laplace(probit_regression, X, Y_BIN, prior_scale=dist.Normal(0.0, 1.0), hyper="map")
    with pytest.raises(ValueError, match="prior of prior_scale.*must draw a scalar"):
        inference.laplace(probit_regression, X, Y_BIN, prior_scale=dist.HalfNormal(np.ones(3)), hyper="map")
    with pytest.raises(ValueError, match=r"hyperparameter sites \['prior_scale'\]"):
        inference.ep(probit_regression, X, Y_BIN, prior_scale=dist.HalfNormal(1.0), progress=False)
