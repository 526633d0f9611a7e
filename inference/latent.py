"""Discrete latents that a model marginalises out and the engines recover per posterior draw.

A model that sums out mixture assignments or HMM states declares, after computing the marginal
likelihood, how to draw the latent from its conditional posterior given the other sites::

    log_resp = ...                                     # (n, K) log responsibilities
    inference.recovered("z", lambda key: jax.random.categorical(key, log_resp))

During inference this is a no-op (the model's density is unchanged). After inference every engine
re-runs the model on each draw with recovery switched on, and the value is stored as a posterior
site (so it reaches ArviZ as draws). Example:

    >>> import jax, jax.numpy as jnp, numpyro
    >>> from inference.latent import recovered, recovering
    >>> def model():
    ...     recovered("z", lambda key: jax.random.bernoulli(key, 0.5, (3,)).astype(jnp.int32))
    >>> with numpyro.handlers.seed(rng_seed=0), recovering():
    ...     tr = numpyro.handlers.trace(model).get_trace()
    >>> tr["z"]["value"].shape
    (3,)

Such a model's posterior is multimodal, with a saddle where all components (states) coincide; a
start drawn from the prior can land near it, and a local method stays there (both HMM state means
at one value, reported converged). So the model also declares where to start: a latent site may
carry ``infer={"init": Start(fn, label)}``, and every engine (each NUTS chain, the VI guide,
Laplace's mode search; `site_init` is their strategy) starts that site at ``fn(rng_key)``, the
constrained value, a JAX function of the data (called inside the engines' compiled programs).
``rng_key`` differs per chain, so chains differ; `kmeans` with `bootstrap_weights` gives the
data-driven part, components sorted by their first coordinate, so every chain starts with the
same labelling and R-hat compares like with like.
"""

from __future__ import annotations

import contextlib
from functools import partial

import jax
import jax.numpy as jnp
import numpyro

_STATE = {"on": False}


def recovered(name: str, sample_fn) -> None:
    """Declare discrete latent ``name``; ``sample_fn(rng_key)`` draws it given the other sites.

    Example (a two-component mixture with its assignments summed out, then recovered per draw):
        >>> import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
        >>> import inference
        >>> def mixture(x):
        ...     mu = numpyro.sample("mu", dist.Normal(jnp.zeros(2), 5.0).to_event(1))
        ...     logp = jnp.log(0.5) + dist.Normal(mu, 1.0).log_prob(x[:, None])   # (n, 2)
        ...     numpyro.factor("x", jax.nn.logsumexp(logp, axis=1).sum())
        ...     inference.recovered("z", lambda key: jax.random.categorical(key, logp))
        >>> x = np.r_[np.full(5, -3.0), np.full(5, 3.0)]
        >>> post = inference.laplace(mixture, x, num_samples=20)
        >>> post.samples["z"].shape, post.samples["z"].dtype.kind
        ((1, 20, 10), 'i')
    """
    if _STATE["on"]:
        numpyro.deterministic(name, sample_fn(numpyro.prng_key()))


def is_recovering() -> bool:
    return _STATE["on"]


@contextlib.contextmanager
def recovering():
    """Switch recovery on while tracing (the flag is read when the model is traced)."""
    old = _STATE["on"]
    _STATE["on"] = True
    try:
        yield
    finally:
        _STATE["on"] = old


# ----------------------------------------------------------------------------- data-driven starts
class Start:
    """A site's data-driven start, ``infer={"init": Start(fn, label)}``: ``fn(rng_key)`` is the
    constrained value. Its repr is ``label`` (not an address, which changes every run), so
    programs kept per model trace (`inference.compiled`) are reused across fits."""

    def __init__(self, fn, label: str):
        self.fn, self.label = fn, label

    def __call__(self, rng_key):
        if jax.dtypes.issubdtype(getattr(rng_key, "dtype", None), jax.dtypes.prng_key):
            rng_key = jax.random.key_data(rng_key)  # one compiled start for typed and raw keys
        return self.fn(rng_key)

    def __repr__(self):
        return f"Start({self.label!r})"


