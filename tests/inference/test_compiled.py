"""Compiled functions kept across calls (inference.compiled, inference.chains): a second fit of
the same model on new data of the same shape neither traces nor compiles, gives the right answer,
and NUTS chains are NumPyro's (same kernel, keys and initialisation)."""

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

import inference
from inference import compiled

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def test_split_keeps_arrays_dynamic_and_the_rest_in_the_key():
    a, b = np.ones((3, 2)), np.zeros(3, dtype=np.int32)
    sp = compiled.split((a, "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    assert len(sp.arrays) == 2 and sp.key is not None
    args, kwargs = sp.rebuild([2 * a, b + 1])
    assert args[1] == "gaussian" and kwargs["scale"] == 2.0 and kwargs["mask"] is None
    np.testing.assert_array_equal(args[0], 2 * a)
    np.testing.assert_array_equal(kwargs["y"], b + 1)
    same = compiled.split((5 * a, "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    other_static = compiled.split((a, "poisson"), {"y": b, "scale": 2.0, "mask": None})
    other_shape = compiled.split((np.ones((4, 2)), "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    assert same.key == sp.key
    assert other_static.key != sp.key and other_shape.key != sp.key


def test_call_builds_once_per_structure():
    builds = []

    def model(x, power=1):
        pass

    def build(rebuild):
        builds.append(1)
        return jax.jit(lambda arrays: rebuild(arrays)[0][0].sum() ** rebuild(arrays)[1]["power"])

    compiled.clear()
    assert float(compiled.call("t", model, (np.ones(3),), {"power": 1}, (), build)) == 3.0
    assert float(compiled.call("t", model, (2 * np.ones(3),), {"power": 1}, (), build)) == 6.0
    assert len(builds) == 1
    assert float(compiled.call("t", model, (np.ones(3),), {"power": 2}, (), build)) == 9.0
    assert float(compiled.call("t", model, (np.ones(4),), {"power": 1}, (), build)) == 4.0
    assert len(builds) == 3


def test_a_model_that_needs_concrete_data_falls_back_to_constants():
    def model(x):
        return np.asarray(x).sum()  # NumPy on the input: cannot be traced

    def build(rebuild):
        return jax.jit(lambda arrays: jnp.asarray(model(*rebuild(arrays)[0])))

    compiled.clear()
    assert float(compiled.call("t", model, (np.arange(4.0),), {}, (), build)) == 6.0
    assert float(compiled.call("t", model, (np.arange(5.0)[1:],), {}, (), build)) == 10.0


def _counting_model():
    traced = []

    def model(x, y=None):
        if isinstance(x, jax.core.Tracer):
            traced.append(1)
        w = numpyro.sample("w", dist.Normal(jnp.zeros(x.shape[1]), 1.0).to_event(1))
        numpyro.deterministic("fit", x @ w)
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)

    return model, traced


def test_second_mcmc_fit_on_new_data_does_not_retrace():
    model, traced = _counting_model()
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    w = np.array([1.0, -2.0])
    opts = dict(num_samples=300, num_warmup=300, num_chains=2, seed=3, progress=False)
    inference.mcmc(model, X1, X1 @ w, **opts)
    assert traced, "the data should reach the compiled programs as traced arguments"
    before = len(traced)
    compiles = []
    listener = lambda event, secs, **kw: compiles.append(event) if event == BACKEND_COMPILE else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        post = inference.mcmc(model, X2, X2 @ w, **opts)
    finally:
        jax._src.monitoring.unregister_event_duration_listener(listener)
    assert len(traced) == before + 1  # one trace: the fingerprint of what the model computes
    assert compiles == []  # ... and no compilation
    # ... and the answer is the one for the new data: conjugate posterior mean
    prec = np.eye(2) + X2.T @ X2
    exact = np.linalg.solve(prec, X2.T @ (X2 @ w))
    sd = np.sqrt(np.diag(np.linalg.inv(prec)))
    assert np.all(np.abs(post.mean("w") - exact) < 0.15 * sd)  # MC error ~0.04 sd at ESS ~600
    np.testing.assert_allclose(post.samples["fit"], np.einsum("nd,csd->csn", X2, post.samples["w"]),
                               atol=1e-10)
    assert post.log_likelihood["y"].shape == (2, 300, 30)


def _computed_observation(X, y):
    """Observations the model computes from its inputs (as the HMM and the mixtures do): the
    engines read their values from a compiled run of the model."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    numpyro.sample("y", dist.Normal(X @ w, 1.0), obs=2.0 * jnp.asarray(y))


@pytest.mark.parametrize("x64", [pytest.param(False, id="float32"), pytest.param(True, id="float64")])
def test_a_refit_with_computed_observations_and_another_seed_compiles_nothing(x64):
    """The program reading computed observed values is kept per model structure with the data
    and the key as arguments: it was a fresh ``jax.jit`` per fit (2 compilations per refit of the
    library's HMM and mixtures). The refit's answer is the new data's (conjugate, exact; 1e-6 in
    float64, 1e-4 in float32)."""
    rng = np.random.default_rng(1)
    X1, X2 = rng.normal(size=(25, 2)), rng.normal(size=(25, 2))
    y1, y2 = X1 @ np.array([0.5, -0.5]), X2 @ np.array([-1.0, 0.3])
    with jax.enable_x64(x64):
        inference.laplace(_computed_observation, X1, y1, seed=0, progress=False)
        compiles = []
        listener = lambda event, secs, **kw: compiles.append(event) if event == BACKEND_COMPILE else None  # noqa: E731
        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            post = inference.laplace(_computed_observation, X2, y2, seed=7, progress=False)
        finally:
            jax._src.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    prec = np.eye(2) + X2.T @ X2
    np.testing.assert_allclose(post.approximation["loc"], np.linalg.solve(prec, X2.T @ (2 * y2)),
                               atol=1e-6 if x64 else 1e-4)


def _scale_model(y=None):
    """A scale with a declared start that is outside its support for about half the keys."""
    from inference.latent import Start

    def start(key):
        return jnp.where(jax.random.uniform(key) < 0.5, -1.0, 1.0)

    s = numpyro.sample("s", dist.HalfNormal(2.0), infer={"init": Start(start, "half-invalid")})
    numpyro.sample("y", dist.Normal(0.0, s), obs=y)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])  # ids: tests/conftest.py
def test_nuts_starts_each_chain_at_its_declared_start_or_searches_when_one_is_invalid(x64):
    """NUTS takes each chain's declared start from the shared start program; a start outside its
    site's support (here -1 for a scale, for about half the keys) sends the chains back to
    NumPyro's own search, which draws the declared start again with new keys. Either way the
    posterior is the quadrature one (mean of the scale within 0.25 posterior sd), in float32 and
    float64."""
    from inference.chains import _inside_support
    from inference import _model

    y = np.random.default_rng(0).normal(0.0, 1.5, size=30)
    trace = _model.structure_trace(_scale_model, (y,), {})
    assert _inside_support({"s": np.float64(1.0)}, trace) and not _inside_support({"s": np.float64(-1.0)}, trace)
    assert not _inside_support({"s": np.float64(np.nan)}, trace)
    grid = np.linspace(1e-3, 6.0, 20001)
    logp = -0.5 * (grid / 2.0) ** 2 - y.size * np.log(grid) - 0.5 * np.sum(y**2) / grid**2
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean, sd = p @ grid, np.sqrt(p @ (grid - p @ grid) ** 2)
    for seed in (0, 1, 2):
        with jax.enable_x64(x64):
            post = inference.mcmc(_scale_model, y, num_warmup=300, num_samples=500, num_chains=4, seed=seed,
                                  progress=False)
        draws = post.samples["s"]
        assert draws.dtype == (np.float64 if x64 else np.float32)
        assert np.all(np.isfinite(draws)) and np.all(draws > 0)
        assert abs(draws.mean() - mean) < 0.25 * sd, (seed, draws.mean(), mean)


@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_chains_are_numpyros(chain_method):
    """Same kernel, keys and start: NumPyro's draws, up to float rounding (different compiled
    programs round differently, and the chaotic dynamics amplify it over hundreds of steps, so
    the check uses a short run)."""
    model, _ = _counting_model()
    X = np.random.default_rng(1).normal(size=(20, 2))
    y = X @ np.array([0.5, 1.0])
    post = inference.mcmc(model, X, y, num_samples=10, num_warmup=10, num_chains=2, seed=4,
                          chain_method=chain_method, progress=False)
    raw = MCMC(NUTS(model), num_warmup=10, num_samples=10, num_chains=2, chain_method=chain_method,
               progress_bar=False)
    raw.run(jax.random.PRNGKey(4), X, y)
    np.testing.assert_allclose(post.samples["w"], np.asarray(raw.get_samples(group_by_chain=True)["w"]),
                               atol=1e-6)


def test_progress_bar_does_not_change_the_draws(capsys):
    model, _ = _counting_model()
    X = np.random.default_rng(2).normal(size=(20, 2))
    y = X @ np.array([0.5, 1.0])
    # a model object of its own: the quiet fit compiles (the program of test_chains_are_numpyros is
    # kept per model object), so it takes over DELAY / 2 and the shown fit keeps its bar (a fit
    # after a fast run of the same program drops it, `inference.chains.run_nuts`): two programs
    opts = dict(num_samples=10, num_warmup=10, num_chains=2, seed=5)
    quiet = inference.mcmc(model, X, y, progress=False, **opts)
    shown = inference.mcmc(model, X, y, progress=True, **opts)
    np.testing.assert_array_equal(quiet.samples["w"], shown.samples["w"])


def test_the_traceability_check_program_does_not_depend_on_the_data_values():
    """The check's program takes the data as arguments (the concrete version's jaxpr constants
    included): two data sets of the same shapes lower to the same program text, so the persistent
    cache serves it for new data; the constants it is given are the new data's."""

    def model(X, y=None):
        w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    rng = np.random.default_rng(4)
    texts = []
    for _ in range(2):
        X, y = rng.normal(size=(40, 3)), rng.integers(0, 2, 40)
        fn, consts, arrays = compiled.check_program(model, (X, y), {})
        texts.append(fn.lower(consts, arrays).as_text())
        assert any(np.shape(c) == X.shape and np.allclose(np.asarray(c), X) for c in consts)
    assert texts[0] == texts[1]


def test_a_scalar_data_argument_shares_the_check_program_and_is_checked_at_its_value():
    """A concrete scalar (a 0-d data array; a hyperparameter fixed at a design point) is inlined
    into a trace as a literal: the check's program was compiled once per value (a GP
    classifier's prediction from a 17-point integration compiled it 34 times, 18 s). Scalars are
    now the program's constants: two values share one program, each evaluated at its own value
    (the log joint at the check's point equals NumPyro's there), and a model that treats the
    concrete scalar differently from a traced one still fails the check."""
    from scipy import stats

    def model(x, scale):
        w = numpyro.sample("w", dist.Normal(0.0, scale))
        numpyro.sample("x", dist.Normal(w, 1.0), obs=x)

    def clipped_when_concrete(x, scale):  # clips only a concrete scale: traced, it is used as given
        scale = min(float(scale), 1.0) if not isinstance(scale, jax.core.Tracer) else scale
        model(x, scale)

    x = np.random.default_rng(6).normal(size=8)
    progs, lps = [], []
    for value in (0.5, 3.0):
        fn, consts, arrays = compiled.check_program(model, (x, np.asarray(value)), {})
        lp_const, lp_traced = (float(v) for v in fn(consts, arrays))
        assert np.isclose(lp_const, lp_traced, rtol=1e-10)
        assert compiled.traceable(model, (x, np.asarray(value)), {})
        progs.append(fn)
        lps.append(lp_const)
    assert progs[0] is progs[1]
    # each value entered its own evaluation: both log joints are the model's at one point w (the
    # check's, the same for both scales), whose square the prior terms' difference gives
    w2 = 2 * (lps[1] - lps[0] + np.log(3.0 / 0.5)) / (1 / 0.25 - 1 / 9.0)
    lp = lambda w, s: stats.norm.logpdf(w, 0, s) + stats.norm.logpdf(x, w, 1).sum()  # noqa: E731
    assert w2 > 0 and min(abs(lp(w, 0.5) - lps[0]) + abs(lp(w, 3.0) - lps[1])
                          for w in (np.sqrt(w2), -np.sqrt(w2))) < 1e-8
    assert compiled.traceable(clipped_when_concrete, (x, np.asarray(0.5)), {})
    assert not compiled.traceable(clipped_when_concrete, (x, np.asarray(3.0)), {})


def _logistic(X, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _concrete_only(X, y=None):
    if y is not None and not isinstance(y, jax.core.Tracer):
        y = (np.asarray(y) > 0).astype(np.int32)
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def test_the_traceability_verdict_is_kept_per_data_contents(monkeypatch):
    """Issue 21, finding 2: the verdict was kept per structure only, so a model that converts only
    concrete labels, checked on {0, 1} labels, kept its data as arguments for {-1, +1} labels of
    the same shape and dtype. It is kept per fingerprint, structure and data contents: the same
    data do not check again, new values do."""
    calls, compiled_checks = [], []
    real, real_check = compiled.same_program, compiled.check_program
    monkeypatch.setattr(compiled, "same_program", lambda *a: calls.append(a[0]) or real(*a))
    monkeypatch.setattr(compiled, "check_program", lambda *a: compiled_checks.append(a[0]) or real_check(*a))
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y01 = (X[:, 0] > 0).astype(np.int32)  # the dtype the model recodes to: the same values
    ypm = 2 * y01 - 1
    compiled.clear()
    assert compiled.traceable(_logistic, (X, y01), {}) and len(calls) == 1
    assert compiled.traceable(_concrete_only, (X, y01), {}) and len(calls) == 2
    assert compiled.traceable(_concrete_only, (X, y01), {}) and len(calls) == 2  # kept
    assert not compiled.traceable(_concrete_only, (X, ypm), {}) and len(calls) == 3  # new values: checked
    assert not compiled.traceable(_concrete_only, (X, ypm), {}) and len(calls) == 3  # the "no" is kept too
    # the programs' text settled the first two (the recoding of {0, 1} labels changes no value);
    # only the {-1, +1} labels, recoded to other values, needed the compiled check
    assert compiled_checks == [_concrete_only]
    compiled.clear()


def test_rounding_apart_accepts_rounding_only():
    """`compiled._rounding_apart`: equal up to `SAME_ULPS` units in the last place of the arrays'
    scale, with NaN and inf in the same places; anything more, or integers that differ, is not."""
    x = np.linspace(-2.0, 2.0, 9)
    for dtype in (np.float32, np.float64):
        a = x.astype(dtype)
        ulp = np.finfo(dtype).eps * 2.0
        assert compiled._rounding_apart(a, a + (ulp * np.sign(a)).astype(dtype))
        assert not compiled._rounding_apart(a, (a * (1 + 1e-6)).astype(dtype))  # ~8 ulps: not rounding
        assert not compiled._rounding_apart(a, (a + 10 * compiled.SAME_ULPS * ulp).astype(dtype))
        b = a.copy(); b[0] = np.nan
        assert compiled._rounding_apart(b, b.copy()) and not compiled._rounding_apart(a, b)
    assert not compiled._rounding_apart(np.arange(3), np.arange(3) + 1)


def _recoded_with_numpy(X, y=None):  # NumPy work on concrete data, jnp work on traced data
    scale = np.sqrt(np.mean(np.asarray(X) ** 2)) if not isinstance(X, jax.core.Tracer) else jnp.sqrt(jnp.mean(X ** 2))
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w / scale), obs=y)


def _scaled_with_numpy(X, y=None):  # concrete data moved by 1e-3 relative: more than rounding
    X = np.asarray(X) * (1.0 + 1e-3) if not isinstance(X, jax.core.Tracer) else X
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _shifted_with_numpy(X, y=None):  # concrete data shifted, traced data not: a different answer
    X = np.asarray(X) + 1.0 if not isinstance(X, jax.core.Tracer) else X
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])  # ids: tests/conftest.py
def test_the_programs_text_agrees_with_the_compiled_check(x64, monkeypatch):
    """`compiled.same_program` (the verdict from the log joint's programs, concrete and traced,
    with what does not depend on the latents compared by value) answers "same" only where the
    compiled check finds the same log joint, in float32 and float64, and refuses a model that
    shifts or rescales (by 1e-3) concrete data only; for the library's models `traceable` needs no
    compiled check, also where NumPy and XLA round their kernel differently."""
    import probmodels

    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 3))
    y01 = (X[:, 0] > 0).astype(np.int32)
    cases = [(_logistic, (X, y01), True), (_concrete_only, (X, y01), True),
             (_concrete_only, (X, 2 * y01 - 1), False), (_shifted_with_numpy, (X, y01), False),
             (_scaled_with_numpy, (X, y01), False), (_recoded_with_numpy, (X, y01), None)]
    X2 = np.random.default_rng(0).normal(size=(30, 2))  # its kernel: NumPy and XLA differ by 1/2 ulp
    y2 = X2[:, 0] > 0
    library = [(probmodels.probit_regression, (X, y01 > 0), {}), (probmodels.gp_classifier, (X, y01 > 0), {}),
               (probmodels.gp_classifier, (X2, y2), {}), (probmodels.gp_regression, (X2, X2[:, 0]), {}),
               (probmodels.bayes_machine, (X, y01 > 0), {}),  # `y == (f > 0)` on NumPy labels runs reflected
               (probmodels.gaussian_mixture, (X,), {"num_components": 2}),
               (probmodels.hmm, (X[:, 0],), {"num_states": 2})]
    with jax.enable_x64(x64):
        for model, args, expected in cases:
            compiled.clear()
            fn, consts, arrays = compiled.check_program(model, args, {})
            concrete, lazy = fn(consts, arrays)
            numeric = bool(np.allclose(concrete, lazy, rtol=1e-6 if x64 else 1e-4, atol=1e-8))
            same = compiled.same_program(model, args, {})
            assert not same or numeric, model.__name__  # "same" is never wrong
            if expected is not None:
                assert same == expected and numeric == expected, model.__name__
        checks = []
        real = compiled.check_program
        monkeypatch.setattr(compiled, "check_program", lambda *a: checks.append(a[0]) or real(*a))
        for model, args, kwargs in library:
            compiled.clear()
            assert compiled.traceable(model, args, kwargs), model.__name__
        assert checks == []
    compiled.clear()


