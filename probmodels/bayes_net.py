"""Discrete Bayesian networks from conditional probability tables, as NumPyro programs.

``bayes_net(cpts)`` returns a program with one discrete sample site per node, named after the node
(``Bernoulli`` for a two-valued node, ``Categorical`` otherwise, values ``0..K-1``), sampled in a
topological order with its probabilities looked up in its table at its parents' values. Observed
nodes are keyword arguments, ``net(W=1)``, as for every model here; ``inference.exact(net, W=1)``
computes the posterior exactly. ``cpts`` maps each node to one of

- ``{"parents": [...], "probs": table}``: the full table, shape ``(K_parent_1, ..., K_node)``,
  each row (last axis) summing to one;
- ``{"parents": [...], "p": table}``: a two-valued node, ``P(node = 1 | parents)`` with shape
  ``(K_parent_1, ...)`` (a number for a root);
- ``(parents, table)``: the same as ``"probs"``;
- the result of :func:`noisy_or` or :func:`logistic_cpd`.

Every table is checked when the network is built: unknown parents, cycles, shapes that do not
match the parents, probabilities outside [0, 1] or rows not summing to one are ``ValueError``\\ s
naming the node.

Example (Alpaydin's sprinkler: P(W) = 0.65125 with cloudy C, sprinkler S, rain R, wet grass W):
    >>> import inference, probmodels
    >>> net = probmodels.bayes_net({"C": {"p": 0.5}, "S": {"parents": ["C"], "p": [0.5, 0.1]},
    ...     "R": {"parents": ["C"], "p": [0.1, 0.8]},
    ...     "W": {"parents": ["S", "R"], "p": [[0.1, 0.9], [0.9, 0.95]]}})
    >>> round(float(inference.exact(net, num_samples=10).marginals["W"][1]), 5)
    0.65125
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

ROW_TOL = 1e-6  # how far a table row's sum may be from one


@dataclass(frozen=True, eq=False)
class BayesNet:
    """A checked discrete Bayesian network; calling it runs the NumPyro program ``net(**observed)``.

    Attributes: ``order`` (nodes, topologically sorted), ``parents`` (node -> tuple of parents),
    ``tables`` (node -> full table ``(K_parent_1, ..., K_node)``), ``cards`` (node -> K).

    Example:
        >>> import probmodels
        >>> net = probmodels.bayes_net({"R": {"p": 0.4}, "W": {"parents": ["R"], "p": [0.2, 0.9]}})
        >>> net.order, net.cards["W"], net.tables["W"].round(6).tolist()
        (('R', 'W'), 2, [[0.8, 0.2], [0.1, 0.9]])
    """

    order: tuple
    parents: dict
    tables: dict
    cards: dict

    def __call__(self, **observed):
        unknown = sorted(set(observed) - set(self.order))
        if unknown:
            raise TypeError(f"unknown node(s) {unknown} passed to the network; its nodes are {list(self.order)}")
        observed = {n: _observed(n, v, self.cards[n]) for n, v in observed.items()}  # checked before any site
        values = {}
        for node in self.order:
            table = jnp.asarray(self.tables[node])
            index = tuple(jnp.asarray(values[p]).astype(jnp.int32) for p in self.parents[node])
            probs = table[index] if index else table
            obs = observed.get(node)
            fn = dist.Bernoulli(probs=probs[..., 1]) if self.cards[node] == 2 else dist.Categorical(probs=probs)
            values[node] = numpyro.sample(node, fn, obs=obs)
        return values

    def factor_tables(self, **observed):
        """``(graph, log_tables, supports, observed)`` as `inference.exact` reads them from a trace,
        straight from the tables (so exact inference on a network traces nothing): the unobserved
        nodes are the variables, each node's log table is a factor over its unobserved family,
        sliced at the observed values.

        Example:
            >>> import probmodels
            >>> net = probmodels.bayes_net({"R": {"p": 0.4}, "W": {"parents": ["R"], "p": [0.2, 0.9]}})
            >>> graph, tables, _, _ = net.factor_tables(W=1)
            >>> graph.names, graph.scopes, graph.observed, tables[1].round(4).tolist()
            (('R',), ((0,), (0,)), ('W',), [-1.6094, -0.1054])
        """
        from inference.exact.factors import Graph

        unknown = sorted(set(observed) - set(self.order))
        if unknown:
            raise TypeError(f"unknown node(s) {unknown} passed to the network; its nodes are {list(self.order)}")
        obs = {n: _observed(n, v, self.cards[n]) for n, v in observed.items() if v is not None}
        names = tuple(n for n in self.order if n not in obs)
        index = {n: i for i, n in enumerate(names)}
        scopes, tables = [], []
        with np.errstate(divide="ignore"):
            for node in self.order:
                family = self.parents[node] + (node,)
                table = np.log(self.tables[node])[tuple(obs.get(n, slice(None)) for n in family)]
                scope = [index[n] for n in family if n not in obs]
                order = np.argsort(scope)
                scopes.append(tuple(scope[i] for i in order))
                tables.append(np.transpose(table, order))
        graph = Graph(names, tuple(self.cards[n] for n in names), self.order, tuple(scopes), (), 0,
                      tuple(n for n in self.order if n in obs), ())
        supports = tuple(np.arange(self.cards[n]) for n in names)
        return graph, tuple(tables), supports, {n: np.asarray(v) for n, v in obs.items()}

    def __repr__(self):
        nodes = [f"{n} | {', '.join(self.parents[n])}" if self.parents[n] else n for n in self.order]
        return f"bayes_net({'; '.join(nodes)})"


def _observed(node, value, card):
    if value is None or isinstance(value, jax.core.Tracer):
        return value
    v = np.asarray(value)
    if v.ndim != 0:
        raise ValueError(f"{node}: an observed node takes one value, got an array of shape {v.shape}")
    if not (np.issubdtype(v.dtype, np.number) or v.dtype == bool) or not float(v) == int(float(v)) \
            or not 0 <= int(float(v)) < card:
        raise ValueError(f"{node}: observed value {value!r} is not one of its values 0..{card - 1}")
    return int(float(v))


def bayes_net(cpts) -> BayesNet:
    """A discrete Bayesian network from its conditional probability tables (see module docstring).

    Example (the chain C -> R -> W: P(W = 1) = 0.466, P(C = 1 | W = 1) = 0.65236):
        >>> import inference, probmodels
        >>> net = probmodels.bayes_net({"C": {"p": 0.4}, "R": {"parents": ["C"], "p": [0.1, 0.8]},
        ...                             "W": {"parents": ["R"], "p": [0.2, 0.9]}})
        >>> round(float(inference.exact(net, num_samples=10).marginals["W"][1]), 6)
        0.466
    """
    if not isinstance(cpts, Mapping) or not cpts:
        raise TypeError(f"cpts must be a non-empty dict node -> table, got {type(cpts).__name__}")
    specs = {}
    for node, spec in cpts.items():
        if not isinstance(node, str) or not node:
            raise TypeError(f"cpts: node names must be non-empty strings, got {node!r}")
        specs[node] = _spec(node, spec)
    for node, (parents, _, _) in specs.items():
        for p in parents:
            if p not in specs:
                raise ValueError(f"node {node!r}: unknown parent {p!r} (nodes: {sorted(specs)})")
    order = _topological(specs)
    cards = {n: (2 if kind == "p" else int(np.shape(t)[-1])) for n, (_, kind, t) in specs.items()}
    tables = {n: _table(n, *specs[n], cards) for n in order}
    return BayesNet(order, {n: specs[n][0] for n in order}, tables, cards)


def _spec(node, spec):
    if isinstance(spec, Mapping):
        extra = set(spec) - {"parents", "probs", "p"}
        if extra:
            raise ValueError(f"node {node!r}: unknown key(s) {sorted(extra)}; use 'parents' and 'probs' or 'p'")
        if ("probs" in spec) == ("p" in spec):
            raise ValueError(f"node {node!r}: give exactly one of 'probs' (full table) or 'p' (P(node = 1 | parents))")
        kind = "probs" if "probs" in spec else "p"
        parents, table = spec.get("parents", ()), spec[kind]
    elif isinstance(spec, Sequence) and not isinstance(spec, str) and len(spec) == 2:
        kind, (parents, table) = "probs", spec
    else:
        raise TypeError(f"node {node!r}: expected a dict with 'parents' and 'probs' or 'p', or a (parents, probs) "
                        f"pair, got {type(spec).__name__}")
    parents = (parents,) if isinstance(parents, str) else tuple(parents)
    if not all(isinstance(p, str) for p in parents):
        raise TypeError(f"node {node!r}: parents must be node names (strings), got {parents!r}")
    if len(set(parents)) != len(parents):
        raise ValueError(f"node {node!r}: a parent is listed twice in {parents}")
    try:
        table = np.asarray(table, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"node {node!r}: its table must be numeric ({exc})") from exc
    if kind == "probs" and table.ndim == 0:
        raise ValueError(f"node {node!r}: a 'probs' table needs a last axis over the node's values")
    return parents, kind, table


def _topological(specs) -> tuple:
    order, state = [], {}  # state: 1 visiting, 2 done

    def visit(node, path):
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycle = path[path.index(node):] + [node]
            raise ValueError(f"node {node!r} is on a cycle ({' -> '.join(reversed(cycle))}): a Bayesian network "
                             "must be acyclic")
        state[node] = 1
        for p in specs[node][0]:
            visit(p, path + [node])
        state[node] = 2
        order.append(node)

    for node in specs:
        visit(node, [])
    return tuple(order)


def _table(node, parents, kind, table, cards):
    expected = tuple(cards[p] for p in parents)
    shape = table.shape if kind == "p" else table.shape[:-1]
    if shape != expected:
        what = "P(node = 1 | parents)" if kind == "p" else "the table"
        raise ValueError(f"node {node!r}: {what} has shape {table.shape}, expected {expected if kind == 'p' else expected + (table.shape[-1],)} "
                         f"(parents {list(parents)} with {list(expected)} values{'' if kind == 'p' else ', then the node' + chr(39) + 's own'})")
    if not np.all(np.isfinite(table)) or np.any(table < 0) or np.any(table > 1):
        raise ValueError(f"node {node!r}: probabilities must lie in [0, 1], got {table.min()!r}..{table.max()!r}")
    if kind == "p":
        return np.stack([1.0 - table, table], axis=-1)
    sums = table.sum(axis=-1)
    off = np.abs(sums - 1.0) > ROW_TOL
    if np.any(off):
        row = tuple(int(i) for i in np.argwhere(off)[0]) if off.ndim else ()
        at = f" at parents {dict(zip(parents, row))}" if parents else ""
        raise ValueError(f"node {node!r}: its table row{at} sums to {float(sums[row]):.8g}, not one")
    return table


def noisy_or(parents, q, *, leak: float = 0.0) -> dict:
    """Noisy-OR table of a two-valued node with two-valued parents:
    ``P(node = 1 | x) = 1 - (1 - leak) * prod_j q_j ** x_j``; ``q_j`` is the probability that
    parent ``j`` alone fails to turn the node on (a number for every parent, or one per parent).

    Example (Alpaydin 14.6: q = 0.1 for rain and sprinkler gives P(W | R, S) = 0.99):
        >>> from probmodels import noisy_or
        >>> round(float(noisy_or(["R", "S"], 0.1)["probs"][1, 1, 1]), 6)
        0.99
    """
    parents = (parents,) if isinstance(parents, str) else tuple(parents)
    q = np.broadcast_to(np.asarray(q, float), (len(parents),)) if np.ndim(q) == 0 else np.asarray(q, float)
    if q.shape != (len(parents),):
        raise ValueError(f"q: one probability per parent ({len(parents)}), got shape {q.shape}")
    if not np.all((q >= 0) & (q <= 1)):
        raise ValueError(f"q: probabilities must lie in [0, 1], got {q.tolist()}")
    if not 0.0 <= float(leak) < 1.0:
        raise ValueError(f"leak must lie in [0, 1), got {leak!r}")
    grid = np.indices((2,) * len(parents)).reshape(len(parents), -1).T  # every parent configuration
    p1 = 1.0 - (1.0 - leak) * np.prod(np.where(grid == 1, q, 1.0), axis=1)
    p1 = p1.reshape((2,) * len(parents))
    return {"parents": parents, "probs": np.stack([1.0 - p1, p1], axis=-1)}


def logistic_cpd(parents, weights, bias: float = 0.0, *, cards=None) -> dict:
    """Logistic table of a two-valued node: ``P(node = 1 | x) = sigmoid(bias + sum_j w_j x_j)``,
    parent values ``x_j`` in ``0..cards_j - 1`` (two-valued parents by default).

    Example:
        >>> from probmodels import logistic_cpd
        >>> cpd = logistic_cpd(["A", "B"], [2.0, -1.0], bias=-0.5)
        >>> round(float(cpd["probs"][1, 0, 1]), 4)   # sigmoid(1.5)
        0.8176
    """
    parents = (parents,) if isinstance(parents, str) else tuple(parents)
    w = np.asarray(weights, float).reshape(-1)
    if w.shape != (len(parents),) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights: one finite weight per parent ({len(parents)}), got {np.asarray(weights).tolist()}")
    if not math.isfinite(float(bias)):
        raise ValueError(f"bias must be finite, got {bias!r}")
    cards = (2,) * len(parents) if cards is None else tuple(int(k) for k in cards)
    if len(cards) != len(parents) or any(k < 1 for k in cards):
        raise ValueError(f"cards: one positive count per parent ({len(parents)}), got {cards}")
    grid = np.indices(cards).reshape(len(parents), -1).T
    p1 = (1.0 / (1.0 + np.exp(-(bias + grid @ w)))).reshape(cards)
    return {"parents": parents, "probs": np.stack([1.0 - p1, p1], axis=-1)}


# ----------------------------------------------------------------------------- demo
SPRINKLER = {"C": {"p": 0.5}, "S": {"parents": ["C"], "p": [0.5, 0.1]}, "R": {"parents": ["C"], "p": [0.1, 0.8]},
             "W": {"parents": ["S", "R"], "p": [[0.1, 0.9], [0.9, 0.95]]}}  # Alpaydin (2014), fig. 14.5


def demo_cases():
    """The demo's Bayesian network (see :mod:`probmodels.demo`): Alpaydin's sprinkler network with
    the grass observed wet, by exact inference; scored against the book's P(C = 1 | W = 1) =
    0.583493 (which the tests check to 1e-12 in closed form), with a picture of the network.

    Example:
        >>> from probmodels.bayes_net import demo_cases
        >>> [(c.name, c.engines, c.kwargs) for c in demo_cases()]
        [('bayes_net_sprinkler', ('exact',), {'W': 1})]
    """
    from probmodels.demo import Case

    def score(post):
        err = abs(float(post.marginals["C"][1]) - 0.583493)
        return ("|P(C | W) - 0.583493|", err,
                f"{err:.1e}; P(S | W) {post.marginals['S'][1]:.4f}, P(R | W) {post.marginals['R'][1]:.4f} "
                f"(explaining away: P(S | R, W) = 0.1513 < P(S | W))")

    def plot(post, path_base):
        from probmodels import graphs

        path = f"{path_base}_graph.png"
        graphs.draw(post.model, path, model_kwargs=post.model_kwargs)
        return [path]

    return [Case("bayes_net_sprinkler", bayes_net(SPRINKLER), (), {"W": 1}, ("exact",), score, {}, plot)]
