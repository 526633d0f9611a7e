"""Kernel-form EP for the Bayes machine (`inference.ep.bayes_machine`, `inference.ep.bm_posterior`).

Exact checks first: tilted moments against quadrature, EP against brute-force integration where
EP is exact (one label; independent latents with fixed noise); then EP's approximation error on a
4-point problem, schedule agreement, the thesis' circle problem, the engine hook and bad input.
"""

import itertools

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import integrate, stats
from scipy.special import betaln

from inference import _model
from inference.distributions import NoisyStep
from inference.ep import bayes_machine as bm
from inference.ep.bm_posterior import bayes_machine_parts, ep_posterior
from probmodels.datasets import circle
from probmodels.gp import bayes_machine
from probmodels.kernels import RBF, gram


def brute_force(K, t, a0=1.0, b0=10.0, eps_fixed=None, nodes=20):
    """Exact log evidence, E[f], Cov[f], E[eps]: sum over the 2^n sign orthants of f (the
    likelihood is constant on each), Gauss-Legendre on [0, 9 sd] per coordinate inside an orthant
    (smooth integrand: accurate to ~1e-8 at 20 nodes for n = 4), eps integrated in closed form."""
    n = len(t)
    sd = np.sqrt(np.diag(K))
    x, w = np.polynomial.legendre.leggauss(nodes)
    Kinv, logdet = np.linalg.inv(K), np.linalg.slogdet(K)[1]
    Z, Ef, Eff, Eeps = 0.0, np.zeros(n), np.zeros((n, n)), 0.0
    for s in itertools.product([-1, 1], repeat=n):
        s = np.array(s)
        grids = [s[i] * (x + 1) / 2 * 9 * sd[i] for i in range(n)]
        wts = [w / 2 * 9 * sd[i] for i in range(n)]
        G = np.stack(np.meshgrid(*grids, indexing="ij"), -1).reshape(-1, n)
        W = np.prod(np.stack(np.meshgrid(*wts, indexing="ij"), -1).reshape(-1, n), -1)
        dens = W * np.exp(-0.5 * np.einsum("ij,jk,ik->i", G, Kinv, G) - 0.5 * logdet - 0.5 * n * np.log(2 * np.pi))
        k = int(np.sum(s == t))  # labels that agree with sign(f)
        if eps_fixed is None:
            wk, ek = np.exp(betaln(a0 + n - k, b0 + k) - betaln(a0, b0)), (a0 + n - k) / (a0 + b0 + n)
        else:
            wk, ek = (1 - eps_fixed) ** k * eps_fixed ** (n - k), eps_fixed
        P = dens.sum()
        Z += wk * P
        Ef += wk * dens @ G
        Eff += wk * (G * dens[:, None]).T @ G
        Eeps += wk * ek * P
    Ef, Eff = Ef / Z, Eff / Z
    return np.log(Z), Ef, Eff - np.outer(Ef, Ef), Eeps / Z


# --------------------------------------------------------------------------- site maths

# jitted, as EP runs it: one program for every case below (op by op: 24 programs)
_tilted = jax.jit(bm.tilted)


@pytest.mark.parametrize("m,v,t,ebar", [(0.3, 1.2, 1.0, 0.1), (-2.5, 0.4, 1.0, 0.05), (1.0, 2.0, -1.0, 0.0),
                                        (4.0, 0.5, -1.0, 0.2), (-0.1, 3.0, 1.0, 0.45)])
