"""Latent Gaussian-process models: GP regression, the probit/logit GP classifier and the Bayes machine.

Each puts a GP prior on the latent values at the training inputs,
``f ~ MultivariateNormal(0, K + jitter I)`` with ``K = kernel(X, X)`` (default ``RBF()``) and the
smallest jitter that makes ``K`` numerically positive definite (`probmodels.kernels.gram`; at least
``1e-6`` x mean diagonal in float64). Labels are accepted as {0, 1}, {-1, +1} or bool and observed
(and predicted, `Posterior.predict`) as {0, 1}.

- ``gp_regression``: ``y_i ~ Normal(f_i, noise^2)``; closed-form posterior and evidence in
  `probmodels.conjugate.gp_regression_posterior`. Sites ``f``, ``y``.
- ``gp_classifier``: ``y_i ~ Bernoulli(Phi(f_i))`` (probit) or ``Bernoulli(sigmoid(f_i))`` (logit).
  Sites ``f``, ``y``.
- ``bayes_machine``: ``P(y_i | f_i, eps) = eps + (1 - 2 eps) step(t_i f_i)`` (``t_i = 2 y_i - 1``),
  ``eps ~ Beta(noise_prior)`` the label-noise rate (Hernández-Lobato 2009, ch. 6). Sites ``f``,
  ``eps``, ``y`` (`inference.distributions.NoisyStep`). EP runs its own kernel-form algorithm
  (`inference.ep.bayes_machine`), MCMC elliptical slice sampling plus a Gibbs step for ``eps``.

Hyperparameters with priors: a kernel parameter given as a NumPyro distribution
(``RBF(lengthscale=dist.LogNormal(0.0, 1.0))``, `probmodels.kernels`) and GP regression's ``noise``
given as one become sample sites (``lengthscale``, ``variance``, ``noise``, ...) drawn before
``f``: every engine infers them with the rest, and `inference.laplace` (``hyper="map"`` or
``"integrate"``) optimises or integrates over them with ``f`` marginalised.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.gp import bayes_machine
    >>> X = np.random.default_rng(0).uniform(-1, 1, (30, 2)); y = X[:, 0] > 0
    >>> post = inference.ep(bayes_machine, X, y, num_samples=50, progress=False)
    >>> post.samples["eps"].shape
    (1, 50)
"""

from __future__ import annotations

import types
import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from inference.distributions import NoisyStep
from probmodels import _checks
from probmodels.kernels import RBF, Kernel, _check_positive, _is_prior, gram, sample_hyperparameters
from probmodels.regression import probit_logits

__all__ = ["gp_regression", "gp_classifier", "bayes_machine", "latent_predictive", "demo_cases"]

LINKS = ("probit", "logit")


def _inputs(X, y, kernel):
    X = _checks.matrix(X, "X", allow_1d=True)
    n = X.shape[0]
    y = _checks.binary_labels(y, n, "y")
    return X, n, y, _kernel(kernel)


def _kernel(kernel):
    if kernel is None:
        return RBF()
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a probmodels.kernels.Kernel (e.g. RBF()), got {type(kernel).__name__}")
    return kernel


def _latent(X, n, kernel):
    kernel = sample_hyperparameters(kernel)  # priors given for its parameters become sites
    K, jitter = gram(kernel, X, name=f"kernel matrix {kernel!r} at X")
    # gram has checked K + jitter is positive definite (naming the kernel) when K is concrete;
    # NumPyro's own check would compile an eigendecomposition at every new shape. The jitter
    # added is kept in the site's infer dict, where engines report it (EP: diagnostics).
    infer = {} if _checks.is_traced(jitter) else {"kernel_jitter": float(jitter)}
    return numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(n, dtype=K.dtype), covariance_matrix=K,
                                                       validate_args=False), infer=infer)


