"""Spike-and-slab regression's prior hyperparameters by EP's evidence (`inference.hyper.ss_fit`):
``inference.ep(spike_and_slab_regression, ..., p_incl=<prior>, slab_scale=<prior>, hyper=...)``.

References, never hand-picked numbers: central finite differences of EP's converged evidence
(EP re-run at each point) for the gradient; EP's own evidence maximised by SciPy for the mode;
exact enumeration of the 2^6 inclusion patterns (`inference.spikeslab.exact`) on a grid of the
hyperparameter for the type-II optimum and for the posterior over it. Data: n = 40, d = 6, two
true features, known noise 0.5; three seeds."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
import scipy.optimize
from scipy.special import expit, logsumexp

import inference
from inference import _model, compiled
from inference.hyper import ss_fit
from inference.spikeslab import ep_regression
from inference.spikeslab.exact import enumerate_models
from probmodels import spike_and_slab_probit, spike_and_slab_regression

NOISE = 0.5


def _data(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 6))
    y = X @ np.array([2.0, -1.5, 0.0, 0.0, 0.0, 0.0]) + NOISE * rng.normal(size=40)
    return X, y


def _setup(X, y, **priors):
    kwargs = {"noise_scale": NOISE, **priors}
    trace = _model.trace_model(spike_and_slab_regression, (X, y), kwargs)
    with compiled.scope():
        return ss_fit.setup(spike_and_slab_regression, (X, y), kwargs, trace, schedule="parallel", damping=None,
                            tol=1e-6, max_iter=200)


def _value(st, phi, warm):
    F, g, new_warm, ok, log_z = st.progs.value_and_grad(jnp.asarray(phi), warm, st.data)
    assert bool(ok)
    return float(F), np.asarray(g, np.float64), new_warm


def _collinear(seed):
    """n = 25, d = 8, the first two features nearly collinear: EP clips sites there (tilted
    marginals wider than their cavities), so its log evidence is not stationary in the sites."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(25, 8))
    X[:, 1] = X[:, 0] + 0.3 * rng.normal(size=25)
    return X, X[:, 0] + NOISE * rng.normal(size=25)


PRIORS = {"p_incl": dist.Beta(1.5, 3.0), "slab_scale": dist.HalfNormal(3.0)}  # (the float32 test's: one program)


@pytest.mark.parametrize("case", ["separated", "collinear"])
def test_evidence_gradient_matches_central_differences_of_rerun_ep(case):
    """Both hyperparameters (`PRIORS`) at four points: the
    gradient (the sites held fixed plus the adjoint of their dependence on phi) against central
    differences of the evidence with EP re-converged at each shifted point; 1e-5 relative
    (issue 23's bar; measured <= 3e-7). In the collinear case sites are clipped at three of the
    points (checked): without the adjoint term the gradient was 3-5 % off there."""
    X, y = _data(0) if case == "separated" else _collinear(0)
    st = _setup(X, y, **PRIORS)
    c = st.data[1]
    h, clipped = 1e-4, 0
    for shift in ([0.0, 0.0], [-1.0, 0.5], [1.0, -1.0], [-1.5, 1.0]):
        phi = np.asarray(st.phi0, np.float64) + np.asarray(shift)
        _, g, warm = _value(st, phi, st.warm0)
        p, slab = expit(phi[0]), np.exp(phi[1])
        ep_data = ss_fit._ep_data(c, jnp.full(X.shape[1], np.log(p) - np.log1p(-p)), jnp.full(X.shape[1], slab**2))
        clipped += int(ep_regression.update(ss_fit._state(ep_data, *warm), ep_data, 0.5).num_clipped > 0)
        fd = np.array([(_value(st, phi + h * e, warm)[0] - _value(st, phi - h * e, warm)[0]) / (2 * h)
                       for e in np.eye(2)])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-5)
    assert clipped == (3 if case == "collinear" else 0)


def _exact_log_evidence(X, y, p, slab_var=1.0):
    res = enumerate_models(X / NOISE, y / NOISE, p_incl=np.full(6, p), slab_var=np.full(6, slab_var),
                           log_scale_adjust=-40 * np.log(NOISE))
    return float(res.log_evidence), np.asarray(res.inclusion, np.float64)


