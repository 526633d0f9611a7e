"""Bad input gets a clear error naming the argument, raised before any JAX tracing."""

import numpy as np
import optax
import pytest
from numpyro.infer.autoguide import AutoLaplaceApproximation

import inference
import probmodels
from probmodels import conjugate

X = np.random.default_rng(0).normal(size=(20, 2))
Y = X @ np.array([1.0, 1.0])
LABELS = (Y > 0).astype(int)


@pytest.mark.parametrize(
    "model, args, kwargs, match",
    [
        (probmodels.linear_regression, (X[:, 0], Y), {}, "X must be 2-D"),
        (probmodels.linear_regression, (np.full((20, 2), np.nan), Y), {}, "X contains NaN"),
        (probmodels.linear_regression, (X, Y[:5]), {}, "y has 5 entries"),
        (probmodels.linear_regression, (X, np.r_[Y[:-1], np.inf]), {}, "y contains NaN or inf"),
        (probmodels.linear_regression, (X, Y), {"prior_scale": -1.0}, "prior_scale"),
        (probmodels.linear_regression, (X, Y), {"noise_scale": 0.0}, "noise_scale"),
        (probmodels.linear_regression, (X, Y), {"noise_prior": (1.0, -2.0)}, r"noise_prior\[1\]"),
        (probmodels.linear_regression, (np.zeros((0, 2)), Y[:0]), {}, "X is empty"),
        (probmodels.logistic_regression, (X, LABELS + 1), {}, "binary labels"),
        (probmodels.logistic_regression, (X, np.array(["a"] * 20)), {}, "binary labels"),
        (probmodels.probit_regression, (X, LABELS[:3]), {}, "y has 3 labels"),
        (probmodels.probit_regression, (X, LABELS), {"prior_scale": np.nan}, "prior_scale"),
    ],
)
@pytest.mark.parametrize("engine", ["mcmc", "vi", "laplace"])
def test_model_input_errors(model, args, kwargs, match, engine):
    with pytest.raises(ValueError, match=match):
        getattr(inference, engine)(model, *args, progress=False, **kwargs) if engine != "laplace" \
            else inference.laplace(model, *args, **kwargs)


def test_labels_accepted_in_every_coding():
    for y in (LABELS, 2 * LABELS - 1, LABELS.astype(bool)):
        post = inference.laplace(probmodels.logistic_regression, X, y, num_samples=10)
        np.testing.assert_array_equal(post.observed_data["y"], LABELS)


@pytest.mark.parametrize(
    "engine, options, exc, match",
    [
        ("mcmc", {"num_samples": 0}, ValueError, "num_samples"),
        ("mcmc", {"num_chains": 1.5}, TypeError, "num_chains"),
        ("mcmc", {"target_accept": 1.2}, ValueError, "target_accept"),
        ("mcmc", {"chain_method": "magic"}, ValueError, "chain_method"),
        ("mcmc", {"seed": -1}, ValueError, "seed"),
        ("vi", {"guide": "gaussian-process"}, ValueError, "guide"),
        ("vi", {"guide": 3}, TypeError, "guide"),
        ("vi", {"optimizer": "adam"}, TypeError, "optimizer"),
        ("vi", {"steps": -5}, ValueError, "steps"),
        ("vi", {"learning_rate": 0.0}, ValueError, "learning_rate"),
        ("vi", {"method": "cavi"}, ValueError, "method"),
        # a point mass during SVI (its Laplace approximation is built afterwards): every draw was
        # the mode, sds 0, converged=True (session 66)
        ("vi", {"guide": AutoLaplaceApproximation(probmodels.linear_regression)}, ValueError,
         "AutoLaplaceApproximation.*inference.laplace"),
        ("laplace", {"num_samples": 0}, ValueError, "num_samples"),
        ("laplace", {"tol": -1.0}, ValueError, "tol"),
        ("mcmc", {"model_kwargs": {"noise_scale": 1.0}, "noise_scale": 2.0}, ValueError, "model_kwargs"),
        ("mcmc", {"model_kwargs": [1]}, TypeError, "model_kwargs"),
    ],
)
def test_engine_option_errors(engine, options, exc, match):
    with pytest.raises(exc, match=match):
        getattr(inference, engine)(probmodels.linear_regression, X, Y, **options)


def test_fit_rejects_unknown_engine_and_non_callable_model():
    with pytest.raises(ValueError, match="engine"):
        inference.fit(probmodels.linear_regression, X, Y, engine="gibbs")
    with pytest.raises(TypeError, match="model"):
        inference.mcmc("linear_regression", X, Y)


def test_fit_dispatches_one_word():
    post = inference.fit(probmodels.linear_regression, X, Y, engine="laplace", noise_scale=1.0, num_samples=20)
    assert post.engine == "laplace" and post.samples["w"].shape == (1, 20, 2)