@functools.lru_cache(maxsize=None)
def _recoded_label_fits(engine):
    """``(a, b)``: with nothing kept, a fit of `_concrete_only` on {0, 1} labels, then one on the
    same labels as {-1, +1} (same shape and dtype). The NUTS pair is shared by the two tests
    below: the second fit's data stay concrete, so its program is compiled per call and a fit of
    its own in the second test compiled it again (~5 s)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    ypm = np.where(X @ np.array([2.0, -2.0]) > 0, 1, -1)
    y01 = (ypm > 0).astype(ypm.dtype)
    opts = dict(num_samples=300, num_warmup=300, num_chains=1) if engine == "mcmc" else {}
    fit = getattr(inference, engine)
    compiled.clear()
    a = fit(_concrete_only, X, y01, seed=0, progress=False, **opts)
    b = fit(_concrete_only, X, ypm, seed=0, progress=False, **opts)
    return a, b


@pytest.mark.parametrize("engine", ["laplace", "mcmc"])
def test_a_refit_on_recoded_labels_gives_the_right_posterior(engine):
    """Issue 21, finding 2 end to end: {0, 1} labels first, then the same labels as {-1, +1}
    (same shape and dtype): the model converts concrete labels only, so the second fit must keep
    its data concrete and give the first fit's posterior (it gave w = [-0.26, -1.70] instead of
    [2.41, -2.15])."""
    a, b = _recoded_label_fits(engine)
    np.testing.assert_allclose(b.mean("w"), a.mean("w"), rtol=1e-6, atol=1e-8)
    assert a.mean("w")[0] > 1.0 and a.mean("w")[1] < -1.0


def test_a_model_that_converts_only_concrete_data_keeps_its_data_constant():
    """An input check that converts labels but steps aside under tracing would see raw {-1, +1}
    labels when traced: the log-joint comparison catches it and the data stay concrete. The fit is
    test_a_refit_on_recoded_labels_gives_the_right_posterior[mcmc]'s second one (`_recoded_label_fits`:
    this model and data, 300 + 300 draws, one chain, seed 0): with its data concrete it has no kept
    program, so a fit of its own compiled it once more."""
    model = _concrete_only
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    y = np.where(X @ np.array([2.0, -2.0]) > 0, 1, -1)
    assert not compiled.traceable(model, (X, y), {})
    assert compiled.traceable(model, (X, (y > 0).astype(np.int32)), {})
    post = _recoded_label_fits("mcmc")[1]
    w = post.mean("w")
    assert w[0] > 0.5 and w[1] < -0.5 and post.diagnostics["max_rhat"] < 1.05


SCALE = 1.0


def _shifted(y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu + SCALE, 1.0), obs=y)


def _closure_model(shift):
    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + shift(), 1.0), obs=y)

    return model


def _exact_mu(y, shift):
    """Posterior mean of mu for y_i ~ N(mu + shift, 1), mu ~ N(0, 1)."""
    return float(np.sum(y - shift) / (len(y) + 1))


@pytest.mark.parametrize("engine", ["laplace", "mcmc", "vi", "ep"])
def test_a_refit_after_a_global_changed_gives_the_new_answer(engine, monkeypatch):
    """Issue 21, finding 1: a model reading a module-level global, fitted with SCALE = 1 and then
    SCALE = 5, returned the first posterior again (programs were kept per function object). The
    key is what the model computes (its fingerprint): every engine gives the new answer."""
    y = np.random.default_rng(0).normal(size=20)
    opts = {"mcmc": dict(num_samples=400, num_warmup=300, num_chains=1), "vi": dict(steps=3000),
            "laplace": {}, "ep": {}}[engine]
    fit = getattr(inference, engine)
    means = []
    for scale in (1.0, 5.0):
        monkeypatch.setattr(sys.modules[__name__], "SCALE", scale)
        post = fit(_shifted, y=y, seed=0, progress=False, **opts)
        means.append(float(post.mean("mu")))
    # posterior sd 1/sqrt(21) = 0.22: Monte Carlo error of 1000 draws 0.007, of ~400 NUTS draws ~0.015
    tol = 0.05 if engine in ("laplace", "ep") else 0.1
    np.testing.assert_allclose(means, [_exact_mu(y, 1.0), _exact_mu(y, 5.0)], atol=tol)


def test_everything_a_trace_sees_enters_the_key():
    """Closure cells, default arguments, attributes of objects the model reads, and captured
    arrays changed in place each give a new fingerprint (so a refit gives the new answer); the
    data's values do not. The fits: Laplace on `test_a_refit_after_a_global_changed_gives_the_new_answer`'s
    data (same shapes: the fits at shift 1 are that test's programs at SCALE = 1)."""
    y = np.random.default_rng(0).normal(size=20)

    class Holder:
        value = 1.0

    holder = Holder()
    arr = np.ones(1)
    models = {
        "attribute": lambda: _closure_model(lambda: holder.value),
        "array": lambda: _closure_model(lambda: jnp.asarray(arr)[0]),
    }
    for name, make in models.items():
        model = make()
        before = compiled.fingerprint(model, (), {"y": y})
        assert compiled.fingerprint(model, (), {"y": y + 1.0}) == before, name  # data values: same program
        holder.value, arr[0] = 2.0, 3.0
        after = compiled.fingerprint(model, (), {"y": y})
        holder.value, arr[0] = 1.0, 1.0
        assert before is not None and after != before, name

    def with_default(y=None, shift=1.0):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + shift, 1.0), obs=y)

    before = compiled.fingerprint(with_default, (), {"y": y})
    with_default.__defaults__ = (None, 2.0)
    assert compiled.fingerprint(with_default, (), {"y": y}) != before
    compiled.clear()
    post_a = inference.laplace(_closure_model(lambda: holder.value), y=y, progress=False)
    holder.value = 4.0
    model = _closure_model(lambda: holder.value)
    post_b = inference.laplace(model, y=y, progress=False)
    holder.value = 1.0
    post_c = inference.laplace(model, y=y, progress=False)  # same function object, attribute back
    np.testing.assert_allclose([post_a.mean("mu"), post_b.mean("mu"), post_c.mean("mu")],
                               [_exact_mu(y, 1.0), _exact_mu(y, 4.0), _exact_mu(y, 1.0)], atol=0.05)


