"""inference.lda_vb: exact checks of the E-step, sufficient statistics and ELBO (dense formulas,
scikit-learn, the K = 1 conjugate case), monotone batch ELBO, topic recovery on a simulated
corpus (K = 5, V = 200, D = 300), the Posterior contract, option checks and compile counts."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.sparse
import scipy.stats
from numpyro.infer.util import log_density
from scipy.optimize import linear_sum_assignment
from scipy.special import digamma, gammaln, logsumexp

import inference
from inference import lda_vb
from inference.lda_vb import Triplets, fit

# jitted once here: op-by-op (eager) digamma / gammaln compile slowly
elbo = jax.jit(lda_vb.elbo)
e_step = jax.jit(lda_vb.e_step)
expected_log = jax.jit(lda_vb.expected_log)
sufficient_statistics = jax.jit(lda_vb.sufficient_statistics)
from probmodels.datasets import lda_corpus
from probmodels.lda import lda
from probmodels.text import document_terms


def _triplets(counts):
    t = document_terms(counts)
    return Triplets(t.doc, t.word, t.count.astype(float)), t.shape


def _dense_elbo(counts, gamma, lam, alpha, eta):
    """Blei et al. (2003) ELBO with explicit phi (D, V, K) at its optimum given gamma and lam."""
    el_t = digamma(gamma) - digamma(gamma.sum(1, keepdims=True))
    el_b = digamma(lam) - digamma(lam.sum(1, keepdims=True))
    log_phi = el_t[:, None, :] + el_b.T[None]
    phi = np.exp(log_phi - logsumexp(log_phi, -1, keepdims=True))
    value = np.sum(counts[..., None] * phi * (log_phi - np.log(phi)))  # E[log p(z, w)] + H(q(z))
    for conc, prior in ((gamma, alpha), (lam, eta)):
        el = digamma(conc) - digamma(conc.sum(1, keepdims=True))
        value += np.sum((prior - conc) * el) + np.sum(gammaln(conc) - gammaln(prior))
        value += np.sum(gammaln(prior * conc.shape[1]) - gammaln(conc.sum(1)))
    return value


@pytest.fixture(scope="module")
def small():
    counts = lda_corpus(15, vocab_size=12, num_topics=3, seed=0, doc_length=25.0).counts
    rng = np.random.default_rng(1)
    return counts, rng.gamma(2.0, size=(15, 3)) + 0.1, rng.gamma(1.0, size=(3, 12)) + 0.01


def test_elbo_matches_dense_formula(small):
    counts, gamma, lam = small
    data, _ = _triplets(counts)
    got = elbo(data, jnp.asarray(gamma), jnp.asarray(lam), jnp.full(3, 0.1), jnp.full(12, 0.01))
    np.testing.assert_allclose(got, _dense_elbo(counts, gamma, lam, 0.1, 0.01), rtol=1e-12)


def test_e_step_and_statistics_match_dense_updates(small):
    counts, gamma, lam = small
    data, _ = _triplets(counts)
    weights = np.exp(np.asarray(expected_log(jnp.asarray(lam))))
    got, info = e_step(data, jnp.asarray(gamma), jnp.asarray(weights), jnp.full(3, 0.1), 1e-12, 5000)
    g = gamma.copy()
    for _ in range(int(info.iterations)):  # the same fixed-point map, dense
        et = np.exp(digamma(g) - digamma(g.sum(1, keepdims=True)))
        g = 0.1 + et * ((counts / (et @ weights)) @ weights.T)
    np.testing.assert_allclose(got, g, rtol=1e-10)
    et = np.exp(digamma(g) - digamma(g.sum(1, keepdims=True)))
    phi = et[:, None, :] * weights.T[None]
    phi /= phi.sum(-1, keepdims=True)
    expected = np.einsum("dv,dvk->kv", counts, phi)
    np.testing.assert_allclose(sufficient_statistics(data, expected_log(jnp.asarray(g)), jnp.asarray(weights)),
                               expected, rtol=1e-10)


def test_agrees_with_scikit_learn(small):
    sklearn = pytest.importorskip("sklearn.decomposition")
    counts, gamma, lam = small
    data, _ = _triplets(counts)
    model = sklearn.LatentDirichletAllocation(3, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=1,
                                              mean_change_tol=1e-12, max_doc_update_iter=5000, random_state=0)
    model.fit(counts)
    model.components_ = lam.copy()
    np.testing.assert_allclose(model._approx_bound(counts, gamma, False),
                               elbo(data, jnp.asarray(gamma), jnp.asarray(lam), jnp.full(3, 0.1), jnp.full(12, 0.01)),
                               rtol=1e-8)  # scikit-learn's digamma is an asymptotic series (~1e-10)
    # E-steps from their start (gamma = 1), at topics near the truth so the fixed point is unique
    lam = 30.0 * lda_corpus(15, vocab_size=12, num_topics=3, seed=0, doc_length=25.0).topics + 0.05
    model.components_ = lam
    model.exp_dirichlet_component_ = np.exp(digamma(lam) - digamma(lam.sum(1, keepdims=True)))  # their cache
    theirs, _ = model._e_step(counts.astype(float), cal_sstats=False, random_init=False)
    weights = jnp.exp(expected_log(jnp.asarray(lam)))
    ours, _ = e_step(data, jnp.ones((15, 3)), weights, jnp.full(3, 0.1), 1e-12, 5000)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_one_topic_elbo_is_the_exact_evidence():
    """K = 1: theta is fixed and q(topics) = Dirichlet(eta + counts) is the exact posterior, so one
    batch sweep gives the Dirichlet-multinomial log evidence exactly, and online VB (mini-batch
    statistics scaled by D / |B|) approaches it from below."""
    counts = lda_corpus(20, vocab_size=15, num_topics=2, seed=2).counts
    data, (num_docs, vocab_size) = _triplets(counts)
    total = counts.sum(0) + 0.05
    exact = gammaln(0.05 * vocab_size) - vocab_size * gammaln(0.05) + gammaln(total).sum() - gammaln(total.sum())
    _, diag = fit(data, num_docs, vocab_size, num_topics=1, alpha=0.1, eta=0.05, method="batch", num_restarts=1)
    np.testing.assert_allclose(diag["elbo_trace"][0], exact, rtol=1e-12)
    _, diag = fit(data, num_docs, vocab_size, num_topics=1, alpha=0.1, eta=0.05, method="online", batch_size=5,
                  num_restarts=1, tol=1e-12, steps=300)  # 4 mini-batches scaled by D / 5 (measured gap 7e-8)
    assert exact - 1e-6 * abs(exact) < diag["elbo"] <= exact + 1e-9


def test_batch_elbo_never_decreases():
    # corpus 1 and K = 5: the batch sweep program of the recovery, restart and tuning tests below
    counts = lda_corpus(300, vocab_size=200, num_topics=5, seed=1).counts
    data, (num_docs, vocab_size) = _triplets(counts)
    for start in ("seeded", "random"):
        _, diag = fit(data, num_docs, vocab_size, num_topics=5, alpha=0.1, eta=0.01, method="batch", tol=1e-10,
                      steps=60, start=start, num_restarts=1, e_tol=0.1)
        trace = diag["elbo_trace"]
        assert len(trace) > 5
        assert np.all(np.diff(trace) >= -1e-10 * np.abs(trace[1:])), np.diff(trace).min()


@pytest.fixture(scope="module")
def simulated():
    return lda_corpus(300, vocab_size=200, num_topics=5, seed=0)


def _topic_tv(true, lam):
    est = lam / lam.sum(1, keepdims=True)
    tv = 0.5 * np.abs(true[:, None] - est[None]).sum(-1)
    rows, cols = linear_sum_assignment(tv)
    return tv[rows, cols]


@pytest.fixture(scope="module")
def fits(simulated):
    """Both methods through ``inference.vi`` on the simulated corpus (shared by several tests). As a
    sparse matrix, as the float64 refit test below passes it: the same programs (a dense corpus is a
    constant of per-call programs; dense and sparse inputs agree, tests/probmodels/test_lda.py)."""
    counts = scipy.sparse.csr_matrix(simulated.counts)
    return {method: inference.vi(lda, counts, num_topics=5, method=method, num_samples=200, seed=3,
                                 progress=False) for method in ("batch", "online")}


@pytest.mark.parametrize("method", ["batch", "online"])
def test_recovers_simulated_topics(simulated, fits, method):
    """K = 5, V = 200, D = 300 from the LDA generative process (alpha = 0.1, eta = 0.01, ~100 words
    per document): mean total-variation distance to the true topics after Hungarian matching
    < 0.1 (measured: batch 0.043, online 0.022)."""
    post = fits[method]
    tv = _topic_tv(simulated.topics, post.approximation["topics_concentration"])
    assert post.diagnostics["converged"]
    assert tv.mean() < 0.1, tv


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_refit_with_another_seed_compiles_nothing(simulated, dtype):
    """A sparse corpus (keyed by its contents; a dense one needs concrete values and stays a
    constant of per-call programs): every program of a refit is kept, the key an argument (the
    Dirichlet concentrations were read by a fresh ``jax.jit`` per fit: one compilation, most of
    a 2.3 s refit of the demo's Reuters case). In float32 (JAX's default) as in float64, each on
    the corpus and sizes its dtype's other fits use (float64: `fits`; float32: `_separated(0)` of
    the float32 tests below), so most programs of the first fit are compiled once for both."""
    corpus, num_topics, num_samples = (simulated, 5, 200) if dtype == "float64" else (_separated(0), 3, 50)
    counts = scipy.sparse.csr_matrix(corpus.counts)
    kw = dict(num_topics=num_topics, method="batch", num_samples=num_samples, progress=False)
    with jax.enable_x64(dtype == "float64"):
        inference.vi(lda, counts, seed=3, **kw)
        compiles = []
        listener = lambda event, secs, **kw: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            post = inference.vi(lda, counts, seed=4, **kw)
        finally:
            jax._src.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    assert post.diagnostics["converged"] and post.samples["topics"].dtype == np.dtype(dtype)
    assert _topic_tv(corpus.topics, post.approximation["topics_concentration"]).mean() < 0.1


@pytest.mark.parametrize("corpus_seed", [1, pytest.param(2, marks=pytest.mark.slow)])  # each corpus: own compiles
@pytest.mark.parametrize("method", ["batch", "online"])
def test_recovery_holds_across_seeds_and_corpora(method, corpus_seed):
    """The same check through `fit` for two more corpora x two seeds (measured worst: batch 0.056,
    online 0.027); restarts matter here (single starts failed on about 1 run in 5). Corpus 2 runs
    with the slow checks; corpus 1's programs also serve the restart and compile-count tests."""
    worst = 0.0
    corpus = lda_corpus(300, vocab_size=200, num_topics=5, seed=corpus_seed)
    data, (num_docs, vocab_size) = _triplets(corpus.counts)
    for seed in (0, 10):
        state, _ = fit(data, num_docs, vocab_size, num_topics=5, alpha=0.1, eta=0.01, method=method, seed=seed)
        worst = max(worst, _topic_tv(corpus.topics, np.asarray(state.lam)).mean())
    assert worst < 0.1


