"""The structure of a NumPyro program as a directed graph: parents, d-separation, moralisation,
a picture.

A *graph* here is a dict ``site -> tuple of parent sites`` in the program's order. Every function
takes either such a dict or a NumPyro program (with ``model_args`` / ``model_kwargs`` to run it),
whose graph :func:`parents` reads with NumPyro's provenance tracking
(``numpyro.infer.inspect.get_dependencies``): a site's parents are the sample sites its
distribution's parameters were computed from. ``numpyro.factor`` sites are nodes too, children of
the sites they depend on, and always observed (an undirected potential is an observed child);
sites observed in the program (its keyword arguments) count as given in :func:`d_separated`.

Example (the sprinkler: cloudy C, sprinkler S, rain R, wet grass W):
    >>> from probmodels import graphs
    >>> g = {"C": (), "S": ("C",), "R": ("C",), "W": ("S", "R")}
    >>> graphs.d_separated(g, "S", "R", given="C"), graphs.d_separated(g, "S", "R", given=["C", "W"])
    (True, False)
    >>> graphs.moralize(g)["S"]
    ('C', 'R', 'W')
"""

from __future__ import annotations

from collections.abc import Mapping


def parents(model, *args, **kwargs) -> dict:
    """Site -> tuple of its parent sites, read from ``model(*args, **kwargs)`` (sample sites,
    observed and ``numpyro.factor`` sites included; deterministic sites are looked through).
    Provenance tracking as in ``numpyro.infer.inspect.get_dependencies``, except that observed
    sites' values are tracked too: an observed node keeps its children (NumPyro's prior
    dependencies list latent parents only).

    Example:
        >>> import probmodels
        >>> net = probmodels.bayes_net({"R": {"p": 0.4}, "S": {"p": 0.2},
        ...                             "W": {"parents": ["R", "S"], "p": [[0.1, 0.9], [0.9, 0.95]]},
        ...                             "D": {"parents": ["W"], "p": [0.1, 0.7]}})
        >>> probmodels.graphs.parents(net, W=1)
        {'R': (), 'S': (), 'W': ('R', 'S'), 'D': ('W',)}
    """
    import jax
    from numpyro import handlers
    from numpyro.infer import init_to_sample
    from numpyro.ops.provenance import eval_provenance

    if not callable(model):
        raise TypeError(f"model must be a callable NumPyro program, got {type(model).__name__}")
    order, factor_sites = [], set()

    def values():  # abstract: shapes only
        sub = handlers.substitute(handlers.seed(model, rng_seed=0), substitute_fn=init_to_sample)
        tr = handlers.trace(sub).get_trace(*args, **kwargs)
        order[:] = [n for n, s in tr.items() if s["type"] == "sample"]
        factor_sites.update(n for n in order if (tr[n].get("infer") or {}).get("is_auxiliary"))
        return {n: tr[n]["value"] for n in order if n not in factor_sites}

    def log_probs(**vals):
        with handlers.trace() as tr, handlers.seed(rng_seed=0), handlers.substitute(data=vals):
            model(*args, **kwargs)
        return {n: s["fn"].log_prob(s["value"]) for n, s in tr.items() if s["type"] == "sample"}

    deps = eval_provenance(log_probs, **jax.eval_shape(values))
    return {n: tuple(u for u in order if u != n and u in deps[n]) for n in order}


def _observed(model, args, kwargs) -> set:
    from numpyro import handlers

    tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*args, **kwargs)
    return {n for n, s in tr.items() if s["type"] == "sample" and s["is_observed"]}


def _graph(model_or_graph, model_args, model_kwargs):
    """``(graph, observed sites)`` of a dict graph (checked) or a program."""
    if isinstance(model_or_graph, Mapping):
        graph = {str(n): tuple(ps) if not isinstance(ps, str) else (ps,) for n, ps in model_or_graph.items()}
        for node, ps in graph.items():
            unknown = [p for p in ps if p not in graph]
            if unknown:
                raise ValueError(f"node {node!r}: unknown parent(s) {unknown}")
        _check_acyclic(graph)
        return graph, set()
    args, kwargs = tuple(model_args), dict(model_kwargs or {})
    return parents(model_or_graph, *args, **kwargs), _observed(model_or_graph, args, kwargs)


