"""Coordinate-ascent VI for the conjugate Gaussian mixture: exact evidence for one component,
closed-form ELBO and KL terms against Monte Carlo, monotone ELBO, q densities against SciPy, the
variational predictive against Monte Carlo, and no recompilation when ``tol`` changes."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln, logsumexp, multigammaln

from inference import mixture_cavi as mc
from probmodels.datasets import gaussian_mixture_data

# One data set and one number of draws for the checks below, so that they share compilations.
X60 = gaussian_mixture_data(60, seed=1).X
NUM_DRAWS = 4000

# The library's unjitted helpers the checks below call, each as one compiled program per structure
# (run eagerly, every operation in them was compiled apart: ~40 programs for `_kl_components`,
# ~20 for `_update_theta`, ~15 for `sort_components`, per structure).
_kl_components = jax.jit(mc._kl_components, static_argnames="structure")
_update_theta = jax.jit(mc._update_theta, static_argnames="structure")
_sort_components = jax.jit(mc.sort_components, static_argnames="structure")


def _prior(d, covariance, concentration=1.0):
    scale = np.diag(np.linspace(0.5, 1.5, d)) if covariance == "full" else np.linspace(0.5, 1.5, d)
    return mc.MixturePrior.create(loc=np.linspace(-0.3, 0.3, d), strength=0.2, df=d + 2.5 if covariance == "full" else 3.5,
                                  scale=scale, concentration=concentration, concentration_shape=2.0,
                                  concentration_rate=1.5)


def _state_after(X, prior, k, structure, sweeps=3, seed=0):
    """An arbitrary (unconverged) q: k-means start plus a few sweeps, in the data's own units."""
    s = mc.init(jax.random.PRNGKey(seed), jnp.asarray(X), prior, k, structure)
    for _ in range(sweeps):
        s = mc.update(jnp.asarray(X), prior, s, structure)
    return s


def _niw_log_evidence(X, m0, beta0, nu0, psi0):
    """Closed-form marginal likelihood of one Gaussian under a Normal-inverse-Wishart prior
    (Murphy 2007, eq. 266)."""
    n, d = X.shape
    xbar = X.mean(0)
    S = (X - xbar).T @ (X - xbar)
    beta_n, nu_n = beta0 + n, nu0 + n
    psi_n = psi0 + S + beta0 * n / beta_n * np.outer(xbar - m0, xbar - m0)
    return (-0.5 * n * d * np.log(np.pi) + multigammaln(0.5 * nu_n, d) - multigammaln(0.5 * nu0, d)
            + 0.5 * nu0 * np.linalg.slogdet(psi0)[1] - 0.5 * nu_n * np.linalg.slogdet(psi_n)[1]
            + 0.5 * d * np.log(beta0 / beta_n))


@pytest.mark.parametrize("covariance", ["full", "diag"])
@pytest.mark.parametrize("units", [1.0, 2e4])
def test_one_component_elbo_is_the_exact_log_evidence(covariance, units):
    # With K = 1, q(theta) is the exact conjugate posterior, so the ELBO is log p(X) exactly; with
    # data in km/s-like units (2e4) it also checks the standardisation inside `fit`.
    rng = np.random.default_rng(0)
    X = units * (rng.normal(size=(40, 3)) @ np.array([[1.0, 0.3, 0.0], [0.0, 0.8, 0.2], [0.0, 0.0, 0.5]]) + 1.0)
    prior = _prior(3, covariance)
    # in NumPy: the same prior, without two eager programs
    prior = prior._replace(loc=np.asarray(prior.loc) * units, scale=np.asarray(prior.scale) * units**2)
    res = mc.fit(X, prior, 1, jax.random.PRNGKey(0), structure=mc.Structure(covariance, "dirichlet"), max_iter=20)
    m0, psi0, b0, nu0 = np.asarray(prior.loc), np.asarray(prior.scale), float(prior.strength), float(prior.df)
    if covariance == "full":
        exact = _niw_log_evidence(X, m0, b0, nu0, psi0)
    else:
        exact = sum(_niw_log_evidence(X[:, [j]], m0[[j]], b0, nu0, psi0[j] * np.eye(1)) for j in range(3))
    assert float(res.elbo) == pytest.approx(exact, rel=1e-10, abs=1e-8)


