"""The factor graph of a discrete NumPyro program, read from its trace.

Every latent sample site must be a scalar with a finite discrete support (``Bernoulli``,
``Categorical``, ``DiscreteUniform``, ``Binomial``, ...). Each latent site's support is placed along
an array axis of its own, to the left of every batch dimension, and the program runs once (as
NumPyro's and Pyro's parallel enumeration do): every sample site's log density (a latent site's
prior, an observed site's likelihood summed over its batch dimensions, a ``numpyro.factor``) then
broadcasts over the axes of exactly the latent sites it depends on, which gives its scope and its
table. Scopes are read from shapes alone (``jax.eval_shape``: nothing is computed), at most
:data:`CHUNK` sites enumerated at a time, so large networks never make high-rank arrays. The tables
are then computed in one run in which sites that never share a factor share an axis (a greedy
colouring of the interaction graph), so the arrays have as many axes as colours.

A model written for enumeration indexes tables with site values and uses ``jnp.where`` rather than
Python ``if`` on them; one that does not gets a ``ValueError`` naming the site.

Example:
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model():
    ...     a = numpyro.sample("a", dist.Bernoulli(0.3))
    ...     numpyro.sample("b", dist.Categorical(jnp.array([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7]])[a]))
    >>> g = read(model, (), {}, structure_trace(model, (), {}))
    >>> g.names, g.cards, g.scopes
    (('a', 'b'), (2, 3), ((0,), (0, 1)))
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.primitives import Messenger

CHUNK = 24  # latent sites enumerated at once while scopes are read


class EnumerationError(ValueError):
    """The model cannot run with its latent sites enumerated (it does not broadcast site values)."""


class Graph(NamedTuple):
    """The static structure of a discrete program (hashable)."""

    names: tuple[str, ...]  # latent sites, in trace order
    cards: tuple[int, ...]  # support sizes
    factor_sites: tuple[str, ...]  # the sample site behind each factor
    scopes: tuple[tuple[int, ...], ...]  # latent sites each factor's table ranges over
    colours: tuple[int, ...]  # axis each latent site is enumerated along when tables are computed
    batch_dims: int  # batch dimensions to the right of the enumerated ones
    observed: tuple[str, ...]  # observed sites (likelihoods; ``numpyro.factor`` sites excluded)
    deterministic: tuple[str, ...]


def is_factor_site(site) -> bool:
    return site["type"] == "sample" and (site.get("infer") or {}).get("is_auxiliary", False) and site["is_observed"]


def structure_trace(model, args, kwargs, seed: int = 0):
    """The model's sites from one abstract run (``jax.eval_shape``; the data closed over, so the
    model's own checks of its inputs still raise), as `inference._model.structure_trace`, except
    that a ``numpyro.factor`` site's value (made inside the model) does not force an eager run:
    only observed data must be concrete. Falls back to an eager trace."""
    from inference import _model

    holder = {}

    def run():
        with handlers.seed(rng_seed=seed):
            holder["trace"] = handlers.trace(model).get_trace(*args, **kwargs)

    try:
        jax.eval_shape(run)
    except Exception:  # noqa: BLE001 - the eager trace raises the model's own error, or succeeds
        return _model.trace_model(model, args, kwargs, seed)
    trace = holder["trace"]
    if any(s["type"] == "sample" and s["is_observed"] and not is_factor_site(s) and isinstance(s["value"], jax.core.Tracer)
           for s in trace.values()):
        return _model.trace_model(model, args, kwargs, seed)
    return trace


def check_sites(trace):
    """``(names, cards, batch_dims)`` of a plain trace's latent sites, or a ``ValueError`` naming the
    first that is not a scalar with a finite discrete support, or an observed discrete value
    outside its support."""
    names, cards, batch = [], [], 0
    for name, site in trace.items():
        if site["type"] != "sample":
            continue
        fn = site["fn"]
        batch = max(batch, len(fn.batch_shape), *(-f.dim for f in site.get("cond_indep_stack", ()) if f.dim is not None))
        kind = type(fn).__name__
        if site["is_observed"]:
            _check_observed(name, site)
            continue
        if not getattr(getattr(fn, "support", None), "is_discrete", False):
            raise ValueError(
                f"site {name!r} is a continuous latent ({kind}): inference.exact needs every latent site "
                "discrete with a finite support (observe it, or use inference.mcmc / vi / laplace)")
        if not fn.has_enumerate_support:
            raise ValueError(f"site {name!r} ({kind}) has an infinite discrete support: inference.exact "
                             "needs a finite one (truncate it, e.g. Categorical over 0..K-1)")
        shape = tuple(fn.batch_shape) + tuple(fn.event_shape)
        if shape:
            raise ValueError(f"site {name!r} has shape {shape}: inference.exact needs one scalar site per "
                             "discrete variable (no plates or vector-valued latent sites)")
        names.append(name)
        cards.append(int(np.shape(fn.enumerate_support(expand=False))[0]))
    return tuple(names), tuple(cards), int(batch)


def _check_observed(name, site):
    fn, value = site["fn"], site["value"]
    if is_factor_site(site) or not getattr(getattr(fn, "support", None), "is_discrete", False):
        return
    try:
        ok = np.asarray(fn.support(value))
    except Exception:  # noqa: BLE001 - a support with traced bounds: the model's own checks apply
        return
    if not np.all(ok):
        bad = np.asarray(value)[~np.broadcast_to(ok, np.shape(value))] if np.ndim(value) else value
        raise ValueError(f"site {name!r}: observed value {np.ravel(bad)[0]!r} is outside its support ({fn.support})")


class _Enumerate(Messenger):
    """Latent site ``name`` takes its whole support along dimension ``-(batch_dims + 1 + dims[name])``
    (``dims[name]`` None: its first value only)."""

    def __init__(self, fn, dims, batch_dims, cards):
        self.dims, self.batch_dims, self.cards, self.supports = dims, batch_dims, cards, {}
        super().__init__(fn)

    def process_message(self, msg):
        name = msg["name"]
        if msg["type"] != "sample" or msg["is_observed"] or name not in self.dims:
            return
        support = jnp.reshape(msg["fn"].enumerate_support(expand=False), (-1,))
        if support.shape[0] != self.cards[name]:
            raise EnumerationError(f"site {name!r}: its support changes with other sites' values; inference.exact "
                             "needs a fixed finite support per site")
        self.supports[name] = support
        dim = self.dims[name]
        msg["value"] = support[0] if dim is None else support.reshape((-1,) + (1,) * (self.batch_dims + dim))


def _enumerated_log_probs(model, args, kwargs, dims, batch_dims, cards, rank):
    """Every sample site's log density under enumeration, summed over its batch dimensions: an
    array of rank ``rank`` (the enumerated dimensions), and the supports."""
    enum = _Enumerate(handlers.seed(model, rng_seed=0), dims, batch_dims, cards)
    try:
        trace = handlers.trace(enum).get_trace(*args, **kwargs)
    except EnumerationError:
        raise
    except Exception as exc:  # noqa: BLE001 - Python control flow on an enumerated value, mostly
        raise EnumerationError(
            "inference.exact runs the model with every latent site's support along an array axis of its own "
            "(parallel enumeration); the model failed under it: index tables with site values and use "
            f"jnp.where instead of Python if on them ({type(exc).__name__}: {exc})") from exc
    out = {}
    for name, site in trace.items():
        if site["type"] != "sample":
            continue
        lp = site["fn"].log_prob(site["value"])
        if site.get("scale") is not None:
            lp = site["scale"] * lp
        lp = jnp.asarray(lp)
        if lp.ndim > rank + batch_dims:
            raise ValueError(
                f"site {name!r}: its log density has shape {lp.shape} under enumeration, more dimensions than "
                f"the {rank} enumerated and {batch_dims} batch dimensions: write the model so that site values "
                "broadcast (index tables with them; do not stack them along new axes)")
        lp = lp.reshape((1,) * (rank + batch_dims - lp.ndim) + lp.shape)
        out[name] = jnp.sum(lp, axis=tuple(range(rank, rank + batch_dims))) if batch_dims else lp
    return out, enum.supports


def _colour(num_vars, scopes):
    from inference.exact.plan import interaction_graph

    adj = interaction_graph(num_vars, scopes)
    colours = []
    for v in range(num_vars):
        used = {colours[u] for u in adj[v] if u < v}
        colours.append(next(c for c in range(num_vars + 1) if c not in used))
    return tuple(colours)


def read(model, args, kwargs, trace) -> Graph:
    """The factor graph of ``model(*args, **kwargs)`` (``trace``: a plain trace of it, for the sites)."""
    names, cards, batch = check_sites(trace)
    card = dict(zip(names, cards))
    sites = [n for n, s in trace.items() if s["type"] == "sample"]
    deps = {n: set() for n in sites}
    for start in range(0, len(names), CHUNK):
        chunk = names[start:start + CHUNK]
        dims = {n: (chunk.index(n) if n in chunk else None) for n in names}
        shapes = jax.eval_shape(lambda: _enumerated_log_probs(model, args, kwargs, dims, batch, card, len(chunk))[0])
        for site in sites:
            shape = shapes[site].shape
            for d, n in enumerate(chunk):
                size = shape[len(chunk) - 1 - d]
                if size not in (1, card[n]):
                    raise ValueError(f"site {site!r}: its log density has size {size} along the axis of site {n!r} "
                                     f"({card[n]} values): the model does not broadcast site values as enumeration needs")
                if size > 1:
                    deps[site].add(n)
    index = {n: i for i, n in enumerate(names)}
    scopes = []
    for site in sites:
        members = deps[site] | ({site} if site in index else set())
        scopes.append(tuple(sorted((index[n] for n in members))))
    observed = tuple(n for n in sites if trace[n]["is_observed"] and not is_factor_site(trace[n]))
    deterministic = tuple(n for n, s in trace.items() if s["type"] == "deterministic")
    return Graph(names, cards, tuple(sites), tuple(scopes), _colour(len(names), scopes), batch, observed, deterministic)


def tables(model, args, kwargs, graph: Graph):
    """``(tables, supports)``: each factor's log table over its scope (axes in scope order) and each
    latent site's support values, from one enumerated run (traceable: call it under ``jax.jit``)."""
    rank = max(graph.colours, default=-1) + 1
    dims = dict(zip(graph.names, graph.colours))
    lps, supports = _enumerated_log_probs(model, args, kwargs, dims, graph.batch_dims, dict(zip(graph.names, graph.cards)),
                                          rank)
    out = []
    for site, scope in zip(graph.factor_sites, graph.scopes):
        lp = lps[site]
        axes = [rank - 1 - graph.colours[v] for v in scope]
        others = [a for a in range(rank) if a not in axes]
        t = jnp.transpose(lp, axes + others).reshape(tuple(lp.shape[a] for a in axes))
        out.append(jnp.broadcast_to(t, tuple(graph.cards[v] for v in scope)))
    return tuple(out), tuple(supports[n] for n in graph.names)
