"""Reading a NumPyro program's trace: its sites, the distribution under the wrappers, and the
Gaussian prior of its latent sites. Shared by every engine (EP's recogniser, Laplace's latent
Newton, the GP conditioning of `inference.conditional`, the Bayes machine's and spike-and-slab
model readers, distributed EP); nothing here belongs to one engine.

Example:
    >>> import numpy as np, numpyro, numpyro.distributions as dist
    >>> from numpyro import handlers
    >>> def model(X):
    ...     numpyro.sample("w", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    ...     numpyro.sample("b", dist.Normal(1.0, 1.0))
    >>> tr = handlers.trace(handlers.seed(model, 0)).get_trace(np.ones((3, 2)))
    >>> latent_sites(tr), type(unwrap(tr["w"]["fn"])).__name__
    (['w', 'b'], 'Normal')
    >>> mean, cov = gaussian_prior("w", tr["w"])
    >>> mean.tolist(), np.diag(cov).tolist()
    ([0.0, 0.0], [4.0, 4.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from scipy.linalg import block_diag

from inference import compiled

# What to use for a discrete latent site, said by every continuous engine that refuses one.
DISCRETE_ADVICE = ("inference.mcmc (Gibbs steps for it) or, when every latent site is discrete with a finite "
                   "support, inference.exact")

GAUSSIAN_PRIORS = (dist.Normal, dist.MultivariateNormal, dist.LowRankMultivariateNormal)
_WRAPPERS = (dist.Independent, dist.ExpandedDistribution, dist.MaskedDistribution)


def unwrap(fn, masked: bool = True):
    """The distribution under ``Independent`` / ``ExpandedDistribution`` (and, unless
    ``masked=False``, ``MaskedDistribution``) wrappers: what a site *is*, for reading its type and
    parameters. ``masked=False`` keeps a mask, for callers that evaluate ``log_prob``."""
    wrappers = _WRAPPERS if masked else _WRAPPERS[:2]
    while isinstance(fn, wrappers):
        fn = fn.base_dist
    return fn


def latent_sites(trace) -> list[str]:
    return [name for name, site in trace.items() if site["type"] == "sample" and not site["is_observed"]]


def observed_sites(trace) -> dict[str, np.ndarray]:
    return {name: np.asarray(site["value"]) for name, site in trace.items()
            if site["type"] == "sample" and site["is_observed"]}


def check_gaussian_prior(name, site, who: str = "EP", advice: str = ""):
    """The Gaussian prior of a latent site (its distribution, unwrapped), or a ValueError naming
    the site (``who`` needs Gaussian latents; ``advice`` says what to do). Reads types only, so
    an abstract trace (`inference._model.structure_trace`) serves."""
    fn = site["fn"]
    base = unwrap(fn)
    tail = f"; {advice}" if advice else ""
    if getattr(fn.support, "is_discrete", False):
        # (the other continuous engines need continuous latents too: ``advice`` does not apply)
        raise ValueError(f"latent site {name!r} is discrete ({type(base).__name__}); {who} needs Gaussian latent "
                         f"sites (Normal / MultivariateNormal); marginalise it in the model, or use {DISCRETE_ADVICE}")
    if not isinstance(base, GAUSSIAN_PRIORS):
        raise ValueError(f"latent site {name!r} has a {type(base).__name__} prior; {who} needs a Gaussian prior "
                         f"(Normal / MultivariateNormal) on every latent site: fix its value as a model argument{tail}")
    return base


def gaussian_prior(name, site, who: str = "EP", advice: str = ""):
    """``(mean, cov)`` of a latent site's Gaussian prior, flattened (jnp; traceable), or a
    ValueError naming the site (`check_gaussian_prior`)."""
    base = check_gaussian_prior(name, site, who, advice)
    shape = jnp.shape(site["value"])
    mean = jnp.ravel(jnp.broadcast_to(base.loc, shape))
    if isinstance(base, dist.Normal):
        return mean, jnp.diag(jnp.ravel(jnp.broadcast_to(base.scale**2, shape)))
    k = base.event_shape[-1]
    covs = jnp.reshape(jnp.broadcast_to(base.covariance_matrix, shape + (k,)), (-1, k, k))
    return mean, jax.scipy.linalg.block_diag(*covs) if covs.shape[0] > 1 else covs[0]


@dataclass
class LatentBlock:
    """One latent site's place in the concatenated latent vector ``u``."""

    name: str
    shape: tuple
    offset: int
    size: int


def latent_blocks(trace, names=None) -> list[LatentBlock]:
    blocks, offset = [], 0
    for name in latent_sites(trace):
        if names is not None and name not in names:
            continue
        shape = tuple(np.shape(trace[name]["value"]))
        size = int(np.prod(shape))
        blocks.append(LatentBlock(name, shape, offset, size))
        offset += size
    return blocks


def unflatten(u, blocks) -> dict:
    return {b.name: jnp.reshape(u[b.offset:b.offset + b.size], b.shape) for b in blocks}


def run_with(model, args, kwargs, values, seed=0):
    """Trace the model with the latent sites set to ``values`` (``seed``: an int or a PRNG key)."""
    seeded = handlers.seed(model, rng_seed=seed)
    return handlers.trace(handlers.substitute(seeded, data=values)).get_trace(*args, **kwargs)


def abstract_trace(model, args, kwargs, seed: int = 0) -> dict:
    """The model's sample sites with shapes only (``jax.eval_shape``: nothing runs or compiles)."""
    latent = {}

    def values():
        tr = handlers.trace(handlers.seed(model, rng_seed=seed)).get_trace(*args, **kwargs)
        sites = {n: s for n, s in tr.items() if s["type"] == "sample"}
        latent.update({n: not s["is_observed"] for n, s in sites.items()})
        return {n: s["value"] for n, s in sites.items()}

    shapes = jax.eval_shape(values)
    return {n: {"type": "sample", "is_observed": not latent[n], "value": v} for n, v in shapes.items()}


def prior_of(model, args, kwargs, blocks, values=None, seed: int = 0, who: str = "EP", advice: str = ""):
    """Prior ``(m0, S0)`` (NumPy) of the concatenated latent blocks, from one compiled run of the
    model (with the latent sites set to ``values`` if given); a ValueError names a non-Gaussian or
    NaN site. ``values`` may be a list of such dicts (one compilation for all): a list returns."""
    def build(rebuild):  # kept per model structure, the data (and the key) as arguments (inference.compiled)
        def run(arrays, values, key):
            a, kw = rebuild(arrays)
            tr = run_with(model, a, kw, values, key)
            parts = [gaussian_prior(b.name, tr[b.name], who, advice) for b in blocks]
            return [p[0] for p in parts], [p[1] for p in parts]

        return jax.jit(run)

    many = isinstance(values, list)
    fn, arrays = compiled.get("ep-prior", model, args, kwargs, tuple((b.name, b.shape) for b in blocks), build)
    key = jax.random.PRNGKey(seed)
    out = []
    for vals in (values if many else [values or {}]):
        means, covs = fn(arrays, vals, key)
        for b, m, c in zip(blocks, means, covs):
            if not (np.all(np.isfinite(np.asarray(m))) and np.all(np.isfinite(np.asarray(c)))):
                raise ValueError(f"latent site {b.name!r}: its prior mean or covariance has NaN or inf entries")
        out.append((np.concatenate([np.asarray(m, float) for m in means]),
                    block_diag(*[np.asarray(c, float) for c in covs])))
    return out if many else out[0]
