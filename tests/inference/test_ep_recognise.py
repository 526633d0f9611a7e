"""Reading EP problems off user-written NumPyro programs (inference/ep/recognise.py, graph.py):
the projection A, b and likelihood kind found for common ways of writing a model, and a clear
ValueError naming the site for everything outside the supported class."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.stats import norm

from inference._model import trace_model
from inference.ep.driver import ep
from inference.ep.graph import flatten, split, tag
from inference.ep.recognise import _diagonal, recognise, working_space

rng = np.random.default_rng(0)
X = rng.normal(size=(12, 3))
Y01 = (X[:, 0] > 0).astype(float)
COUNTS = rng.poisson(2.0, size=12).astype(float)


def read(model, *args, **kwargs):
    trace = trace_model(model, args, kwargs)
    return recognise(model, args, kwargs, trace)


# --------------------------------------------------------------------------- supported forms
def logistic_with_bias(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 3.0))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w + b), obs=y)


def test_weights_and_bias_form_one_latent_vector():
    rec = read(logistic_with_bias, X, Y01)
    assert [b.name for b in rec.blocks] == ["w", "b"]
    np.testing.assert_allclose(rec.A, np.column_stack([X, np.ones(12)]), atol=1e-12)
    np.testing.assert_allclose(rec.b, 0.0, atol=1e-12)
    np.testing.assert_allclose(np.diag(rec.S0), [1, 1, 1, 9])
    assert rec.site_kinds == {"y": "quadrature"}


def test_working_space_follows_sites_versus_dimensions():
    assert read(logistic_with_bias, X, Y01).problem.space == "weight"  # 12 sites, 4 dimensions
    assert read(logistic_with_bias, X[:3], Y01[:3]).problem.space == "function"  # 3 sites


def probit_model(form):
    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 2.0).expand([X.shape[1]]).to_event(1))
        eta = X @ w
        if form == "Phi":
            numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(eta)), obs=y)
        elif form == "ndtr":
            numpyro.sample("y", dist.Bernoulli(probs=jax.scipy.special.ndtr(0.5 * eta + 1.0)), obs=y)
        elif form == "factor":  # labels in {-1, +1} folded into the projection
            numpyro.factor("y", jax.scipy.special.log_ndtr((2 * y - 1) * eta))
        else:  # log-odds of a probit
            logits = jax.scipy.special.log_ndtr(eta) - jax.scipy.special.log_ndtr(-eta)
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)

    return model


@pytest.mark.parametrize("form", ["Phi", "ndtr", "factor", "logits"])
def test_probit_is_recognised_however_it_is_written(form):
    rec = read(probit_model(form), X, Y01)
    assert rec.site_kinds == {"y": "probit"}
    # the re-projected site is Phi(eta) with eta = A w + b: check against the model at random w
    W = np.random.default_rng(1).normal(size=(5, 3))
    s = np.asarray(rec.problem.groups[0].data["s"])
    got = norm.logcdf(s * (W @ rec.A.T + rec.b))
    z = W @ X.T
    lin = 0.5 * z + 1.0 if form == "ndtr" else z
    want = norm.logcdf(np.where(Y01 > 0, lin, -lin))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_probit_is_recognised_under_a_tight_prior_far_from_zero():
    """A prior so tight and so far from 0 that |eta| > 5 at every point of each site's local grid
    (distributed EP's cavities late in a run): the probit is still read as a probit, from the
    fixed grid around 0, not handed to quadrature (which left local EP at a ~1.5e-6 noise floor,
    above its tol, so every local fit ran its 200 sweeps)."""

    def tight(X, y=None):
        w = numpyro.sample("w", dist.Normal(6.0, 0.003).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(X @ w)), obs=y)

    Xp = np.abs(X) + 0.5  # every eta_i = x_i^T w is above 6 * 1.5 = 9 under the prior
    rec = read(tight, Xp, Y01)
    assert rec.site_kinds == {"y": "probit"}


def test_refit_on_new_data_reuses_the_recognition_programs():
    """Recognition's programs (constants, projections, link values, prior) are kept per model
    structure with the data as arguments: a second data set of the same shapes adds none, and
    gets its own projection (not the first data set's)."""
    from inference.ep import graph, recognise as rec_module

    read(logistic_with_bias, X, Y01)
    kept, links = len(graph._PROGRAMS), rec_module._h_jit._cache_size()
    X2 = np.random.default_rng(5).normal(size=X.shape)
    rec = read(logistic_with_bias, X2, Y01)
    assert len(graph._PROGRAMS) == kept and rec_module._h_jit._cache_size() == links
    np.testing.assert_allclose(rec.A, np.column_stack([X2, np.ones(12)]), atol=1e-12)


def test_probit_forms_give_the_same_posterior():
    ref = ep(probit_model("Phi"), X, Y01, tol=1e-10, progress=False, num_samples=10)
    for form in ("factor", "logits"):
        post = ep(probit_model(form), X, Y01, tol=1e-10, progress=False, num_samples=10)
        np.testing.assert_allclose(post.approximation["mean"], ref.approximation["mean"], atol=1e-8)
        np.testing.assert_allclose(post.log_evidence, ref.log_evidence, atol=1e-8)


def test_gaussian_likelihood_is_read_exactly():
    def model(X, y=None, sigma=0.7):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        with numpyro.plate("data", X.shape[0]):
            numpyro.sample("y", dist.Normal(X @ w + 2.0, sigma), obs=y)

    y = X @ np.ones(3)
    rec = read(model, X, y)
    assert rec.site_kinds == {"y": "gaussian"}
    d = {k: np.asarray(v) for k, v in rec.problem.groups[0].data.items()}
    for w in np.random.default_rng(2).normal(size=(3, 3)):
        eta = rec.A @ w + rec.b
        site = d["log_const"] - 0.5 * np.log(2 * np.pi * d["noise_var"]) - 0.5 * (d["y"] - eta) ** 2 / d["noise_var"]
        want = -0.5 * np.log(2 * np.pi * 0.49) - 0.5 * (y - X @ w - 2.0) ** 2 / 0.49
        np.testing.assert_allclose(site, want, rtol=1e-9)


def test_poisson_and_student_t_go_to_quadrature():
    def poisson(X, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Poisson(rate=jnp.exp(X @ w)), obs=y)

    def student(X, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.StudentT(4.0, X @ w, 0.5), obs=y)

    assert read(poisson, X, COUNTS).site_kinds == {"y": "quadrature"}
    np.testing.assert_allclose(read(poisson, X, COUNTS).A, X, atol=1e-12)
    assert read(student, X, COUNTS).site_kinds == {"y": "quadrature"}


def test_gp_latent_is_function_space_with_identity_projection():
    def gp(X, y=None):
        K = jnp.exp(-0.5 * jnp.sum((X[:, None] - X[None]) ** 2, -1)) + 1e-6 * jnp.eye(X.shape[0])
        f = numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(X.shape[0]), K))
        numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(f)), obs=y)

    rec = read(gp, X, Y01)
    assert rec.problem.space == "function" and rec.site_kinds == {"y": "probit"}
    sign = np.where(Y01 > 0, 1.0, -1.0)  # the label is folded into the probit projection
    np.testing.assert_allclose(rec.A, np.diag(sign), atol=1e-12)
    np.testing.assert_allclose(np.asarray(rec.problem.prior_cov), rec.S0 * np.outer(sign, sign), atol=1e-12)



