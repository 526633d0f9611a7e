"""Document-term data for topic models: input checks, a fixed held-out split, document-completion
perplexity, top words.

A corpus is given as a documents x words count matrix: dense, any ``scipy.sparse`` matrix, or a
tuple of three 1-D arrays ``(doc, word, count)`` (sizes inferred as ``max + 1``; build a
``scipy.sparse.coo_matrix((count, (doc, word)), shape=...)`` to fix them). Counts must be finite
non-negative integers; a document with no words is an error (its row would carry no
information and silently re-indexing documents would be worse): drop such rows first.

Held-out evaluation by document completion (Wallach et al. 2009, the protocol of Hoffman et al.
2010): train on the training documents; for each test document, estimate its topic proportions
from a random half of its words (``observed``) with the topics held fixed, and score the other
half (``held_out``). Every method is scored from its topic point estimate (K, V) by the same
fold-in (:func:`perplexity`), so numbers from different libraries are comparable.

Example:
    >>> import numpy as np
    >>> from probmodels.text import document_terms, held_out_split, perplexity
    >>> counts = np.random.default_rng(0).poisson(2.0, size=(30, 12)) + 1
    >>> document_terms(counts).shape
    (30, 12)
    >>> split = held_out_split(counts, test_fraction=0.2, seed=0)
    >>> split.train.shape[0], split.observed.shape[0]
    (24, 6)
    >>> round(perplexity(np.full((2, 12), 1 / 12), split.observed, split.held_out), 6)
    12.0
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.sparse


class DocumentTerms(NamedTuple):
    """A validated corpus: nonzero entries sorted by document then word, and its shape."""

    doc: np.ndarray  # (N,) int32
    word: np.ndarray  # (N,) int32
    count: np.ndarray  # (N,) int64, all >= 1
    shape: tuple  # (num_docs, vocab_size)


class HeldOut(NamedTuple):
    """A fixed split for document completion: ``train`` (training documents), and for the test
    documents the ``observed`` half and the ``held_out`` half of their words (CSR matrices with the
    full vocabulary); ``train_index`` / ``test_index`` are rows of the original corpus."""

    train: scipy.sparse.csr_matrix
    observed: scipy.sparse.csr_matrix
    held_out: scipy.sparse.csr_matrix
    train_index: np.ndarray
    test_index: np.ndarray


def document_terms(counts, name: str = "counts") -> DocumentTerms:
    """Validate a corpus (dense, scipy.sparse or ``(doc, word, count)``) and return its nonzero
    entries. Raises ValueError/TypeError naming ``name`` for negative, non-integer, NaN or inf
    counts, a wrong shape, or documents without words."""
    if isinstance(counts, DocumentTerms):
        return counts
    if counts is None:
        raise TypeError(f"{name} must be a document-term count matrix, got None")
    if isinstance(counts, tuple):
        doc, word, count, shape = _triplets(counts, name)
    elif scipy.sparse.issparse(counts):
        coo = scipy.sparse.coo_matrix(counts)
        if coo.ndim != 2:
            raise ValueError(f"{name} must be 2-D (documents, words), got shape {coo.shape}")
        doc, word, count, shape = coo.row, coo.col, _values(coo.data, name), coo.shape
    else:
        try:
            dense = np.asarray(counts)
        except Exception as exc:
            raise TypeError(f"{name} must be a numeric document-term matrix, got {type(counts).__name__}") from exc
        if dense.dtype == object or not (np.issubdtype(dense.dtype, np.number) or dense.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {dense.dtype}")
        if dense.ndim != 2:
            raise ValueError(f"{name} must be 2-D (documents, words), got shape {dense.shape}")
        values = _values(dense.ravel(), name).reshape(dense.shape)
        doc, word = np.nonzero(values)
        count, shape = values[doc, word], dense.shape
    num_docs, vocab_size = int(shape[0]), int(shape[1])
    if num_docs == 0 or vocab_size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(shape)})")
    keep = count > 0
    doc, word, count = doc[keep], word[keep], count[keep]
    order = np.lexsort((word, doc))
    doc, word, count = doc[order], word[order], count[order]
    if len(doc) > 1:  # duplicate (doc, word) entries from triplets or COO input are summed
        first = np.r_[True, (np.diff(doc) != 0) | (np.diff(word) != 0)]
        starts = np.flatnonzero(first)
        doc, word, count = doc[starts], word[starts], np.add.reduceat(count, starts)
    lengths = np.bincount(doc, weights=count, minlength=num_docs)
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        raise ValueError(
            f"{name}: {len(empty)} document(s) have no words (rows {empty[:8].tolist()}"
            f"{' ...' if len(empty) > 8 else ''}); remove them first, e.g. counts[counts.sum(axis=1) > 0]")
    return DocumentTerms(doc.astype(np.int32), word.astype(np.int32), count.astype(np.int64),
                         (num_docs, vocab_size))


def _values(values, name):
    arr = np.asarray(values)
    if arr.dtype == bool:
        arr = arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise TypeError(f"{name} must hold real counts, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative counts, found {arr[arr < 0][0]!r}")
    if np.issubdtype(arr.dtype, np.floating) and np.any(arr != np.round(arr)):
        raise ValueError(f"{name} must be whole-number counts, found {arr[arr != np.round(arr)][0]!r}")
    return arr.astype(np.int64)


def _triplets(counts, name):
    if len(counts) != 3:
        raise ValueError(f"{name} as a tuple must be (doc, word, count), got {len(counts)} items")
    arrays = [np.asarray(a) for a in counts]
    if any(a.ndim != 1 for a in arrays) or len({a.shape[0] for a in arrays}) != 1:
        raise ValueError(f"{name} = (doc, word, count) must be three 1-D arrays of one length, got shapes "
                         f"{[a.shape for a in arrays]}")
    if arrays[0].shape[0] == 0:
        raise ValueError(f"{name} has no entries")
    index = []
    for label, a in zip(("doc", "word"), arrays[:2]):
        ok = np.issubdtype(a.dtype, np.integer) or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))
        if not ok or np.any(a < 0):
            raise ValueError(f"{name}: {label} ids must be non-negative integers")
        index.append(a.astype(np.int64))
    count = _values(arrays[2], name)
    return index[0], index[1], count, (int(index[0].max()) + 1, int(index[1].max()) + 1)


def to_csr(terms: DocumentTerms) -> scipy.sparse.csr_matrix:
    return scipy.sparse.csr_matrix((terms.count, (terms.doc, terms.word)), shape=terms.shape)


def held_out_split(counts, *, test_fraction: float = 0.2, seed: int = 0) -> HeldOut:
    """A seeded split of the documents (``test_fraction`` of them for testing) and, within each
    test document, of its word tokens into two halves (``observed``: floor(n/2) tokens,
    ``held_out``: the rest). Documents with fewer than 2 tokens always go to training."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    terms = document_terms(counts)
    csr = to_csr(terms)
    num_docs, vocab_size = terms.shape
    rng = np.random.default_rng(seed)
    order = rng.permutation(num_docs)
    lengths = np.asarray(csr.sum(axis=1)).ravel()
    eligible = order[lengths[order] >= 2]
    num_test = int(round(test_fraction * num_docs))
    if not 1 <= num_test < num_docs or num_test > len(eligible):
        raise ValueError(f"test_fraction={test_fraction} leaves no usable test or training documents")
    test = np.sort(eligible[:num_test])
    train = np.setdiff1d(np.arange(num_docs), test)
    rows_obs, rows_out = [], []
    for d in test:
        start, stop = csr.indptr[d], csr.indptr[d + 1]
        tokens = rng.permutation(np.repeat(csr.indices[start:stop], csr.data[start:stop]))
        half = len(tokens) // 2
        rows_obs.append(np.bincount(tokens[:half], minlength=vocab_size))
        rows_out.append(np.bincount(tokens[half:], minlength=vocab_size))
    as_csr = lambda rows: scipy.sparse.csr_matrix(np.vstack(rows).astype(np.int64))  # noqa: E731
    return HeldOut(csr[train], as_csr(rows_obs), as_csr(rows_out), train, test)


