"""Spike-and-slab linear regression and probit classification as NumPyro programs.

Each weight is exactly zero (the spike) unless its 0/1 inclusion indicator is on, in which case it
is drawn from a Normal slab; the indicators are independent Bernoulli(``p_incl``). Sites:

* ``z`` -- inclusion indicators, shape ``(d,)``, int 0/1;
* ``w`` -- weights, shape ``(d,)``, exactly 0 where ``z = 0`` (a :class:`SpikeSlab` site, which is
  how the engines recognise the model);
* ``precision`` -- noise precision (regression with ``noise_scale=None`` only);
* ``y`` -- observations, one per row of ``X`` (a plate, so the log likelihood is pointwise).

Regression with an unknown noise precision uses the conjugate Normal-Gamma form: the slab is
``N(0, slab_scale^2 / precision)``, i.e. measured in units of the noise scale, so the weights and
the precision integrate out in closed form (exact enumeration, collapsed Gibbs). With a fixed
``noise_scale`` the slab is ``N(0, slab_scale^2)``.

Constant columns are kept as given: a constant non-zero column acts as an intercept, an all-zero
column carries no information and its posterior inclusion probability equals ``p_incl``. None of
the engines divides by a column's spread. To standardise genes on a training split use
:func:`standardize`, which leaves constant columns at zero instead of dividing by zero.

Example:
    >>> import numpy as np, numpyro
    >>> X = np.random.default_rng(0).normal(size=(20, 5)); y = X[:, 0] + 0.1
    >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(spike_and_slab_regression, 0)).get_trace(X, y)
    >>> sorted(k for k in tr if k != "data"), tr["w"]["value"].shape
    (['precision', 'w', 'y', 'z'], (5,))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from inference.spikeslab.distribution import SpikeSlab
from probmodels.regression import probit_logits

__all__ = ["spike_and_slab_regression", "spike_and_slab_probit", "standardize", "default_p_incl"]


def spike_and_slab_regression(X, y=None, *, p_incl=0.1, slab_scale=1.0, noise_scale=None,
                              noise_prior=(1.0, 1.0)):
    """Linear regression ``y ~ N(X w, noise^2)`` with a spike-and-slab prior on ``w``.

    Args:
        X: ``(n, d)`` design matrix.
        y: ``(n,)`` responses, or ``None`` to sample them.
        p_incl: prior inclusion probability, scalar or ``(d,)``, in (0, 1); or a prior on it (a
            proper continuous distribution on (0, 1) drawing a scalar, e.g. ``dist.Beta(1, 9)``),
            sampled as site ``p_incl``: a hyperparameter that ``inference.mcmc`` samples
            (`inference.spikeslab.gibbs_hyper`) and ``inference.ep(..., hyper="map" |
            "integrate")`` learns or integrates over (known ``noise_scale``;
            `inference.hyper.ss_fit`); VI refuses it, naming the site.
        slab_scale: slab standard deviation (> 0), scalar or ``(d,)``; in noise-scale units when
            the precision is unknown (Normal-Gamma); or a prior on it (on (0, inf), drawing a
            scalar, e.g. ``dist.HalfNormal(2.0)``), sampled as site ``slab_scale``, likewise.
        noise_scale: fixed noise standard deviation (> 0), scalar or ``(n,)``; ``None`` puts a
            Gamma(``noise_prior`` = (shape, rate)) prior on the noise precision (site ``precision``).

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(40, 6)); y = 2 * X[:, 0] + 0.1 * np.random.default_rng(1).normal(size=40)
        >>> post = inference.ep(probmodels.spike_and_slab_regression, X, y, noise_scale=0.1, num_samples=50, progress=False)
        >>> np.round(post.approximation["inclusion_probability"][:2], 2).tolist()
        [1.0, 0.0]
    """
    X, y = _check_design(X, y, labels=False)
    n, d = np.shape(X)
    p = _prob_or_prior(p_incl, d, "spike_and_slab_regression")
    s = _positive_or_prior(slab_scale, "slab_scale", d, "spike_and_slab_regression")
    z = numpyro.sample("z", dist.Bernoulli(probs=jnp.broadcast_to(p, (d,))).to_event(1))
    if noise_scale is None:
        a, b = _check_noise_prior(noise_prior)
        precision = numpyro.sample("precision", dist.Gamma(a, b))
        slab, noise = s / jnp.sqrt(precision), 1.0 / jnp.sqrt(precision)
    else:
        slab, noise = s, _check_positive(noise_scale, "noise_scale", n)
    w = numpyro.sample("w", SpikeSlab(z, jnp.broadcast_to(slab, (d,))).to_event(1))
    with numpyro.plate("data", n):
        numpyro.sample("y", dist.Normal(jnp.asarray(X) @ w, noise), obs=y)


def spike_and_slab_probit(X, y=None, *, p_incl=None, slab_scale=1.0):
    """Probit classifier ``P(y_i = 1 | w) = Phi(x_i^T w)`` with a spike-and-slab prior on ``w``.

    Labels may be {0, 1}, {-1, +1} or bool; site ``y`` holds them as 0/1. ``p_incl=None`` is the
    thesis default 32 / d (capped at 0.5 so that small problems do not default to including nearly
    every feature); ``slab_scale`` is the slab standard deviation. Either may be a prior, as for
    `spike_and_slab_regression`: ``inference.mcmc`` samples it; VI and the probit EPs refuse it.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(60, 20)); y = X[:, 0] > 0
        >>> post = inference.ep(probmodels.spike_and_slab_probit, X, y, num_samples=50, progress=False)
        >>> int(np.argmax(post.approximation["inclusion_probability"]))
        0
    """
    X, y = _check_design(X, y, labels=True)
    n, d = np.shape(X)
    p = _prob_or_prior(default_p_incl(d) if p_incl is None else p_incl, d, "spike_and_slab_probit")
    s = _positive_or_prior(slab_scale, "slab_scale", d, "spike_and_slab_probit")
    z = numpyro.sample("z", dist.Bernoulli(probs=jnp.broadcast_to(p, (d,))).to_event(1))
    w = numpyro.sample("w", SpikeSlab(z, jnp.broadcast_to(s, (d,))).to_event(1))
    f = jnp.asarray(X) @ w
    with numpyro.plate("data", n):
        numpyro.sample("y", dist.Bernoulli(logits=probit_logits(f)), obs=y)  # Phi(f), stable in both tails


def default_p_incl(d: int) -> float:
    """The thesis prior inclusion probability 32 / d, capped at 0.5."""
    return min(32.0 / d, 0.5)


def standardize(X_train, X_test=None):
    """Centre and scale columns by the training mean and standard deviation.

    Constant training columns become exactly 0 (train and test) instead of dividing by zero: such a
    gene carries no information and its inclusion probability stays at the prior.

    >>> Z, _ = standardize(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> Z.tolist()
    [[-1.0, 0.0], [1.0, 0.0]]
    """
    X_train = np.asarray(X_train, dtype=float)
    _check_finite_matrix(X_train, "X_train")
    mean, sd = X_train.mean(0), X_train.std(0)
    const = sd <= 1e-12 * np.maximum(1.0, np.abs(mean))
    sd = np.where(const, 1.0, sd)
    scale = lambda A: np.where(const, 0.0, (A - mean) / sd)  # noqa: E731
    if X_test is None:
        return scale(X_train), None
    X_test = np.asarray(X_test, dtype=float)
    _check_finite_matrix(X_test, "X_test")
    if X_test.shape[1:] != X_train.shape[1:]:
        raise ValueError(f"X_test: needs {X_train.shape[1]} columns like X_train, got shape {X_test.shape}")
    return scale(X_train), scale(X_test)


# --------------------------------------------------------------------------- input checks
def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_finite_matrix(X, name):
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name}: needs a non-empty 2-D array (n, d), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[0]
        raise ValueError(f"{name}: contains NaN or inf (first at row {bad[0]}, column {bad[1]})")


def _check_design(X, y, labels):
    """Checked ``(X, y)``; labels become {0, 1}. Traced values (engines pass the data as arguments
    of their compiled programs) are not checked, but traced labels are still mapped to {0, 1}, by
    ``y > 0`` (right for each accepted encoding), so the traced model has the log joint of the
    concrete one and its programs are kept for new data of the same shapes."""
    if _concrete(X):
        try:
            Xa = np.asarray(X, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"X: needs a numeric array, got {type(X).__name__}") from exc
        _check_finite_matrix(Xa, "X")
    else:
        Xa = X
    if y is None:
        return Xa, y
    if not _concrete(y):
        return Xa, (y > 0).astype(jnp.int32) if labels else y
    ya = np.asarray(y)
    if ya.ndim != 1 or ya.shape[0] != Xa.shape[0]:
        raise ValueError(f"y: needs shape ({Xa.shape[0]},) to match X's rows, got {ya.shape}")
    if labels:
        return Xa, _labels01(ya)
    try:
        ya = ya.astype(float)
    except (TypeError, ValueError) as exc:
        raise TypeError("y: needs numeric responses") from exc
    if not np.all(np.isfinite(ya)):
        raise ValueError(f"y: contains NaN or inf (first at index {int(np.argmax(~np.isfinite(ya)))})")
    return Xa, ya


def _labels01(y):
    if y.dtype == bool:
        return y.astype(np.int32)
    if not np.issubdtype(y.dtype, np.number):
        raise ValueError(f"y: labels must be {{0, 1}}, {{-1, +1}} or bool, got dtype {y.dtype}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y: labels contain NaN or inf")
    values = set(np.unique(y).tolist())
    if values <= {0, 1}:
        return y.astype(np.int32)
    if values <= {-1, 1}:
        return (y > 0).astype(np.int32)
    raise ValueError(f"y: labels must be {{0, 1}}, {{-1, +1}} or bool, got values {sorted(values)[:5]}")


def _prob_or_prior(p, d, model):
    """An inclusion probability (`_check_prob`), or a prior on it, sampled as site ``p_incl``: a
    proper continuous distribution on (0, 1) drawing a scalar."""
    from probmodels.kernels import _is_prior

    if not _is_prior(p):
        return _check_prob(p, d)
    label = f"{model}: the prior of p_incl ({type(p).__name__})"
    support = p.support
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    if isinstance(p, dist.ImproperUniform) or support.is_discrete:
        raise ValueError(f"{label} must be a proper continuous distribution on (0, 1), e.g. dist.Beta(1.0, 9.0)")
    lower, upper = getattr(support, "lower_bound", None), getattr(support, "upper_bound", None)
    if lower is None or upper is None or not (_concrete(lower) and _concrete(upper)) \
            or not (np.all(np.asarray(lower) >= 0) and np.all(np.asarray(upper) <= 1)):
        raise ValueError(f"{label} has support {support}: p_incl must lie in (0, 1); use e.g. dist.Beta(1.0, 9.0)")
    if tuple(p.batch_shape) + tuple(p.event_shape):
        raise ValueError(f"{label} must draw a scalar, got shape {tuple(p.batch_shape) + tuple(p.event_shape)}")
    return numpyro.sample("p_incl", p)


def _positive_or_prior(v, name, size, model):
    """A positive scale (`_check_positive`), or a prior on it sampled as site ``name``."""
    from probmodels import _checks
    from probmodels.kernels import _is_prior

    return _checks.positive_or_prior(v, name, model) if _is_prior(v) else _check_positive(v, name, size)


def _check_prob(p, d):
    if not _concrete(p):
        return p
    try:
        pa = np.asarray(p, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"p_incl: needs a number or array of numbers in (0, 1), got {p!r}") from exc
    if pa.ndim > 1 or (pa.ndim == 1 and pa.shape[0] != d):
        raise ValueError(f"p_incl: needs a scalar or shape ({d},), got shape {pa.shape}")
    if not np.all((pa > 0) & (pa < 1)):
        raise ValueError(f"p_incl: inclusion probabilities must lie strictly inside (0, 1), got {p!r}")
    return pa


def _check_positive(v, name, size):
    if not _concrete(v):
        return v
    try:
        va = np.asarray(v, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: needs a positive number or array of numbers, got {v!r}") from exc
    if va.ndim > 1 or (va.ndim == 1 and va.shape[0] != size):
        raise ValueError(f"{name}: needs a scalar or shape ({size},), got shape {va.shape}")
    if not np.all(np.isfinite(va) & (va > 0)):
        raise ValueError(f"{name}: must be positive and finite, got {v!r}")
    return va


def _check_noise_prior(noise_prior):
    if not _concrete(noise_prior):
        return noise_prior
    try:
        a, b = (float(v) for v in noise_prior)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"noise_prior: needs (shape, rate), got {noise_prior!r}") from exc
    if not (np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0):
        raise ValueError(f"noise_prior: shape and rate must be positive, got {noise_prior!r}")
    return a, b



# --------------------------------------------------------------------------- demo
DEMO_GENES = 1000  # leukemia genes kept for the demo (highest variance, label-free): each fit < ~20 s


def demo_cases():
    """Cases for ``probmodels demo`` (a list of :class:`probmodels.demo.Case`):

    * ``spike_and_slab_regression``: simulated, n = 50, d = 10 correlated features (AR(1), 0.5),
      3 true weights, Gamma noise prior; scored by the largest error of the inclusion
      probabilities against exact enumeration of the 2^10 models.
    * ``spike_and_slab_probit_leukemia``: the leukemia set (Dudoit preprocessing) reduced to its
      ``DEMO_GENES`` highest-variance genes (a filter that never looks at the labels), one random
      2/3 - 1/3 split with genes standardised on the training part; scored by test accuracy.
    """
    from probmodels import datasets
    from probmodels.demo import Case

    rng = np.random.default_rng(0)
    corr = 0.5 ** np.abs(np.subtract.outer(np.arange(10), np.arange(10)))
    X = rng.normal(size=(50, 10)) @ np.linalg.cholesky(corr).T
    y = X @ np.array([1.0, 0, 0, -0.8, 0.6, 0, 0, 0, 0, 0]) + rng.normal(size=50)
    exact = {}

    def exact_score(post):
        if not exact:
            from inference.spikeslab.exact import exact_posterior

            ex = exact_posterior(spike_and_slab_regression, X, y, p_incl=0.3)
            exact.update(incl=np.asarray(ex.inclusion), log_z=float(ex.log_evidence))
        incl = np.asarray(post.approximation["inclusion_probability"])
        err = float(np.max(np.abs(incl - exact["incl"])))
        return "max |P(z=1) - exact|", err, f"{err:.3f} (exact log Z {exact['log_z']:.2f})"

    Xl, yl = datasets.load_microarray("leukemia")
    keep = np.sort(np.argsort(-Xl.var(axis=0), kind="stable")[:DEMO_GENES])
    sp = datasets.split(Xl[:, keep], yl, 2 / 3, seed=0)

    def leukemia_score(post):
        p1 = np.asarray(post.predict(sp.X_test)["y_mean"]).mean(axis=(0, 1))
        acc = float(np.mean((p1 > 0.5) == (sp.y_test > 0)))
        return "test accuracy", acc, f"{100 * acc:.1f}% ({len(sp.y_test)} test patients)"

    fast_mcmc = {"mcmc": {"num_samples": 500, "num_warmup": 200, "num_chains": 2}}
    return [
        Case("spike_and_slab_regression", spike_and_slab_regression, (X, y), {"p_incl": 0.3},
             ("mcmc", "vi", "ep"), exact_score, {}, _inclusion_plot(None)),
        Case("spike_and_slab_probit_leukemia", spike_and_slab_probit, (sp.X_train, sp.y_train), {},
             ("mcmc", "vi", "ep"), leukemia_score, fast_mcmc, _inclusion_plot(30)),
    ]


def _inclusion_plot(top):
    """Demo picture: posterior inclusion probability per feature (the ``top`` largest if given)."""

    def plot(post, path_base):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        p = np.asarray(post.approximation["inclusion_probability"])
        idx = np.arange(p.size) if top is None else np.argsort(-p)[:top]
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.bar(np.arange(idx.size), p[idx])
        ax.set_xticks(np.arange(idx.size), [str(i) for i in idx], rotation=90, fontsize=6)
        ax.set(ylabel="P(included)", xlabel="feature" if top is None else f"top {top} features (column index)",
               title=f"posterior inclusion probabilities ({post.engine})", ylim=(0, 1))
        path = f"{path_base}_inclusion.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return [path]

    return plot