def _check_acyclic(graph):
    state = {}

    def visit(node, path):
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            raise ValueError(f"node {node!r} is on a cycle ({' -> '.join(reversed(path[path.index(node):] + [node]))})")
        state[node] = 1
        for p in graph[node]:
            visit(p, path + [node])
        state[node] = 2

    for node in graph:
        visit(node, [])


def children(graph: dict) -> dict:
    """Site -> tuple of its children (the inverse of a parents dict).

    Example:
        >>> children({"a": (), "b": ("a",), "c": ("a",)})
        {'a': ('b', 'c'), 'b': (), 'c': ()}
    """
    out = {n: [] for n in graph}
    for node, ps in graph.items():
        for p in ps:
            out[p].append(node)
    return {n: tuple(c) for n, c in out.items()}


def _names(value, what, graph) -> set:
    names = {value} if isinstance(value, str) else set(value)
    unknown = sorted(n for n in names if n not in graph)
    if unknown:
        raise ValueError(f"{what}: unknown site(s) {unknown}; sites are {list(graph)}")
    return names


def d_separated(model, xs, ys, given=(), *, model_args=(), model_kwargs=None) -> bool:
    """Whether every trail between ``xs`` and ``ys`` is blocked given ``given`` (each a site name
    or a collection of them), so that ``xs`` and ``ys`` are independent given ``given`` in every
    distribution the graph allows. Sites observed in the program and ``numpyro.factor`` sites are
    added to ``given``. Bayes-ball / reachability (Koller & Friedman 2009, alg. 3.1): a trail
    passes a given node only as a collider (head to head), and a collider only when it or one of
    its descendants is given.

    Example (explaining away: R and S independent, until W is observed):
        >>> from probmodels import graphs
        >>> g = {"R": (), "S": (), "W": ("R", "S")}
        >>> graphs.d_separated(g, "R", "S"), graphs.d_separated(g, "R", "S", given="W")
        (True, False)
    """
    graph, observed = _graph(model, model_args, model_kwargs)
    x, y, z = _names(xs, "xs", graph), _names(ys, "ys", graph), _names(given, "given", graph)
    for a, b, names in (("xs", "ys", x & y), ("xs", "given", x & z), ("ys", "given", y & z)):
        if names:
            raise ValueError(f"{a} and {b} must not share sites, both hold {sorted(names)}")
    z = z | (observed - x - y)
    return not (reachable(graph, x, z) & y)


def reachable(graph: dict, sources, given) -> set:
    """Sites (not given) joined to ``sources`` by an active trail given ``given``.

    Example (a chain a -> b -> c, blocked at b when b is given):
        >>> sorted(reachable({"a": (), "b": ("a",), "c": ("b",)}, {"a"}, {"b"}))
        ['a']
    """
    kids = children(graph)
    ancestors, stack = set(), list(given)
    while stack:
        n = stack.pop()
        if n not in ancestors:
            ancestors.add(n)
            stack.extend(graph[n])
    seen, out = set(), set()
    stack = [(s, "up") for s in sources]  # "up": reached from a child; "down": from a parent
    while stack:
        node, way = stack.pop()
        if (node, way) in seen:
            continue
        seen.add((node, way))
        if node not in given:
            out.add(node)
        if way == "up" and node not in given:
            stack += [(p, "up") for p in graph[node]] + [(c, "down") for c in kids[node]]
        elif way == "down":
            if node not in given:
                stack += [(c, "down") for c in kids[node]]
            if node in ancestors:  # a collider with itself or a descendant given
                stack += [(p, "up") for p in graph[node]]
    return out


