"""From a NumPyro program to an EP problem: the latent Gaussian and one scalar site per datum.

Rules (no model is recognised by name):

- Every unobserved sample site must have a Gaussian prior (``Normal`` or ``MultivariateNormal``
  / ``LowRankMultivariateNormal``, possibly ``.expand``-ed or ``.to_event``-ed) whose parameters
  do not depend on other latents. They are concatenated into one vector ``u ~ N(m0, S0)``.
- Each observed site's per-observation log-likelihood, as a function of ``u``, is read from the
  jaxpr of ``u -> site.fn.log_prob(value)`` (see :mod:`inference.ep.graph`): it must be an
  elementwise function ``h_i(eta_i)`` of one affine projection ``eta_i = a_i^T u + b_i``. The
  projection's ``(A, b)`` are the Jacobian and value at zero, checked at a random point.
- Each site's ``h_i`` is then classified numerically into a site type
  (:mod:`inference.ep.site_types`): ``log Phi(+-eta)`` -> closed-form probit; exactly quadratic
  with negative curvature -> exact Gaussian; ``log(Phi(hi - eta) - Phi(lo - eta))`` over two
  frontier variables -> closed-form ordered probit; otherwise quadrature.
  Sites constant in ``u`` (e.g. ``numpyro.factor`` of a constant) add to the evidence.
- Working space: ``"weight"`` when there are more sites than latent dimensions (whitened by the
  prior Cholesky factor), else ``"function"`` (prior covariance ``A S0 A^T`` of the sites).

Anything else raises a ``ValueError`` that names the site and says why.

Example:
    >>> import numpy as np, numpyro, numpyro.distributions as dist
    >>> from inference._model import trace_model
    >>> def model(X, y=None):
    ...     w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    ...     numpyro.sample("y", dist.Bernoulli(logits=X @ w + 1.0), obs=y)
    >>> X, y = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), np.array([1.0, 0.0, 1.0])
    >>> rec = recognise(model, (X, y), {}, trace_model(model, (X, y), {}))
    >>> rec.site_kinds, rec.A.tolist(), rec.b.tolist(), rec.problem.space
    ({'y': 'quadrature'}, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [1.0, 1.0, 1.0], 'weight')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from scipy.special import log_ndtr, ndtri

from inference.ep.gaussian import LatentMap
from inference.ep.graph import (Graph, NotElementwise, SiteLink, const_env, evaluate, flatten, graph_key,
                                link_constants, program, split, tag)
from inference.ep.problem import EPProblem, SiteGroup
from inference.ep.site_types import Gaussian, Ordinal, Probit, Quadrature
from inference.trace_reading import (GAUSSIAN_PRIORS, LatentBlock, abstract_trace, latent_blocks,  # noqa: F401
                                     latent_sites, observed_sites, prior_of, run_with, unflatten, unwrap)
from inference.trace_reading import check_gaussian_prior
from inference.trace_reading import gaussian_prior as _gaussian_prior

ADVICE = "use inference.laplace, inference.vi or inference.mcmc for this model"


@dataclass
class Recognised:
    """The EP problem plus what the driver needs to go back to the model's sites."""

    problem: EPProblem
    latent_map: LatentMap
    blocks: list
    m0: np.ndarray
    S0: np.ndarray
    A: np.ndarray
    b: np.ndarray
    const_log_lik: float
    site_kinds: dict = field(default_factory=dict)


def _float():
    return jnp.result_type(float)


def gaussian_prior(name, site):
    """(mean, cov) of a latent site, flat (jnp; traceable), or a ValueError naming the site."""
    return _gaussian_prior(name, site, "EP", ADVICE)


def _check_observed(trace):
    for name, value in observed_sites(trace).items():
        if np.issubdtype(np.asarray(value).dtype, np.number) and not np.all(np.isfinite(value)):
            raise ValueError(f"observed site {name!r} contains NaN or inf values")


