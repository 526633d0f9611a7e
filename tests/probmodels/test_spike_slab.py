"""probmodels.spike_slab: sites, the point-mass spike, defaults, standardisation, input checks."""

import jax
import numpy as np
import numpyro
import pytest
from numpyro import handlers

from inference._model import trace_model
from probmodels.spike_slab import (default_p_incl, spike_and_slab_probit, spike_and_slab_regression,
                                   standardize)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(12, 6))
Y = X[:, 0] - X[:, 1] + 0.1 * RNG.normal(size=12)
LABELS = (Y > 0).astype(int)


def _trace(model, *args, seed=0, **kwargs):
    return handlers.trace(handlers.seed(model, seed)).get_trace(*args, **kwargs)


def test_regression_sites_and_shapes():
    tr = _trace(spike_and_slab_regression, X, Y)
    assert {k for k, s in tr.items() if s["type"] == "sample"} == {"z", "w", "precision", "y"}
    assert tr["z"]["value"].shape == (6,) and tr["w"]["value"].shape == (6,) and tr["y"]["value"].shape == (12,)
    assert "precision" not in _trace(spike_and_slab_regression, X, Y, noise_scale=0.5)
    # pointwise likelihood: one term per observation
    assert tr["y"]["fn"].log_prob(tr["y"]["value"]).shape == (12,)


def test_weights_exactly_zero_where_excluded_and_inclusion_rate():
    """Prior draws: w_j == 0 exactly where z_j == 0; the inclusion rate matches p_incl within 4 MC SE."""
    pred = numpyro.infer.Predictive(spike_and_slab_regression, num_samples=2000)
    draws = pred(jax.random.PRNGKey(1), X, p_incl=0.3, noise_scale=1.0)
    z, w = np.asarray(draws["z"]), np.asarray(draws["w"])
    assert np.all(w[z == 0] == 0.0) and np.all(w[z == 1] != 0.0)
    se = np.sqrt(0.3 * 0.7 / z.size)
    assert abs(z.mean() - 0.3) < 4 * se


def test_probit_labels_accepted_in_every_coding():
    ys = [LABELS, 2 * LABELS - 1, LABELS.astype(bool)]
    obs = [np.asarray(_trace(spike_and_slab_probit, X, y)["y"]["value"]) for y in ys]
    for o in obs:
        np.testing.assert_array_equal(o, LABELS)


@pytest.mark.parametrize("coding", ["01", "pm1", "bool"])
def test_probit_traced_labels_give_the_concrete_log_joint(coding):
    """Engines pass the data traced: labels in any coding are mapped to {0, 1} there too, so the
    traceability check passes and the compiled programs are kept per structure (with {-1, +1}
    labels they were not: every fit on new data recompiled, ~0.2 s per leukemia EP call)."""
    from inference import compiled

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 8))
    y01 = (X[:, 0] > 0).astype(np.int64)
    y = {"01": y01, "pm1": 2 * y01 - 1, "bool": y01.astype(bool)}[coding]
    compiled.clear()
    assert compiled.traceable(spike_and_slab_probit, (X, y), {})
    compiled.clear()


def test_default_inclusion_probability():
    assert default_p_incl(1000) == pytest.approx(0.032)
    assert default_p_incl(10) == 0.5  # capped: 32/10 > 1
    Xw = RNG.normal(size=(5, 400))
    tr = trace_model(spike_and_slab_probit, (Xw, np.ones(5)), {})
    np.testing.assert_allclose(np.asarray(tr["z"]["fn"].base_dist.probs), 32 / 400)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, float("nan"), [0.1] * 5])
def test_bad_p_incl(p):
    for model, y in [(spike_and_slab_regression, Y), (spike_and_slab_probit, LABELS)]:
        with pytest.raises(ValueError, match="p_incl"):
            trace_model(model, (X, y), {"p_incl": p})


@pytest.mark.parametrize("kw,name", [({"slab_scale": 0.0}, "slab_scale"), ({"slab_scale": -1.0}, "slab_scale"),
                                     ({"noise_scale": 0.0}, "noise_scale"), ({"noise_prior": (0.0, 1.0)}, "noise_prior"),
                                     ({"noise_prior": (1.0,)}, "noise_prior")])
def test_bad_hyperparameters(kw, name):
    with pytest.raises(ValueError, match=name):
        trace_model(spike_and_slab_regression, (X, Y), kw)


def test_nan_genes_and_responses():
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="X"):
        trace_model(spike_and_slab_probit, (Xn, LABELS), {})
    with pytest.raises(ValueError, match="X"):
        trace_model(spike_and_slab_regression, (np.where(Xn != Xn, np.inf, Xn), Y), {})
    Yn = Y.copy()
    Yn[0] = np.nan
    with pytest.raises(ValueError, match="y"):
        trace_model(spike_and_slab_regression, (X, Yn), {})


@pytest.mark.parametrize("labels", [np.arange(12) % 3, np.full(12, 0.5), np.array(["a", "b"] * 6)])
def test_wrong_labels(labels):
    with pytest.raises(ValueError, match="y"):
        trace_model(spike_and_slab_probit, (X, labels), {})


def test_shape_mismatch_and_empty():
    with pytest.raises(ValueError, match="y"):
        trace_model(spike_and_slab_regression, (X, Y[:-1]), {})
    with pytest.raises(ValueError, match="X"):
        trace_model(spike_and_slab_regression, (X[0], Y), {})
    with pytest.raises(ValueError, match="X"):
        trace_model(spike_and_slab_probit, (np.zeros((0, 3)), np.zeros(0)), {})


def test_standardize_constant_columns_become_zero():
    A = RNG.normal(size=(8, 3))
    A[:, 1] = 7.0
    B = RNG.normal(size=(4, 3))
    Za, Zb = standardize(A, B)
    assert np.all(np.isfinite(Za)) and np.all(np.isfinite(Zb))
    assert np.all(Za[:, 1] == 0) and np.all(Zb[:, 1] == 0)
    np.testing.assert_allclose(Za[:, [0, 2]].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(Za[:, [0, 2]].std(0), 1, atol=1e-12)
    with pytest.raises(ValueError, match="X_test"):
        standardize(A, B[:, :2])


def test_demo_cases_run_and_score():
    """``demo_cases()``: a simulated regression and a leukemia probit case, each with mcmc / vi /
    ep. EP (the fast engine) is run on both: inclusion probabilities within 0.05 of exact
    enumeration, and at most 3 of 24 test patients misclassified (published EP error 4.2%)."""
    import inference
    from probmodels.demo import Case
    from probmodels.spike_slab import DEMO_GENES, demo_cases

    cases = demo_cases()
    assert [c.name for c in cases] == ["spike_and_slab_regression", "spike_and_slab_probit_leukemia"]
    for case in cases:
        assert isinstance(case, Case) and set(case.engines) == {"mcmc", "vi", "ep"}
    assert cases[1].args[0].shape[1] == DEMO_GENES
    scores = [case.score(inference.ep(case.model, *case.args, **case.kwargs, progress=False)) for case in cases]
    assert scores[0][0] == "max |P(z=1) - exact|" and scores[0][1] < 0.05
    assert scores[1][0] == "test accuracy" and scores[1][1] >= 21 / 24
