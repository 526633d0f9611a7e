"""Inference engines for NumPyro programs, all returning one `Posterior`.

    post = inference.mcmc(model, *args, num_samples=1000, num_warmup=1000, num_chains=4, seed=0, **kw)
    post = inference.vi(model, *args, guide="normal", steps=..., optimizer=None, seed=0, **kw)
    post = inference.laplace(model, *args, seed=0, **kw)
    post = inference.ep(model, *args, schedule="parallel", damping=..., tol=..., max_iter=..., **kw)
    post = inference.fit(model, *args, engine="mcmc" | "vi" | "laplace" | "ep", **kw)

Engine options are keyword-only; all other keywords go to the model, and ``model_kwargs={...}``
passes model arguments whose names collide with an engine option.

Note: the functions ``mcmc``, ``vi``, ``laplace`` and ``ep`` share their names with the modules
that define them; import internals as ``from inference.ep.sites import ...``.
"""

from inference import cache as _cache
from inference.fit import fit
from inference.laplace import SingularHessianError, laplace
from inference.latent import recovered
from inference.mcmc import mcmc
from inference.posterior import Posterior, load
from inference.vi import vi

_cache.enable()


def ep(model, *args, **kwargs):
    """Expectation propagation for latent-Gaussian models (see `inference.ep.driver`)."""
    from inference.ep.driver import ep as _ep

    return _ep(model, *args, **kwargs)


__all__ = ["Posterior", "SingularHessianError", "ep", "fit", "laplace", "load", "mcmc", "recovered", "vi"]