def gp_regression(X, y=None, *, kernel=None, noise=1.0):
    """GP regression: ``f ~ GP(0, kernel)`` at the rows of ``X``, ``y_i ~ Normal(f_i, noise^2)``.

    ``noise`` is the noise standard deviation: a positive number, or a prior on it (a NumPyro
    distribution on (0, inf), e.g. ``dist.HalfNormal(1.0)``), then sampled as site ``noise``.
    Kernel parameters may be priors too (`probmodels.kernels`). The exact posterior of ``f`` and
    the log evidence at fixed values: `probmodels.conjugate.gp_regression_posterior`.

    Example:
        >>> import numpy as np, inference
        >>> from probmodels import gp_regression, conjugate
        >>> from probmodels.kernels import RBF
        >>> X = np.linspace(-1, 1, 20)[:, None]; y = np.sin(3 * X[:, 0])
        >>> post = inference.laplace(gp_regression, X, y, kernel=RBF(0.5), noise=0.1, num_samples=50)
        >>> exact = conjugate.gp_regression_posterior(X, y, kernel=RBF(0.5), noise=0.1)
        >>> bool(abs(post.log_evidence - exact.log_evidence) < 1e-8)
        True
    """
    X = _checks.matrix(X, "X", allow_1d=True)
    n = X.shape[0]
    y = _checks.vector(y, n, "y")
    kernel = _kernel(kernel)
    _check_positive(noise, "noise", "gp_regression")
    f = _latent(X, n, kernel)
    scale = numpyro.sample("noise", noise) if _is_prior(noise) else noise
    numpyro.sample("y", dist.Normal(f, scale), obs=y)


def gp_classifier(X, y=None, *, kernel=None, link="probit"):
    """GP classifier: ``f ~ GP(0, kernel)`` at the rows of ``X``, ``y_i ~ Bernoulli(link^-1(f_i))``.

    ``link`` is ``"probit"`` (``Phi``; EP moments in closed form) or ``"logit"`` (sigmoid).
    Kernel parameters given as priors (``kernel=RBF(lengthscale=dist.LogNormal(0.0, 1.0))``)
    are sample sites, learnt with ``inference.laplace(..., hyper="map")`` or integrated over
    with ``hyper="integrate"``.

    Example:
        >>> import numpy as np, inference
        >>> from probmodels import gp_classifier
        >>> from probmodels.kernels import RBF
        >>> X = np.random.default_rng(0).uniform(-1, 1, (30, 1)); y = X[:, 0] > 0
        >>> post = inference.ep(gp_classifier, X, y, kernel=RBF(0.5), num_samples=50, progress=False)
        >>> post.samples["f"].shape
        (1, 50, 30)
    """
    X, n, y, kernel = _inputs(X, y, kernel)
    if link not in LINKS:
        raise ValueError(f"link must be one of {LINKS}, got {link!r}")
    f = _latent(X, n, kernel)
    logits = probit_logits(f) if link == "probit" else f
    numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)


def bayes_machine(X, y=None, *, kernel=None, noise_prior=(1.0, 10.0)):
    """The Bayes machine: ``f ~ GP(0, kernel)``, ``eps ~ Beta(noise_prior)``,
    ``P(y_i = 1 | f_i, eps) = eps + (1 - 2 eps) step(f_i)`` (each label flipped with probability eps).

    ``noise_prior = (a0, b0)``, both positive; the default Beta(1, 10) has mean 1/11.

    Example:
        >>> import numpy as np, inference
        >>> from probmodels import bayes_machine
        >>> X = np.random.default_rng(0).uniform(-1, 1, (30, 2)); y = X[:, 0] > 0
        >>> post = inference.ep(bayes_machine, X, y, num_samples=50, progress=False)
        >>> bool(0 < post.mean("eps") < 0.5)   # the learnt label-flip rate
        True
    """
    X, n, y, kernel = _inputs(X, y, kernel)
    a0, b0 = _checks.positive_pair(noise_prior, "noise_prior")
    if a0 >= b0:  # (eps, f) and (1 - eps, -f) explain the labels equally well
        warnings.warn(
            f"noise_prior=({a0:g}, {b0:g}) has mean {a0 / (a0 + b0):.2f} >= 0.5: a flip rate eps and 1 - eps "
            f"(with the latent's sign reversed) fit the labels equally well, so the posterior of eps is not "
            f"pulled below 0.5 (EP stops at E[eps] = 0.5 under Beta(1, 1)); use a prior with mean < 0.5, "
            f"e.g. the default (1, 10)", UserWarning, stacklevel=2)
    f = _latent(X, n, kernel)
    eps = numpyro.sample("eps", dist.Beta(a0, b0))
    numpyro.sample("y", NoisyStep(f, eps), obs=y)


