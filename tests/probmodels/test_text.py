"""probmodels.text: corpus checks, the fixed held-out split, document-completion perplexity."""

import numpy as np
import pytest
import scipy.sparse

from probmodels.datasets import load_reuters
from probmodels.text import document_terms, held_out_split, perplexity, to_csr, top_words


def test_document_terms_sorted_and_duplicates_summed():
    terms = document_terms((np.array([1, 0, 1, 0]), np.array([2, 1, 2, 0]), np.array([1, 2, 3, 4])))
    np.testing.assert_array_equal(terms.doc, [0, 0, 1])
    np.testing.assert_array_equal(terms.word, [0, 1, 2])
    np.testing.assert_array_equal(terms.count, [4, 2, 4])
    assert terms.shape == (2, 3)
    np.testing.assert_array_equal(to_csr(terms).toarray(), [[4, 2, 0], [0, 0, 4]])
    assert document_terms(terms) is terms


def test_held_out_split_is_a_fixed_partition_of_the_words():
    counts = load_reuters().counts
    a, b = held_out_split(counts, seed=0), held_out_split(counts, seed=0)
    assert len(a.test_index) == 79 and len(a.train_index) == 316
    assert sorted(np.r_[a.train_index, a.test_index].tolist()) == list(range(395))
    np.testing.assert_array_equal(a.train.toarray(), counts[a.train_index].toarray())
    np.testing.assert_array_equal((a.observed + a.held_out).toarray(), counts[a.test_index].toarray())
    n = np.asarray(counts[a.test_index].sum(1)).ravel()
    np.testing.assert_array_equal(np.asarray(a.observed.sum(1)).ravel(), n // 2)
    np.testing.assert_array_equal(a.held_out.toarray(), b.held_out.toarray())  # seeded
    assert not np.array_equal(held_out_split(counts, seed=1).test_index, a.test_index)


def test_perplexity_of_known_models():
    rng = np.random.default_rng(0)
    observed = scipy.sparse.csr_matrix(rng.poisson(2.0, size=(6, 8)) + 1)
    held_out = scipy.sparse.csr_matrix(rng.poisson(2.0, size=(6, 8)))
    # identical topics: every word has probability 1/V whatever theta is
    assert perplexity(np.ones((3, 8)), observed, held_out) == pytest.approx(8.0, rel=1e-12)
    # one topic: p(w) = topics[w]
    topic = rng.dirichlet(np.ones(8))
    h = held_out.toarray()
    expected = np.exp(-np.sum(h * np.log(topic)) / h.sum())
    assert perplexity(topic[None], observed, held_out) == pytest.approx(expected, rel=1e-12)
    # disjoint topics: a document whose observed words all come from topic 0 gets theta ~ (1, 0),
    # up to the prior's pull: theta_0 = (alpha + n) / (2 alpha + n) at the fixed point
    topics = np.array([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]]) + 1e-300
    obs = scipy.sparse.csr_matrix(np.array([[3, 1, 0, 0]]))
    out = scipy.sparse.csr_matrix(np.array([[1, 0, 0, 0]]))
    theta0 = (0.1 + 4) / (0.2 + 4)
    assert perplexity(topics, obs, out, alpha=0.1) == pytest.approx(1 / (0.5 * theta0), rel=1e-9)


def test_bad_inputs():
    with pytest.raises(ValueError, match="test_fraction"):
        held_out_split(np.ones((4, 3)), test_fraction=1.0)
    with pytest.raises(ValueError, match="held_out has no words"):
        perplexity(np.ones((2, 3)), np.ones((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="topics must be"):
        perplexity(-np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="to match tokens"):
        top_words(np.ones((2, 3)), ["a", "b"])
    assert top_words(np.array([[0.1, 0.7, 0.2]]), ["a", "b", "c"], 2) == [["b", "c"]]