# the p_incl prior of the tests below, Beta(1.5, 3): log density + log Jacobian of the logit
def _log_prior_logit(phi):
    p = expit(phi)
    return float(dist.Beta(1.5, 3.0).log_prob(p)) + np.log(p) + np.log1p(-p)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_is_the_mode_of_eps_own_evidence_and_near_the_exact_type2_mode(seed):
    """``hyper="map"`` on p_incl (Beta(1.5, 3) prior): the mode equals the maximum of EP's own
    log evidence + log prior found by SciPy (1e-4 in logit p; measured 3e-7 - 4e-5) and lies
    within 0.02 in logit p of the exact one (enumeration; measured 4e-5 - 3.3e-3); the inclusion
    probabilities at the mode within 0.01 of the exact ones there (measured 5e-5 - 3.3e-3)."""
    X, y = _data(seed)
    post = inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, p_incl=dist.Beta(1.5, 3.0), hyper="map",
                        num_samples=200, progress=False)
    info = post.diagnostics["hyper"]
    assert post.diagnostics["converged"] and info["sites"] == ["p_incl"] and post.evidence_method == "ep-map"
    phi_map = info["unconstrained"][0]
    st = _setup(X, y, p_incl=dist.Beta(1.5, 3.0))
    own = scipy.optimize.minimize_scalar(lambda t: -_value(st, [t], st.warm0)[0], bounds=(-6, 3), method="bounded",
                                         options={"xatol": 1e-7})
    assert abs(phi_map - own.x) < 1e-4, (phi_map, own.x)
    exact = scipy.optimize.minimize_scalar(lambda t: -(_exact_log_evidence(X, y, expit(t))[0] + _log_prior_logit(t)),
                                           bounds=(-6, 3), method="bounded", options={"xatol": 1e-7})
    assert abs(phi_map - exact.x) < 0.02, (phi_map, exact.x)
    _, incl = _exact_log_evidence(X, y, expit(phi_map))
    assert np.max(np.abs(post.diagnostics["inclusion_probability"] - incl)) < 0.01
    if seed == 0:  # the schedule is honoured, and EP's fixed point does not depend on it
        seq = inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, p_incl=dist.Beta(1.5, 3.0),
                           hyper="map", schedule="sequential", num_samples=200, progress=False)
        assert seq.diagnostics["schedule"] == "sequential" and post.diagnostics["schedule"] == "parallel"
        assert abs(seq.diagnostics["hyper"]["unconstrained"][0] - phi_map) < 1e-4
    # every draw holds the mode; indicators are integers, weights exactly 0 where excluded
    assert np.allclose(post.samples["p_incl"], expit(phi_map))
    z, w = post.samples["z"], post.samples["w"]
    assert np.issubdtype(z.dtype, np.integer) and np.all(w[z == 0] == 0.0)
    assert np.isfinite(post.log_evidence) and post.to_arviz()["posterior"]["p_incl"].dims == ("chain", "draw")


def test_integrate_matches_the_exact_posterior_over_p_incl():
    """``hyper="integrate"`` on p_incl: the design's mean and sd of p_incl and the inclusion
    probabilities mixed over its points against the exact posterior (enumeration on a 400-point
    grid of logit p): mean within 0.02 exact sd (measured 6e-5), sd within 2 % (0.2 %), inclusion
    within 0.005 (8e-4); log evidence within 0.01 nats of the exact integral (3e-4)."""
    X, y = _data(1)
    post = inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, p_incl=dist.Beta(1.5, 3.0),
                        hyper="integrate", num_samples=200, progress=False)
    assert post.diagnostics["converged"] and post.evidence_method == "ep-integrated"
    t = np.linspace(-7, 4, 400)
    ev = [_exact_log_evidence(X, y, expit(ti)) for ti in t]
    log_post = np.array([e[0] + _log_prior_logit(ti) for e, ti in zip(ev, t)])
    w = np.exp(log_post - logsumexp(log_post))
    p = expit(t)
    mean, sd = w @ p, np.sqrt(w @ (p - w @ p) ** 2)
    incl = w @ np.array([e[1] for e in ev])
    points, weights = expit(post.approximation["hyper_points"][:, 0]), post.approximation["hyper_weights"]
    ep_mean = weights @ points
    ep_sd = np.sqrt(weights @ (points - ep_mean) ** 2)
    assert abs(ep_mean - mean) < 0.02 * sd, (ep_mean, mean, sd)
    assert abs(ep_sd / sd - 1) < 0.02, (ep_sd, sd)
    assert np.max(np.abs(post.diagnostics["inclusion_probability"] - incl)) < 0.005
    exact_log_z = logsumexp(log_post) + np.log(t[1] - t[0])
    assert abs(post.log_evidence - exact_log_z) < 0.01, (post.log_evidence, exact_log_z)


def test_float32_map_agrees_with_float64():
    """JAX's default float32: the map of p_incl and slab_scale within 1e-3 in each unconstrained
    coordinate of float64's, converged, draws in float32."""
    X, y = _data(2)
    kw = dict(noise_scale=NOISE, **PRIORS, hyper="map", num_samples=50, progress=False)
    f64 = inference.ep(spike_and_slab_regression, X, y, **kw)
    with jax.enable_x64(False):
        f32 = inference.ep(spike_and_slab_regression, X, y, **kw)
    assert f32.diagnostics["converged"] and f32.samples["w"].dtype == np.float32
    np.testing.assert_allclose(f32.diagnostics["hyper"]["unconstrained"], f64.diagnostics["hyper"]["unconstrained"],
                               atol=1e-3)


def test_hyperparameter_sites_are_named_where_they_are_not_learnt():
    X, y = _data(0)
    prior = {"p_incl": dist.Beta(1.0, 9.0)}
    for engine in (inference.ep, inference.mcmc, inference.vi):
        with pytest.raises(ValueError, match=r"hyperparameter sites \['p_incl'\]"):
            engine(spike_and_slab_regression, X, y, noise_scale=NOISE, progress=False, **prior)
    with pytest.raises(ValueError, match="unknown noise precision.*'precision'"):
        inference.ep(spike_and_slab_regression, X, y, hyper="map", progress=False, **prior)
    with pytest.raises(ValueError, match="probit EP does not learn"):
        inference.ep(spike_and_slab_probit, X, y > 0, hyper="map", progress=False, **prior)
    with pytest.raises(ValueError, match="no hyperparameter sites"):
        inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, hyper="map", progress=False)
    with pytest.raises(ValueError, match="p_incl must lie in"):
        inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, p_incl=dist.HalfNormal(1.0), hyper="map")
    with pytest.raises(ValueError, match="must draw a scalar"):
        inference.ep(spike_and_slab_regression, X, y, noise_scale=NOISE, p_incl=dist.Beta(np.ones(6), 9.0),
                     hyper="map")