def test_tilted_f_moments_match_quadrature(m, v, t, ebar):
    """Fixed eps: log Z, mean and variance of [eps + (1-2eps) step(t f)] N(f|m, v) vs adaptive
    quadrature on each side of the step (tolerance 1e-9)."""
    lik = lambda f: ebar + (1 - 2 * ebar) * (t * f > 0)  # noqa: E731
    dens = lambda f, p: lik(f) * stats.norm.pdf(f, m, np.sqrt(v)) * f**p  # noqa: E731
    mom = [sum(integrate.quad(dens, lo, hi, args=(p,), epsabs=1e-14, epsrel=1e-12)[0]
               for lo, hi in ((-np.inf, 0.0), (0.0, np.inf))) for p in range(3)]
    log_z, mean, var, _, _ = _tilted(m, v, t, ebar, 1.0, 1.0)
    assert float(log_z) == pytest.approx(np.log(mom[0]), abs=1e-9)
    assert float(mean) == pytest.approx(mom[1] / mom[0], abs=1e-9)
    assert float(var) == pytest.approx(mom[2] / mom[0] - (mom[1] / mom[0]) ** 2, abs=1e-9)


@pytest.mark.parametrize("m,v,t,a,b", [(0.3, 1.2, 1.0, 1.0, 10.0), (-1.5, 0.4, 1.0, 3.0, 40.0),
                                       (2.0, 0.8, -1.0, 2.5, 7.5)])
def test_tilted_eps_moments_match_quadrature(m, v, t, a, b):
    """Learnt eps: the tilted eps density is [eps P(wrong) + (1-eps) P(right)] Beta(eps|a,b);
    the returned Beta has its mean and variance (quadrature, tolerance 1e-9)."""
    p_right = stats.norm.cdf(t * m / np.sqrt(v))
    dens = lambda e, p: (e * (1 - p_right) + (1 - e) * p_right) * stats.beta.pdf(e, a, b) * e**p  # noqa: E731
    mom = [integrate.quad(dens, 0, 1, args=(p,), epsabs=1e-14)[0] for p in range(3)]
    _, _, _, a_new, b_new = _tilted(m, v, t, a / (a + b), a, b)
    a_new, b_new = float(a_new), float(b_new)
    assert a_new / (a_new + b_new) == pytest.approx(mom[1] / mom[0], abs=1e-9)
    var_q = a_new * b_new / ((a_new + b_new) ** 2 * (a_new + b_new + 1))
    assert var_q == pytest.approx(mom[2] / mom[0] - (mom[1] / mom[0]) ** 2, abs=1e-9)