_LOG_JOINT = {}


def _log_joint(counts, num_topics, values):
    """``log_density(lda, (counts,), ...)`` at ``values``: one compiled program per corpus (kept
    alive here, so its ``id`` is not reused) and K, shared by both methods' tests (run eagerly,
    each of its ~70 operations was compiled apart)."""
    key = (id(counts), num_topics)
    if key not in _LOG_JOINT:
        _LOG_JOINT[key] = jax.jit(lambda v: log_density(lda, (counts,), dict(num_topics=num_topics), v)[0])
    return _LOG_JOINT[key](values)


@pytest.mark.parametrize("method", ["batch", "online"])
def test_posterior_contract(simulated, fits, method, tmp_path):
    post, counts = fits[method], simulated.counts
    assert post.engine == "vi" and post.evidence_method == "elbo"
    assert post.samples["theta"].shape == (1, 200, 300, 5) and post.samples["topics"].shape == (1, 200, 5, 200)
    assert post.log_likelihood["counts"].shape == (1, 200, 300)
    assert post.log_evidence == post.diagnostics["elbo"] and post.diagnostics["converged"]
    lam = post.approximation["topics_concentration"]
    # draws' mean within 5 Monte Carlo standard errors of q's mean (entries with concentration >= 1:
    # below that the Beta marginals are too skewed for 200 draws' mean to be near normal)
    total = lam.sum(1, keepdims=True)
    se = np.sqrt(lam * (total - lam) / total**2 / (total + 1) / 200)
    big = lam >= 1.0
    assert big.sum() > 100 and np.all(np.abs(post.mean("topics") - lam / total)[big] < 5 * se[big])
    for name in ("lp", "log_q"):
        assert np.all(np.isfinite(post.sample_stats[name]))
    # lp is the model's log joint at the draw; log_q the Dirichlet densities of q there.
    draw = {k: v[0, 0] for k, v in post.samples.items()}
    np.testing.assert_allclose(post.sample_stats["lp"][0, 0], _log_joint(counts, 5, draw), rtol=1e-10)
    gamma = post.approximation["theta_concentration"]
    log_q = sum(scipy.stats.dirichlet.logpdf(x, c) for x, c in zip(draw["theta"], gamma))
    log_q += sum(scipy.stats.dirichlet.logpdf(x / x.sum(), c) for x, c in zip(draw["topics"], lam))
    np.testing.assert_allclose(post.sample_stats["log_q"][0, 0], log_q, rtol=1e-8)
    dt = post.to_arviz()
    assert dt["posterior"]["theta"].dims == ("chain", "draw", "document", "topic")
    loo = az.loo_approximate_posterior(dt, log_p=dt.sample_stats["lp"], log_q=dt.sample_stats["log_q"])
    assert np.isfinite(loo.elpd)
    post.save(tmp_path / "lda.nc")
    back = inference.load(tmp_path / "lda.nc")
    np.testing.assert_array_equal(back.samples["topics"], post.samples["topics"])
    np.testing.assert_array_equal(back.approximation["topics_concentration"], lam)


