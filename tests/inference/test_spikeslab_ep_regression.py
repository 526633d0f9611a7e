"""inference.spikeslab.ep_regression and .precision_grid: EP against exact enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference.spikeslab import ep_regression as epr
from inference.spikeslab.exact import enumerate_models
from inference.spikeslab.precision_grid import fit_grid


def correlated_design(seed, n=30, d=10, rho=0.5, noise=1.0):
    """AR(1)-correlated genes (corr rho^|i-j|), three true effects among ten."""
    rng = np.random.default_rng(seed)
    C = rho ** np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    X = rng.normal(size=(n, d)) @ np.linalg.cholesky(C).T
    w = np.zeros(d)
    w[[0, 3, 4]] = [1.0, -0.8, 0.6]
    return X, X @ w + noise * rng.normal(size=n)


P, S2 = np.full(10, 0.3), np.ones(10)
HYPER = (jnp.asarray(0.5), jnp.asarray(1e-8), jnp.asarray(1000))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fixed_noise_inclusion_within_005_of_exact(seed):
    """Measured max |EP - exact| over seeds 0-2: 0.015, 0.003, 0.021; log evidence within 0.05."""
    X, y = correlated_design(seed)
    ex = enumerate_models(X, y, p_incl=P, slab_var=S2)
    data = epr.make_data(X, y, beta=1.0, slab_var=S2, p_incl=P)
    state = epr.run(data, *HYPER)
    incl, _, _, log_z = epr.finalize(state, data)
    assert float(state.max_change) < 1e-8
    assert np.max(np.abs(np.asarray(incl) - np.asarray(ex.inclusion))) < 0.05
    assert abs(float(log_z) - float(ex.log_evidence)) < 0.1
    np.testing.assert_allclose(np.asarray(state.m), np.asarray(ex.w_mean), atol=0.05)


# each seed's precision grid has its own size, so each compiles the grid's EP afresh: seed 0 (the
# easier case, max error 0.009) runs under -m slow only
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_gamma_precision_grid_within_005_of_exact(seed):
    """Unknown noise (Normal-Gamma): EP on a precision grid; measured max error 0.009 / 0.029."""
    X, y = correlated_design(seed, noise=0.7)
    ex = enumerate_models(X, y, p_incl=P, slab_var=S2, noise_prior=(2.0, 1.0))
    fit = fit_grid(X, y, slab_var=S2, p_incl=P, noise_prior=(2.0, 1.0), tol=1e-8)
    assert np.max(np.abs(fit.incl - np.asarray(ex.inclusion))) < 0.05
    assert abs(fit.log_evidence - float(ex.log_evidence)) < 0.1
    w = np.exp(fit.log_weights)
    assert w[0] < 1e-8 and w[-1] < 1e-8  # the grid covers the posterior of tau


def test_sequential_and_parallel_reach_the_same_fixed_point():
    X, y = correlated_design(1)
    data = epr.make_data(X, y, beta=1.0, slab_var=S2, p_incl=P)
    par, seq = epr.run(data, *HYPER), epr.run(data, *HYPER, sequential=True)
    np.testing.assert_allclose(np.asarray(par.incl), np.asarray(seq.incl), atol=1e-7)
    np.testing.assert_allclose(np.asarray(par.m), np.asarray(seq.m), atol=1e-7)


def test_woodbury_branch_matches_direct_inverse():
    """d > n uses the n x n Woodbury form; it must equal the explicit inverse."""
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(6, 15)), rng.normal(size=6)
    tau, nu = rng.uniform(0.5, 3.0, 15), rng.normal(size=15)
    data = epr.make_data(X, y, beta=2.0, slab_var=np.ones(15), p_incl=np.full(15, 0.2))
    # jitted: one program instead of ~30 eager ones (the same float64 computation)
    m, v, logdet = jax.jit(epr._global)(data, jnp.asarray(tau), jnp.asarray(nu))
    P_ = np.diag(tau) + 2.0 * X.T @ X
    V = np.linalg.inv(P_)
    np.testing.assert_allclose(np.asarray(v), np.diag(V), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(m), V @ (nu + 2.0 * X.T @ y), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(logdet), np.linalg.slogdet(P_)[1], rtol=1e-10)
    mean, var = epr.predictive(epr.EPState(jnp.asarray(tau), jnp.asarray(nu), m, v, None, None, None, None, None),
                               data, jnp.asarray(X[:2] + 1.0))
    np.testing.assert_allclose(np.asarray(var), np.einsum("ij,jk,ik->i", X[:2] + 1, V, X[:2] + 1), rtol=1e-8)


def test_zero_column_keeps_prior_inclusion():
    X, y = correlated_design(0)
    X[:, 7] = 0.0
    data = epr.make_data(X, y, beta=1.0, slab_var=S2, p_incl=P)
    state = epr.run(data, *HYPER)
    incl, a, b, log_z = epr.finalize(state, data)
    assert np.all(np.isfinite(np.asarray(incl))) and np.isfinite(float(log_z))
    assert float(incl[7]) == pytest.approx(0.3, abs=1e-9)


def test_dual_sequential_sweep_equals_covariance_form():
    """d > n: the n x n sequential sweep (B^-1 by rank-one updates) is the d x d one, rearranged."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 40))
    data = epr.make_data(X, 2 * X[:, 0] + rng.normal(size=12), beta=1.3, slab_var=np.ones(40), p_incl=np.full(40, 0.1))
    # the two sweeps jitted: one program each (run eagerly, every sweep compiled its scan afresh)
    seq, dual = jax.jit(epr.update_sequential), jax.jit(epr.update_sequential_dual)
    a = b = epr.init(data)
    for _ in range(3):
        a, b = seq(a, data, 0.7), dual(b, data, 0.7)
        np.testing.assert_allclose(np.asarray(b.tau), np.asarray(a.tau), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(b.nu), np.asarray(a.nu), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(b.incl), np.asarray(a.incl), atol=1e-12)
    state = epr.run(data, *HYPER, sequential=True)  # d > n picks the n x n form
    par = epr.run(data, *HYPER)
    assert float(state.max_change) < 1e-8 and float(par.max_change) < 1e-8
    np.testing.assert_allclose(np.asarray(state.incl), np.asarray(par.incl), atol=1e-7)