def perplexity(topics, observed, held_out, *, alpha: float = 0.1, tol: float = 1e-8, max_iter: int = 2000) -> float:
    """Held-out perplexity ``exp(-sum log p(held-out words) / their number)`` by document
    completion: each document's topic proportions are folded in from its ``observed`` words with
    the ``topics`` (K, V) fixed (mean-field fixed point of ``q(theta) = Dirichlet(gamma)`` under
    a Dirichlet(``alpha``) prior, ``theta = gamma / sum(gamma)``), then
    ``p(w) = sum_k theta_k topics_kw``. ``topics`` rows are normalised here."""
    import jax

    from inference.lda_vb import Triplets, e_step

    topics = np.asarray(topics, dtype=float)
    if topics.ndim != 2 or not np.all(np.isfinite(topics)) or np.any(topics < 0) or np.any(topics.sum(1) <= 0):
        raise ValueError(f"topics must be a (K, V) matrix of non-negative finite weights, got shape {topics.shape}")
    obs, out = scipy.sparse.csr_matrix(observed), scipy.sparse.csr_matrix(held_out)
    if obs.shape != out.shape or obs.shape[1] != topics.shape[1]:
        raise ValueError(f"observed {obs.shape} and held_out {out.shape} must both be (documents, {topics.shape[1]})")
    if out.sum() <= 0:
        raise ValueError("held_out has no words to score")
    topics = topics / topics.sum(1, keepdims=True)
    num_docs, num_topics = obs.shape[0], topics.shape[0]
    coo = obs.tocoo()
    order = np.lexsort((coo.col, coo.row))
    data = Triplets(jnp.asarray(coo.row[order], jnp.int32), jnp.asarray(coo.col[order], jnp.int32),
                    jnp.asarray(coo.data[order], float))
    lengths = np.asarray(obs.sum(axis=1), float).ravel()
    gamma0 = jnp.asarray(alpha + lengths[:, None] / num_topics + np.zeros((1, num_topics)))
    fold_in = jax.jit(e_step)  # jit's cache is keyed on e_step and the shapes: compiled once per corpus
    gamma, _ = fold_in(data, gamma0, jnp.asarray(topics), jnp.asarray(alpha, float), tol, max_iter)
    theta = np.asarray(gamma) / np.asarray(gamma).sum(1, keepdims=True)
    held = out.tocoo()
    probs = np.einsum("nk,kn->n", theta[held.row], topics[:, held.col])
    return float(np.exp(-np.sum(held.data * np.log(probs)) / held.data.sum()))


def top_words(topics, tokens, num_words: int = 10) -> list[list[str]]:
    """The ``num_words`` most probable words of each topic (rows of ``topics``), most probable first."""
    topics = np.asarray(topics)
    if topics.ndim != 2 or topics.shape[1] != len(tokens):
        raise ValueError(f"topics must be (K, {len(tokens)}) to match tokens, got shape {topics.shape}")
    best = np.argsort(-topics, axis=1)[:, :num_words]
    return [[tokens[i] for i in row] for row in best]