def test_a_diagonal_projection_gives_the_dense_products_elementwise():
    """working_space with a diagonal A (a GP's sites, one per coordinate) forms A S0 A' and A S0
    elementwise; they equal the dense products, and any off-diagonal entry keeps the dense path."""
    r = np.random.default_rng(3)
    B = r.normal(size=(6, 6))
    S0, m0, b = B @ B.T + np.eye(6), r.normal(size=6), r.normal(size=6)
    d = np.array([1.0, -1.0, 2.5, -0.5, 1.0, 3.0])
    for A in (np.diag(d), np.diag(d) + 1e-3 * np.eye(6, k=1)):
        problem, latent_map = working_space(A, b, m0, S0, (), [])
        assert problem.space == "function"
        np.testing.assert_allclose(np.asarray(problem.prior_cov), A @ S0 @ A.T, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(latent_map.AS0), A @ S0, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(problem.offset), b + A @ m0, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_diagonal(np.diag(d)), d)
    assert _diagonal(np.diag(d) + 1e-3 * np.eye(6, k=1)) is None and _diagonal(np.ones((2, 3))) is None


def test_masked_and_constant_sites():
    def model(X, y=None, mask=True):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.factor("const", -1.25)
        with numpyro.handlers.mask(mask=mask):
            numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    mask = np.arange(12) < 8
    rec = read(model, X, Y01, mask=mask)
    assert rec.site_kinds == {"const": "constant", "y": "quadrature"} and rec.const_log_lik == -1.25
    post = ep(model, X, Y01, mask=mask, progress=False, num_samples=20)
    np.testing.assert_allclose(post.approximation["site_tau"][8:], 0.0, atol=1e-12)  # masked: no information
    unmasked = ep(model, X[:8], Y01[:8], progress=False, num_samples=20)
    np.testing.assert_allclose(post.approximation["mean"], unmasked.approximation["mean"], atol=1e-6)
    np.testing.assert_allclose(post.log_evidence, unmasked.log_evidence, atol=1e-6)


