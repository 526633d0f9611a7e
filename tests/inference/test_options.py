"""Engine options are honoured or refused: an option a dedicated path cannot honour raises
ValueError naming it (a default value passes), and every advertised option works (issue 21,
finding 7: each of these was dropped without a word, or raised TypeError)."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest

import inference
import probmodels
from inference._model import trace_model
from inference.ep.bm_posterior import bayes_machine_parts
from inference.ep.sparse_bm import fit_sparse

RNG = np.random.default_rng(0)
XS = RNG.normal(size=(30, 5))
YS = XS[:, 0] * 2.0 + 0.3 * RNG.normal(size=30)
XB = np.random.default_rng(1).uniform(-1, 1, (60, 2))
YB = XB[:, 0] + 0.3 * XB[:, 1] > 0
SLAB = (probmodels.spike_and_slab_regression, (XS, YS), {"noise_scale": 0.3})
MACHINE = (probmodels.bayes_machine, (XB[:20], YB[:20]), {})


@pytest.mark.parametrize("case", [SLAB, MACHINE], ids=["spike-and-slab gibbs", "bayes-machine ess"])
@pytest.mark.parametrize("option", [{"target_accept": 0.95}, {"max_tree_depth": 6},
                                    {"chain_method": "sequential"}, {"chain_method": "parallel"}])
def test_mcmc_dedicated_samplers_refuse_nuts_options(case, option):
    model, args, kw = case
    with pytest.raises(ValueError, match=next(iter(option))):
        inference.mcmc(model, *args, num_warmup=5, num_samples=5, num_chains=1, progress=False, **option, **kw)


@pytest.mark.parametrize("option", [{"guide": "mvn"}, {"optimizer": optax.sgd(0.1)}, {"learning_rate": 0.1},
                                    {"num_particles": 4}, {"check_every": 100}, {"shard_data": True}])
def test_vi_spike_and_slab_refuses_svi_options(option):
    model, args, kw = SLAB
    with pytest.raises(ValueError, match=next(iter(option))):
        inference.vi(model, *args, steps=5, num_samples=5, progress=False, **option, **kw)


def test_vi_spike_and_slab_takes_defaults_and_its_own_guide():
    model, args, kw = SLAB
    a = inference.vi(model, *args, num_samples=20, progress=False, **kw)
    b = inference.vi(model, *args, num_samples=20, progress=False, guide="normal", learning_rate=0.01, **kw)
    np.testing.assert_array_equal(a.samples["w"], b.samples["w"])


def _toy(x):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


def test_vi_method_gets_the_options_it_names_and_refuses_others():
    """A coordinate-ascent ``method`` receives the SVI options its function names (given a
    non-default value), and a non-default one it does not name raises ValueError."""
    seen = {}

    def named(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, learning_rate=0.05,
              check_every=250):
        seen.update(learning_rate=learning_rate, check_every=check_every)
        return "named"

    def plain(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, **options):
        seen.update(options)
        return "plain"

    def model(x):
        _toy(x)

    model.vi_methods = {"named": named, "plain": plain}
    x = np.zeros(3)
    assert inference.vi(model, x, method="named", progress=False) == "named"
    assert seen == {"learning_rate": 0.05, "check_every": 250}  # the method's own defaults
    assert inference.vi(model, x, method="named", learning_rate=0.2, check_every=50, progress=False) == "named"
    assert seen == {"learning_rate": 0.2, "check_every": 50}
    for option in ({"learning_rate": 0.2}, {"guide": "mvn"}, {"num_particles": 2}, {"optimizer": optax.adam(0.1)}):
        with pytest.raises(ValueError, match=next(iter(option))):
            inference.vi(model, x, method="plain", progress=False, **option)
    with pytest.raises(ValueError, match="guide"):
        inference.vi(model, x, method="named", guide="mvn", progress=False)


def test_mixture_cavi_refuses_svi_options():
    X = np.random.default_rng(2).normal(size=(40, 2))
    with pytest.raises(ValueError, match="learning_rate"):
        inference.vi(probmodels.gaussian_mixture, X, 2, method="cavi", learning_rate=0.1, progress=False)


def test_ep_options_of_one_dedicated_path_refused_elsewhere():
    with pytest.raises(ValueError, match="active_set_size"):
        inference.ep(probmodels.probit_regression, XS, (YS > 0).astype(int), active_set_size=5, progress=False)
    with pytest.raises(ValueError, match="covariance"):
        inference.ep(probmodels.bayes_machine, XB, YB, covariance="full", progress=False)
    with pytest.raises(ValueError, match="active_set_size"):
        inference.ep(probmodels.bayes_machine, XB, YB, active_set_size=0, progress=False)


def test_ep_reaches_the_sparse_bayes_machine():
    """README.md advertises the sparse Bayes machine through ``inference.ep(bayes_machine, X, y,
    active_set_size=d)``, which raised TypeError (the option went to the model). It now runs
    `inference.ep.sparse_bm.fit_sparse` on the model's kernel matrix: same active set, same mean."""
    post = inference.ep(probmodels.bayes_machine, XB, YB, active_set_size=12, num_samples=50, progress=False)
    parts = bayes_machine_parts(trace_model(probmodels.bayes_machine, (XB, YB), {}, 0))
    direct = fit_sparse(parts.K, parts.t, parts.noise_prior, active_set_size=12, num_passes=2,
                        schedule="parallel", damping=0.5, tol=1e-6, max_iter=200, negative_sites="clip",
                        learn_noise=parts.learn_noise, fixed_eps=parts.fixed_eps, prior_mean=parts.prior_mean)
    assert post.diagnostics["active_set_size"] == 12
    np.testing.assert_array_equal(post.approximation["active"], np.asarray(direct.active))
    np.testing.assert_allclose(post.approximation["mean"], np.asarray(direct.f_mean), rtol=1e-12, atol=1e-12)
    assert post.samples["f"].shape == (1, 50, 60)
    assert post.log_evidence is None  # the active labels' evidence is not p(y)