def test_restarts_continue_the_best_start():
    corpus = lda_corpus(300, vocab_size=200, num_topics=5, seed=1)
    data, (num_docs, vocab_size) = _triplets(corpus.counts)
    _, diag = fit(data, num_docs, vocab_size, num_topics=5, alpha=0.1, eta=0.01, method="online", num_restarts=4)
    assert len(diag["restart_elbos"]) == 4
    assert diag["restart_chosen"] == int(np.argmax(diag["restart_elbos"]))


def test_minibatches_visit_every_document_once_per_pass():
    counts = scipy.sparse.csr_matrix(lda_corpus(23, vocab_size=30, num_topics=2, seed=5).counts.astype(float))
    strata, max_entries = lda_vb._strata(counts, 4)
    batches = lda_vb._pass_batches(np.random.default_rng(0), counts, strata, max_entries)
    docs = np.asarray(batches.docs)
    assert sorted(docs[docs < 23].tolist()) == list(range(23))
    rebuilt = np.zeros(counts.shape)
    for b in range(4):
        d = np.asarray(batches.data.doc[b])
        np.add.at(rebuilt, (docs[b][d], np.asarray(batches.data.word[b])), np.asarray(batches.data.count[b]))
    np.testing.assert_array_equal(rebuilt, counts.toarray())
    sizes = [np.count_nonzero(np.asarray(batches.data.count[b])) for b in range(4)]
    assert max(sizes) - min(sizes) <= max(np.diff(counts.indptr))  # strata balance the batches


