"""Numerical stress: separable data, badly scaled features, near-singular GP kernels, extreme label
noise for the Bayes machine, single and double precision.

The property throughout: an engine returns finite numbers that mean something (checked against a
reference where one exists), or it says clearly that it could not; never a silent NaN.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inference
import probmodels
from probmodels import kernels

rng = np.random.default_rng(11)
# The fits below share n = 60, two features and 2000 draws, so the float64 probit ones (separable,
# scaled features, single vs double precision) reuse each other's compiled programs
N, DRAWS = 60, 2000
X_SEP = rng.normal(size=(N, 2))
Y_SEP = (X_SEP[:, 0] + X_SEP[:, 1] > 0).astype(int)  # perfectly separable


@pytest.mark.parametrize("model", [probmodels.logistic_regression, probmodels.probit_regression])
@pytest.mark.parametrize("engine", ["laplace", "ep"])
def test_separable_data_with_a_proper_prior_gives_a_finite_posterior(model, engine):
    post = getattr(inference, engine)(model, X_SEP, Y_SEP, num_samples=DRAWS, progress=False)
    w = post.samples["w"]
    assert np.all(np.isfinite(w)) and np.isfinite(post.log_evidence)
    assert post.diagnostics["converged"]
    # the prior keeps the weights finite but the data push them along the separating direction
    m = post.mean("w")
    assert m[0] > 1.0 and m[1] > 1.0 and abs(m[0] - m[1]) < 0.5 * (m[0] + m[1])


def test_separable_data_with_a_flat_prior_is_reported_not_nan():
    import numpyro
    import numpyro.distributions as dist

    def flat_logistic(X, y=None):
        w = numpyro.sample("w", dist.ImproperUniform(dist.constraints.real_vector, (), (X.shape[1],)))
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    with pytest.raises((inference.SingularHessianError, FloatingPointError), match="mode|Hessian|non-finite"):
        inference.laplace(flat_logistic, X_SEP, Y_SEP)


@functools.cache
def _unscaled_reference(scale):
    """The data of the feature-scaling test and EP on the same model written in unscaled features
    (prior sd ``scale``), shared by its Laplace and EP cases of each ``scale``. The prior scale as
    an array: an argument of EP's programs, so both scales run one set (a number is a constant:
    3 more compilations per scale)."""
    r = np.random.default_rng(12)
    X = r.normal(size=(N, 2))
    y = (X @ np.array([1.0, -1.0]) + 0.5 * r.normal(size=N) > 0).astype(int)
    ref = inference.ep(probmodels.probit_regression, X, y, prior_scale=np.asarray(scale), num_samples=DRAWS,
                       progress=False)
    return X, y, ref


@pytest.mark.parametrize("scale", [1e-6, 1e6])
@pytest.mark.parametrize("engine", ["laplace", "ep"])
def test_features_scaled_by_powers_of_ten(scale, engine):
    """Probit with features scaled by ``scale``: EP and Laplace agree on the scaled weights
    (``w * scale`` is what the data identify when ``scale`` is large; the prior when small)."""
    X, y, ref = _unscaled_reference(scale)
    post = getattr(inference, engine)(probmodels.probit_regression, X * scale, y, num_samples=DRAWS,
                                      progress=False)
    w = post.samples["w"]
    assert np.all(np.isfinite(w)) and np.isfinite(post.log_evidence)
    # regression (found by this test): EP's convergence measure was not scale-free, and with
    # features ~1e-6 round-off kept it from converging; now both runs converge
    assert post.diagnostics["converged"] and ref.diagnostics["converged"]
    if scale > 1:
        # w * scale follows the unscaled model with prior sd scale: the data dominate
        np.testing.assert_allclose(post.mean("w") * scale, ref.mean("w"), rtol=0.1, atol=0.05)
    else:
        # tiny features carry no information: the posterior is the N(0, 1) prior
        np.testing.assert_allclose(w.reshape(-1, 2).std(0), 1.0, rtol=0.1)
        np.testing.assert_allclose(post.mean("w"), 0.0, atol=0.15)


@pytest.mark.parametrize("engine", ["laplace", "ep", pytest.param("vi", marks=pytest.mark.slow)])
def test_single_precision_matches_double(engine):
    """float32 and float64 fits agree (VI with the slow checks: the defaults matrix's
    probit_regression-vi cells hold float32 VI to the exact posterior by default)."""
    X = rng.normal(size=(N, 2))
    y = (X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.normal(size=N) > 0).astype(int)
    opts = {"num_samples": DRAWS, "progress": False}
    if engine == "vi":
        opts.update(guide="mvn", steps=4000, learning_rate=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        double = getattr(inference, engine)(probmodels.probit_regression, X, y, **opts)
        with jax.enable_x64(False):
            single = getattr(inference, engine)(probmodels.probit_regression, X.astype(np.float32), y, **opts)
    assert single.samples["w"].dtype == np.float32
    assert np.all(np.isfinite(single.samples["w"]))
    sd = double.samples["w"].reshape(-1, 2).std(0)
    # same fit to within Monte Carlo error of the 2000 draws (0.1 sd) plus float32 round-off
    np.testing.assert_array_less(np.abs(single.mean("w") - double.mean("w")) / sd, 0.1)
    if double.log_evidence is not None and engine != "vi":
        assert abs(single.log_evidence - double.log_evidence) < 1e-2


# --------------------------------------------------------------------------- near-singular GP kernels
class _ExpandedRBF(kernels.Kernel):
    """The RBF written as ``||x||^2 + ||x'||^2 - 2 x.x'`` (a common hand-written form): for inputs
    far from the origin the cancellation leaves the Gram matrix slightly indefinite, i.e.
    near-singular in the working precision, so ``gram`` must escalate its jitter."""

    def evaluate(self, x1, x2):
        d2 = jnp.dot(x1, x1) + jnp.dot(x2, x2) - 2.0 * jnp.dot(x1, x2)
        return jnp.exp(-0.5 * jnp.maximum(d2, 0.0))


def _near_singular(kind, x64):
    """(X, y, kernel, escalates) for a near-singular GP prior."""
    r = np.random.default_rng(4)
    if kind == "duplicated_inputs":  # every input three times: K has rank n / 3
        X = np.repeat(r.uniform(-1, 1, (10, 1)), 3, axis=0)
        return X, (X[:, 0] > 0).astype(int), kernels.RBF(0.5), False
    if kind == "long_lengthscale":  # K ~ all ones: numerically rank one
        X = r.uniform(-1, 1, (30, 1))
        return X, (X[:, 0] > 0).astype(int), kernels.RBF(1e3), False
    offset = 1e5 if x64 else 30.0  # cancellation: measured escalation to 1e-4 (f64) / 1e-3 (f32)
    X = r.uniform(-1, 1, (30, 1))
    return X + offset, (X[:, 0] > 0).astype(int), _ExpandedRBF(), True


# By default each kind runs once per engine, in one precision, and each engine runs in both
# precisions (EP: float64 twice, sharing its programs (they are named by the problem's structure,
# the same n = 30 for every kind), float32 once; Laplace the other way round); every kind is
# covered in both precisions. The other precision of each (kind, engine) is in the slow checks.
NEAR_SINGULAR_DEFAULT = {("duplicated_inputs", "ep", True), ("long_lengthscale", "ep", True),
                         ("cancellation", "ep", False), ("duplicated_inputs", "laplace", False),
                         ("long_lengthscale", "laplace", False), ("cancellation", "laplace", True)}
NEAR_SINGULAR = [pytest.param(kind, engine, x64, id=f"{kind}-{engine}-{'float64' if x64 else 'float32'}",
                              marks=[] if (kind, engine, x64) in NEAR_SINGULAR_DEFAULT else [pytest.mark.slow])
                 for kind in ("duplicated_inputs", "long_lengthscale", "cancellation")
                 for engine in ("ep", "laplace") for x64 in (True, False)]


@pytest.mark.parametrize("kind, engine, x64", NEAR_SINGULAR)
def test_near_singular_gp_kernels_fit_and_report_the_jitter(kind, engine, x64):
    X, y, kernel, escalates = _near_singular(kind, x64)
    dtype = np.float64 if x64 else np.float32
    opts = {"num_samples": 200} | ({"progress": False} if engine == "ep" else {})
    with jax.enable_x64(x64), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = getattr(inference, engine)(probmodels.gp_classifier, X.astype(dtype), y, kernel=kernel, **opts)
        K, jitter = kernels.gram(kernel, X.astype(dtype))
    jitter_warnings = [w for w in caught if issubclass(w.category, kernels.JitterWarning)]
    base = kernels.BASE_JITTER[np.dtype(dtype)]
    scale = float(np.mean(np.diag(np.asarray(K)))) - jitter
    # the jitter is reported: a JitterWarning exactly when it had to be escalated above the base,
    # and EP's diagnostics carry the value that was added
    if escalates:
        assert jitter > 5 * base * scale
        assert jitter_warnings and "escalated" in str(jitter_warnings[0].message)
    else:
        np.testing.assert_allclose(jitter, base * scale, rtol=1e-6)
        assert not jitter_warnings
    if engine == "ep":
        assert post.diagnostics["kernel_jitter"] == {"f": pytest.approx(jitter, rel=1e-6)}
        assert post.diagnostics["converged"]
    f = post.samples["f"]
    assert f.dtype == dtype and np.all(np.isfinite(f))
    assert post.log_evidence is not None and np.isfinite(post.log_evidence)
    mean = post.approximation["mean" if engine == "ep" else "loc"].reshape(-1)
    # the fits mean something: identical inputs get the same latent mean (one value per group of
    # three), and a very long lengthscale gives a nearly constant latent function; the labels split
    # at x = 0 either way, so the mean is increasing across the split
    if kind == "duplicated_inputs":
        groups = mean.reshape(10, 3)
        np.testing.assert_allclose(groups, groups[:, :1].repeat(3, 1), atol=1e-3 * np.abs(mean).max() + 1e-4)
    elif kind == "long_lengthscale":
        assert np.ptp(mean) < 0.2 * np.abs(mean).max() + 0.05
    assert mean[y == 1].mean() > mean[y == 0].mean()


# --------------------------------------------------------------------------- Bayes machine label noise


def _noisy_labels(fraction, n=60, seed=0):
    r = np.random.default_rng(seed)
    X = r.uniform(-1, 1, (n, 2))
    y = np.where(X[:, 0] + X[:, 1] > 0, 1, -1)  # separable before flipping
    flip = r.permutation(n)[: int(round(fraction * n))]
    y[flip] *= -1
    return X, y


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_bayes_machine_learns_the_label_noise_from_zero_to_extreme(x64):
    """0% flipped labels on separable data and 45% flipped labels: EP returns finite results and
    the learnt flip rate E[eps] follows the data (prior Beta(1, 10), mean 0.09): near 0 for clean
    labels, far above the prior mean for 45% noise (the prior and the GP's ability to fit some of
    the noise keep it below 0.45: measured 0.01 and 0.34 at n = 80)."""
    dtype = np.float64 if x64 else np.float32
    means = {}
    with jax.enable_x64(x64):
        for fraction in (0.0, 0.45):
            X, y = _noisy_labels(fraction)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                post = inference.ep(probmodels.bayes_machine, X.astype(dtype), y, kernel=kernels.RBF(1.0),
                                    num_samples=200, progress=False)
            assert post.samples["f"].dtype == dtype
            for site in ("f", "eps"):
                assert np.all(np.isfinite(post.samples[site])), site
            assert post.log_evidence is not None and np.isfinite(post.log_evidence)
            if not post.diagnostics["converged"]:  # allowed, but then it must say what to change
                assert any("damping" in str(w.message) for w in caught)
            means[fraction] = float(post.approximation["eps_mean"])
            np.testing.assert_allclose(post.mean("eps"), means[fraction], atol=0.03)  # draws follow q
    assert means[0.0] < 0.05
    assert means[0.45] > 0.25


def test_bayes_machine_stopped_early_reports_and_names_damping():
    X, y = _noisy_labels(0.45)
    # num_samples as in the label-noise test (max_iter and damping are traced): the same programs
    with pytest.warns(RuntimeWarning, match=r"did not converge.*smaller damping \(e\.g\. damping="):
        post = inference.ep(probmodels.bayes_machine, X, y, kernel=kernels.RBF(1.0), max_iter=2, num_samples=200,
                            progress=False)
    assert post.diagnostics["converged"] is False
    assert post.diagnostics["damping"] < 0.5  # the fit raised the damping itself before giving up
    assert np.all(np.isfinite(post.samples["f"])) and np.all(np.isfinite(post.samples["eps"]))
