"""Latent Dirichlet allocation (Blei, Ng & Jordan 2003) with the per-word topics summed out.

``topics[k] ~ Dirichlet(eta 1_V)``, ``theta[d] ~ Dirichlet(alpha 1_K)``, and each word of
document d drawn from ``sum_k theta[d, k] topics[k]``. Summing out the word's topic, document d's
log likelihood is ``sum_w c_dw log(sum_k theta_dk topics_kw)`` over its nonzero counts (the
probability of its words in the order given; the multinomial coefficient, a constant, is left
out), evaluated over the corpus's nonzero entries only: memory O(nonzeros x K), never
documents x words x topics.

Sites: ``topics`` (K, V), ``theta`` (D, K), and the observed ``counts``: each document's
``(word id, count)`` pairs, an int array (D, slots, 2) padded with count 0 (slots = the most
distinct words in one document). Its log density is one number per document, the pointwise log
likelihood that LOO uses. The counts are data, so the site is always conditioned on them
(``post.predict`` gives them back); ``DocumentWords.sample`` simulates documents.

``counts`` may be dense, ``scipy.sparse`` or ``(doc, word, count)`` triplets (see
`probmodels.text`); negative / non-integer / NaN counts, documents without words (an error, not a
silent drop, so rows of ``theta`` stay the rows of ``counts``), ``num_topics < 1`` and
``alpha, eta <= 0`` are errors naming the argument, raised before any tracing.
``batch_size`` subsamples documents (``numpyro.plate(..., subsample_size=batch_size)``: the
likelihood and the ``theta`` prior scaled by D / batch_size) for stochastic VI:
``method="stochastic"`` below, or ``numpyro.infer.SVI`` with a guide that supports subsampling
(e.g. ``AutoNormal``); the VB methods draw their own mini-batches and refuse a subsampled model.

Inference: ``inference.mcmc`` (NUTS, small corpora), ``inference.vi(lda, counts)`` (online
variational Bayes by default, `inference.lda_vb`: seconds on Reuters; ``method="batch"`` for
coordinate ascent; options through `inference.lda_vb.fit`), ``inference.vi(lda, counts,
batch_size=B, method="stochastic")`` (mini-batch SVI with a Dirichlet mean-field guide and Optax
Adam, `inference.lda_vb.stochastic_vi`). Online VB is the default because it was the best
measured: on simulated corpora (K = 5, V = 200, D = 300; 2 corpora x 3 seeds, float32 and
float64) mean total variation to the true topics 0.02-0.03 in 1-3 s, against batch 0.03-0.05,
stochastic 0.01-0.02 in 20-30 s but a merged topic (0.31) in 1 run of 6 (now reported
``converged=False``: its exact ELBO is checked against online VB's), and an autoguide 0.76
reported converged. Autoguide SVI (``method="svi"``) is refused for that reason; NumPyro's
``SVI`` with ``batch_size`` and an ``AutoNormal`` guide remains possible by hand.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.datasets import lda_corpus
    >>> corpus = lda_corpus(40, vocab_size=30, num_topics=3, seed=0)
    >>> post = inference.vi(lda, corpus.counts, num_topics=3, method="batch", num_samples=10, progress=False)
    >>> post.samples["topics"].shape, post.samples["theta"].shape, post.log_likelihood["counts"].shape
    ((1, 10, 3, 30), (1, 10, 40, 3), (1, 10, 40))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints

from inference.lda_vb import batch_vb, online_vb, stochastic_vi
from probmodels import _checks
from probmodels.text import DocumentTerms, document_terms, held_out_split, perplexity, top_words

__all__ = ["DocumentWords", "lda", "document_pairs", "top_words", "plot_top_words", "demo_cases"]


class DocumentWords(dist.Distribution):
    """Documents as bags of words under LDA with each word's topic summed out.

    ``theta`` (D, K) topic proportions, ``topics`` (K, V). A value is (D, slots, 2) int
    ``(word id, count)`` pairs; ``log_prob`` is ``sum_slots count * log(theta_d . topics[:, word])``
    per document. With ``index = (doc, pos)`` (the nonzero slots of the full corpus, flat
    positions) it touches only those entries, O(nonzeros x K); without (a subsampled batch) it
    works on the padded slots. ``sample`` draws ``lengths[d]`` tokens per document as pairs of
    count 1, shape (D, max(lengths), 2).
    """

    arg_constraints = {"theta": constraints.simplex, "topics": constraints.simplex}
    pytree_data_fields = ("theta", "topics", "lengths", "index")
    pytree_aux_fields = ("num_slots", "max_length")

    def __init__(self, theta, topics, lengths, *, num_slots: int, max_length: int, index=None, validate_args=None):
        self.theta, self.topics, self.lengths, self.index = theta, topics, lengths, index
        self.num_slots, self.max_length = int(num_slots), int(max_length)
        super().__init__(batch_shape=jnp.shape(theta)[:-1], event_shape=(self.num_slots, 2),
                         validate_args=validate_args)

    @property
    def support(self):
        return constraints.independent(constraints.nonnegative_integer, 2)

    def log_prob(self, value):
        tiny = jnp.finfo(jnp.result_type(float)).tiny
        log_theta = jnp.log(jnp.clip(self.theta, tiny))
        log_topics_t = jnp.log(jnp.clip(self.topics, tiny)).T  # (V, K)
        value = jnp.asarray(value)
        if self.index is not None:
            doc, pos = self.index
            pairs = value.reshape(-1, 2)[pos]
            words, counts = pairs[:, 0], pairs[:, 1]
            per_entry = logsumexp(log_theta[doc] + log_topics_t[words], -1)
            terms = jnp.where(counts > 0, counts * per_entry, 0.0)
            return jax.ops.segment_sum(terms, doc, self.batch_shape[0], indices_are_sorted=True)
        words, counts = value[..., 0], value[..., 1]
        per_slot = logsumexp(log_theta[..., None, :] + log_topics_t[words], -1)
        return jnp.sum(jnp.where(counts > 0, counts * per_slot, 0.0), -1)

    def sample(self, key, sample_shape=()):
        num = int(np.prod(sample_shape))
        probs = self.theta @ self.topics  # (D, V): one document at a time never needs (D, T, V)
        cdf = jnp.cumsum(probs, -1)
        u = jax.random.uniform(key, (probs.shape[0], num, self.max_length)) * cdf[:, -1:, None]
        words = jax.vmap(lambda c, x: jnp.searchsorted(c, x.ravel()).reshape(x.shape))(cdf, u)
        words = jnp.clip(jnp.moveaxis(words, 1, 0), 0, probs.shape[-1] - 1)  # (num, D, T)
        keep = jnp.arange(self.max_length) < jnp.asarray(self.lengths)[:, None]
        pairs = jnp.stack([jnp.where(keep, words, 0), jnp.broadcast_to(keep, words.shape).astype(words.dtype)], -1)
        return pairs.reshape(tuple(sample_shape) + pairs.shape[1:])


def document_pairs(terms: DocumentTerms):
    """(D, slots, 2) (word, count) pairs, the documents' lengths (D,), and the flat index
    ``(doc, pos)`` of the nonzero slots."""
    num_docs = terms.shape[0]
    nnz = np.bincount(terms.doc, minlength=num_docs)
    starts = np.cumsum(nnz) - nnz
    slot = np.arange(len(terms.doc)) - starts[terms.doc]
    pairs = np.zeros((num_docs, int(nnz.max()), 2), np.int32)
    pairs[terms.doc, slot, 0], pairs[terms.doc, slot, 1] = terms.word, terms.count
    lengths = np.bincount(terms.doc, weights=terms.count, minlength=num_docs).astype(np.int64)
    pos = (terms.doc.astype(np.int64) * pairs.shape[1] + slot).astype(np.int32)
    return pairs, lengths, (terms.doc, pos)


def lda(counts, num_topics: int = 10, *, alpha: float = 0.1, eta: float = 0.01, batch_size: int | None = None):
    """LDA on a documents x words count matrix (dense, scipy.sparse or (doc, word, count)).

    Sites ``topics`` (num_topics, V), ``theta`` (D, num_topics), observed ``counts`` (per-document
    log likelihood). ``alpha``: symmetric Dirichlet concentration of each document's topic
    proportions; ``eta``: of each topic's word distribution. ``batch_size``: documents per
    subsampled step (None: all).

    Example:
        >>> import inference, probmodels
        >>> from probmodels.datasets import lda_corpus
        >>> counts = lda_corpus(40, vocab_size=30, num_topics=3, seed=0).counts   # (documents, words)
        >>> post = inference.vi(probmodels.lda, counts, num_topics=3, method="batch", steps=20, num_samples=10)
        >>> post.samples["topics"].shape, post.samples["theta"].shape
        ((1, 10, 3, 30), (1, 10, 40, 3))
    """
    terms = document_terms(counts)
    num_topics = _checks.positive_int(num_topics, "num_topics")
    alpha = _checks.positive(alpha, "alpha")
    eta = _checks.positive(eta, "eta")
    num_docs, vocab_size = terms.shape
    if batch_size is not None:
        batch_size = _checks.positive_int(batch_size, "batch_size")
        if batch_size > num_docs:
            raise ValueError(f"batch_size must be at most the number of documents ({num_docs}), got {batch_size}")
    full = batch_size is None or batch_size == num_docs
    pairs, lengths, index = document_pairs(terms)
    with numpyro.plate("topic", num_topics):
        topics = numpyro.sample("topics", dist.Dirichlet(jnp.full(vocab_size, eta)))
    with numpyro.plate("document", num_docs, subsample_size=None if full else batch_size):
        theta = numpyro.sample("theta", dist.Dirichlet(jnp.full(num_topics, alpha)))
        obs = numpyro.subsample(pairs, event_dim=2)
        doc_lengths = numpyro.subsample(lengths, event_dim=0)
        likelihood = DocumentWords(theta, topics, doc_lengths, num_slots=pairs.shape[1],
                                   max_length=int(lengths.max()), index=index if full else None)
        numpyro.sample("counts", likelihood, obs=obs)


def _autoguide_refused(model, args, kwargs, trace, *, guide=None, optimizer=None, learning_rate=None,
                       num_particles=None, check_every=None, **options):
    """``inference.vi(lda, ..., method="svi")``: refused. The autoguide's ELBO plateaus at poor local
    optima that its stopping rule cannot tell from the right one (on 300 simulated documents with 5
    well-separated topics: mean total variation 0.76 to the true topics, reported converged, where
    online VB gets 0.02), and it turned non-finite in float32."""
    raise ValueError("method='svi' (an autoguide) is refused for lda: it stops at poor local optima of the ELBO "
                     "that look converged (mean total variation 0.76 to simulated topics, against 0.02 for online "
                     "VB); use the default method='online', or 'batch' or 'stochastic', or numpyro.infer.SVI "
                     "yourself")


# "default": what ``inference.vi`` runs without ``method=`` (online VB: the most accurate per second on
# simulated corpora, float32 and float64; numbers in test_lda_vb.py and the module docstring)
lda.vi_methods = {"default": online_vb, "online": online_vb, "batch": batch_vb, "stochastic": stochastic_vi,
                  "svi": _autoguide_refused}


# ----------------------------------------------------------------------------- pictures and demo
def plot_top_words(topics, tokens, path: str, *, num_words: int = 8, title: str | None = None) -> str:
    """Bar charts of each topic's most probable words (topics: (K, V) probabilities); saves ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    topics = np.asarray(topics) / np.asarray(topics).sum(1, keepdims=True)
    words = top_words(topics, tokens, num_words)
    num_topics = topics.shape[0]
    cols = min(5, num_topics)
    rows = -(-num_topics // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 0.28 * num_words * rows + 0.6 * rows), squeeze=False)
    for k, ax in enumerate(axes.ravel()):
        if k >= num_topics:
            ax.axis("off")
            continue
        best = np.argsort(-topics[k])[:num_words]
        ax.barh(np.arange(num_words)[::-1], topics[k, best], color="tab:blue")
        ax.set_yticks(np.arange(num_words)[::-1], words[k], fontsize=8)
        ax.set_title(f"topic {k}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _topic_means(post):
    """Posterior mean of the topics: exact from q's Dirichlet parameters when the engine kept
    them, otherwise the mean of the draws."""
    lam = post.approximation.get("topics_concentration")
    if lam is not None:
        return lam / lam.sum(1, keepdims=True)
    return post.mean("topics")


def demo_cases():
    """Reuters (395 documents, 4258 words), 10 topics, online VB, scored by held-out perplexity
    (document completion on a fixed 20% test split), with a top-words picture."""
    from probmodels.datasets import load_reuters
    from probmodels.demo import Case

    corpus = load_reuters()
    split = held_out_split(corpus.counts, test_fraction=0.2, seed=0)
    num_topics, alpha = 10, 0.1

    def score(post):
        value = perplexity(_topic_means(post), split.observed, split.held_out, alpha=alpha)
        return "held-out perplexity", value, f"{value:.0f} (document completion, {len(split.test_index)} test docs)"

    def plot(post, path_base):
        return [plot_top_words(_topic_means(post), corpus.tokens, f"{path_base}_top_words.png",
                               title="Reuters: top words per topic")]

    options = {"vi": {"method": "online", "num_samples": 20, "tol": 1e-4}}  # 20 draws: the score uses q's exact mean
    return [Case("lda_reuters", lda, (split.train,), {"num_topics": num_topics, "alpha": alpha}, ("vi",), score,
                 options, plot)]