def test_tuning_numbers_do_not_recompile():
    # corpus 1: the shapes the recovery and restart tests compile (one compile per worker for all)
    data, (num_docs, vocab_size) = _triplets(lda_corpus(300, vocab_size=200, num_topics=5, seed=1).counts)
    common = dict(num_topics=5, alpha=0.1, eta=0.01, num_restarts=1, steps=8)
    fit(data, num_docs, vocab_size, method="online", **common)
    fit(data, num_docs, vocab_size, method="batch", **common)
    sizes = lda_vb._online_pass._cache_size(), lda_vb._batch_update._cache_size()
    fit(data, num_docs, vocab_size, method="online", tau0=64.0, kappa=0.9, e_tol=1e-4,
        e_max_iter=50, seed=3, **{**common, "alpha": 0.5, "eta": 0.2})
    fit(data, num_docs, vocab_size, method="batch", e_tol=1e-5, seed=4, **{**common, "alpha": 0.3})
    assert (lda_vb._online_pass._cache_size(), lda_vb._batch_update._cache_size()) == sizes


@pytest.mark.parametrize("options, match", [
    (dict(kappa=0.4), "kappa must lie in"), (dict(start="kmeans"), "start must be"),
    (dict(batch_size=0), "batch_size must be >= 1"), (dict(method="gibbs"), "method must be one of"),
    (dict(num_restarts=0), "num_restarts must be >= 1"), (dict(tol=-1.0), "tol must be a positive"),
])
def test_bad_options(options, match):
    data, (num_docs, vocab_size) = _triplets(np.array([[1, 2], [3, 0]]))
    with pytest.raises(ValueError, match=match):
        fit(data, num_docs, vocab_size, num_topics=2, alpha=0.1, eta=0.1, **{"method": "batch", **options})


