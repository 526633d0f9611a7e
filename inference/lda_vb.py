"""Variational Bayes for latent Dirichlet allocation: batch coordinate ascent and online VB.

Mean field ``q(theta_d) = Dirichlet(gamma_d)``, ``q(topics_k) = Dirichlet(lam_k)``; the per-word
topic responsibilities ``phi`` are never stored (they are optimal given ``gamma`` and ``lam``), so
every quantity is a segment sum over the corpus's nonzero ``(doc, word, count)`` triplets and
memory is O(nonzeros x K), never documents x words x topics.

- ``"batch"``: coordinate ascent (Blei, Ng & Jordan 2003): every document's ``gamma`` to a fixed
  point, then ``lam = eta + expected word counts``. Each sweep is exact coordinate ascent, so the
  ELBO never decreases (tested).
- ``"online"``: online VB (Hoffman, Blei & Bach 2010): shuffled mini-batches of documents; after
  each one ``lam`` moves towards the mini-batch's estimate ``eta + (D / |B|) * counts`` with step
  ``rho_t = (tau0 + t) ** -kappa`` (a stochastic natural-gradient step on the ELBO).

VB for LDA has poor local optima (two topics merged, one split): topics start from documents
picked by greedy k-means++, and by default three starts run a few passes each and the one with the
highest ELBO goes on.

Everything runs in the working dtype (float32 unless x64 is on): ``exp E[log topics]`` and
``exp E[log theta]`` are scaled in log space (per word, per document) before any division, and
posterior draws are clipped into the open simplex of that dtype, so nothing underflows to 0/0.

- ``"stochastic"``: stochastic VI on the model itself (:func:`stochastic_vi`): mini-batches of
  documents through the model's subsampling plate, a Dirichlet mean-field guide, Optax Adam.

All three are offered to ``inference.vi(model, ..., method="online" | "batch" | "stochastic")`` for models whose trace
has the LDA shape: latent ``theta`` (documents x topics) and ``topics`` (topics x words) with
Dirichlet priors, and one observed site whose value holds each document's ``(word id, count)``
pairs, shape (documents, slots, 2), padded with count 0 (``probmodels.lda`` builds it).
Engine options are keywords of :func:`fit`; the array-level :func:`fit` runs without a model.

Example:
    >>> import numpy as np
    >>> from inference.lda_vb import Triplets, fit
    >>> counts = np.random.default_rng(0).poisson(1.0, size=(20, 30)) + 1
    >>> doc, word = np.nonzero(counts)
    >>> state, diag = fit(Triplets(doc, word, counts[doc, word]), 20, 30, num_topics=3, alpha=0.1,
    ...                   eta=0.01, method="batch")
    >>> state.lam.shape, state.gamma.shape, diag["converged"]
    ((3, 30), (20, 3), True)
"""

from __future__ import annotations

import time
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.special
from jax import lax
from jax.scipy.special import digamma, gammaln, logsumexp

from inference import _model, _options, compiled, convergence
from inference.posterior import Posterior
from inference.trace_reading import unwrap

METHODS = ("batch", "online")


# ----------------------------------------------------------------------------- layer 1: types
class Triplets(NamedTuple):
    """A corpus as its nonzero entries, sorted by document: ``doc`` and ``word`` (N,) int,
    ``count`` (N,) float. Entries with count 0 are padding and contribute nothing."""

    doc: jax.Array
    word: jax.Array
    count: jax.Array


class MiniBatch(NamedTuple):
    """Documents ``docs`` (B,) (global ids; ``num_docs`` marks an empty padding slot) and their
    triplets with ``doc`` the local slot 0..B-1 (0 for padding), laid out densely in groups of
    slots: a layout ``((slots, length), ...)`` (static, from :func:`_strata`) gives each group's
    slots ``length`` entries each, padded with count 0, so each group's entries reshape to
    (slots, length). One group of length L when no layout is given."""

    docs: jax.Array
    data: Triplets


class VBState(NamedTuple):
    """Variational Dirichlet parameters: ``lam`` (K, V) for the topics, ``gamma`` (D, K) for the
    documents' topic proportions, and ``step`` the number of global updates so far."""

    lam: jax.Array
    gamma: jax.Array
    step: jax.Array


class EStepInfo(NamedTuple):
    iterations: jax.Array  # fixed-point sweeps run
    max_change: jax.Array  # largest per-document mean |change of gamma| at the last sweep


class UpdateInfo(NamedTuple):
    elbo: jax.Array  # batch: ELBO after the update; online: the mini-batch estimate before it
    e_iterations: jax.Array


# ----------------------------------------------------------------------------- layer 2: maths
def _rows_and_sums(fn, *arrays):
    """``fn`` of each array and of its row sums, in one call (each digamma / gammaln call costs a
    fraction of a second to compile)."""
    parts = [p for a in arrays for p in (a, jnp.sum(a, -1, keepdims=True))]
    flat = fn(jnp.concatenate([p.ravel() for p in parts]))
    out = jnp.split(flat, np.cumsum([p.size for p in parts])[:-1])
    return [(out[2 * i].reshape(a.shape), out[2 * i + 1].reshape(a.shape[:-1])) for i, a in enumerate(arrays)]


def expected_log(*concentrations):
    """E[log x] under Dirichlet(c) along the last axis, for each c (a list when several)."""
    out = [v - s[..., None] for v, s in _rows_and_sums(digamma, *concentrations)]
    return out[0] if len(out) == 1 else out


def _scaled(log_weights):
    """``exp(log_weights)`` (K, V) with each word's column scaled so its largest entry is 1, and
    the log of each column's scale (V,). Done in log space: ``exp E[log topics]`` of a rare word
    (``digamma(eta) - digamma(row sum)``, about -110 for eta = 0.01) underflows to 0 in every
    topic in float32, and dividing by that column's 0 maximum gave NaN. The fixed point and the
    statistics do not change under the scaling."""
    top = jnp.max(log_weights, axis=0)
    top = jnp.where(jnp.isfinite(top), top, 0.0)  # a word with weight 0 in every topic (fixed topics)
    return jnp.exp(log_weights - top), top


def _doc_scaled(el_gamma):
    """``exp E[log theta_d]`` scaled so each document's largest entry is 1, and the log scales
    (D,): the per-document fixed point and statistics are invariant to that scale, and a
    document's ``exp E[log theta]`` cannot underflow as a whole (small alpha, float32)."""
    shift = jnp.max(el_gamma, axis=-1)
    return jnp.exp(el_gamma - shift[..., None]), shift