def test_engine_warnings_point_at_the_callers_line():
    """Warnings are raised with ``skip_file_prefixes=_options.INTERNAL``: they name the user's line
    that called the engine, however deep inside the project they are raised (a fixed stacklevel
    pointed into the engine once calls went through `inference.compiled.scoped`)."""
    import warnings

    X = np.random.default_rng(0).normal(size=(30, 2))
    y = X @ np.array([1.0, -1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inference.vi(probmodels.linear_regression, X, y, noise_scale=1.0, steps=20, check_every=10,
                     num_samples=10, progress=False)
    plateau = [w for w in caught if "ELBO plateau" in str(w.message)]
    assert plateau and plateau[0].filename == __file__


@pytest.mark.parametrize("backend, devices, chains, expected", [
    ("cpu", 1, 4, "sequential"), ("cpu", 4, 4, "parallel"), ("cpu", 4, 1, "sequential"),
    ("gpu", 1, 4, "vectorized"), ("gpu", 4, 4, "parallel"), ("tpu", 2, 4, "vectorized")])
def test_default_chain_method_follows_the_device(monkeypatch, backend, devices, chains, expected):
    """Chains side by side on an accelerator (a NUTS step there is bound by kernel launches),
    one after another on a CPU, one per device where there are enough."""
    from inference.mcmc import default_chain_method

    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    monkeypatch.setattr(jax, "local_device_count", lambda: devices)
    assert default_chain_method(chains) == expected


def test_default_chain_method_refuses_a_bad_count():
    from inference.mcmc import default_chain_method

    with pytest.raises(ValueError, match="num_chains"):
        default_chain_method(0)
    with pytest.raises(TypeError, match="num_chains"):
        default_chain_method(2.0)


def test_mcmc_uses_the_default_chain_method(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    X = np.random.default_rng(0).normal(size=(20, 2))
    post = inference.mcmc(probmodels.linear_regression, X, X @ np.array([1.0, -1.0]), num_warmup=20,
                          num_samples=20, num_chains=2, progress=False)
    assert post.diagnostics["chain_method"] == "vectorized"
    assert post.samples["w"].shape == (2, 20, 2)


def _never_run(X, y=None, *, scale=1.0):
    raise AssertionError("the model ran: its arguments were not checked first")


@pytest.mark.parametrize("engine, option", [("ep", "num_chains"), ("laplace", "steps"), ("vi", "num_warmup"),
                                            ("mcmc", "learning_rate"), ("distributed_ep", "guide")])
def test_a_keyword_for_another_engine_is_refused_before_the_model_runs(engine, option):
    """A keyword that is not an option of the engine goes to the model; one the model does not take
    either (an option misspelt or meant for another engine) raises TypeError naming it, the engine
    and the model's signature, before the model runs (it used to be the model's own TypeError,
    read as the model's fault, or an error from deep inside the first trace)."""
    with pytest.raises(TypeError, match=rf"inference\.{engine}: the model _never_run\(X, y=None, \*, scale=1\.0\) "
                                        rf"cannot take these arguments: .*'{option}'"):
        getattr(inference, engine)(_never_run, XS, YS, **{option: 1})
    with pytest.raises(TypeError, match="missing a required argument: 'X'"):
        getattr(inference, engine)(_never_run)


def test_models_taking_any_keyword_still_get_them():
    """A model with ``**kwargs`` (or a wrapped one) takes every keyword: nothing is refused for it."""
    def model(X, y=None, **kwargs):
        w = numpyro.sample("w", dist.Normal(0, kwargs["prior_scale"]).expand([X.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Normal(X @ w, 1.0), obs=y)

    post = inference.laplace(model, XS, YS, prior_scale=2.0, num_samples=10, progress=False)
    assert post.samples["w"].shape == (1, 10, 5)


def test_a_wrapper_taking_its_own_keywords_is_read_by_its_own_signature():
    """``functools.wraps`` points ``inspect.signature`` at the wrapped model; the check reads the
    wrapper's own, so a keyword only the wrapper takes reaches it (``inference.sbc``'s conditioned
    model, a user's decorator: both were refused as the wrapped model's TypeError)."""
    import functools

    from probmodels import linear_regression

    @functools.wraps(linear_regression)
    def tempered(*args, temperature=1.0, **kwargs):
        with numpyro.handlers.scale(scale=1.0 / temperature):
            return linear_regression(*args, **kwargs)

    post = inference.laplace(tempered, XS, YS, temperature=2.0, noise_scale=1.0, num_samples=10, progress=False)
    assert post.samples["w"].shape == (1, 10, 5)