def test_a_sparse_matrix_argument_is_keyed_by_its_contents():
    """A SciPy sparse matrix (an LDA corpus) cannot be hashed: it enters the key as a digest of its
    contents, so refits on the same matrix reuse the kept functions and other contents do not."""
    import scipy.sparse

    A = scipy.sparse.random(20, 30, density=0.2, format="csr", random_state=0)
    key = compiled.split((A,), {"num_topics": 3}).key
    assert key is not None
    assert compiled.split((A.copy(),), {"num_topics": 3}).key == key
    B = A.copy()
    B.data[0] += 1.0
    assert compiled.split((B,), {"num_topics": 3}).key != key
    assert compiled.split((A.tocsc(),), {"num_topics": 3}).key != key  # another format: another program


START = 0.0


def _started(y=None):
    from inference.latent import Start

    start = Start(lambda key: jnp.asarray(START, jnp.result_type(float)), "tests START")
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0), infer={"init": start})
    numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])  # ids: tests/conftest.py
def test_a_refit_after_a_declared_start_changed_starts_from_the_new_start(x64, monkeypatch):
    """A declared start (`inference.latent.Start`) runs inside the kept NUTS program, but the key
    saw only its label: after the global it reads changed, a refit reused the program that started
    from the old value (same draws), and a new process with the persistent cache on reused an
    exported program after the mixture start's code changed. Its computation is in the key now:
    the refit gives, bitwise, the draws of a fit with nothing kept."""
    y = np.random.default_rng(0).normal(size=10)
    opts = dict(num_warmup=5, num_samples=5, num_chains=1, seed=0, progress=False)
    with jax.enable_x64(x64):
        compiled.clear()
        monkeypatch.setattr(sys.modules[__name__], "START", 0.0)
        first = inference.mcmc(_started, y=y, **opts).samples["mu"]
        monkeypatch.setattr(sys.modules[__name__], "START", 30.0)
        refit = inference.mcmc(_started, y=y, **opts).samples["mu"]
        compiled.clear()
        fresh = inference.mcmc(_started, y=y, **opts).samples["mu"]
    assert not np.array_equal(refit, first)
    np.testing.assert_array_equal(refit, fresh)