@partial(jax.jit, static_argnames=("num_clusters", "num_restarts", "num_iter"))
def kmeans(rng_key, X, num_clusters: int, weights=None, num_active=None, *, num_restarts: int = 4,
           num_iter: int = 25):
    """Centres (K, d) sorted by their first coordinate and hard labels (n,) of weighted k-means
    on the rows of ``X`` (n, d) with row ``weights`` (n,) >= 0 (0: padding, ignored; a start
    passes `bootstrap_weights`, so its centres vary from key to key about as much as the posterior
    does); k-means++ seeding, ``num_iter`` Lloyd steps, best of ``num_restarts`` by weighted
    within-cluster sum of squares. An empty cluster keeps its seed. ``num_active`` (traced, <= K):
    only the first that many clusters are used (the others sort last and get no point), so one
    compiled program serves every number of clusters (e.g. vmapped to choose one).

    >>> import jax, numpy as np
    >>> X = np.r_[np.full(10, -2.0), np.full(10, 3.0)][:, None]
    >>> centres, labels = kmeans(jax.random.PRNGKey(0), X, 2)
    >>> np.asarray(centres[:, 0]).tolist(), np.asarray(labels)[[0, -1]].tolist()
    ([-2.0, 3.0], [0, 1])
    """
    X = jnp.asarray(X, jnp.result_type(float))
    n, k = X.shape[0], num_clusters
    w = jnp.ones((n,), X.dtype) if weights is None else jnp.asarray(weights, X.dtype)
    key_s = rng_key
    off = jnp.where(jnp.arange(k) < (k if num_active is None else num_active), 0.0, jnp.inf)

    def sq_dist(centres):
        return jnp.sum((X[:, None, :] - centres[None]) ** 2, -1) + off  # (n, K)

    def one(key):
        first = X[jax.random.categorical(jax.random.fold_in(key, 0), jnp.log(w))]
        centres = jnp.broadcast_to(first, (k, X.shape[1]))

        def seed_step(i, centres):  # k-means++: the next seed with probability ~ w d^2
            d2 = jnp.min(jnp.where(jnp.arange(k) < i, sq_dist(centres), jnp.inf), -1)
            d2 = jnp.where(jnp.isfinite(d2), d2, 1.0)  # an inactive cluster's seed: any point
            pick = jax.random.categorical(jax.random.fold_in(key, i), jnp.log(w * d2))
            return centres.at[i].set(X[pick])

        def lloyd(_, centres):
            onehot = jax.nn.one_hot(jnp.argmin(sq_dist(centres), -1), k, dtype=X.dtype) * w[:, None]
            counts = onehot.sum(0)
            return jnp.where(counts[:, None] > 0, onehot.T @ X / jnp.maximum(counts, 1e-30)[:, None], centres)

        centres = jax.lax.fori_loop(0, num_iter, lloyd, jax.lax.fori_loop(1, k, seed_step, centres))
        return centres, jnp.sum(w * jnp.min(sq_dist(centres), -1))

    centres, inertia = jax.vmap(one)(jax.random.split(key_s, num_restarts))
    centres = centres[jnp.argmin(jnp.where(jnp.isfinite(inertia), inertia, jnp.inf))]
    centres = centres[jnp.argsort(centres[:, 0] + off)]
    return centres, jnp.argmin(sq_dist(centres), -1)


def bootstrap_weights(rng_key, mask):
    """Bayesian-bootstrap weights (Rubin 1981): Exponential(1) per entry of ``mask``, 0 where it
    is False. Statistics weighted by them spread about as a posterior does."""
    mask = jnp.asarray(mask)
    return jnp.where(mask, jax.random.exponential(rng_key, mask.shape, jnp.result_type(float)), 0.0)


def init_to_prior_mean(site=None):
    """NumPyro init strategy: the prior mean of each continuous latent site where it is finite,
    else the point ``0`` of the unconstrained space (the site's support mapped from 0: 1 for a
    positive site, the centre of a simplex or an interval). Deterministic, and it draws nothing:
    NumPyro's ``init_to_median(num_samples=15)`` draws 15 prior samples per site, and for a Gamma,
    Beta, Dirichlet or inverse-Wishart prior the compiled rejection sampler cost more than the fit
    (a Laplace fit of ``linear_regression`` compiled ~6 s of Gamma sampler of its ~17 s).

    Example (the prior means: 1.5 for Normal(1.5, 1), 2 for Gamma(4, 2)):
        >>> import numpyro, numpyro.distributions as dist
        >>> from inference.latent import init_to_prior_mean
        >>> def m():
        ...     numpyro.sample("a", dist.Normal(1.5, 1.0)); numpyro.sample("b", dist.Gamma(4.0, 2.0))
        >>> tr = numpyro.handlers.trace(numpyro.handlers.substitute(numpyro.handlers.seed(m, 0),
        ...     substitute_fn=init_to_prior_mean)).get_trace()
        >>> float(tr["a"]["value"]), float(tr["b"]["value"])
        (1.5, 2.0)
    """
    if site is None:
        return init_to_prior_mean
    if site["type"] != "sample" or site["is_observed"] or site["fn"].support.is_discrete:
        return None
    from numpyro.distributions import biject_to

    fn = site["fn"]
    shape = tuple(site["kwargs"].get("sample_shape") or ()) + tuple(fn.shape())
    transform = biject_to(fn.support)
    origin = transform(jnp.zeros(transform.inverse_shape(shape), jnp.result_type(float)))
    try:
        mean = jnp.broadcast_to(1.0 * fn.mean, shape)
    except (NotImplementedError, ValueError, TypeError, AttributeError):
        return origin
    ok = jnp.all(jnp.isfinite(mean), axis=tuple(range(mean.ndim - fn.event_dim, mean.ndim)), keepdims=True)
    return jnp.where(ok, mean, origin)


def site_init(default):
    """The init strategy (NumPyro's ``init_loc_fn``) every engine uses: a latent site that
    declares a data-driven start with ``infer={"init": Start(...)}`` starts there (the module
    docstring), any other as ``default``. Pass it to a guide you build yourself, e.g.
    ``AutoNormal(model, init_loc_fn=site_init(init_to_median))``. A ``functools.partial``, as
    NumPyro's ``initialize_model`` expects."""
    return partial(_site_init, default=default)


def _site_init(site=None, default=None):
    if site is None:
        return partial(_site_init, default=default)
    fn = (site.get("infer") or {}).get("init")
    if fn is not None and site["type"] == "sample" and not site["is_observed"]:
        return fn(site["kwargs"]["rng_key"])
    return default(site)