def _site_log_lik(site):
    """Per-observation log-likelihood of an observed site (mask and scale applied)."""
    fn = site["fn"]
    base = unwrap(fn, masked=False)
    if base.event_shape and not isinstance(base, dist.distribution.Unit):
        raise ValueError(
            f"observed site {site['name']!r} is multivariate (event shape {base.event_shape}); EP needs one "
            f"scalar likelihood per observation")
    lp = base.log_prob(site["value"])
    extra = lp.ndim - len(fn.batch_shape)
    for key in ("mask", "scale"):
        w = site.get(key)
        if w is not None:
            w = jnp.reshape(jnp.asarray(w), jnp.shape(w) + (1,) * extra)
            lp = jnp.where(w, lp, 0.0) if key == "mask" else lp * w
    return lp


def recognise(model, args, kwargs, trace, seed: int = 0, num_points: int = 96) -> Recognised:
    """Read the EP problem off the model (see the module docstring for the rules)."""
    obs_names = list(observed_sites(trace))
    if not obs_names:
        raise ValueError("the model has no observed sites: pass the observations (e.g. y=...)")
    _check_observed(trace)
    blocks = latent_blocks(trace)
    if not blocks:
        raise ValueError("the model has no latent sites: nothing to infer")
    for b in blocks:  # type checks first (clear errors, nothing compiled); the trace may be abstract
        check_gaussian_prior(b.name, trace[b.name], "EP", ADVICE)
    # a value of the latent: the trace's own, or zeros where it is abstract (any value serves: the
    # prior is read at it and at a second one, and the likelihood traced at its shape)
    u0 = np.concatenate([np.zeros(b.size) if isinstance(trace[b.name]["value"], jax.core.Tracer)
                         else np.ravel(np.asarray(trace[b.name]["value"], float)) for b in blocks])
    D = u0.shape[0]
    u1 = u0 + np.random.default_rng(seed).standard_normal(D)
    # The prior at two values of the latent: it must not change (no latent depends on another).
    (m0, S0), (m1, S1) = prior_of(model, args, kwargs, blocks, [unflatten(jnp.asarray(u, _float()), blocks)
                                                              for u in (u0, u1)], seed, "EP", ADVICE)
    _check_prior_independent(blocks, m0, S0, m1, S1)
    u1 = m0 + np.sqrt(np.maximum(np.diag(S0), 1e-12)) * np.random.default_rng(seed + 1).standard_normal(D)

    def obs_fn(u):  # seed 0, not the fit's: the likelihood cannot depend on it, and the programs
        # compiled from this graph are kept per its structure, in which the seed is a literal
        tr = run_with(model, args, kwargs, unflatten(u, blocks), 0)
        return [_site_log_lik(dict(tr[n], name=n)) for n in obs_names]

    try:
        closed = jax.make_jaxpr(obs_fn)(jnp.asarray(u0, _float()))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as exc:
        raise ValueError(f"the model cannot be traced with its latent sites as JAX values ({exc})") from exc
    g = flatten(closed)
    tags = tag(g)
    groups, rows, offsets, kinds, const_ll = [], [], [], {}, 0.0
    for name, out in zip(obs_names, g.outputs):
        try:
            frontier, link = split(g, tags, out)
        except NotElementwise as exc:
            raise ValueError(
                f"observed site {name!r}: its log-likelihood is not an elementwise function of one affine "
                f"projection eta_i = a_i^T u + b_i of the latent ({exc}); {ADVICE}") from None
        env = const_env(g, tags, [out] + list(frontier))
        if link is None:
            const_ll += float(np.sum(np.asarray(evaluate(g, [out], known=env)[0])))
            kinds[name] = "constant"
            continue
        n = int(np.prod(g.avals[out].shape))
        A, b, scales, shifts = _projection(name, g, env, frontier, n, D, u1)
        group, A, b = _classify(name, link, env, A, b, m0, S0, num_points, scales + shifts)
        groups.append(group)
        kinds[name] = group.kind
        rows.append(A)
        offsets.append(b)
    if not groups:
        raise ValueError(f"no observed site depends on the latent sites {[b.name for b in blocks]}")
    A = np.concatenate(rows)
    b = np.concatenate(offsets)
    problem, latent_map = working_space(A, b, m0, S0, groups, blocks)
    return Recognised(problem, latent_map, blocks, m0, S0, A, b, const_ll, kinds)