def moralize(model, *, model_args=(), model_kwargs=None) -> dict:
    """The moral graph: the parents of each site married, directions dropped. Site -> tuple of
    neighbours (in the graph's order).

    Example (the v-structure R -> W <- S gains the edge R - S):
        >>> moralize({"R": (), "S": (), "W": ("R", "S")})
        {'R': ('S', 'W'), 'S': ('R', 'W'), 'W': ('R', 'S')}
    """
    graph, _ = _graph(model, model_args, model_kwargs)
    order = list(graph)
    nb = {n: set() for n in graph}
    for node, ps in graph.items():
        for p in ps:
            nb[node].add(p)
            nb[p].add(node)
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                nb[a].add(b)
                nb[b].add(a)
    return {n: tuple(sorted(nb[n], key=order.index)) for n in order}


def layers(graph: dict) -> dict:
    """Site -> depth (the longest chain of parents above it): rows of the picture.

    Example:
        >>> layers({"C": (), "S": ("C",), "R": ("C",), "W": ("S", "R")})
        {'C': 0, 'S': 1, 'R': 1, 'W': 2}
    """
    depth = {}

    def visit(n):
        if n not in depth:
            depth[n] = 1 + max((visit(p) for p in graph[n]), default=-1)
        return depth[n]

    for n in graph:
        visit(n)
    return {n: depth[n] for n in graph}


def draw(model, path=None, *, model_args=(), model_kwargs=None):
    """A picture of the graph: NumPyro's ``render_model`` when the ``graphviz`` package (and its
    ``dot`` program) is installed and ``model`` is a program, else matplotlib (parents above
    children; observed sites shaded, ``numpyro.factor`` sites square). Written to ``path`` when
    given; returns the graphviz object or the matplotlib figure.

    Example:
        >>> import os, tempfile
        >>> from probmodels import graphs
        >>> path = os.path.join(tempfile.mkdtemp(), "net.png")
        >>> fig = graphs.draw({"R": (), "S": (), "W": ("R", "S")}, path)
        >>> os.path.exists(path)
        True
    """
    if not isinstance(model, Mapping) and _has_graphviz():
        import numpyro

        return numpyro.render_model(model, model_args=tuple(model_args), model_kwargs=dict(model_kwargs or {}),
                                    filename=None if path is None else str(path))
    graph, observed = _graph(model, model_args, model_kwargs)
    factors = _factor_sites(model, model_args, model_kwargs) if not isinstance(model, Mapping) else set()
    return _draw_matplotlib(graph, observed, factors, path)


def _has_graphviz() -> bool:
    import importlib.util
    import shutil

    return importlib.util.find_spec("graphviz") is not None and shutil.which("dot") is not None


def _factor_sites(model, args, kwargs) -> set:
    from numpyro import handlers

    tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(*tuple(args), **dict(kwargs or {}))
    return {n for n, s in tr.items() if s["type"] == "sample" and (s.get("infer") or {}).get("is_auxiliary")}


def _draw_matplotlib(graph, observed, factors, path):
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depth = layers(graph)
    rows = {}
    for n, d in depth.items():
        rows.setdefault(d, []).append(n)
    pos = {n: ((i + 1) / (len(row) + 1), -d) for d, row in rows.items() for i, n in enumerate(row)}
    width = max(len(r) for r in rows.values())
    fig, ax = plt.subplots(figsize=(max(3.0, 1.4 * width), max(2.0, 1.2 * len(rows))))
    for node, ps in graph.items():
        for p in ps:
            ax.annotate("", xy=pos[node], xytext=pos[p],
                        arrowprops=dict(arrowstyle="-|>", color="0.3", shrinkA=14, shrinkB=14))
    for node, (x, y) in pos.items():
        style = "square" if node in factors else "circle"
        ax.text(x, y, node, ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle=f"{style},pad=0.4", fc="0.8" if node in observed else "white", ec="black"))
    ax.set_xlim(0, 1)
    ax.set_ylim(-max(rows) - 0.5, 0.5)
    ax.axis("off")
    if path is not None:
        fig.savefig(str(path), dpi=90, bbox_inches="tight")
        plt.close(fig)
    return fig
