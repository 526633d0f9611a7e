"""Blocked (chunked) exact forward-backward for one long sequence: few, wide loop steps.

The sequential fused passes of :mod:`inference.hmm.forward_backward` run one ``lax.scan`` step per
time step; on a CPU with small K the XLA ``while`` loop's per-step cost, not the K^2 arithmetic,
sets their speed. This version runs the same scaled recursions in loops whose steps each work on
~1000 chunks of the sequence at once (exact, not an approximation):

1. The transitions into times 1..T-1 are split into B chunks of L steps (the tail padded with
   masked steps: identity transition, no emission, as the mask semantics elsewhere). One scan of
   L steps computes every chunk's transfer matrix M_b = prod_t A diag(w_t) (w_t the max-shifted
   emission likelihoods), a (K, K) x (K, K B) product per step (K^2 vector multiply-adds for
   K <= 4); each chunk's product is rescaled by its largest entry every step (one scalar per
   chunk: rows are start states, so a per-row scaling would change the product).
2. One scan over the B chunks gives the filter at each chunk's first time step (alpha <- alpha
   M_b, normalised) and, in the same loop from the other end, the backward message there
   (beta <- M_b beta, normalised).
3. One forward scan of L steps, vectorised over the chunks, runs the scaled filter from each
   chunk's boundary filter (filtered probabilities and normalisers; log likelihood = sum of
   their logs plus the shifts, as in the sequential pass), and one backward scan of L steps runs
   the scaled backward recursion from each chunk's boundary message, combining it with the filter
   as it goes (smoothed marginals, ``pair_right``, expected transition counts summed in the
   loop), as ``_fused_backward`` does.

Long sequences are cut into segments of ``SEGMENT`` steps (``CHUNKS`` chunks each) that steps 1
and 3 process one after the other, so that a segment's arrays stay in cache (at T = 1e6, K = 2
one segment took 0.073 s, segments 0.060 s, measured); step 2 runs over all chunks. Inside a
segment arrays are laid out (L, K, chunks), chunk index fastest, so every operation works on
contiguous rows of ~1000 numbers ((T, K) arrays with K = 2 minor ran several times slower per
element in XLA on CPU, measured); full segments are read from the input in place and results
are written into (T, K) buffers in place.

Checks (``ok`` False sends the caller to the exact log-space passes): the sequential passes'
thresholds (every normaliser, backward normaliser and filter/backward overlap >= ``small``), and
a consistency check of the boundary messages: the filter and backward message that step 3
reaches at the end of each chunk step by step must equal the ones step 2 got from the transfer
matrices to ``16 L (K + 4) eps`` relative per entry (entries below ``small`` excepted). Without
underflow the two differ by rounding only (sums and products of non-negative numbers), so a
transfer matrix damaged by underflow never passes silently.

Work: step 1 costs T K^3 (the sequential passes T K^2), so this pays for small K only; the caller
(``forward_backward._run``) uses it for single sequences of at least ``MIN_STEPS`` steps with
at most ``MAX_STATES`` states (smoothing only: the filter alone is one sequential scan).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

MIN_STEPS = 4096  # shortest sequence the dispatcher sends here (K = 2, 3: even at 4096, measured)
MAX_STATES = 3  # largest K sent here (step 1 costs T K^3: K = 4 was even with the sequential passes
#                 at T = 1e5 and 17% faster at 1e6, K >= 6 slower; measured)
SEGMENT = 1 << 15  # steps per segment (measured: 2^15 to 2^17 within ~10% at T = 1e6, 2^15 best at 1e5)
CHUNKS = 1024  # chunks per segment (measured)
UNROLL_STATES = 4  # K up to which K x K products are written as K^2 vector multiply-adds (measured)


class Blocked(NamedTuple):
    """The blocked passes' results, in time order: as ``forward_backward._Fused`` plus the log
    likelihood and, when asked for, the expected transition counts (summed inside the loop)."""

    log_norms: jax.Array
    filtered: jax.Array
    marginals: jax.Array
    pair_right: jax.Array | None
    log_likelihood: jax.Array
    counts: jax.Array | None
    ok: jax.Array


def block_length(num_steps: int) -> int:
    """Chunk length L for a segment of ``num_steps``: about T / ``CHUNKS`` (each loop step then
    works on rows of ~1000 chunks, long enough to hide the loop's per-step cost; the boundary
    loop over the chunks is cheap), at least 4."""
    return max(4, -(-num_steps // CHUNKS))


def _small(dtype):
    info = jnp.finfo(dtype)
    return info.tiny / info.eps


def _inv(d):
    return 1.0 / jnp.where(d > 0, d, 1.0)


def _mix(m, x):
    """m @ x for m (K, K) and x (K, N): one GEMM, or K^2 multiply-adds of rows for small K."""
    k = m.shape[0]
    if k > UNROLL_STATES:
        return m @ x
    return jnp.stack([sum(m[j, i] * x[i] for i in range(k)) for j in range(k)])


def _colsum(x):
    """Sum over the state axis (0) of (K, N): row additions for small K (they fuse with their
    neighbours; a reduction does not, measured slower)."""
    if x.shape[0] > UNROLL_STATES:
        return jnp.sum(x, 0)
    return sum(x[i] for i in range(x.shape[0]))


def _layout(x, num_chunks, length):
    """(B L, ...) in time order -> (L, ..., B): element [l, ..., b] is step b L + l."""
    rest = x.shape[1:]
    n = math.prod(rest)
    return x.reshape(num_chunks, length * n).T.reshape((length,) + rest + (num_chunks,))


def _unlayout(y):
    """(L, ..., B) -> (B L, ...) in time order (the inverse of :func:`_layout`)."""
    length, num_chunks = y.shape[0], y.shape[-1]
    rest = y.shape[1:-1]
    return y.reshape(-1, num_chunks).T.reshape((num_chunks * length,) + rest)


def _transfer(trans, w, keep):
    """Chunk transfer matrices, (K_end, K_start, B), each scaled to largest entry 1."""
    k, num_chunks = w.shape[1], w.shape[2]
    eye = jnp.broadcast_to(jnp.eye(k, dtype=w.dtype)[:, :, None], (k, k, num_chunks))

    def step(v, inputs):
        w_l, keep_l = inputs
        x = _mix(trans.T, v.reshape(k, k * num_chunks)).reshape(v.shape)
        x = jnp.where(keep_l, x, v) * w_l[:, None, :]
        return x * _inv(jnp.max(x, axis=(0, 1))), None

    v, _ = lax.scan(step, eye, (w, keep))
    return v


def _boundaries(a0, m, backward: bool):
    """Filters (B + 1, K) and, if ``backward``, backward messages (B + 1, K) at times b L
    (b = 0..B): one scan over the chunks, both directions at once. m: (B, K_start, K_end)."""
    ones = jnp.ones(a0.shape, a0.dtype)

    def step(carry, inputs):
        a, b = carry
        m_f, m_b = inputs
        x = a @ m_f
        a = x * _inv(jnp.sum(x))
        if backward:
            y = m_b @ b
            b = y * _inv(jnp.max(y))
        return (a, b), (a, b)

    _, (alphas, betas) = lax.scan(step, (a0, ones), (m, m[::-1] if backward else m))
    alphas = jnp.concatenate([a0[None], alphas])
    betas = jnp.concatenate([betas[::-1], ones[None]]) if backward else None
    return alphas, betas


def _close(x, y, rtol, floor):
    """x and y (rows normalised to sum 1) agree to ``rtol`` relative in every entry >= ``floor``
    (smaller entries to ``rtol floor`` absolute). NaN -> False."""
    x = x * _inv(jnp.sum(x, -1, keepdims=True))
    y = y * _inv(jnp.sum(y, -1, keepdims=True))
    return jnp.all(jnp.abs(x - y) <= rtol * jnp.maximum(jnp.maximum(x, y), floor))


def plan(num_steps: int, block: int | None = None, chunks: int | None = None) -> tuple[int, int, int]:
    """(L, chunks per segment, segments) for a sequence of ``num_steps``: chunks of L steps,
    grouped into segments of about ``SEGMENT`` steps that are processed one after the other so
    that each segment's arrays stay in cache (measured at T = 1e6, K = 2: one segment 0.073 s,
    segments 0.060 s). ``block`` / ``chunks`` force L / chunks per segment (tests)."""
    if block is not None and int(block) < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    if chunks is not None and int(chunks) < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    span = min(num_steps, SEGMENT)
    length = block_length(span) if block is None else int(block)
    per = -(-span // length) if chunks is None else int(chunks)
    return length, per, -(-num_steps // (length * per))  # B L >= T: times 1..B L hold every transition


def _prepare(le, keep, length, per):
    """One segment's per-transition inputs, time order (n, K), (n,) -> layout (L, K, chunks):
    w (max-shifted likelihoods; 1 at padded steps), keep, and the sum of the shifts. Everything
    elementwise runs in the layout (rows of length ``chunks``: (n, K) arrays with K = 2 minor ran
    ~5x slower per element, measured); the layout is materialised first (barrier: fused into
    the exp, the transpose made it ~3x slower). A row of -inf gives NaN, which fails every check
    (exact fallback), as an underflow would."""
    keep = _layout(keep, per, length)
    le_l = jnp.where(keep[:, None], lax.optimization_barrier(_layout(le, per, length)), 0.0)
    shift = lax.stop_gradient(jnp.max(le_l, axis=1, keepdims=True))
    return jnp.exp(le_l - shift), keep, jnp.sum(shift)


def blocked_one(log_init, log_trans, log_emission, mask, backward: bool, pairs: bool,
                counts: bool = False, filtered: bool = True, block: int | None = None,
                chunks: int | None = None) -> Blocked:
    """The fused passes of one sequence (T, K) by the blocked scheme (see the module docstring).

    ``backward``: also the smoothed marginals (else ``marginals`` is the filter); ``pairs``: also
    ``pair_right``; ``counts``: also the expected transition counts (K, K); ``filtered``: the
    filtered probabilities and ``log_norms`` (else None: inside the segment loop unused outputs
    are not removed, and they cost a copy each). ``block`` and
    ``chunks`` force the chunk length and the chunks per segment (default :func:`plan`); every
    choice gives the same results up to rounding (tests force tiny chunks and many segments).
    """
    num_steps, k = log_emission.shape
    length, per, segments = plan(num_steps, block, chunks)
    dtype = log_emission.dtype
    small = _small(dtype)
    rtol = 16 * length * (k + 4) * jnp.finfo(dtype).eps
    trans = jnp.exp(log_trans)

    # transition layout: chunk b (over all segments), row l is the step into time b L + l + 1.
    # Full segments read their steps in place (flat slices); the rest of the sequence is one
    # shorter segment, padded (masked steps, log emission 0 = no emission). Results are written
    # into (T, ...) buffers in place (with padded / stacked copies instead: 0.060 vs 0.041 s at T = 1e6).
    n = num_steps - 1
    span = per * length
    full = n // span if segments > 1 else 0  # full segments
    n_tail = n - full * span
    per_tail = -(-(n_tail + 1) // length)  # its chunks cover times up to T - 1 in the backward pass
    flat = log_emission.reshape(-1)
    le0 = jnp.where(mask[0], log_emission[0], 0.0)
    shift0 = lax.stop_gradient(jnp.max(le0))
    x0 = jnp.exp(log_init + le0 - shift0)
    c0 = jnp.where(mask[0], jnp.sum(x0), 1.0)
    a0 = x0 * _inv(jnp.sum(x0))

    def transfer(le_s, keep_s, num):
        w, keep, shift = _prepare(le_s, keep_s, length, num)
        return _transfer(trans, w, keep), shift, w, keep

    def transfer_full(i):
        le_s = lax.dynamic_slice_in_dim(flat, (1 + i * span) * k, span * k).reshape(span, k)
        return transfer(le_s, lax.dynamic_slice_in_dim(mask, 1 + i * span, span), per)

    pad = per_tail * length - n_tail
    first = 1 + full * span
    le_tail = jnp.concatenate([flat[first * k:], jnp.zeros((pad * k,), dtype)]).reshape(-1, k)
    keep_tail = jnp.concatenate([mask[first:], jnp.zeros((pad,), bool)])
    # the laid-out inputs are kept for the second pass (recomputing them cost more, measured)
    m_t, shift_t, w_t, keep_t = transfer(le_tail, keep_tail, per_tail)
    ms = [jnp.transpose(m_t, (2, 1, 0))]  # (chunks, K_start, K_end)
    shifts = shift_t
    if full:
        m_f, shift_f, w_f, keep_f = lax.map(transfer_full, jnp.arange(full))
        ms.insert(0, jnp.transpose(m_f, (0, 3, 2, 1)).reshape(full * per, k, k))
        shifts = shifts + jnp.sum(shift_f)
    alphas, betas = _boundaries(a0, jnp.concatenate(ms), backward)

    def passes(inputs):
        """Forward and backward scans of one segment: (filtered, c, marginals, pair_right,
        sum log c, lowest normaliser, boundaries consistent, counts)."""
        w, keep, a_start, a_end = inputs[:4]

        def forward(a, inputs):
            w_l, keep_l = inputs
            x = jnp.where(keep_l, _mix(trans.T, a), a) * w_l
            c = _colsum(x)
            return x * _inv(c), (x * _inv(c), jnp.where(keep_l, c, 1.0))

        a_last, (filt, c) = lax.scan(forward, a_start.T, (w, keep))
        lowest = jnp.min(c)
        close = _close(a_last.T, a_end, rtol, small)
        out = {"filt": _unlayout(filt), "c": _unlayout(c)} if filtered else {}
        out["logc"] = jnp.sum(jnp.log(c))
        if not backward:
            return out | {"lowest": lowest, "close": close}
        b_start, b_end = inputs[4:]
        starts = a_start.T

        # backward step of chunk b at time b L + j (j = L-1..0): from the message at time
        # b L + j + 1 with the step into it (layout row j); the filter at time b L + j is the
        # forward scan's output j - 1 (j = 0: the chunk's boundary filter)
        def backward_step(carry, inputs):
            b, acc = carry
            w_l, keep_l, j = inputs
            a = jnp.where(j == 0, starts, lax.dynamic_index_in_dim(filt, jnp.maximum(j - 1, 0), 0, False))
            v = w_l * b
            y = jnp.where(keep_l, _mix(trans, v), v)
            s = _colsum(y)
            inv_s = _inv(s)
            b = y * inv_s
            g = a * b
            z = _colsum(g)
            inv_z = _inv(z)
            right = jnp.where(keep_l, v * (inv_s * inv_z), 0.0)
            if counts:
                acc = acc + a[:, None, :] * right[None, :, :]
            res = (g * inv_z, jnp.minimum(z, jnp.where(keep_l, s, 1.0)))
            return (b, acc), res + (right,) if pairs else res

        acc0 = jnp.zeros((k, k, w.shape[2]) if counts else (), dtype)
        xs = (w, keep, jnp.arange(length))
        (b_first, acc), res = lax.scan(backward_step, (b_end.T, acc0), xs, reverse=True)
        out |= {"lowest": jnp.minimum(lowest, jnp.min(res[1])),
                "close": close & _close(b_first.T, b_start, rtol, small), "marg": _unlayout(res[0])}
        if pairs:
            out["right"] = _unlayout(res[2])
        if counts:
            out["acc"] = jnp.sum(acc, -1)
        return out

    def bounds(first_chunk, num):
        cut = lambda x: lax.dynamic_slice_in_dim(x, first_chunk, num)  # noqa: E731
        out = (cut(alphas[:-1]), cut(alphas[1:]))
        return out + (cut(betas[:-1]), cut(betas[1:])) if backward else out

    t = num_steps
    names = ["marg"] * backward + ["right"] * pairs + ["filt", "c"] * filtered
    offset = {"marg": 0, "right": 0, "filt": 1, "c": 1}  # time of a segment's first row
    buffers = {"marg": (t, k), "right": (t, k), "filt": (t, k), "c": (t,)}
    init = {name: jnp.zeros(buffers[name], dtype) for name in names}
    init |= {"logc": jnp.zeros((), dtype), "lowest": c0, "close": jnp.ones((), bool)}
    if counts:
        init["acc"] = jnp.zeros((k, k), dtype)

    def gather(res, r, start, times, steps):
        """Fold one segment's results ``r`` into ``res``: ``times`` rows of the backward
        outputs from time ``start`` on, ``steps`` rows of the forward ones from ``start + 1``."""
        res = dict(res)
        for name in names:
            part = r[name][: steps if offset[name] else times]
            res[name] = lax.dynamic_update_slice_in_dim(res[name], part, start + offset[name], 0)
        res["logc"] = res["logc"] + r["logc"]
        res["lowest"] = jnp.minimum(res["lowest"], r["lowest"])
        res["close"] = res["close"] & r["close"]
        if counts:
            res["acc"] = res["acc"] + r["acc"]
        return res

    def one_full(i, res):
        r = passes((w_f[i], keep_f[i]) + bounds(i * per, per))
        return gather(res, r, i * span, span, span)

    res = lax.fori_loop(0, full, one_full, init) if full else init
    res = gather(res, passes((w_t, keep_t) + bounds(full * per, per_tail)), full * span, n_tail + 1, n_tail)
    ok = (res["lowest"] >= small) & res["close"]
    ll = jnp.log(c0) + shift0 + shifts + res["logc"]
    log_norms = filt = None
    if filtered:
        filt = res["filt"].at[0].set(a0)
        shift = lax.stop_gradient(jnp.max(log_emission, axis=-1))  # time order, log_norms only
        log_norms = jnp.where(mask, jnp.log(res["c"].at[0].set(c0)) + shift, 0.0)
    if not backward:
        return Blocked(log_norms, filt, filt, None, ll, None, ok)
    pair_right = res["right"] if pairs else None
    total = trans * res["acc"] if counts else None
    return Blocked(log_norms, filt, res["marg"], pair_right, ll, total, ok)
