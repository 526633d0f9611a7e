"""Bayesian hidden Markov model with the states summed out by the forward algorithm.

Priors (every default is part of the contract; "data-scaled" defaults use the observed values,
and fall back to the numbers in brackets when ``obs`` is None, e.g. for prior predictive draws):

- ``init ~ Dirichlet(init_concentration * 1_K)``, each row ``trans[i] ~ Dirichlet(trans_concentration * 1_K)``;
  both concentrations default to 1 (uniform on the simplex).
- ``"gaussian"``: ``locs[k] ~ Normal(m, s)`` with ``loc_prior=(m, s)`` defaulting to
  ``(mean(obs), 2 std(obs))`` [``(0, 1)``]; ``scales[k]**2 ~ InverseGamma(a, b)`` with
  ``scale_prior=(a, b)`` defaulting to ``(2, var(obs))`` [``(2, 1)``] (prior mean of each variance
  = the data's variance; the density vanishes at 0, which keeps states from collapsing onto a point).
- ``"poisson"``: ``rates[k] ~ Gamma(a, b)`` (shape, rate) with ``rate_prior`` defaulting to
  ``(1, 1 / mean(obs))`` [``(1, 1)``], an exponential prior with the data's mean.
- ``"categorical"``: each row ``probs[k] ~ Dirichlet(probs_concentration * 1_C)``, concentration 1.

``ordered`` (default: on for ``"gaussian"`` and ``"poisson"``) gives ``locs`` / ``rates`` the
density of K sorted iid prior draws (K! prod_k p(x_k) on x_1 < ... < x_K). That is the same
posterior as the unordered model restricted to one labelling, so chains no longer switch labels.

The observations ``obs`` are one :class:`HiddenMarkov` site whose ``log_prob`` is the forward-
algorithm marginal, one number per sequence (the pointwise log likelihood for LOO is per
sequence). The states are declared with :func:`inference.latent.recovered`: every engine draws
them per posterior draw by forward-filter backward-sample (site ``states``, shape (T,) or (B, T)).

Every engine starts from `start` (k-means of the data, a new bootstrap per chain; see
`inference.latent`), never where the states coincide, and every posterior carries
``diagnostics["collapsed"]`` (`inference.mixture_diagnostics.check_collapse`): a fit stuck short of
that start is flagged, warned about and not ``converged``.

Example:
    >>> import numpy as np, numpyro
    >>> from probmodels.hmm import hmm
    >>> x = np.r_[np.zeros(20), np.full(20, 3.0)] + 0.1 * np.random.default_rng(0).normal(size=40)
    >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(hmm, 0)).get_trace(x, num_states=2)
    >>> [n for n in tr], tr["obs"]["fn"].log_prob(x).shape
    (['init', 'trans', 'locs', 'scales', 'obs'], ())
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints

from inference import mixture_diagnostics
from inference.hmm._checks import check_positive_int, is_traced
from inference.hmm.baum_welch import EMISSIONS, check_obs, emission_log_likelihood
from inference.hmm.forward_backward import over_batch, sequence_log_likelihood
from inference.hmm.sampling import sample_pass
from inference.latent import Start, bootstrap_weights, kmeans, recovered


# ----------------------------------------------------------------------------- distributions
class OrderedIID(dist.Distribution):
    """``size`` iid draws of a scalar ``base``, sorted: density size! prod base(x_k) on the
    ordered set. Used for ``ordered=True`` emission parameters."""

    pytree_data_fields = ("base",)
    pytree_aux_fields = ("size",)

    def __init__(self, base, size: int, *, validate_args=None):
        if base.batch_shape != () or base.event_shape != ():
            raise ValueError("OrderedIID needs a scalar base distribution")
        self.base, self.size = base, int(size)
        super().__init__(batch_shape=(), event_shape=(self.size,), validate_args=validate_args)

    @property
    def support(self):
        return constraints.positive_ordered_vector if self.base.support is constraints.positive else constraints.ordered_vector

    def sample(self, key, sample_shape=()):
        return jnp.sort(self.base.sample(key, tuple(sample_shape) + (self.size,)), axis=-1)

    def log_prob(self, value):
        return jnp.sum(self.base.log_prob(value), -1) + gammaln(self.size + 1.0)


class HiddenMarkov(dist.Distribution):
    """Sequences from an HMM with the states summed out: ``log_prob`` is the forward algorithm,
    ``sample`` simulates. Event shape (T,); batch shape (B,) for a padded batch with ``mask``
    (B, T) (True inside each sequence; padded values are ignored and sampled as repeats)."""

    pytree_data_fields = ("log_init", "log_trans", "params", "step_mask")
    pytree_aux_fields = ("emission",)

    def __init__(self, log_init, log_trans, emission: str, params: dict, mask, *, validate_args=None):
        self.log_init, self.log_trans, self.emission, self.params = log_init, log_trans, emission, params
        self.step_mask = jnp.asarray(mask, bool)
        super().__init__(batch_shape=self.step_mask.shape[:-1], event_shape=self.step_mask.shape[-1:],
                         validate_args=validate_args)

    @property
    def support(self):
        base = {"gaussian": constraints.real, "poisson": constraints.nonnegative_integer}.get(
            self.emission, constraints.integer_interval(0, np.shape(self.params.get("probs", [[0]]))[-1] - 1))
        return constraints.independent(base, 1)

    def _args(self):
        return self.log_init, self.log_trans, self.params, self.step_mask

    def log_prob(self, value):
        return _log_prob(*self._args(), value, emission=self.emission)

    def sample_states(self, key, value):
        """One FFBS draw of the states given ``value`` (batch shape + (T,))."""
        return _sample_states(key, *self._args(), value, emission=self.emission)

    def sample(self, key, sample_shape=()):
        return _simulate(key, *self._args(), emission=self.emission, shape=tuple(sample_shape) + self.batch_shape)


# Jitted leaves (compiled once per shape; inlined when the model itself is traced under an engine).
def _log_emission(params, value, mask, emission):
    """log p(x_t | z_t = k), (…, T, K), with padded steps filled by the first value."""
    mask = jnp.broadcast_to(mask, jnp.shape(value))
    value = jnp.where(mask, value, value[..., :1])
    le = emission_log_likelihood(value, emission, params)
    return le.reshape((-1,) + le.shape[-2:]), mask.reshape((-1, mask.shape[-1])), mask.shape


@partial(jax.jit, static_argnames=("emission",))
def _log_prob(log_init, log_trans, params, mask, value, emission):
    le, flat_mask, shape = _log_emission(params, value, mask, emission)
    one = lambda e, m: sequence_log_likelihood(log_init, log_trans, e, m)  # noqa: E731
    return jax.vmap(one)(le, flat_mask).reshape(shape[:-1])


@partial(jax.jit, static_argnames=("emission",))
def _sample_states(key, log_init, log_trans, params, mask, value, emission):
    le, flat_mask, shape = _log_emission(params, value, mask, emission)
    one = lambda k, e, m: sample_pass(k, log_init, log_trans, e, m, 1)[0]  # noqa: E731
    return over_batch(one, jax.random.split(key, le.shape[0]), le, flat_mask).reshape(shape)


@partial(jax.jit, static_argnames=("emission", "shape"))
def _simulate(key, log_init, log_trans, params, mask, emission, shape):
    num_steps = mask.shape[-1]
    key_z, key_x = jax.random.split(key)
    z0 = jax.random.categorical(jax.random.fold_in(key_z, 0), log_init, shape=shape)

    def step(z, inputs):
        key_t, keep = inputs
        z_new = jnp.where(keep, jax.random.categorical(key_t, log_trans[z]), z)
        return z_new, z_new

    keep = jnp.moveaxis(jnp.broadcast_to(mask, shape + (num_steps,)), -1, 0)[1:]
    _, zs = jax.lax.scan(step, z0, (jax.random.split(key_z, num_steps)[1:], keep))
    z = jnp.moveaxis(jnp.concatenate([z0[None], zs]), 0, -1)  # shape + (T,)
    if emission == "gaussian":
        return params["locs"][z] + params["scales"][z] * jax.random.normal(key_x, z.shape)
    if emission == "poisson":
        return jax.random.poisson(key_x, params["rates"][z]).astype(jnp.result_type(float))
    return jax.random.categorical(key_x, jnp.log(params["probs"])[z])


# ----------------------------------------------------------------------------- inputs
def _pair(value, name, default):
    """A user's (a, b) prior pair (b > 0; a > 0 too unless ``a`` is a location), or the default."""
    if value is None:
        return default
    if is_traced(value):
        return value
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a pair of numbers (a, b), got {value!r}") from exc
    location = name == "loc_prior"
    if arr.shape != (2,) or not np.all(np.isfinite(arr)) or arr[1] <= 0 or (not location and arr[0] <= 0):
        what = "(mean, scale > 0)" if location else "two positive numbers"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(arr[0]), float(arr[1])


