"""Property-based fuzzing of the public entry points (hypothesis).

Every generated input is invalid by construction; the property is that each ends in a
ValueError/TypeError naming the offending argument, raised by the eager input checks (so fast: no
JAX compilation happens, which also rules out hangs). A last property feeds small *valid* random
problems and requires finite results. Findings are kept as explicit regression cases at the end.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inference
import probmodels

MODELS = {
    "linear_regression": probmodels.linear_regression,
    "logistic_regression": probmodels.logistic_regression,
    "probit_regression": probmodels.probit_regression,
}
ENGINES = ("mcmc", "vi", "laplace", "ep")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

model_names = st.sampled_from(sorted(MODELS))
engines = st.sampled_from(ENGINES)
sizes = st.tuples(st.integers(1, 12), st.integers(1, 4))


def _labels(n, rng):
    return rng.integers(0, 2, size=n)


def _call(engine, model_name, X, y, **kw):
    model = MODELS[model_name]
    if engine == "ep" and model_name == "linear_regression":
        kw.setdefault("noise_scale", 1.0)  # EP needs the Gaussian-latent form
    getattr(inference, engine)(model, X, y, progress=False, **kw)


@FAST
@given(model_names, engines, sizes, st.sampled_from([np.nan, np.inf, -np.inf]), st.data())
def test_non_finite_features_name_X(model_name, engine, size, bad, data):
    n, d = size
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    X = rng.normal(size=(n, d))
    X[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, d - 1))] = bad
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        _call(engine, model_name, X, _labels(n, rng))


@FAST
@given(model_names, engines, st.sampled_from([(), (5,), (2, 3, 2), (0, 3), (4, 0)]))
def test_features_of_wrong_shape_name_X(model_name, engine, shape):
    X = np.ones(shape)
    with pytest.raises(ValueError, match="X (must be 2-D|is empty)"):
        _call(engine, model_name, X, np.zeros(shape[0] if shape else 1, int))


@FAST
@given(model_names, engines, sizes, st.integers(0, 20))
def test_target_of_wrong_length_names_y(model_name, engine, size, m):
    n, d = size
    if m == n:
        m = n + 1
    with pytest.raises(ValueError, match=r"y (has|must)"):
        _call(engine, model_name, np.ones((n, d)), np.zeros(m, int))


@FAST
@given(st.sampled_from(["logistic_regression", "probit_regression"]), engines,
       st.lists(st.integers(-5, 5), min_size=2, max_size=12))
def test_labels_outside_a_binary_coding_name_y(model_name, engine, labels):
    values = set(labels)
    if values <= {0, 1} or values <= {-1, 1}:
        labels = labels + [2]
    y = np.array(labels)
    with pytest.raises(ValueError, match="y must hold binary labels"):
        _call(engine, model_name, np.ones((len(y), 2)), y)


@FAST
@given(model_names, engines, st.one_of(st.floats(max_value=0.0), st.just(np.nan), st.just(np.inf)))
def test_bad_prior_scale_is_named(model_name, engine, value):
    with pytest.raises(ValueError, match="prior_scale"):
        _call(engine, model_name, np.ones((4, 2)), np.array([0, 1, 0, 1]), prior_scale=value)


@FAST
@given(engines, st.sampled_from(["num_samples"]), st.integers(max_value=0))
def test_non_positive_counts_are_named(engine, option, value):
    with pytest.raises(ValueError, match=option):
        _call(engine, "probit_regression", np.ones((4, 2)), np.array([0, 1, 0, 1]), **{option: value})


@FAST
@given(engines, st.floats(allow_nan=False).filter(lambda v: v != int(v) if np.isfinite(v) else True))
def test_fractional_counts_are_type_errors(engine, value):
    with pytest.raises((TypeError, ValueError), match="num_samples"):
        _call(engine, "probit_regression", np.ones((4, 2)), np.array([0, 1, 0, 1]), num_samples=value)


@FAST
@given(st.text(max_size=12).filter(lambda s: s not in ENGINES))
def test_unknown_engine_names_are_rejected(name):
    with pytest.raises(ValueError, match="engine"):
        inference.fit(probmodels.probit_regression, np.ones((4, 2)), np.array([0, 1, 0, 1]), engine=name)


@FAST
@given(st.text(max_size=12).filter(lambda s: s not in ("normal", "mvn", "lowrank", "flow")))
def test_unknown_guide_names_are_rejected(name):
    with pytest.raises(ValueError, match="guide"):
        inference.vi(probmodels.probit_regression, np.ones((4, 2)), np.array([0, 1, 0, 1]), guide=name)


@FAST
@given(st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0, exclude_min=True), st.just(np.nan)))
def test_ep_damping_outside_the_unit_interval_is_named(value):
    with pytest.raises(ValueError, match="damping"):
        inference.ep(probmodels.probit_regression, np.ones((4, 2)), np.array([0, 1, 0, 1]), damping=value)


def _check_valid_random_problem(seed, engine):
    rng = np.random.default_rng(seed)
    n, d = rng.integers(5, 30), rng.integers(1, 4)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-2, 2)
    y = rng.integers(0, 2, size=n)
    post = getattr(inference, engine)(probmodels.probit_regression, X, y, num_samples=50, progress=False)
    assert np.all(np.isfinite(post.samples["w"]))
    assert np.isfinite(post.log_evidence)


# Each random problem has its own shape, so each example compiles its engine afresh (~10 s): the
# default run takes one random problem per engine (both engines, always); -m slow takes 4 more.
@pytest.mark.parametrize("engine", ["laplace", "ep"])
@settings(max_examples=1, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_valid_random_problems_give_finite_results(seed, engine):
    _check_valid_random_problem(seed, engine)


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["laplace", "ep"]))
def test_valid_random_problems_give_finite_results_more_examples(seed, engine):
    _check_valid_random_problem(seed, engine)