def _log_p_theta(values, prior, structure):
    """log prior density of one draw, written independently with SciPy."""
    m0, psi0 = np.asarray(prior.loc), np.asarray(prior.scale)
    b0, nu0 = float(prior.strength), float(prior.df)
    locs = np.asarray(values["locs"])
    total = 0.0
    for k in range(locs.shape[0]):
        if structure.covariance == "full":
            cov = np.asarray(values["cov"][k])
            total += stats.invwishart.logpdf(cov, df=nu0, scale=psi0) + stats.multivariate_normal.logpdf(locs[k], m0, cov / b0)
        else:
            sd = np.asarray(values["scales"][k])
            # scales = sqrt(var), var ~ InvGamma(nu0/2, psi0/2): density of sd = density of var * 2 sd.
            total += np.sum(stats.invgamma.logpdf(sd**2, 0.5 * nu0, scale=0.5 * psi0) + np.log(2 * sd))
            total += np.sum(stats.norm.logpdf(locs[k], m0, sd / np.sqrt(b0)))
    if structure.weights == "dirichlet":
        w = np.asarray(values["weights"])
        total += stats.dirichlet.logpdf(w / w.sum(), np.full(w.shape, float(prior.concentration)))
    else:
        v = np.asarray(values["sticks"])
        alpha = float(values["concentration"]) if structure.learn_concentration else float(prior.concentration)
        total += np.sum(stats.beta.logpdf(v, 1.0, alpha))
        if structure.learn_concentration:
            total += stats.gamma.logpdf(alpha, float(prior.concentration_shape), scale=1 / float(prior.concentration_rate))
    return total


STRUCTURES = [mc.Structure("full", "dirichlet"), mc.Structure("diag", "dirichlet"),
              mc.Structure("full", "stick", False), mc.Structure("diag", "stick", True)]


@jax.jit  # one program (run eagerly, each of its operations was compiled apart)
def _perturbed(state):
    """A q that is not the block optimum for its own responsibilities (otherwise log q(theta) -
    log p(theta) - data term is constant and the Monte Carlo check below would be degenerate)."""
    return state._replace(loc=state.loc + 0.2, df=state.df + 3.0, strength=state.strength * 0.7,
                          scale=state.scale * 1.3, weight_a=state.weight_a * 1.4 + 0.5,
                          weight_b=state.weight_b * 0.8 + 0.1, conc_shape=state.conc_shape + 1.0)


def _scipy_component_terms(X, draw, covariance):
    """log N(x_n | locs_k, cov_k), (n, K), with SciPy."""
    k = draw["locs"].shape[0]
    if covariance == "full":
        return np.stack([stats.multivariate_normal.logpdf(X, draw["locs"][j], draw["cov"][j]) for j in range(k)], 1)
    return np.stack([np.sum(stats.norm.logpdf(X, draw["locs"][j], draw["scales"][j]), 1) for j in range(k)], 1)