def _positive(value, name):
    if not is_traced(value):
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a positive finite number, got {value!r}") from exc
        if arr.shape != () or not np.isfinite(arr) or arr <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _prepare(obs, num_states, emission, lengths, num_steps, num_categories):
    """Validated observations (or None) with their step mask (True inside each sequence)."""
    check_positive_int(num_states, "num_states")
    if not isinstance(emission, str) or emission not in EMISSIONS:
        raise ValueError(f"emission must be one of {EMISSIONS}, got {emission!r}")
    if obs is None:
        if num_steps is None:
            raise ValueError("num_steps is required when obs is None (how long a sequence to simulate)")
        num_steps = check_positive_int(num_steps, "num_steps")
        if emission == "categorical" and num_categories is None:
            raise ValueError("num_categories is required for categorical emissions when obs is None")
        if lengths is not None:
            raise ValueError("lengths applies to observed batches; leave it None when obs is None")
        return None, jnp.ones((num_steps,), bool), num_categories
    if is_traced(obs):
        if emission == "categorical" and num_categories is None:
            raise TypeError("num_categories must be given when obs is traced (it fixes an array shape)")
        steps = jnp.arange(jnp.shape(obs)[-1])
        mask = jnp.ones(jnp.shape(obs), bool) if lengths is None else steps < jnp.asarray(lengths)[..., None]
        return obs, jnp.broadcast_to(mask, jnp.shape(obs)), num_categories
    if num_steps is not None:
        raise ValueError("num_steps applies only when obs is None (the length of obs is used)")
    filled, mask, batched, num_categories = check_obs(obs, emission, lengths, num_categories)
    original = np.asarray(obs)
    dtype = original.dtype if np.issubdtype(original.dtype, np.integer) else float
    x = (filled if batched else filled[0]).astype(dtype)
    return jnp.asarray(x), jnp.asarray(mask if batched else mask[0]), num_categories