def test_the_mixture_start_code_enters_the_key(monkeypatch):
    """The library's mixture start (`probmodels.mixtures.start`, run by every engine's program but
    never by the model's own trace) is part of the fingerprint: another start gives another one."""
    import probmodels
    from probmodels import mixtures

    X = np.random.default_rng(0).normal(size=(30, 1))
    before = compiled.fingerprint(probmodels.gaussian_mixture, (X,), {"num_components": 2})
    original = mixtures.start
    monkeypatch.setattr(mixtures, "start", lambda *a: {k: v + 1.0 for k, v in original(*a).items()})
    after = compiled.fingerprint(probmodels.gaussian_mixture, (X,), {"num_components": 2})
    assert before is not None and after is not None and after != before


@pytest.mark.parametrize("accelerator", [True, False])
def test_engines_trace_with_full_precision_matrix_products(accelerator, monkeypatch):
    """Where a backend is not a CPU (emulated here), every engine call (and ``predict``) traces the
    model with ``jax.default_matmul_precision`` at "float32": JAX's default lets float32 products
    run in TensorFloat32 on recent NVIDIA GPUs (7 float32 cells of the defaults matrix failed on an
    H200 that pass on CPU). The setting is scoped to the call: the user's configuration is the same
    afterwards. On CPUs only, where it changes nothing, the engines leave it as the user's."""
    monkeypatch.setattr(compiled, "reduced_precision_products", lambda: accelerator)
    expected = compiled.MATMUL_PRECISION if accelerator else jax.config.jax_default_matmul_precision
    seen = []
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = X @ np.array([1.0, -1.0]) + 0.3 * np.random.default_rng(1).normal(size=20)

    def model(X, y=None):
        seen.append(jax.config.jax_default_matmul_precision)
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        # no matrix product in the model (X @ w as a sum of products): what is checked is the setting
        # at trace time, and without a product the model's part of an engine's program is the same
        # under either setting, so the two cases share the programs that have no product of their
        # own (NUTS's, ~1.2 s) through the compilation cache instead of compiling them twice
        numpyro.sample("y", dist.Normal((jnp.asarray(X) * w).sum(-1), 0.3), obs=y)

    before = jax.config.jax_default_matmul_precision
    fits = {"laplace": dict(num_samples=20), "vi": dict(steps=50, num_samples=20),
            "mcmc": dict(num_warmup=20, num_samples=20, num_chains=1)}
    for engine, options in fits.items():
        seen.clear()
        post = getattr(inference, engine)(model, X, y, seed=0, **options)
        assert seen and set(seen) == {expected}, (engine, seen)
    seen.clear()
    post.predict(X[:3])
    assert seen and set(seen) == {expected}
    assert jax.config.jax_default_matmul_precision == before