def _p_much_larger_than_n(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = np.zeros(d)
    w[:5] = 2.0
    return X, X @ w + rng.normal(size=n)


@pytest.mark.parametrize("n, d, seed", [(50, 300, 2), pytest.param(60, 500, 0, marks=pytest.mark.slow)])
def test_grid_points_where_parallel_oscillates_get_sequential_sweeps(n, d, seed):
    """p >> n, Gamma noise prior: at precisions above the posterior mode the parallel schedule
    (damping 0.5, 200 sweeps) oscillates at some grid points. Each such point is checked against a
    run converged with damping 0.125. Measured (50 x 300): parallel alone off by up to 1.4 nats in
    log Z at a point; after the sequential pass at most 4e-3."""
    X, y = _p_much_larger_than_n(seed, n, d)
    kw = dict(slab_var=np.ones(d), p_incl=np.full(d, 0.1), noise_prior=(1.0, 1.0))
    fit = fit_grid(X, y, damping=0.5, max_iter=200, **kw)
    tau = np.exp(fit.log_tau)
    base = epr.make_data(X, y, beta=1.0, slab_var=np.ones(d), p_incl=np.full(d, 0.1))
    point = lambda k: base._replace(beta=jnp.asarray(tau[k]), slab_var=jnp.asarray(np.ones(d) / tau[k]))  # noqa: E731
    parallel = [epr.run(point(k), jnp.asarray(0.5), jnp.asarray(1e-6), jnp.asarray(200)) for k in range(len(tau))]
    late = [k for k in range(len(tau)) if float(parallel[k].max_change) > 1e-6]
    worst_parallel = 0.0
    for k in late:
        ref = epr.run(point(k), jnp.asarray(0.125), jnp.asarray(1e-6), jnp.asarray(5000))
        assert float(ref.max_change) <= 1e-6
        log_z = lambda st: float(epr.finalize(st, point(k))[3])  # noqa: E731
        ours = log_z(jax.tree.map(lambda x: x[k], fit.states))
        assert abs(ours - log_z(ref)) < 0.01, k
        worst_parallel = max(worst_parallel, abs(log_z(parallel[k]) - log_z(ref)))
    assert worst_parallel > 0.5  # the premise: parallel sweeps alone are far off somewhere


def test_sequential_schedule_through_inference_ep_with_more_genes_than_samples():
    """``schedule="sequential"`` with d > n reaches the parallel schedule's fixed point through the
    public API (the d x d sweep up to `DXD_MAX_D` genes; the n x n one beyond: the grid test above)."""
    import inference
    import probmodels

    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 60))
    y = 2 * X[:, 0] + 2 * X[:, 1] + rng.normal(size=30)
    fits = [inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=1.0, schedule=s, tol=1e-8,
                         num_samples=20, progress=False) for s in ("sequential", "parallel")]
    assert all(f.diagnostics["converged"] for f in fits)
    seq, par = (f.approximation["inclusion_probability"] for f in fits)
    np.testing.assert_allclose(seq, par, atol=1e-6)
    assert abs(fits[0].log_evidence - fits[1].log_evidence) < 1e-6
    assert np.all(seq[:2] > 0.99) and np.all(seq[2:] < 0.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_sequential_schedule_converges_where_the_woodbury_sweep_lost_its_digits(seed):
    """Seeds 0 and 1 of the design above, float64: the sequential schedule "cycled" (largest change
    4e-2 and 9e-3 after 200 sweeps). It was round-off: once a site is clipped (``1/tau`` ~ 1e6),
    the n x n sweep's rank-one updates of ``B^-1`` lose every digit (one sweep from the same sites
    differed from the d x d sweep's by 20% to 1e7 relative). Up to `DXD_MAX_D` genes the sequential
    sweep now keeps the d x d covariance: converged in 39 sweeps, at the parallel schedule's answer
    (inclusion probabilities within 1.3e-8)."""
    import inference
    import probmodels

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 60))
    y = 2 * X[:, 0] + 2 * X[:, 1] + rng.normal(size=30)
    seq, par = (inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=1.0, schedule=s, tol=1e-8,
                             num_samples=20, progress=False, **kw)
                for s, kw in (("sequential", {}), ("parallel", {"damping": 0.25, "max_iter": 1000})))
    assert seq.diagnostics["converged"] and par.diagnostics["converged"] and seq.diagnostics["iterations"] <= 60
    np.testing.assert_allclose(seq.approximation["inclusion_probability"], par.approximation["inclusion_probability"],
                               atol=1e-6)
    assert abs(seq.log_evidence - par.log_evidence) < 1e-5
    with pytest.warns(RuntimeWarning, match=r"did not converge.*a larger max_iter or schedule='parallel'"):
        short = inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=1.0, schedule="sequential",
                             max_iter=3, num_samples=20, progress=False)
    assert not short.diagnostics["converged"] and short.diagnostics["max_site_change"] > 1e-3