def _summaries(obs, mask):
    """Mean and standard deviation of the observed (unpadded) values; None without data.
    Plain numpy for concrete data (no eager JAX dispatch), jnp when traced."""
    if obs is None:
        return None
    xp = jnp if is_traced(obs) else np
    x = xp.asarray(obs, dtype=float)
    mask = xp.asarray(mask)
    n = xp.sum(mask)
    mean = xp.sum(xp.where(mask, x, 0.0)) / n
    sd = xp.sqrt(xp.sum(xp.where(mask, (x - mean) ** 2, 0.0)) / n)
    return mean, xp.where(sd > 0, sd, 1.0)


# ----------------------------------------------------------------------------- start
START_WINDOW = 10  # categorical emissions: states are clustered by the histogram of +-10 steps
_TINY = 1e-3


@partial(jax.jit, static_argnames=("num_states", "emission", "num_categories"))
def start(rng_key, obs, mask, num_states, emission, num_categories=None):
    """A data-driven start (every site but ``obs``): states from `inference.latent.kmeans` of the
    observed values (for categorical emissions, of each step's local histogram), sorted by
    location; emission parameters, ``init`` and ``trans`` from those states, counts + 1. Each key
    gives another bootstrap; no start puts two states on one value (the saddle NUTS can stay on)."""
    k = num_states
    dtype = jnp.result_type(float)
    x = jnp.atleast_2d(jnp.asarray(obs, dtype))
    m = jnp.broadcast_to(jnp.atleast_2d(jnp.asarray(mask, bool)), x.shape)
    key_w, key_k = jax.random.split(rng_key)
    mf = bootstrap_weights(key_w, m)  # every statistic below is bootstrap-weighted
    if emission == "categorical":
        onehot = jax.nn.one_hot(x.astype(jnp.int32), num_categories, dtype=dtype) * mf[..., None]
        pad = jnp.zeros(onehot.shape[:1] + (1,) + onehot.shape[2:], dtype)
        csum = jnp.cumsum(jnp.concatenate([pad, onehot], 1), 1)  # (B, T + 1, C)
        t = jnp.arange(x.shape[1])
        hi, lo = jnp.minimum(t + START_WINDOW + 1, x.shape[1]), jnp.maximum(t - START_WINDOW, 0)
        hist = csum[:, hi] - csum[:, lo]
        features = hist / jnp.maximum(hist.sum(-1, keepdims=True), 1.0)
    else:
        features = x[..., None]
    _, z = kmeans(key_k, features.reshape(-1, features.shape[-1]), k, mf.reshape(-1))
    z = jax.nn.one_hot(z.reshape(x.shape), k, dtype=dtype) * mf[..., None]  # (B, T, K)
    counts = z.sum((0, 1))
    pairs = jnp.einsum("bti,btj->ij", z[:, :-1], z[:, 1:])
    out = {"init": (z[:, 0].sum(0) + 1.0) / (z[:, 0].sum() + k),
           "trans": (pairs + 1.0) / (pairs.sum(1, keepdims=True) + k)}
    n = jnp.maximum(counts, _TINY)
    if emission == "categorical":
        hits = jnp.einsum("btk,btc->kc", z, jax.nn.one_hot(x.astype(jnp.int32), num_categories, dtype=dtype))
        hits = hits * m.sum() / jnp.maximum(mf.sum(), _TINY)  # counts on the data's scale
        out["probs"] = (hits + 1.0) / (hits.sum(1, keepdims=True) + num_categories)
        return out
    total = jnp.sum(mf)
    overall = jnp.sum(mf * x) / total
    spread = jnp.sqrt(jnp.sum(mf * (x - overall) ** 2) / total)
    spread = jnp.where(spread > 0, spread, 1.0)
    means = jnp.where(counts > 0, jnp.einsum("btk,bt->k", z, x) / n, overall)
    if emission == "poisson":
        means = jnp.maximum(means, _TINY * jnp.maximum(overall, 1.0))
    # strictly increasing (the ordered sites' support): a state that k-means left on another's value
    step = _TINY * spread * (1.0 + jnp.arange(k))
    means = jnp.sort(means) + step
    if emission == "poisson":
        out["rates"] = means
        return out
    var = jnp.einsum("btk,btk->k", z, (x[..., None] - means) ** 2) / n
    out["locs"] = means
    out["scales"] = jnp.sqrt(jnp.where(counts > 1, jnp.maximum(var, (_TINY * spread) ** 2), spread**2))
    return out


