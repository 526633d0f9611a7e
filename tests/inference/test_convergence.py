"""inference.convergence: one meaning of ``diagnostics["converged"]`` for every engine.

The MCMC rule is checked against ArviZ's rank-normalised R-hat and bulk ESS (the reference
implementation of Vehtari et al. 2021); the engines are checked to use it (spike-and-slab Gibbs
with chains stuck apart, a short NUTS run, a Laplace fit stopped at its cap); Laplace on a GP
classifier (n = 300) is checked against an independent NumPy Newton solution in whitened
coordinates and Rasmussen & Williams eq. 3.32 for the evidence, in float64 and float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from arviz_stats.base import array_stats
from numpyro.infer.util import potential_energy
from scipy.special import log_ndtr

import inference
import probmodels
from inference import convergence
from probmodels.kernels import RBF, gram


def _ar1(shape, rho, seed):
    e = np.random.default_rng(seed).normal(size=shape)
    x = np.zeros(shape)
    for t in range(shape[1]):
        x[:, t] = (rho * x[:, t - 1] if t else 0.0) + e[:, t]
    return x


@pytest.mark.parametrize("shape, rho", [((4, 1000), 0.5), ((2, 301, 3), 0.9), ((4, 200), 0.99)])
def test_rhat_and_bulk_ess_match_arviz(shape, rho):
    x = _ar1(shape, rho, seed=shape[1])
    max_rhat, min_ess = convergence.rhat_ess({"x": x})
    ref_rhat = np.max(array_stats.rhat(x, chain_axis=0, draw_axis=1, method="rank"))
    ref_ess = np.min(array_stats.ess(x, chain_axis=0, draw_axis=1, method="bulk"))
    assert max_rhat == pytest.approx(ref_rhat, rel=1e-10)
    # NumPyro's autocorrelation estimator on the same rank-normalised split chains as ArviZ's:
    # equal on long chains, within 4% on short ones
    assert min_ess == pytest.approx(ref_ess, rel=0.04)


def test_well_mixed_chains_converge_and_short_or_correlated_ones_do_not():
    assert convergence.mcmc({"x": _ar1((4, 1000), 0.5, 0)})["converged"]
    assert convergence.mcmc({"x": _ar1((1, 1000), 0.5, 0)})["converged"]  # one chain: its halves
    short = convergence.mcmc({"x": _ar1((4, 60), 0.5, 0)})  # ESS < 400
    assert not short["converged"] and short["min_ess"] < 400
    assert not convergence.mcmc({"x": _ar1((4, 1000), 0.5, 0)}, diverging=np.eye(4, 1000))["converged"]


def test_never_true_on_nan_inf_or_no_information():
    good = _ar1((4, 1000), 0.5, 1)
    stuck = np.repeat(np.array([0.0, 1.0, 0.0, 0.0])[:, None], 1000, axis=1)  # chains stuck apart
    d = convergence.mcmc({"x": good, "z": stuck})
    assert not d["converged"] and d["max_rhat"] == np.inf and d["min_ess"] == 0.0
    # a coordinate constant in every draw of every chain carries no information: skipped
    assert convergence.mcmc({"x": good, "c": np.full((4, 1000, 2), 3.0)})["converged"]
    assert not convergence.mcmc({"c": np.full((4, 1000), 3.0)})["converged"]  # nothing moved
    nan = good.copy()
    nan[2, 10] = np.nan
    assert not convergence.mcmc({"x": nan})["converged"]
    assert not convergence.mcmc({"x": good[:, :3]})["converged"]  # too few draws to judge
    assert convergence.vi(True, -12.0) and not convergence.vi(True, np.nan) and not convergence.vi(False, -12.0)
    assert convergence.ep(1e-8, 1e-6) and convergence.ep(1e-8, 1e-6, -3.0)
    assert not convergence.ep(np.nan, 1e-6) and not convergence.ep(1e-8, 1e-6, None)
    assert not convergence.ep(1e-8, 1e-6, -np.inf) and not convergence.ep(1e-3, 1e-6)
    assert convergence.laplace(1e-9, 10.0, 1e-8, hessian_pd=True)
    assert not convergence.laplace(1e-9, 10.0, 1e-8, hessian_pd=False)
    assert not convergence.laplace(np.nan, 10.0, 1e-8, hessian_pd=True, decrement=0.0)
    assert not convergence.laplace(1e-3, 10.0, 1e-8, hessian_pd=True, decrement=1e-3)
    assert convergence.laplace(1e-3, 10.0, 1e-8, hessian_pd=True, decrement=1e-15)  # at float64's floor


def test_hand_built_posterior_is_not_converged():
    """Fails on the old default, which filled in ``converged=True``."""
    post = inference.Posterior(engine="vi", samples={"w": np.zeros((1, 5))})
    assert post.diagnostics["converged"] is False
    post = inference.Posterior(engine="vi", samples={"w": np.zeros((1, 5))}, diagnostics={"elbo": 1.0})
    assert post.diagnostics["converged"] is False


@pytest.mark.parametrize("x64, seed", [(True, 2)])
def test_spike_and_slab_gibbs_with_chains_stuck_apart_is_not_converged(x64, seed):
    """Two identical genes and a tiny inclusion prior: modes z = (1, 0) and (0, 1), joined only
    through (1, 1) or (0, 0), so chains started apart stay apart. R-hat is infinite; the old
    Gibbs path reported ``converged=True`` whenever R-hat was not finite (fails there)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    X = np.column_stack([x, x, rng.normal(size=(50, 3))])
    y = 3 * x + 0.1 * rng.normal(size=50)
    with jax.enable_x64(x64):
        post = inference.mcmc(probmodels.spike_and_slab_regression, X, y, p_incl=0.01, slab_scale=5.0,
                              noise_scale=0.1, num_samples=50, num_warmup=10, num_chains=4, seed=seed, progress=False)
    z = post.samples["z"]
    halves = np.concatenate([z[:, :25], z[:, 25:]])  # split chains, as R-hat compares them
    stuck = np.all(halves == halves[:, :1], axis=1)  # (half-chain, gene)
    apart = np.any(halves[:, 0] != halves[:1, 0], axis=0)
    assert np.any(np.all(stuck, axis=0) & apart)  # the premise: a gene never moves within a half, differs across
    assert post.diagnostics["max_rhat"] == np.inf and post.diagnostics["converged"] is False


