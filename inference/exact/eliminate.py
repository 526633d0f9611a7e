"""Variable elimination in log space over a `Plan`: arrays in, NamedTuples out.

``tables[f]`` is the log factor over ``plan.scopes[f]`` (one axis per variable, in that order).
Each cluster's table is the broadcast sum of its factors and incoming messages (the product in
log space), materialised once; summing out its variable is a ``logsumexp`` (sum-product) or a
``max`` (max-product) over one axis, so nothing under- or overflows. The plan is static: under
``jax.jit`` the whole pass unrolls into one program per structure.

- :func:`upward`: the upward pass; the log evidence (log normalising constant) is the sum of the
  roots' messages and the constant factors.
- :func:`marginals`: the downward pass (Hugin-style, dividing out a child's own message, a zero
  probability kept zero rather than NaN), then each variable's marginal from its own cluster.
- :func:`sample`: ancestral sampling backwards through the order: the last variable from its
  cluster, each earlier one from its cluster given the later ones already drawn: exact draws
  from the joint posterior.
- :func:`argmax`: max-product traceback: the most probable joint assignment.

Example (a - b with p(a) = (0.4, 0.6), p(b | a) = ((0.9, 0.1), (0.2, 0.8))):
    >>> import jax, jax.numpy as jnp
    >>> from inference.exact.plan import make_plan
    >>> plan = make_plan((2, 2), ((0,), (0, 1)))
    >>> tables = (jnp.log(jnp.array([0.4, 0.6])), jnp.log(jnp.array([[0.9, 0.1], [0.2, 0.8]])))
    >>> up = upward(plan, tables)
    >>> abs(float(up.log_evidence)) < 1e-6  # normalised tables: log p() = 0
    True
    >>> [round(float(v), 2) for v in jnp.exp(marginals(plan, up)[1])]
    [0.48, 0.52]
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from inference.exact.plan import Plan


class Upward(NamedTuple):
    psi: tuple  # per step: the cluster table over ``cluster.scope`` (factors + child messages)
    messages: tuple  # per step: the message over ``cluster.scope[1:]``
    log_evidence: jax.Array  # scalar: sum of the roots' messages and constant factors


def align(table, scope, target):
    """``table`` over ``scope`` as an array broadcastable over ``target`` (a superset)."""
    scope, target = tuple(scope), tuple(target)
    perm = sorted(range(len(scope)), key=lambda a: target.index(scope[a]))
    t = jnp.transpose(table, perm) if perm != list(range(len(scope))) else table
    shape = [1] * len(target)
    for a in perm:
        shape[target.index(scope[a])] = table.shape[a]
    return jnp.reshape(t, shape)


def _cluster_table(plan: Plan, step: int, tables, messages, dtype):
    c = plan.clusters[step]
    total = jnp.zeros(tuple(plan.cards[v] for v in c.scope), dtype)
    for f in c.factors:
        total = total + align(tables[f], plan.scopes[f], c.scope)
    for child in c.children:
        total = total + align(messages[child], plan.clusters[child].scope[1:], c.scope)
    return total


def upward(plan: Plan, tables, *, maximise: bool = False) -> Upward:
    """Eliminate every variable in order; ``maximise`` for max-product."""
    dtype = jnp.result_type(*tables) if tables else jnp.zeros(()).dtype
    psi, messages = [], []
    for step in range(len(plan.clusters)):
        table = _cluster_table(plan, step, tables, messages, dtype)
        psi.append(table)
        messages.append(jnp.max(table, axis=0) if maximise else logsumexp(table, axis=0))
    total = sum((jnp.sum(tables[f]) for f in plan.constants), jnp.zeros((), dtype))
    for step, c in enumerate(plan.clusters):
        if c.parent < 0:
            total = total + messages[step]
    return Upward(tuple(psi), tuple(messages), total)


def _divide(belief, message):
    """``belief - message`` in log space, with 0 / 0 = 0 (``-inf`` where the message is ``-inf``)."""
    return jnp.where(jnp.isneginf(message), -jnp.inf, belief - jnp.where(jnp.isneginf(message), 0.0, message))


def beliefs(plan: Plan, up: Upward) -> tuple:
    """Log belief (unnormalised posterior) of every cluster over its scope: the downward pass."""
    down = [None] * len(plan.clusters)
    out = [None] * len(plan.clusters)
    for step in reversed(range(len(plan.clusters))):
        c = plan.clusters[step]
        belief = up.psi[step]
        if down[step] is not None:
            belief = belief + align(down[step], c.scope[1:], c.scope)
        out[step] = belief
        for child in c.children:
            sep = plan.clusters[child].scope[1:]
            ratio = _divide(belief, align(up.messages[child], sep, c.scope))
            drop = tuple(a for a, v in enumerate(c.scope) if v not in sep)
            kept = [v for v in c.scope if v in sep]
            msg = logsumexp(ratio, axis=drop) if drop else ratio
            down[child] = align(msg, kept, sep).reshape(tuple(plan.cards[v] for v in sep))
    return tuple(out)


def marginals(plan: Plan, up: Upward) -> dict:
    """Variable -> normalised log marginal (its cluster's belief summed over the separator)."""
    out = {}
    for step, belief in enumerate(beliefs(plan, up)):
        m = logsumexp(belief, axis=tuple(range(1, belief.ndim))) if belief.ndim > 1 else belief
        out[plan.clusters[step].var] = m - logsumexp(m)
    return out


def _conditional(plan: Plan, step: int, psi, values, batch_shape):
    """Log table of the step's variable given the later ones in ``values``: ``batch + (K,)``."""
    c = plan.clusters[step]
    table = jnp.moveaxis(psi, 0, -1)
    if len(c.scope) == 1:
        return jnp.broadcast_to(table, batch_shape + table.shape)
    return table[tuple(values[v] for v in c.scope[1:])]


def gumbel_noise(seed: int, num_draws: int, num_samples: int, sizes) -> np.ndarray:
    """The Gumbel noise of ``num_draws`` categorical draws of ``num_samples`` each, over at most
    ``max(sizes)`` values, from NumPy's generator seeded with ``seed``: drawn outside the compiled
    programs, whose compilation a JAX random-number generator would slow 2-4 times (measured:
    threefry alone ~0.4-2 s of XLA compilation, more than the message passes)."""
    rng = np.random.default_rng(seed)
    return rng.gumbel(size=(max(num_draws, 1), num_samples, max(sizes, default=1)))


def categorical(logits, noise) -> jax.Array:
    """Gumbel-max draw from ``logits`` (..., K) with ``noise`` (..., >= K)."""
    return jnp.argmax(logits + noise[..., : logits.shape[-1]], axis=-1)


def sample(plan: Plan, up: Upward, noise) -> dict:
    """Variable -> ``(num_samples,)`` indices drawn from the joint posterior; ``noise``: Gumbel noise
    ``(steps, num_samples, >= max card)`` (:func:`gumbel_noise`)."""
    values = {}
    num_samples = noise.shape[1]
    for step in reversed(range(len(plan.clusters))):
        logits = _conditional(plan, step, up.psi[step], values, (num_samples,))
        values[plan.clusters[step].var] = categorical(logits, noise[step])
    return values


def argmax(plan: Plan, up: Upward) -> dict:
    """Variable -> index in the most probable joint assignment (``up`` from ``maximise=True``)."""
    values = {}
    for step in reversed(range(len(plan.clusters))):
        values[plan.clusters[step].var] = jnp.argmax(_conditional(plan, step, up.psi[step], values, ()), axis=-1)
    return values


def joint_log_prob(scopes, tables, values) -> jax.Array:
    """Sum of the log factors (over ``scopes``) at the assignments ``values`` (variable -> ``(n,)``
    indices): the unnormalised log joint at each draw."""
    total = jnp.zeros((), jnp.result_type(*tables))
    for table, scope in zip(tables, scopes):
        total = total + (table[tuple(values[v] for v in scope)] if scope else table)
    return total


def factor_values(scopes, tables, values, which, num_samples: int) -> tuple:
    """Log factors ``which`` (indices) at the assignments ``values``: ``(num_samples,)`` each."""
    return tuple(jnp.broadcast_to(tables[f][tuple(values[v] for v in scopes[f])], (num_samples,)) for f in which)
