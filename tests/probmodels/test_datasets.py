"""Tests for probmodels/datasets.py: every vendored set against the shapes and class counts of the
reference README (and the published sizes of the original studies), the microarray preprocessing,
the Reuters corpus against an independent parse of its .ldac file, the split protocol, bad input."""

import doctest
from importlib import resources

import numpy as np
import pytest
import scipy.sparse

import probmodels.simulate
from probmodels import datasets

# name -> (rows, features, number of y = +1); positives are the published class sizes
# (e.g. 307 approved Australian applicants, 239 malignant breast tumours, 183 threes in the
# scikit-learn digits, 300 bad German credits, 120 heart-disease cases, 35 hyperthyroid, 268 diabetic).
CLASSIFICATION = {
    "australian": (690, 14, 307),
    "boston": (506, 12, 257),
    "breast": (683, 9, 239),
    "crabs": (200, 6, 100),
    "digits35": (365, 64, 183),
    "german": (1000, 20, 300),
    "heart": (270, 13, 120),
    "new_thyroid": (215, 5, 35),
    "pima": (768, 8, 268),
    "twonorm": (7400, 20, 3697),
}


@pytest.mark.parametrize("name", sorted(CLASSIFICATION))
def test_classification_shapes_and_labels(name):
    X, y = datasets.load(name)
    n, d, n_pos = CLASSIFICATION[name]
    assert isinstance(X, np.ndarray) and isinstance(y, np.ndarray)
    assert X.shape == (n, d) and X.dtype == np.float64
    assert y.shape == (n,) and y.dtype == np.int64
    assert set(np.unique(y).tolist()) == {-1, 1}
    assert int(np.sum(y == 1)) == n_pos
    assert np.all(np.isfinite(X))


def test_list_datasets_covers_every_file_and_kind():
    assert datasets.list_datasets("classification") == sorted(CLASSIFICATION)
    assert datasets.list_datasets("microarray") == ["colon", "leukemia", "srbct"]
    assert datasets.list_datasets("unsupervised") == ["faithful", "galaxies", "geyser"]
    assert datasets.list_datasets("text") == ["reuters"]
    every = datasets.list_datasets()
    assert every == sorted(every) and len(every) == 17
    data = resources.files("probmodels").joinpath("data")
    for kind in ("classification", "unsupervised"):
        on_disk = sorted(p.name.removesuffix(".csv") for p in data.joinpath(kind).iterdir())
        assert on_disk == datasets.list_datasets(kind)
    provenance = data.joinpath("PROVENANCE.md").read_text()
    for kind in ("classification", "microarray", "unsupervised", "text"):
        for path in data.joinpath(kind).iterdir():
            assert f"`{path.name}`" in provenance, f"{kind}/{path.name} has no provenance line"


def test_vendored_twonorm_follows_breimans_recipe():
    # Class +1 ~ N(-a 1, I), class -1 ~ N(+a 1, I), a = 2 / sqrt(20): means within 5 standard errors.
    X, y = datasets.load("twonorm")
    a = 2 / np.sqrt(20)
    for label, sign in ((1, -1.0), (-1, 1.0)):
        Xc = X[y == label]
        se = 1 / np.sqrt(len(Xc))
        assert np.max(np.abs(Xc.mean(axis=0) - sign * a)) < 5 * se
        assert np.max(np.abs(Xc.std(axis=0) - 1.0)) < 5 * np.sqrt(0.5 / len(Xc))


def test_load_returns_fresh_copies():
    X, y = datasets.load("crabs")
    X[:] = 0.0
    y[:] = 0
    X2, y2 = datasets.load("crabs")
    assert np.any(X2 != 0) and set(y2.tolist()) == {-1, 1}
    with pytest.raises(ValueError):
        datasets._read_csv("classification", "crabs")[1][0, 0] = 1.0  # the cache is read-only


# --------------------------------------------------------------------------- microarray


def test_microarray_shapes_and_classes():
    # Alon et al.: 40 tumour / 22 normal; Golub et al.: 25 AML / 47 ALL; EWS 23 vs RMS 20.
    expected = {"colon": ((62, 2000), 40), "leukemia": ((72, 3571), 25), "srbct": ((43, 2308), 23)}
    for name, (shape, n_pos) in expected.items():
        X, y = datasets.load_microarray(name)
        assert X.shape == shape and X.dtype == np.float64 and np.all(np.isfinite(X))
        assert y.dtype == np.int64 and set(y.tolist()) == {-1, 1} and int(np.sum(y == 1)) == n_pos
        X_load, y_load = datasets.load(name)
        np.testing.assert_array_equal(X_load, X)
        np.testing.assert_array_equal(y_load, y)