def test_model_kwargs_pass_colliding_names():
    def model(X, y=None, *, seed=0.0):
        import numpyro
        import numpyro.distributions as dist

        w = numpyro.sample("w", dist.Normal(seed, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Normal(X @ w, 1.0), obs=y)

    a = inference.laplace(model, X, Y, model_kwargs={"seed": 100.0}, num_samples=10)
    b = inference.laplace(model, X, Y, num_samples=10)
    assert np.all(a.approximation["loc"] > b.approximation["loc"])


def test_singular_hessian_is_reported():
    def flat_direction(y=None):
        import numpyro
        import numpyro.distributions as dist

        a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), ()))
        b = numpyro.sample("b", dist.ImproperUniform(dist.constraints.real, (), ()))
        numpyro.sample("y", dist.Normal(a + b, 1.0), obs=y)  # only a + b is identified

    with pytest.raises(inference.SingularHessianError, match="singular"):
        inference.laplace(flat_direction, np.array([0.3, 0.1, -0.2]))


def test_conjugate_bad_input():
    with pytest.raises(ValueError, match="y is required"):
        conjugate.linear_regression_posterior(X, None, noise_scale=1.0)
    with pytest.raises(ValueError, match="noise_scale"):
        conjugate.linear_regression_posterior(X, Y, noise_scale=-1.0)
    with pytest.raises(ValueError, match="successes"):
        conjugate.beta_bernoulli_log_evidence(11, 10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_posterior_without_a_mode_is_said_so_by_laplace_naming_the_site(dtype):
    # the centred eight-schools model: its density grows without bound as tau -> 0 with the thetas
    # at mu, so Laplace's search runs off; with the Hessian scaled (session 68) it raised "the log
    # posterior's gradient or Hessian became non-finite during the mode search" (FloatingPointError)
    import jax
    from _schools import SCHOOLS_SIGMA, SCHOOLS_Y, centred_schools

    with jax.enable_x64(dtype == "float64"), pytest.raises(inference.SingularHessianError,
                                                           match=r"no mode: .*ran off along sites \['tau'\]"):
        inference.laplace(centred_schools, SCHOOLS_SIGMA, y=SCHOOLS_Y)


def test_optax_optimizer_is_accepted():
    post = inference.vi(probmodels.linear_regression, X, Y, noise_scale=1.0, optimizer=optax.adam(0.02),
                        steps=3000, num_samples=20, progress=False)
    assert post.samples["w"].shape == (1, 20, 2)


def test_laplace_without_a_valid_start_raises_numpyros_error():
    """The start is searched in a compiled program; when it finds none, NumPyro's own eager check
    runs and raises (not a silent non-finite mode search)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def nowhere(y):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("wall", jnp.where(x > 50.0, 0.0, -jnp.inf))
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y)

    with pytest.raises(RuntimeError, match="Cannot find valid initial parameters"):
        inference.laplace(nowhere, np.zeros(3))


@pytest.mark.parametrize("engine", ["vi", "laplace", "ep"])
def test_a_discrete_model_s_refusal_points_to_the_engines_that_take_it(engine):
    # Alpaydin's sprinkler network (every latent discrete): the refusals named engines that refuse
    # it too (Laplace: "use inference.mcmc, inference.vi or inference.ep"; EP: "use
    # inference.laplace, inference.vi or inference.mcmc"); now inference.mcmc and inference.exact
    from probmodels.bayes_net import SPRINKLER

    net = probmodels.bayes_net(SPRINKLER)
    with pytest.raises(ValueError, match=r"discrete.*inference\.mcmc \(Gibbs steps for it\).*inference\.exact") as err:
        getattr(inference, engine)(net, W=1, progress=False)
    assert "inference.vi or" not in str(err.value) and "inference.laplace," not in str(err.value)


def _subsampled(x):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", x.shape[0], subsample_size=50) as idx:
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=jnp.asarray(x)[idx])


@pytest.mark.parametrize("engine", ["mcmc", "vi", "laplace", "ep", "exact", "distributed_ep"])
def test_a_subsampling_plate_is_refused_naming_it_before_any_work(engine, monkeypatch):
    # NUTS, Laplace and EP failed inside NumPyro with "Algorithms like HMC/NUTS do not support
    # subsampling. You might want to use SVI"; inference.vi ran its whole fit, then failed in its
    # optimum check with the same advice to use SVI
    import jax

    monkeypatch.setattr(jax, "jit", None)  # the refusal comes before any compilation
    x = np.random.default_rng(0).normal(1.0, 1.0, size=200)
    with pytest.raises(ValueError, match=rf"plate 'data' draws a subsample .*50 of 200.*inference\.{engine} fits the whole"):
        getattr(inference, engine)(_subsampled, x)