def _entry_weights(log_weights, words):
    """Per-entry topic weights (N, K), scaled as :func:`_scaled`, and the log of each word's
    scale (V,)."""
    scaled, top = _scaled(log_weights)
    return scaled.T[words], top


def _ratio(data, et, wn):
    """``count / sum_k E[theta_dk] w_kw`` for each entry, and that normaliser."""
    norm = jnp.maximum(jnp.sum(et[data.doc] * wn, -1), jnp.finfo(wn.dtype).tiny)
    return data.count / norm, norm


def _iterate(update, gamma, alpha, tol, max_iter):
    """The per-document fixed point ``gamma = alpha + exp(E[log theta]) * update(exp(E[log theta]))``
    until the largest mean absolute change is below ``tol`` (or ``max_iter`` sweeps)."""

    def body(carry):
        g, it, _ = carry
        et = _doc_scaled(expected_log(g))[0]
        new = alpha + et * update(et)
        return new, it + 1, jnp.max(jnp.mean(jnp.abs(new - g), -1))

    cond = lambda c: (c[1] < max_iter) & (c[2] > tol)  # noqa: E731
    init = (gamma, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, gamma.dtype))
    gamma, iterations, change = lax.while_loop(cond, body, init)
    return gamma, EStepInfo(iterations, change)


def _fixed_point(data, gamma, wn, alpha, tol, max_iter):
    num_docs = gamma.shape[0]

    def update(et):
        return jax.ops.segment_sum(_ratio(data, et, wn)[0][:, None] * wn, data.doc, num_docs,
                                   indices_are_sorted=True)

    return _iterate(update, gamma, alpha, tol, max_iter)


def _dense_weights(scaled, words):
    """:func:`_entry_weights` for the dense layout: (B, K, L) from ``words`` (B, L) and the scaled
    weights of :func:`_scaled` (K before L: the contractions below run faster with the long axis
    last)."""
    return jnp.moveaxis(scaled[:, words], 0, 1)


def _fixed_point_dense(count, wn, gamma, alpha, tol, max_iter):
    """:func:`_fixed_point` on documents laid out densely, in groups of rows: ``count`` a list of
    (B_g, L_g) and ``wn`` of (B_g, K, L_g) (:func:`_dense_weights`), one row per document padded
    with count 0, the groups' rows in the order of ``gamma``'s (groups let short documents take
    short rows). The same iteration and stopping rule, with batched matrix-vector products instead
    of gathers and scatter-adds (2x to 3x faster on CPU)."""

    def update(et):
        return jnp.concatenate([_contract(c, w, e) for c, w, e in zip(count, wn, _split(et, count))])

    return _iterate(update, gamma, alpha, tol, max_iter)


def _split(rows, groups):
    """``rows`` cut into the groups' row counts."""
    return jnp.split(rows, np.cumsum([c.shape[0] for c in groups])[:-1])


def _norm(wn, et):
    return jnp.maximum(jnp.einsum("bkl,bk->bl", wn, et), jnp.finfo(wn.dtype).tiny)


def _contract(count, wn, et):
    """``sum_w c_dw wn_w / (et_d . wn_w)`` per document (B, K)."""
    return jnp.einsum("bl,bkl->bk", count / _norm(wn, et), wn)


def _statistics_dense(count, words, el_gamma, wn, log_top, vocab_size):
    """:func:`_statistics` on the grouped dense layout of :func:`_fixed_point_dense` (``words``
    a list of (B_g, L_g))."""
    et_all, shift_all = _doc_scaled(el_gamma)
    counts, total = 0.0, 0.0
    for c, w, wd, et, shift in zip(count, words, wn, _split(et_all, count), _split(shift_all, count)):
        norm = _norm(wd, et)
        contrib = (c / norm)[..., None] * et[:, None, :]
        counts = counts + jax.ops.segment_sum(contrib.reshape(-1, et.shape[-1]), w.ravel(), vocab_size).T
        total = total + jnp.sum(jnp.where(c > 0, c * (jnp.log(norm) + log_top[w] + shift[:, None]), 0.0))
    return counts, total


def _grouped(flat, layout):
    """A mini-batch's flat (entries,) array cut into its groups' (slots, length) rows."""
    out, start = [], 0
    for slots, length in layout:
        out.append(flat[start:start + slots * length].reshape(slots, length))
        start += slots * length
    return out


def e_step(data: Triplets, gamma, weights, alpha, tol, max_iter):
    """Iterate ``gamma_d = alpha + E[theta_d] * sum_w c_dw weights_w / (E[theta_d] . weights_w)``
    (``E[theta] = exp E log theta``) to a fixed point: at most ``max_iter`` sweeps, stopping when
    no document's mean absolute change exceeds ``tol``. ``weights`` (K, V) are
    ``exp E[log topics]`` (VB) or fixed topic probabilities (folding in held-out documents)."""
    return _fixed_point(data, gamma, _entry_weights(jnp.log(weights), data.word)[0], alpha, tol, max_iter)


def _statistics(data, el_gamma, wn, log_top, vocab_size):
    """Expected word counts per topic (K, V) in the scaled weights (multiply by the weights) and
    the ELBO's word part ``sum c log sum_k exp(E log theta + E log topics)``, sharing one pass."""
    et, shift = _doc_scaled(el_gamma)
    ratio, norm = _ratio(data, et, wn)
    counts = jax.ops.segment_sum(ratio[:, None] * et[data.doc], data.word, vocab_size).T
    log_norm = jnp.log(norm) + log_top[data.word] + shift[data.doc]
    words = jnp.sum(jnp.where(data.count > 0, data.count * log_norm, 0.0))
    return counts, words


def sufficient_statistics(data: Triplets, el_gamma, weights):
    """Expected word counts per topic, ``sum_d c_dw phi_dwk`` as a (K, V) array."""
    scaled, log_top = _scaled(jnp.log(weights))
    counts, _ = _statistics(data, el_gamma, scaled.T[data.word], log_top, weights.shape[1])
    return counts * scaled


def word_bound(data: Triplets, el_gamma, el_lam):
    """``sum c_dw log sum_k exp(E log theta_dk + E log topics_kw)``: the ELBO's likelihood part
    with ``phi`` at its optimum."""
    per_entry = logsumexp(el_gamma[data.doc] + el_lam.T[data.word], axis=-1)
    return jnp.sum(jnp.where(data.count > 0, data.count * per_entry, 0.0))


