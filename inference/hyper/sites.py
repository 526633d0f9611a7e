"""Which sites of a model are hyperparameters, and their prior in unconstrained space.

A model's unobserved sites split in two (`find`):

- the **latent Gaussian**: sites with a Normal or multivariate-normal prior (possibly expanded or
  made independent) that no other unobserved site depends on (a GP's ``f``, regression weights
  ``w``); their prior may depend on the hyperparameters, never on one another;
- the **hyperparameters**: every other unobserved site (a kernel's ``lengthscale``, a noise level,
  a prior scale, linear regression's ``precision``, the Bayes machine's ``eps``). Each must have a
  proper, continuous prior, and the latent or the likelihood must depend on it.

Dependencies are read from the program by NumPyro's provenance tracking
(`numpyro.infer.inspect.get_model_relations`). Hyperparameters live in the unconstrained space of
their supports (``phi``; a positive parameter's log); `log_prior` is their log density there,
the Jacobian of the transform included, so that ``log Z(theta) + log_prior(phi)`` is the log
posterior density of ``phi`` up to a constant.

Example:
    >>> import numpy as np, numpyro.distributions as dist
    >>> from inference import _model
    >>> from probmodels import gp_regression
    >>> from probmodels.kernels import RBF
    >>> X = np.linspace(0, 1, 5)[:, None]; kw = {"kernel": RBF(dist.LogNormal(0.0, 1.0)), "noise": dist.HalfNormal(1.0)}
    >>> hs = find(gp_regression, (X, np.zeros(5)), kw, _model.trace_model(gp_regression, (X, np.zeros(5)), kw))
    >>> hs.hyper, hs.latent
    (('lengthscale', 'noise'), ('f',))
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import _unconstrain_reparam

from inference.trace_reading import unwrap

OPTIONS = (None, "map", "integrate")


class HyperSites(NamedTuple):
    """The split of a model's unobserved sites (names in the model's order, shapes static)."""

    hyper: tuple  # hyperparameter site names
    latent: tuple  # latent Gaussian site names
    hyper_shapes: tuple  # the unconstrained shape of each hyperparameter
    latent_shapes: tuple  # the shape of each latent site


def check_option(hyper) -> None:
    """``hyper`` must be one of `OPTIONS` (raised before any tracing)."""
    if not (hyper is None or (isinstance(hyper, str) and hyper in OPTIONS)):
        raise ValueError(f"hyper must be None, 'map' or 'integrate', got {hyper!r}")


def is_gaussian(fn) -> bool:
    """A Normal prior (possibly expanded / independent) or an unbatched multivariate normal."""
    base = unwrap(fn)
    if isinstance(base, dist.Normal):
        return True
    return isinstance(base, dist.MultivariateNormal) and base is fn and fn.batch_shape == ()


def find(model, args, kwargs, trace) -> HyperSites:
    """The latent Gaussian and hyperparameter sites of ``model`` (module docstring); a
    ValueError names a hyperparameter site that is discrete, improper or unused, and says when
    there is no latent Gaussian or no hyperparameter at all."""
    from numpyro.infer.inspect import get_model_relations

    unobserved = [n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]]
    for name in unobserved:  # never a latent Gaussian, so a hyperparameter: checked first (cheap)
        fn = trace[name]["fn"]
        support = fn.support
        while isinstance(support, constraints.independent):
            support = support.base_constraint
        if support.is_discrete:
            raise ValueError(f"hyperparameter site {name!r} is discrete ({type(unwrap(fn)).__name__}): hyper= "
                             "needs continuous hyperparameters; use inference.mcmc")
        if isinstance(unwrap(fn), dist.ImproperUniform):
            raise ValueError(f"hyperparameter site {name!r} has an improper prior (ImproperUniform): its posterior "
                             "may be improper and hyper= needs a proper prior; give it one (e.g. dist.LogNormal)")
    if len(unobserved) == 1 and is_gaussian(trace[unobserved[0]]["fn"]):
        raise ValueError(f"hyper=: the model has no hyperparameter sites (its one latent site {unobserved[0]!r} is "
                         "Gaussian); give a kernel parameter, noise or prior scale a prior, or use hyper=None")
    try:  # an abstract run (jax.eval_shape): nothing is computed
        parents = get_model_relations(model, args, kwargs)["sample_sample"]
    except Exception as exc:  # noqa: BLE001 - NumPyro's provenance run failed: say so
        raise ValueError(f"hyper=: cannot read which sites depend on which ({type(exc).__name__}: {exc})") from exc
    children = {n: [c for c, ps in parents.items() if n in ps] for n in trace}
    latent = [n for n in unobserved if is_gaussian(trace[n]["fn"])
              and not any(c in unobserved for c in children.get(n, []))]
    hyper = [n for n in unobserved if n not in latent]
    if not latent:
        raise ValueError(f"hyper=: the model has no latent Gaussian site to marginalise (a Normal or "
                         f"multivariate-normal site no other latent depends on); its latent sites are {unobserved}")
    if not hyper:
        raise ValueError(f"hyper=: the model has no hyperparameter sites (its latent sites {latent} are all "
                         "Gaussian); give a kernel parameter, noise or prior scale a prior, or use hyper=None")
    for name in hyper:
        if not children.get(name):
            raise ValueError(f"hyperparameter site {name!r}: neither the latent {latent} nor the likelihood "
                             "depends on it, so the evidence does not inform it; remove it or fix it")
    shape = lambda n: tuple(trace[n]["value"].shape)  # noqa: E731
    return HyperSites(tuple(hyper), tuple(latent), unconstrained_shapes(trace, hyper), tuple(shape(n) for n in latent))


def unconstrained_shapes(trace, names) -> tuple:
    """Each site's shape in unconstrained space (its support's bijection), for `HyperSites`."""
    return tuple(tuple(biject_to(trace[n]["fn"].support).inverse_shape(np.shape(trace[n]["value"]))) for n in names)


def unravel(hs: HyperSites, phi) -> dict:
    """The flat unconstrained vector ``phi`` (the sites in `HyperSites` order, each raveled) as
    ``{site: array}``."""
    out, start = {}, 0
    for name, shape in zip(hs.hyper, hs.hyper_shapes):
        size = int(np.prod(shape))
        out[name] = phi[start:start + size].reshape(shape)
        start += size
    return out


def size(hs: HyperSites) -> int:
    return int(sum(int(np.prod(s)) for s in hs.hyper_shapes))


def run(model, args, kwargs, hs: HyperSites, phi, latent_values=None):
    """One trace of ``model`` with the hyperparameters at ``phi`` (constrained by their
    supports' bijections; each adds a factor ``_NAME_log_det``) and the latent sites at
    ``latent_values`` (default: zeros, for reading their priors). Traceable."""
    params = unravel(hs, phi)
    if latent_values is None:
        latent_values = {n: jnp.zeros(s, phi.dtype) for n, s in zip(hs.latent, hs.latent_shapes)}
    reparam = partial(_unconstrain_reparam, params)

    def substitute_fn(site):
        if site["name"] in params:
            return reparam(site)
        return latent_values.get(site["name"])

    seeded = handlers.seed(model, rng_seed=0)
    return handlers.trace(handlers.substitute(seeded, substitute_fn=substitute_fn)).get_trace(*args, **kwargs)


def _site_log_prob(site):
    lp = jnp.sum(site["fn"].log_prob(site["value"]))
    return lp if site.get("scale") is None else site["scale"] * lp


def log_prior(trace, hs: HyperSites):
    """``log p(theta) + log |d theta / d phi|`` from a trace made by `run`."""
    total = 0.0
    for name in hs.hyper:
        total = total + _site_log_prob(trace[name])
        det = trace.get(f"_{name}_log_det")
        if det is not None:
            total = total + _site_log_prob(det)
    return total


def log_likelihood(trace, hs: HyperSites):
    """The observed sites' (and factors') log density, the Jacobian factors of `run` excluded."""
    skip = {f"_{n}_log_det" for n in hs.hyper}
    return sum((_site_log_prob(s) for n, s in trace.items()
                if s["type"] == "sample" and s["is_observed"] and n not in skip), jnp.zeros(()))


def constrained(trace, hs: HyperSites) -> dict:
    """The hyperparameters' values ``theta`` in a trace made by `run`."""
    return {n: trace[n]["value"] for n in hs.hyper}


def initial_phi(trace, hs: HyperSites):
    """Where the search starts: each hyperparameter at the median of 15 draws from its prior
    (as NumPyro's ``init_to_median``) in a trace made by `run` (a prior that depends on another
    hyperparameter sees that one at ``phi = 0``), mapped to unconstrained space. Traceable."""
    parts = []
    for i, name in enumerate(hs.hyper):
        fn = trace[name]["fn"]
        theta = jnp.median(fn.sample(jax.random.PRNGKey(i), (15,)), axis=0)
        parts.append(jnp.ravel(biject_to(fn.support).inv(theta)))
    return jnp.concatenate(parts)


THETA = "_hyper_theta"  # the keyword that carries the fixed hyperparameters into `fixed`'s model


@lru_cache(maxsize=32)
def fixed(model):
    """``model`` with its hyperparameters observed at the values passed as keyword `THETA`: one
    function per model, the values as data, so every use at any values (both recognitions of
    EP's ``hyper=``, a refit, each design point's prediction) shares the compiled programs
    (`inference.compiled` keys on the model and traces its array arguments)."""

    def conditioned(*args, **kwargs):
        theta = kwargs.pop(THETA)
        return handlers.condition(model, data=theta)(*args, **kwargs)

    return conditioned
