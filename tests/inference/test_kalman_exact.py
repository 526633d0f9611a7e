"""inference.kalman filter, smoother and log likelihood against the dense Gaussian joint of all
states and observations (scipy, T = 5), sequential and parallel, with missing entries and
batches; float64 to 1e-8 and float32 to stated tolerances; bad input. One set of shapes
(N = 3 states, D = 2 observations, T = 5) so every test reuses the same compiled programs."""

import inspect

import jax
import numpy as np
import pytest

from inference import kalman
from inference.kalman import driver

from _kalman_reference import D, N, T, dense_filter, dense_posterior, random_lds, simulate, with_missing

TOL = 1e-8  # float64: the exactness


# (seed, missing entries, singular Q, parallel). The parallel passes compile slowly (the scan
# inlines its combination about 2 log2(T) times, ~0.6 s of compilation each), so they run two
# programs: the smoother with missing entries (its filter pass inside) and the filter without.
CASES = [(0, False, False, False), (1, True, False, False), (2, False, True, False), (1, True, False, True),
         (0, False, False, True), (2, False, True, True)]


@pytest.mark.parametrize("seed,missing,singular_q,parallel", CASES)
def test_filter_and_smoother_equal_the_dense_joint(seed, missing, singular_q, parallel):
    params = random_lds(seed, singular_q)
    y = simulate(params, seed)
    if missing:
        y = with_missing(y)
    ll_d, fm_d, fc_d = dense_filter(params, y)
    if missing or not parallel:
        sm_d, sc_d, _, _ = dense_posterior(params, y)
        sm = kalman.smoother(*params, y, parallel=parallel)
        np.testing.assert_allclose(sm.log_likelihood, ll_d, rtol=0, atol=TOL)
        np.testing.assert_allclose(sm.means, sm_d, rtol=0, atol=TOL)
        np.testing.assert_allclose(sm.covs, sc_d, rtol=0, atol=TOL)
    if missing and parallel:
        return
    ll, means, covs = kalman.filter(*params, y, parallel=parallel)
    np.testing.assert_allclose(ll, ll_d, rtol=0, atol=TOL)
    np.testing.assert_allclose(means, fm_d, rtol=0, atol=TOL)
    np.testing.assert_allclose(covs, fc_d, rtol=0, atol=TOL)
    np.testing.assert_allclose(kalman.log_likelihood(*params, y), ll_d, rtol=0, atol=TOL)


def test_parallel_equals_sequential_and_shares_the_signature():
    params = random_lds(3)
    y = simulate(params, 3)
    for name, obs in (("filter", y), ("smoother", with_missing(y))):
        a = getattr(kalman, name)(*params, obs)
        b = getattr(kalman, name)(*params, obs, parallel=True)
        assert type(a) is type(b) and len(a) == 3
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=0, atol=TOL)
    for fn in (kalman.filter, kalman.smoother, kalman.log_likelihood):
        assert list(inspect.signature(fn).parameters) == ["init_mean", "init_cov", "F", "Q", "H", "R", "obs",
                                                          "parallel"]


def test_batch_equals_one_by_one_and_nan_padding_is_neutral():
    """A batch (B, T, D) gives each sequence's own answer; a shorter sequence padded with NaN rows
    has the log likelihood of the short one and its states up to its end."""
    params = random_lds(4)
    ys = np.stack([with_missing(simulate(params, s)) for s in (4, 5)])
    ys[1, 3:] = np.nan  # sequence 1 is 3 steps long
    out = kalman.smoother(*params, ys)
    assert out.log_likelihood.shape == (2,) and out.means.shape == (2, T, N)
    np.testing.assert_allclose(out.log_likelihood[0], dense_posterior(params, ys[0])[3], atol=TOL)
    short_means, _, _, short_ll = dense_posterior(params, ys[1, :3])
    np.testing.assert_allclose(out.log_likelihood[1], short_ll, atol=TOL)
    np.testing.assert_allclose(out.means[1, :3], short_means, atol=TOL)