def dirichlet_bounds(pairs):
    """For each ``(concentration, prior, expected_log(concentration))``: the rows'
    ``E_q[log p(x) - log q(x)]`` under q = Dirichlet(concentration), p = Dirichlet(prior)."""
    lg = _rows_and_sums(gammaln, *[a for c, p, _ in pairs for a in (c, p)])
    out = []
    for i, (conc, prior, el) in enumerate(pairs):
        (lc, lcs), (lp, lps) = lg[2 * i], lg[2 * i + 1]
        out.append(jnp.sum((prior - conc) * el + lc, -1) - lcs + lps - jnp.sum(lp, -1))
    return out


def elbo(data: Triplets, gamma, lam, alpha, eta):
    """The evidence lower bound (phi optimal) of the whole corpus."""
    el_gamma, el_lam = expected_log(gamma, lam)
    docs, topics = dirichlet_bounds([(gamma, alpha, el_gamma), (lam, eta, el_lam)])
    return word_bound(data, el_gamma, el_lam) + jnp.sum(docs) + jnp.sum(topics)


def batch_update(state: VBState, data: Triplets, alpha, eta, e_tol, e_max_iter, dense=None):
    """One coordinate-ascent sweep: E-step for every document, then ``lam = eta + counts``.
    ``dense``: the corpus also in the layout of :func:`_dense_corpus`, for a faster E-step."""
    scaled, log_top = _scaled(expected_log(state.lam))
    wn = scaled.T[data.word]
    if dense is None:
        gamma, info = _fixed_point(data, state.gamma, wn, alpha, e_tol, e_max_iter)
    else:
        order, words, counts = dense
        gamma, info = _fixed_point_dense(counts, [_dense_weights(scaled, w) for w in words], state.gamma[order],
                                         alpha, e_tol, e_max_iter)
        gamma = jnp.zeros_like(gamma).at[order].set(gamma, unique_indices=True)
    counts, _ = _statistics(data, expected_log(gamma), wn, log_top, scaled.shape[1])
    lam = eta + counts * scaled
    return VBState(lam, gamma, state.step + 1), UpdateInfo(elbo(data, gamma, lam, alpha, eta), info.iterations)


