"""The blocked (chunked) forward-backward (inference/hmm/blocked.py) against the sequential fused
passes, brute-force enumeration and the exact log-space passes (underflow fallback), and the
public functions on both sides of the dispatch threshold. float64 (tests/conftest.py) unless
stated. Tolerances: log likelihood 1e-10 relative, probabilities 1e-10 absolute, transition
counts 1e-10 absolute or (sums over up to 1e5 steps) 1e-12 relative."""

import importlib
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from inference import hmm
from inference.hmm import blocked

fbm = importlib.import_module("inference.hmm.forward_backward")  # the package re-exports a function of that name

RTOL_LL, ATOL = 1e-10, 1e-10


def random_hmm(seed, num_steps, k):
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.ones(k))
    trans = rng.dirichlet(np.ones(k), size=k) + 2.0 * np.eye(k)
    trans /= trans.sum(1, keepdims=True)
    return np.log(init), np.log(trans), rng.normal(scale=2.0, size=(num_steps, k))


def blocked_run(li, lt, le, mask, block=None, chunks=None, pairs=True):
    """blocked_one under jit with everything asked for."""
    fn = jax.jit(lambda *a: fbm._blocked_one(*a, True, pairs, True, True, block, chunks))
    return fn(li, lt, le, mask)  # host arrays: the call moves them (a jnp.asarray each compiled a program)


def host(result):
    """A result's arrays as NumPy arrays (same values): indexing JAX arrays compiled a program each."""
    return jax.tree.map(np.asarray, result)


def sequential_run(li, lt, le, mask):
    fn = jax.jit(lambda *a: fbm._fused_one(*a, True, True))
    return fn(li, lt, le, mask)


@jax.jit
def derived(lt, f1, f2):
    """The sequential passes' log likelihood and transition counts, both sides' pairwise marginals:
    one program per shape (run eagerly, ~10 small programs each)."""
    return jnp.sum(f1.log_norms), fbm._fast_counts(lt, f1), fbm._fast_pairwise(lt, f1), fbm._fast_pairwise(lt, f2)


def assert_same(seq, blk, lt):
    (f1, ok1), (f2, ok2) = seq, blk
    assert bool(ok1) and bool(ok2)
    ll1, counts1, pair1, pair2 = derived(lt, f1, f2)
    np.testing.assert_allclose(float(f2.log_likelihood), float(ll1), rtol=RTOL_LL)
    np.testing.assert_allclose(np.asarray(f2.log_norms), np.asarray(f1.log_norms), rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(f2.filtered), np.asarray(f1.filtered), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(f2.marginals), np.asarray(f1.marginals), rtol=0, atol=ATOL)
    # counts are sums over T steps (up to ~5e4 here): 1e-10 absolute or 1e-12 relative
    np.testing.assert_allclose(np.asarray(f2.counts), np.asarray(counts1), rtol=1e-12, atol=ATOL)
    np.testing.assert_allclose(np.asarray(pair2), np.asarray(pair1), rtol=0, atol=ATOL)


_PLANS = [(101, 7, 2), (1000, None, None), (257, 4, 5), (23, 3, 2)]
# every number of states with every plan, each pair once; the masked tail (cut) alternates so that
# every number of states and every plan meets both cuts (all 32 combinations: ~2 s each, compiled).
# By default a Latin-square quarter of them (plan (k index, 0 2 1 3)) runs: every number of states,
# every plan and both cuts; the other 12 (each its own compile) run with the slow checks.
_DEFAULT_PLAN = {0: 0, 1: 2, 2: 1, 3: 3}
_SEQUENTIAL_CASES = [
    pytest.param(k, *plan, 6 * ((i + j) % 2), marks=() if _DEFAULT_PLAN[i] == j else pytest.mark.slow)
    for i, k in enumerate([1, 2, 3, 10]) for j, plan in enumerate(_PLANS)]


@pytest.mark.parametrize("k,num_steps,block,chunks,cut", _SEQUENTIAL_CASES)
def test_blocked_matches_sequential(k, num_steps, block, chunks, cut):
    """T not a multiple of the chunk length or of the segment; several segments; a single
    sequence padded past ``lengths`` (``cut`` masked steps at the end)."""
    li, lt, le = random_hmm(k * 1000 + num_steps + cut, num_steps, k)
    mask = np.arange(num_steps) < num_steps - cut
    assert_same(sequential_run(li, lt, le, mask), blocked_run(li, lt, le, mask, block, chunks), lt)