def _weights_of(draw):
    if "weights" in draw:
        return draw["weights"]
    v = draw["sticks"]
    return np.concatenate([v, [1.0]]) * np.concatenate([[1.0], np.cumprod(1 - v)])


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("structure", [STRUCTURES[0], STRUCTURES[3]], ids=["full-dirichlet", "diag-stick-learned"])
def test_draws_of_q_have_its_moments(structure, x64):
    """`sample_q` (its own Bartlett inverse-Wishart, inverse-gamma, Dirichlet, Beta and Gamma draws
    from one Gamma sampler) against q's closed-form moments, 3 seeds x 4000 draws: E[cov] =
    Psi / (nu - d - 1), E[var] = (Psi / 2) / (nu / 2 - 1), cov(locs) = E[cov] / strength, the
    weights' and sticks' means, the concentration's mean; each within 5 Monte Carlo standard
    errors (the draws' own spread / sqrt(4000))."""
    prior = _prior(2, structure.covariance)
    state = _perturbed(_state_after(X60, prior, 3, structure))
    q = jax.tree.map(lambda x: np.asarray(x, np.float64), state)
    d = q.loc.shape[1]
    nu, psi, beta = q.df, q.scale, q.strength
    if structure.covariance == "full":
        spread_mean = psi / (nu - d - 1)[:, None, None]
    else:
        spread_mean = 0.5 * psi / (0.5 * nu - 1)[:, None]
    with jax.enable_x64(x64):
        st = jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(float)) if x.dtype.kind == "f" else x, state)
        for seed in range(3):
            draws = {k: np.asarray(v, np.float64) for k, v in mc.sample_q(jax.random.PRNGKey(seed), st, structure,
                                                                          NUM_DRAWS).items()}
            assert all(np.all(np.isfinite(v)) for v in draws.values())

            def near(x, mean, what):
                se = x.std(0) / np.sqrt(len(x))
                assert np.all(np.abs(x.mean(0) - mean) < 5 * se + 1e-12), (what, seed, x.mean(0), mean)

            spread = draws["cov"] if structure.covariance == "full" else draws["scales"] ** 2
            near(spread, spread_mean, "cov")
            c = draws["locs"] - q.loc
            if structure.covariance == "full":
                near(np.einsum("ski,skj->skij", c, c), spread_mean / beta[:, None, None], "cov(locs)")
                near(draws["weights"], q.weight_a / q.weight_a.sum(), "weights")
            else:
                near(c**2, spread_mean / beta[:, None], "var(locs)")
                near(draws["sticks"], q.weight_a / (q.weight_a + q.weight_b), "sticks")
                near(draws["concentration"], q.conc_shape / q.conc_rate, "concentration")


@pytest.mark.parametrize("structure", [STRUCTURES[0], STRUCTURES[3]], ids=["full-dirichlet", "diag-stick-learned"])
def test_log_q_matches_scipy_and_the_closed_form_elbo_matches_monte_carlo(structure):
    X = X60
    prior = _prior(2, structure.covariance)
    state = _perturbed(_state_after(X, prior, 3, structure))
    num = 200  # draws for the Monte Carlo ELBO (SciPy densities per draw: the slow part)
    draws = {k: np.asarray(v) for k, v in mc.sample_q(jax.random.PRNGKey(1), state, structure, NUM_DRAWS).items()}
    log_qs = np.asarray(jax.vmap(lambda v: mc.log_q(v, state, structure))(draws))
    _check_kl(draws, state, prior, structure)
    q = jax.tree.map(np.asarray, state)  # NumPy: indexing a jax.Array compiles a program per shape
    # log q, term by term, against SciPy for a few draws.
    for s in range(3):
        one = {k: v[s] for k, v in draws.items()}
        ref = 0.0
        for k in range(3):
            m, psi = q.loc[k], q.scale[k]
            b, nu = float(q.strength[k]), float(q.df[k])
            if structure.covariance == "full":
                cov = one["cov"][k]
                ref += stats.invwishart.logpdf(cov, df=nu, scale=psi) + stats.multivariate_normal.logpdf(one["locs"][k], m, cov / b)
            else:
                sd = one["scales"][k]
                ref += np.sum(stats.invgamma.logpdf(sd**2, 0.5 * nu, scale=0.5 * psi) + np.log(2 * sd))
                ref += np.sum(stats.norm.logpdf(one["locs"][k], m, sd / np.sqrt(b)))
        if structure.weights == "dirichlet":
            ref += stats.dirichlet.logpdf(one["weights"] / one["weights"].sum(), np.asarray(state.weight_a))
        else:
            ref += np.sum(stats.beta.logpdf(one["sticks"], np.asarray(state.weight_a), np.asarray(state.weight_b)))
            if structure.learn_concentration:
                ref += stats.gamma.logpdf(one["concentration"], float(state.conc_shape), scale=1 / float(state.conc_rate))
        assert log_qs[s] == pytest.approx(ref, rel=1e-9)
    # ELBO = E_q[sum_nk r_nk (log w_k + log N(x_n | theta_k))] - sum r log r + E_q[log p(theta) - log q(theta)],
    # every density here from SciPy, with r the responsibilities the closed form uses.
    r = np.asarray(mc.responsibilities(jnp.asarray(X), state, structure))
    terms = np.empty(num)
    for s in range(num):
        one = {k: v[s] for k, v in draws.items()}
        comp = np.log(_weights_of(one))[None] + _scipy_component_terms(X, one, structure.covariance)
        terms[s] = np.sum(r * comp) + _log_p_theta(one, prior, structure) - log_qs[s]
    entropy = -np.sum(r * np.log(np.clip(r, 1e-300, 1)))
    estimate, se = terms.mean() + entropy, terms.std() / np.sqrt(num)
    exact = float(mc.elbo(jnp.asarray(X), prior, state, structure))
    assert se > 1e-3  # a real Monte Carlo check, not a degenerate one
    assert abs(estimate - exact) < 4 * se, (estimate, exact, se)