def online_update(state: VBState, batch: MiniBatch, alpha, eta, tau0, kappa, e_tol, e_max_iter, layout=None):
    """One online-VB step on a mini-batch (Hoffman et al. 2010, Algorithm 2). The documents'
    ``gamma`` start from their last values (warm start) and are stored back. ``info.elbo`` is the
    mini-batch's part of the ELBO scaled to the corpus (the topics' part is added once per pass).
    ``layout``: the mini-batch's groups (see :class:`MiniBatch`), static; default one group."""
    num_docs, vocab_size = state.gamma.shape[0], state.lam.shape[1]
    valid = batch.docs < num_docs
    start = jnp.where(valid[:, None], state.gamma.at[batch.docs].get(mode="fill", fill_value=1.0), alpha)
    slots = batch.docs.shape[0]
    layout = layout or ((slots, batch.data.count.shape[0] // slots),)
    word, count = (_grouped(a, layout) for a in (batch.data.word, batch.data.count))
    scaled, log_top = _scaled(expected_log(state.lam))
    wn = [_dense_weights(scaled, w) for w in word]
    gamma, info = _fixed_point_dense(count, wn, start, alpha, e_tol, e_max_iter)
    gamma = jnp.where(valid[:, None], gamma, alpha)
    el_gamma = expected_log(gamma)
    counts, words = _statistics_dense(count, word, el_gamma, wn, log_top, vocab_size)
    (docs,) = dirichlet_bounds([(gamma, alpha, el_gamma)])
    scale = num_docs / jnp.maximum(jnp.sum(valid), 1)
    estimate = scale * (words + jnp.sum(jnp.where(valid, docs, 0.0)))
    rho = (tau0 + state.step) ** (-kappa)
    lam = (1.0 - rho) * state.lam + rho * (eta + scale * counts * scaled)
    new = VBState(lam, state.gamma.at[batch.docs].set(gamma, mode="drop"), state.step + 1)
    return new, UpdateInfo(estimate, info.iterations)


def init(rng: np.random.Generator, csr, num_topics: int, alpha, *, seeded: bool = True, candidates: int = 0) -> VBState:
    """Starting point from a (D, V) CSR count matrix (host-side, NumPy). ``seeded``: each topic
    starts as one document's counts plus noise near 1, the documents picked by greedy k-means++
    (Arthur & Vassilvitskii 2007) on squared Hellinger distances of word frequencies: at each pick
    ``candidates`` (default 2 + log K) draws with probability proportional to the distance from
    the nearest pick so far, keeping the one that brings the documents closest. Otherwise only the
    noise (log-normal, sd 0.1: Hoffman et al.'s Gamma(100, 1/100) start). ``gamma`` starts at
    ``alpha + length / K``."""
    num_docs, vocab_size = csr.shape
    lengths = np.asarray(csr.sum(axis=1), float).ravel()
    lam = np.exp(0.1 * rng.standard_normal((num_topics, vocab_size)))
    if seeded:
        root = scipy.sparse.diags(1.0 / np.sqrt(np.maximum(lengths, 1.0))) @ csr.sqrt()
        nearest, chosen = np.ones(num_docs), []
        for _ in range(num_topics):
            p = np.where(lengths > 0, nearest, 0.0)
            cands = rng.choice(num_docs, size=candidates or 2 + int(np.log(num_topics)), p=p / p.sum())
            closer = np.minimum(nearest[:, None], np.maximum(1.0 - (root @ root[cands].T).toarray(), 0.0))
            best = int(np.argmin(closer.sum(0)))
            nearest = closer[:, best]
            chosen.append(cands[best])
        lam = lam + csr[chosen].toarray()
    gamma = np.asarray(alpha)[None, :] + lengths[:, None] / num_topics + np.zeros((1, num_topics))
    dtype = jnp.result_type(float)
    return VBState(jnp.asarray(lam, dtype), jnp.asarray(gamma, dtype), jnp.asarray(0, jnp.int32))


# ----------------------------------------------------------------------------- layer 3: drivers
_batch_update = jax.jit(batch_update)


@partial(jax.jit, static_argnames="layout")
def _online_pass(state, batches, active, alpha, eta, tau0, kappa, e_tol, e_max_iter, layout=None):
    """The mini-batches of one pass (``active`` False: skipped), and the pass's ELBO estimate: the
    mean of the mini-batch estimates plus the topics' part at the end of the pass."""
    def body(s, inputs):
        batch, on = inputs
        new, info = online_update(s, batch, alpha, eta, tau0, kappa, e_tol, e_max_iter, layout)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(on, a, b), new, s), info

    state, info = lax.scan(body, state, (batches, active))
    (topics,) = dirichlet_bounds([(state.lam, eta, expected_log(state.lam))])
    local = jnp.sum(jnp.where(active, info.elbo, 0.0)) / jnp.maximum(jnp.sum(active), 1)
    return state, UpdateInfo(local + jnp.sum(topics), info.e_iterations)


@jax.jit
def _final_e_step(state, data, dense, alpha, eta, e_tol, e_max_iter):
    """Every document's ``gamma`` at the final topics (:func:`e_step` on the grouped dense layout
    ``dense = (order, words, counts)`` of :func:`_dense_corpus`) and the exact ELBO there."""
    order, words, counts = dense
    scaled, _ = _scaled(expected_log(state.lam))
    wn = [_dense_weights(scaled, w) for w in words]
    gamma, _ = _fixed_point_dense(counts, wn, state.gamma[order], alpha, e_tol, e_max_iter)
    gamma = jnp.zeros_like(gamma).at[order].set(gamma, unique_indices=True)
    return gamma, elbo(data, gamma, state.lam, alpha, eta)


def _dense_corpus(csr, groups=8):
    """All documents, longest first (``order``), cut into up to ``groups`` runs of rows, each run
    (rows, its longest document) word ids and counts padded with word 0 and count 0 (the layout of
    :func:`_fixed_point_dense`)."""
    nnz = np.diff(csr.indptr)
    order = np.argsort(-nnz, kind="stable")
    cuts = np.unique(np.linspace(0, len(order), min(groups, len(order)) + 1).astype(int))
    words, counts = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        rows = csr[order[a:b]]
        length = max(int(nnz[order[a]]), 1)
        n = np.diff(rows.indptr)
        pos = np.repeat(np.arange(b - a) * length, n) + np.arange(rows.nnz) - np.repeat(rows.indptr[:-1], n)
        w, c = np.zeros((b - a, length), np.int32), np.zeros((b - a, length), jnp.result_type(float))
        w.flat[pos], c.flat[pos] = rows.indices, rows.data
        words.append(jnp.asarray(w))
        counts.append(jnp.asarray(c))
    return jnp.asarray(order, jnp.int32), words, counts


def fit(data: Triplets, num_docs: int, vocab_size: int, *, num_topics: int, alpha, eta, method="online",
        steps: int = 20_000, tol: float = 1e-5, seed: int = 0, batch_size: int = 64, tau0: float = 10.0,
        kappa: float = 0.7, e_tol: float = 1e-3, e_max_iter: int = 100, start: str = "seeded",
        num_restarts: int = 3, restart_passes: int = 1, progress: bool = False):
    """Fit LDA by VB on triplets; returns ``(VBState, diagnostics)``.

    ``steps`` caps the sweeps (batch) or mini-batch updates (online). The fit stops when the
    ELBO's relative change is below ``tol``: between sweeps (batch) or between the means of the
    mini-batch estimates over two passes through the corpus (online). ``alpha`` (K,) or scalar,
    ``eta`` (V,) or scalar. ``e_tol`` / ``e_max_iter``: each document's fixed-point loop (as in
    scikit-learn). ``batch_size``, ``tau0``, ``kappa``: online mini-batches and step sizes.
    ``num_restarts`` starts (seeds ``seed``, ``seed + 1``, ...) each run ``restart_passes`` sweeps
    or passes and the highest ELBO goes on (on simulated corpora the early ELBO ranked the final
    optima correctly). ``start``: ``"seeded"`` (k-means++ documents) or ``"random"`` (see :func:`init`).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if start not in ("seeded", "random"):
        raise ValueError(f"start must be 'seeded' or 'random', got {start!r}")
    steps, batch_size = _options.positive_int(steps, "steps"), _options.positive_int(batch_size, "batch_size")
    num_restarts = _options.positive_int(num_restarts, "num_restarts")
    restart_passes = _options.positive_int(restart_passes, "restart_passes")
    e_max_iter = _options.positive_int(e_max_iter, "e_max_iter")
    tol, e_tol, tau0 = (_options.positive_float(v, n) for v, n in ((tol, "tol"), (e_tol, "e_tol"), (tau0, "tau0")))
    if not 0.5 < float(kappa) <= 1.0:
        raise ValueError(f"kappa must lie in (0.5, 1] (Robbins-Monro steps), got {kappa!r}")
    csr = _corpus(data, num_docs, vocab_size)
    for name, value in (("alpha", alpha), ("eta", eta)):
        if not np.all(np.isfinite(value)) or np.any(np.asarray(value) <= 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")
    dtype = jnp.result_type(float)
    data = _triplets(csr)
    count = csr.data
    alpha = np.broadcast_to(np.asarray(alpha, float), (num_topics,))
    numbers = dict(alpha=jnp.asarray(alpha, dtype), eta=jnp.broadcast_to(jnp.asarray(eta, dtype), (vocab_size,)),
                   e_tol=jnp.asarray(e_tol, dtype), e_max_iter=jnp.asarray(e_max_iter, jnp.int32),
                   tau0=jnp.asarray(tau0, dtype), kappa=jnp.asarray(kappa, dtype))
    t0 = time.perf_counter()
    runs = []
    for r in range(num_restarts):
        rng = np.random.default_rng(seed + r)
        state = init(rng, csr, num_topics, alpha, seeded=start == "seeded")
        runs.append(_Run(state, data, csr, batch_size if method == "online" else None, rng, numbers))
    bar = _progress_bar(progress, steps, method)
    probes = []
    if num_restarts > 1:
        for run in runs:
            run.advance(min(steps, restart_passes * run.num_batches), tol, bar)
            probes.append(run.trace[-1])
    run = runs[int(np.argmax(probes))] if probes else runs[0]
    run.advance(steps - run.updates, tol, bar)
    if bar is not None:
        bar.close()
    state, final = run.state, run.trace[-1]
    if method == "online":  # every document's gamma at the final topics, and the exact ELBO there
        gamma, final = _final_e_step(state, data, run.dense or _dense_corpus(csr), numbers["alpha"], numbers["eta"], numbers["e_tol"],
                                     numbers["e_max_iter"])
        state, final = state._replace(gamma=gamma), float(final)
    if not np.isfinite(final) or not np.all(np.isfinite(np.asarray(state.lam))):
        raise FloatingPointError(f"LDA {method} VB produced a non-finite ELBO; check the counts and priors")
    total, trace = float(count.sum()), np.asarray(run.trace, float)
    diagnostics = {
        "converged": convergence.vi(run.converged, final), "method": method, "elbo": final, "elbo_trace": trace,
        "perplexity_trace": np.exp(-trace / total), "perplexity_bound": float(np.exp(-final / total)),
        "updates": int(state.step), "mean_e_step_iterations": float(np.mean(run.e_iters)),
        "restart_elbos": [float(v) for v in probes],
        "restart_chosen": runs.index(run), "fit_seconds": time.perf_counter() - t0,
    }
    if method == "online":
        diagnostics.update(batch_size=batch_size, tau0=tau0, kappa=float(kappa))
    return state, diagnostics


def _triplets(csr) -> Triplets:
    """A (D, V) CSR count matrix as triplets in the working float dtype, sorted by document."""
    coo = csr.tocoo()
    return Triplets(jnp.asarray(coo.row, jnp.int32), jnp.asarray(coo.col, jnp.int32),
                    jnp.asarray(coo.data, jnp.result_type(float)))


def _corpus(data, num_docs, vocab_size):
    doc, word, count = (np.asarray(a) for a in data)
    if not (doc.shape == word.shape == count.shape and doc.ndim == 1):
        raise ValueError(f"data: doc, word and count must be 1-D of one length, got {doc.shape}, {word.shape}, {count.shape}")
    if doc.size and (doc.min() < 0 or doc.max() >= num_docs or word.min() < 0 or word.max() >= vocab_size):
        raise ValueError(f"data: ids out of range for {num_docs} documents and {vocab_size} words")
    if not np.all(np.isfinite(count)) or np.any(count < 0):
        raise ValueError("data: counts must be finite and non-negative")
    csr = scipy.sparse.csr_matrix((count.astype(float), (doc, word)), shape=(num_docs, vocab_size))
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr


class _Run:
    """One VB run driven from the host: batch sweeps, or online passes over shuffled mini-batches
    (``batch_size`` set), with its ELBO trace; ``advance`` goes on for up to ``budget`` updates or
    until the ELBO settles. Shapes are fixed per corpus, so each jitted step compiles once."""

    def __init__(self, state, data, csr, batch_size, rng, numbers):
        self.state, self.data, self.csr, self.rng, self.numbers = state, data, csr, rng, numbers
        self.trace, self.e_iters, self.converged, self.updates = [], [], False, 0
        self.online = batch_size is not None
        self.num_batches, self.dense = 1, None
        if not self.online:
            self.dense = _dense_corpus(csr)
        if self.online:
            num_docs = csr.shape[0]
            self.num_batches = -(-num_docs // min(batch_size, num_docs))
            self.strata, self.layout = _strata(csr, self.num_batches)
            self.active = np.ones(self.num_batches, bool)

    def advance(self, budget, tol, bar):
        done = 0
        while done < budget and not self.converged:
            n, value = self._pass(budget - done) if self.online else self._sweep()
            done, self.updates = done + n, self.updates + n
            if bar is not None:
                bar.update(n)
                bar.set_postfix(elbo=f"{value:.6g}")
            if self.trace and n == self.num_batches and abs(value - self.trace[-1]) <= tol * abs(value):
                self.converged = True
            self.trace.append(value)

    def _sweep(self):
        nb = self.numbers
        self.state, info = _batch_update(self.state, self.data, nb["alpha"], nb["eta"], nb["e_tol"], nb["e_max_iter"],
                                         self.dense)
        self.e_iters.append(int(info.e_iterations))
        return 1, _finite(float(info.elbo), "batch", self.updates + 1)

    def _pass(self, budget):
        batches = _pass_batches(self.rng, self.csr, self.strata, self.layout)
        active = self.active if budget >= self.num_batches else np.arange(self.num_batches) < budget
        nb = self.numbers
        self.state, info = _online_pass(self.state, batches, active, nb["alpha"], nb["eta"], nb["tau0"],
                                        nb["kappa"], nb["e_tol"], nb["e_max_iter"], layout=self.layout)
        n = int(active.sum())
        self.e_iters.extend(np.asarray(info.e_iterations)[:n].tolist())
        return n, _finite(float(info.elbo), "online", self.updates + n)


def _finite(value, method, updates):
    if not np.isfinite(value):
        raise FloatingPointError(f"LDA {method} VB: the ELBO became non-finite after {updates} updates")
    return value


def _strata(csr, num_batches, groups=4):
    """Documents sorted by length, longest first, in strata of ``num_batches`` ((strata,
    num_batches) ids, the last row padded with ``num_docs``): slot ``i`` of each mini-batch of a
    pass takes one document of stratum ``i``, so every mini-batch is a stratified random sample of
    the corpus (the scaled statistics stay unbiased) and all hold about the same number of
    entries. Also the mini-batches' layout (:class:`MiniBatch`): the slots cut into up to
    ``groups`` runs, each as long as its longest document, so short documents take short rows."""
    num_docs = csr.shape[0]
    nnz = np.diff(csr.indptr)
    order = np.argsort(-nnz, kind="stable")
    strata = np.full((-(-num_docs // num_batches), num_batches), num_docs)
    strata.flat[:num_docs] = order
    longest = np.r_[nnz, 0][strata[:, 0]]  # each stratum's longest document
    cuts = np.unique(np.linspace(0, len(strata), min(groups, len(strata)) + 1).astype(int))
    layout = tuple((int(b - a), max(int(longest[a]), 1)) for a, b in zip(cuts[:-1], cuts[1:]))
    return strata, layout


def _pass_batches(rng, csr, strata, layout):
    """One pass: each stratum's documents dealt at random to the mini-batches, in ``layout``
    (:class:`MiniBatch`; fixed shapes: one compile). NumPy arrays, which the jitted pass takes as
    they are."""
    num_docs, (num_strata, num_batches) = csr.shape[0], strata.shape
    dealt = np.take_along_axis(strata, np.argsort(rng.random(strata.shape), axis=1), axis=1)
    docs = np.ascontiguousarray(dealt.T)  # (num_batches, num_strata): slot i from stratum i
    valid = docs < num_docs
    safe = np.where(valid, docs, 0)
    sizes = np.where(valid, csr.indptr[safe + 1] - csr.indptr[safe], 0).ravel()
    lengths = np.repeat([length for _, length in layout], [slots for slots, _ in layout])
    width = int(lengths.sum())
    offsets = np.tile(np.cumsum(lengths) - lengths, num_batches) + np.repeat(np.arange(num_batches) * width, num_strata)
    total = int(sizes.sum())
    within = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    entry = np.repeat(csr.indptr[safe.ravel()], sizes) + within
    pos = np.repeat(offsets, sizes) + within  # flat (batch, position)
    local, words = np.zeros((2, num_batches, width), np.int32)  # padding entries: slot 0, word 0, count 0
    counts = np.zeros((num_batches, width), np.result_type(float) if jax.config.jax_enable_x64 else np.float32)
    local.flat[pos] = np.repeat(np.tile(np.arange(num_strata), num_batches), sizes)
    words.flat[pos], counts.flat[pos] = csr.indices[entry], csr.data[entry]
    return MiniBatch(docs.astype(np.int32), Triplets(local, words, counts))


def _progress_bar(on, total, method):
    from inference.progress import Bar

    return Bar(True, total, f"lda {method} vb") if on else None


# ----------------------------------------------------------------------------- models and Posterior
def lda_problem(trace, concentration=None):
    """Read an LDA-shaped model's trace: ``(Triplets, num_docs, vocab_size, alpha (K,), eta (V,))``.
    ``concentration``: the Dirichlet sites' concrete concentrations where the trace's are abstract
    (`_lda_trace`). Raises a ValueError naming what does not fit."""
    need = ("an LDA-shaped model (latent Dirichlet sites 'theta' (D, K) and 'topics' (K, V), one observed "
            "site of (word, count) pairs (D, slots, 2))")
    for name, site in trace.items():
        size, sub = (tuple(site["args"]) + (None, None))[:2] if site["type"] == "plate" else (None, None)
        if sub is not None and size is not None and sub < size:
            raise ValueError(f"plate {name!r} subsamples ({sub} of {size}); the LDA VB methods (the default "
                             "'online', and 'batch') draw their own mini-batches: leave the model's batch_size "
                             "unset, or use method='stochastic' for mini-batch SVI")
    latent, observed = _model.latent_sites(trace), _model.observed_sites(trace)
    if sorted(latent) != ["theta", "topics"] or len(observed) != 1:
        raise ValueError(f"this method needs {need}; got latent sites {latent} and observed sites {list(observed)}")
    conc = {}
    for name in ("theta", "topics"):
        fn = unwrap(trace[name]["fn"])
        if type(fn).__name__ != "Dirichlet" or np.ndim(trace[name]["value"]) != 2:
            raise ValueError(f"site {name!r} must be a matrix of Dirichlet rows for this method ({need})")
        value = fn.concentration if concentration is None else concentration[name]
        conc[name] = np.broadcast_to(np.asarray(value), np.shape(trace[name]["value"]))
    ((obs_name, pairs),) = observed.items()
    (num_docs, num_topics), (k2, vocab_size) = conc["theta"].shape, conc["topics"].shape
    if pairs.ndim != 3 or pairs.shape[0] != num_docs or pairs.shape[2] != 2 or k2 != num_topics:
        raise ValueError(f"observed site {obs_name!r} has shape {pairs.shape}; this method needs {need}")
    alpha, eta = conc["theta"][0], conc["topics"][0]
    if not (np.allclose(conc["theta"], alpha) and np.allclose(conc["topics"], eta)):
        raise ValueError("the Dirichlet priors of 'theta' (and of 'topics') must be the same for every row")
    doc, slot = np.nonzero(pairs[..., 1] > 0)
    return Triplets(doc, pairs[doc, slot, 0], pairs[doc, slot, 1].astype(float)), num_docs, vocab_size, alpha, eta


def _lda_trace(model, args, kwargs, seed):
    """``(trace, concentrations)``: the model's structure trace (`inference._model.structure_trace`:
    names, shapes, the observed pairs) and the Dirichlet sites' concrete concentrations from one
    compiled run of the model (its unused draws are dead code to XLA). The eager trace this
    replaces compiled ~220 small programs per corpus shape (the priors' constructors and the
    latents' transforms), ~1.5 s of a first fit."""
    trace = _model.structure_trace(model, args, kwargs, seed)
    names = tuple(n for n in ("theta", "topics") if n in trace and trace[n]["type"] == "sample"
                  and hasattr(unwrap(trace[n]["fn"]), "concentration"))

    conc = _model.read_compiled("lda-concentrations", model, args, kwargs, seed, names,
                                lambda tr: {n: unwrap(tr[n]["fn"]).concentration for n in names})
    return trace, jax.tree.map(np.asarray, conc)



def _vb_posterior(method, model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, **options):
    trace, concentration = _lda_trace(model, args, kwargs, seed)  # the priors' concrete parameters
    data, num_docs, vocab_size, alpha, eta = lda_problem(trace, concentration)
    state, diagnostics = fit(data, num_docs, vocab_size, num_topics=len(alpha), alpha=alpha, eta=eta,
                             method=method, steps=steps, tol=tol, seed=seed, progress=progress, **options)
    if not diagnostics["converged"]:
        warnings.warn(f"LDA {method} VB stopped at steps={steps} before the ELBO settled (tol={tol}): raise "
                      "steps or tol", skip_file_prefixes=_options.INTERNAL)
    return _posterior_from_q(model, args, kwargs, trace, np.asarray(state.gamma, float), np.asarray(state.lam, float),
                             diagnostics, num_samples, seed, log_evidence=diagnostics["elbo"])


def _posterior_from_q(model, args, kwargs, trace, gamma, lam, diagnostics, num_samples, seed, log_evidence=None):
    """A Posterior from q = Dirichlet(gamma) x Dirichlet(lam): host-side draws, the model's log joint
    and pointwise log likelihood at each, and ``log_evidence`` (default: the draws' mean of
    ``lp - log q``, a Monte Carlo ELBO)."""
    rng = np.random.default_rng([seed, 1])
    draws = {"theta": _dirichlet(rng, gamma, num_samples), "topics": _dirichlet(rng, lam, num_samples)}
    log_q = _dirichlet_log_pdf(draws["theta"], gamma) + _dirichlet_log_pdf(draws["topics"], lam)
    lp, loglik, deterministic = _model_densities(model, args, kwargs, draws)
    diagnostics["importance_log_evidence"] = float(scipy.special.logsumexp(lp - log_q) - np.log(num_samples))
    if log_evidence is None:
        log_evidence = diagnostics["elbo"] = float(np.mean(lp - log_q))
    samples = _model.to_chains({**draws, **deterministic}, 1)
    return Posterior(
        engine="vi", samples=samples, log_likelihood=_model.to_chains(loglik, 1),
        observed_data=_model.observed_sites(trace), sample_stats={"lp": lp[None], "log_q": log_q[None]},
        log_evidence=log_evidence, evidence_method="elbo", diagnostics=diagnostics,
        approximation={"theta_concentration": gamma, "topics_concentration": lam},
        model=model, model_args=args, model_kwargs=kwargs, seed=seed,
        dims={"theta": ["document", "topic"], "topics": ["topic", "word"]},
    )


def _dirichlet(rng, concentration, num_samples):
    """(num_samples, *concentration.shape) Dirichlet draws along the last axis, on the host (no
    gamma-sampler compile), in the working dtype (float32 unless x64 is on) and clipped at its
    smallest normal number like NumPyro's sampler: with concentrations near 0.01 most coordinates
    of a draw lie below 1e-38, which float32 rounds to 0, where the model's Dirichlet log density
    is infinite. ``log q`` and the model are then evaluated at these same values."""
    dtype = jnp.result_type(float)
    g = rng.standard_gamma(np.broadcast_to(concentration, (num_samples,) + concentration.shape))
    x = g / np.maximum(g.sum(-1, keepdims=True), np.finfo(float).tiny)
    return np.clip(x, np.finfo(dtype).tiny, 1.0).astype(dtype)


def _dirichlet_log_pdf(x, concentration):
    log_norm = scipy.special.gammaln(concentration.sum(-1)) - scipy.special.gammaln(concentration).sum(-1)
    return np.sum((concentration - 1.0) * np.log(np.asarray(x, float)), axis=(-2, -1)) + np.sum(log_norm)


def _model_densities(model, args, kwargs, draws):
    """The model's log joint, each observed site's pointwise log likelihood and the deterministic
    sites at every draw: one substituted trace per draw, in chunks (memory of a few draws). One
    program per model structure with the data as arguments (`inference.compiled`): a closure over
    the corpus compiled again on every fit (~0.45 s of a 1 s refit on Reuters)."""
    from numpyro.infer.util import log_density

    def build(rebuild):
        def run(arrays, values):
            a, kw = rebuild(arrays)

            def one(v):
                lp, tr = log_density(model, a, kw, v)
                obs = {n: s["fn"].log_prob(s["value"]) for n, s in tr.items()
                       if s["type"] == "sample" and s["is_observed"]}
                det = {n: s["value"] for n, s in tr.items() if s["type"] == "deterministic"}
                return lp, obs, det

            return lax.map(one, values, batch_size=8)

        return jax.jit(run)

    lp, loglik, det = compiled.call("lda-densities", model, args, kwargs, (), build, draws)
    lp = np.asarray(lp)
    if not np.all(np.isfinite(lp)):
        raise FloatingPointError("non-finite model log density at a draw from the LDA variational posterior")
    return lp, {k: np.asarray(v) for k, v in loglik.items()}, {k: np.asarray(v) for k, v in det.items()}


def batch_vb(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, **options):
    """``inference.vi(..., method="batch")``: coordinate-ascent VB; options as :func:`fit`."""
    return _vb_posterior("batch", model, args, kwargs, trace, steps=steps, num_samples=num_samples, seed=seed,
                         progress=progress, tol=tol, **options)


def online_vb(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, **options):
    """``inference.vi(..., method="online")``: online VB; options as :func:`fit`."""
    return _vb_posterior("online", model, args, kwargs, trace, steps=steps, num_samples=num_samples, seed=seed,
                         progress=progress, tol=tol, **options)


# ----------------------------------------------------------------------------- stochastic VI (Optax)
LR_LEVELS = (1.0, 0.1, 0.01)


def dirichlet_guide(trace, gamma, lam):
    """A mean-field guide ``q(topics_k) = Dirichlet(lam_k)``, ``q(theta_d) = Dirichlet(gamma_d)``
    for an LDA-shaped model, mirroring its plates (so a subsampling document plate subsamples the
    documents' parameters too). Parameters ``topics_concentration`` (K, V) and
    ``theta_concentration`` (D, K), positive, starting at ``lam`` and ``gamma``."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    def plate_of(site):
        (frame,) = [f for f in trace[site]["cond_indep_stack"]]
        size, sub = (tuple(trace[frame.name]["args"]) + (None,))[:2]
        return frame.name, size, sub

    topic_plate, doc_plate = plate_of("topics"), plate_of("theta")

    def guide(*args, **kwargs):
        lam_q = numpyro.param("topics_concentration", lam, constraint=constraints.positive)
        gamma_q = numpyro.param("theta_concentration", gamma, constraint=constraints.positive)
        with numpyro.plate(*topic_plate):
            numpyro.sample("topics", dist.Dirichlet(lam_q))
        with numpyro.plate(*doc_plate) as idx:
            numpyro.sample("theta", dist.Dirichlet(gamma_q[idx]))

    return guide


# stochastic VI is not converged when online VB finds an ELBO higher by this fraction: a merged
# topic costs ~log 2 nats on each word of the two topics, ~2% of the ELBO for K = 20 (measured, K = 5:
# a merged-and-split fit 6187 nats = 9.8% below online VB; good fits 400 nats above it)
LOCAL_OPTIMUM_MARGIN = 0.005


def _local_optimum_check(data, csr, params, alpha, eta, seed):
    """The exact ELBO at stochastic VI's topics (every document's ``gamma`` optimal for them) and
    the exact ELBO of online VB (its restarts) on the same corpus: both maximise the same bound
    over the same family, so a much lower value is a poor local optimum."""
    dtype = jnp.result_type(float)
    triplets = _triplets(csr)
    k, v = np.shape(params["topics_concentration"])
    state = VBState(jnp.asarray(params["topics_concentration"], dtype), jnp.asarray(params["theta_concentration"], dtype),
                    jnp.asarray(0, jnp.int32))  # the VB fits' step dtype: one `_final_e_step` program
    a = jnp.asarray(np.broadcast_to(np.asarray(alpha, float), (k,)), dtype)
    e = jnp.broadcast_to(jnp.asarray(eta, dtype), (v,))
    _, exact = _final_e_step(state, triplets, _dense_corpus(csr), a, e, jnp.asarray(1e-3, dtype),
                             jnp.asarray(100, jnp.int32))
    _, reference = fit(data, csr.shape[0], v, num_topics=k, alpha=alpha, eta=eta, method="online", seed=seed)
    return float(exact), float(reference["elbo"])


def stochastic_vi(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol, learning_rate=0.05,
                  check_every=250, default_batch_size=64):
    """``inference.vi(..., method="stochastic")``: stochastic VI with mini-batches of documents, a
    Dirichlet mean-field guide (:func:`dirichlet_guide`) and Optax Adam on the guide's log
    concentrations: NumPyro's ``TraceMeanField_ELBO`` on the model with the word topics summed out
    (so no ``phi``), the likelihood from reparameterised Dirichlet draws and the Dirichlet KL terms
    in closed form. (With the KL terms from draws too, ``Trace_ELBO``, float32 failed: a topic
    coordinate with concentration near 0.01 lies below float32's smallest normal number, the draw
    is clipped there, ``log x`` is biased upwards, and the gradient pushed the concentrations to
    1e-12 and then NaN.) The mini-batch is the model's ``batch_size`` keyword
    (its subsampling document plate; default ``min(64, D)``). Starts from the same k-means++
    topics as the VB methods. The learning rate drops tenfold at each plateau of the mean loss
    over ``check_every`` steps (relative change < ``tol`` or within 2 standard errors), twice, as in
    ``inference.vi``; the Posterior (full corpus, no subsampling) is built from q's parameters.
    Mini-batch VI can stop where topics are merged or split (1 run in 6 measured): its exact ELBO is
    checked against online VB's (`_local_optimum_check`), and one `LOCAL_OPTIMUM_MARGIN` below it
    is not converged."""
    import optax
    from numpyro.infer import SVI, TraceMeanField_ELBO
    from numpyro.optim import optax_to_numpyro

    full_kwargs = {k: v for k, v in kwargs.items() if k != "batch_size"}
    # concrete traces: priors and data as the model sees them, the latents at a uniform point (a
    # prior draw compiled JAX's Dirichlet sampler per shape, ~2 s each in a new process)
    full_trace = _model.concrete_trace(model, args, full_kwargs, seed)
    data, num_docs, vocab_size, alpha, eta = lda_problem(full_trace)
    batch_size = kwargs.get("batch_size") or min(default_batch_size, num_docs)
    run_kwargs = {**full_kwargs, "batch_size": batch_size}
    try:
        run_trace = _model.concrete_trace(model, args, run_kwargs, seed)
    except TypeError as exc:
        if "batch_size" not in str(exc):
            raise
        raise ValueError("method='stochastic' needs a model with a `batch_size` keyword (documents per "
                         "subsampled step), as probmodels.lda") from exc
    csr = _corpus(data, num_docs, vocab_size)
    state = init(np.random.default_rng(seed), csr, len(alpha), np.asarray(alpha, float))
    guide = dirichlet_guide(run_trace, np.asarray(state.gamma), np.asarray(state.lam))
    optim = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate)
    svi = SVI(model, guide, optax_to_numpyro(optim), TraceMeanField_ELBO())
    t0 = time.perf_counter()
    svi_state = svi.init(jax.random.PRNGKey(seed), *args, **run_kwargs)

    @jax.jit
    def chunk(s):
        return lax.scan(lambda c, _: svi.update(c, *args, **run_kwargs), s, None, length=check_every)

    losses, level, prev, converged, done = [], 0, None, False, 0
    bar = _progress_bar(progress, steps, "stochastic")
    while done < steps:
        svi_state, loss = chunk(svi_state)
        loss = np.asarray(loss)
        done += check_every
        losses.append(loss)
        if not np.all(np.isfinite(loss)):
            raise FloatingPointError(f"LDA stochastic VI: the ELBO became non-finite after {done} steps; lower "
                                     f"learning_rate (now {learning_rate})")
        mean, se = loss.mean(), 4.0 * loss.std() / np.sqrt(len(loss))  # x4: autocorrelated losses
        if bar is not None:
            bar.update(check_every)
            bar.set_postfix(elbo=f"{-mean:.6g}")
        if prev is not None and abs(mean - prev) <= max(tol * abs(mean), 2.0 * se):
            if level == len(LR_LEVELS) - 1:
                converged = True
                break
            level += 1
            i, (params, opt) = svi_state.optim_state
            hyper = {**opt.hyperparams, "learning_rate": jnp.asarray(learning_rate * LR_LEVELS[level],
                                                                     jnp.asarray(opt.hyperparams["learning_rate"]).dtype)}
            svi_state = svi_state._replace(optim_state=(i, (params, opt._replace(hyperparams=hyper))))
            prev = None
            continue
        prev = mean
    if bar is not None:
        bar.close()
    if not converged:
        warnings.warn(f"LDA stochastic VI stopped at steps={steps} before the loss settled (tol={tol}): raise "
                      "steps or tol", skip_file_prefixes=_options.INTERNAL)
    params = svi.get_params(svi_state)
    trace_elbo = -np.concatenate(losses)
    exact, reference = _local_optimum_check(data, csr, params, alpha, eta, seed)
    behind = reference - exact > LOCAL_OPTIMUM_MARGIN * abs(reference)
    if behind:
        warnings.warn(f"LDA stochastic VI stopped at a poor local optimum (topics merged or split): its exact "
                      f"ELBO {exact:.6g} is {reference - exact:.3g} nats below online VB's {reference:.6g} on "
                      "this corpus: converged=False; use method='online' (the default)",
                      skip_file_prefixes=_options.INTERNAL)
    diagnostics = {"converged": convergence.vi(converged, trace_elbo[-1]) and not behind, "method": "stochastic",
                   "elbo_trace": trace_elbo, "steps": done, "exact_elbo": exact, "online_vb_elbo": reference,
                   "batch_size": int(batch_size), "learning_rate": float(learning_rate),
                   "fit_seconds": time.perf_counter() - t0}
    return _posterior_from_q(model, args, full_kwargs, full_trace, np.asarray(params["theta_concentration"], float),
                             np.asarray(params["topics_concentration"], float), diagnostics, num_samples, seed)