def _check_prior_independent(blocks, m0, S0, m1, S1):
    for blk in blocks:
        sl = slice(blk.offset, blk.offset + blk.size)
        if not (np.allclose(m1[sl], m0[sl], rtol=1e-9, atol=1e-12) and np.allclose(S1[sl, sl], S0[sl, sl], rtol=1e-9, atol=1e-12)):
            raise ValueError(
                f"latent site {blk.name!r}: its prior depends on other latent sites; EP needs independent "
                f"Gaussian prior blocks (write the dependence as a deterministic transform); {ADVICE}")


def _projection(name, g, env, frontier, n, D, u_test):
    """(A, b) with eta = A u + b for the n observations of a site, checked affine."""
    dt = _float()
    maps = []
    light = Graph(g.eqns, g.inputs, g.outputs, {}, g.avals)  # the kept program must not hold the data
    for f in frontier:
        def make(f=f):  # the graph's constants are arguments (in env): kept per structure, not per call
            def fun(u, env):
                return jnp.ravel(evaluate(light, [f], inputs=[u], known=env)[0]).astype(dt)

            def run(u1, env):
                zero = jnp.zeros(D, dt)
                return jax.jacfwd(fun)(zero, env), fun(zero, env), fun(u1, env)

            return jax.jit(run)

        fn = program(("projection", graph_key(g), f, tuple(sorted(env)), D, str(dt)), make)
        Af, bf, got = (np.asarray(x) for x in fn(jnp.asarray(u_test, dt), env))
        if not (np.all(np.isfinite(Af)) and np.all(np.isfinite(bf))):
            raise ValueError(
                f"observed site {name!r}: the projection of the latent onto its observations has NaN or inf "
                f"entries (check the model's inputs for NaN/inf)")
        want = Af @ u_test + bf
        scale = np.abs(Af) @ np.abs(u_test) + np.abs(bf) + 1.0
        if not np.all(np.abs(got - want) <= (1e-8 if dt == jnp.float64 else 1e-4) * scale):
            raise ValueError(f"observed site {name!r}: its linear predictor is not affine in the latent")
        maps.append((np.broadcast_to(Af, (n, D)) if Af.shape[0] == 1 else Af,
                     np.broadcast_to(bf, (n,)) if bf.shape[0] == 1 else bf))
    A, b = (np.array(x, float) for x in maps[0])
    scales, shifts = [np.ones(n)], [np.zeros(n)]  # eta is the first frontier variable
    for A2, b2 in maps[1:]:  # each other one must be scale * eta + shift, row by row
        norm2 = np.sum(A * A, axis=1)
        c = np.where(norm2 > 0, np.sum(A2 * A, axis=1) / np.where(norm2 > 0, norm2, 1.0), 1.0)
        rtol = 1e-9 if dt == jnp.float64 else 1e-6  # A2 = c * A rounded in the traced dtype
        tol_a = rtol * (np.abs(A2).max() + np.abs(A).max() + 1e-300)
        if not np.allclose(A2, c[:, None] * A, rtol=rtol, atol=tol_a):
            raise ValueError(
                f"observed site {name!r}: its likelihood depends on the latent through more than one affine "
                f"projection (e.g. a scale or second parameter that depends on the latent); EP supports one "
                f"scalar projection per observation; {ADVICE}")
        scales.append(c)
        shifts.append(b2 - c * b)
    return A, b, scales, shifts


PROBIT_GRID = np.linspace(-3.0, 3.0, 25)


def _probit_fit(h, t, double):
    """Per-row (alpha, beta) with ``h = log Phi(alpha t + beta)`` at every usable grid point
    (``|alpha t + beta|`` below 5, or 3 in single precision, where the inversion is accurate), or
    None. The tolerance on ``z = Phi^-1(exp h)`` (1e-7, or 1e-4 in single precision) is far below
    the ~1e-2 by which a logistic link differs from any probit."""
    ztol = 1e-7 if double else 1e-4
    with np.errstate(all="ignore"):
        z = np.where(h < np.log(0.5), ndtri(np.exp(h)), -ndtri(-np.expm1(h)))
    usable = np.isfinite(z) & (np.abs(z) < (5.0 if double else 3.0))
    if np.any(usable.sum(axis=1) < 3):
        return None
    rows = np.arange(h.shape[0])
    lo = np.argmax(usable, axis=1)
    hi = h.shape[1] - 1 - np.argmax(usable[:, ::-1], axis=1)
    alpha = (z[rows, hi] - z[rows, lo]) / (t[rows, hi] - t[rows, lo])
    beta = z[rows, lo] - alpha * t[rows, lo]
    err = np.abs(alpha[:, None] * t + beta[:, None] - z)
    good = np.where(usable, err <= ztol * (1 + np.abs(z)), True)
    if np.any(alpha == 0) or not np.all(good):
        return None
    return alpha, beta


