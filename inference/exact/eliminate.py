"""Variable elimination in log space over a `Plan`: arrays in, NamedTuples out.

``tables[f]`` is the log factor over ``plan.scopes[f]`` (one axis per variable, in that order).
Each cluster's table is the broadcast sum of its factors and incoming messages (the product in
log space), materialised once; summing out its variable is a ``logsumexp`` (sum-product) or a
``max`` (max-product) over one axis, so nothing under- or overflows.

Every function takes the array namespace ``xp``: ``numpy`` (the default, and what
`inference.exact` uses on CPU: the passes are many small array operations, which XLA takes
seconds to compile for a network of a few dozen nodes while NumPy runs them in milliseconds) or
``jax.numpy`` under ``jax.jit`` with the plan static (one program per structure: what pays on an
accelerator).

- :func:`upward`: the upward pass; the log evidence (log normalising constant) is the sum of the
  roots' messages and the constant factors.
- :func:`marginals`: the downward pass (Hugin-style, dividing out a child's own message, a zero
  probability kept zero rather than NaN), then each variable's marginal from its own cluster.
- :func:`sample`: ancestral sampling backwards through the order: the last variable from its
  cluster, each earlier one from its cluster given the later ones already drawn: exact draws
  from the joint posterior.
- :func:`argmax`: max-product traceback: the most probable joint assignment.

Example (a - b with p(a) = (0.4, 0.6), p(b | a) = ((0.9, 0.1), (0.2, 0.8))):
    >>> import numpy as np
    >>> from inference.exact.plan import make_plan
    >>> plan = make_plan((2, 2), ((0,), (0, 1)))
    >>> tables = (np.log([0.4, 0.6]), np.log([[0.9, 0.1], [0.2, 0.8]]))
    >>> up = upward(plan, tables)
    >>> abs(float(up.log_evidence)) < 1e-12  # normalised tables: log p() = 0
    True
    >>> np.exp(marginals(plan, up)[1]).round(2).tolist()
    [0.48, 0.52]
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from inference.exact.plan import Plan


class Upward(NamedTuple):
    psi: tuple  # per step: the cluster table over ``cluster.scope`` (factors + child messages)
    messages: tuple  # per step: the message over ``cluster.scope[1:]``
    log_evidence: object  # scalar: sum of the roots' messages and constant factors


def logsumexp(x, axis, xp=np):
    """``log(sum(exp(x)))`` over ``axis`` (an int or a tuple), ``-inf`` where every term is."""
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    return xp.log(xp.sum(xp.exp(x - m), axis=axis)) + xp.squeeze(m, axis=axis)


def align(table, scope, target, xp=np):
    """``table`` over ``scope`` as an array broadcastable over ``target`` (a superset)."""
    scope, target = tuple(scope), tuple(target)
    perm = sorted(range(len(scope)), key=lambda a: target.index(scope[a]))
    t = xp.transpose(table, perm) if perm != list(range(len(scope))) else table
    shape = [1] * len(target)
    for a in perm:
        shape[target.index(scope[a])] = table.shape[a]
    return xp.reshape(t, tuple(shape))


def _cluster_table(plan: Plan, step: int, tables, messages, dtype, xp):
    c = plan.clusters[step]
    total = xp.zeros(tuple(plan.cards[v] for v in c.scope), dtype)
    for f in c.factors:
        total = total + align(tables[f], plan.scopes[f], c.scope, xp)
    for child in c.children:
        total = total + align(messages[child], plan.clusters[child].scope[1:], c.scope, xp)
    return total


def upward(plan: Plan, tables, *, maximise: bool = False, xp=np) -> Upward:
    """Eliminate every variable in order; ``maximise`` for max-product."""
    dtype = xp.result_type(*tables)
    psi, messages = [], []
    for step in range(len(plan.clusters)):
        table = _cluster_table(plan, step, tables, messages, dtype, xp)
        psi.append(table)
        messages.append(xp.max(table, axis=0) if maximise else logsumexp(table, 0, xp))
    total = xp.zeros((), dtype)
    for f in plan.constants:
        total = total + xp.sum(tables[f])
    for step, c in enumerate(plan.clusters):
        if c.parent < 0:
            total = total + messages[step]
    return Upward(tuple(psi), tuple(messages), total)


def _divide(belief, message, xp):
    """``belief - message`` in log space, with 0 / 0 = 0 (``-inf`` where the message is ``-inf``)."""
    return xp.where(xp.isneginf(message), -xp.inf, belief - message)  # -inf - -inf = NaN: replaced


def beliefs(plan: Plan, up: Upward, xp=np) -> tuple:
    """Log belief (unnormalised posterior) of every cluster over its scope: the downward pass."""
    down = [None] * len(plan.clusters)
    out = [None] * len(plan.clusters)
    for step in reversed(range(len(plan.clusters))):
        c = plan.clusters[step]
        belief = up.psi[step]
        if down[step] is not None:
            belief = belief + align(down[step], c.scope[1:], c.scope, xp)
        out[step] = belief
        for child in c.children:
            sep = plan.clusters[child].scope[1:]  # a subset of c.scope, in the same order
            ratio = _divide(belief, align(up.messages[child], sep, c.scope, xp), xp)
            drop = tuple(a for a, v in enumerate(c.scope) if v not in sep)
            down[child] = logsumexp(ratio, drop, xp) if drop else ratio
    return tuple(out)


def marginals(plan: Plan, up: Upward, xp=np) -> dict:
    """Variable -> normalised log marginal (its cluster's belief summed over the separator)."""
    out = {}
    for step, belief in enumerate(beliefs(plan, up, xp)):
        m = logsumexp(belief, tuple(range(1, belief.ndim)), xp) if belief.ndim > 1 else belief
        out[plan.clusters[step].var] = m - logsumexp(m, 0, xp)
    return out


def _conditional(plan: Plan, step: int, psi, values, batch_shape, xp):
    """Log table of the step's variable given the later ones in ``values``: ``batch + (K,)``."""
    c = plan.clusters[step]
    table = xp.moveaxis(psi, 0, -1)
    if len(c.scope) == 1:
        return xp.broadcast_to(table, batch_shape + table.shape)
    return table[tuple(values[v] for v in c.scope[1:])]


def uniform_noise(seed: int, num_draws: int, num_samples: int) -> np.ndarray:
    """The uniforms of ``num_draws`` categorical draws of ``num_samples`` each, from NumPy's
    generator seeded with ``seed`` (the same draws whichever namespace runs the passes; a JAX
    random-number generator would add ~0.4-2 s of XLA compilation to a jitted pass)."""
    return np.random.default_rng(seed).random((max(num_draws, 1), num_samples))


def cdf_table(logits, xp=np):
    """Normalised cumulative probabilities along the last axis of a log table (one ``exp`` per
    table entry, not one per draw: exp was 80% of the time of drawing 1000 samples per draw)."""
    cdf = xp.cumsum(xp.exp(logits - xp.max(logits, axis=-1, keepdims=True)), axis=-1)
    return cdf / cdf[..., -1:]


def draw(cdf, u, xp=np):
    """Inverse-CDF draws: rows ``cdf`` (n, K), uniforms ``u`` (n,) in [0, 1): the first value whose
    cumulative probability reaches ``1 - u`` (in (0, 1], so a value of probability zero is never
    drawn); one uniform per draw."""
    return xp.minimum(xp.sum(cdf < (1 - u)[..., None], axis=-1), cdf.shape[-1] - 1)


def sample(plan: Plan, up: Upward, noise, xp=np) -> dict:
    """Variable -> ``(num_samples,)`` indices drawn from the joint posterior; ``noise``: uniforms
    ``(steps, num_samples)`` (:func:`uniform_noise`)."""
    values = {}
    num_samples = noise.shape[1]
    for step in reversed(range(len(plan.clusters))):
        c = plan.clusters[step]
        cdf = cdf_table(xp.moveaxis(up.psi[step], 0, -1), xp)  # (separator..., K)
        if len(c.scope) > 1:
            rows = cdf[tuple(values[v] for v in c.scope[1:])]
        else:
            rows = xp.broadcast_to(cdf, (num_samples,) + cdf.shape)
        values[c.var] = draw(rows, noise[step], xp)
    return values


def argmax(plan: Plan, up: Upward, xp=np) -> dict:
    """Variable -> index in the most probable joint assignment (``up`` from ``maximise=True``)."""
    values = {}
    for step in reversed(range(len(plan.clusters))):
        values[plan.clusters[step].var] = xp.argmax(_conditional(plan, step, up.psi[step], values, (), xp), axis=-1)
    return values


def factor_values(scopes, tables, values, num_samples: int, xp=np) -> tuple:
    """Every log factor (over ``scopes``) at the assignments ``values`` (variable -> ``(n,)``
    indices): ``(num_samples,)`` each."""
    return tuple(xp.broadcast_to(t[tuple(values[v] for v in s)] if s else t, (num_samples,))
                 for t, s in zip(tables, scopes))
