"""Inference engines for NumPyro programs, all returning one `Posterior`.

    post = inference.mcmc(model, *args, num_samples=1000, num_warmup=1000, num_chains=4, seed=0, **kw)
    post = inference.vi(model, *args, guide="normal", steps=..., optimizer=None, seed=0, **kw)
    post = inference.laplace(model, *args, seed=0, **kw)
    post = inference.ep(model, *args, schedule="parallel", damping=..., tol=..., max_iter=..., **kw)
    post = inference.fit(model, *args, engine="mcmc" | "vi" | "laplace" | "ep" | "exact", **kw)
    post = inference.exact(model, *args, **kw)   # discrete programs: exact marginals, evidence, draws

Engine options are keyword-only; all other keywords go to the model, and ``model_kwargs={...}``
passes model arguments whose names collide with an engine option.

Note: the functions ``mcmc``, ``vi``, ``laplace`` and ``ep`` share their names with the modules
that define them; import internals as ``from inference.ep.sites import ...``.
"""

from inference import cache, kalman
from inference.fit import fit
from inference.laplace import SingularHessianError, laplace
from inference.latent import recovered
from inference.mcmc import mcmc
from inference.posterior import Posterior, load
from inference.sbc import sbc
from inference.distributed_ep import distributed_ep
from inference.vi import vi

# Imported after the package ``inference.ep`` so that the name means the function (the package
# is also callable, see inference/ep/__init__.py, in case it is rebound by a later import).
from inference.ep.driver import ep  # noqa: E402
from inference.exact.driver import exact, most_probable  # noqa: E402 (same for the package inference.exact)


__all__ = ["Posterior", "cache", "SingularHessianError", "distributed_ep", "ep", "exact", "fit", "kalman", "laplace", "load", "mcmc", "most_probable", "recovered", "sbc", "vi"]
