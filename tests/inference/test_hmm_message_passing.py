"""Exact checks of inference.hmm message passing (forward_backward.py, parallel.py, viterbi.py,
sampling.py) against brute-force enumeration of every state path, plus the Alpaydin ch. 15
balls-and-urns example, padded batches and bad input. float64 throughout (tests/conftest.py)."""

import functools
import inspect
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from inference import hmm
from inference.hmm import parallel as par_passes
from inference.hmm.forward_backward import _run as fb_run
from inference.hmm.forward_backward import backward_pass, forward_pass

K = 3
TOL = 1e-6  # float64 exactness required by issue 5


def random_hmm(seed, num_steps, k=K, zeros=False):
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.ones(k))
    trans = rng.dirichlet(np.ones(k), size=k)
    if zeros:  # left-to-right structure: transitions i -> j < i impossible
        trans = np.triu(trans)
        trans /= trans.sum(1, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.log(init), np.log(trans), rng.normal(scale=2.0, size=(num_steps, k))


def enumerate_paths(log_init, log_trans, log_emission):
    """Every path's joint log p(z, x) and the exact posterior quantities derived from them."""
    num_steps, k = log_emission.shape
    paths = np.array(list(itertools.product(range(k), repeat=num_steps)))
    joint = log_init[paths[:, 0]] + log_emission[np.arange(num_steps), paths].sum(1)
    if num_steps > 1:
        joint = joint + log_trans[paths[:, :-1], paths[:, 1:]].sum(1)
    ll = logsumexp(joint)
    w = np.exp(joint - ll)
    marg = np.zeros((num_steps, k))
    pair = np.zeros((max(num_steps - 1, 0), k, k))
    for t in range(num_steps):
        np.add.at(marg[t], paths[:, t], w)
    for t in range(num_steps - 1):
        np.add.at(pair[t], (paths[:, t], paths[:, t + 1]), w)
    return dict(paths=paths, joint=joint, ll=ll, post=w, marginals=marg, pairwise=pair)


def host(result):
    """A result's arrays as NumPy arrays (same values), for the checks to slice without compiling
    (indexing a JAX array eagerly compiled a program per slice)."""
    return jax.tree.map(np.asarray, result)


CASES = [(t, s) for t in (1, 2, 8) for s in (0, 1)]  # T = 8: every other exact test reuses its compile


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("num_steps,seed", CASES)
def test_forward_backward_matches_enumeration(num_steps, seed, parallel):
    li, lt, le = random_hmm(seed, num_steps)
    ex = enumerate_paths(li, lt, le)
    ll, marginals = hmm.forward_backward(li, lt, le, parallel=parallel)
    np.testing.assert_allclose(ll, ex["ll"], rtol=0, atol=TOL)
    np.testing.assert_allclose(marginals, ex["marginals"], rtol=0, atol=TOL)
    pair = hmm.pairwise_marginals(li, lt, le, parallel=parallel)
    np.testing.assert_allclose(pair, ex["pairwise"], rtol=0, atol=TOL)
    sm = hmm.smoother(li, lt, le, parallel=parallel)
    np.testing.assert_allclose(sm.transition_counts, ex["pairwise"].sum(0), rtol=0, atol=TOL)
    filt = host(hmm.forward_filter(li, lt, le, parallel=parallel))
    np.testing.assert_allclose(filt.log_likelihood, ex["ll"], atol=TOL)
    np.testing.assert_allclose(filt.predictive_log_likelihood.sum(), ex["ll"], atol=TOL)
    # The filter at the last step is the smoother there.
    np.testing.assert_allclose(filt.filtered[-1], ex["marginals"][-1], atol=TOL)


@pytest.mark.parametrize("parallel", [False, True])
def test_filtered_marginals_match_enumeration_of_prefixes(parallel):
    li, lt, le = random_hmm(3, 8)
    filt = host(hmm.forward_filter(li, lt, le, parallel=parallel))
    for t in range(8):
        ex = enumerate_paths(li, lt, le[: t + 1])
        np.testing.assert_allclose(filt.filtered[t], ex["marginals"][t], atol=TOL)


@pytest.mark.parametrize("num_steps,seed", CASES)
def test_viterbi_matches_enumeration(num_steps, seed):
    li, lt, le = random_hmm(seed, num_steps)
    ex = enumerate_paths(li, lt, le)
    path, log_prob = hmm.viterbi(li, lt, le)
    best = np.argmax(ex["joint"])
    np.testing.assert_array_equal(path, ex["paths"][best])
    np.testing.assert_allclose(log_prob, ex["joint"][best], atol=TOL)


@pytest.mark.parametrize("parallel", [False, True])
def test_structural_zeros_left_to_right(parallel):
    """-inf transitions (a left-to-right chain) stay exact and NaN-free."""
    li, lt, le = random_hmm(5, 8, zeros=True)
    ex = enumerate_paths(li, lt, le)
    ll, marginals = hmm.forward_backward(li, lt, le, parallel=parallel)
    assert np.all(np.isfinite(marginals))
    np.testing.assert_allclose(ll, ex["ll"], atol=TOL)
    np.testing.assert_allclose(marginals, ex["marginals"], atol=TOL)
    path, log_prob = hmm.viterbi(li, lt, le)
    np.testing.assert_array_equal(path, ex["paths"][np.argmax(ex["joint"])])
    np.testing.assert_allclose(log_prob, ex["joint"].max(), atol=TOL)
    # 4000 draws: the program the underflow test below compiles for T = 8 (was 200)
    assert np.all(np.diff(np.asarray(hmm.sample_states(jax.random.PRNGKey(0), li, lt, le, 4000)), axis=1) >= 0)


def alpaydin():
    """The example's 4 observations padded to T = 8 (``lengths=4``, padding values ignored): the
    programs the T = 8 enumeration tests compiled serve it (T = 4 compiled 4 of its own)."""
    pi = np.array([0.5, 0.2, 0.3])
    a = np.array([[0.4, 0.3, 0.3], [0.2, 0.6, 0.2], [0.1, 0.1, 0.8]])
    obs = np.array([0, 0, 2, 2])  # O = (S1, S1, S3, S3)
    with np.errstate(divide="ignore"):
        log_emission = np.log(np.eye(3))[obs]  # identity emissions: the states are observed
    padding = np.random.default_rng(6).normal(size=(4, 3))
    return np.log(pi), np.log(a), np.concatenate([log_emission, padding]), obs


@pytest.mark.parametrize("parallel", [False, True])
def test_alpaydin_balls_and_urns(parallel):
    li, lt, le, obs = alpaydin()
    ll, marginals = host(hmm.forward_backward(li, lt, le, parallel=parallel, lengths=4))
    np.testing.assert_allclose(np.exp(ll), 0.048, rtol=1e-12)  # 0.5 * 0.4 * 0.3 * 0.8
    np.testing.assert_allclose(marginals[:4], np.eye(3)[obs], atol=1e-12)
    path, log_prob = host(hmm.viterbi(li, lt, le, lengths=4))
    np.testing.assert_array_equal(path[:4], obs)
    np.testing.assert_allclose(np.exp(log_prob), 0.048, rtol=1e-12)
    draws = np.asarray(hmm.sample_states(jax.random.PRNGKey(0), li, lt, le, 4000, lengths=4))
    np.testing.assert_array_equal(draws[:, :4], np.tile(obs, (4000, 1)))


def test_sequential_and_parallel_share_signature_and_types():
    assert inspect.signature(forward_pass) == inspect.signature(par_passes.forward_pass)
    assert inspect.signature(backward_pass) == inspect.signature(par_passes.backward_pass)
    li, lt, le = random_hmm(0, 8)
    for fn in (hmm.forward_backward, hmm.forward_filter, hmm.smoother, hmm.pairwise_marginals):
        a, b = fn(li, lt, le, parallel=False), fn(li, lt, le, parallel=True)
        assert type(a) is type(b)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert x.shape == y.shape and x.dtype == y.dtype


def test_parallel_agrees_on_a_long_sequence():
    """T = 20000 with sharp emissions: no underflow in either scan, agreement to 1e-6."""
    k = 3
    rng = np.random.default_rng(k)
    li = np.log(rng.dirichlet(np.ones(k)))
    lt = np.log(rng.dirichlet(np.full(k, 0.5), size=k))
    le = rng.normal(scale=20.0, size=(20000, k))
    seq = hmm.smoother(li, lt, le)
    par = hmm.smoother(li, lt, le, parallel=True)
    assert np.isfinite(seq.log_likelihood)
    np.testing.assert_allclose(par.log_likelihood, seq.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(par.marginals, seq.marginals, atol=TOL)
    np.testing.assert_allclose(par.transition_counts, seq.transition_counts, atol=1e-6 * 20000)
    np.testing.assert_allclose(np.asarray(seq.marginals).sum(-1), 1.0, atol=1e-12)


def padded_batch(seed=0):
    rng = np.random.default_rng(seed)
    li, lt, _ = random_hmm(seed, 1)
    lengths = np.array([8, 3, 5, 1])
    le = rng.normal(size=(4, 8, K))  # the values in the padding are ignored
    return li, lt, le, lengths


@pytest.mark.parametrize("parallel", [False, True])
def test_padded_batch_equals_one_sequence_at_a_time(parallel):
    li, lt, le, lengths = padded_batch()
    # results as NumPy arrays: slicing JAX arrays eagerly compiled a program per slice (~60)
    batch = host(hmm.smoother(li, lt, le, parallel=parallel, lengths=lengths))
    vit = host(hmm.viterbi(li, lt, le, lengths=lengths))
    for b, n in enumerate(lengths):  # one padded sequence at a time (lengths=n equals le[:n], tested below)
        one = host(hmm.smoother(li, lt, le[b], parallel=parallel, lengths=n))
        one = one._replace(marginals=one.marginals[:n])
        np.testing.assert_allclose(batch.log_likelihood[b], one.log_likelihood, atol=TOL)
        np.testing.assert_allclose(batch.marginals[b, :n], one.marginals, atol=TOL)
        np.testing.assert_allclose(batch.transition_counts[b], one.transition_counts, atol=TOL)
        # padding repeats the last step
        np.testing.assert_allclose(batch.marginals[b, n:], np.broadcast_to(one.marginals[-1], (8 - n, K)), atol=TOL)
        path, lp = host(hmm.viterbi(li, lt, le[b], lengths=n))
        path = path[:n]
        np.testing.assert_array_equal(vit.path[b, :n], path)
        assert np.all(vit.path[b, n:] == path[-1])
        np.testing.assert_allclose(vit.log_prob[b], lp, atol=TOL)
    draws = np.asarray(hmm.sample_states(jax.random.PRNGKey(1), li, lt, le, 7, lengths=lengths))
    assert draws.shape == (7, 4, 8)
    for b, n in enumerate(lengths):
        assert np.all(draws[:, b, n:] == draws[:, b, n - 1 : n])


def test_single_sequence_lengths_and_missing_steps():
    li, lt, le = random_hmm(2, 8)  # T = 8 and 2: the shapes the enumeration tests compiled
    a = host(hmm.smoother(li, lt, le, lengths=2))
    b = hmm.smoother(li, lt, le[:2])
    np.testing.assert_allclose(a.log_likelihood, b.log_likelihood, atol=TOL)
    np.testing.assert_allclose(a.marginals[:2], b.marginals, atol=TOL)
    np.testing.assert_allclose(a.transition_counts, b.transition_counts, atol=TOL)
    va, vb = host(hmm.viterbi(li, lt, le, lengths=2)), hmm.viterbi(li, lt, le[:2])
    np.testing.assert_array_equal(va.path[:2], vb.path)
    np.testing.assert_allclose(va.log_prob, vb.log_prob, atol=TOL)
    # A missing observation inside a sequence is a zero row: enumeration agrees.
    le_missing = le.copy()
    le_missing[2] = 0.0
    ex = enumerate_paths(li, lt, le_missing)
    np.testing.assert_allclose(hmm.forward_backward(li, lt, le_missing).marginals, ex["marginals"], atol=TOL)


@pytest.mark.parametrize("num_steps,seed", [(5, 0), (5, 7)])  # one shape: one compile
def test_ffbs_frequencies_match_exact_path_posterior(num_steps, seed):
    """Path frequencies against the exact path posterior: within 5 Monte Carlo standard errors
    wherever the normal approximation holds (n p >= 10), an exact binomial test (Bonferroni over
    the K^T paths, family level 1e-4) for every path, and a chi-square goodness-of-fit p > 1e-3."""
    li, lt, le = random_hmm(seed, num_steps)
    ex = enumerate_paths(li, lt, le)
    n = 40000
    draws = np.asarray(hmm.sample_states(jax.random.PRNGKey(seed), li, lt, le, n))
    index = (draws * K ** np.arange(num_steps)[::-1]).sum(1)  # path -> row of ex["paths"]
    counts = np.bincount(index, minlength=K**num_steps)
    p = ex["post"]
    common = n * p >= 10
    z = np.abs(counts[common] / n - p[common]) / np.sqrt(p[common] * (1 - p[common]) / n)
    assert z.max() < 5.0, f"max |z| = {z.max():.2f}"
    tail = np.minimum(stats.binom.sf(counts - 1, n, p), stats.binom.cdf(counts, n, p))
    assert 2 * tail.min() * len(p) > 1e-4
    big = n * p >= 5
    observed, expected = counts[big], n * p[big]
    chi2 = ((observed - expected) ** 2 / expected).sum()
    rest_obs, rest_exp = n - observed.sum(), n - expected.sum()  # small cells pooled
    dof = big.sum() - 1
    if rest_exp >= 5:
        chi2, dof = chi2 + (rest_obs - rest_exp) ** 2 / rest_exp, dof + 1
    assert stats.chi2.sf(chi2, dof) > 1e-3


def test_impossible_sequence_is_minus_inf_not_nan():
    li, lt, le, _ = alpaydin()
    with np.errstate(divide="ignore"):
        lt = np.log(np.eye(3))  # never leaves its state, yet the data move from S1 to S3
    ll, marginals = hmm.forward_backward(li, lt, le, lengths=4)
    assert float(ll) == -np.inf
    assert not np.any(np.isnan(marginals))


def test_no_recompile_for_new_data_of_the_same_shape():
    li, lt, le = random_hmm(0, 8)
    hmm.forward_backward(li, lt, le)
    before = fb_run._cache_size()
    for seed in range(3):
        hmm.forward_backward(*random_hmm(seed + 10, 8))
    assert fb_run._cache_size() == before


def test_jit_and_grad_through_forward_backward():
    """Traced inputs skip the concrete checks; the log likelihood is differentiable."""
    li, lt, le = random_hmm(0, 8)
    # under jit: one program (the eager grad compiled the forward, its linearisation and transpose apart)
    g = jax.jit(jax.grad(lambda e: hmm.forward_backward(li, lt, e).log_likelihood))(jnp.asarray(le))
    ex = enumerate_paths(li, lt, le)
    np.testing.assert_allclose(g, ex["marginals"], atol=TOL)  # d log p / d log_emission = marginals


# ----------------------------------------------------------------------------- bad input
GOOD = random_hmm(0, 5)


@pytest.mark.parametrize("fn", [hmm.forward_backward, hmm.forward_filter, hmm.smoother,
                                hmm.pairwise_marginals, hmm.viterbi])
@pytest.mark.parametrize("change,match,error", [
    (dict(log_init=np.zeros((3, 1))), "log_init must have shape", ValueError),
    (dict(log_trans=np.zeros((3, 2))), "log_trans must have shape", ValueError),
    (dict(log_init=np.log([0.5, 0.5, 0.5])), "log_init: exp", ValueError),
    (dict(log_trans=np.zeros((3, 3))), "log_trans: each row", ValueError),
    (dict(log_trans=np.full((3, 3), np.nan)), "log_trans contains NaN", ValueError),
    (dict(log_emission=np.zeros(5)), "log_emission must have shape", ValueError),
    (dict(log_emission=np.zeros((5, 2))), "log_emission has 2 states", ValueError),
    (dict(log_emission=np.where(np.eye(5, 3) > 0, np.nan, 0.0)), "log_emission contains NaN", ValueError),
    (dict(log_emission=np.full((5, 3), np.inf)), r"log_emission contains \+inf", ValueError),
    (dict(log_emission=np.array([["a"] * 3] * 5)), "log_emission must be a numeric", TypeError),
    (dict(lengths=6), r"lengths must lie in \[1, T=5\]", ValueError),
    (dict(lengths=0), "lengths must lie", ValueError),
    (dict(lengths=2.5), "lengths must hold integers", TypeError),
    (dict(lengths=np.array([2, 3])), "lengths must be a scalar", ValueError),
])
def test_bad_input(fn, change, match, error):
    kw = dict(zip(("log_init", "log_trans", "log_emission"), GOOD))
    kw.update(change)
    with pytest.raises(error, match=match):
        fn(**kw)


def test_bad_batch_lengths_and_parallel_flag():
    li, lt, le = GOOD
    batch = np.stack([le, le])
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        hmm.forward_backward(li, lt, batch, lengths=np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="parallel must be a bool"):
        hmm.forward_backward(li, lt, le, parallel="yes")


def test_sample_states_bad_input():
    li, lt, le = GOOD
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        hmm.sample_states(key, li, lt, le, 0)
    with pytest.raises(TypeError, match="num_samples must be an int"):
        hmm.sample_states(key, li, lt, le, 2.0)
    with pytest.raises(TypeError, match="key must be a jax PRNG key"):
        hmm.sample_states(0, li, lt, le, 2)
    with pytest.raises(ValueError, match="log_emission contains NaN"):
        hmm.sample_states(key, li, lt, np.full_like(le, np.nan), 2)
    assert hmm.sample_states(jax.random.key(0), li, lt, le, 2).shape == (2, 5)


def underflow_case():
    """State 2 is unreachable from states 0 and 1 and absorbing; x_0 is explained by 0/1, x_1 only
    by state 2 (1000 nats better): the scaled recursions underflow, the exact answer is finite."""
    with np.errstate(divide="ignore"):
        li = np.log([0.35, 0.35, 0.3])
        lt = np.log([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    le = np.array([[0.0, 0.0, -1000.0], [-1000.0, -1000.0, 0.0], [0.1, -0.3, 0.2], [0.5, 0.0, -0.2]])
    le = np.concatenate([le, np.random.default_rng(9).normal(size=(4, 3))])  # T = 8: reuse compiles
    return li, lt, le


@functools.lru_cache(maxsize=None)
def jitted(fn, static_argnames=()):
    """One of the library's internal passes under jit, kept for the tests that call it again:
    run eagerly, each of its operations compiled a program of its own (~60 in this file)."""
    return jax.jit(fn, static_argnames=static_argnames)


@pytest.mark.parametrize("parallel", [False, True])
def test_underflow_falls_back_to_exact_log_space(parallel):
    from inference.hmm.forward_backward import _backward_scaled, _forward_scaled

    li, lt, le = underflow_case()
    mask = np.ones(8, bool)
    assert not bool(jitted(_forward_scaled)(li, lt, le, mask)[2])  # the fast path really underflows here
    ex = enumerate_paths(li, lt, le)
    sm = hmm.smoother(li, lt, le, parallel=parallel)
    np.testing.assert_allclose(sm.log_likelihood, ex["ll"], atol=TOL)
    np.testing.assert_allclose(sm.marginals, ex["marginals"], atol=TOL)
    np.testing.assert_allclose(sm.transition_counts, ex["pairwise"].sum(0), atol=TOL)
    np.testing.assert_allclose(hmm.pairwise_marginals(li, lt, le, parallel=parallel), ex["pairwise"], atol=TOL)
    # the backward messages alone look healthy, but their overlap with the filter underflows:
    with np.errstate(divide="ignore"):
        la = np.log(np.asarray(hmm.forward_filter(li, lt, le).filtered))
        lb = np.asarray(jitted(_backward_scaled)(lt, le, mask)[0])
        assert logsumexp(la[0] + lb[0]) < np.log(np.finfo(float).tiny)
    draws = np.asarray(hmm.sample_states(jax.random.PRNGKey(0), li, lt, le, 4000))
    np.testing.assert_allclose(np.mean(draws[:, 0] == 2), ex["marginals"][0, 2], atol=5 * 0.5 / np.sqrt(4000))


def test_batch_with_one_underflowing_sequence_is_repaired_per_sequence():
    """The fused scaled passes run batched; only the sequence whose normalisers underflow takes
    the exact log-space results (the fallback's cond sits outside vmap), the others keep theirs."""
    from inference.hmm.forward_backward import _fused_one

    li, lt, le_bad = underflow_case()
    le_good = np.random.default_rng(4).normal(size=(8, 3))
    mask = np.ones(8, bool)
    fused_one = jitted(_fused_one, ("backward", "pairs"))
    assert not bool(fused_one(li, lt, le_bad, mask, backward=True, pairs=True)[1])
    assert bool(fused_one(li, lt, le_good, mask, backward=True, pairs=True)[1])
    # the third: underflow at step 1, then padding; (4, 8) like padded_batch(): its smoother's program
    batch = np.stack([le_good, le_bad, le_bad, le_good[::-1]])
    lengths = np.array([8, 8, 2, 5])
    sm = host(hmm.smoother(li, lt, batch, lengths=lengths))
    fb = host(hmm.forward_backward(li, lt, batch, lengths=lengths))
    pair = np.asarray(hmm.pairwise_marginals(li, lt, batch, lengths=lengths))
    for b, n in enumerate(lengths):
        ex = enumerate_paths(li, lt, batch[b, :n])
        np.testing.assert_allclose(sm.log_likelihood[b], ex["ll"], atol=TOL)
        np.testing.assert_allclose(fb.log_likelihood[b], ex["ll"], atol=TOL)
        np.testing.assert_allclose(sm.marginals[b, :n], ex["marginals"], atol=TOL)
        np.testing.assert_allclose(fb.marginals[b, :n], ex["marginals"], atol=TOL)
        np.testing.assert_allclose(sm.transition_counts[b], ex["pairwise"].sum(0), atol=TOL)
        np.testing.assert_allclose(pair[b, : n - 1], ex["pairwise"], atol=TOL)
        np.testing.assert_array_equal(pair[b, n - 1 :], 0.0)


# ----------------------------------------------------------------------------- log likelihood on accelerators
@functools.lru_cache(maxsize=None)
def value_and_grads(fn):
    """``fn(log_init, log_trans, log_emission, mask)`` and its gradient in log_trans and
    log_emission under jit: one program per shape and dtype, 8 here (closing over log_init and the
    mask as constants compiled one per call: 14)."""
    return jax.jit(jax.value_and_grad(fn, argnums=(1, 2)))


def tree_and_scan(li, lt, le, mask):
    """Value and gradient (in log_trans and log_emission) of both exact log likelihoods."""
    from inference.hmm.forward_backward import _scan_log_likelihood

    return [host(value_and_grads(fn)(li, lt, le, mask))
            for fn in (par_passes.sequence_log_likelihood, _scan_log_likelihood)]


@pytest.mark.parametrize("num_steps,seed", [(1, 0), (2, 1), (8, 0), (8, 1)])
def test_tree_log_likelihood_matches_enumeration_and_gradient(num_steps, seed):
    """The tree an accelerator uses (log2 T deep): log p(x) to 1e-10 against enumeration of every
    path, its gradient in log_emission equal to the smoothed marginals, and value and gradients
    equal to the scan's, with structural zeros and with a padded tail."""
    li, lt, le = random_hmm(seed, num_steps, zeros=bool(seed))
    # host masks: jnp.ones / jnp.arange < n ran eagerly, a small program compiled for each
    (v, (gt, ge)), (sv, (sgt, sge)) = tree_and_scan(li, jnp.asarray(lt), jnp.asarray(le), np.ones(num_steps, bool))
    ex = enumerate_paths(li, lt, le)
    np.testing.assert_allclose(v, ex["ll"], rtol=1e-10)
    np.testing.assert_allclose(ge, ex["marginals"], atol=1e-10)
    np.testing.assert_allclose(v, sv, rtol=1e-12)
    np.testing.assert_allclose(gt, sgt, atol=1e-10)
    if num_steps > 2:  # a padded sequence: the first n steps' likelihood, zero gradient in the padding
        n = num_steps // 2 + 1
        mask = np.arange(num_steps) < n
        (v, (gt, ge)), (sv, (sgt, _)) = tree_and_scan(li, jnp.asarray(lt), jnp.asarray(le), mask)
        np.testing.assert_allclose(v, enumerate_paths(li, lt, le[:n])["ll"], rtol=1e-10)
        np.testing.assert_allclose(gt, sgt, atol=1e-10)
        np.testing.assert_array_equal(ge[n:], 0.0)


def test_tree_log_likelihood_in_float32_on_a_long_sequence():
    """float32, T = 600 (not a power of two), K = 3: the tree agrees with the scan to 1e-5 relative
    in value and 1e-3 absolute in the gradient (both sum 600 terms in float32), and with the
    float64 value to 1e-5 relative."""
    li, lt, le = random_hmm(3, 600)
    mask = np.arange(600) < 555
    with jax.enable_x64(False):
        args = [jnp.asarray(a, jnp.float32) for a in (li, lt, le)]
        (v, (gt, ge)), (sv, (sgt, sge)) = tree_and_scan(args[0], args[1], args[2], jnp.asarray(mask))
        assert v.dtype == np.float32 and np.isfinite(v)
    exact = float(hmm.log_likelihood(li, lt, le, lengths=555))
    np.testing.assert_allclose(v, sv, rtol=1e-5)
    np.testing.assert_allclose(v, exact, rtol=1e-5)
    np.testing.assert_allclose(gt, sgt, atol=1e-3)
    np.testing.assert_allclose(ge, sge, atol=1e-4)


def test_log_likelihood_is_the_tree_on_accelerators_and_the_scan_on_cpu():
    """The platform picks the pass when the program is lowered: a GPU program of the model's log
    likelihood has no loop (the tree), a CPU one has the scan's; beyond _TREE_MAX_WORK, the scan."""
    from jax import export

    from inference.hmm.forward_backward import _TREE_MAX_WORK, sequence_log_likelihood

    li, lt, le = (jnp.asarray(a) for a in random_hmm(0, 300))
    mask = jnp.ones(300, bool)
    grad = jax.jit(jax.grad(lambda e: sequence_log_likelihood(li, lt, e, mask)))
    for platform, loops in (("cuda", False), ("rocm", False), ("cpu", True)):
        text = export.export(grad, platforms=[platform])(le).mlir_module()
        assert ("stablehlo.while" in text) == loops, platform
    big = jnp.zeros((_TREE_MAX_WORK // K**3 + 1, K))
    text = export.export(jax.jit(lambda e: sequence_log_likelihood(li, lt, e, jnp.ones(e.shape[0], bool))),
                         platforms=["cuda"])(big).mlir_module()
    assert "stablehlo.while" in text