def test_on_cpus_a_program_is_shared_inside_and_outside_engine_calls():
    """The precision setting is part of every jit cache key: on CPUs only (where it changes no
    result) the engines' scope leaves it alone, so a function the user's code runs both outside
    and inside an engine call compiles once."""
    if compiled.reduced_precision_products():
        pytest.skip("a backend here is not a CPU: the engines set full precision")
    f = jax.jit(lambda a: a @ a + 1.0)
    x = jnp.ones((3, 3))
    f(x)
    with compiled.scope():
        f(x)
    assert f._cache_size() == 1


def _tf32(x):
    """``x`` rounded to TensorFloat32 (a 10-bit mantissa) when float32: what a recent NVIDIA GPU's
    tensor cores do to the operands of a float32 product at JAX's default precision."""
    if x.dtype != jnp.float32:
        return x
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    bits = (bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


@pytest.fixture
def tf32_products(monkeypatch):
    """``lax.dot_general`` as on such a GPU (CPU emulation): float32 operands rounded to TF32 unless
    the product asks for full precision (``precision=HIGHEST`` or ``jax.default_matmul_precision``
    "float32" / "highest"). Kept programs are dropped before and after: they were traced without it."""
    from jax._src.lax import lax as lax_internal

    real = lax_internal.dot_general

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kw):
        full = str(jax.config.jax_default_matmul_precision) in ("float32", "highest")
        full = full or (precision is not None and "HIGHEST" in str(precision).upper())
        if not full:
            lhs, rhs = _tf32(jnp.asarray(lhs)), _tf32(jnp.asarray(rhs))
        return real(lhs, rhs, dimension_numbers, precision=precision, preferred_element_type=preferred_element_type, **kw)

    compiled.clear()
    jax.clear_caches()
    monkeypatch.setattr(compiled, "reduced_precision_products", lambda: True)  # as on that GPU
    monkeypatch.setattr(lax_internal, "dot_general", dot_general)
    monkeypatch.setattr(jax.lax, "dot_general", dot_general)
    yield
    monkeypatch.undo()
    compiled.clear()
    jax.clear_caches()


