"""Summaries of a Gaussian-mixture posterior, for any engine: co-clustering, number of occupied and
effective components, the truncation check of a DP mixture, label switching, and the posterior
predictive density at new points.

They read the standard mixture sites of a `Posterior` (``weights``, ``locs``, ``cov`` or
``scales``, optionally ``sticks``, and the recovered assignments ``z``), all with leading
``(chain, draw)`` axes. `postprocess` gathers the scalar summaries into
``post.diagnostics["mixture"]``, names the ArviZ dims (``z`` and the rows of ``X`` share
``point``), and warns about a non-negligible mass beyond the truncation level and about a Laplace
approximation that is poor (empty components, importance weights with Pareto k > 0.7; such a fit
is not ``converged``).
`check_collapse` (mixtures and HMMs, every engine) flags a fit whose components or states have
collapsed onto each other: ``diagnostics["collapsed"]``, ``converged=False`` and a warning.

Example:
    >>> import numpy as np
    >>> from inference.mixture_diagnostics import co_clustering, occupied_components
    >>> z = np.array([[[0, 0, 1], [1, 1, 0]]])           # (chain, draw, point)
    >>> float(co_clustering(z)[0, 1]), float(co_clustering(z)[0, 2])
    (1.0, 0.0)
    >>> occupied_components(z).tolist()
    [[2, 2]]
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp

from inference import _options, convergence

TRUNCATION_TOL = 0.01
PARETO_K_POOR = convergence.PARETO_K_POOR


# ----------------------------------------------------------------------------- assignments
def occupied_components(z) -> np.ndarray:
    """Number of distinct components among the assignments of each draw, (chain, draw)."""
    z = np.sort(np.asarray(z), axis=-1)
    return 1 + np.sum(np.diff(z, axis=-1) != 0, axis=-1)


def component_counts(z, num_components: int) -> np.ndarray:
    """Points assigned to each component in each draw, (chain, draw, K)."""
    z = np.asarray(z)
    lead = z.shape[:-1]
    flat = z.reshape(-1, z.shape[-1]) + num_components * np.arange(int(np.prod(lead)))[:, None]
    counts = np.bincount(flat.ravel(), minlength=int(np.prod(lead)) * num_components)
    return counts.reshape(lead + (num_components,))


def co_clustering(z, chunk: int = 256) -> np.ndarray:
    """Posterior probability that points i and j share a component, (n, n); label-invariant.
    Memory and time O(n^2) per draw chunk."""
    z = np.asarray(z)
    z = z.reshape(-1, z.shape[-1])
    k = int(z.max()) + 1
    n = z.shape[1]
    out = np.zeros((n, n))
    for start in range(0, z.shape[0], chunk):
        block = z[start:start + chunk]
        onehot = (block[:, :, None] == np.arange(k)).astype(np.float32)  # (s, n, K)
        a = np.moveaxis(onehot, 0, 1).reshape(n, -1)
        out += a @ a.T
    return out / z.shape[0]


# ----------------------------------------------------------------------------- weights
def effective_components(weights) -> np.ndarray:
    """exp(entropy of the weights) per draw, (chain, draw): K for equal weights, 1 for one."""
    w = np.clip(np.asarray(weights, dtype=float), 1e-300, 1.0)
    return np.exp(-np.sum(w * np.log(w), axis=-1))


def truncation_mass(weights) -> np.ndarray:
    """Weight of the last stick of a truncated DP per draw, (chain, draw): the mass the untruncated
    process would put on components beyond the truncation level."""
    return np.asarray(weights)[..., -1]


def check_truncation(weights, tol: float = TRUNCATION_TOL, warn: bool = True) -> dict:
    """Posterior mean and 99th percentile of `truncation_mass`; warns when the mean exceeds ``tol``."""
    mass = truncation_mass(weights)
    out = {"truncation_mass_mean": float(mass.mean()), "truncation_mass_q99": float(np.quantile(mass, 0.99)),
           "truncation_ok": bool(mass.mean() <= tol)}
    if warn and not out["truncation_ok"]:
        warnings.warn(f"the DP mixture puts {mass.mean():.3g} posterior mass (> {tol}) beyond its truncation "
                      f"level of {np.shape(weights)[-1]} components: raise truncation", skip_file_prefixes=_options.INTERNAL)
    return out


# ----------------------------------------------------------------------------- label switching
def label_permutations(locs, reference=None, scale=None, reference_weights=None, weights=None) -> np.ndarray:
    """For each draw, the permutation ``p`` (chain, draw, K) with ``locs[..., p, :]`` closest to
    ``reference`` (K, d) (default: the first draw): Hungarian algorithm on squared distances scaled
    by ``scale`` (d,) (default: the spread of all draws), each reference component's row weighted by
    ``reference_weights`` (so nearly empty components, whose locations are noise, do not steer it);
    with the draws' ``weights`` (chain, draw, K) the squared log-weight difference is added, so a
    nearly empty component that happens to sit on an occupied one is not taken for it."""
    locs = np.asarray(locs, dtype=float)
    ref = locs[0, 0] if reference is None else np.asarray(reference, dtype=float)
    if scale is None:
        scale = locs.reshape(-1, locs.shape[-1]).std(0)
    scale = np.where(np.asarray(scale) > 0, scale, 1.0)
    flat = locs.reshape((-1,) + locs.shape[-2:]) / scale
    ref = ref / scale
    rw = np.ones(ref.shape[0]) if reference_weights is None else np.asarray(reference_weights, dtype=float)
    perms = np.empty(flat.shape[:2], dtype=np.int64)
    if weights is not None:
        log_w = np.log(np.clip(np.asarray(weights, dtype=float), 1e-12, 1.0)).reshape(flat.shape[:2])
        log_ref = np.log(np.clip(rw, 1e-12, 1.0))
    for s, draw in enumerate(flat):
        cost = np.sum((ref[:, None, :] - draw[None, :, :]) ** 2, -1)
        if weights is not None:
            cost = cost + (log_ref[:, None] - log_w[s][None, :]) ** 2
        cost = rw[:, None] * cost
        rows, cols = linear_sum_assignment(cost)
        perms[s, rows] = cols
    return perms.reshape(locs.shape[:-1])


def relabel(samples: dict, perms) -> dict:
    """Component sites permuted draw by draw (``weights``, ``locs``, ``cov``, ``scales``; ``sticks``
    recomputed from the permuted weights) and ``z`` mapped to the new labels."""
    perms = np.asarray(perms)
    out = dict(samples)
    for name in ("weights", "locs", "cov", "scales"):
        if name in samples:
            v = np.asarray(samples[name])
            idx = perms.reshape(perms.shape + (1,) * (v.ndim - perms.ndim))
            out[name] = np.take_along_axis(v, idx, axis=2)
    if "z" in samples:
        inverse = np.argsort(perms, axis=-1)  # old label -> new label
        out["z"] = np.take_along_axis(inverse, np.asarray(samples["z"]), axis=-1)
    if "sticks" in samples and "weights" in out:
        w = out["weights"]
        remaining = 1.0 - np.concatenate([np.zeros(w.shape[:-1] + (1,)), np.cumsum(w, -1)[..., :-2]], -1)
        out["sticks"] = np.clip(w[..., :-1] / np.maximum(remaining, 1e-300), 0.0, 1.0)
    return out


def label_switching(samples: dict, lp=None) -> dict:
    """Per-draw permutations relative to a reference draw (the one with the highest ``lp`` when
    given), and how often labels switch: ``fraction`` of draws whose best match is not the
    identity, ``within_chain`` fraction of draws whose labelling differs from their chain's most
    common one (switching while sampling), and whether chains disagree in their labelling."""
    locs = np.asarray(samples["locs"], dtype=float)
    ref_idx = np.unravel_index(np.argmax(lp), np.shape(lp)) if lp is not None else (0, 0)
    ref_w = np.asarray(samples["weights"])[ref_idx] if "weights" in samples else None
    occupied = ref_w > 0.01 if ref_w is not None else None
    perms = label_permutations(locs, reference=locs[ref_idx], reference_weights=ref_w, weights=samples.get("weights"))
    if occupied is not None and occupied.sum() >= 1:
        perms_occ = perms[..., occupied]  # labels of empty components carry no information
    else:
        perms_occ = perms
    identity = np.arange(locs.shape[2])[occupied] if occupied is not None and occupied.sum() >= 1 else np.arange(locs.shape[2])
    switched = np.any(perms_occ != identity, axis=-1)
    within, modal = [], []
    for chain in perms_occ:
        keys, counts = np.unique(chain, axis=0, return_counts=True)
        mode = keys[np.argmax(counts)]
        modal.append(tuple(mode))
        within.append(np.any(chain != mode, axis=-1))
    return {
        "permutations": perms, "fraction": float(switched.mean()), "within_chain": float(np.mean(within)),
        "chains_disagree": len(set(modal)) > 1,
    }


# ----------------------------------------------------------------------------- predictive density
def mixture_log_density(X, weights, locs, cov=None, scales=None) -> np.ndarray:
    """log sum_k w_k N(x | locs_k, cov_k) at rows of X (m, d) for each draw: (..., m)."""
    spread = cov if cov is not None else scales
    lead = np.shape(weights)[:-1]
    w = jnp.reshape(jnp.asarray(weights), (-1,) + np.shape(weights)[-1:])
    mu = jnp.reshape(jnp.asarray(locs), (-1,) + np.shape(locs)[-2:])
    sp = jnp.reshape(jnp.asarray(spread), (-1,) + np.shape(spread)[len(lead):])
    out = _mixture_log_density(jnp.asarray(X), w, mu, sp, full=cov is not None)
    return np.asarray(out).reshape(lead + (np.shape(X)[0],))


@functools.partial(jax.jit, static_argnames=("full",))
def _mixture_log_density(X, w, mu, spread, full):
    """`mixture_log_density` over a flat batch of draws, jitted once per shapes (a closure over
    ``X`` was compiled again on every call)."""
    def one(w, mu, spread):
        if full:
            comp = dist.MultivariateNormal(mu, scale_tril=jnp.linalg.cholesky(spread)).log_prob(X[:, None])
        else:
            comp = jnp.sum(dist.Normal(mu, spread).log_prob(X[:, None]), -1)
        return jax.scipy.special.logsumexp(jnp.log(jnp.clip(w, np.finfo(np.float64).tiny, 1.0)) + comp, axis=-1)

    return jax.vmap(one)(w, mu, spread)


def predictive_log_density(post, X_new) -> np.ndarray:
    """Posterior predictive log density of each row of ``X_new`` (a 1-D array is (m, 1)):
    log (1/S) sum_s p(x | theta_s) over the S draws of ``post`` (any engine), (m,)."""
    X_new = np.asarray(X_new, dtype=float)
    X_new = X_new[:, None] if X_new.ndim == 1 else X_new
    if X_new.ndim != 2 or not np.all(np.isfinite(X_new)):
        raise ValueError(f"X_new must be a finite (m, d) array, got shape {X_new.shape}")
    s = post.samples
    if X_new.shape[1] != s["locs"].shape[-1]:
        raise ValueError(f"X_new has {X_new.shape[1]} columns, the mixture {s['locs'].shape[-1]} features")
    ld = mixture_log_density(X_new, s["weights"], s["locs"], cov=s.get("cov"), scales=s.get("scales"))
    ld = ld.reshape(-1, X_new.shape[0])
    return logsumexp(ld, axis=0) - math.log(ld.shape[0])


# ----------------------------------------------------------------------------- collapse
COLLAPSE_MARGIN = 10.0  # nats, plus 3 posterior sd of the log likelihood (see `collapse`)
# (an sd of at most sqrt(2 d) for d continuous coordinates: twice a posterior's sqrt(d / 2))
NEAR = 0.5  # two components are on each other: locations < 0.5 sd apart (TV < 0.05 for probs)
EMPTY = 0.005  # a component holding < 0.5% of the points (and < 1 point) is empty


def component_distances(samples) -> np.ndarray:
    """Per draw, how far apart components (states) k and l are, (chain, draw, K, K): locations in
    units of their pooled sd (``locs`` with ``cov`` / ``scales``; Poisson ``rates`` in units of
    sqrt(rate)), or 10 x the total-variation distance of categorical ``probs`` (so `NEAR` reads
    the same). Label-invariant per draw."""
    if "probs" in samples:
        p = np.asarray(samples["probs"], dtype=float)
        return 10.0 * 0.5 * np.abs(p[..., :, None, :] - p[..., None, :, :]).sum(-1)
    if "rates" in samples:
        r = np.asarray(samples["rates"], dtype=float)
        return np.abs(r[..., :, None] - r[..., None, :]) / np.sqrt(0.5 * (r[..., :, None] + r[..., None, :]) + 1e-300)
    locs = np.asarray(samples["locs"], dtype=float)
    locs = locs[..., None] if locs.ndim == 3 else locs  # HMM: (chain, draw, K) scalar locations
    diff = locs[..., :, None, :] - locs[..., None, :, :]  # (chain, draw, K, K, d)
    if "cov" in samples:
        cov = np.asarray(samples["cov"], dtype=float)
        pooled = 0.5 * (cov[..., :, None, :, :] + cov[..., None, :, :, :])
        return np.sqrt(np.einsum("...i,...i->...", diff, np.linalg.solve(pooled, diff[..., None])[..., 0]))
    scales = np.asarray(samples["scales"], dtype=float)
    scales = scales[..., None] if scales.ndim == 3 else scales
    pooled = 0.5 * (scales[..., :, None, :] ** 2 + scales[..., None, :, :] ** 2)
    return np.sqrt(np.sum(diff**2 / np.maximum(pooled, 1e-300), -1))


def _loglik_at_start(post) -> float | None:
    """Total log likelihood at the model's data-driven start (`inference.latent`), or None when
    the model declares none."""
    from inference import _model

    if post.model is None:  # a Posterior built by hand, or loaded from a file
        return None
    trace = _model.structure_trace(post.model, post.model_args, post.model_kwargs)
    if not _model.has_site_init(trace):
        return None
    values = _model.start_values(post.model, post.model_args, post.model_kwargs, post.seed or 0, trace=trace)
    ll = _model.pointwise_log_likelihood(post.model, {k: np.asarray(v)[None] for k, v in values.items()},
                                         post.model_args, post.model_kwargs)
    return float(sum(np.sum(v) for v in ll.values()))


def collapse(post, margin: float = COLLAPSE_MARGIN, distances=None) -> dict:
    """Whether components (mixture) or states (HMM) have collapsed onto each other. A fit is
    ``flagged`` when the data support more than it found: the posterior mean of the total log
    likelihood, in some chain, falls short of the log likelihood at the model's data-driven start
    by more than ``margin`` + 3 posterior sd (a fit stuck where two states share one mean: the
    issue's HMM lost ~500 nats; a correct fit gains on its start). That sd is capped at ``sqrt(2 d)``
    (``d`` continuous coordinates a draw): a posterior's log likelihood spreads about ``sqrt(d / 2)``
    (a chi-square drop from the mode), so a far wider spread is an over-dispersed approximation,
    not uncertainty that excuses the shortfall (mean-field VI of a mixture of experts on raw-unit
    inputs: 967 nats short, sd 824, reported converged; NUTS on the same data: sd 2.2, d = 10).
    ``pairs`` lists the components
    within `NEAR` pooled sd of each other in most draws, ``empty`` those holding fewer than
    `EMPTY` of the points in most draws (``z`` / ``states`` draws), ``chains`` the chains short
    of the start, ``loglik_gap`` the largest shortfall (nats). ``distances``: (chain, draw, K, K)
    to use instead of `component_distances` (a family whose components are not location-scale
    pairs, e.g. a mixture of experts)."""
    s = post.samples
    dist = component_distances(s) if distances is None else np.asarray(distances)
    k = dist.shape[-1]
    empty = []
    latent = s.get("z", s.get("states"))
    if latent is not None:
        latent = np.asarray(latent)
        counts = component_counts(latent.reshape(latent.shape[:2] + (-1,)), k)
        points = counts.sum(-1, keepdims=True)
        small = (counts < np.maximum(EMPTY * points, 1.0)).mean(axis=(0, 1))
        empty = [int(i) for i in np.flatnonzero(small > 0.5)]
    near = np.mean(dist < NEAR, axis=(0, 1))  # empty components (a DP's spare ones) pair with nothing
    pairs = [[int(i), int(j)] for i in range(k) for j in range(i + 1, k)
             if near[i, j] > 0.5 and i not in empty and j not in empty]
    out = {"flagged": False, "pairs": pairs, "empty": empty, "chains": [], "loglik_gap": None}
    start = _loglik_at_start(post)
    if start is None or not post.log_likelihood:
        return out
    ll = sum(np.asarray(v, dtype=float).reshape(np.shape(v)[:2] + (-1,)).sum(-1) for v in post.log_likelihood.values())
    gap = start - ll.mean(axis=1)  # per chain
    d = sum(int(np.prod(np.shape(v)[2:])) for v in s.values() if np.issubdtype(np.asarray(v).dtype, np.floating))
    short = gap > margin + 3.0 * np.minimum(ll.std(axis=1), np.sqrt(2.0 * max(d, 1)))
    out.update(flagged=bool(np.any(short) or not np.all(np.isfinite(gap))),
               chains=[int(c) for c in np.flatnonzero(short)], loglik_gap=float(np.max(gap)))
    return out


def check_collapse(post, warn: bool = True, distances=None):
    """``post`` with ``diagnostics["collapsed"]`` (`collapse`); a flagged fit also gets
    ``converged=False`` and a warning. Idempotent. Applied by every engine to mixtures
    (`postprocess`) and HMMs (``probmodels.hmm``)."""
    if "collapsed" in post.diagnostics:
        return post
    diagnostics = dict(post.diagnostics)
    report = collapse(post, distances=distances)
    diagnostics["collapsed"] = report
    if report["flagged"]:
        diagnostics["converged"] = False
        if warn:
            what = []
            if report["pairs"]:
                what.append(f"components {report['pairs']} have collapsed onto each other")
            if report["empty"]:
                what.append(f"components {report['empty']} are empty")
            gap = report["loglik_gap"]
            advice = "Rerun with another seed or more chains"
            if not what:  # nothing coincides and nothing is empty: the priors may outweigh the data
                what.append("no two components coincide and none is empty")
                advice = ("The priors may outweigh the data (e.g. a variance prior far wider than the "
                          "spread within components or states: check the fitted scales against the "
                          "data and set the model's scale prior), or rerun with another seed or more chains")
            warnings.warn(
                f"degenerate {post.engine} fit: {'; '.join(what)} (chains {report['chains']}), and its "
                f"log likelihood is {gap:.3g} nats short of the model's data-driven start, so the data "
                f"support more: converged=False. {advice}", skip_file_prefixes=_options.INTERNAL)
    return post.replace(diagnostics=diagnostics)


# ----------------------------------------------------------------------------- for engines
def pareto_k(post) -> float | None:
    """Pareto k-hat of the importance weights lp - log_q of an approximate posterior
    (`inference.convergence.pareto_k`); None for MCMC."""
    stats = post.sample_stats
    if "lp" not in stats or "log_q" not in stats:
        return None
    return convergence.pareto_k(np.asarray(stats["lp"]) - np.asarray(stats["log_q"]))


def summarise(post, truncation_tol: float = TRUNCATION_TOL, warn: bool = True) -> dict:
    """Scalar mixture diagnostics of ``post`` (see the module docstring)."""
    s = post.samples
    k = s["locs"].shape[2]
    out = {"num_components": int(k)}
    if "z" in s:
        occ = occupied_components(s["z"])
        values, counts = np.unique(occ, return_counts=True)
        out["occupied_mean"] = float(occ.mean())
        out["occupied_probs"] = {int(v): float(c / occ.size) for v, c in zip(values, counts)}
        mean_counts = component_counts(s["z"], k).mean(axis=(0, 1))
        out["expected_counts"] = mean_counts
    if "weights" in s:
        out["effective_components_mean"] = float(effective_components(s["weights"]).mean())
    if "sticks" in s:
        out.update(check_truncation(s["weights"], truncation_tol, warn))
    if k > 1:
        ls = label_switching(s, post.sample_stats.get("lp"))
        out["label_switching_fraction"] = ls["fraction"]
        out["label_switching_within_chain"] = ls["within_chain"]
        out["label_switching_chains_disagree"] = ls["chains_disagree"]
    khat = pareto_k(post) if post.engine != "mcmc" else None
    if khat is not None:
        out["pareto_k"] = khat
    if post.engine == "laplace":
        d = s["locs"].shape[-1]
        empty = np.flatnonzero(out.get("expected_counts", np.full(k, np.inf)) < d + 1)
        out["empty_components"] = empty.tolist()
        poor = []
        if len(empty):
            poor.append(f"components {empty.tolist()} hold fewer than d + 1 = {d + 1} points, so their posterior "
                        "is close to their heavy-tailed prior")
        if khat is not None and khat > PARETO_K_POOR:
            poor.append(f"the importance weights lp - log_q have Pareto k = {khat:.2f} > {PARETO_K_POOR}")
        cond = post.diagnostics.get("condition_number")
        if cond is not None and cond > 1e12:
            poor.append(f"the Hessian's condition number is {cond:.2g}")
        out["laplace_poor"] = bool(poor)
        if poor and warn:
            warnings.warn("the Laplace approximation of this mixture is poor: " + "; ".join(poor)
                          + ": converged=False. Use fewer components, inference.vi(..., method='cavi') or inference.mcmc",
                          skip_file_prefixes=_options.INTERNAL)
    return out


def postprocess(post, truncation_tol: float = TRUNCATION_TOL, warn: bool = True):
    """``post`` with ``diagnostics["mixture"]`` (from `summarise`) and ArviZ dims for ``z`` / ``X``
    (idempotent: a second call returns ``post`` unchanged)."""
    if "mixture" in post.diagnostics:
        return post
    post = check_collapse(post, warn)
    diagnostics = dict(post.diagnostics)
    diagnostics["mixture"] = summarise(post, truncation_tol, warn)
    if diagnostics["mixture"].get("laplace_poor"):  # `converged` is a promise: not on a poor approximation
        diagnostics["converged"] = False
    dims = dict(post.dims)
    if "z" in post.samples:
        dims.setdefault("z", ["point"])
    if "X" in post.observed_data:
        dims.setdefault("X", ["point", "feature"])
    return post.replace(diagnostics=diagnostics, dims=dims)