def _start_fn(obs, mask, num_states, emission, num_categories):
    """``fn(name, rng_key)``: site ``name`` of one `start` per model run (the first site's key)."""
    memo = {}

    def value(name, rng_key):
        if "start" not in memo:
            memo["start"] = start(rng_key, obs, mask, num_states, emission, num_categories)
        return memo["start"][name]

    return value


# ----------------------------------------------------------------------------- model
def hmm(obs=None, num_states=2, *, emission="gaussian", lengths=None, num_steps=None, ordered=None,
        init_concentration=1.0, trans_concentration=1.0, loc_prior=None, scale_prior=None, rate_prior=None,
        probs_concentration=1.0, num_categories=None):
    """Bayesian HMM; sites ``init``, ``trans``, ``locs``/``scales`` | ``rates`` | ``probs``, ``obs``,
    recovered ``states``.

    Args:
        obs: (T,) one sequence or (B, T) padded batch (``lengths`` (B,)); None to simulate
            ``num_steps`` steps (prior / posterior predictive). A (B, 1) batch without
            ``lengths`` is refused (scikit-learn's one sequence (T, 1) would be T one-step ones).
        num_states: K >= 1.
        emission: ``"gaussian"`` (univariate), ``"poisson"`` (counts) or ``"categorical"``
            (integers in [0, ``num_categories``), default max(obs) + 1).
        ordered: sort ``locs`` / ``rates`` to break label switching (default True for gaussian
            and poisson; not available for categorical).
        Remaining keyword arguments: prior hyperparameters, see the module docstring.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> obs = np.r_[np.zeros(20), 3 * np.ones(20)] + 0.5 * np.random.default_rng(0).normal(size=40)
        >>> post = inference.laplace(probmodels.hmm, obs, num_states=2, num_samples=50)
        >>> np.round(post.mean("locs")).tolist() == [0.0, 3.0], post.samples["states"].shape
        (True, (1, 50, 40))
    """
    obs, mask, num_categories = _prepare(obs, num_states, emission, lengths, num_steps, num_categories)
    if ordered is None:
        ordered = emission != "categorical"
    elif not isinstance(ordered, (bool, np.bool_)):
        raise TypeError(f"ordered must be a bool or None, got {type(ordered).__name__}")
    if ordered and emission == "categorical":
        raise ValueError("ordered=True applies to gaussian locs and poisson rates, not categorical emissions")
    k = num_states
    init_concentration = _positive(init_concentration, "init_concentration")
    trans_concentration = _positive(trans_concentration, "trans_concentration")
    stats = _summaries(obs, mask)

    if obs is None:
        infer = lambda name: {}  # noqa: E731 - nothing to start from
    else:
        from_data = _start_fn(obs, mask, k, emission, int(num_categories) if emission == "categorical" else None)
        infer = lambda name: {"init": Start(partial(from_data, name), f"probmodels.hmm.start {name}")}  # noqa: E731
    init = numpyro.sample("init", dist.Dirichlet(jnp.full((k,), init_concentration, jnp.result_type(float))),
                          infer=infer("init"))
    trans = numpyro.sample("trans", dist.Dirichlet(jnp.full((k, k), trans_concentration, jnp.result_type(float))),
                           infer=infer("trans"))

    def site(name, base):
        return numpyro.sample(name, OrderedIID(base, k) if ordered else base.expand([k]), infer=infer(name))

    if emission == "gaussian":
        m, s = _pair(loc_prior, "loc_prior", (0.0, 1.0) if stats is None else (stats[0], 2.0 * stats[1]))
        a, b = _pair(scale_prior, "scale_prior", (2.0, 1.0) if stats is None else (2.0, stats[1] ** 2))
        params = {"locs": site("locs", dist.Normal(m, s))}
        var_prior = dist.TransformedDistribution(dist.InverseGamma(a, b), dist.transforms.PowerTransform(0.5))
        params["scales"] = numpyro.sample("scales", var_prior.expand([k]), infer=infer("scales"))
    elif emission == "poisson":
        a, b = _pair(rate_prior, "rate_prior", (1.0, 1.0) if stats is None else (1.0, 1.0 / jnp.maximum(stats[0], 1e-3)))
        params = {"rates": site("rates", dist.Gamma(a, b))}
    else:
        probs_concentration = _positive(probs_concentration, "probs_concentration")
        c = check_positive_int(num_categories, "num_categories")
        params = {"probs": numpyro.sample("probs", dist.Dirichlet(jnp.full((k, c), probs_concentration, jnp.result_type(float))),
                                          infer=infer("probs"))}

    likelihood = HiddenMarkov(jnp.log(init), jnp.log(trans), emission, params, mask)
    x = numpyro.sample("obs", likelihood, obs=obs)
    if obs is not None:
        recovered("states", lambda key: likelihood.sample_states(key, x))


