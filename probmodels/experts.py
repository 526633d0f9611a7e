"""Bayesian mixture of experts (Jordan & Jacobs 1994; Bishop 2006, sec. 14.5.3; Alpaydin 12.8):
a softmax gating network chooses, for each input, among local linear-Gaussian or logistic experts.

    z_i | x_i ~ Categorical(softmax(gating_bias + gating @ x_i))            (summed out)
    y_i | z_i = k ~ N(intercept_k + coef_k . x_i, scales_k^2)               expert="linear"
    y_i | z_i = k ~ Bernoulli(sigmoid(intercept_k + coef_k . x_i))          expert="logistic"

Priors (independent Gaussians in units of the data, so rescaling x or y does not change the fit;
``m``, ``s`` are the columns' means and standard deviations, ``c = 1 + sum_j (m_j / s_j)^2``):
``gating_kj ~ N(0, (gating_scale / s_j)^2)``, ``gating_bias_k ~ N(0, gating_scale^2 c)``;
linear: ``coef_kj ~ N(0, (prior_scale sd(y) / s_j)^2)``, ``intercept_k ~ N(mean(y), (prior_scale
sd(y))^2 c)``, ``scales_k^2 ~ InverseGamma(noise_prior)``, default ``(2, var(y) / 10)``; logistic:
``coef_kj ~ N(0, (prior_scale / s_j)^2)``, ``intercept_k ~ N(0, prior_scale^2 c)``. Defaults
``prior_scale=2.5``, ``gating_scale=5`` (a boundary can be sharp: a logit slope of 5 per sd of x
is one prior sd). The likelihood itself uses the raw inputs, so ``post.predict(X_new)`` is exact.

The assignment is summed out (``logsumexp``; one log-likelihood term per row, LOO works) and
recovered per draw as ``z`` (`inference.latent.recovered`). Every engine (NUTS, autoguide VI,
Laplace; EP does not apply) starts from `start`: MAP-EM under these priors (`inference.moe_em`)
from a k-means start on a new Bayesian bootstrap per chain, experts sorted by the mean of the first
input over their region, so chains start with one labelling and never where experts coincide. Each
posterior carries ``diagnostics["collapsed"]`` (experts within half a noise sd of each other over
the data, or a log likelihood short of the start: ``converged=False`` and a warning, as for
mixtures) and ``diagnostics["experts"]`` (label switching, occupied experts, mean gate weights).
`inference.moe_em.em` is the maximum-likelihood point-estimate baseline.

Example:
    >>> import numpy as np, inference
    >>> from probmodels.experts import mixture_of_experts, piecewise_linear
    >>> X, y = piecewise_linear(200, seed=0)
    >>> post = inference.laplace(mixture_of_experts, X, y, num_samples=50)
    >>> np.round(post.mean("coef")[:, 0]).tolist(), post.samples["z"].shape
    ([-2.0, 1.0], (1, 50, 200))
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from inference import mixture_diagnostics as md
from inference import moe_em
from inference.latent import Start, bootstrap_weights, recovered
from probmodels import _checks

EXPERTS = moe_em.EXPERTS
GATINGS = ("softmax",)
START_ITERATIONS = 50  # MAP-EM iterations of the data-driven start


# ----------------------------------------------------------------------------- inputs and priors
def _choice(value, options, name):
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def _targets(y, n, expert):
    """Checked targets: NumPy when concrete (float, or int {0, 1} labels for logistic experts)."""
    if expert == "logistic":
        return _checks.binary_labels(y, n, "y")
    return _checks.vector(y, n, "y")


def priors(X, y, expert, prior_scale, gating_scale, noise_prior) -> moe_em.Penalty:
    """The model's Gaussian priors as `inference.moe_em.Penalty` precisions (and the noise
    prior): what `start` runs MAP-EM with. See the module docstring. NumPy for concrete data (no
    eager JAX dispatch, which compiles each operation in a new process), jnp when traced."""
    traced = _checks.is_traced(X) or _checks.is_traced(y) or _checks.is_traced(prior_scale) or _checks.is_traced(gating_scale)
    xp = jnp if traced else np
    mx, sx = xp.mean(X, 0), xp.std(X, 0)
    sx = xp.where(sx > 0, sx, 1.0)
    c = 1.0 + xp.sum((mx / sx) ** 2)
    gate_sd = xp.concatenate([xp.sqrt(c)[None], 1.0 / sx]) * gating_scale
    if expert == "linear":
        my, sy = (xp.zeros(()), xp.ones(())) if y is None else (xp.mean(y), xp.std(y))
        sy = xp.where(sy > 0, sy, 1.0)
        a, b = (2.0, 0.1 * sy**2) if noise_prior is None else noise_prior
    else:
        my, sy, a, b = xp.zeros(()), xp.ones(()), 0.0, 0.0
    coef_sd = xp.concatenate([xp.sqrt(c)[None], 1.0 / sx]) * prior_scale * sy
    mean = xp.concatenate([xp.reshape(my, (1,)), xp.zeros(coef_sd.shape[0] - 1)])
    dtype = jnp.result_type(float)
    f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    return moe_em.Penalty(f(gate_sd**-2), f(mean), f(coef_sd**-2), f(a), f(b))


# ----------------------------------------------------------------------------- start
@functools.partial(jax.jit, static_argnames=("num_experts", "expert"))
def start(rng_key, X, y, penalty: moe_em.Penalty, num_experts: int, expert: str) -> dict:
    """A data-driven start for every latent site: `START_ITERATIONS` of MAP-EM under the model's
    priors from a k-means start, on a Bayesian bootstrap of the rows (each key another start),
    experts sorted by the mean of the first input over their region."""
    key_w, key_k = jax.random.split(rng_key)
    w = bootstrap_weights(key_w, jnp.ones(y.shape, bool))
    y = jnp.asarray(y, X.dtype)
    params, _, _, _ = moe_em.fit(key_k, X, y, w, num_experts, expert, penalty, START_ITERATIONS, 0.0)
    out = params._asdict()
    if expert == "logistic":
        del out["scales"]
    return out


def _infer(X, y, penalty, k, expert):
    if y is None:
        return lambda name: {}
    memo = {}

    def value(name, rng_key):
        if "start" not in memo:
            memo["start"] = start(rng_key, X, y, penalty, k, expert)
        return memo["start"][name]

    return lambda name: {"init": Start(functools.partial(value, name), f"probmodels.experts.start {name}")}


# ----------------------------------------------------------------------------- model
def mixture_of_experts(X, y=None, *, num_experts=2, expert="linear", gating="softmax", prior_scale=2.5,
                       gating_scale=5.0, noise_prior=None):
    """Bayesian mixture of experts; sites ``gating_bias`` (K,), ``gating`` (K, d), ``intercept``
    (K,), ``coef`` (K, d), ``scales`` (K,, linear experts), ``y``, recovered ``z`` (n,).

    Args:
        X: (n, d) inputs, or (n,) for one input.
        y: (n,) targets (``"logistic"``: labels {0, 1}, {-1, +1} or bool); None simulates.
        num_experts: K >= 1.
        expert: ``"linear"`` (Gaussian noise) or ``"logistic"``.
        gating: ``"softmax"`` (the only one).
        prior_scale, gating_scale, noise_prior: the priors (module docstring).

    Example:
        >>> import numpy as np, inference
        >>> from probmodels.experts import gating_boundary, mixture_of_experts, piecewise_linear
        >>> X, y = piecewise_linear(200, seed=0)
        >>> post = inference.laplace(mixture_of_experts, X, y, num_samples=50)
        >>> bool(abs(np.median(gating_boundary(post))) < 0.1)   # the true break is at x = 0
        True
    """
    k = _checks.positive_int(num_experts, "num_experts")
    expert = _choice(expert, EXPERTS, "expert")
    _choice(gating, GATINGS, "gating")
    X = _checks.matrix(X, "X", allow_1d=True)
    n, d = X.shape
    y = _targets(y, n, expert)
    prior_scale = _checks.positive(prior_scale, "prior_scale")
    gating_scale = _checks.positive(gating_scale, "gating_scale")
    if noise_prior is not None:
        if expert != "linear":
            raise ValueError("noise_prior applies to linear experts only")
        noise_prior = _checks.positive_pair(noise_prior, "noise_prior")
    penalty = priors(X, y, expert, prior_scale, gating_scale, noise_prior)
    X = X if _checks.is_traced(X) else jnp.asarray(X, jnp.result_type(float))
    infer = _infer(X, y, penalty, k, expert)
    gate_sd, coef_sd = penalty.gating_precision**-0.5, penalty.coef_precision**-0.5
    gating_bias = numpyro.sample("gating_bias", dist.Normal(jnp.zeros(k, X.dtype), gate_sd[0]).to_event(1),
                                 infer=infer("gating_bias"))
    gating_w = numpyro.sample("gating", dist.Normal(jnp.zeros((k, d), X.dtype), gate_sd[1:]).to_event(2),
                              infer=infer("gating"))
    intercept = numpyro.sample("intercept", dist.Normal(jnp.full(k, penalty.coef_mean[0]), coef_sd[0]).to_event(1),
                               infer=infer("intercept"))
    coef = numpyro.sample("coef", dist.Normal(jnp.zeros((k, d), X.dtype), coef_sd[1:]).to_event(2), infer=infer("coef"))
    eta = intercept + X @ coef.T  # (n, K)
    if expert == "linear":
        var = dist.InverseGamma(penalty.noise_shape, penalty.noise_scale)
        scales = numpyro.sample("scales", dist.TransformedDistribution(var, dist.transforms.PowerTransform(0.5))
                                .expand([k]).to_event(1), infer=infer("scales"))
        component = dist.Normal(eta, scales)
    else:
        component = dist.Bernoulli(logits=eta)
    mix = dist.MixtureSameFamily(dist.Categorical(logits=gating_bias + X @ gating_w.T), component)
    with numpyro.plate("point", n):
        obs = numpyro.sample("y", mix, obs=y)
    if y is not None:
        recovered("z", lambda key: jax.random.categorical(key, mix.component_log_probs(obs), axis=-1))


# ----------------------------------------------------------------------------- summaries
def _model_inputs(post):
    bound = inspect.signature(mixture_of_experts).bind(*post.model_args, **post.model_kwargs)
    bound.apply_defaults()
    X = _checks.matrix(bound.arguments["X"], "X", allow_1d=True)
    return X, bound.arguments["expert"]


def _params(samples, num_draws_shape):
    s = {k: np.asarray(v, float) for k, v in samples.items()}
    k = s["intercept"].shape[-1]
    scales = s["scales"] if "scales" in s else np.ones(num_draws_shape + (k,))
    return moe_em.MoEParams(s["gating_bias"], s["gating"], s["intercept"], s["coef"], scales)


def gate_probabilities(post, X_new) -> np.ndarray:
    """Gate weights softmax(gating_bias + gating @ x) at rows of ``X_new`` per draw: (chain, draw, m, K)."""
    X_new = _checks.matrix(X_new, "X_new", allow_1d=True)
    p = _params(post.samples, post.samples["intercept"].shape[:2])
    return np.asarray(jax.nn.softmax(np.einsum("md,cskd->cskm", X_new, p.gating).swapaxes(-1, -2)
                                     + p.gating_bias[..., None, :], -1))


def gating_boundary(post, experts=(0, 1)) -> np.ndarray:
    """One input (d = 1): the x where experts ``experts`` get equal gate weight, per draw
    (chain, draw): -(b_k - b_l) / (v_k - v_l)."""
    g, b = np.asarray(post.samples["gating"]), np.asarray(post.samples["gating_bias"])
    if g.shape[-1] != 1:
        raise ValueError("gating_boundary needs one input (d = 1)")
    k, l = experts
    return -(b[..., k] - b[..., l]) / (g[..., k, 0] - g[..., l, 0])


def predictive_log_density(post, X_new, y_new) -> np.ndarray:
    """Posterior predictive log density log (1/S) sum_s p(y | x, theta_s) of each new pair, (m,)."""
    from scipy.special import logsumexp

    X_new = _checks.matrix(X_new, "X_new", allow_1d=True)
    expert = "linear" if "scales" in post.samples else "logistic"
    y_new = _targets(y_new, X_new.shape[0], expert)
    if y_new is None:
        raise ValueError("y_new is required")
    if X_new.shape[1] != post.samples["coef"].shape[-1]:
        raise ValueError(f"X_new has {X_new.shape[1]} columns, the model {post.samples['coef'].shape[-1]} inputs")
    flat = {k: np.asarray(v).reshape((-1,) + np.shape(v)[2:]) for k, v in post.samples.items()
            if k in moe_em.MoEParams._fields}
    params = _params(flat, (next(iter(flat.values())).shape[0],))
    dtype = jnp.result_type(float)
    ll = np.asarray(_log_density_per_draw(jax.tree.map(lambda v: jnp.asarray(v, dtype), params),
                                          jnp.asarray(X_new, dtype), jnp.asarray(y_new, dtype), expert))
    return logsumexp(ll, axis=0) - np.log(ll.shape[0])


@functools.partial(jax.jit, static_argnames=("expert",))
def _log_density_per_draw(params, X, y, expert):
    """log p(y_i | x_i, theta_s): (draws, m)."""
    return jax.vmap(lambda p: jax.scipy.special.logsumexp(moe_em.joint_log_terms(p, X, y, expert), -1))(params)


MAX_ROWS = 500  # expert distances are averaged over at most this many training rows


def expert_distances(post) -> np.ndarray:
    """How far apart experts k and l are per draw, (chain, draw, K, K): the root mean square over
    the training inputs of the difference of their means in units of the pooled noise sd (linear),
    or 10 x the mean total-variation distance of their Bernoulli probabilities (logistic), so
    `inference.mixture_diagnostics.NEAR` (0.5) reads the same as for mixtures."""
    X, expert = _model_inputs(post)
    X = X[np.linspace(0, X.shape[0] - 1, min(MAX_ROWS, X.shape[0])).astype(int)]
    s = post.samples
    eta = np.asarray(s["intercept"])[..., None, :] + np.einsum("nd,cskd->csnk", X, np.asarray(s["coef"]))
    if expert == "logistic":
        p = 1.0 / (1.0 + np.exp(-eta))
        return 10.0 * np.abs(p[..., :, None] - p[..., None, :]).mean(-3)
    var = np.asarray(s["scales"]) ** 2
    pooled = 0.5 * (var[..., :, None] + var[..., None, :])
    return np.sqrt(((eta[..., :, None] - eta[..., None, :]) ** 2).mean(-3) / pooled)


def postprocess(post, warn: bool = True):
    """``post`` with ``diagnostics["collapsed"]`` (`inference.mixture_diagnostics.check_collapse`
    on `expert_distances`) and ``diagnostics["experts"]``: label switching relative to the draw
    with the highest ``lp`` (experts described by their mean and slopes at the data's centre),
    the number of occupied experts and the mean gate weights. Idempotent."""
    if "experts" in post.diagnostics or post.model is None:
        return post
    post = md.check_collapse(post, warn, distances=expert_distances(post))
    X, _ = _model_inputs(post)
    s = post.samples
    mx = X.mean(0)
    centre = np.asarray(s["intercept"]) + np.einsum("d,cskd->csk", mx, np.asarray(s["coef"]))
    feats = np.concatenate([centre[..., None], np.asarray(s["coef"]) * X.std(0)], -1)
    gates = gate_probabilities(post, X).mean(-2)  # (chain, draw, K)
    out = {"mean_gates": gates.mean((0, 1))}
    if "z" in s:
        occ = md.occupied_components(s["z"])
        out["occupied_mean"] = float(occ.mean())
    if gates.shape[-1] > 1:
        ls = md.label_switching({"locs": feats, "weights": gates}, post.sample_stats.get("lp"))
        out.update(label_switching_fraction=ls["fraction"], label_switching_within_chain=ls["within_chain"],
                   label_switching_chains_disagree=ls["chains_disagree"])
    dims = dict(post.dims)
    dims.setdefault("z", ["point"])
    dims.setdefault("y", ["point"])
    return post.replace(diagnostics={**post.diagnostics, "experts": out}, dims=dims)


mixture_of_experts.postprocess = postprocess


# ----------------------------------------------------------------------------- data and demo
def piecewise_linear(n: int, seed: int = 0, *, breaks=(0.0,), slopes=(-2.0, 1.0), intercepts=(-1.0, 1.0),
                     noise=0.3, low=-3.0, high=3.0):
    """Simulated piecewise-linear data: x ~ U(low, high) (shape (n, 1)); between consecutive
    ``breaks`` segment k has y = intercepts[k] + slopes[k] x + N(0, noise^2). Returns (X, y).

    Example:
        >>> X, y = piecewise_linear(5, seed=0)
        >>> X.shape, y.shape
        ((5, 1), (5,))
    """
    n = _checks.positive_int(n, "n")
    if not (len(slopes) == len(intercepts) == len(breaks) + 1):
        raise ValueError("slopes and intercepts need one entry per segment: len(breaks) + 1")
    rng = np.random.default_rng(seed)
    x = rng.uniform(low, high, n)
    seg = np.searchsorted(np.asarray(breaks, float), x)
    y = np.asarray(intercepts, float)[seg] + np.asarray(slopes, float)[seg] * x + noise * rng.normal(size=n)
    return x[:, None], y


def demo_cases():
    """Simulated piecewise-linear data (break at 0, noise 0.3; 200 points to fit, 200 held out),
    two linear experts under NUTS, mean-field VI and Laplace; scored by the held-out predictive log
    density per point (a single Bayesian linear model gets about -1.6)."""
    from probmodels.demo import Case

    X, y = piecewise_linear(400, seed=0)
    train, test = slice(0, 200), slice(200, 400)

    def score(post):
        lpd = float(np.mean(predictive_log_density(post, X[test], y[test])))
        edge = float(np.median(gating_boundary(post)))
        return "held-out log density / point", lpd, f"{lpd:.3f} (200 points); boundary at x = {edge:.2f} (true 0)"

    options = {"mcmc": {"num_samples": 500, "num_warmup": 500, "num_chains": 2}, "laplace": {"num_samples": 500}}
    return [Case("mixture_of_experts", mixture_of_experts, (X[train], y[train]), {"num_experts": 2},
                 ("mcmc", "vi", "laplace"), score, options)]


__all__ = ["mixture_of_experts", "piecewise_linear", "predictive_log_density", "gate_probabilities",
           "gating_boundary", "expert_distances", "postprocess", "priors", "start", "demo_cases", "EXPERTS"]