@pytest.mark.parametrize("parallel", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_float32_matches_the_dense_joint(parallel):
    """float32: log likelihood to 2e-4 relative, means and covariances to 1e-4 times the scale of
    the prior state covariance (measured: ~1e-6)."""
    params = random_lds(6)
    y = with_missing(simulate(params, 6))
    sm_d, sc_d, _, ll_d = dense_posterior(params, y)
    with jax.enable_x64(False):
        out = kalman.smoother(*(np.float32(p) for p in params), np.float32(y), parallel=parallel)
        assert out.means.dtype == np.float32
        out = jax.tree.map(np.asarray, out)
    scale = np.max(np.abs(sc_d))
    np.testing.assert_allclose(out.log_likelihood, ll_d, rtol=2e-4)
    np.testing.assert_allclose(out.means, sm_d, rtol=0, atol=1e-4 * np.sqrt(scale))
    np.testing.assert_allclose(out.covs, sc_d, rtol=0, atol=1e-4 * scale)
    assert np.all(np.linalg.eigvalsh(out.covs) > 0)


@pytest.mark.slow  # a float32 program of its own; test_float32_matches_the_dense_joint runs by default
def test_a_long_float32_run_stays_finite_and_positive_definite():
    """T = 2000, a slowly mixing rotation with tiny noise: covariances stay symmetric positive
    definite in float32 (Joseph forms) and the log likelihood agrees with float64 to 1e-4."""
    theta = 0.05
    F = 0.999 * np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    params = (np.zeros(2), np.eye(2), F, 1e-4 * np.eye(2), np.array([[1.0, 0.0]]), np.array([[1e-2]]))
    rng = np.random.default_rng(0)
    y = np.sin(0.05 * np.arange(2000))[:, None] + 0.1 * rng.normal(size=(2000, 1))
    ll64 = float(kalman.smoother(*params, y).log_likelihood)
    with jax.enable_x64(False):
        out = jax.tree.map(np.asarray, kalman.smoother(*(np.float32(p) for p in params), np.float32(y)))
    assert np.all(np.linalg.eigvalsh(out.covs) > 0)
    np.testing.assert_allclose(out.log_likelihood, ll64, rtol=1e-4)


# ----------------------------------------------------------------------------- bad input
def good():
    return list(random_lds(0)) + [simulate(random_lds(0), 0)]


@pytest.mark.parametrize("index,value,match", [
    (0, np.zeros((N, 1)), "init_mean must have shape"),
    (1, np.eye(N + 1), r"init_cov must have shape \(N, N\)"),
    (2, np.eye(2), r"F must have shape \(N, N\)"),
    (4, np.ones((D, N + 1)), r"H must have shape \(D, N\)"),
    (5, np.eye(D + 1), r"R must have shape \(D, D\)"),
    (5, -np.eye(D), "R must be positive definite"),
    (5, np.zeros((D, D)), "R must be positive definite"),
    (3, np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), "Q must be positive semi-definite"),
    (3, np.triu(np.ones((N, N))), "Q must be symmetric"),
    (1, -np.eye(N), "init_cov must be positive semi-definite"),
    (2, np.full((N, N), np.nan), "F contains NaN"),
    (6, np.ones(T), r"obs must have shape \(T, D\).*obs\[:, None\]"),
    (6, np.ones((T, D + 1)), "obs has 3 columns but H has 2 rows"),
    (6, np.full((T, D), np.inf), "obs contains inf"),
    (6, np.array([["a", "b"]]), "obs must be a numeric array"),
])
def test_bad_input_names_the_argument(index, value, match):
    args = good()
    args[index] = value
    with pytest.raises(ValueError if "numeric" not in match else TypeError, match=match):
        kalman.smoother(*args)


def test_bad_options_and_non_finite_results():
    args = good()
    with pytest.raises(TypeError, match="parallel must be a bool"):
        kalman.filter(*args, parallel="yes")
    with pytest.raises(TypeError, match="key must be a jax PRNG key"):
        kalman.sample_states(0, *args, 3)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        kalman.sample_states(jax.random.PRNGKey(0), *args, 0)
    # states that overflow float64 (F = 1e200 I): a FloatingPointError, never a NaN result
    huge = list(args)
    huge[2] = 1e200 * np.eye(N)
    with pytest.raises(FloatingPointError, match="kalman.filter: the result is not finite"):
        kalman.filter(*huge)
    assert driver.Filtered._fields == ("log_likelihood", "means", "covs")