def test_sweep_marginals_equal_those_of_the_full_posterior():
    """Sweeps carry the marginals only (`_marginals`, no covariance). They must equal mean and
    diag of `_posterior` in both of its branches: all site precisions >= 0 (Rasmussen & Williams'
    B = I + S K S) and some negative (B = I + L^T T L), to 1e-10."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(25, 2))
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, -1)) + 1e-6 * np.eye(25)
    L = jax.numpy.linalg.cholesky(K)
    nu = rng.normal(size=25)

    @jax.jit  # one program for both tau, as EP runs them (op by op: 24 programs)
    def both(tau):
        return bm._posterior(L, tau, nu), bm._marginals(L, L @ L.T, tau, nu)

    for tau in (rng.uniform(0.0, 5.0, 25), np.r_[rng.uniform(0.0, 5.0, 24), -0.05]):
        (mean, cov, _), (m, v, ok) = both(tau)
        assert bool(ok)
        np.testing.assert_allclose(m, mean, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(v, np.diag(cov), rtol=1e-10, atol=1e-12)


def test_tilted_far_tail_is_finite():
    """A cavity 40 sd on the wrong side with eps = 0: Z ~ Phi(-40), moments still finite."""
    log_z, mean, var, _, _ = _tilted(-40.0, 1.0, 1.0, 0.0, 1.0, 1.0)
    assert np.isfinite([float(log_z), float(mean), float(var)]).all() and float(var) > 0
    assert float(log_z) == pytest.approx(stats.norm.logcdf(-40.0), rel=1e-10)


# --------------------------------------------------------------------------- EP vs exact


def test_ep_exact_for_one_label_with_learnt_noise():
    """With one site EP is the moment projection of the exact posterior: equal to 1e-8."""
    K, t = np.array([[1.3]]), np.array([-1])
    lz, Ef, C, Ee = brute_force(K, t, 1.0, 10.0, nodes=60)
    res = bm.fit(K, t, (1.0, 10.0), tol=1e-12, max_iter=500)
    assert float(res.log_evidence) == pytest.approx(lz, abs=1e-8)
    np.testing.assert_allclose(res.f_mean, Ef, atol=1e-8)
    np.testing.assert_allclose(np.diag(res.f_cov), np.diag(C), atol=1e-8)
    assert float(res.eps_mean) == pytest.approx(Ee, abs=1e-10)


def test_ep_exact_for_independent_latents_with_fixed_noise():
    """Diagonal K and fixed eps: the posterior factorises, EP is exact (1e-8)."""
    K, t = np.diag([1.0, 2.0, 0.5]), np.array([1, -1, 1])
    lz, Ef, C, _ = brute_force(K, t, eps_fixed=0.2, nodes=60)
    res = bm.fit(K, t, tol=1e-12, max_iter=500, learn_noise=False, fixed_eps=0.2)
    assert float(res.log_evidence) == pytest.approx(lz, abs=1e-8)
    np.testing.assert_allclose(res.f_mean, Ef, atol=1e-8)
    np.testing.assert_allclose(np.diag(res.f_cov), np.diag(C), atol=1e-8)


@pytest.mark.parametrize("labels", [[-1, -1, 1, 1], [-1, -1, 1, -1]])
def test_ep_close_to_brute_force_on_four_points(labels):
    """n = 4 correlated latents (RBF, lengthscale 1, inputs -1.5..1.5), learnt eps. EP is an
    approximation here; measured errors: means <= 0.05 posterior sd, sds within 4% (10% with the
    odd label), E[eps] within 0.004, log Z within 0.07 nats. Tolerances: 0.1 sd, 15%, 0.01, 0.1."""
    X = np.array([-1.5, -0.5, 0.5, 1.5])[:, None]
    K = np.exp(-0.5 * (X - X.T) ** 2) + 1e-6 * np.eye(4)
    t = np.array(labels)
    lz, Ef, C, Ee = brute_force(K, t)
    res = bm.fit(K, t, (1.0, 10.0), tol=1e-10, max_iter=2000)
    sd = np.sqrt(np.diag(C))
    assert np.max(np.abs(np.asarray(res.f_mean) - Ef) / sd) < 0.1
    np.testing.assert_allclose(np.sqrt(np.diag(res.f_cov)), sd, rtol=0.15)
    assert abs(float(res.eps_mean) - Ee) < 0.01
    assert abs(float(res.log_evidence) - lz) < 0.1


# --------------------------------------------------------------------------- schedules, damping


# Most EP fits here have N = 90 points, the size of test_float32_sweeps_stop_at_round_off_*: one
# compiled EP program per (schedule, noise option, dtype) serves them all (the fixture's float64
# parallel and sequential fits, the engine hook's parallel fit, the float32 fit through
# inference.ep, the fixed-noise fits), and the models' traces share their eager operations.
N = 90


@pytest.fixture(scope="module")
def circle_problem():
    X, y = circle(N, flip_rate=0.1, seed=3)
    K, _ = gram(RBF(0.5), X)
    return X, y, np.asarray(K)


def test_sequential_and_parallel_reach_the_same_fixed_point(circle_problem):
    """Both schedules converge (tol 1e-9) to the same sites: f mean/cov to 1e-6, E[eps] to 1e-7,
    log Z to 1e-7; some sites (mislabelled points) have their precision clipped at 0."""
    _, y, K = circle_problem
    par = bm.fit(K, y, schedule="parallel", tol=1e-9, max_iter=1000)
    seq = bm.fit(K, y, schedule="sequential", tol=1e-9, max_iter=1000)
    assert bool(par.converged) and bool(seq.converged)
    np.testing.assert_allclose(par.f_mean, seq.f_mean, atol=1e-6)
    np.testing.assert_allclose(par.f_cov, seq.f_cov, atol=1e-6)
    assert float(par.eps_mean) == pytest.approx(float(seq.eps_mean), abs=1e-7)
    assert float(par.log_evidence) == pytest.approx(float(seq.log_evidence), abs=1e-7)
    assert int(par.num_clipped) > 0 and np.all(np.asarray(par.tau) >= 0)
    assert np.all(np.isfinite(np.asarray(par.f_cov)))


def test_negative_site_precisions_allowed_stay_finite(circle_problem):
    """negative_sites="allow" keeps negative precisions (Minka's rule): the posterior stays proper
    and nothing is NaN (its fixed point differs from the clipped one: another approximation)."""
    _, y, K = circle_problem
    allow = bm.fit(K, y, negative_sites="allow", max_iter=500)
    assert np.any(np.asarray(allow.tau) < 0) and int(allow.num_clipped) == 0
    assert np.all(np.isfinite(np.asarray(allow.f_cov))) and np.all(np.diag(np.asarray(allow.f_cov)) > 0)
    assert np.isfinite(float(allow.log_evidence)) and 0 < float(allow.eps_mean) < 0.5


def test_damping_tol_max_iter_do_not_recompile(circle_problem):
    _, y, K = circle_problem
    bm.fit(K, y, damping=0.5, tol=1e-6)
    before = bm.run._cache_size()
    r1 = bm.fit(K, y, damping=0.3, tol=1e-8, max_iter=300)
    r2 = bm.fit(K, y, damping=0.7, tol=1e-5, max_iter=50)
    assert bm.run._cache_size() == before
    assert int(r1.num_iter) != int(r2.num_iter)


def test_predict_at_training_points_returns_the_marginals(circle_problem):
    """K_cross = K reproduces the posterior marginals (1e-8), and p_plus follows the formula."""
    _, y, K = circle_problem
    res = bm.fit(K, y)
    f_mean, f_var, p = bm.predict(res, K, np.diag(K))
    np.testing.assert_allclose(f_mean, res.f_mean, atol=1e-8)
    np.testing.assert_allclose(f_var, np.diag(res.f_cov), atol=1e-8)
    e = float(res.eps_mean)
    np.testing.assert_allclose(p, e + (1 - 2 * e) * stats.norm.cdf(f_mean / np.sqrt(f_var)), atol=1e-12)
    with pytest.raises(ValueError, match="K_cross"):
        bm.predict(res, K[:, :5], np.diag(K)[:5])


def test_fixed_noise_machine(circle_problem):
    """learn_noise=False: eps is the given value, the Beta sites stay zero."""
    _, y, K = circle_problem
    res = bm.fit(K, y, learn_noise=False, fixed_eps=0.1)
    assert float(res.eps_mean) == 0.1 and np.all(np.asarray(res.site_a) == 0)
    assert bool(res.converged)


# --------------------------------------------------------------------------- the thesis' circle problem


def _circle_study(replicates, grid):
    from probmodels.selection import select_lengthscale

    Xt, yt = circle(3000, 0.0, seed=12345)
    out = {}
    for flip in (0.0, 0.05, 0.1, 0.2):
        errs, errs0, eps = [], [], []
        for r in range(replicates):
            X, y = circle(100, flip, seed=1000 + r)
            for learn in (True, False):
                sel = select_lengthscale(X, y, grid, learn_noise=learn)
                _, _, p = bm.predict(sel.result, sel.kernel(Xt, X), sel.kernel.diag(Xt))
                err = np.mean((np.asarray(p) > 0.5) != (yt > 0))
                (errs if learn else errs0).append(err)
                if learn:
                    eps.append(float(sel.result.eps_mean))
        out[flip] = (np.mean(errs), np.std(errs) / np.sqrt(replicates), np.mean(errs0),
                     np.std(errs0) / np.sqrt(replicates), np.mean(eps))
    return out


PUBLISHED_BM = {0.0: 0.028, 0.05: 0.043, 0.1: 0.057, 0.2: 0.134}
PUBLISHED_EPS0 = {0.0: 0.028, 0.05: 0.098, 0.1: 0.146, 0.2: 0.243}


def _check_circle(out, tol_points):
    for flip, (err, se, err0, se0, eps) in out.items():
        # Test error vs the published average (a statistical comparison: our mean over a few
        # seeded replicates has standard error se; allow 3 se plus tol_points for the thesis' own
        # sampling error and for details of its protocol we do not know).
        assert abs(err - PUBLISHED_BM[flip]) < 3 * se + tol_points, (flip, err, se)
        assert abs(err0 - PUBLISHED_EPS0[flip]) < 3 * se0 + tol_points, (flip, err0, se0)
        # E[eps] tracks the flip rate; it falls short by a growing amount as the flexible latent
        # explains part of the flipped labels (measured shortfall 0.000 / 0.001 / 0.010 / 0.060),
        # so the tolerance is 0.02 + 0.25 x flip rate.
        assert abs(eps - flip) < 0.02 + 0.25 * flip, (flip, eps)
        if flip >= 0.05:  # the eps=0 machine degrades
            assert err0 > err + 0.03, (flip, err, err0)
    eps_means = [out[f][4] for f in sorted(out)]
    assert np.all(np.diff(eps_means) > 0)


def test_circle_problem_tracks_label_noise():
    """Thesis circle problem, n = 100, width by EP evidence (6 widths), 4 replicates, 3000 clean
    test points. Measured with 20 replicates and 12 widths (benchmarks/results/bayes_machine.md):
    BM 3.1 / 4.4 / 6.4 / 14.9 % (published 2.8 / 4.3 / 5.7 / 13.4), eps=0 machine 3.1 / 9.9 /
    14.9 / 22.5 % (published 2.8 / 9.8 / 14.6 / 24.3), E[eps] 0.010 / 0.049 / 0.090 / 0.140."""
    out = _circle_study(4, np.sqrt(2) * 2.0 ** np.arange(-3, 3))
    _check_circle(out, tol_points=0.03)


@pytest.mark.slow
def test_circle_problem_tracks_label_noise_full():
    out = _circle_study(20, np.sqrt(2) * 2.0 ** np.arange(-3, 3, 0.5))
    _check_circle(out, tol_points=0.02)


# --------------------------------------------------------------------------- the engine hook


def test_ep_posterior_from_model_trace():
    """The engine hook reads K, labels and Beta prior from the trace and returns a Posterior whose
    approximation equals `fit` on the same inputs; draws have the approximation's moments. N
    points, as `circle_problem`: EP's program is the one its parallel fit compiled."""
    X, y = circle(N, 0.1, seed=0)
    kw = dict(y=y, kernel=RBF(0.5))
    tr = _model.trace_model(bayes_machine, (X,), kw)
    post = ep_posterior(bayes_machine, (X,), kw, tr, schedule="parallel", damping=0.5, tol=1e-8, max_iter=500,
                        num_samples=4000, seed=1, progress=False)
    K, _ = gram(RBF(0.5), X)
    res = bm.fit(np.asarray(K), y, tol=1e-8, max_iter=500)
    assert post.engine == "ep" and post.evidence_method == "ep" and post.diagnostics["converged"]
    assert post.log_evidence == pytest.approx(float(res.log_evidence), abs=1e-8)
    assert post.samples["f"].shape == (1, 4000, N) and post.samples["eps"].shape == (1, 4000)
    assert post.log_likelihood["y"].shape == (1, 4000, N)
    sd = np.sqrt(np.diag(res.f_cov))
    # Monte Carlo: 4000 draws, mean error < 5 standard errors.
    assert np.max(np.abs(post.mean("f") - res.f_mean) / sd) < 5 / np.sqrt(4000)
    assert post.mean("eps") == pytest.approx(float(res.eps_mean), abs=5 * float(np.sqrt(
        res.eps_a * res.eps_b / ((res.eps_a + res.eps_b) ** 2 * (res.eps_a + res.eps_b + 1)) / 4000)))
    lp, log_q = post.sample_stats["lp"], post.sample_stats["log_q"]
    assert lp.shape == log_q.shape == (1, 4000) and np.all(np.isfinite(lp)) and np.all(np.isfinite(log_q))
    # log_q is the density of the draws under q(f) q(eps).
    q = stats.multivariate_normal(np.asarray(res.f_mean), np.asarray(res.f_cov), allow_singular=True)
    f0, e0 = post.samples["f"][0, 0], post.samples["eps"][0, 0]
    expected = q.logpdf(f0) + stats.beta(float(res.eps_a), float(res.eps_b)).logpdf(e0)
    assert log_q[0, 0] == pytest.approx(expected, rel=1e-6)
    # Predictive at training inputs: each draw's own latents (the GP conditioned on the draw; they
    # were independent draws from the marginals), so the marginal moments too; labels in {0, 1}.
    pred = post.predictor(jax.random.PRNGKey(0), X)
    assert pred["y"].shape == (1, 4000, N) and set(np.unique(pred["y"])) <= {0, 1}
    np.testing.assert_allclose(pred["f"], post.samples["f"], atol=1e-2)
    assert np.max(np.abs(pred["f"][0].mean(0) - res.f_mean) / sd) < 5 / np.sqrt(4000)


def test_user_written_model_with_fixed_noise_and_prior_mean():
    """A user model: MVN latent with a constant mean, NoisyStep with fixed eps = 0.05. N inputs,
    as `circle_problem`: EP's program (fixed noise) is the one test_fixed_noise_machine compiled."""
    X = np.linspace(-1, 1, N)[:, None]
    y = (X[:, 0] > 0.1).astype(int)

    def model(X, y=None):
        K = np.exp(-0.5 * (X - X.T) ** 2 / 0.3**2) + 1e-6 * np.eye(len(X))
        f = numpyro.sample("latent", dist.MultivariateNormal(0.3 * np.ones(len(X)), covariance_matrix=K))
        numpyro.sample("obs", NoisyStep(f, 0.05), obs=y)

    tr = _model.trace_model(model, (X,), {"y": y})
    parts = bayes_machine_parts(tr)
    assert parts.latent == "latent" and parts.eps_site is None and parts.fixed_eps == 0.05
    post = ep_posterior(model, (X,), {"y": y}, tr, num_samples=50, seed=0)
    res = bm.fit(parts.K, y, learn_noise=False, fixed_eps=0.05, prior_mean=0.3 * np.ones(len(X)))
    np.testing.assert_allclose(post.approximation["mean"], res.f_mean, atol=1e-10)
    assert "eps" not in post.samples
    # Shifting the prior mean moves the posterior: the decision boundary moves left of 0.1.
    res0 = bm.fit(parts.K, y, learn_noise=False, fixed_eps=0.05)
    assert np.all(np.asarray(res.f_mean) > np.asarray(res0.f_mean))


def test_unsupported_sites_are_named():
    """N points: the latents' MultivariateNormal has the shapes of the user-written model's, whose
    eager operations (its trace runs op by op) are reused."""
    X, y = circle(N, 0.0, seed=0)

    def with_lengthscale(X, y=None):
        ls = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
        K = RBF(ls)(X, X) + 1e-6 * np.eye(len(X))
        f = numpyro.sample("f", dist.MultivariateNormal(np.zeros(len(X)), covariance_matrix=K))
        numpyro.sample("y", NoisyStep(f, 0.1), obs=y)

    with pytest.raises(ValueError, match="lengthscale"):
        bayes_machine_parts(_model.trace_model(with_lengthscale, (X,), {"y": y}))

    def transformed(X, y=None):
        f = numpyro.sample("f", dist.MultivariateNormal(np.zeros(len(X)), covariance_matrix=np.eye(len(X))))
        numpyro.sample("y", NoisyStep(2.0 * f + 1.0, 0.1), obs=y)

    with pytest.raises(ValueError, match="'y'"):
        bayes_machine_parts(_model.trace_model(transformed, (X,), {"y": y}))

    def gamma_noise(X, y=None):
        f = numpyro.sample("f", dist.MultivariateNormal(np.zeros(len(X)), covariance_matrix=np.eye(len(X))))
        e = numpyro.sample("noise", dist.Uniform(0.0, 0.5))
        numpyro.sample("y", NoisyStep(f, e), obs=y)

    with pytest.raises(ValueError, match="noise"):
        bayes_machine_parts(_model.trace_model(gamma_noise, (X,), {"y": y}))


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_reported_before_tracing():
    K = np.eye(3) + 0.5
    y = np.array([1, -1, 1])
    with pytest.raises(ValueError, match="K"):
        bm.fit(np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), y)  # indefinite
    with pytest.raises(ValueError, match="K"):
        bm.fit(np.where(np.eye(3) > 0, np.nan, K), y)
    with pytest.raises(ValueError, match="y"):
        bm.fit(K, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="y"):
        bm.fit(K, np.array([1, -1]))
    with pytest.raises(ValueError, match="noise_prior"):
        bm.fit(K, y, (-1.0, 10.0))
    with pytest.raises(ValueError, match="schedule"):
        bm.fit(K, y, schedule="random")
    with pytest.raises(ValueError, match="damping"):
        bm.fit(K, y, damping=0.0)
    with pytest.raises(ValueError, match="fixed_eps"):
        bm.fit(K, y, learn_noise=False, fixed_eps=0.7)