def test_blocked_default_plan_long_sequence():
    """The dispatcher's own plan (several full segments plus a tail) on a long sequence."""
    num_steps = 3 * blocked.SEGMENT + 1234
    assert blocked.plan(num_steps)[2] == 4
    li, lt, le = random_hmm(7, num_steps, 2)
    mask = np.arange(num_steps) < num_steps - 100
    assert_same(sequential_run(li, lt, le, mask), blocked_run(li, lt, le, mask), lt)


def enumerate_paths(li, lt, le):
    num_steps, k = le.shape
    paths = np.array(list(itertools.product(range(k), repeat=num_steps)))
    joint = li[paths[:, 0]] + le[np.arange(num_steps), paths].sum(1) + lt[paths[:, :-1], paths[:, 1:]].sum(1)
    ll = logsumexp(joint)
    post = np.exp(joint - ll)
    marg = np.stack([np.bincount(paths[:, t], post, minlength=k) for t in range(num_steps)])
    counts = np.zeros((k, k))
    for t in range(num_steps - 1):
        np.add.at(counts, (paths[:, t], paths[:, t + 1]), post)
    filtered = []
    for t in range(num_steps):  # p(z_t | x_{0:t}): the paths' prefixes
        pre = li[paths[:, 0]] + le[np.arange(t + 1), paths[:, : t + 1]].sum(1)
        pre = pre + lt[paths[:, :t], paths[:, 1 : t + 1]].sum(1)
        w = np.exp(pre - logsumexp(pre))  # (each prefix repeats equally often: the ratios hold)
        filtered.append(np.bincount(paths[:, t], w, minlength=k))
    return ll, marg, np.array(filtered), counts


@pytest.mark.parametrize("block,chunks", [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)])
def test_blocked_matches_enumeration(block, chunks):
    li, lt, le = random_hmm(3, 7, 3)
    ll, marg, filtered, counts = enumerate_paths(li, lt, le)
    fused, ok = blocked_run(li, lt, le, np.ones(7, bool), block, chunks)
    assert bool(ok)
    np.testing.assert_allclose(float(fused.log_likelihood), ll, rtol=RTOL_LL)
    np.testing.assert_allclose(float(jnp.sum(fused.log_norms)), ll, rtol=RTOL_LL)
    np.testing.assert_allclose(np.asarray(fused.marginals), marg, atol=ATOL)
    np.testing.assert_allclose(np.asarray(fused.filtered), filtered, atol=ATOL)
    np.testing.assert_allclose(np.asarray(fused.counts), counts, atol=ATOL)