@partial(jax.jit, static_argnums=0)
def _h_jit(site_link, eta, per, shared):
    """The link ``h`` at ``eta`` (n, k) for every site; compiled per link structure (a `SiteLink`
    hashes by structure), so a refit reuses it."""
    one = lambda e, c: jax.vmap(lambda x: site_link(x, c, shared))(e)  # noqa: E731
    return jax.vmap(one)(eta, per)


def _classify(name, link, env, A, b, m0, S0, num_points, frontier_maps):
    """(group, A, b): probit, Gaussian or quadrature sites, decided from the log-likelihood's
    values; a probit site's projection is rescaled so that its likelihood is ``Phi(eta)``."""
    dt = _float()
    consts = link_constants(link, env) + [
        jnp.asarray(v[0], dt) if np.all(v == v[0]) else jnp.asarray(v, dt) for v in frontier_maps]
    n = A.shape[0]
    layout = tuple(bool(np.ndim(c) == 0) for c in consts)
    per = tuple(c for c in consts if np.ndim(c) > 0)
    shared = tuple(c for c in consts if np.ndim(c) == 0)
    site_link = SiteLink(link, layout)
    tol = 1e-8 if dt == jnp.float64 else 1e-3

    def h_at(eta):
        return np.asarray(_h_jit(site_link, jnp.asarray(eta, dt), per, shared), float)

    centre = b + A @ m0
    diag = _diagonal(A)
    prior_var = np.sum((A @ S0) * A, axis=1) if diag is None else diag ** 2 * np.diagonal(S0)
    spread = np.clip(np.sqrt(np.maximum(prior_var, 0.0)), 1e-2, 1e2)
    # points around each site's prior mean, plus a fixed grid around 0: a tight prior far from 0
    # (distributed EP's cavities: |eta| > 5 over the whole local grid) leaves no point where the
    # probit inversion is accurate, and a probit site would fall back to quadrature
    pts = np.sort(np.concatenate([centre[:, None] + spread[:, None] * PROBIT_GRID,
                                  np.broadcast_to(PROBIT_GRID, (n, PROBIT_GRID.size))], axis=1), axis=1)
    fit = _probit_fit(h_at(pts), pts, dt == jnp.float64)
    if fit is not None:  # h(eta) = log Phi(alpha eta + beta): re-project onto alpha eta + beta
        alpha, beta = fit
        return SiteGroup(Probit(), {"s": jnp.ones(n, dt)}, n), alpha[:, None] * A, alpha * b + beta
    t = np.array([-1.0, 0.0, 1.0, -2.3, 0.55, 1.7])
    h = h_at(centre[:, None] + spread[:, None] * t)
    q0 = h[:, 1]
    q1 = 0.5 * (h[:, 2] - h[:, 0])
    q2 = 0.5 * (h[:, 2] + h[:, 0]) - q0
    pred = q0[:, None] + q1[:, None] * t + q2[:, None] * t ** 2
    if np.all(np.isfinite(h)) and np.all(q2 < 0) and np.all(np.abs(pred - h) <= tol * (1 + np.abs(h))):
        noise_var = -spread ** 2 / (2 * q2)
        y = centre - spread * q1 / (2 * q2)
        log_const = q0 - q1 ** 2 / (4 * q2) + 0.5 * np.log(2 * np.pi * noise_var)
        data = {"y": y, "noise_var": noise_var, "log_const": log_const}
        return SiteGroup(Gaussian(), {k: jnp.asarray(v, dt) for k, v in data.items()}, n), A, b
    cuts = _ordinal_fit(h_at, pts, frontier_maps, tol)
    if cuts is not None:  # h(t) = log(Phi(hi + t) - Phi(lo + t)): the site's eta is -t
        lo, hi = cuts
        data = {"lo": jnp.asarray(lo, dt), "hi": jnp.asarray(hi, dt), "s": jnp.ones(n, dt)}
        return SiteGroup(Ordinal(), data, n), -A, -b
    return SiteGroup(Quadrature(site_link, num_points), {"consts": per, "shared": shared}, n), A, b


