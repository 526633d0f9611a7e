"""Viterbi decoding: the most probable state path argmax_z p(z, x), by max-product in log space.

A forward ``lax.scan`` keeps the best log score per end state (shifted by its maximum each step,
so float32 keeps its precision over long sequences) and the back-pointers; a reverse scan reads
the path off them. O(T K^2) additions, no exponentials. Padded steps (``lengths``) repeat the last
state of the sequence.

Example:
    >>> import jax.numpy as jnp
    >>> from inference.hmm import viterbi
    >>> li = jnp.log(jnp.array([0.6, 0.4]))
    >>> lt = jnp.log(jnp.array([[0.7, 0.3], [0.4, 0.6]]))
    >>> le = jnp.log(jnp.array([[0.5, 0.1], [0.4, 0.3], [0.1, 0.6]]))
    >>> path, log_prob = viterbi(li, lt, le)
    >>> path.tolist()
    [0, 0, 1]
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from inference.hmm.forward_backward import UNROLL, _safe_max, prepare


class Viterbi(NamedTuple):
    """``path`` (…, T) int32 states; ``log_prob`` log p(path, x), shape () or (B,)."""

    path: jax.Array
    log_prob: jax.Array


def viterbi_pass(log_init, log_trans, log_emission, mask):
    """Max-product pass of one sequence: ``(path (T,), log_prob ())``."""
    k = log_init.shape[0]
    d0 = log_init + log_emission[0]
    m0 = _safe_max(d0)

    def forward(carry, inputs):
        d, offset = carry
        le, keep = inputs
        scores = d[:, None] + log_trans
        best_prev = jnp.argmax(scores, axis=0).astype(jnp.int32)
        d_new = jnp.max(scores, axis=0) + le
        shift = _safe_max(d_new)
        d_new = jnp.where(keep, d_new - shift, d)
        offset = offset + jnp.where(keep, shift, 0.0)
        return (d_new, offset), jnp.where(keep, best_prev, jnp.arange(k, dtype=jnp.int32))

    (d_last, offset), pointers = lax.scan(forward, (d0 - m0, m0), (log_emission[1:], mask[1:]), unroll=UNROLL)
    z_last = jnp.argmax(d_last).astype(jnp.int32)

    def backward(z_next, pointer):
        z = pointer[z_next]
        return z, z

    _, zs = lax.scan(backward, z_last, pointers, reverse=True, unroll=UNROLL)
    return jnp.concatenate([zs, z_last[None]]), d_last[z_last] + offset


@jax.jit
def _run(log_init, log_trans, log_emission, mask):
    one = lambda le, m: Viterbi(*viterbi_pass(log_init, log_trans, le, m))  # noqa: E731
    if log_emission.ndim == 3:
        return jax.vmap(one)(log_emission, mask)
    return one(log_emission, mask)


def viterbi(log_init, log_trans, log_emission, *, lengths=None) -> Viterbi:
    """Most probable state path and its joint log probability ``Viterbi(path, log_prob)``.

    Args as :func:`inference.hmm.forward_backward`; a (B, T, K) ``log_emission`` decodes a padded
    batch (``lengths`` (B,)). Ties are broken towards the lower state index.
    """
    return _run(*prepare(log_init, log_trans, log_emission, lengths))