def _np_mixture_density(X, weights, locs, spread, covariance):
    """p(x_m | draw s) = sum_k w_k N(x_m | locs_k, cov_k) with NumPy, (S, m)."""
    diff = X[None, :, None, :] - locs[:, None, :, :]  # (S, m, K, d)
    d = X.shape[1]
    if covariance == "full":
        chol = np.linalg.cholesky(spread)[:, None]  # (S, 1, K, d, d)
        sol = np.linalg.solve(chol, diff[..., None])[..., 0]
        logdet = 2 * np.sum(np.log(np.diagonal(chol, axis1=-2, axis2=-1)), -1)
    else:
        sol = diff / spread[:, None]
        logdet = 2 * np.sum(np.log(spread), -1)[:, None]
    log_comp = -0.5 * np.sum(sol**2, -1) - 0.5 * logdet - 0.5 * d * np.log(2 * np.pi)
    return np.sum(weights[:, None, :] * np.exp(log_comp), -1)


@pytest.mark.parametrize("structure", [
    STRUCTURES[0],
    # its own init/update/elbo programs (~6 s); the same check runs on the other two structures
    pytest.param(STRUCTURES[2], marks=pytest.mark.slow),
    STRUCTURES[3]], ids=["full-dirichlet", "full-stick", "diag-stick-learned"])
def test_elbo_never_decreases(structure):
    X = jnp.asarray(X60)
    prior = _prior(2, structure.covariance)
    s = mc.init(jax.random.PRNGKey(3), X, prior, 3, structure)
    # start from random soft assignments (far from the optimum) so the ascent has work to do
    r = jnp.asarray(np.random.default_rng(3).dirichlet(np.ones(3), size=X.shape[0]))
    s = _update_theta(X, r, prior, s, structure)
    values = []
    for _ in range(60):
        s = mc.update(X, prior, s, structure)
        values.append(float(s.elbo))
    values.append(float(mc.elbo(X, prior, s, structure)))
    steps = np.diff(values)
    assert np.all(steps >= -1e-9 * np.abs(values[1:])), steps.min()
    assert values[-1] > values[0] + 10.0  # and it actually climbed


def _invwishart_logpdf(x, df, scale):
    """Vectorised inverse-Wishart log density over a batch of matrices x (S, d, d)."""
    d = scale.shape[-1]
    _, logdet_x = np.linalg.slogdet(x)
    tr = np.trace(scale @ np.linalg.inv(x), axis1=-2, axis2=-1)
    return (0.5 * df * np.linalg.slogdet(scale)[1] - 0.5 * df * d * np.log(2) - multigammaln(0.5 * df, d)
            - 0.5 * (df + d + 1) * logdet_x - 0.5 * tr)