def _ordinal_fit(h_at, t, frontier_maps, tol):
    """Per-row cut points ``(lo, hi)`` with ``h(t) = log(Phi(hi + t) - Phi(lo + t))`` (an ordered
    probit in ``eta = -t``; ``lo = -inf`` or ``hi = +inf`` for the extreme categories), or None.

    Every frontier variable must be ``+-t + d`` row by row (the standardised cut points of the
    observed category, e.g. :class:`~inference.distributions.OrderedProbit`'s
    ``(b_k - eta) / s``); the candidate cut points of a row are ``0`` and those ``+-d``, and each
    row is checked on the grid ``t`` against every ordered pair of them (and +-inf)."""
    n = t.shape[0]
    k = len(frontier_maps) // 2
    if k < 2:  # one variable: a probit, or not ordinal
        return None
    scales = [np.broadcast_to(np.asarray(x, float), (n,)) for x in frontier_maps[:k]]
    shifts = [np.broadcast_to(np.asarray(x, float), (n,)) for x in frontier_maps[k:]]
    if not all(np.allclose(np.abs(c), 1.0, rtol=1e-9, atol=1e-9) for c in scales):
        return None
    values = [np.full(n, -np.inf), np.zeros(n), np.full(n, np.inf)] + [np.sign(c) * d for c, d in zip(scales, shifts)]
    h = h_at(t)
    lo, hi, found = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool)
    with np.errstate(all="ignore"):
        for a in values:
            for b in values:
                rows = ~found & (a < b)  # rows still open for which this pair is an interval
                if not rows.any():
                    continue
                pred = _log_diff_ndtr(b[rows, None] + t[rows], a[rows, None] + t[rows])
                ok = np.zeros(n, bool)
                ok[rows] = np.all(np.abs(pred - h[rows]) <= tol * (1 + np.abs(h[rows])), axis=1)
                lo, hi, found = np.where(ok, a, lo), np.where(ok, b, hi), found | ok
                if found.all():
                    return lo, hi
    return None


def _log_diff_ndtr(z1, z0):
    """NumPy ``log(Phi(z1) - Phi(z0))`` (as :func:`inference.ep.sites.log_diff_ndtr`)."""
    flip = z0 > 0.0
    a, b = np.where(flip, -z0, z1), np.where(flip, -z1, z0)
    la, lb = log_ndtr(a), log_ndtr(b)
    return la + np.log(-np.expm1(np.minimum(lb - la, 0.0)))


def _diagonal(A):
    """The diagonal of ``A`` when ``A`` is square with no nonzero entry off it (each site sees one
    latent coordinate times a number, as a GP classifier's ``f_i``), else None."""
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        return None
    d = np.diagonal(A)
    return d.copy() if np.count_nonzero(A) == np.count_nonzero(d) else None


def working_space(A, b, m0, S0, groups, blocks):
    """The EP problem and latent map of projections ``A``, ``b`` under the prior ``N(m0, S0)``:
    weight space when there are more sites than latent coordinates, else function space."""
    dt = _float()
    N, D = A.shape
    offset = b + A @ m0
    if N > D:
        try:
            L0 = np.linalg.cholesky(S0)
        except np.linalg.LinAlgError:
            names = [blk.name for blk in blocks]
            raise ValueError(f"the prior covariance of the latent sites {names} is not positive definite") from None
        problem = EPProblem("weight", jnp.asarray(A @ L0, dt), None, jnp.asarray(offset, dt), groups)
        return problem, LatentMap(jnp.asarray(m0, dt), jnp.asarray(L0, dt), None, None)
    diag = _diagonal(A)  # a GP's sites, one per coordinate: elementwise, not two n^3 products
    AS0 = A @ S0 if diag is None else diag[:, None] * S0
    K = AS0 @ A.T if diag is None else AS0 * diag[None, :]
    K = 0.5 * (K + K.T)
    problem = EPProblem("function", None, jnp.asarray(K, dt), jnp.asarray(offset, dt), groups)
    return problem, LatentMap(jnp.asarray(m0, dt), None, jnp.asarray(S0, dt), jnp.asarray(AS0, dt))