def _three_effects(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = np.zeros(d)
    w[:3] = [2.0, -1.5, 1.0]
    return X, X @ w + 0.5 * rng.normal(size=n)


def test_far_grid_points_that_oscillate_leave_the_verdict_when_their_weight_cannot_matter():
    """p > n, unknown noise, defaults: the precision grid reaches the 1e-10 tails of tau's
    posterior, where EP can oscillate (here 2 of ~60 points, holding ~5e-21 of the weight). Such
    points no longer make the fit unconverged (it was: converged=False with a warning); the answer
    equals a fit with damping 0.25 where every point converges. Points that hold weight still
    count: sequential sweeps stopped at 5 leave most of the weight unconverged, and the fit says so."""
    import warnings

    import inference
    import probmodels

    X, y = _three_effects(4, 30, 80)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        post = inference.ep(probmodels.spike_and_slab_regression, X, y, num_samples=10, progress=False)
    d = post.diagnostics
    assert d["grid_points_not_converged"] >= 1 and d["grid_weight_not_converged"] < 1e-15  # the premise
    assert d["converged"] and d["max_site_change"] <= 1e-6
    ref = inference.ep(probmodels.spike_and_slab_regression, X, y, damping=0.25, max_iter=1000, num_samples=10,
                       progress=False)
    assert ref.diagnostics["grid_points_not_converged"] == 0 and ref.diagnostics["converged"]
    np.testing.assert_allclose(post.approximation["inclusion_probability"], ref.approximation["inclusion_probability"],
                               atol=1e-6)
    assert abs(post.log_evidence - ref.log_evidence) < 1e-6
    X, y = _three_effects(0, 30, 80)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        seq = inference.ep(probmodels.spike_and_slab_regression, X, y, schedule="sequential", max_iter=5,
                           num_samples=10, progress=False)
    assert seq.diagnostics["grid_weight_not_converged"] > 1e-3 and not seq.diagnostics["converged"]


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_float32_grid_fit_converges_to_the_float64_answer(seed):
    """40 x 10, unknown noise, defaults, float32: the sweeps' change is the generic EP rule's
    (`inference.ep.update.site_change` beyond `roundoff`), so sites moving by round-off alone no
    longer keep EP from converging. Before (the change of (pi, m / sqrt(v), log v)): seeds 1 and 3
    ended unconverged after 200 sweeps (changes ~6e-6 > tol 3.6e-6) and seed 0 took 80 sweeps;
    now 32-34, and the float32 answer is that of float64 (inclusion probabilities within 1e-7,
    log evidence 4e-5 nats). Seed 2 still reports not converged: 3 far grid points holding 8e-9
    of the weight move by 7e-6, and 1000 times that weight is above tol, so they count."""
    import inference
    import probmodels

    X, y = _three_effects(seed, 40, 10)
    fits = {}
    for x64 in (True, False):
        with jax.enable_x64(x64):
            fits[x64] = inference.ep(probmodels.spike_and_slab_regression, X, y, num_samples=10, progress=False)
    f32, f64 = fits[False], fits[True]
    assert f32.diagnostics["converged"] and f32.diagnostics["iterations"] <= 60
    assert f32.samples["w"].dtype == np.float32 and f64.samples["w"].dtype == np.float64
    np.testing.assert_allclose(f32.approximation["inclusion_probability"], f64.approximation["inclusion_probability"],
                               atol=1e-6)
    assert abs(f32.log_evidence - f64.log_evidence) < 1e-3


# d > n by default on 30 x 80 (seed 1), the shape of the far-grid-points test's float64 fit, whose
# programs the float64 fit here reuses; 30 x 40 (seed 0, the same failure, worse) under -m slow
@pytest.mark.parametrize("n, d, seed", [(60, 50, 1), (30, 80, 1), pytest.param(60, 50, 0, marks=pytest.mark.slow),
                                        pytest.param(30, 40, 0, marks=pytest.mark.slow)])
def test_float32_beyond_ten_genes_converges_to_the_float64_answer(n, d, seed):
    """float32, defaults (unknown noise). n > d: the sites of excluded genes hold ~99% of their
    marginal (``tau v`` ~ 0.99), so their cavity ``1/v - tau`` carries ~100x the round-off and
    they moved by 1e-5 to 4e-5 a sweep for ever: converged=False after 200 sweeps although the
    inclusion probabilities were within 4e-6 of float64's. d > n: the Woodbury form's ``1/tau - a``
    lost every digit at a clipped site (30 x 40, seed 0: NaN sweeps, then a damped fallback off by
    0.036 in an inclusion probability; 30 x 80, seed 1: 1e-3). Now float32 runs the d x d form up to
    `DXD_MAX_D` genes and counts the cavity's round-off (`_prior_roundoff`): converged in
    35-147 sweeps, inclusion probabilities within 7.4e-6 of float64 on 10 such cases."""
    import inference
    import probmodels

    X, y = _three_effects(seed, n, d)
    fits = {}
    for x64 in (True, False):
        with jax.enable_x64(x64):
            fits[x64] = inference.ep(probmodels.spike_and_slab_regression, X, y, num_samples=10, progress=False)
    f32, f64 = fits[False], fits[True]
    assert f64.diagnostics["converged"] and f32.diagnostics["converged"]
    np.testing.assert_allclose(f32.approximation["inclusion_probability"], f64.approximation["inclusion_probability"],
                               atol=2e-5)
    assert abs(f32.log_evidence - f64.log_evidence) < 2e-3


def test_float32_refused_before_any_work_where_only_the_woodbury_form_is_affordable(monkeypatch):
    """d > n and d > `DXD_MAX_D` in float32: a ValueError naming X and saying how to switch
    float64 on, raised before any EP sweep (plain and ``hyper=`` fits); float64 is not refused."""
    import numpyro.distributions as dist

    import inference
    import probmodels
    from inference.spikeslab import precision_grid

    def no_work(*args, **kwargs):
        raise AssertionError("EP ran")

    monkeypatch.setattr(epr, "run", no_work)
    monkeypatch.setattr(epr, "resume", no_work)
    monkeypatch.setattr(precision_grid, "fit_grid", no_work)
    X, y = _three_effects(0, 20, epr.DXD_MAX_D + 1)
    with jax.enable_x64(False):
        for kwargs in ({}, {"noise_scale": 0.5}, {"noise_scale": 0.5, "p_incl": dist.Beta(1.0, 1.0), "hyper": "map"}):
            with pytest.raises(ValueError, match=r"X: .*needs float64.*jax_enable_x64"):
                inference.ep(probmodels.spike_and_slab_regression, X, y, progress=False, **kwargs)
    with jax.enable_x64(True), pytest.raises(AssertionError, match="EP ran"):
        inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=0.5, progress=False)
    assert epr.use_woodbury(20, 201, jnp.float64) and not epr.use_woodbury(20, 200, jnp.float32)
