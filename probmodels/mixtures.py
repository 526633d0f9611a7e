"""Bayesian Gaussian mixtures, finite and Dirichlet-process, with the assignments summed out.

``gaussian_mixture(X, num_components=3, *, covariance="full")`` and
``dp_mixture(X, truncation=20, *, concentration=1.0, covariance="full")`` share one conjugate
(Normal-inverse-Wishart) prior for the components, so NUTS, SVI, Laplace and the coordinate-ascent
VI (``inference.vi(..., method="cavi")``) all target exactly the same posterior:

- weights: ``weights ~ Dirichlet(weight_concentration * 1_K)`` (finite, default 1: uniform on the
  simplex); DP: ``sticks_k ~ Beta(1, concentration)``, k = 1..T-1, ``weights`` by stick breaking
  (the last weight is the remaining stick: the mass beyond the truncation level); with
  ``concentration=None`` it is a site ``concentration ~ Gamma(*concentration_prior)``, default
  (1, 1) (shape, rate).
- ``covariance="full"``: ``cov_k ~ InverseWishart(nu0, Psi0)`` and ``locs_k | cov_k ~ N(m0, cov_k / beta0)``.
  ``covariance="diag"``: per feature j, ``scales_kj**2 ~ InverseGamma(nu0 / 2, Psi0_jj / 2)`` and
  ``locs_kj | scales ~ N(m0_j, scales_kj**2 / beta0)`` (a Normal-gamma prior on the precisions).
- Data-scaled defaults (the data's units do not matter: galaxies in km/s and standardised data get
  the same prior relative to their spread): ``m0 = mean(X)`` (``loc_prior_mean``); ``beta0 = 0.01``
  (``loc_prior_strength``: a mean may lie ten component standard deviations from m0 at no real
  cost); ``nu0 = d + 2`` for full, 3 for diag (``cov_prior_df``: the fewest degrees of freedom with
  a finite prior mean of the covariance, which then equals Psi0); ``Psi0 = diag(var(X)) / 4``
  (``cov_prior_scale``: components half the data's standard deviation a priori; a scalar, a (d,)
  diagonal or a (d, d) matrix). Without data (``X=None``, prior predictive) m0 = 0, Psi0 = I / 4.
  Of Psi0 = var / 4, / 16, / 64 (with beta0 = 0.01 or 0.1), var / 4 has the highest ELBO on
  faithful (by 19 nats) and is within 1 nat of the best on galaxies.

The model samples ``locs`` first from their marginal (multivariate Student t) and then ``cov`` (or
``scales``) given ``locs``: the same joint density, written so that ``ordered=True`` (finite mixture
only) is exact: ``locs`` sorted by their first coordinate, density K! prod_k p(locs_k) on that set,
the same posterior restricted to one labelling (no label switching). A DP mixture is not
exchangeable in its labels (stick-breaking weights decrease stochastically) and has no ``ordered``.

``X`` is (n, d); a 1-D array is n scalar observations, i.e. (n, 1) (fit one d-dimensional point as
(1, d)). The observed site ``X`` has one log-likelihood term per row (LOO works); the assignments
are declared with `inference.latent.recovered`, so every engine returns ``z`` (chain, draw, n) draws.
``inference.ep`` does not apply (not a latent-Gaussian model). Every engine starts from `start`
(k-means of the data, a new bootstrap per chain; see `inference.latent`), and a fit whose
components collapsed is flagged in ``diagnostics["collapsed"]`` (`inference.mixture_diagnostics`).

Example:
    >>> import numpy as np, inference
    >>> from probmodels.mixtures import gaussian_mixture
    >>> X = np.r_[np.random.default_rng(0).normal(-3, 1, (50, 1)), np.random.default_rng(1).normal(3, 1, (50, 1))]
    >>> post = inference.vi(gaussian_mixture, X, num_components=2, method="cavi", num_samples=50)
    >>> post.samples["z"].shape, np.sort(post.mean("locs")[:, 0]).round().tolist()
    ((1, 50, 100), [-3.0, 3.0])
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.infer import init_to_median
from numpyro.infer.autoguide import AutoDiagonalNormal
from numpyro.distributions.transforms import OrderedTransform, ParameterFreeTransform, PowerTransform, biject_to

from inference import mixture_diagnostics
from inference.latent import Start, bootstrap_weights, kmeans, recovered, site_init
from inference.mixture_cavi import MixturePrior, Structure
from probmodels import _checks

COVARIANCES = ("full", "diag")
LOC_PRIOR_STRENGTH = 0.01
COV_PRIOR_FRACTION = 1.0 / 4.0
CAVI_RESTARTS = 4


# ----------------------------------------------------------------------------- ordered locations
class _FirstColumnOrdered(constraints.Constraint):
    """(K, d) real matrices whose first column increases."""

    event_dim = 2

    def __call__(self, x):
        return jnp.all(x[..., 1:, 0] > x[..., :-1, 0], axis=-1)

    def feasible_like(self, prototype):
        return jnp.broadcast_to(jnp.arange(float(prototype.shape[-2]))[:, None], prototype.shape)

    def tree_flatten(self):
        return (), ((), dict())


first_column_ordered = _FirstColumnOrdered()


class FirstColumnOrderedTransform(ParameterFreeTransform):
    """Unconstrained (K, d) -> first column ordered (Stan's ordered transform), other columns as is."""

    domain = constraints.real_matrix
    codomain = first_column_ordered

    def __call__(self, x):
        return x.at[..., 0].set(OrderedTransform()(x[..., 0]))

    def _inverse(self, y):
        return y.at[..., 0].set(OrderedTransform().inv(y[..., 0]))

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        return jnp.sum(x[..., 1:, 0], -1)


@biject_to.register(_FirstColumnOrdered)
def _ordered_bijection(constraint):
    return FirstColumnOrderedTransform()


class OrderedComponents(dist.Distribution):
    """``size`` iid draws of a (d,)-event ``base``, sorted by their first coordinate: density
    size! prod_k base(x_k) on that set."""

    pytree_data_fields = ("base",)
    pytree_aux_fields = ("size",)
    support = first_column_ordered

    def __init__(self, base, size: int, *, validate_args=None):
        self.base, self.size = base, int(size)
        super().__init__(batch_shape=(), event_shape=(self.size,) + base.event_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        x = self.base.sample(key, tuple(sample_shape) + (self.size,))
        order = jnp.argsort(x[..., 0], axis=-1)
        return jnp.take_along_axis(x, order[..., None], axis=-2)

    def log_prob(self, value):
        return jnp.sum(self.base.log_prob(value), -1) + gammaln(self.size + 1.0)


# ----------------------------------------------------------------------------- inputs and priors
def _data(X, num_points, num_features, loc_prior_mean):
    """(X as a float array or None, n, d) with the 1-D convention applied."""
    if X is None:
        if num_points is None:
            raise ValueError("num_points is required when X is None (how many points to simulate)")
        n = _checks.positive_int(num_points, "num_points")
        if num_features is None:
            if loc_prior_mean is None:
                raise ValueError("num_features (or loc_prior_mean) is required when X is None")
            num_features = int(np.size(loc_prior_mean))
        return None, n, _checks.positive_int(num_features, "num_features")
    if num_points is not None or num_features is not None:
        raise ValueError("num_points and num_features apply only when X is None (X's shape is used)")
    if _checks.is_traced(X):
        X = X[:, None] if X.ndim == 1 else X
        return X, X.shape[0], X.shape[1]
    X = _checks.matrix(X, "X", allow_1d=True)
    return jnp.asarray(X), X.shape[0], X.shape[1]


def _covariance(value):
    if not isinstance(value, str) or value not in COVARIANCES:
        raise ValueError(f"covariance must be one of {COVARIANCES}, got {value!r}")
    return value


def _array(value, name, shape_ok, what):
    if _checks.is_traced(value):
        return value
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {what}, got {value!r}") from exc
    if not shape_ok(arr.shape) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be {what}, got shape {arr.shape} value {value!r}")
    return arr


def hyperparameters(X, num_features, covariance, *, loc_prior_mean=None, loc_prior_strength=LOC_PRIOR_STRENGTH,
                    cov_prior_df=None, cov_prior_scale=None, concentration=1.0,
                    concentration_prior=(1.0, 1.0)) -> MixturePrior:
    """The resolved conjugate prior (data-scaled defaults, see the module docstring)."""
    d, full = num_features, covariance == "full"
    if X is None:
        mean, var = jnp.zeros(d), jnp.ones(d)
    else:
        mean = jnp.mean(X, 0)
        var = jnp.var(X, 0)
        var = jnp.where(var > 0, var, 1.0)
    if loc_prior_mean is not None:
        m = _array(loc_prior_mean, "loc_prior_mean", lambda s: s in ((), (d,)), f"a finite scalar or ({d},) vector")
        mean = jnp.broadcast_to(jnp.asarray(m, dtype=jnp.result_type(float)), (d,))
    beta0 = _checks.positive(loc_prior_strength, "loc_prior_strength")
    if cov_prior_df is None:
        nu0 = d + 2.0 if full else 3.0
    else:
        nu0 = _checks.positive(cov_prior_df, "cov_prior_df")
        if full and not _checks.is_traced(nu0) and nu0 <= d - 1:
            raise ValueError(f"cov_prior_df must exceed num_features - 1 = {d - 1}, got {cov_prior_df!r}")
    if cov_prior_scale is None:
        psi = COV_PRIOR_FRACTION * var
        psi = jnp.diag(psi) if full else psi
    else:
        ok = (lambda s: s in ((), (d,), (d, d))) if full else (lambda s: s in ((), (d,)))
        what = f"a positive scalar, ({d},) diagonal" + (f" or ({d}, {d}) positive-definite matrix" if full else "")
        arr = _array(cov_prior_scale, "cov_prior_scale", ok, what)
        if not _checks.is_traced(arr):
            if arr.ndim == 2 and (not np.allclose(arr, arr.T) or np.linalg.eigvalsh(arr)[0] <= 0):
                raise ValueError(f"cov_prior_scale must be symmetric positive definite, got {arr!r}")
            if arr.ndim < 2 and np.any(arr <= 0):
                raise ValueError(f"cov_prior_scale must be positive, got {cov_prior_scale!r}")
        arr = jnp.asarray(arr, dtype=jnp.result_type(float))
        psi = arr if arr.ndim == 2 else (jnp.diag(jnp.broadcast_to(arr, (d,))) if full else jnp.broadcast_to(arr, (d,)))
    shape, rate = _checks.positive_pair(concentration_prior, "concentration_prior")
    conc = 1.0 if concentration is None else concentration
    return MixturePrior.create(mean, beta0, nu0, psi, conc, shape, rate)


# ----------------------------------------------------------------------------- model pieces
def _components(k, prior, covariance, ordered, infer):
    """Sites ``locs`` and ``cov`` (or ``scales``); returns the batch of K component densities.
    ``infer(name)``: the site's ``infer`` dict (its data-driven start)."""
    d = prior.loc.shape[-1]
    nu0, beta0, m0, psi0 = prior.df, prior.strength, prior.loc, prior.scale
    if covariance == "full":
        t_df = nu0 - d + 1.0
        base = dist.MultivariateStudentT(t_df, m0, jnp.linalg.cholesky(psi0 / (beta0 * t_df)))
    else:
        base = dist.StudentT(nu0, m0, jnp.sqrt(psi0 / (beta0 * nu0))).to_event(1)
    locs = numpyro.sample("locs", OrderedComponents(base, k) if ordered else base.expand([k]), infer=infer("locs"))
    dm = locs - m0
    if covariance == "full":
        scale = psi0 + beta0 * dm[:, :, None] * dm[:, None, :]
        cov = numpyro.sample("cov", dist.InverseWishart(nu0 + 1.0, scale_matrix=scale), infer=infer("cov"))
        return dist.MultivariateNormal(locs, scale_tril=jnp.linalg.cholesky(cov))
    var = dist.InverseGamma(0.5 * (nu0 + 1.0), 0.5 * (psi0 + beta0 * dm**2))
    scales = numpyro.sample("scales", dist.TransformedDistribution(var, PowerTransform(0.5)), infer=infer("scales"))
    return dist.Normal(locs, scales).to_event(1)


def _observe(X, n, log_weights, component):
    """Site ``X`` (one log-likelihood term per row) and the recovered assignments ``z``."""
    mix = dist.MixtureSameFamily(dist.Categorical(logits=log_weights), component)
    with numpyro.plate("point", n):
        x = numpyro.sample("X", mix, obs=X)
    if X is not None:
        recovered("z", lambda key: jax.random.categorical(key, mix.component_log_probs(x), axis=-1))


def stick_breaking_log_weights(sticks):
    """log weights (T,) from T-1 sticks: w_k = v_k prod_{j<k} (1 - v_j), w_T = prod_j (1 - v_j)."""
    tiny = jnp.finfo(jnp.result_type(sticks)).tiny
    log_v = jnp.log(jnp.clip(sticks, tiny, 1.0))
    log_1mv = jnp.log(jnp.clip(1.0 - sticks, tiny, 1.0))
    zero = jnp.zeros(sticks.shape[:-1] + (1,), log_v.dtype)
    return jnp.concatenate([log_v, zero], -1) + jnp.concatenate([zero, jnp.cumsum(log_1mv, -1)], -1)


# ----------------------------------------------------------------------------- start
@functools.partial(jax.jit, static_argnames=("num_components", "covariance", "dp"))
def start(rng_key, X, prior: MixturePrior, num_components, covariance, dp=False):
    """A data-driven start for every latent site: the posterior mode of each component's
    (location, covariance) given its `inference.latent.kmeans` cluster (bootstrap-weighted, so
    each key gives another start), weights from the cluster sizes; a DP occupies as many of its T
    components as BIC chooses (k-means with T clusters would split every cluster; the others
    start empty, at the prior). Components are sorted by the
    first coordinate of their location (finite mixture: every chain has one labelling; a strictly
    increasing one, so ``ordered=True`` takes it as is) or, for a DP, by decreasing size (the
    stick-breaking prior's order)."""
    k = num_components
    n, d = X.shape
    key_w, key_k = jax.random.split(rng_key)
    w = bootstrap_weights(key_w, jnp.ones((n,), bool))
    if dp:  # as many occupied components as BIC chooses of 1..T (k-means with T splits clusters)
        fits = jax.vmap(lambda a: _clusters(key_k, X, w, prior, k, covariance, a))(jnp.arange(1, k + 1))
        counts, locs, spread, _ = jax.tree.map(lambda v: v[jnp.argmin(fits[3])], fits)
    else:
        counts, locs, spread, _ = _clusters(key_k, X, w, prior, k, covariance, k)
    if dp:
        order = jnp.argsort(-counts)
    else:
        order = jnp.argsort(locs[:, 0])
    counts, locs, spread = counts[order], locs[order], spread[order]
    if not dp:  # strictly increasing first coordinate (k-means may leave two seeds on one point)
        tiny = 1e-3 * jnp.sqrt(jnp.maximum(jnp.var(X[:, 0]), 1e-30))
        locs = locs.at[:, 0].set(jax.lax.cummax(locs[:, 0]) + tiny * jnp.arange(k))
    out = {"locs": locs, "cov" if covariance == "full" else "scales": spread}
    weights = (counts + prior.concentration / k) / (counts.sum() + prior.concentration)
    if dp:
        remaining = 1.0 - jnp.concatenate([jnp.zeros((1,), X.dtype), jnp.cumsum(weights)[:-2]])
        out["sticks"] = jnp.clip(weights[:-1] / remaining, 1e-6, 1.0 - 1e-6)
        out["concentration"] = prior.concentration_shape / prior.concentration_rate
    else:
        out["weights"] = weights
    return out


def _clusters(rng_key, X, w, prior, k, covariance, num_active):
    """`kmeans` with ``num_active`` of ``k`` clusters: counts, locations, each cluster's
    posterior-mode covariance (``scales`` for diag) and the BIC of the hard-assignment fit."""
    n, d = X.shape
    centres, labels = kmeans(rng_key, X, k, w, num_active)
    r = jax.nn.one_hot(labels, k, dtype=X.dtype) * w[:, None]  # (n, K)
    counts = r.sum(0)
    locs = jnp.where(counts[:, None] > 0, r.T @ X / jnp.maximum(counts, 1e-30)[:, None], prior.loc)
    dx = X[:, None, :] - locs[None]  # (n, K, d)
    if covariance == "full":
        spread = (prior.scale + jnp.einsum("nk,nki,nkj->kij", r, dx, dx)) / (prior.df + counts + d + 1.0)[:, None, None]
        comp = dist.MultivariateNormal(locs, spread)
        size = d + d * (d + 1) / 2 + 1
    else:
        spread = jnp.sqrt((prior.scale + jnp.einsum("nk,nkd->kd", r, dx**2)) / (prior.df + counts + 2.0)[:, None])
        comp = dist.Normal(locs, spread).to_event(1)
        size = 2 * d + 1
    log_w = jnp.log(jnp.maximum(counts, 1e-30) / jnp.sum(counts))
    loglik = jnp.sum(r * (log_w + comp.log_prob(X[:, None, :])))
    return counts, locs, spread, -2.0 * loglik + size * num_active * jnp.log(jnp.sum(w))


def _infer(X, prior, k, covariance, dp):
    """``infer(name)`` for the model's sites: their `start` (one per model run, the first site's
    key), or nothing without data."""
    if X is None:
        return lambda name: {}
    memo = {}

    def value(name, rng_key):
        if "start" not in memo:
            memo["start"] = start(rng_key, X, prior, k, covariance, dp)
        return memo["start"][name]

    return lambda name: {"init": Start(functools.partial(value, name), f"probmodels.mixtures.start {name}")}


# ----------------------------------------------------------------------------- models
def gaussian_mixture(X, num_components=3, *, covariance="full", ordered=False, weight_concentration=1.0,
                     loc_prior_mean=None, loc_prior_strength=LOC_PRIOR_STRENGTH, cov_prior_df=None,
                     cov_prior_scale=None, num_points=None, num_features=None):
    """Finite Bayesian Gaussian mixture; sites ``weights``, ``locs``, ``cov`` | ``scales``, ``X``,
    recovered ``z``. ``X=None`` (with ``num_points``, ``num_features``) simulates.

    Args:
        X: (n, d) data, or (n,) for scalar data (treated as (n, 1)).
        num_components: K >= 1.
        covariance: ``"full"`` (site ``cov``, (K, d, d)) or ``"diag"`` (site ``scales``, (K, d)).
        ordered: sort the components by ``locs[:, 0]`` (breaks label switching exactly).
        Remaining keyword arguments: the prior (module docstring).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.r_[np.random.default_rng(0).normal(-3, 1, (50, 1)), np.random.default_rng(1).normal(3, 1, (50, 1))]
        >>> post = inference.vi(probmodels.gaussian_mixture, X, num_components=2, method="cavi", num_samples=50)
        >>> np.round(np.sort(post.mean("locs")[:, 0])).tolist(), post.samples["z"].shape
        ([-3.0, 3.0], (1, 50, 100))
    """
    k = _checks.positive_int(num_components, "num_components")
    covariance = _covariance(covariance)
    if not isinstance(ordered, (bool, np.bool_)):
        raise TypeError(f"ordered must be a bool, got {type(ordered).__name__}")
    X, n, d = _data(X, num_points, num_features, loc_prior_mean)
    a0 = _checks.positive(weight_concentration, "weight_concentration")
    prior = hyperparameters(X, d, covariance, loc_prior_mean=loc_prior_mean, loc_prior_strength=loc_prior_strength,
                            cov_prior_df=cov_prior_df, cov_prior_scale=cov_prior_scale)
    infer = _infer(X, prior._replace(concentration=jnp.asarray(a0 * k, prior.loc.dtype)), k, covariance, False)
    weights = numpyro.sample("weights", dist.Dirichlet(jnp.full((k,), a0, jnp.result_type(float))), infer=infer("weights"))
    component = _components(k, prior, covariance, bool(ordered), infer)
    tiny = jnp.finfo(jnp.result_type(weights)).tiny
    _observe(X, n, jnp.log(jnp.clip(weights, tiny, 1.0)), component)


def dp_mixture(X, truncation=20, *, concentration=1.0, covariance="full", concentration_prior=(1.0, 1.0),
               loc_prior_mean=None, loc_prior_strength=LOC_PRIOR_STRENGTH, cov_prior_df=None, cov_prior_scale=None,
               num_points=None, num_features=None):
    """Dirichlet-process Gaussian mixture, truncated stick breaking at ``truncation`` components;
    sites ``sticks`` (T-1,), ``weights`` (T,), ``locs``, ``cov`` | ``scales``, [``concentration``],
    ``X``, recovered ``z``.

    Args:
        X: (n, d) data, or (n,) for scalar data (treated as (n, 1)).
        truncation: T >= 2 components; ``inference.mixture_diagnostics`` reports the posterior mass
            of the last one (beyond the truncation) and warns when it is not negligible.
        concentration: the DP concentration alpha > 0, or None for ``Gamma(*concentration_prior)``.
        Remaining keyword arguments: as `gaussian_mixture` (module docstring).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.r_[np.random.default_rng(0).normal(-3, 1, (50, 1)), np.random.default_rng(1).normal(3, 1, (50, 1))]
        >>> post = inference.vi(probmodels.dp_mixture, X, truncation=8, method="cavi", num_samples=50)
        >>> bool(np.sort(post.mean("weights"))[-2:].sum() > 0.9)   # two components carry the mass
        True
    """
    t = _checks.positive_int(truncation, "truncation", minimum=2)
    covariance = _covariance(covariance)
    X, n, d = _data(X, num_points, num_features, loc_prior_mean)
    prior = hyperparameters(X, d, covariance, loc_prior_mean=loc_prior_mean, loc_prior_strength=loc_prior_strength,
                            cov_prior_df=cov_prior_df, cov_prior_scale=cov_prior_scale,
                            concentration_prior=concentration_prior)
    infer = _infer(X, prior, t, covariance, True)
    if concentration is None:
        alpha = numpyro.sample("concentration", dist.Gamma(prior.concentration_shape, prior.concentration_rate),
                               infer=infer("concentration"))
    else:
        alpha = _checks.positive(concentration, "concentration")
    one = jnp.ones((), jnp.result_type(float))
    sticks = numpyro.sample("sticks", dist.Beta(one, alpha * one).expand([t - 1]), infer=infer("sticks"))
    log_weights = stick_breaking_log_weights(sticks)
    numpyro.deterministic("weights", jnp.exp(log_weights))
    component = _components(t, prior, covariance, False, infer)
    _observe(X, n, log_weights, component)


# ----------------------------------------------------------------------------- CAVI and init hooks
def _resolve(model, args, kwargs):
    """The model's arguments with defaults, its data, resolved prior, structure and size."""
    bound = inspect.signature(model).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    if a["X"] is None:
        raise ValueError("X: fitting needs data; X=None only simulates")
    X = _checks.matrix(a["X"], "X", allow_1d=True)
    dp = "truncation" in a
    prior = hyperparameters(jnp.asarray(X), X.shape[1], _covariance(a["covariance"]),
                            loc_prior_mean=a["loc_prior_mean"], loc_prior_strength=a["loc_prior_strength"],
                            cov_prior_df=a["cov_prior_df"], cov_prior_scale=a["cov_prior_scale"],
                            concentration=a["concentration"] if dp else a["weight_concentration"],
                            concentration_prior=a["concentration_prior"] if dp else (1.0, 1.0))
    structure = Structure(a["covariance"], "stick" if dp else "dirichlet", bool(dp and a["concentration"] is None))
    k = _checks.positive_int(a["truncation"] if dp else a["num_components"], "truncation" if dp else "num_components",
                             minimum=2 if dp else 1)
    return a, X, prior, structure, k


def _cavi(model, args, kwargs, trace, *, steps, num_samples, seed, progress, tol):
    """``inference.vi(model, X, ..., method="cavi")``: coordinate-ascent VI on the same prior."""
    from inference import mixture_cavi

    a, X, prior, structure, k = _resolve(model, args, kwargs)
    post = mixture_cavi.posterior(model, args, kwargs, X, prior, k, structure=structure,
                                  ordered=bool(a.get("ordered", False)), max_iter=steps, tol=tol,
                                  num_samples=num_samples, seed=seed, num_restarts=CAVI_RESTARTS)
    return mixture_diagnostics.postprocess(post)


for _model in (gaussian_mixture, dp_mixture):
    _model.vi_methods = {"cavi": _cavi}
    _model.postprocess = mixture_diagnostics.postprocess
del _model
# Measured (defaults matrix, 150 points from 3 components, truncation 6): the mode search stopped at
# saddles (indefinite Hessian) or, past them, the Gaussian in the sticks' logit space gave the 3
# empty components ~12% of the weight (exact: ~2%): weight errors 0.15 against a tolerance of 0.1.
dp_mixture.refused_engines = {
    "laplace": "a truncated DP mixture always has empty components, whose posterior is their heavy-tailed "
               "prior, and its stick-breaking weights are far from Gaussian in the unconstrained space, so "
               "the Laplace approximation is poor; use inference.vi(..., method='cavi') or inference.mcmc"}


# ----------------------------------------------------------------------------- demo
def _plot_clusters(post, path_base):
    """Faithful with each point coloured by its most frequent assignment, and 2-sd ellipses of the
    posterior-mean components that hold at least 2% of the weight."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X = np.asarray(post.observed_data["X"])
    z = np.asarray(post.samples["z"]).reshape(-1, X.shape[0])
    k = post.samples["locs"].shape[2]
    mode = np.argmax(np.apply_along_axis(np.bincount, 0, z, minlength=k), axis=0)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(X[:, 0], X[:, min(1, X.shape[1] - 1)], c=mode, s=10, cmap="tab10")
    locs, weights = post.mean("locs"), post.mean("weights")
    cov = post.mean("cov") if "cov" in post.samples else np.stack([np.diag(s**2) for s in post.mean("scales")])
    t = np.linspace(0, 2 * np.pi, 100)
    for j in np.flatnonzero(weights > 0.02):
        if X.shape[1] >= 2:
            ring = locs[j, :2, None] + 2 * np.linalg.cholesky(cov[j][:2, :2]) @ np.stack([np.cos(t), np.sin(t)])
            ax.plot(ring[0], ring[1], "k-", lw=1)
    ax.set_title(f"{post.engine}: clusters (colour = modal z), 2-sd ellipses")
    path = f"{path_base}_clusters.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]


def demo_cases():
    """Faithful (200 points to fit, 72 held out; scored by the held-out predictive log density per
    point) under the finite mixture (K = 2, ordered) and the DP mixture (T = 6)."""
    from probmodels import datasets
    from probmodels.demo import Case

    X = datasets.load_unsupervised("faithful")
    perm = np.random.default_rng(0).permutation(X.shape[0])
    train, test = X[perm[:200]], X[perm[200:]]

    def score(post):
        lpd = float(np.mean(mixture_diagnostics.predictive_log_density(post, test)))
        return "held-out log density / point", lpd, f"{lpd:.3f} (72 points)"

    finite_kw = {"num_components": 2, "ordered": True}
    mcmc = {"num_samples": 300, "num_warmup": 300, "num_chains": 2}
    # SVI starts from the model's data-driven start (`start`): from a prior draw it often stops
    # between two modes of this multimodal posterior.
    guide = AutoDiagonalNormal(gaussian_mixture, init_loc_fn=site_init(init_to_median(num_samples=15)))
    finite = Case("gaussian_mixture", gaussian_mixture, (train,), finite_kw, ("mcmc", "vi", "laplace"), score,
                  {"mcmc": mcmc, "vi": {"steps": 4000, "guide": guide}}, _plot_clusters)
    dp = Case("dp_mixture", dp_mixture, (train,), {"truncation": 6}, ("mcmc", "vi"), score,
              {"mcmc": mcmc, "vi": {"method": "cavi"}}, _plot_clusters)
    return [finite, dp]


__all__ = ["gaussian_mixture", "dp_mixture", "hyperparameters", "stick_breaking_log_weights", "demo_cases",
           "OrderedComponents", "COVARIANCES"]