# --------------------------------------------------------------------------- prediction, demo


def latent_predictive(f_draws, X_train, X_new, kernel):
    """GP conditional at new inputs for each posterior draw of the training latents.

    ``f_draws`` (s, n) draws of ``f`` at ``X_train`` (any engine's ``post.samples["f"]`` reshaped);
    returns ``(mean (s, m), var (m,))`` of ``f(X_new) | f``: ``K*n K^-1 f`` and
    ``k** - diag(K*n K^-1 Kn*)`` with the same jitter as the model. Engine-independent, so every
    engine's classifier is scored the same way.
    """
    X_train = _checks.matrix(X_train, "X_train", allow_1d=True)
    X_new = _checks.matrix(X_new, "X_new", allow_1d=True)
    if X_new.shape[1] != X_train.shape[1]:
        raise ValueError(f"X_new must have {X_train.shape[1]} columns like X_train, got {X_new.shape[1]}")
    f_draws = np.asarray(f_draws, dtype=float).reshape(-1, X_train.shape[0])
    K, _ = gram(kernel, X_train)
    K_cross = np.asarray(kernel(X_new, X_train))
    import scipy.linalg

    cho = scipy.linalg.cho_factor(np.asarray(K), lower=True)
    A = scipy.linalg.cho_solve(cho, K_cross.T)  # (n, m)
    var = np.asarray(kernel.diag(X_new)) - np.sum(K_cross * A.T, axis=1)
    return f_draws @ A, np.maximum(var, 1e-12)


def _boundary_plot(split, kernel):
    """Demo picture: predictive P(y=+1) over the 2-D input square with the 0.5 contour (the
    decision boundary), training points, flipped labels ringed."""

    def plot(post, path_base):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from scipy.stats import norm

        g = np.linspace(-1, 1, 41)
        G = np.array([[a, b] for b in g for a in g])
        mean, var = latent_predictive(post.samples["f"], split.X_train, G, kernel)
        eps = np.asarray(post.samples["eps"]).reshape(-1, 1)
        p1 = np.mean(eps + (1 - 2 * eps) * norm.cdf(mean / np.sqrt(var)), axis=0).reshape(41, 41)
        fig, ax = plt.subplots(figsize=(5, 4.4))
        im = ax.contourf(g, g, p1, levels=np.linspace(0, 1, 11), cmap="coolwarm")
        ax.contour(g, g, p1, levels=[0.5], colors="k")
        Xt, yt = split.X_train, split.y_train
        ax.scatter(*Xt[yt > 0].T, marker="+", c="k", s=20)
        ax.scatter(*Xt[yt <= 0].T, marker="o", facecolors="none", edgecolors="k", s=14)
        ax.set(aspect="equal", title=f"Bayes machine ({post.engine}): P(y=+1), E[eps] {eps.mean():.3f}")
        fig.colorbar(im, ax=ax)
        path = f"{path_base}_boundary.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return [path]

    return plot


