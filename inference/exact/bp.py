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
    >>> import numpy as np
    >>> s = structure((2, 2), ((0,), (0, 1)))
    >>> tables = (np.log([0.4, 0.6]), np.log([[0.9, 0.1], [0.2, 0.8]]))
    >>> out = run(s, tables, damping=0.0, tol=1e-12, max_iter=10)
    >>> np.exp(out.var_beliefs[1]).round(2).tolist(), bool(out.max_change <= 1e-12)
    ([0.48, 0.52], True)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from inference.exact.eliminate import align, cdf_table, draw, logsumexp


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
    iteration: object
    max_change: object


class BPResult(NamedTuple):
    var_beliefs: tuple  # per variable: normalised log belief
    factor_beliefs: tuple  # per factor: normalised log belief over its scope (scalar 0 when empty)
    log_z: object  # Bethe estimate of the log normalising constant (exact on a tree)
    iterations: object
    max_change: object


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


def _normalise(m, xp):
    return m - logsumexp(m, 0, xp)


def init(s: Structure, dtype, xp=np) -> BPState:
    uniform = tuple(xp.full((s.cards[s.scopes[f][p]],), -np.log(s.cards[s.scopes[f][p]]), dtype) for f, p in s.edges)
    return BPState(uniform, uniform, xp.zeros((), np.int32), xp.full((), np.inf, dtype))


def _factor_messages(s: Structure, tables, to_factor, xp):
    index = {edge: e for e, edge in enumerate(s.edges)}
    out = [None] * len(s.edges)
    for f, scope in enumerate(s.scopes):
        for p, v in enumerate(scope):
            total = tables[f]
            for q, u in enumerate(scope):
                if q != p:
                    total = total + align(to_factor[index[(f, q)]], (u,), scope, xp)
            drop = tuple(a for a in range(len(scope)) if a != p)
            out[index[(f, p)]] = _normalise(logsumexp(total, drop, xp) if drop else total, xp)
    return out


def _variable_messages(s: Structure, to_var, xp):
    out = [None] * len(s.edges)
    for edges in s.var_edges:
        for e in edges:
            total = xp.zeros_like(to_var[e])
            for o in edges:
                if o != e:
                    total = total + to_var[o]
            out[e] = _normalise(total, xp)
    return out


def sweep(s: Structure, tables, state: BPState, damping, xp=np) -> BPState:
    """One flooding update of every message (damped factor messages)."""
    fresh = _factor_messages(s, tables, state.to_factor, xp)
    with np.errstate(divide="ignore"):
        keep, move = xp.log(damping), xp.log1p(-damping)  # log 0 = -inf: no damping, exactly
    damped = [xp.logaddexp(move + new, keep + old) for new, old in zip(fresh, state.to_var)]
    change = xp.zeros((), state.max_change.dtype)
    for new, old in zip(damped, state.to_var):
        change = xp.maximum(change, xp.max(xp.abs(xp.exp(new) - xp.exp(old))))
    return BPState(tuple(damped), tuple(_variable_messages(s, damped, xp)), state.iteration + 1,
                   xp.where(xp.isnan(change), np.inf, change))


def run(s: Structure, tables, *, damping, tol, max_iter, xp=np) -> BPResult:
    """Sweeps until the largest message change is at most ``tol`` (or ``max_iter`` sweeps):
    a Python loop with NumPy, ``lax.while_loop`` with ``jax.numpy`` (under ``jax.jit``)."""
    dtype = xp.result_type(*tables)
    damping = xp.asarray(damping, dtype)
    state = init(s, dtype, xp)
    if xp is np:
        while state.max_change > tol and state.iteration < max_iter:
            state = sweep(s, tables, state, damping, xp)
    else:
        from jax import lax

        state = lax.while_loop(lambda st: (st.max_change > tol) & (st.iteration < max_iter),
                               lambda st: sweep(s, tables, st, damping, xp), state)
    return _result(s, tables, state, xp)


def _result(s: Structure, tables, state: BPState, xp) -> BPResult:
    index = {edge: e for e, edge in enumerate(s.edges)}
    dtype = xp.result_type(*tables)
    var_beliefs = []
    for k, edges in zip(s.cards, s.var_edges):
        total = xp.zeros((k,), dtype)
        for e in edges:
            total = total + state.to_var[e]
        var_beliefs.append(_normalise(total, xp))
    factor_beliefs, log_z = [], xp.zeros((), dtype)
    for f, scope in enumerate(s.scopes):
        if not scope:
            factor_beliefs.append(xp.zeros((), dtype))
            log_z = log_z + tables[f]
            continue
        total = tables[f]
        for p, v in enumerate(scope):
            total = total + align(state.to_factor[index[(f, p)]], (v,), scope, xp)
        belief = total - logsumexp(xp.reshape(total, (-1,)), 0, xp)
        factor_beliefs.append(belief)
        b = xp.exp(belief)
        log_z = log_z + xp.sum(xp.where(b > 0, b * (tables[f] - belief), xp.zeros_like(b)))
    for edges, belief in zip(s.var_edges, var_beliefs):
        b = xp.exp(belief)
        log_z = log_z + (len(edges) - 1) * xp.sum(xp.where(b > 0, b * belief, xp.zeros_like(b)))
    return BPResult(tuple(var_beliefs), tuple(factor_beliefs), log_z, state.iteration, state.max_change)


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
    """:func:`tree_order` without the factors that draw nothing (one uniform per step and draw:
    `inference.exact.eliminate.uniform_noise`)."""
    return tuple(step for step in tree_order(s) if step[0] == "root" or step[2])


def sample_tree(s: Structure, result: BPResult, noise, xp=np) -> dict:
    """Variable -> ``(num_samples,)`` exact joint draws on a tree-structured factor graph
    (``noise``: uniforms, one row per :func:`sampling_steps` step)."""
    steps = sampling_steps(s)
    num_samples = noise.shape[1]
    values = {}
    for i, (f, v, others) in enumerate(steps):
        if f == "root":
            cdf = cdf_table(result.var_beliefs[v], xp)
            values[v] = draw(xp.broadcast_to(cdf, (num_samples,) + cdf.shape), noise[i], xp)
            continue
        table = align(result.factor_beliefs[f], s.scopes[f], (v,) + others, xp)  # v first, then ``others``
        cdf = cdf_table(xp.reshape(table, (s.cards[v], -1)), xp)  # others' joint given v
        flat = draw(cdf[values[v]], noise[i], xp)
        for u, idx in zip(others, xp.unravel_index(flat, tuple(s.cards[u] for u in others))):
            values[u] = idx
    return values


def sample_marginals(result: BPResult, noise, xp=np) -> dict:
    """Variable -> ``(num_samples,)`` independent draws from each variable's belief (``noise``:
    uniforms, one row per variable)."""
    num_samples = noise.shape[1]
    return {v: draw(xp.broadcast_to(cdf_table(b, xp), (num_samples,) + b.shape), noise[v], xp)
            for v, b in enumerate(result.var_beliefs)}