def _mvn_logpdf(x, mean, cov):
    d = x.shape[-1]
    diff = x - mean
    sol = np.linalg.solve(cov, diff[..., None])[..., 0]
    return -0.5 * np.sum(diff * sol, -1) - 0.5 * np.linalg.slogdet(cov)[1] - 0.5 * d * np.log(2 * np.pi)


def _check_kl(draws, state, prior, structure):
    """KL(q(locs_0, cov_0) || p(locs_0, cov_0)) in closed form against Monte Carlo (NumPy/SciPy)."""
    kl = float(np.asarray(_kl_components(state, prior, structure))[0])
    state = jax.tree.map(np.asarray, state)  # NumPy: indexing a jax.Array compiles a program per shape
    m, psi, b, nu = state.loc[0], state.scale[0], float(state.strength[0]), float(state.df[0])
    m0, psi0, b0, nu0 = np.asarray(prior.loc), np.asarray(prior.scale), float(prior.strength), float(prior.df)
    mu = draws["locs"][:, 0]
    if structure.covariance == "full":
        c = draws["cov"][:, 0]
        assert _invwishart_logpdf(c[:2], nu, psi) == pytest.approx(
            [stats.invwishart.logpdf(ci, df=nu, scale=psi) for ci in c[:2]], rel=1e-10)
        lq = _invwishart_logpdf(c, nu, psi) + _mvn_logpdf(mu, m, c / b)
        lp = _invwishart_logpdf(c, nu0, psi0) + _mvn_logpdf(mu, m0, c / b0)
    else:
        sd = draws["scales"][:, 0]
        lq = np.sum(stats.invgamma.logpdf(sd**2, nu / 2, scale=psi / 2) + stats.norm.logpdf(mu, m, sd / np.sqrt(b)), -1)
        lp = np.sum(stats.invgamma.logpdf(sd**2, nu0 / 2, scale=psi0 / 2) + stats.norm.logpdf(mu, m0, sd / np.sqrt(b0)), -1)
    vals = lq - lp
    assert abs(vals.mean() - kl) < 4 * vals.std() / np.sqrt(len(vals)), (vals.mean(), kl)


@pytest.mark.parametrize("structure", [STRUCTURES[0], STRUCTURES[3]], ids=["full-dirichlet", "diag-stick-learned"])
def test_variational_predictive_matches_monte_carlo(structure):
    prior = _prior(2, structure.covariance)
    state = _state_after(X60, prior, 3, structure)
    X_new = np.array([[-3.0, 0.0], [0.5, 3.0], [6.0, -2.0]])
    exact = np.asarray(mc.log_predictive(X_new, state, structure))
    draws = {k: np.asarray(v) for k, v in mc.sample_q(jax.random.PRNGKey(7), state, structure, NUM_DRAWS).items()}
    if "weights" in draws:
        weights = draws["weights"]
    else:
        v = draws["sticks"]
        ones = np.ones(v.shape[:-1] + (1,))
        weights = np.concatenate([v, ones], -1) * np.concatenate([ones, np.cumprod(1 - v, -1)], -1)
    spread = draws.get("cov", draws.get("scales"))
    dens = _np_mixture_density(X_new, weights, draws["locs"], spread, structure.covariance)
    est = np.log(dens.mean(0))
    se = dens.std(0) / dens.mean(0) / np.sqrt(dens.shape[0])  # delta method on the log
    assert np.all(np.abs(est - exact) < 4 * se + 1e-12), (est, exact, se)


def test_ordered_log_q_sums_the_relabellings():
    structure = mc.Structure("full", "dirichlet")
    state = _state_after(X60, _prior(2, "full"), 3, structure)
    draw = {k: np.asarray(v)[0] for k, v in mc.sample_q(jax.random.PRNGKey(9), state, structure, NUM_DRAWS).items()}
    # NumPy: indexing a jax.Array (here and by each permutation below) compiles a program per shape
    draw = {k: np.asarray(v) for k, v in _sort_components(draw, structure).items()}
    terms = []
    for perm in itertools.permutations(range(3)):
        p = np.asarray(perm)
        terms.append(float(mc.log_q({k: v[p] for k, v in draw.items()}, state, structure)))
    assert float(mc.log_q_ordered(draw, state, structure)) == pytest.approx(float(logsumexp(terms)), rel=1e-10)