hmm.postprocess = mixture_diagnostics.check_collapse  # every engine flags collapsed states


# ----------------------------------------------------------------------------- demo
def demo_cases():
    """The demo's HMM case (see :mod:`probmodels.demo`): a 2-state Gaussian HMM on the durations of
    299 consecutive Old Faithful eruptions (geyser), with NUTS, mean-field VI and Laplace. Scored
    against Baum-Welch: the largest |posterior mean - MLE| of the state means, in posterior sd."""
    from inference.hmm import baum_welch
    from probmodels import datasets
    from probmodels.demo import Case

    duration = datasets.load_unsupervised("geyser")[:, 1]
    mle = np.asarray(baum_welch(duration, 2).params["locs"])

    def score(post):
        draws = np.asarray(post.samples["locs"]).reshape(-1, 2)
        gap = float(np.max(np.abs(draws.mean(0) - mle) / draws.std(0)))
        states = np.asarray(post.samples["states"]).reshape(-1, duration.size)
        short_after_short = np.mean((states[:, :-1] == 0) & (states[:, 1:] == 0))
        return ("max |locs - Baum-Welch| / sd", gap,
                f"{gap:.2f} sd; locs {np.round(draws.mean(0), 2).tolist()} (MLE {np.round(mle, 2).tolist()}); "
                f"P(short -> short) {short_after_short:.3f}")

    def plot(post, path_base):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        p_long = np.asarray(post.samples["states"]).reshape(-1, duration.size).mean(0)
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.scatter(np.arange(duration.size), duration, c=p_long, cmap="coolwarm", s=10, vmin=0, vmax=1)
        ax.set(xlabel="eruption", ylabel="duration (min)", title=f"geyser HMM ({post.engine}): colour = P(long state)")
        path = f"{path_base}_states.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return [path]

    options = {"mcmc": {"num_samples": 400, "num_warmup": 400, "num_chains": 2},
               "vi": {"learning_rate": 0.02, "num_samples": 500},  # plateau at 3500 steps (a 3000 cap: not converged)
               "laplace": {"num_samples": 500}}
    return [Case("hmm_geyser", hmm, (duration,), {"num_states": 2, "emission": "gaussian"},
                 ("mcmc", "vi", "laplace"), score, options, plot)]