def test_methods_reject_models_that_are_not_lda_shaped(simulated):
    import probmodels
    from inference._model import structure_trace

    # abstract traces (what the engines read the sites from): run eagerly, each of their
    # operations was compiled apart (~37 programs); the checks read the sites and plates only
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="LDA-shaped model"):
        lda_vb.lda_problem(structure_trace(probmodels.linear_regression, (X, X[:, 0]), {}))
    holder = {}

    def run():
        with numpyro.handlers.seed(rng_seed=0):  # a subsampling plate: the methods refuse it
            holder["tr"] = numpyro.handlers.trace(lda).get_trace(simulated.counts, num_topics=5, batch_size=50)

    jax.eval_shape(run)
    with pytest.raises(ValueError, match="subsamples"):
        lda_vb.lda_problem(holder["tr"])


def test_sweep_memory_is_nonzeros_times_topics():
    """A compiled batch sweep on a sparse corpus with V = 50000 words: XLA's scratch memory stays
    within a small multiple of (nonzeros + D + V) x K floats (measured about 13x: a few (K, V)
    arrays of the topics' digammas and weights), far below one D x V x K array (400 MB here)."""
    rng = np.random.default_rng(0)
    num_docs, vocab_size, num_topics, per_doc = 200, 50_000, 5, 20
    rows = np.repeat(np.arange(num_docs), per_doc)
    counts = scipy.sparse.csr_matrix((np.ones(len(rows)), (rows, rng.integers(0, vocab_size, len(rows)))),
                                     shape=(num_docs, vocab_size))
    data, _ = _triplets(counts)
    state = lda_vb.VBState(jnp.ones((num_topics, vocab_size)), jnp.ones((num_docs, num_topics)), jnp.asarray(0))
    compiled = lda_vb._batch_update.lower(state, Triplets(*map(jnp.asarray, data)), jnp.full(num_topics, 0.1),
                                          jnp.full(vocab_size, 0.01), 1e-3, 100).compile()
    bound = 8 * (counts.nnz + num_docs + vocab_size) * num_topics
    assert compiled.memory_analysis().temp_size_in_bytes < 30 * bound < 8 * num_docs * vocab_size * num_topics


def _stochastic(corpus, num_topics, batch_size):
    return inference.vi(lda, corpus.counts, num_topics=num_topics, batch_size=batch_size, method="stochastic",
                        num_samples=20, tol=1e-4, progress=False)