def test_fit_recovers_simulated_clusters_and_tol_is_traced():
    data = gaussian_mixture_data(600, seed=0)
    prior = _prior(2, "full")
    structure = mc.Structure("full", "dirichlet")
    res = mc.fit(data.X, prior, 3, jax.random.PRNGKey(0), structure=structure, max_iter=200, tol=1e-8)
    size = mc._fit_one._cache_size()
    res2 = mc.fit(data.X, prior, 3, jax.random.PRNGKey(0), structure=structure, max_iter=200, tol=1e-4)
    assert mc._fit_one._cache_size() == size  # tolerance is a traced number: no recompilation
    assert bool(res.converged) and int(res.state.iteration) <= 200
    assert int(res2.state.iteration) <= int(res.state.iteration)
    order = np.argsort(np.asarray(res.state.loc[:, 0]))
    # true means (-3, 0), (0, 4), (3, 0) sorted by x: (-3, 0), (0, 4), (3, 0)
    truth = data.locs[np.argsort(data.locs[:, 0])]
    assert np.max(np.abs(np.asarray(res.state.loc)[order] - truth)) < 0.1
    w = np.asarray(mc.expected_weights(res.state, structure))[order]
    assert np.max(np.abs(w - data.weights[np.argsort(data.locs[:, 0])])) < 0.05
    # every restart's ELBO is a lower bound of the best's
    assert float(res.elbo) == pytest.approx(float(np.max(res.restart_elbos)))


def test_restarts_keep_the_best_elbo_start_and_one_start_is_that_start_alone():
    # Start i of a multi-start fit is exactly the single-start fit with key i of split(key, R); the
    # returned fit is the start with the largest final ELBO (data chosen to have several optima).
    X = gaussian_mixture_data(90, seed=3).X
    prior = _prior(2, "full")
    structure = mc.Structure("full", "stick")
    key = jax.random.PRNGKey(5)
    multi = mc.fit(X, prior, 6, key, structure=structure, max_iter=300, tol=1e-8, num_restarts=4)
    # the arguments exactly as `fit` passes them (tol not weakly typed): `fit`'s compiled program
    X64, tol, cap = jnp.asarray(X, jnp.float64), jnp.asarray(1e-8, jnp.float64), jnp.asarray(300, jnp.int32)
    size = mc._fit_one._cache_size()
    singles = [mc._fit_one(X64, prior, 6, k, structure, cap, tol) for k in jax.random.split(key, 4)]
    assert mc._fit_one._cache_size() == size
    elbos = np.array([float(s[2]) for s in singles])
    assert np.ptp(elbos) > 1.0  # the starts do reach different optima here
    np.testing.assert_allclose(np.asarray(multi.restart_elbos), elbos, rtol=1e-12)
    best = singles[int(np.argmax(elbos))]
    assert float(multi.elbo) == float(np.max(elbos))
    np.testing.assert_allclose(np.asarray(multi.state.loc), np.asarray(best[0].loc), rtol=1e-12)
    # one start: the fit is that start (key 0 of split(key, 1)), restart_elbos its own final ELBO
    one = mc.fit(X, prior, 6, key, structure=structure, max_iter=300, tol=1e-8, num_restarts=1)
    alone = mc._fit_one(X64, prior, 6, jax.random.split(key, 1)[0], structure, cap, tol)
    assert np.asarray(one.restart_elbos).shape == (1,) and float(one.elbo) == float(alone[2])
    np.testing.assert_allclose(np.asarray(one.state.loc), np.asarray(alone[0].loc), rtol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3"])
def test_num_restarts_is_validated(bad):
    with pytest.raises(ValueError, match="num_restarts"):
        mc.fit(X60, _prior(2, "full"), 3, jax.random.PRNGKey(0), structure=mc.Structure("full", "dirichlet"),
               num_restarts=bad)