def test_float32_fits_are_right_when_default_products_are_tf32(tf32_products):
    """The GPU finding of 2026-11-26, emulated on CPU: with TF32 default products, 7 float32 cells
    of the defaults matrix failed on an H200 (every spike-and-slab engine, logistic EP). With this
    emulation and the engines' precision scope switched off (``MATMUL_PRECISION = None``) the same
    7 cells raise here as well: spike-and-slab's structure check ("its mean is not affine in site
    'w'", in the exact reference too) and EP's recognition of logistic regression ("not an
    elementwise function of one affine projection"). With the scope they pass (measured errors:
    EP spike-and-slab inclusion 0.006, logistic EP mean 0.05 sd). Here: both fits in float32,
    against float64 references computed without the emulation's rounding (full precision): the
    exact spike-and-slab posterior, and a stored float64 EP fit of the logistic data
    (tests/fixtures/make_infra_tf32_reference.py: its mean and sd of w, 2000 draws, seed 0)."""
    import pathlib

    import probmodels
    from inference.spikeslab.exact import enumerate_models

    a = jnp.full((3, 3), 1.0001, jnp.float32)
    assert float((a @ a)[0, 0]) == 3.0  # the emulation rounds a default product ...
    with jax.default_matmul_precision("float32"):
        assert float((a @ a)[0, 0]) > 3.0005  # ... and not a full-precision one
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    w_true = np.array([1.5, 0.0, -1.0, 0.0])
    y = X @ w_true + 0.5 * rng.normal(size=60)
    ref = enumerate_models(X / 0.5, y / 0.5, p_incl=np.full(4, 0.5), slab_var=np.ones(4))  # float64
    with jax.enable_x64(False):
        post = inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=0.5, p_incl=0.5, slab_scale=1.0,
                            num_samples=200, seed=0)
    inclusion = np.asarray(post.samples["z"], dtype=float).reshape(-1, 4).mean(0)
    assert post.samples["w"].dtype == np.float32
    assert np.max(np.abs(inclusion - np.asarray(ref.inclusion))) < 0.1  # EP vs exact, 200 draws

    Xl = rng.normal(size=(100, 2))
    yl = (rng.random(100) < 1 / (1 + np.exp(-Xl @ np.array([1.0, -2.0])))).astype(int)
    reference = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "infra_tf32_logistic_reference.npz"
    with np.load(reference) as f:
        np.testing.assert_array_equal(f["Xl"], Xl)  # the reference's data are these
        np.testing.assert_array_equal(f["yl"], yl)
        ep64_mean, sd = f["w_mean"], f["w_sd"]  # float64 EP, 2000 draws, seed 0: not rounded
    with jax.enable_x64(False):
        ep32 = inference.ep(probmodels.logistic_regression, Xl, yl, num_samples=2000, seed=0)
    assert ep32.diagnostics["converged"]
    assert np.all(np.abs(ep32.mean("w") - ep64_mean) < 0.15 * sd)  # same EP, same draws' seed
