"""Sum-product belief propagation on a factor graph, in log space: arrays in, NamedTuples out.

The factor graph is the `inference.exact.factors.Graph`'s (variables ``0..n-1``, one log table
per factor over its scope). One :func:`sweep` is a flooding update: every factor-to-variable
message ``m_fi(x_i) = logsumexp_{x_f - x_i} [psi_f + sum_{j in f, j != i} m_jf]``, then every
variable-to-factor message ``m_if = sum_{g ni i, g != f} m_gi``, each normalised, the new
factor messages damped in probability space (``(1 - damping) new + damping old``). :func:`run`
loops sweeps under ``lax.while_loop`` until the largest change of a message (in probability) is at
most ``tol`` or ``max_iter`` sweeps ran.

On a tree (a polytree Bayesian network) the messages are exact after as many sweeps as the
graph's diameter, and the beliefs are the exact marginals; on a graph with loops they are the
loopy-BP (Bethe) approximation, which may not converge. :func:`bethe_log_z` is minus the Bethe
free energy at the beliefs: the exact log normalising constant on a tree, an approximation
otherwise. :func:`sample_tree` draws exactly from the joint on a tree (each factor's belief
conditioned on the variable it was reached from); :func:`sample_marginals` draws every variable
independently from its belief (loopy BP's fully factorised approximation).

Example (a - b, p(a) = (0.4, 0.6), p(b | a) = ((0.9, 0.1), (0.2, 0.8))):
    >>> import jax.numpy as jnp
    >>> s = structure((2, 2), ((0,), (0, 1)))
    >>> tables = (jnp.log(jnp.array([0.4, 0.6])), jnp.log(jnp.array([[0.9, 0.1], [0.2, 0.8]])))
    >>> out = run(s, tables, damping=0.0, tol=1e-12, max_iter=10)
    >>> [round(float(v), 2) for v in jnp.exp(out.var_beliefs[1])], bool(out.max_change <= 1e-12)
    ([0.48, 0.52], True)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp, xlogy

from inference.exact.eliminate import align, categorical


class Structure(NamedTuple):
    """Hashable factor-graph structure: edges are (factor, position in its scope)."""

    cards: tuple[int, ...]
    scopes: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[int, int], ...]  # (factor, position), factors with a non-empty scope only
    var_edges: tuple[tuple[int, ...], ...]  # per variable: its edges' indices
    is_tree: bool


class BPState(NamedTuple):
    to_var: tuple  # per edge: normalised log message factor -> variable
    to_factor: tuple  # per edge: normalised log message variable -> factor
    iteration: jax.Array
    max_change: jax.Array


class BPResult(NamedTuple):
    var_beliefs: tuple  # per variable: normalised log belief
    factor_beliefs: tuple  # per factor: normalised log belief over its scope (scalar 0 when empty)
    log_z: jax.Array  # Bethe estimate of the log normalising constant (exact on a tree)
    iterations: jax.Array
    max_change: jax.Array


def structure(cards, scopes) -> Structure:
    edges = tuple((f, p) for f, s in enumerate(scopes) for p in range(len(s)))
    var_edges = [[] for _ in cards]
    for e, (f, p) in enumerate(edges):
        var_edges[scopes[f][p]].append(e)
    # a forest iff edges = nodes - components (variables and factors with a scope as nodes)
    parent = list(range(len(cards) + len(scopes)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    cycle = False
    for f, p in edges:
        a, b = find(len(cards) + f), find(scopes[f][p])
        cycle |= a == b
        parent[a] = b
    return Structure(tuple(cards), tuple(tuple(s) for s in scopes), edges, tuple(tuple(v) for v in var_edges), not cycle)


def _normalise(m):
    return m - logsumexp(m)


def init(s: Structure, dtype) -> BPState:
    uniform = tuple(jnp.full((s.cards[s.scopes[f][p]],), -jnp.log(s.cards[s.scopes[f][p]]), dtype) for f, p in s.edges)
    return BPState(uniform, uniform, jnp.zeros((), jnp.int32), jnp.full((), jnp.inf, dtype))


def _factor_messages(s: Structure, tables, to_factor):
    index = {edge: e for e, edge in enumerate(s.edges)}
    out = [None] * len(s.edges)
    for f, scope in enumerate(s.scopes):
        for p, v in enumerate(scope):
            total = tables[f]
            for q, u in enumerate(scope):
                if q != p:
                    total = total + align(to_factor[index[(f, q)]], (u,), scope)
            drop = tuple(a for a in range(len(scope)) if a != p)
            out[index[(f, p)]] = _normalise(logsumexp(total, axis=drop) if drop else total)
    return out


def _variable_messages(s: Structure, to_var):
    out = [None] * len(s.edges)
    for edges in s.var_edges:
        for e in edges:
            total = sum((to_var[o] for o in edges if o != e), jnp.zeros_like(to_var[e]))
            out[e] = _normalise(total)
    return out


def sweep(s: Structure, tables, state: BPState, damping) -> BPState:
    """One flooding update of every message (damped factor messages)."""
    fresh = _factor_messages(s, tables, state.to_factor)
    damped = [jnp.logaddexp(jnp.log1p(-damping) + new, jnp.log(damping) + old)
              for new, old in zip(fresh, state.to_var)]
    change = jnp.max(jnp.stack([jnp.max(jnp.abs(jnp.exp(n) - jnp.exp(o))) for n, o in zip(damped, state.to_var)]
                               or [jnp.zeros((), state.max_change.dtype)]))
    return BPState(tuple(damped), tuple(_variable_messages(s, damped)), state.iteration + 1,
                   jnp.where(jnp.isnan(change), jnp.inf, change))


def run(s: Structure, tables, *, damping, tol, max_iter) -> BPResult:
    """Sweeps until the largest message change is at most ``tol`` (or ``max_iter`` sweeps)."""
    dtype = jnp.result_type(*tables)
    damping = jnp.asarray(damping, dtype)
    state = lax.while_loop(lambda st: (st.max_change > tol) & (st.iteration < max_iter),
                           lambda st: sweep(s, tables, st, damping), init(s, dtype))
    return _result(s, tables, state)


def _result(s: Structure, tables, state: BPState) -> BPResult:
    index = {edge: e for e, edge in enumerate(s.edges)}
    var_beliefs = tuple(_normalise(sum((state.to_var[e] for e in edges), jnp.zeros((k,), tables[0].dtype)))
                        for k, edges in zip(s.cards, s.var_edges))
    factor_beliefs, log_z = [], jnp.zeros((), tables[0].dtype)
    for f, scope in enumerate(s.scopes):
        if not scope:
            factor_beliefs.append(jnp.zeros((), tables[f].dtype))
            log_z = log_z + tables[f]
            continue
        total = tables[f] + sum((align(state.to_factor[index[(f, p)]], (v,), scope) for p, v in enumerate(scope)),
                                jnp.zeros((), tables[f].dtype))
        belief = total - logsumexp(total)
        factor_beliefs.append(belief)
        b = jnp.exp(belief)
        log_z = log_z + jnp.sum(jnp.where(b > 0, b * (tables[f] - belief), 0.0))
    for k, edges, belief in zip(s.cards, s.var_edges, var_beliefs):
        log_z = log_z + (len(edges) - 1) * jnp.sum(xlogy(jnp.exp(belief), jnp.exp(belief)))
    return BPResult(var_beliefs, tuple(factor_beliefs), log_z, state.iteration, state.max_change)


def tree_order(s: Structure):
    """Static traversal of a forest: ``("root", v)`` then ``(f, v, others)`` steps, each factor
    reached from one variable ``v`` whose other variables are drawn given ``v``."""
    seen_var, seen_factor, steps = set(), set(), []
    factors_of = [[s.edges[e][0] for e in edges] for edges in s.var_edges]
    for root in range(len(s.cards)):
        if root in seen_var:
            continue
        seen_var.add(root)
        steps.append(("root", root, ()))
        queue = [root]
        while queue:
            v = queue.pop(0)
            for f in factors_of[v]:
                if f in seen_factor:
                    continue
                seen_factor.add(f)
                others = tuple(u for u in s.scopes[f] if u != v)
                steps.append((f, v, others))
                seen_var.update(others)
                queue.extend(others)
    return tuple(steps)


def sampling_steps(s: Structure) -> tuple:
    """:func:`tree_order` without the factors that draw nothing, and the number of values each
    step draws from (for the noise: `inference.exact.eliminate.gumbel_noise`)."""
    steps = tuple(step for step in tree_order(s) if step[0] == "root" or step[2])
    sizes = tuple(s.cards[v] if f == "root" else math.prod(s.cards[u] for u in others) for f, v, others in steps)
    return steps, sizes


def sample_tree(s: Structure, result: BPResult, noise) -> dict:
    """Variable -> ``(num_samples,)`` exact joint draws on a tree-structured factor graph
    (``noise``: Gumbel noise for the :func:`sampling_steps`)."""
    steps, _ = sampling_steps(s)
    num_samples = noise.shape[1]
    values = {}
    for i, (f, v, others) in enumerate(steps):
        if f == "root":
            values[v] = categorical(jnp.broadcast_to(result.var_beliefs[v], (num_samples, s.cards[v])), noise[i])
            continue
        scope = s.scopes[f]
        table = align(result.factor_beliefs[f], scope, (v,) + others)  # v first, then ``others``
        logits = table[values[v]].reshape(num_samples, -1)
        flat = categorical(logits, noise[i])
        for u, idx in zip(others, jnp.unravel_index(flat, tuple(s.cards[u] for u in others))):
            values[u] = idx
    return values


def sample_marginals(result: BPResult, noise) -> dict:
    """Variable -> ``(num_samples,)`` independent draws from each variable's belief (``noise``:
    Gumbel noise, one row per variable)."""
    num_samples = noise.shape[1]
    return {v: categorical(jnp.broadcast_to(b, (num_samples,) + b.shape), noise[v]) for v, b in enumerate(result.var_beliefs)}