def underflow_case(num_steps):
    """State 1 is reachable from state 0 only with probability ~1e-321 (a subnormal number), and
    one observation (t = 2/3 T) is 800 nats likelier under state 1: the scaled normaliser there
    is ~1e-321 < tiny / eps, so the exact log-space passes must take over."""
    li = np.log(np.array([1.0, 1e-300]))
    lt = np.array([[0.0, -738.0], [np.log(0.5), np.log(0.5)]])
    le = np.zeros((num_steps, 2))
    le[(2 * num_steps) // 3] = [-800.0, 0.0]
    return li, lt, le


@jax.jit
def _exact(li, lt, le, mask):
    """One program (both cases below share it; run eagerly, each operation compiled its own: ~40)."""
    log_filtered, log_norms = fbm._forward_exact(li, lt, le, mask)
    log_beta = fbm._backward_exact(lt, le, mask)
    return jnp.sum(log_norms), fbm.normalise(log_filtered + log_beta)[0]


def exact(li, lt, le, mask):
    ll, log_marginals = _exact(li, lt, le, mask)
    return float(ll), np.exp(np.asarray(log_marginals))


@pytest.mark.parametrize("block,chunks", [(4, 3), (None, None)])
def test_underflow_falls_back_to_exact(block, chunks):
    num_steps = 2 * blocked.MIN_STEPS
    li, lt, le = underflow_case(num_steps)
    mask = np.ones(num_steps, bool)
    _, ok = blocked_run(li, lt, le, mask, block, chunks)
    assert not bool(ok)  # the blocked passes see the underflow
    ll_exact, marg_exact = exact(li, lt, le, mask)
    t_star = (2 * num_steps) // 3
    assert marg_exact[t_star, 1] > 0.99  # the observation does pull the chain into state 1
    assert fbm._use_blocked(num_steps, 2)
    ll, marg = hmm.forward_backward(li, lt, le)  # the public path: blocked, then the fallback
    np.testing.assert_allclose(float(ll), ll_exact, rtol=RTOL_LL)
    np.testing.assert_allclose(np.asarray(marg), marg_exact, atol=ATOL)


# K = 1 above the threshold: slow (its own ~8 programs); the same public blocked path runs by
# default with K = 3, and K = 1 in the blocked passes in test_blocked_matches_sequential[1-101-7-2-0]
@pytest.mark.parametrize("k,num_steps", [
    (2, blocked.MIN_STEPS - 1), (3, blocked.MIN_STEPS + 777),
    pytest.param(1, blocked.MIN_STEPS + 777, marks=pytest.mark.slow),
    pytest.param(1, blocked.MIN_STEPS - 1, marks=pytest.mark.slow),
    pytest.param(3, blocked.MIN_STEPS - 1, marks=pytest.mark.slow),
    pytest.param(2, blocked.MIN_STEPS + 777, marks=pytest.mark.slow),
])
def test_public_functions_across_threshold(k, num_steps):
    """forward_backward / smoother / forward_filter / pairwise_marginals on one sequence (blocked
    at and above MIN_STEPS) equal the same functions on a batch of that one sequence (always the
    sequential passes), with and without ``lengths`` padding. Each case compiles its own programs
    (~10 s): by default both sides of the threshold and K = 2, 3; the rest with the slow checks.
    The batch smoother is the reference for forward_backward too (the same sequential passes give
    its log likelihood and marginals; a batch forward_backward compiled one more program a case)."""
    assert fbm._use_blocked(num_steps, k) == (num_steps >= blocked.MIN_STEPS)
    li, lt, le = random_hmm(k + num_steps, num_steps, k)
    for lengths in (None, num_steps - 50):
        batch_lengths = None if lengths is None else np.array([lengths])
        ref = host(hmm.smoother(li, lt, le[None], lengths=batch_lengths))
        one = hmm.forward_backward(li, lt, le, lengths=lengths)
        np.testing.assert_allclose(float(one.log_likelihood), float(ref.log_likelihood[0]), rtol=RTOL_LL)
        np.testing.assert_allclose(np.asarray(one.marginals), np.asarray(ref.marginals[0]), atol=ATOL)
        one = hmm.smoother(li, lt, le, lengths=lengths)
        np.testing.assert_allclose(float(one.log_likelihood), float(ref.log_likelihood[0]), rtol=RTOL_LL)
        for a, b in zip(one[1:], ref[1:]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b[0]), atol=ATOL)
        one = hmm.forward_filter(li, lt, le, lengths=lengths)
        ref = host(hmm.forward_filter(li, lt, le[None], lengths=batch_lengths))
        np.testing.assert_allclose(float(one.log_likelihood), float(ref.log_likelihood[0]), rtol=RTOL_LL)
        np.testing.assert_allclose(np.asarray(one.filtered), np.asarray(ref.filtered[0]), atol=ATOL)
        np.testing.assert_allclose(np.asarray(one.predictive_log_likelihood),
                                   np.asarray(ref.predictive_log_likelihood[0]), atol=1e-9)
        one = hmm.pairwise_marginals(li, lt, le, lengths=lengths)
        ref = host(hmm.pairwise_marginals(li, lt, le[None], lengths=batch_lengths))
        np.testing.assert_allclose(np.asarray(one), np.asarray(ref[0]), atol=ATOL)


def test_float32_under_jit():
    """float32 inputs stay float32 and agree with the float64 sequential passes to float32
    accuracy (1e-4 relative log likelihood, 1e-4 absolute marginals)."""
    li, lt, le = random_hmm(11, 5000, 2)
    mask = np.ones(5000, bool)
    f64, _ = sequential_run(li, lt, le, mask)
    f32, ok = blocked_run(*(x.astype(np.float32) for x in (li, lt, le)), mask)
    assert bool(ok) and f32.marginals.dtype == jnp.float32 and f32.log_likelihood.dtype == jnp.float32
    np.testing.assert_allclose(float(f32.log_likelihood), float(jnp.sum(f64.log_norms)), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(f32.marginals), np.asarray(f64.marginals), atol=1e-4)


def test_plan_and_bad_block():
    length, per, segments = blocked.plan(10**6)
    assert length * per == blocked.SEGMENT and length * per * segments >= 10**6
    length, per, segments = blocked.plan(5000)
    assert segments == 1 and length * per >= 5000
    with pytest.raises(ValueError, match="block"):
        blocked.plan(100, block=0)
    with pytest.raises(ValueError, match="chunks"):
        blocked.plan(100, chunks=0)