def _gp_case(name, model, split, kernel, engines, options, plot=None, **model_kw):
    from scipy.stats import norm

    def score(post):
        mean, var = latent_predictive(post.samples["f"], split.X_train, split.X_test, kernel)
        if "eps" in post.samples:  # Bayes machine: E[eps + (1 - 2 eps) step(f*)] over draws
            eps = np.asarray(post.samples["eps"]).reshape(-1, 1)
            p1 = np.mean(eps + (1 - 2 * eps) * norm.cdf(mean / np.sqrt(var)), axis=0)
        elif model_kw.get("link", "probit") == "probit":
            p1 = np.mean(norm.cdf(mean / np.sqrt(1.0 + var)), axis=0)
        else:  # logit: average the sigmoid over f* ~ N(mean, var) by 20-point Gauss-Hermite
            x, w = np.polynomial.hermite_e.hermegauss(20)
            f = mean[..., None] + np.sqrt(var)[:, None] * x
            p1 = np.mean((1.0 / (1.0 + np.exp(-f))) @ (w / w.sum()), axis=0)
        acc = float(np.mean((p1 > 0.5) == (split.y_test > 0)))
        return "test accuracy", acc, f"{100 * acc:.1f}% ({len(split.y_test)} test points)"

    from probmodels.demo import Case

    return Case(name, model, (split.X_train, split.y_train), {"kernel": kernel, **model_kw}, engines, score,
                options, plot)


def demo_cases():
    """Demo cases on the crabs data (66 training points as in the thesis, 134 test points,
    standardised features), kernel ``RBF(lengthscale=2 sqrt(6), variance=100)``: the largest EP
    evidence of the probit GP classifier over lengthscales sqrt(6) x {1/4, 1/2, 1, 2} and
    variances {1, 10, 100} (crabs is nearly linearly separable, so wide kernels win; the Bayes
    machine's step likelihood ignores the variance). The probit GP classifier runs under every
    engine: NUTS samples f in whitened coordinates (`inference.whiten`; 5-6 s, bulk ESS > 3000,
    where on f as written it took minutes); VI fits the full-rank Gaussian at the ELBO optimum by
    natural-gradient steps (`inference.latent_vi`: ELBO -25.33 against EP's log Z -25.22, 97.8%
    test accuracy; whitened SVI: mean-field -31.8, Pareto k 1.27, converged=False, full-rank -26.0;
    full-rank SVI on f as written stopped at ELBO -90, 58%); the Bayes machine under elliptical
    slice sampling + Gibbs and EP.
    Each fit takes seconds after compilation."""
    from probmodels import datasets

    X, y = datasets.load("crabs")
    split = datasets.split(X, y, train_size=66, seed=0)
    kernel = RBF(lengthscale=2.0 * float(np.sqrt(X.shape[1])), variance=100.0)
    mcmc = {"num_samples": 1000, "num_warmup": 500, "num_chains": 2}
    # the thesis' circle problem (2-D, so the decision boundary can be drawn): 100 training points,
    # 10% of the labels flipped, 1000 test points
    rng = np.random.default_rng(0)
    Xc = rng.uniform(-1, 1, (1100, 2))
    yc = np.where((Xc ** 2).sum(1) >= 0.5, 1, -1)
    yc[:100] = np.where(rng.uniform(size=100) < 0.1, -yc[:100], yc[:100])
    circle = types.SimpleNamespace(X_train=Xc[:100], y_train=yc[:100], X_test=Xc[100:], y_test=yc[100:])
    return [
        _gp_case("gp_classifier", gp_classifier, split, kernel, ("mcmc", "vi", "laplace", "ep"), {"ep": {"progress": False}}),
        _gp_case("bayes_machine", bayes_machine, split, kernel, ("mcmc", "ep"), {"mcmc": mcmc}),
        _gp_case("bayes_machine_circle", bayes_machine, circle, RBF(1.0), ("mcmc", "ep"),
                 {"mcmc": {"num_samples": 2000, "num_warmup": 1000, "num_chains": 2}},
                 plot=_boundary_plot(circle, RBF(1.0))),
    ]