def test_labels_accepted_in_three_codings():
    """On 4 points with the default options: the program of test_ep_close_to_brute_force_on_four_points."""
    K = np.eye(4) + 0.5
    r = [bm.fit(K, lab).f_mean for lab in ([1, 0, 1, 1], [1, -1, 1, 1], [True, False, True, True])]
    np.testing.assert_allclose(r[0], r[1])
    np.testing.assert_allclose(r[0], r[2])


_F32_SCRIPT = """
import json, warnings, numpy as np, jax
jax.config.update("jax_enable_x64", False)
import inference, probmodels
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, size=(100, 2))
y = np.where((X ** 2).sum(1) >= 0.5, 1, -1)
y[:10] *= -1
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    post = inference.ep(probmodels.bayes_machine, X, y, progress=False, num_samples=10)
print(json.dumps({"converged": post.diagnostics["converged"], "warnings": [str(m.message) for m in w],
                  "eps": float(post.approximation["eps_mean"]) if "eps_mean" in post.approximation else None}))
"""


@pytest.mark.slow
def test_float32_converges():
    """In float32 (JAX's default) round-off moves the sites by ~1.8e-6 per sweep: with tol=1e-6 the
    Bayes machine ran its 600 sweeps and warned. The tol used is floored at 30 float32 epsilons
    (as for inference.ep); it converges. Child process: x64 cannot be switched off in this one.
    Slow only: by default test_float32_fit_through_inference_ep_applies_the_float32_tolerance_floor
    checks the same (converged, no "did not converge" warning) in this process, on N = 90 circle points."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_ENABLE_X64": "0"}
    out = subprocess.run([sys.executable, "-c", _F32_SCRIPT], capture_output=True, text=True, env=env, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["converged"] and not [m for m in res["warnings"] if "did not converge" in m]


def test_float32_fit_through_inference_ep_applies_the_float32_tolerance_floor():
    """inference.ep passed its raw tol (1e-6) to the Bayes machine's EP, which the generic EP
    raises to 30 float32 epsilons in float32: a float32 fit at defaults ended at site change
    ~2.7e-6 and said converged=False although its answer was right. N circle points (was 60): the
    float32 parallel EP program of test_float32_sweeps_stop_at_round_off_* is reused."""
    import inference
    from inference import _options

    import warnings

    X, y = circle(N, 0.1, 0)
    with jax.enable_x64(False), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        post = inference.ep(bayes_machine, X, y, num_samples=50, progress=False)
    floor = _options.working_tol(1e-6, np.float32)
    assert post.diagnostics["tol"] == pytest.approx(floor) and floor > 1e-6
    assert post.diagnostics["converged"] and post.samples["f"].dtype == np.float32
    assert not [m for m in w if "did not converge" in str(m.message)]  # (test_float32_converges's check)
    # the Pareto k of its importance weights, as generic EP reports it (session 66)
    assert np.isfinite(post.diagnostics["pareto_k"])
    # predict conditions the GP on each draw, in float32 too: at training inputs, the draw's own
    # latents up to the kernel's float32 jitter (1e-4 on K's diagonal, a nugget the cross-covariance
    # lacks, times K^-1 f: measured 0.049-0.056 over fit seeds 0-2 and 10 predict keys, float64
    # 0.007; independent draws from the marginals, as before, differ by up to 0.24-0.98 here)
    with jax.enable_x64(False):
        pred = post.predictor(jax.random.PRNGKey(0), X[:5])
    assert pred["f"].dtype == np.float32
    np.testing.assert_allclose(pred["f"], post.samples["f"][..., :5], atol=0.1)


@pytest.mark.parametrize("seed", [3, 4])
def test_float32_sweeps_stop_at_round_off_in_both_schedules_near_the_fixed_point(seed):
    """The Bayes machine judges convergence by inference.ep's rule (site change scale-free, beyond
    round-off). Its own rule (largest ``|d| / (1 + |new|)`` of a site parameter) ran float32 fits
    on such problems into the 200-sweep cap (188-214 sweeps, damping halved to finish); now float32
    stops in fewer sweeps than float64 (measured 66-95 against 78-113). Both end within 1e-4
    posterior SDs of EP's fixed point (tol 1e-11, float64): measured 1.2e-5 (float64) and 7.5e-5
    (float32) at most; E[eps] within 1e-6 (3e-7). Both seeds have n = 90 points: the second seed
    reuses the first's four programs (about 0.4 s instead of ~25 s), and so do the module's other
    fits at N = n (the float64 ones of `circle_problem`, the float32 one through inference.ep)."""
    rng = np.random.default_rng(seed)
    n = N
    X = rng.uniform(-1, 1, (n, 2))
    t = np.where((X ** 2).sum(1) < 0.5, 1, -1)
    t = np.where(rng.random(n) < 0.1, -t, t)
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / 0.5 ** 2) + 1e-6 * np.eye(n)
    exact = bm.fit(K, t, tol=1e-11, max_iter=3000)
    sd = np.sqrt(np.diag(np.asarray(exact.f_cov)))
    for schedule in ("parallel", "sequential"):
        r64 = bm.fit(K, t, schedule=schedule)
        with jax.enable_x64(False):
            r32 = bm.fit(K.astype(np.float32), t, schedule=schedule)
        assert r32.f_mean.dtype == np.float32
        for r in (r64, r32):
            assert bool(r.converged) and int(r.num_iter) < 200 and float(r.damping) == 0.5
            np.testing.assert_array_less(np.abs(np.asarray(r.f_mean, float) - np.asarray(exact.f_mean)) / sd, 1e-4)
            assert float(r.eps_mean) == pytest.approx(float(exact.eps_mean), abs=1e-6)
        assert int(r32.num_iter) <= int(r64.num_iter)


@pytest.mark.parametrize("engine", ["ep", "mcmc"])
def test_a_kernel_hyperparameter_given_as_a_prior_is_refused_naming_it(engine):
    """The Bayes machine's engines (EP; elliptical slice sampling for mcmc) integrate f and the
    noise rate only: without hyper=, a lengthscale given as a prior is refused, naming the site and
    both engines (the mcmc refusal spoke of EP only) and the option that handles it."""
    import inference

    X, y = circle(N, 0.1, seed=0)  # N: the eager operations of the other traces are reused
    kernel = RBF(lengthscale=dist.LogNormal(0.0, 1.0))
    with pytest.raises(ValueError, match=r"site 'lengthscale'.*elliptical slice sampling.*hyper='map' \| 'integrate'"):
        getattr(inference, engine)(bayes_machine, X, y, kernel=kernel, num_samples=10, progress=False)