@pytest.mark.slow  # the same checks run by default in float32 (test_every_method_is_finite_and_accurate_in_float32)
def test_stochastic_vi_recovers_topics_of_a_small_corpus():
    """Mini-batch SVI with the Dirichlet mean-field guide and Adam (K = 3, V = 40, D = 120, batches
    of 30 documents): mean total variation to the true topics < 0.1 (measured 0.004; its k-means++
    start is at 0.31), and the Posterior covers every document (the fit subsampled, q does not)."""
    corpus = lda_corpus(120, vocab_size=40, num_topics=3, seed=0)
    post = _stochastic(corpus, 3, 30)
    assert post.diagnostics["converged"] and post.diagnostics["batch_size"] == 30
    assert post.diagnostics["exact_elbo"] >= (1 + lda_vb.LOCAL_OPTIMUM_MARGIN) * post.diagnostics["online_vb_elbo"]
    assert _topic_tv(corpus.topics, post.approximation["topics_concentration"]).mean() < 0.1
    assert post.samples["theta"].shape == (1, 20, 120, 3) and post.log_likelihood["counts"].shape == (1, 20, 120)
    assert "batch_size" not in post.model_kwargs
    draw = {k: v[0, 0] for k, v in post.samples.items()}
    lp, _ = log_density(lda, (corpus.counts,), dict(num_topics=3), draw)
    np.testing.assert_allclose(post.sample_stats["lp"][0, 0], lp, rtol=1e-10)
    assert post.log_evidence == pytest.approx(np.mean(post.sample_stats["lp"] - post.sample_stats["log_q"]))


@pytest.mark.slow
def test_stochastic_vi_recovers_simulated_topics(simulated):
    """The issue's check for mini-batch SVI (K = 5, V = 200, D = 300, batches of 50): mean total
    variation < 0.1 (measured 0.013 from a start at 0.69). Slow (about 1700 SVI steps)."""
    post = _stochastic(simulated, 5, 50)
    assert post.diagnostics["converged"]
    assert _topic_tv(simulated.topics, post.approximation["topics_concentration"]).mean() < 0.1


def test_local_optimum_check_flags_merged_and_split_topics():
    """The check behind stochastic VI's ``converged``: the exact ELBO at given topics against online
    VB's. At the true topics it is not behind; with two topics merged into one and a third split
    into two copies (what a poor stochastic run returned, issue 21) it is ~10% behind, far past
    `LOCAL_OPTIMUM_MARGIN`. The small corpus of the stochastic VI test, run as that fit runs it
    (inside an engine call's `inference.compiled.scope`: its matrix-product precision is part of
    every jitted program's key), so the online VB and final E-step programs are reused (3
    compiles, ~13 s)."""
    corpus = lda_corpus(120, vocab_size=40, num_topics=3, seed=0)
    csr = scipy.sparse.csr_matrix(corpus.counts)
    coo = csr.tocoo()
    data = Triplets(jnp.asarray(coo.row, jnp.int32), jnp.asarray(coo.col, jnp.int32), jnp.asarray(coo.data))
    t = corpus.topics
    for topics, behind in ((t, False), (np.stack([(t[0] + t[1]) / 2, t[2], t[2]]), True)):
        params = {"topics_concentration": 0.01 + 2000 * topics, "theta_concentration": np.ones((120, 3))}
        with inference.compiled.scope():
            exact, reference = lda_vb._local_optimum_check(data, csr, params, np.full(3, 1 / 3), 0.01, 0)
        assert (reference - exact > lda_vb.LOCAL_OPTIMUM_MARGIN * abs(reference)) == behind, (exact, reference)


@pytest.mark.slow
def test_stochastic_vi_at_a_poor_local_optimum_is_not_converged():
    """The run the issue's measurements found (K = 5, V = 200, D = 300, corpus seed 1, fit seed 0):
    a merged and a split topic (mean total variation 0.31), exact ELBO -69055 against online VB's
    -63189: reported converged=False with a warning (was converged=True); seed 1 (0.018) stays
    converged (its ELBO -62483 is above online VB's)."""
    corpus = lda_corpus(300, vocab_size=200, num_topics=5, seed=1)
    with pytest.warns(UserWarning, match="poor local optimum"):
        bad = inference.vi(lda, corpus.counts, num_topics=5, method="stochastic", seed=0, progress=False)
    assert not bad.diagnostics["converged"] and _topic_tv(corpus.topics, bad.approximation["topics_concentration"]).mean() > 0.2
    good = inference.vi(lda, corpus.counts, num_topics=5, method="stochastic", seed=1, progress=False)
    assert good.diagnostics["converged"] and good.diagnostics["exact_elbo"] > good.diagnostics["online_vb_elbo"]