def test_leukemia_dudoit_preprocessing():
    raw, _ = datasets.load_microarray("leukemia", preprocess=False)
    assert raw.shape == (72, 7129) and raw.min() < 0  # the raw values include negatives
    X, _ = datasets.load_microarray("leukemia")
    assert X.shape == (72, 3571)  # the number Dudoit et al. (2002) report
    # Each array standardised across genes.
    np.testing.assert_allclose(X.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=1), 1.0, atol=1e-12)
    # Gene-by-gene check of the filter, written out loop-style, on a sample of genes.
    rng = np.random.default_rng(0)
    kept = []
    for j in range(raw.shape[1]):
        g = [min(max(v, 100.0), 16000.0) for v in raw[:, j]]
        if max(g) / min(g) > 5 and max(g) - min(g) > 500:
            kept.append(j)
    assert len(kept) == 3571
    logged = np.log10(np.clip(raw[:, kept], 100, 16000))
    for i in rng.choice(72, size=5, replace=False):
        row = logged[i]
        np.testing.assert_allclose(X[i], (row - row.mean()) / row.std(), rtol=1e-10, atol=1e-10)


def test_colon_is_log10_of_positive_intensities_and_srbct_unchanged():
    raw, y_raw = datasets.load_microarray("colon", preprocess=False)
    assert raw.min() > 0
    X, y = datasets.load_microarray("colon")
    np.testing.assert_allclose(10.0**X, raw, rtol=1e-12)
    np.testing.assert_array_equal(y, y_raw)
    a, _ = datasets.load_microarray("srbct", preprocess=True)
    b, _ = datasets.load_microarray("srbct", preprocess=False)
    np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- unsupervised and text


def test_unsupervised_sets_match_r_summaries():
    # Column means as printed by R: mean(faithful), colMeans(MASS::geyser), mean(MASS::galaxies).
    expected = {
        "faithful": ((272, 2), [3.487783, 70.897059]),
        "geyser": ((299, 2), [72.314381, 3.460814]),
        "galaxies": ((82, 1), [20828.170732]),
    }
    for name, (shape, means) in expected.items():
        X = datasets.load_unsupervised(name)
        assert X.shape == shape and X.dtype == np.float64
        np.testing.assert_allclose(X.mean(axis=0), means, rtol=1e-6)
        X_load, y_load = datasets.load(name)
        assert y_load is None
        np.testing.assert_array_equal(X_load, X)


def test_reuters_against_independent_parse():
    corpus = datasets.load_reuters()
    counts = corpus.counts
    assert scipy.sparse.issparse(counts) and counts.format == "csr"
    assert counts.shape == (395, 4258) and counts.dtype == np.int64
    assert len(corpus.tokens) == 4258 and len(set(corpus.tokens)) == 4258 and corpus.tokens[0] == "church"
    assert len(corpus.titles) == 395
    assert corpus.titles[0].startswith("UK: Prince Charles")  # the "0 " prefix is dropped
    text = resources.files("probmodels").joinpath("data", "text", "reuters.ldac").read_text()
    total = 0
    for d, line in enumerate(text.strip().split("\n")):
        head, *terms = line.split(" ")
        parsed = {int(t.split(":")[0]): int(t.split(":")[1]) for t in terms}
        assert len(parsed) == int(head) == counts[d].nnz
        row = counts[d].toarray().ravel()
        assert {int(j): int(row[j]) for j in np.flatnonzero(row)} == parsed
        total += sum(parsed.values())
    assert total == counts.sum() == 84010  # token count of the lda package's Reuters copy
    X, y = datasets.load("reuters")
    assert y is None and (X != counts).nnz == 0


# --------------------------------------------------------------------------- split protocol


