"""The one result type every engine returns.

A `Posterior` holds draws with leading ``(chain, draw)`` axes (approximate engines draw from their
approximation), the pointwise log likelihood of the observed sites at each draw, the observed data,
per-draw statistics, the evidence where the engine gives one, and the engine's diagnostics.
ArviZ is imported only inside :meth:`Posterior.to_arviz`.

Example:
    >>> import numpy as np, inference
    >>> post = inference.Posterior(engine="vi", samples={"w": np.zeros((1, 4, 2))})
    >>> post.num_chains, post.num_draws
    (1, 4)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import numpy as np

ENGINES = ("mcmc", "vi", "laplace", "ep", "exact")
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class Posterior:
    """Posterior draws and everything needed to judge and compare them.

    Attributes:
        engine: ``"mcmc"``, ``"vi"``, ``"laplace"``, ``"ep"`` or ``"exact"``.
        samples: site name -> array ``(chain, draw, *site_shape)``; recovered discrete latents
            (``z``, ``states``) included.
        log_likelihood: observed site name -> pointwise log likelihood ``(chain, draw, *obs_shape)``.
        observed_data: observed site name -> observed array.
        sample_stats: name -> ``(chain, draw)`` array. Approximate engines write ``lp`` (log joint
            density of the model at the draw) and ``log_q`` (log density of the approximation at
            the same draw, in the same space), which ``arviz.loo_approximate_posterior`` needs.
        log_evidence: log marginal likelihood, or ``None`` where the engine gives none.
        evidence_method: how ``log_evidence`` was obtained (``"exact"``, ``"ep"``, ``"laplace"``,
            ``"elbo"`` (a lower bound), ...), or ``None``.
        diagnostics: plain-Python dict; ``converged`` (bool) always present, ``False`` unless the
            engine says so (README.md, "What `converged` means": one rule per engine, in
            `inference.convergence`).
        approximation: the approximation's parameters (e.g. ``loc``/``cov`` in unconstrained
            space, EP site parameters), so ``log q`` can be recomputed.
        marginals: discrete site -> its posterior marginal probabilities over the site's values
            (``inference.exact``: values ``0..K-1`` for Bernoulli and Categorical sites).
        predictions: posterior predictive draws filled by :meth:`predict`.
        predictor: engine-specific ``f(rng_key, *args, **kwargs) -> dict`` of ``(chain, draw, ...)``
            arrays, used by :meth:`predict` (e.g. EP's GP conditional); not saved.
        model, model_args, model_kwargs: the NumPyro program and the data it was fitted to, used by
            :meth:`predict`; not saved.
        dims: optional ArviZ dims, site name -> list of dimension names (sample dims excluded).

    Example (every engine returns one; see also :meth:`predict`, :meth:`save`):
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(50, 2)); y = X @ np.array([1.0, -1.0])
        >>> post = inference.laplace(probmodels.linear_regression, X, y, noise_scale=1.0)
        >>> post.engine, post.num_chains, post.num_draws, post.evidence_method
        ('laplace', 1, 1000, 'laplace')
        >>> sorted(post.to_arviz().children)
        ['approximation', 'log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    """

    engine: str
    samples: dict[str, np.ndarray]
    log_likelihood: dict[str, np.ndarray] = field(default_factory=dict)
    observed_data: dict[str, np.ndarray] = field(default_factory=dict)
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    log_evidence: float | None = None
    evidence_method: str | None = None
    diagnostics: dict[str, Any] = field(default_factory=lambda: {"converged": False})
    approximation: dict[str, np.ndarray] = field(default_factory=dict)
    marginals: dict[str, np.ndarray] = field(default_factory=dict)
    predictions: dict[str, np.ndarray] = field(default_factory=dict)
    predictor: Callable | None = field(default=None, repr=False)
    model: Callable | None = field(default=None, repr=False)
    model_args: tuple = field(default=(), repr=False)
    model_kwargs: dict = field(default_factory=dict, repr=False)
    dims: dict[str, list[str]] = field(default_factory=dict, repr=False)
    seed: int = 0

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if not self.samples:
            raise ValueError("samples must hold at least one site")
        shapes = {name: np.shape(v)[:2] for name, v in self.samples.items()}
        if any(len(s) < 2 for s in shapes.values()) or len(set(shapes.values())) != 1:
            raise ValueError(f"every site needs the same leading (chain, draw) axes, got {shapes}")
        cast = lambda d: {k: np.asarray(v) for k, v in d.items()}  # noqa: E731
        for name in ("samples", "log_likelihood", "observed_data", "sample_stats", "approximation", "marginals"):
            object.__setattr__(self, name, cast(getattr(self, name)))
        diag = dict(self.diagnostics)
        diag["converged"] = bool(diag.get("converged", False))  # never assumed: an engine must say so
        object.__setattr__(self, "diagnostics", diag)
        if self.log_evidence is not None:
            object.__setattr__(self, "log_evidence", float(self.log_evidence))

    # ----------------------------------------------------------------- shapes
    @property
    def num_chains(self) -> int:
        return int(next(iter(self.samples.values())).shape[0])

    @property
    def num_draws(self) -> int:
        return int(next(iter(self.samples.values())).shape[1])

    def flat_samples(self) -> dict[str, np.ndarray]:
        """Draws with ``(chain, draw)`` merged into one leading axis."""
        return {k: v.reshape((-1,) + v.shape[2:]) for k, v in self.samples.items()}

    def mean(self, site: str) -> np.ndarray:
        return self.samples[site].mean(axis=(0, 1))

    def std(self, site: str) -> np.ndarray:
        return self.samples[site].std(axis=(0, 1))

    # ----------------------------------------------------------------- arviz
    def to_arviz(self):
        """An ``xarray.DataTree`` with groups posterior, sample_stats, log_likelihood,
        observed_data, and posterior_predictive once :meth:`predict` ran; dims (chain, draw)."""
        import arviz as az

        groups = {"posterior": self.samples}
        if self.sample_stats:
            groups["sample_stats"] = self.sample_stats
        if self.log_likelihood:
            groups["log_likelihood"] = self.log_likelihood
        if self.observed_data:
            groups["observed_data"] = self.observed_data
        if self.predictions:
            groups["posterior_predictive"] = self.predictions
        # Observed sites share dims between observed_data and log_likelihood; predictions at new
        # inputs (another shape) get dims of their own.
        dims = {k: list(v) for k, v in self.dims.items()}
        for name, value in self.observed_data.items():
            dims.setdefault(name, [f"{name}_dim_{i}" for i in range(np.ndim(value))])
        pred_dims = {
            name: [f"{name}_pred_dim_{i}" for i in range(np.ndim(value) - 2)]
            for name, value in self.predictions.items()
            if name in self.observed_data and np.shape(value)[2:] != np.shape(self.observed_data[name])
        }
        dt = az.from_dict(groups, dims=dims, pred_dims=pred_dims or None)
        for group in ("approximation", "marginals"):
            values = getattr(self, group)
            if values:
                import xarray as xr

                dt[group] = xr.DataTree(xr.Dataset({k: (tuple(f"{k}_dim_{i}" for i in range(v.ndim)), v)
                                                    for k, v in values.items()}))
        dt.attrs.update(self._attrs())
        return dt

    def _attrs(self) -> dict[str, Any]:
        return {
            "inference_engine": self.engine,
            "inference_format_version": FORMAT_VERSION,
            "log_evidence": "none" if self.log_evidence is None else repr(self.log_evidence),
            "evidence_method": self.evidence_method or "none",
            "diagnostics_json": json.dumps(_jsonable(self.diagnostics)),
            "dims_json": json.dumps(self.dims),
            "seed": int(self.seed),
        }

    def summary(self, **kwargs):
        """ArviZ summary table (pandas DataFrame) of the posterior group.

        By default the continuous sites only: discrete latents (mixture assignments, HMM states)
        have no meaningful mean / R-hat per coordinate; pass ``var_names`` to include them."""
        import arviz as az

        if "var_names" not in kwargs:
            floats = [k for k, v in self.samples.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]
            if floats and len(floats) < len(self.samples):
                kwargs["var_names"] = floats
        return az.summary(self.to_arviz(), **kwargs)

    # ----------------------------------------------------------------- prediction
    def predict(self, *args, seed: int | None = None, **kwargs):
        """Posterior predictive draws for new inputs ``*args, **kwargs`` (the model's own).

        The fit's keyword options that are left out (``noise_scale=0.7``, ``num_states=3``, a
        kernel) are passed again as fitted, observed values are not, and an array or list left
        out that feeds no observed site (cut points) is refused; arguments given here win. A call
        at which the model has latent sites the fitted one had not is refused
        (`inference._model.fit_options`).
        Returns the ``posterior_predictive`` group as a DataTree and adds it to :meth:`to_arviz`.
        """
        from inference import compiled
        from inference._model import fit_options

        if self.predictor is None and self.model is None:
            raise RuntimeError(
                "predict needs the model: this Posterior was loaded from disk; pass model= to "
                "inference.load(path, model=...) to predict"
            )
        kwargs = {**fit_options(self, args, kwargs), **kwargs}
        key = jax.random.PRNGKey(self.seed + 1 if seed is None else seed)
        with compiled.scope():  # full-precision matrix products, as in the fit
            if self.predictor is not None:
                draws = self.predictor(key, *args, **kwargs)
            else:
                from inference._model import predictive_draws

                draws = predictive_draws(self, key, *args, **kwargs)
        self.predictions.clear()
        self.predictions.update({k: np.asarray(v) for k, v in draws.items()})
        return self.to_arviz()["posterior_predictive"]

    # ----------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Write a NetCDF4 file (lossless: values, dtypes, groups, attrs). No pickle. Every
        non-scalar variable carries an HDF5 Fletcher-32 checksum, so corrupted values fail to
        load instead of loading wrong (HDF5 cannot checksum scalars)."""
        dt = self.to_arviz()
        encoding = {f"/{g}": {v: {"fletcher32": True} for v, da in dt[g].to_dataset().data_vars.items()
                              if da.ndim > 0 and da.size > 0}
                    for g in dt.children}
        dt.to_netcdf(str(path), engine="h5netcdf", encoding=encoding)

    def replace(self, **changes) -> "Posterior":
        from dataclasses import replace

        return replace(self, **changes)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.ndarray, jax.Array)):
        return _jsonable(np.asarray(obj).tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return float(obj)
    return obj


def load(path, *, model: Callable | None = None, model_args: tuple = (), model_kwargs=None) -> Posterior:
    """Read a Posterior written by :meth:`Posterior.save`.

    ``model`` (and the training ``model_args``/``model_kwargs``) re-attach the NumPyro program so
    that :meth:`Posterior.predict` works again on the loaded object.

    Example:
        >>> import numpy as np, inference, os, tempfile
        >>> post = inference.Posterior(engine="vi", samples={"w": np.zeros((1, 4, 2))})
        >>> path = os.path.join(tempfile.mkdtemp(), "fit.nc"); post.save(path)
        >>> inference.load(path).samples["w"].shape
        (1, 4, 2)
    """
    import os

    import xarray as xr

    path = str(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"path: no such file {path!r}")
    try:
        dt = xr.open_datatree(path, engine="h5netcdf")
        dt.load()
    except Exception as exc:  # h5py/xarray raise many types for a damaged file
        raise ValueError(f"path: {path!r} is not a readable posterior NetCDF file ({exc})") from exc
    attrs = dt.attrs
    if "inference_engine" not in attrs:
        raise ValueError(f"path: {path!r} was not written by Posterior.save (no inference_engine attr)")

    def group(name):
        if name not in dt.children:
            return {}
        ds = dt[name].to_dataset()
        return {k: ds[k].values for k in ds.data_vars}

    log_ev = attrs.get("log_evidence", "none")
    method = attrs.get("evidence_method", "none")
    try:
        diagnostics = json.loads(attrs.get("diagnostics_json", "{}"))
        dims = json.loads(attrs.get("dims_json", "{}"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"path: {path!r} has damaged metadata ({exc})") from exc
    approximation = group("approximation")
    return Posterior(
        engine=str(attrs["inference_engine"]),
        samples=group("posterior"),
        log_likelihood=group("log_likelihood"),
        observed_data=group("observed_data"),
        sample_stats=group("sample_stats"),
        log_evidence=None if log_ev == "none" else float(log_ev),
        evidence_method=None if method == "none" else str(method),
        diagnostics=diagnostics,
        approximation=approximation,
        marginals=group("marginals"),
        predictions=group("posterior_predictive"),
        model=model,
        model_args=tuple(model_args),
        model_kwargs=dict(model_kwargs or {}),
        dims=dims,
        seed=int(attrs.get("seed", 0)),
    )


def _flatten(post: Posterior):
    children = (post.samples, post.log_likelihood, post.sample_stats, post.approximation, post.marginals)
    aux = (post.engine, post.observed_data, post.log_evidence, post.evidence_method, post.diagnostics,
           post.predictions, post.predictor, post.model, post.model_args, post.model_kwargs, post.dims,
           post.seed)
    return children, aux


def _unflatten(aux, children):
    post = object.__new__(Posterior)
    names = ("engine", "observed_data", "log_evidence", "evidence_method", "diagnostics", "predictions",
             "predictor", "model", "model_args", "model_kwargs", "dims", "seed")
    for n, v in zip(names, aux):
        object.__setattr__(post, n, v)
    for n, v in zip(("samples", "log_likelihood", "sample_stats", "approximation", "marginals"), children):
        object.__setattr__(post, n, v)
    return post


jax.tree_util.register_pytree_node(Posterior, _flatten, _unflatten)