def _large_lds(seed, size, num_steps=T):
    """An LDS with ``size`` states and observations, ``num_steps`` long; above 8 (the most that
    `inference.kalman.linalg.small_batched` solves by Gauss-Jordan) the parallel passes take their
    LAPACK paths (solves through explicit inverses where the right-hand side is wider than the
    system: `inference.kalman.parallel._psd_solve_many`)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(size, size))
    F = 0.9 * a / np.max(np.abs(np.linalg.eigvals(a)))
    q, h, r = (rng.normal(size=(size, size)) for _ in range(3))
    params = (rng.normal(size=size), np.eye(size), F, q @ q.T / size + 0.1 * np.eye(size), h,
              r @ r.T / size + 0.3 * np.eye(size))
    x = np.zeros((num_steps, size))
    x[0] = rng.multivariate_normal(params[0], params[1])
    for t in range(1, num_steps):
        x[t] = F @ x[t - 1] + rng.multivariate_normal(np.zeros(size), params[3])
    y = x @ h.T + rng.multivariate_normal(np.zeros(size), params[5], size=num_steps)
    y[2, :3] = np.nan  # missing entries: the masked elements too
    return params, y


@pytest.mark.parametrize("seed", [7, 8])
@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])  # ids: tests/conftest.py orders float32 last
def test_parallel_passes_above_the_small_batched_size_equal_the_dense_joint(x64, seed):
    """N = D = 12 (the LAPACK paths of the parallel passes, every test above has N = 3): smoother,
    filter and log likelihood against the dense joint, float64 to 1e-8; float32 to the tolerances
    of `test_float32_matches_the_dense_joint`, covariances positive definite. T = 3 (an odd
    length: a level with a left-over element, as at T = 5; the missing entries at t = 2): the
    four programs compile ~30% faster than at T = 5 (every level of the scan is inlined), with
    the same paths. Errors over seeds 7-14, T = 3 (T = 5): float64 <= 1.6e-13 (1.6e-13); float32
    means 0.29-0.96 of their tolerance (0.46-1.13), 0.79 and 0.43 at seeds 7 and 8, covariances
    0.19-0.37 (0.23-0.45), log likelihoods < 0.001 (same)."""
    params, y = _large_lds(seed, 12, num_steps=3)
    sm_d, sc_d, _, ll_d = dense_posterior(params, y)
    _, fm_d, fc_d = dense_filter(params, y)
    dtype = np.float64 if x64 else np.float32
    with jax.enable_x64(x64):
        sm = jax.tree.map(np.asarray, kalman.smoother(*(dtype(p) for p in params), dtype(y), parallel=True))
        ll, fm, fc = (np.asarray(a) for a in kalman.filter(*(dtype(p) for p in params), dtype(y), parallel=True))
    assert sm.means.dtype == dtype
    scale = np.max(np.abs(sc_d))
    if x64:
        mean_atol, cov_atol, ll_tol = TOL, TOL, {"rtol": 0.0, "atol": TOL}
    else:
        mean_atol, cov_atol, ll_tol = 1e-4 * np.sqrt(scale), 1e-4 * scale, {"rtol": 2e-4}
    for got, want in ((sm.means, sm_d), (fm, fm_d)):
        np.testing.assert_allclose(got, want, rtol=0, atol=mean_atol)
    for got, want in ((sm.covs, sc_d), (fc, fc_d)):
        np.testing.assert_allclose(got, want, rtol=0, atol=cov_atol)
    for got in (sm.log_likelihood, ll):
        np.testing.assert_allclose(got, ll_d, **ll_tol)
    assert np.all(np.linalg.eigvalsh(sm.covs) > 0)


def test_parallel_passes_choosing_the_solver_per_level_equal_the_dense_joint(monkeypatch):
    """`inference.kalman.linalg.small_batched` picks Gauss-Jordan or LAPACK per number of systems,
    so one parallel pass mixes them on long sequences at N = 7-8 (LAPACK for the T - 1 elements and
    the scan's wide levels, Gauss-Jordan for its narrow ones). With its work limit lowered from
    1.3e5 to 60, N = D = 7 at T = 5 does the same: float64 smoother, filter and log likelihood to
    1e-8 against the dense joint. Compiled programs are dropped before and after: the limit is
    read at tracing."""
    from inference.kalman import linalg

    monkeypatch.setattr(linalg, "BATCHED_WORK", 60)
    assert [linalg.small_batched(b) for b in (5, 2, 1)] == [6, 6, 7]  # LAPACK, then Gauss-Jordan at 7
    params, y = _large_lds(3, 7)
    sm_d, sc_d, _, ll_d = dense_posterior(params, y)
    _, fm_d, fc_d = dense_filter(params, y)
    jax.clear_caches()
    try:
        with jax.enable_x64(True):
            sm = kalman.smoother(*params, y, parallel=True)
            ll, fm, fc = kalman.filter(*params, y, parallel=True)
    finally:
        jax.clear_caches()
    for got, want in ((sm.means, sm_d), (fm, fm_d), (sm.covs, sc_d), (fc, fc_d)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=TOL)
    for got in (sm.log_likelihood, ll):
        np.testing.assert_allclose(float(got), ll_d, rtol=0, atol=TOL)
