"""Forward filter and forward-backward smoother for discrete-state HMMs (scaled, exact fallback).

An HMM is three arrays (as in dynamax): ``log_init`` (K,) = log p(z_0), ``log_trans`` (K, K) with
``log_trans[i, j] = log p(z_t = j | z_{t-1} = i)`` and ``log_emission`` (T, K) with
``log_emission[t, k] = log p(x_t | z_t = k)``. Models only produce these arrays.

The sequential passes use Bishop's scaling: messages are renormalised every step and each step's
emission likelihoods are shifted by their maximum (exp(le_t - max le_t), computed for all steps
at once outside the loop), so the loop body is a matvec, a product and a sum. The public functions
run one fused scan per direction in probability space: the forward scan emits the filtered
marginals and the per-step normalisers, the backward scan combines each backward message with the
filter as it goes and emits the smoothed marginals (and, for :func:`smoother` /
:func:`pairwise_marginals`, the factors of the pairwise marginals, whose sum over time is one
(K, T) x (T, K) contraction; (T, K, K) is only built when asked for). If a normaliser falls
below tiny / eps (1e-292 in float64; e.g. an observation that only a state unreachable from the
current ones explains, 700+ nats better than the others), checked once on the (T,) normalisers
and overlaps, the result is recomputed exactly in log space (full logsumexp, K^2 exponentials per
step) under ``lax.cond``; results are never silently degraded. The loops are ``lax.scan``;
``parallel=True`` selects the associative-scan version of :mod:`inference.hmm.parallel` (O(log T)
depth, O(T K^3) work: for accelerators and small K) with the same signature and result types.

Batches: ``log_emission`` may be (B, T, K) for B sequences padded to a common length T, with
``lengths`` (B,) giving each true length. Steps past a sequence's end use the identity transition
and no emission, so they change nothing (padded marginals repeat the last step). A missing
observation *inside* a sequence is a row of zeros in ``log_emission``. A batch runs the fused
scaled passes under ``vmap``; the exact log-space passes run (outside ``vmap``) only if some
sequence underflowed, and only that sequence takes their results. (``forward_pass`` /
``backward_pass`` / ``smooth_one`` below, used by sampling and the parallel driver, are the
unfused log-space-output versions.)

Example:
    >>> import jax.numpy as jnp
    >>> from inference.hmm import forward_backward
    >>> log_init = jnp.log(jnp.array([0.5, 0.5]))
    >>> log_trans = jnp.log(jnp.array([[0.9, 0.1], [0.2, 0.8]]))
    >>> log_emission = jnp.log(jnp.array([[0.9, 0.2], [0.1, 0.8], [0.9, 0.2]]))
    >>> ll, marginals = forward_backward(log_init, log_trans, log_emission)
    >>> marginals.shape
    (3, 2)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.hmm import _checks

UNROLL = 1  # lax.scan unroll factor; larger values did not speed up CPU runs and slowed compiles (NUTS)


class ForwardBackward(NamedTuple):
    """``log_likelihood`` log p(x_{0:T-1}), shape () or (B,); ``marginals`` p(z_t | x), (…, T, K)."""

    log_likelihood: jax.Array
    marginals: jax.Array


class Filtered(NamedTuple):
    """Forward filter: ``filtered`` p(z_t | x_{0:t}) (…, T, K) and ``predictive_log_likelihood``
    log p(x_t | x_{0:t-1}) (…, T), which sums to ``log_likelihood`` (0 at padded steps)."""

    log_likelihood: jax.Array
    filtered: jax.Array
    predictive_log_likelihood: jax.Array


class Smoothed(NamedTuple):
    """Everything EM needs: smoothed and filtered marginals and ``transition_counts`` (…, K, K),
    the expected number of i -> j transitions, sum_t p(z_t = i, z_{t+1} = j | x)."""

    log_likelihood: jax.Array
    marginals: jax.Array
    filtered: jax.Array
    transition_counts: jax.Array


# ----------------------------------------------------------------------------- leaf maths
def _safe_max(x, axis=None, keepdims=False):
    m = jnp.max(x, axis=axis, keepdims=keepdims)
    return lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))


def logsumexp(x, axis=-1):
    """log sum exp over ``axis``; -inf where every term is -inf, with clean (NaN-free) gradients.

    Hand-written because reverse mode through ``jax.nn.logsumexp`` inside a ``lax.scan`` measured
    ~5x slower per NUTS gradient than this (0.58 vs 2.8 ms, T = 300, K = 2).
    """
    m = _safe_max(x, axis=axis, keepdims=True)
    total = jnp.sum(jnp.exp(x - m), axis=axis)
    positive = total > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, total, 1.0)), -jnp.inf) + jnp.squeeze(m, axis)


def normalise(log_v):
    """Log-normalise a vector; returns (normalised, log normaliser). All -inf stays -inf."""
    c = logsumexp(log_v, axis=-1)
    return log_v - jnp.where(jnp.isfinite(c), c, 0.0)[..., None], c


def small(dtype):
    """tiny / eps (1e-292 in float64): a scaled sum at least this large has lost at most one ulp
    to terms flushed below the smallest normal number; below it, the exact log-space pass runs."""
    info = jnp.finfo(dtype)
    return info.tiny / info.eps


# ----------------------------------------------------------------------------- one sequence
def _scaled_emissions(log_emission):
    """w_t = exp(le_t - max_k le_t) <= 1 and the shifts max_k le_t, vectorised over all steps."""
    shift = _safe_max(log_emission, axis=-1, keepdims=True)
    return jnp.exp(log_emission - shift), shift[..., 0]


def _forward_scaled(log_init, log_trans, log_emission, mask):
    """Bishop's scaled recursion: probabilities normalised each step, emissions shifted by their
    per-step maximum (computed outside the loop). ``ok`` is False if a normaliser fell below the
    ``small`` threshold (underflow), in which case the exact log-space pass is used."""
    w, shift = _scaled_emissions(log_emission)
    trans = jnp.exp(log_trans)
    a0 = jnp.exp(log_init) * w[0]
    c0 = jnp.sum(a0)

    def step(a, inputs):
        w_t, keep = inputs
        x = (a @ trans) * w_t
        c = jnp.sum(x)
        x = jnp.where(keep, x / jnp.where(c > 0, c, 1.0), a)  # never NaN, even when discarded
        return x, (x, jnp.where(keep, c, 1.0))

    a0 = a0 / jnp.where(c0 > 0, c0, 1.0)
    _, (a, c) = lax.scan(step, a0, (w[1:], mask[1:]), unroll=UNROLL)
    c = jnp.concatenate([c0[None], c])
    log_norms = jnp.where(mask, jnp.log(c) + shift, 0.0)
    return jnp.log(jnp.concatenate([a0[None], a])), log_norms, jnp.all(c >= small(c.dtype))


def _forward_exact(log_init, log_trans, log_emission, mask):
    """Log-space recursion with a full logsumexp over (K, K): no underflow anywhere, K^2
    exponentials per step. The fallback of the scaled pass."""
    a0, c0 = normalise(log_init + log_emission[0])

    def step(a, inputs):
        le, keep = inputs
        a_new, c = normalise(logsumexp(a[:, None] + log_trans, axis=0) + le)
        a_new = jnp.where(keep, a_new, a)
        return a_new, (a_new, jnp.where(keep, c, 0.0))

    _, (a, c) = lax.scan(step, a0, (log_emission[1:], mask[1:]), unroll=UNROLL)
    return jnp.concatenate([a0[None], a]), jnp.concatenate([c0[None], c])


def forward_pass(log_init, log_trans, log_emission, mask):
    """Sequential forward filter of one sequence.

    Returns ``(log_filtered, log_norms)``: normalised log p(z_t | x_{0:t}) (T, K) and
    log p(x_t | x_{0:t-1}) (T,). Steps where ``mask`` (T,) is False are padding. Runs the scaled
    recursion and, only if it underflowed, the exact log-space one (``lax.cond``).
    """
    log_filtered, log_norms, ok = _forward_scaled(log_init, log_trans, log_emission, mask)
    return lax.cond(ok, lambda: (log_filtered, log_norms),
                    lambda: _forward_exact(log_init, log_trans, log_emission, mask))


def _backward_scaled(log_trans, log_emission, mask):
    w, _ = _scaled_emissions(log_emission)
    trans = jnp.exp(log_trans)
    b_last = jnp.ones(log_emission.shape[-1], w.dtype)

    def step(b_next, inputs):
        w_next, keep_next = inputs
        b = trans @ (w_next * b_next)
        s = jnp.sum(b)
        b = jnp.where(keep_next, b / jnp.where(s > 0, s, 1.0), b_next)
        return b, (b, jnp.where(keep_next, s, 1.0))

    _, (b, s) = lax.scan(step, b_last, (w[1:], mask[1:]), reverse=True, unroll=UNROLL)
    return jnp.log(jnp.concatenate([b, b_last[None]])), jnp.all(s >= small(s.dtype))


def _backward_exact(log_trans, log_emission, mask):
    b_last = jnp.zeros(log_emission.shape[-1], log_emission.dtype)

    def step(b_next, inputs):
        le_next, keep_next = inputs
        b, _ = normalise(logsumexp(log_trans + (le_next + b_next)[None, :], axis=1))
        b = jnp.where(keep_next, b, b_next)
        return b, b

    _, b = lax.scan(step, b_last, (log_emission[1:], mask[1:]), reverse=True, unroll=UNROLL)
    return jnp.concatenate([b, b_last[None]])


def backward_pass(log_trans, log_emission, mask):
    """Sequential backward pass of one sequence: log beta_t (T, K) up to a per-step constant
    (the marginals do not depend on it). Scaled recursion, exact log-space one on underflow."""
    log_beta, ok = _backward_scaled(log_trans, log_emission, mask)
    return lax.cond(ok, lambda: log_beta, lambda: _backward_exact(log_trans, log_emission, mask))


def combine(log_filtered, log_beta, log_trans, log_emission, mask):
    """Smoothed log marginals from the two passes. If some step's filtered and backward messages
    only overlap below the ``small`` threshold (their product underflowed), the backward
    messages are recomputed exactly in log space first. Returns (log_filtered, log_beta, log_gamma)."""
    log_gamma, z = normalise(log_filtered + log_beta)
    ok = jnp.all(z >= jnp.log(small(z.dtype)))

    def exact():
        lb = _backward_exact(log_trans, log_emission, mask)
        return lb, normalise(log_filtered + lb)[0]

    log_beta, log_gamma = lax.cond(ok, lambda: (log_beta, log_gamma), exact)
    return log_beta, log_gamma


def _pairwise_factors(log_filtered, log_beta, log_trans, log_emission, mask):
    """xi_t(i, j) = u_t(i) A_ij v_{t+1}(j) / z_t for t = 0..T-2, in scaled factors; ``ok`` is
    False if some z_t underflowed (then the exact log-space version is used)."""
    u = jnp.exp(log_filtered[:-1] - _safe_max(log_filtered[:-1], axis=-1, keepdims=True))
    w = log_beta[1:] + log_emission[1:]
    v = jnp.exp(w - _safe_max(w, axis=-1, keepdims=True))
    trans = jnp.exp(log_trans)
    z = jnp.einsum("ti,ij,tj->t", u, trans, v)
    weight = jnp.where(mask[1:] & (z > 0), 1.0 / jnp.where(z > 0, z, 1.0), 0.0)
    ok = jnp.all(~mask[1:] | (z >= small(z.dtype)))
    return u, v, trans, weight, ok


def _pairwise_exact(log_filtered, log_beta, log_trans, log_emission, mask):
    x = log_filtered[:-1, :, None] + log_trans[None] + (log_beta[1:] + log_emission[1:])[:, None, :]
    z = jax.nn.logsumexp(x, axis=(1, 2), keepdims=True)
    return jnp.where(mask[1:, None, None], jnp.exp(x - jnp.where(jnp.isfinite(z), z, 0.0)), 0.0)


def transition_counts(log_filtered, log_beta, log_trans, log_emission, mask):
    """sum_t p(z_t = i, z_{t+1} = j | x) as one (K, T) @ (T, K) product: O(T K^2)."""
    u, v, trans, weight, ok = _pairwise_factors(log_filtered, log_beta, log_trans, log_emission, mask)
    return lax.cond(ok, lambda: trans * ((u * weight[:, None]).T @ v),
                    lambda: _pairwise_exact(log_filtered, log_beta, log_trans, log_emission, mask).sum(0))


def pairwise(log_filtered, log_beta, log_trans, log_emission, mask):
    """p(z_t = i, z_{t+1} = j | x), (T-1, K, K); zero where step t+1 is padding."""
    u, v, trans, weight, ok = _pairwise_factors(log_filtered, log_beta, log_trans, log_emission, mask)
    return lax.cond(ok, lambda: u[:, :, None] * trans[None] * v[:, None, :] * weight[:, None, None],
                    lambda: _pairwise_exact(log_filtered, log_beta, log_trans, log_emission, mask))


def _passes(parallel: bool):
    if parallel:
        from inference.hmm import parallel as par

        return par.forward_pass, par.backward_pass
    return forward_pass, backward_pass


def smooth_one(log_init, log_trans, log_emission, mask, parallel: bool = False):
    """Both passes for one sequence: (log_filtered, log_norms, log_beta, log_marginals).

    The parallel passes are exact in log space, so their overlap needs no underflow fallback.
    """
    fwd, bwd = _passes(parallel)
    log_filtered, log_norms = fwd(log_init, log_trans, log_emission, mask)
    log_beta = bwd(log_trans, log_emission, mask)
    if parallel:
        return log_filtered, log_norms, log_beta, normalise(log_filtered + log_beta)[0]
    log_beta, log_gamma = combine(log_filtered, log_beta, log_trans, log_emission, mask)
    return log_filtered, log_norms, log_beta, log_gamma


def over_batch(one, *arrays):
    """Map ``one`` over the leading (batch) axis of ``arrays``. A batch of one runs unbatched:
    under ``vmap`` a ``lax.cond`` becomes a select that runs both branches, so the exact
    log-space fallbacks would always run (in a real batch they do; results are the same)."""
    if arrays[0].shape[0] == 1:
        return jax.tree.map(lambda x: x[None], one(*(a[0] for a in arrays)))
    return jax.vmap(one)(*arrays)


# Largest T K^3 (path weights of the tree's first level) for which an accelerator takes the tree.
_TREE_MAX_WORK = 1 << 26


def sequence_log_likelihood(log_init, log_trans, log_emission, mask):
    """log p(x) of one sequence, exact in log space: the version to differentiate.

    On a CPU, the sequential forward pass: reverse mode through its scan (K^2 exponentials per
    step, no ``lax.cond``) costs about what the scaled pass costs (0.58 vs 0.50 ms per NUTS
    gradient, T = 300, K = 2), while differentiating through the scaled pass's ``lax.cond``
    fallback was ~40x slower. On an accelerator (any other platform, chosen when the program is
    lowered), the tree of :func:`inference.hmm.parallel.sequence_log_likelihood` (log2 T deep),
    unless T K^3 exceeds ``_TREE_MAX_WORK``: a scan launches kernels at every one of its T steps.
    Both are exact; they agree to rounding. It is what the Bayesian HMM (``probmodels.hmm``) uses
    under NUTS, VI and Laplace.
    """
    from inference.hmm import parallel as par

    args = (log_init, log_trans, log_emission, mask)
    if log_emission.shape[0] * log_init.shape[0] ** 3 > _TREE_MAX_WORK:
        return _scan_log_likelihood(*args)
    return lax.platform_dependent(*args, cpu=_scan_log_likelihood, default=par.sequence_log_likelihood)


def _scan_log_likelihood(log_init, log_trans, log_emission, mask):
    return jnp.sum(_forward_exact(log_init, log_trans, log_emission, mask)[1])


# ----------------------------------------------------------------------------- fused fast path
class _Fused(NamedTuple):
    """Outputs of the fused scans. ``pair_right[t]`` (t < T-1) = w_{t+1} b_{t+1} / (s_t z_t), so
    that p(z_t = i, z_{t+1} = j | x) = filtered[t, i] A_ij pair_right[t, j] (0 where step t+1 is
    padding, and at t = T-1); None unless asked for."""

    log_norms: jax.Array
    filtered: jax.Array
    marginals: jax.Array
    pair_right: jax.Array | None
    log_likelihood: jax.Array | None = None  # set by the blocked passes (else the sum of log_norms)
    counts: jax.Array | None = None  # set by the blocked passes when asked for


def _fused_forward(log_init, log_trans, w, shift, mask):
    """Scaled filter over all T steps in probability space (no log-space copies of (T, K) arrays).

    The carry is the predictive p(z_t | x_{0:t-1}); a padded step keeps the previous filter (its
    prediction is that filter and its emission is ignored). Returns filtered (T, K), log_norms (T,)
    and ``ok``: every normaliser >= ``small`` (one cheap check on (T,) numbers)."""
    trans = jnp.exp(log_trans)
    keep_next = jnp.concatenate([mask[1:], jnp.zeros((1,), bool)])

    def step(p, inputs):
        w_t, keep, keep_nxt = inputs
        x = jnp.where(keep, p * w_t, p)
        c = jnp.sum(x)
        a = x / jnp.where(c > 0, c, 1.0)
        p_next = jnp.where(keep_nxt, a @ trans, a)
        return p_next, (a, jnp.where(keep, c, 1.0))

    _, (filtered, c) = lax.scan(step, jnp.exp(log_init), (w, mask, keep_next), unroll=UNROLL)
    log_norms = jnp.where(mask, jnp.log(c) + shift, 0.0)
    return filtered, log_norms, jnp.all(c >= small(c.dtype))


def _fused_backward(log_trans, w, filtered, mask, pairs: bool):
    """Backward scan that combines each backward message with the filter as it goes: emits the
    smoothed marginals (T, K) directly (and ``pair_right`` when ``pairs``). ``ok`` is False if a
    backward normaliser s_t or a filter/backward overlap z_t fell below ``small``."""
    trans = jnp.exp(log_trans)
    k = w.shape[-1]

    def step(carry, inputs):
        b, right_next, lowest = carry  # b: normalised backward message of step t
        w_t, keep, a_t = inputs
        g = a_t * b
        z = jnp.sum(g)
        inv_z = 1.0 / jnp.where(z > 0, z, 1.0)
        v = w_t * b
        bu = trans @ v  # backward message of step t-1, before normalising
        s = jnp.sum(bu)
        inv_s = 1.0 / jnp.where(s > 0, s, 1.0)
        b_prev = jnp.where(keep, bu * inv_s, b)
        lowest = jnp.minimum(lowest, jnp.minimum(z, jnp.where(keep, s, 1.0)))
        if pairs:
            right = jnp.where(keep, v * inv_s, 0.0)
            return (b_prev, right, lowest), (g * inv_z, right_next * inv_z)
        return (b_prev, right_next, lowest), g * inv_z

    zeros = jnp.zeros((k,), w.dtype)
    init = (jnp.ones((k,), w.dtype), zeros, jnp.ones((), w.dtype))
    keep = mask.at[0].set(False)  # step 0's "previous" backward message is never used
    (_, _, lowest), out = lax.scan(step, init, (w, keep, filtered), reverse=True, unroll=UNROLL)
    ok = lowest >= small(w.dtype)
    return (out[0], out[1], ok) if pairs else (out, None, ok)


def _fused_one(log_init, log_trans, log_emission, mask, backward: bool, pairs: bool):
    """Fast path for one sequence: (_Fused, ok): one scan per direction, scaled probabilities."""
    w, shift = _scaled_emissions(log_emission)
    filtered, log_norms, ok = _fused_forward(log_init, log_trans, w, shift, mask)
    if not backward:
        return _Fused(log_norms, filtered, filtered, None), ok
    marginals, right, ok_b = _fused_backward(log_trans, w, filtered, mask, pairs)
    return _Fused(log_norms, filtered, marginals, right), ok & ok_b


def _use_blocked(num_steps: int, num_states: int) -> bool:
    """Whether one sequence of this shape runs the blocked passes (:mod:`inference.hmm.blocked`):
    long sequences with small K, where the sequential loop's per-step overhead dominates. (Not
    for the filter alone: one sequential forward scan beat the blocked passes' three loops,
    measured; nor for batches, which ``vmap`` the sequential passes.)"""
    from inference.hmm import blocked

    return num_steps >= blocked.MIN_STEPS and num_states <= blocked.MAX_STATES


def _blocked_one(log_init, log_trans, log_emission, mask, backward: bool, pairs: bool, counts: bool = False,
                 filtered: bool = True, block=None, chunks=None):
    """:func:`_fused_one`'s contract by the blocked scheme (O(sqrt T) loop iterations), with the
    log likelihood and (``counts``) the transition counts filled in."""
    from inference.hmm import blocked

    r = blocked.blocked_one(log_init, log_trans, log_emission, mask, backward, pairs, counts, filtered, block,
                            chunks)
    return _Fused(r.log_norms, r.filtered, r.marginals, r.pair_right, r.log_likelihood, r.counts), r.ok


def _fast_pairwise(log_trans, fused):
    """p(z_t = i, z_{t+1} = j | x) (T-1, K, K) from the fused factors."""
    return fused.filtered[:-1, :, None] * jnp.exp(log_trans)[None] * fused.pair_right[:-1, None, :]


def _fast_counts(log_trans, fused):
    """sum_t p(z_t = i, z_{t+1} = j | x): one (K, T) x (T, K) contraction over time."""
    if fused.counts is not None:
        return fused.counts
    return jnp.exp(log_trans) * lax.dot_general(fused.filtered, fused.pair_right, (((0,), (0,)), ((), ())))


# ----------------------------------------------------------------------------- jitted drivers
@partial(jax.jit, static_argnames=("what", "parallel"))
def _run(log_init, log_trans, log_emission, mask, what: str, parallel: bool):
    if parallel:
        return _run_parallel(log_init, log_trans, log_emission, mask, what)
    backward, pairs = what != "filter", what in ("smooth", "pairwise")

    one = _fused_one
    if log_emission.ndim == 2 and what != "filter" and _use_blocked(*log_emission.shape):
        # the blocked passes sum the transition counts in their loop (no (T, K) pair factors)
        one = partial(_blocked_one, counts=what == "smooth", filtered=what != "fb")
        pairs = what == "pairwise"

    def fast(le, m):
        fused, ok = one(log_init, log_trans, le, m, backward, pairs)
        ll = jnp.sum(fused.log_norms) if fused.log_likelihood is None else fused.log_likelihood
        if what == "filter":
            out = Filtered(ll, fused.filtered, fused.log_norms)
        elif what == "fb":
            out = ForwardBackward(ll, fused.marginals)
        elif what == "smooth":
            out = Smoothed(ll, fused.marginals, fused.filtered, _fast_counts(log_trans, fused))
        else:
            out = (ll, _fast_pairwise(log_trans, fused))
        return out, ok

    def exact(le, m):
        """The exact log-space passes (the fallback when a scaled normaliser underflowed)."""
        log_filtered, log_norms = _forward_exact(log_init, log_trans, le, m)
        if what == "filter":
            return Filtered(jnp.sum(log_norms), jnp.exp(log_filtered), log_norms)
        log_beta = _backward_exact(log_trans, le, m)
        log_gamma = normalise(log_filtered + log_beta)[0]
        return _log_space_result(what, log_filtered, log_norms, log_beta, log_gamma, log_trans, le, m)

    if log_emission.ndim == 2:
        out, ok = fast(log_emission, mask)
        return lax.cond(ok, lambda o: o, lambda o: exact(log_emission, mask), out)
    # Batch: the fast passes are vmapped; the exact ones run (for every sequence, results kept
    # where the fast ones underflowed) only if some sequence needs them: the cond sits outside vmap.
    out, ok = jax.vmap(fast)(log_emission, mask)

    def repair(out):
        ex = jax.vmap(exact)(log_emission, mask)
        pick = lambda a, b: jnp.where(ok.reshape(ok.shape + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
        return jax.tree.map(pick, out, ex)

    return lax.cond(jnp.all(ok), lambda o: o, repair, out)


def _log_space_result(what, log_filtered, log_norms, log_beta, log_gamma, log_trans, le, m):
    """The ``what`` output ("fb", "smooth" or pairwise) from log-space forward and backward passes."""
    ll, marg = jnp.sum(log_norms), jnp.exp(log_gamma)
    if what == "fb":
        return ForwardBackward(ll, marg)
    if what == "smooth":
        counts = transition_counts(log_filtered, log_beta, log_trans, le, m)
        return Smoothed(ll, marg, jnp.exp(log_filtered), counts)
    return ll, pairwise(log_filtered, log_beta, log_trans, le, m)


def _run_parallel(log_init, log_trans, log_emission, mask, what: str):
    def one(le, m):
        if what == "filter":
            log_filtered, log_norms = _passes(True)[0](log_init, log_trans, le, m)
            return Filtered(jnp.sum(log_norms), jnp.exp(log_filtered), log_norms)
        log_filtered, log_norms, log_beta, log_gamma = smooth_one(log_init, log_trans, le, m, True)
        return _log_space_result(what, log_filtered, log_norms, log_beta, log_gamma, log_trans, le, m)

    if log_emission.ndim == 3:
        return over_batch(one, log_emission, mask)
    return one(log_emission, mask)


def prepare(log_init, log_trans, log_emission, lengths):
    """Validate (concrete inputs only) and return jnp arrays plus the step mask."""
    _checks.check_model(log_init, log_trans)
    batched = _checks.check_emission(log_emission, jnp.shape(log_init)[0])
    shape = jnp.shape(log_emission)
    if lengths is not None and not batched and jnp.ndim(lengths) != 0:
        raise ValueError(f"lengths must be a scalar for one sequence of shape (T, K), got shape {jnp.shape(lengths)}")
    lengths = _checks.check_lengths(lengths, shape[:-2], shape[-2])
    dtype = jnp.result_type(float, log_init, log_trans, log_emission)
    mask = _checks.step_mask(lengths, shape[-2])
    if batched and lengths is None:
        mask = np.broadcast_to(mask, shape[:-1])
    # host inputs stay host arrays: the jitted call moves them in one go (a jnp.asarray each
    # costs a dispatch, which dominated short sequences); jax arrays (traced or not) stay jax
    to = lambda x: jnp.asarray(x, dtype) if isinstance(x, jax.Array) else np.asarray(x, dtype)  # noqa: E731
    return to(log_init), to(log_trans), to(log_emission), mask


def _check_parallel(parallel):
    if not isinstance(parallel, (bool, np.bool_)):
        raise TypeError(f"parallel must be a bool, got {type(parallel).__name__}")
    return bool(parallel)


# ----------------------------------------------------------------------------- public
def forward_backward(log_init, log_trans, log_emission, parallel: bool = False, *, lengths=None) -> ForwardBackward:
    """Log likelihood and smoothed state marginals p(z_t | x_{0:T-1}).

    Args:
        log_init: (K,) log initial probabilities.
        log_trans: (K, K) log transition matrix, rows = from-state.
        log_emission: (T, K) per-step log likelihoods, or (B, T, K) for a padded batch.
        parallel: use the associative-scan version (O(log T) depth; same results).
        lengths: () or (B,) true sequence lengths when sequences are padded.

    Returns ``ForwardBackward(log_likelihood, marginals)``; it unpacks as a pair.
    """
    args = prepare(log_init, log_trans, log_emission, lengths)
    return _run(*args, what="fb", parallel=_check_parallel(parallel))


def log_likelihood(log_init, log_trans, log_emission, *, lengths=None):
    """log p(x_{0:T-1}), shape () or (B,), by the exact log-space forward pass: the function to
    differentiate (see :func:`sequence_log_likelihood`); its gradient in ``log_emission`` is the
    smoothed marginals.

    >>> import jax, jax.numpy as jnp
    >>> from inference.hmm import log_likelihood
    >>> li, lt = jnp.log(jnp.array([0.5, 0.5])), jnp.log(jnp.array([[0.9, 0.1], [0.2, 0.8]]))
    >>> le = jnp.log(jnp.array([[0.9, 0.2], [0.1, 0.8]]))
    >>> g = jax.grad(lambda e: log_likelihood(li, lt, e))(le)  # = smoothed marginals
    >>> bool(jnp.allclose(g.sum(-1), 1.0))
    True
    """
    return _log_likelihood(*prepare(log_init, log_trans, log_emission, lengths))


@jax.jit
def _log_likelihood(log_init, log_trans, log_emission, mask):
    one = lambda le, m: sequence_log_likelihood(log_init, log_trans, le, m)  # noqa: E731
    if log_emission.ndim == 3:
        return jax.vmap(one)(log_emission, mask)
    return one(log_emission, mask)


def forward_filter(log_init, log_trans, log_emission, parallel: bool = False, *, lengths=None) -> Filtered:
    """Forward (filtering) pass only: ``Filtered(log_likelihood, filtered, predictive_log_likelihood)``.

    >>> import jax.numpy as jnp
    >>> from inference.hmm import forward_filter
    >>> f = forward_filter(jnp.log(jnp.array([1.0, 0.0])), jnp.log(jnp.eye(2)), jnp.zeros((4, 2)))
    >>> float(f.log_likelihood), f.filtered[-1].tolist()
    (0.0, [1.0, 0.0])
    """
    args = prepare(log_init, log_trans, log_emission, lengths)
    return _run(*args, what="filter", parallel=_check_parallel(parallel))


def smoother(log_init, log_trans, log_emission, parallel: bool = False, *, lengths=None) -> Smoothed:
    """Forward-backward with filtered marginals and expected transition counts (the E step of
    Baum-Welch): ``Smoothed(log_likelihood, marginals, filtered, transition_counts)``."""
    args = prepare(log_init, log_trans, log_emission, lengths)
    return _run(*args, what="smooth", parallel=_check_parallel(parallel))


def pairwise_marginals(log_init, log_trans, log_emission, parallel: bool = False, *, lengths=None):
    """Pairwise posteriors p(z_t = i, z_{t+1} = j | x) as an array (…, T-1, K, K).

    Memory is T K^2: for long sequences prefer :func:`smoother`'s summed ``transition_counts``.
    """
    args = prepare(log_init, log_trans, log_emission, lengths)
    return _run(*args, what="pairwise", parallel=_check_parallel(parallel))[1]