def test_short_nuts_run_is_not_converged_and_a_long_one_is():
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = X @ np.array([1.0, -1.0]) + np.random.default_rng(1).normal(size=30)
    kw = dict(noise_scale=1.0, num_chains=2, seed=0, progress=False)
    short = inference.mcmc(probmodels.linear_regression, X, y, num_samples=30, num_warmup=10, **kw)
    assert short.diagnostics["converged"] is False and short.diagnostics["min_ess"] < 200
    long = inference.mcmc(probmodels.linear_regression, X, y, num_samples=600, num_warmup=300, **kw)
    assert long.diagnostics["converged"] is True and long.diagnostics["max_rhat"] < 1.01


def test_laplace_stopped_at_its_cap_is_not_converged():
    """The mode search (damped Newton at this size) capped at one step, then at most 5 Newton
    steps of the polish, from far away on a logistic regression with nearly separable data: the
    mode is not reached."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = (X @ np.array([8.0, -8.0, 4.0]) + 0.1 * rng.normal(size=100) > 0).astype(np.int32)
    post = inference.laplace(probmodels.logistic_regression, X, y, prior_scale=100.0, max_iter=1, progress=False)
    d = post.diagnostics
    assert d["mode_finder"] == "newton" and d["iterations"] == 1
    assert d["converged"] is False and d["grad_norm"] > 1e-3


def _gpc_data(n=300):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    y = (np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    return X, y


def _gpc_reference(X, y):
    """Mode and Laplace log evidence of the probit GP classifier in NumPy float64: Newton in
    whitened coordinates ``f = L v`` (objective ``v'v / 2 - sum log Phi(s f)``), evidence by
    Rasmussen & Williams eq. 3.32 ``-v'v / 2 + sum log Phi(s f) - log det(I + L' W L) / 2``."""
    with jax.enable_x64(True):
        K = np.asarray(gram(RBF(), jnp.asarray(X, jnp.float64))[0])
    L = np.linalg.cholesky(K)
    s = 2.0 * y - 1.0
    v = np.zeros(len(y))

    def parts(v):
        f = L @ v
        lp = log_ndtr(s * f)
        r = np.exp(-0.5 * f**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(s * f))  # N(f) / Phi(s f)
        d1 = s * r
        W = r * (s * f + r)  # -d2 log Phi(s f)
        return f, lp, d1, W

    for _ in range(50):
        f, lp, d1, W = parts(v)
        H = np.eye(len(v)) + L.T @ (W[:, None] * L)
        step = np.linalg.solve(H, L.T @ d1 - v)
        v = v + step
        if np.max(np.abs(step)) < 1e-13:
            break
    f, lp, d1, W = parts(v)
    logdet = np.linalg.slogdet(np.eye(len(v)) + L.T @ (W[:, None] * L))[1]
    return f, -0.5 * v @ v + lp.sum() - 0.5 * logdet


@pytest.fixture(scope="module")
def gpc_reference():
    X, y = _gpc_data()
    return X, y, _gpc_reference(X, y)


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])  # ids: tests/conftest.py
def test_laplace_gp_classifier_newton_mode(gpc_reference, x64):
    """n = 300: the old L-BFGS search spent its 1000 iterations and reported the gradient norm
    before its Newton polish (79 in float64, 0.23 in float32; fails there). Now: Newton in the
    latent space, a few steps; ``grad_norm`` is that of the model's potential at the mode returned.
    float32 tolerance: the gradient goes through ``K^-1`` (condition number ~1e4 with float32's
    jitter 1e-4), so its floor is ~eps32 * ||K^-1|| * ||f||: at the float64 mode rounded to float32
    the norm is 5.3; the mode found must beat that (< 1) and the Newton decrement (the log density
    still to gain) must be at float32's working precision."""
    X, y, (f_ref, ev_ref) = gpc_reference
    # fresh arrays: JAX keeps a device copy of a NumPy array per object, and a float32 fit given
    # the arrays a float64 fit already used computed with their float64 copies (the result then
    # depended on whether the float64 case ran first on the worker: 2e-3 then, 6e-3 alone)
    X, y = np.array(X, copy=True), np.array(y, copy=True)
    with jax.enable_x64(x64):
        post = inference.laplace(probmodels.gp_classifier, X, y, progress=False)
        loc = post.approximation["loc"]
        # one program each (run op by op, they compiled ~100 small programs per dtype)
        u, grad = jax.jit(jax.value_and_grad(
            lambda f, X, y: potential_energy(probmodels.gp_classifier, (X, y), {}, {"f": f})))(jnp.asarray(loc), X, y)
        u = float(u)
        cov = jax.jit(lambda X, y: numpyro.handlers.trace(numpyro.handlers.seed(probmodels.gp_classifier, 0))
                      .get_trace(X, y)["f"]["fn"].covariance_matrix)(X, y)
        lam_min = np.linalg.eigvalsh(np.asarray(cov, np.float64))[0]  # jitter: the dtype's
    d = post.diagnostics
    assert d["mode_finder"] == "latent-newton" and d["iterations"] <= 10 and d["converged"] is True
    norm = float(np.linalg.norm(np.asarray(grad, float)))
    if x64:
        assert d["grad_norm"] == pytest.approx(norm, rel=1e-3, abs=1e-9)
    else:  # two float32 programs (the engine's with the data as arguments, this eager one) agree to
        # the gradient's rounding floor, eps32 ||f|| / lambda_min(K) (K^-1 f): 0.034 here, against
        # the pre-polish norm of 0.23 (measured 0.0977 against 0.0949)
        assert abs(d["grad_norm"] - norm) <= float(np.finfo(np.float32).eps) * np.linalg.norm(loc) / lam_min
    eps = float(np.finfo(loc.dtype).eps)
    assert d["newton_decrement"] <= 10 * eps * max(1.0, abs(u))
    if x64:
        assert d["grad_norm"] < 1e-6
        np.testing.assert_allclose(loc, f_ref, atol=1e-7)
        assert post.log_evidence == pytest.approx(ev_ref, abs=1e-7)
    else:
        assert loc.dtype == np.float32 and d["grad_norm"] < 1.0
        np.testing.assert_allclose(loc, f_ref, atol=2e-3 * max(1.0, np.max(np.abs(f_ref))))
        assert post.log_evidence == pytest.approx(ev_ref, abs=2e-3)
