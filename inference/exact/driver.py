"""The public drivers: ``inference.exact`` (marginals, log evidence and joint draws of a discrete
program) and ``inference.most_probable`` (its most probable joint assignment, max-product).

Two stages. (1) The factor tables: read from the model's trace (`inference.exact.factors`, one
jitted program per model structure, kept across calls by `inference.compiled`), or handed over by
a model that knows them (``model.factor_tables(*args, **kwargs)``, which `probmodels.bayes_net`
offers: nothing traced). (2) The message passes on the tables (`inference.exact.eliminate`,
`inference.exact.bp`): NumPy by default, on the host: they are many small array operations that
XLA took seconds to compile (2-40 s for 4-20 nodes, measured under load) and NumPy runs in
milliseconds; with ``jit=True`` one jitted program per elimination plan (the plan static, the
tables arguments), which pays only for many queries of one network with large cluster tables on an
accelerator (not measured: no accelerator was available). The random numbers of the draws come from NumPy's generator seeded with
``seed``, so both give the same draws.

Example (Alpaydin's chain C -> R -> W, observing W = 1):
    >>> import inference, probmodels
    >>> net = probmodels.bayes_net({"C": {"p": 0.4}, "R": {"parents": ["C"], "p": [0.1, 0.8]},
    ...                             "W": {"parents": ["R"], "p": [0.2, 0.9]}})
    >>> post = inference.exact(net, W=1, num_samples=10)
    >>> round(float(post.marginals["C"][1]), 5), round(float(post.log_evidence), 4)
    (0.65236, -0.7636)
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from inference import _model, _options, compiled, convergence
from inference.exact import bp, eliminate, factors
from inference.exact.plan import MAX_TABLE_SIZE, make_plan
from inference.posterior import Posterior

METHODS = ("ve", "bp", "loopy")


class MostProbable(NamedTuple):
    """The most probable joint assignment of the latent sites given the observed ones."""

    assignment: dict  # site -> value
    log_prob: float  # log p(assignment | observed)
    log_joint: float  # log p(assignment, observed) (unnormalised with ``numpyro.factor`` sites)


class _Problem(NamedTuple):
    graph: factors.Graph
    tables: tuple  # log tables (JAX arrays in the working precision)
    supports: tuple  # per latent site: its values (NumPy)
    observed: dict  # observed site -> value


def _problem(model, args, kwargs, seed, xp=np) -> _Problem:
    """The factor graph and its log tables, in the working precision (float64 when JAX's x64 is
    on, else float32), as arrays of ``xp``."""
    dtype = jax.dtypes.canonicalize_dtype(np.float64)  # float32 unless x64 (no JAX op: no compilation)
    own = getattr(model, "factor_tables", None)
    if callable(own):  # the model knows its tables (a `probmodels.bayes_net`): nothing to trace
        graph, tables, supports, observed = own(*args, **kwargs)
        return _Problem(graph, tuple(xp.asarray(t, dtype) for t in tables), tuple(np.asarray(s) for s in supports),
                        observed)
    trace = factors.structure_trace(model, args, kwargs, seed)  # the model's own checks raise first
    _model.refuse_subsampling(trace, "inference.exact")
    names, _, _ = factors.check_sites(trace)
    if not names:
        raise ValueError("model has no latent sample sites: nothing to infer")
    graph = compiled.memo("exact-graph", model, args, kwargs, lambda: factors.read(model, args, kwargs, trace))

    def build(rebuild):
        return jax.jit(lambda arrays: factors.tables(model, *rebuild(arrays), graph))

    tables, supports = compiled.call("exact-tables", model, args, kwargs, (graph,), build)
    observed = {n: np.asarray(trace[n]["value"]) for n in graph.observed}
    return _Problem(graph, tuple(xp.asarray(t, dtype) for t in tables), tuple(np.asarray(s) for s in supports), observed)


def _check_tables(problem: _Problem):
    """A NaN or +inf log density names its site (never a silent NaN downstream)."""
    for site, table in zip(problem.graph.factor_sites, problem.tables):
        if not np.max(np.asarray(table)) < np.inf:  # NaN propagates through max: one reduction
            raise ValueError(f"site {site!r}: its log density is NaN or +inf for some values of the sites it "
                             "depends on (check its probabilities)")


def _ve(tables, noise, *, plan, xp=np):
    up = eliminate.upward(plan, tables, xp=xp)
    marg = eliminate.marginals(plan, up, xp)
    idx = eliminate.sample(plan, up, noise, xp)
    at = eliminate.factor_values(plan.scopes, tables, idx, noise.shape[1], xp)
    lp = xp.sum(xp.stack(at), axis=0)
    return dict(log_evidence=up.log_evidence, log_marginals=tuple(marg[i] for i in range(len(plan.cards))),
                idx=tuple(idx[i] for i in range(len(plan.cards))), lp=lp, log_q=lp - up.log_evidence, at=at)


def _bp(tables, noise, damping, tol, max_iter, *, structure, tree, xp=np):
    res = bp.run(structure, tables, damping=damping, tol=tol, max_iter=max_iter, xp=xp)
    idx = bp.sample_tree(structure, res, noise, xp) if tree else bp.sample_marginals(res, noise, xp)
    at = eliminate.factor_values(structure.scopes, tables, idx, noise.shape[1], xp)
    lp = xp.sum(xp.stack(at), axis=0)
    if tree:
        log_q = lp - res.log_z
    else:
        log_q = xp.zeros_like(lp)
        for i in range(len(structure.cards)):
            log_q = log_q + res.var_beliefs[i][idx[i]]
    return dict(log_evidence=res.log_z, log_marginals=res.var_beliefs, idx=tuple(idx[i] for i in range(len(structure.cards))),
                lp=lp, log_q=log_q, at=at, iterations=res.iterations, max_change=res.max_change)


def _max(tables, *, plan, xp=np):
    up = eliminate.upward(plan, tables, maximise=True, xp=xp)
    idx = eliminate.argmax(plan, up, xp)
    return dict(idx=tuple(idx[i] for i in range(len(plan.cards))), log_joint=up.log_evidence,
                log_evidence=eliminate.upward(plan, tables, xp=xp).log_evidence)


# The same passes as one XLA program per structure (``jit=True``).
_ve_jit = jax.jit(partial(_ve, xp=jnp), static_argnames=("plan",))
_bp_jit = jax.jit(partial(_bp, xp=jnp), static_argnames=("structure", "tree"))
_max_jit = jax.jit(partial(_max, xp=jnp), static_argnames=("plan",))


def _runner(jit):
    """``(namespace, {pass: function})``: NumPy unless ``jit``."""
    if not isinstance(jit, bool):
        raise TypeError(f"jit must be True or False, got {jit!r}")
    if jit:
        return jnp, {"ve": _ve_jit, "bp": _bp_jit, "max": _max_jit}
    return np, {"ve": _ve, "bp": _bp, "max": _max}


def _per_draw(model, args, kwargs, graph, draws, names):
    """Sites ``names`` (observed: pointwise log likelihood; deterministic: value) at each draw."""
    def build(rebuild):
        def run(arrays, draws):
            a, kw = rebuild(arrays)

            def one(draw):
                tr = handlers.trace(handlers.substitute(handlers.seed(model, rng_seed=0), data=draw)).get_trace(*a, **kw)
                return {n: (tr[n]["fn"].log_prob(tr[n]["value"]) if n in graph.observed else tr[n]["value"]) for n in names}

            return jax.vmap(one)(draws)

        return jax.jit(run)

    out = compiled.call("exact-per-draw", model, args, kwargs, (graph, names), build, draws)
    return {n: np.asarray(v) for n, v in out.items()}


@compiled.scoped
def exact(
    model,
    *args,
    num_samples: int = 1000,
    seed: int = 0,
    method: str = "ve",
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 500,
    max_table_size: int = MAX_TABLE_SIZE,
    jit: bool = False,
    progress: bool | None = None,
    model_kwargs: dict | None = None,
    **kwargs,
) -> Posterior:
    """Exact posterior of a program whose latent sites are all discrete with finite supports.

    ``method``: ``"ve"`` (variable elimination along a min-fill order, the default; exact),
    ``"bp"`` (sum-product belief propagation; exact, and only accepted, on a tree-structured
    factor graph such as a polytree network) or ``"loopy"`` (loopy belief propagation: an
    approximation, with ``damping``, ``tol`` and ``max_iter``; ``diagnostics["converged"]`` says
    whether the messages converged, the evidence is the Bethe estimate (``evidence_method="bethe"``)
    and the draws are independent draws from each site's belief). Returns a `Posterior` with
    ``marginals`` (site -> probabilities over its values), ``log_evidence`` (``"exact"``) and
    ``num_samples`` joint posterior draws in one chain. A model whose tree width needs a cluster
    table above ``max_table_size`` entries raises `inference.exact.plan.TreewidthError` with the width.
    ``jit``: run the message passes as one jitted JAX program per structure (``True``: worth it for
    many queries of a network with large cluster tables on an accelerator) or with NumPy on the host
    (``False``, default: compiling the unrolled passes of a 15-node network takes seconds, NumPy runs
    them in milliseconds). The same numbers and draws either way.
    ``progress`` is accepted for a uniform call (the passes take milliseconds: no bar).

    Example (explaining away: P(S = 1 | W = 1) = 0.353846, P(S = 1 | R = 1, W = 1) = 0.208791):
        >>> import inference, probmodels
        >>> net = probmodels.bayes_net({"R": {"p": 0.4}, "S": {"p": 0.2},
        ...                             "W": {"parents": ["R", "S"], "p": [[0.1, 0.9], [0.9, 0.95]]}})
        >>> round(float(inference.exact(net, W=1, num_samples=10).marginals["S"][1]), 6)
        0.353846
        >>> round(float(inference.exact(net, R=1, W=1, num_samples=10).marginals["S"][1]), 6)
        0.208791
    """
    num_samples = _options.positive_int(num_samples, "num_samples")
    seed = _options.seed(seed)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    damping = float(damping) if method == "loopy" else 0.0
    if method == "loopy" and not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must lie in [0, 1), got {damping!r}")
    tol = _options.positive_float(tol, "tol")
    max_iter = _options.positive_int(max_iter, "max_iter")
    max_table_size = _options.positive_int(max_table_size, "max_table_size")
    _options.progress(progress)
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _model.check_model(model)
    xp, passes = _runner(jit)
    problem = _problem(model, args, kwargs, seed, xp)
    graph = problem.graph
    _check_tables(problem)
    dtype = problem.tables[0].dtype
    if method == "ve":
        plan = make_plan(graph.cards, graph.scopes, max_table_size=max_table_size)
        noise = eliminate.uniform_noise(seed, len(plan.clusters), num_samples)
        with np.errstate(all="ignore"):  # log 0 = -inf is meant (zero probabilities), never NaN out
            out = passes["ve"](problem.tables, xp.asarray(noise, dtype), plan=plan)
        diagnostics = {"method": "ve", "width": plan.width, "max_table": plan.max_table,
                       "order": [graph.names[c.var] for c in plan.clusters]}
        evidence_method = "exact"
    else:
        structure = bp.structure(graph.cards, graph.scopes)
        if method == "bp" and not structure.is_tree:
            raise ValueError("method='bp' is exact on tree-structured factor graphs (polytrees) only and this "
                             "model's has a loop: use method='ve' (exact) or method='loopy' (approximate)")
        tree = method == "bp"  # exact after as many undamped sweeps as the tree's diameter
        work_tol = 0.0 if tree else _options.working_tol(tol, dtype)
        iters = len(graph.cards) + len(graph.scopes) + 1 if tree else max_iter
        steps = len(bp.sampling_steps(structure)) if tree else len(graph.cards)
        noise = xp.asarray(eliminate.uniform_noise(seed, steps, num_samples), dtype)
        with np.errstate(all="ignore"):
            out = passes["bp"](problem.tables, noise, xp.asarray(damping, dtype), xp.asarray(work_tol, dtype),
                               xp.asarray(iters), structure=structure, tree=tree)
        change = float(out["max_change"])
        diagnostics = {"method": method, "iterations": int(out["iterations"]), "max_change": change,
                       "damping": damping, "tol": work_tol}
        evidence_method = "exact" if tree else "bethe"
    return _posterior(model, args, kwargs, seed, problem, out, method, diagnostics, evidence_method)


def _posterior(model, args, kwargs, seed, problem, out, method, diagnostics, evidence_method):
    graph = problem.graph
    latent = [i for i, n in enumerate(graph.names) if n not in graph.observed]
    log_evidence = float(out["log_evidence"])
    if log_evidence == -np.inf and evidence_method == "exact":
        raise ValueError("the observed values have probability zero under the model (log evidence -inf)")
    marginals = {graph.names[i]: np.exp(np.asarray(out["log_marginals"][i])) for i in latent}
    # BP must also have stopped changing (a tree: exactly, after its diameter in sweeps)
    loopy = () if method == "ve" else (diagnostics["max_change"], diagnostics["tol"])
    diagnostics = {"converged": convergence.exact(list(marginals.values()) + [log_evidence], *loopy), **diagnostics}
    draws = {graph.names[i]: problem.supports[i][np.asarray(out["idx"][i])] for i in latent}
    # a scalar observed site's pointwise log likelihood is its factor at the draw
    read = all(np.ndim(v) == 0 for v in problem.observed.values())
    loglik = {n: np.asarray(out["at"][graph.factor_sites.index(n)]) for n in graph.observed} if read else {}
    extra = tuple(graph.deterministic) + (() if read else tuple(graph.observed))
    if extra:
        loglik_or_det = _per_draw(model, args, kwargs, graph, draws, extra)
        loglik.update({n: v for n, v in loglik_or_det.items() if n in graph.observed})
        draws.update({n: v for n, v in loglik_or_det.items() if n not in graph.observed})
    return Posterior(
        engine="exact",
        samples={n: np.asarray(v)[None] for n, v in draws.items()},
        log_likelihood={n: np.asarray(v)[None] for n, v in loglik.items()},
        observed_data=problem.observed,
        sample_stats={"lp": np.asarray(out["lp"])[None], "log_q": np.asarray(out["log_q"])[None]},
        log_evidence=log_evidence if np.isfinite(log_evidence) else None,
        evidence_method=evidence_method if np.isfinite(log_evidence) else None,
        diagnostics=diagnostics,
        marginals=marginals,
        model=model,
        model_args=tuple(args),
        model_kwargs=dict(kwargs),
        seed=seed,
    )


@compiled.scoped
def most_probable(model, *args, max_table_size: int = MAX_TABLE_SIZE, jit: bool = False,
                  model_kwargs: dict | None = None, **kwargs) -> MostProbable:
    """The most probable joint assignment of the latent sites (max-product variable elimination),
    with its log posterior probability and log joint (options as for `exact`).

    Example (the chain C -> R -> W given W = 1: C = 1, R = 1, p = 0.4 * 0.8 * 0.9 / 0.466):
        >>> import inference, probmodels
        >>> net = probmodels.bayes_net({"C": {"p": 0.4}, "R": {"parents": ["C"], "p": [0.1, 0.8]},
        ...                             "W": {"parents": ["R"], "p": [0.2, 0.9]}})
        >>> best = inference.most_probable(net, W=1)
        >>> best.assignment, round(float(best.log_prob), 6)
        ({'C': 1, 'R': 1}, -0.481225)
    """
    max_table_size = _options.positive_int(max_table_size, "max_table_size")
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _model.check_model(model)
    xp, passes = _runner(jit)
    problem = _problem(model, args, kwargs, 0, xp)
    _check_tables(problem)
    graph = problem.graph
    plan = make_plan(graph.cards, graph.scopes, max_table_size=max_table_size)
    with np.errstate(all="ignore"):
        out = passes["max"](problem.tables, plan=plan)
    if not np.isfinite(float(out["log_evidence"])):
        raise ValueError("the observed values have probability zero under the model (log evidence -inf)")
    assignment = {n: problem.supports[i][int(out["idx"][i])].item() for i, n in enumerate(graph.names)
                  if n not in graph.observed}
    return MostProbable(assignment, float(out["log_joint"] - out["log_evidence"]), float(out["log_joint"]))