def test_stochastic_vi_needs_a_batch_size_keyword():
    def no_batch_keyword(counts, num_topics=2):
        return lda(counts, num_topics)

    no_batch_keyword.vi_methods = lda.vi_methods
    with pytest.raises(ValueError, match="needs a model with a `batch_size` keyword"):
        inference.vi(no_batch_keyword, np.array([[1, 2], [3, 0]]), method="stochastic", progress=False)


def test_dense_grouped_layouts_compute_the_same_updates():
    """The fast paths (documents as padded rows in groups by length) against the triplet forms:
    the full-corpus E-step, one online update from the same mini-batch, and one batch sweep."""
    counts = lda_corpus(40, vocab_size=25, num_topics=3, seed=2, doc_length=30.0).counts
    csr = scipy.sparse.csr_matrix(counts.astype(float))
    data, (num_docs, vocab_size) = _triplets(counts)
    rng = np.random.default_rng(3)
    state = lda_vb.init(rng, csr, 3, np.full(3, 0.1))
    alpha, eta = jnp.full(3, 0.1), jnp.full(vocab_size, 0.01)
    weights = jnp.exp(expected_log(state.lam))
    dense = lda_vb._dense_corpus(csr, groups=3)
    assert [w.shape[0] for w in dense[1]] == [13, 13, 14] and dense[1][0].shape[1] >= dense[1][-1].shape[1]
    want, info = e_step(data, state.gamma, weights, alpha, 1e-12, 5000)
    got, _ = jax.jit(lda_vb._final_e_step)(state, data, dense, alpha, eta, 1e-12, 5000)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert 1 < int(info.iterations) < 5000

    strata, layout = lda_vb._strata(csr, 3, groups=2)
    assert len(layout) == 2 and layout[0][1] >= layout[1][1]
    batch = jax.tree_util.tree_map(lambda a: a[0], lda_vb._pass_batches(rng, csr, strata, layout))
    one = lda_vb.MiniBatch(batch.docs, lda_vb.Triplets(*(np.ravel(a) for a in batch.data)))
    # the same documents as triplets in one group of the longest length: the general layout
    width = max(length for _, length in layout)
    flat = [np.zeros(len(batch.docs) * width, a.dtype) for a in batch.data]
    starts = np.repeat([length for _, length in layout], [slots for slots, _ in layout])
    starts = np.cumsum(starts) - starts
    for slot, start in enumerate(starts):
        n = layout[0][1] if slot < layout[0][0] else layout[1][1]
        for f, a in zip(flat, batch.data):
            f[slot * width:slot * width + n] = np.asarray(a)[start:start + n]
    plain = lda_vb.MiniBatch(batch.docs, lda_vb.Triplets(*flat))
    args = (alpha, eta, jnp.asarray(10.0), jnp.asarray(0.7), jnp.asarray(1e-10), jnp.asarray(1000))
    a, ia = jax.jit(lda_vb.online_update, static_argnames="layout")(state, one, *args, layout=layout)
    b, ib = jax.jit(lda_vb.online_update)(state, plain, *args)
    np.testing.assert_allclose(a.lam, b.lam, rtol=1e-10)
    np.testing.assert_allclose(a.gamma, b.gamma, rtol=1e-10)
    np.testing.assert_allclose(ia.elbo, ib.elbo, rtol=1e-10)

    update = jax.jit(lda_vb.batch_update)
    a, ia = update(state, data, alpha, eta, 1e-10, 1000, dense)
    b, ib = update(state, data, alpha, eta, 1e-10, 1000)
    np.testing.assert_allclose(a.lam, b.lam, rtol=1e-10)
    np.testing.assert_allclose(a.gamma, b.gamma, rtol=1e-10)
    np.testing.assert_allclose(ia.elbo, ib.elbo, rtol=1e-10)


