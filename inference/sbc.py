"""Simulation-based calibration (Talts et al. 2018, arXiv:1804.06788).

Draw parameters from the prior, simulate data from them, fit the simulated data with an engine and
record the rank of each true parameter among ``L`` posterior draws. For a correctly calibrated
engine every rank is uniform on ``{0, ..., L}``; an over-confident (too narrow) posterior piles the
ranks at both ends, an under-confident one in the middle, a biased one to one side.

    res = inference.sbc(probmodels.linear_regression, X, y, engine="mcmc", num_replicates=100)
    res.passed(), res.table(), res.plot("ranks.png")

The model is called with the arguments it is fitted with (``y`` included: only its shape is used);
its observed sites are re-simulated in every replicate and the fit is conditioned on them.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
from numpyro import handlers
from numpyro.primitives import Messenger

from inference import _model, _options

_DEFAULTS = {
    "mcmc": {"num_warmup": 400, "num_samples": 400, "num_chains": 2},
    "vi": {"num_samples": 400},
    "laplace": {"num_samples": 400},
    "ep": {"num_samples": 400},
}


@dataclasses.dataclass(frozen=True)
class SBCResult:
    """Ranks of the true parameters (``ranks[r, j]`` in ``0..num_draws``) and their summaries.

    ``bias``: mean of ``u = rank / num_draws`` minus 1/2 (> 0: the posterior sits below the truth).
    ``dispersion``: ``12 var(u)``; 1 when calibrated, > 1 over-confident (posterior too narrow),
    < 1 under-confident (too wide). ``p_values``: chi-square uniformity test per parameter.
    """

    engine: str
    names: tuple[str, ...]
    ranks: np.ndarray
    num_draws: int
    p_values: np.ndarray
    bias: np.ndarray
    dispersion: np.ndarray
    coverage_90: np.ndarray
    failures: int
    num_bins: int

    def passed(self, alpha: float = 0.01) -> bool:
        """Uniform ranks for every parameter at level ``alpha`` (Bonferroni over parameters)."""
        return bool(np.min(self.p_values) >= alpha / len(self.names)) and self.failures == 0

    def table(self) -> str:
        """Markdown table, one row per parameter."""
        rows = ["| parameter | p-value | bias | dispersion | 90% coverage |", "|---|---|---|---|---|"]
        for j, name in enumerate(self.names):
            rows.append(f"| {name} | {self.p_values[j]:.3f} | {self.bias[j]:+.3f} | "
                        f"{self.dispersion[j]:.2f} | {self.coverage_90[j]:.2f} |")
        return "\n".join(rows)

    def plot(self, path: str | None = None, max_params: int = 12):
        """Rank histograms with the 99% band of a uniform histogram; saved to ``path`` if given."""
        import matplotlib

        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from scipy import stats

        k = min(len(self.names), max_params)
        cols = min(4, k)
        rows = -(-k // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.4 * rows), squeeze=False)
        n = self.ranks.shape[0]
        lo, hi = stats.binom.ppf([0.005, 0.995], n, 1 / self.num_bins)
        edges = np.linspace(-0.5, self.num_draws + 0.5, self.num_bins + 1)
        for j in range(k):
            ax = axes[j // cols, j % cols]
            ax.axhspan(lo, hi, color="0.85")
            ax.hist(self.ranks[:, j], bins=edges, color="C0")
            ax.set_title(f"{self.names[j]} (p={self.p_values[j]:.2f})", fontsize=9)
        for j in range(k, rows * cols):
            axes[j // cols, j % cols].axis("off")
        fig.suptitle(f"SBC ranks, {self.engine}, {n} replicates")
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
            plt.close(fig)
        return fig


class _Unobserve(Messenger):
    """Turn the named observed sites into sampled ones (to simulate data from the prior)."""

    def __init__(self, fn, names):
        self.names = set(names)
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["name"] in self.names:
            msg["value"] = None
            msg["is_observed"] = False


# Model-offered hooks that read the data from the model's *arguments* would see the original data,
# not the simulated observations the fit is conditioned on, so they are not carried over.
_ARGUMENT_HOOKS = ("init_values", "vi_methods", "mcmc_sampler")


def _conditioned(model):
    """``model`` with its observed sites set to ``_sbc_data``: one program for every replicate, the
    simulated data an argument, so engines compile it once (see `inference.compiled`)."""

    def conditioned(*args, _sbc_data=None, **kwargs):
        with handlers.condition(data=_sbc_data):
            return model(*args, **kwargs)

    functools.update_wrapper(conditioned, model)  # name, docstring, hooks such as postprocess
    for hook in _ARGUMENT_HOOKS:
        conditioned.__dict__.pop(hook, None)
    return conditioned


def _flatten(values: dict, names) -> tuple[list[str], np.ndarray]:
    labels, cols = [], []
    for name in names:
        v = np.asarray(values[name], dtype=float)
        flat = v.reshape(-1)
        if v.ndim == 0:
            labels.append(name)
        else:
            labels.extend(f"{name}[{','.join(map(str, idx))}]" for idx in np.ndindex(v.shape))
        cols.append(flat)
    return labels, np.concatenate(cols)


def _ranks(draws: np.ndarray, truth: np.ndarray, rng) -> np.ndarray:
    """Rank of ``truth`` among ``draws`` (L, P); ties broken at random (discrete parameters)."""
    below = np.sum(draws < truth, axis=0)
    ties = np.sum(draws == truth, axis=0)
    return below + np.array([rng.integers(0, t + 1) for t in ties])


def sbc(model, *args, engine="mcmc", num_replicates: int = 100, num_draws: int = 99,
        params=None, seed: int = 0, engine_options: dict | None = None, progress: bool | None = None,
        model_kwargs: dict | None = None, **kwargs) -> SBCResult:
    """Simulation-based calibration of ``engine`` on ``model(*args, **kwargs)``.

    Args:
        engine: ``"mcmc"``, ``"vi"``, ``"laplace"``, ``"ep"``, or a callable
            ``engine(model, *args, seed=..., **kwargs) -> Posterior``.
        num_replicates: simulated data sets.
        num_draws: ``L``, posterior draws each rank is taken over (evenly thinned from the fit);
            ``L + 1`` must be divisible by the number of histogram bins (10 when it is).
        params: latent sites to check (default: every continuous latent sample site).
        engine_options: keyword options for the engine (defaults keep each fit short).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(10, 1)); y = X[:, 0]
        >>> res = inference.sbc(probmodels.linear_regression, X, y, noise_scale=1.0, engine="laplace",
        ...                     num_replicates=10, num_draws=19, progress=False)
        >>> res.ranks.shape, res.names
        ((10, 1), ('w[0]',))
    """
    import jax

    import inference

    num_replicates = _options.positive_int(num_replicates, "num_replicates", minimum=10)
    num_draws = _options.positive_int(num_draws, "num_draws", minimum=9)
    seed = _options.seed(seed)
    show = _options.progress(progress)
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    if isinstance(engine, str):
        if engine not in _DEFAULTS:
            raise ValueError(f"engine must be one of {sorted(_DEFAULTS)} or a callable, got {engine!r}")
        name, fit = engine, getattr(inference, engine)
        options = {**_DEFAULTS[engine], **(engine_options or {})}
    elif callable(engine):
        name, fit, options = getattr(engine, "__name__", "custom"), engine, dict(engine_options or {})
    else:
        raise TypeError(f"engine must be an engine name or a callable, got {type(engine).__name__}")

    trace = _model.trace_model(model, args, kwargs, seed)
    observed = list(_model.observed_sites(trace))
    if not observed:
        raise ValueError("model has no observed sites: pass the data arguments (e.g. y) so SBC knows "
                         "what to simulate")
    continuous = [n for n in _model.latent_sites(trace)
                  if np.issubdtype(np.asarray(trace[n]["value"]).dtype, np.floating)]
    if params is None:
        params = continuous
    else:
        params = [params] if isinstance(params, str) else list(params)
        unknown = [p for p in params if p not in trace or trace[p]["type"] != "sample" or p in observed]
        if unknown:
            raise ValueError(f"params {unknown} are not latent sample sites of the model "
                             f"(latent sites: {_model.latent_sites(trace)})")
    if not params:
        raise ValueError("model has no continuous latent sites to calibrate")
    num_bins = 10 if (num_draws + 1) % 10 == 0 else next(b for b in (8, 5, 4, 2) if (num_draws + 1) % b == 0)

    simulate = _Unobserve(model, observed)
    conditioned = _conditioned(model)
    rng = np.random.default_rng(seed)
    ranks, inside, labels, failures = [], [], None, 0
    from inference.progress import Bar

    bar = Bar(show, num_replicates, f"SBC {name}")
    for r in range(num_replicates):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), r)
        sim = handlers.trace(handlers.seed(simulate, key)).get_trace(*args, **kwargs)
        data = {n: sim[n]["value"] for n in observed}
        labels, truth = _flatten({p: sim[p]["value"] for p in params}, params)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if isinstance(engine, str) and "progress" not in options:
                    options["progress"] = False
                post = fit(conditioned, *args, seed=seed + r, **options, _sbc_data=data, **kwargs)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
            failures += 1
            warnings.warn(f"SBC replicate {r}: the fit failed ({exc})", skip_file_prefixes=_options.INTERNAL)
            continue
        flat = np.concatenate([np.asarray(post.samples[p], dtype=float).reshape(
            post.samples[p].shape[0] * post.samples[p].shape[1], -1) for p in params], axis=1)
        idx = np.linspace(0, flat.shape[0] - 1, num_draws).round().astype(int)
        draws = flat[idx]
        ranks.append(_ranks(draws, truth, rng))
        lo, hi = np.quantile(flat, [0.05, 0.95], axis=0)
        inside.append((truth >= lo) & (truth <= hi))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    if not ranks:
        raise RuntimeError("every SBC replicate failed; see the warnings")
    return summarise(name, tuple(labels), np.array(ranks), num_draws, failures, num_bins,
                     np.array(inside))


def summarise(engine, names, ranks, num_draws, failures=0, num_bins=10, inside=None) -> SBCResult:
    """Uniformity tests and dispersion summaries of a rank matrix (replicates, parameters)."""
    from scipy import stats

    ranks = np.asarray(ranks)
    counts = np.stack([np.bincount(ranks[:, j] * num_bins // (num_draws + 1), minlength=num_bins)
                       for j in range(ranks.shape[1])], axis=1)
    p_values = stats.chisquare(counts, axis=0).pvalue
    u = (ranks + 0.5) / (num_draws + 1)
    coverage = np.full(ranks.shape[1], np.nan) if inside is None else inside.mean(axis=0)
    return SBCResult(engine=engine, names=tuple(names), ranks=ranks, num_draws=num_draws,
                     p_values=np.asarray(p_values), bias=u.mean(axis=0) - 0.5,
                     dispersion=12 * u.var(axis=0), coverage_90=coverage, failures=failures,
                     num_bins=num_bins)
