"""Associative-scan (parallel-in-time) forward and backward passes: O(log T) depth.

Each step is a (K, K) log matrix ``E_t[i, j] = log p(z_t = j, x_t | z_{t-1} = i)`` (identity at
padded steps); products in the (logsumexp, +) semiring are associative, so ``lax.associative_scan``
computes all prefix products (the forward messages) and all suffix products (the backward
messages) in O(log T) sequential depth and O(T K^3) work and memory. That pays on accelerators and
for small K; on one CPU core the sequential :mod:`inference.hmm.forward_backward` is much cheaper.
Each product is an exact logsumexp over the K^3 path weights (no underflow anywhere).

The two passes here have exactly the signatures and outputs of ``forward_pass`` and
``backward_pass`` there; the public functions pick them with ``parallel=True``. The log
likelihood alone, the quantity NUTS differentiates, needs no prefixes: ``sequence_log_likelihood``
multiplies the step matrices pairwise (a tree of depth log2 T, half the work of the scan's
prefixes); ``forward_backward.sequence_log_likelihood`` picks it on accelerators.

Example:
    >>> import jax.numpy as jnp
    >>> from inference.hmm import forward_backward
    >>> le = jnp.log(jnp.array([[0.9, 0.2], [0.1, 0.8], [0.9, 0.2]]))
    >>> lt = jnp.log(jnp.array([[0.9, 0.1], [0.2, 0.8]]))
    >>> li = jnp.log(jnp.array([0.5, 0.5]))
    >>> a, b = forward_backward(li, lt, le), forward_backward(li, lt, le, parallel=True)
    >>> bool(jnp.allclose(a.marginals, b.marginals))
    True
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from inference.hmm.forward_backward import logsumexp, normalise


def log_matmul(x, y):
    """Exact log-space matrix product: logsumexp_j (x[..., i, j] + y[..., j, k]).

    Built on the (…, K, K, K) tensor of path weights with its maximum over j pulled out per
    (i, k), so no term that matters can underflow (a matmul of exp(x - row max) and
    exp(y - column max) would be cheaper but silently loses paths whose weights are far below
    both maxima). K^3 exponentials and T K^3 memory: the parallel passes are for small K.
    """
    paths = x[..., :, :, None] + y[..., None, :, :]
    return logsumexp(paths, axis=-2)


def _log_eye(k, dtype):
    """The identity of the (logsumexp, +) semiring: 0 on the diagonal, -inf elsewhere."""
    return jnp.where(jnp.eye(k, dtype=bool), 0.0, -jnp.inf).astype(dtype)


def _step_matrices(log_trans, log_emission, mask):
    mats = log_trans[None] + log_emission[:, None, :]
    return jnp.where(mask[:, None, None], mats, _log_eye(log_trans.shape[-1], log_trans.dtype))


def _forward_matrices(log_init, log_trans, log_emission, mask):
    """The T matrices whose prefix products are the forward messages: the first has every row
    p(z_0, x_0), the others are the steps."""
    k = log_init.shape[0]
    first = jnp.broadcast_to(log_init + log_emission[0], (1, k, k))
    return jnp.concatenate([first, _step_matrices(log_trans, log_emission[1:], mask[1:])])


def forward_pass(log_init, log_trans, log_emission, mask):
    """Parallel forward filter: ``(log_filtered (T, K), log_norms (T,))`` as the sequential one."""
    prefix = lax.associative_scan(log_matmul, _forward_matrices(log_init, log_trans, log_emission, mask))
    log_alpha = prefix[:, 0, :]  # log p(z_t, x_{0:t})
    log_filtered, cumulative = normalise(log_alpha)
    previous = jnp.concatenate([jnp.zeros((1,), cumulative.dtype), cumulative[:-1]])
    log_norms = jnp.where(mask, jnp.where(jnp.isneginf(cumulative), -jnp.inf, cumulative - previous), 0.0)
    return log_filtered, log_norms


def backward_pass(log_trans, log_emission, mask):
    """Parallel backward pass: normalised log beta_t (T, K) as the sequential one."""
    k = log_trans.shape[-1]
    b_last = jnp.zeros((1, k), log_emission.dtype)
    if log_emission.shape[0] == 1:
        return b_last
    mats = _step_matrices(log_trans, log_emission[1:], mask[1:])  # F_t, t = 0..T-2
    # suffix[t] = F_t (x) F_{t+1} (x) ... (x) F_{T-2}; the reversed scan hands (later, earlier).
    suffix = lax.associative_scan(lambda later, earlier: log_matmul(earlier, later), mats, reverse=True)
    log_beta, _ = normalise(logsumexp(suffix, axis=-1))
    return jnp.concatenate([log_beta, b_last])


def sequence_log_likelihood(log_init, log_trans, log_emission, mask):
    """log p(x) of one sequence as the first row of the product of its step matrices, multiplied
    pairwise (identity-padded to a power of two): log2 T sequential products instead of T steps.

    Exact in log space like the sequential ``forward_backward.sequence_log_likelihood``, and equal
    to it up to rounding; on a GPU its gradient is 96x-1700x faster at T = 300-10^4 (a scan pays
    a kernel launch per step), on one CPU core 1-6x slower (benchmarks/RESULTS.md).
    """
    k = log_init.shape[0]
    mats = _forward_matrices(log_init, log_trans, log_emission, mask)
    size = 1 << (mats.shape[0] - 1).bit_length()
    mats = jnp.concatenate([mats, jnp.broadcast_to(_log_eye(k, mats.dtype), (size - mats.shape[0], k, k))])
    while mats.shape[0] > 1:
        mats = log_matmul(mats[0::2], mats[1::2])
    return logsumexp(mats[0, 0], axis=-1)