def test_split_standardises_with_training_statistics():
    X, y = datasets.load("pima")
    s = datasets.split(X, y, train_size=100, seed=3)
    assert s.X_train.shape == (100, 8) and s.X_test.shape == (668, 8)
    np.testing.assert_allclose(s.X_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(s.X_train.std(axis=0), 1.0, atol=1e-12)
    raw = datasets.split(X, y, train_size=100, seed=3, standardise=False)
    mean, sd = raw.X_train.mean(axis=0), raw.X_train.std(axis=0)
    np.testing.assert_allclose(s.X_test, (raw.X_test - mean) / sd, rtol=1e-12)
    np.testing.assert_array_equal(s.y_train, raw.y_train)
    # The test part is not standardised by its own statistics.
    assert np.max(np.abs(s.X_test.mean(axis=0))) > 1e-3


def test_split_is_a_seeded_partition():
    n = 50
    X = np.arange(n, dtype=float)[:, None] * np.ones((1, 3))
    y = np.arange(n)
    s = datasets.split(X, y, train_size=20, seed=0, standardise=False)
    rows = np.concatenate([s.y_train, s.y_test])
    assert sorted(rows.tolist()) == list(range(n))
    np.testing.assert_array_equal(s.X_train[:, 0], s.y_train)  # rows stay with their labels
    again = datasets.split(X, y, train_size=20, seed=0, standardise=False)
    np.testing.assert_array_equal(again.y_train, s.y_train)
    other = datasets.split(X, y, train_size=20, seed=1, standardise=False)
    assert not np.array_equal(other.y_train, s.y_train)
    # Fractions (the microarray protocol's 2/3) and a capped test part (twonorm: 100 / 1000).
    assert datasets.split(X[:30], y[:30], train_size=2 / 3, seed=0).X_train.shape[0] == 20
    capped = datasets.split(X, y, train_size=10, seed=0, test_size=25)
    assert capped.X_test.shape == (25, 3) and not set(capped.y_test) & set(capped.y_train)


def test_split_constant_column_stays_finite():
    X, y = datasets.load("digits35")
    constant = np.flatnonzero(X.std(axis=0) == 0)
    assert len(constant) == 10
    s = datasets.split(X, y, train_size=70, seed=0)
    assert np.all(np.isfinite(s.X_train)) and np.all(np.isfinite(s.X_test))
    np.testing.assert_array_equal(s.X_train[:, constant], 0.0)
    varying = s.X_train.std(axis=0) > 0
    np.testing.assert_allclose(s.X_train[:, varying].std(axis=0), 1.0, atol=1e-12)


# --------------------------------------------------------------------------- bad input


def test_unknown_names_and_bad_arguments():
    with pytest.raises(ValueError, match="valid names: australian, boston"):
        datasets.load("australia")
    with pytest.raises(ValueError, match="threenorm is simulated"):
        datasets.load("threenorm")
    with pytest.raises(TypeError, match="name"):
        datasets.load(3)
    with pytest.raises(ValueError, match="colon, leukemia, srbct"):
        datasets.load_microarray("australian")
    with pytest.raises(TypeError, match="preprocess"):
        datasets.load_microarray("colon", preprocess="yes")
    with pytest.raises(ValueError, match="faithful"):
        datasets.load_unsupervised("pima")
    with pytest.raises(ValueError, match="kind"):
        datasets.list_datasets("images")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"train_size": 10}, "train_size"),  # all rows, no test part
        ({"train_size": 11}, "train_size"),
        ({"train_size": 0}, "train_size"),
        ({"train_size": 1.5}, "train_size"),
        ({"train_size": 5, "test_size": 6}, "test_size"),
        ({"train_size": 5, "seed": -1}, "seed"),
    ],
)
def test_split_bad_sizes(kwargs, match):
    X, y = np.ones((10, 2)), np.ones(10)
    with pytest.raises(ValueError, match=match):
        datasets.split(X, y, **kwargs)


def test_split_bad_arrays():
    with pytest.raises(ValueError, match="X must be a 2-D"):
        datasets.split(np.ones(10), np.ones(10), train_size=5)
    with pytest.raises(ValueError, match="NaN"):
        datasets.split(np.full((10, 2), np.nan), np.ones(10), train_size=5)
    with pytest.raises(ValueError, match="y must be"):
        datasets.split(np.ones((10, 2)), np.ones(9), train_size=5)
    with pytest.raises(TypeError, match="train_size"):
        datasets.split(np.ones((10, 2)), np.ones(10), train_size="5")


@pytest.mark.parametrize("module", [datasets, probmodels.simulate])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