def test_same_structure_gives_equal_static_structure():
    # Two traces of one model on new data with the same shapes compare equal as pytree structure,
    # which is what lets the compiled EP loop be reused.
    a = read(logistic_with_bias, X, Y01).problem
    b = read(logistic_with_bias, X + 1.0, 1.0 - Y01).problem
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


def test_graph_split_finds_the_affine_frontier():
    Xj = jnp.asarray(X)
    g = flatten(jax.make_jaxpr(lambda u: jnp.tanh(2.0 * (Xj @ u) + 1.0) ** 2)(jnp.zeros(3)))
    frontier, link = split(g, tag(g), g.outputs[0])
    assert len(frontier) == 1
    eta = jnp.asarray(0.3)
    assert abs(float(link(eta, [1.0, 0.0])) - np.tanh(0.3) ** 2) < 1e-12  # 2 Xu + 1 is the affine part


# --------------------------------------------------------------------------- errors
def gamma_latent(X, y=None):
    s = numpyro.sample("sigma", dist.Gamma(2.0, 2.0))
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Normal(X @ w, s), obs=y)


def discrete_latent(X, y=None):
    z = numpyro.sample("z", dist.Bernoulli(0.5))
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w + z), obs=y)


def scale_on_latent(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Normal(X @ w, jnp.exp(w[0])), obs=y)


def softmax_likelihood(X, y=None):
    W = numpyro.sample("W", dist.Normal(0.0, 1.0).expand([X.shape[1], 3]).to_event(2))
    numpyro.sample("y", dist.Categorical(logits=X @ W), obs=y)


def summed_likelihood(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.factor("total", jnp.sum(jax.nn.log_sigmoid(X @ w)) ** 2)


def hierarchical_prior(X, y=None):
    m = numpyro.sample("m", dist.Normal(0.0, 1.0))
    w = numpyro.sample("w", dist.Normal(m, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def mvn_observation(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.MultivariateNormal(X @ w, jnp.eye(X.shape[0])), obs=y)


def no_observation(X, y=None):
    numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))


@pytest.mark.parametrize("model,y,match", [
    (gamma_latent, COUNTS, "'sigma' has a Gamma prior"),
    (discrete_latent, Y01, "'z' is discrete"),
    (scale_on_latent, COUNTS, "'y'.*more than one affine projection"),
    (softmax_likelihood, COUNTS.astype(int) % 3, "'y'.*not an elementwise function"),
    (summed_likelihood, None, "'total'.*not an elementwise function"),
    (hierarchical_prior, Y01, "'w'.*prior depends on other latent"),
    (mvn_observation, COUNTS, "'y' is multivariate"),
    (no_observation, None, "no observed sites"),
])
def test_unsupported_models_name_the_site(model, y, match):
    with pytest.raises(ValueError, match=match):
        ep(model, X, y, progress=False)


def test_nan_inputs_are_rejected():
    y = Y01.copy()
    y[3] = np.nan
    with pytest.raises(ValueError, match="'y' contains NaN"):
        ep(logistic_with_bias, X, y, progress=False)

    def gaussian(X, y=None):  # a likelihood without parameter validation: our own check fires
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.factor("y", -0.5 * (y - X @ w) ** 2)

    Xbad = X.copy()
    Xbad[2, 1] = np.inf
    with pytest.raises(ValueError, match="'y'.*NaN or inf"):
        ep(gaussian, Xbad, COUNTS, progress=False)