# ----------------------------------------------------------------------------- float32 (issue 21)
def _separated(seed):
    """K = 3 topics from Dirichlet(0.01) over V = 40 words (nearly disjoint: pairwise total
    variation > 0.9), D = 150 documents of about 80 words."""
    return lda_corpus(150, vocab_size=40, num_topics=3, doc_length=80.0, seed=seed)


def test_float32_sweep_matches_float64_where_rare_words_underflow():
    """One batch sweep from a state where every topic gives a word only ``eta = 0.01``: its
    ``exp E[log topics]`` (digamma(0.01) - digamma(row sum), about -110) is 0 in float32 in every
    topic. The sweep is done with log-space scaling, so float32 matches float64 (relative 1e-4:
    float32's rounding accumulated over a few hundred terms, with each document's fixed point run
    to a change of 1e-5); the old division by the column's maximum, 0, gave NaN."""
    counts = _separated(0).counts
    data, (num_docs, vocab_size) = _triplets(counts)
    lam = np.full((3, vocab_size), 0.01)
    lam[:, :30] += np.random.default_rng(0).gamma(1.0, 300.0, size=(3, 30))  # words 30.. rare in every topic
    gamma = np.full((num_docs, 3), 0.1) + counts.sum(1, keepdims=True) / 3.0
    out = {}
    for x64 in (False, True):
        with jax.enable_x64(x64):
            dtype = jnp.result_type(float)
            state = lda_vb.VBState(jnp.asarray(lam, dtype), jnp.asarray(gamma, dtype), jnp.asarray(0))
            new, info = jax.jit(lda_vb.batch_update)(
                state, Triplets(*(jnp.asarray(a, t) for a, t in zip(data, (jnp.int32, jnp.int32, dtype)))),
                jnp.full(3, 0.1, dtype), jnp.full(vocab_size, 0.01, dtype), 1e-5, 1000)
            out[x64] = [np.asarray(a, float) for a in (new.lam, new.gamma, info.elbo)]
    assert all(np.all(np.isfinite(a)) for a in out[False])
    for got, want in zip(out[False], out[True]):
        np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("method", ["batch", "stochastic"])
def test_every_method_is_finite_and_accurate_in_float32(method):
    """Each method with default options in float32 (JAX's default): finite, converged, and the
    topics within the float64 tolerance of the truth (mean total variation < 0.1, as above;
    measured float32 batch 0.02, stochastic 0.01; online, the default, in
    tests/probmodels/test_lda.py). Before: batch (and online) raised at a non-finite ELBO or model
    log density, stochastic at a non-finite ELBO."""
    corpus = _separated(0)
    with jax.enable_x64(False):
        post = inference.vi(lda, corpus.counts, num_topics=3, method=method, num_samples=50, progress=False)
    assert post.samples["topics"].dtype == np.float32 and post.diagnostics["converged"]
    assert np.all(np.isfinite(post.sample_stats["lp"])) and np.all(np.isfinite(post.sample_stats["log_q"]))
    assert np.all(np.isfinite(post.log_likelihood["counts"])) and np.isfinite(post.log_evidence)
    tv = _topic_tv(corpus.topics, post.approximation["topics_concentration"])
    assert tv.mean() < 0.1, tv
    if method == "stochastic":  # the float64 test's checks (slow): the local-optimum check, q over every document
        assert post.diagnostics["exact_elbo"] >= (1 + lda_vb.LOCAL_OPTIMUM_MARGIN) * post.diagnostics["online_vb_elbo"]
        assert post.samples["theta"].shape == (1, 50, 150, 3) and post.log_likelihood["counts"].shape == (1, 50, 150)
        assert "batch_size" not in post.model_kwargs
        draw = {k: v[0, 0] for k, v in post.samples.items()}
        with jax.enable_x64(False):
            lp, _ = log_density(lda, (corpus.counts,), dict(num_topics=3), draw)
        np.testing.assert_allclose(post.sample_stats["lp"][0, 0], lp, rtol=1e-5)
        assert post.log_evidence == pytest.approx(np.mean(post.sample_stats["lp"] - post.sample_stats["log_q"]), rel=1e-5)
