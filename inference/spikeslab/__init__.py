"""Spike-and-slab models under every engine: EP, collapsed Gibbs MCMC, coordinate-ascent VI, and
exact enumeration as a reference.

The generic drivers (``inference.ep``, ``inference.mcmc``, ``inference.vi``) hand a model to this
package when :func:`matches` finds a :class:`SpikeSlab` site in its trace::

    if spikeslab.matches(trace):
        return spikeslab.mcmc_posterior(model, args, kwargs, trace, num_samples=..., ...)

Example:
    >>> import numpy as np
    >>> from probmodels.spike_slab import spike_and_slab_regression
    >>> from inference._model import trace_model
    >>> X = np.random.default_rng(0).normal(size=(30, 5)); y = X[:, 2]
    >>> matches(trace_model(spike_and_slab_regression, (X, y), {}))
    True
"""

from inference.spikeslab.distribution import SpikeSlab
from inference.spikeslab.engines import ep_posterior, mcmc_posterior, vi_posterior
from inference.spikeslab.exact import enumerate_models, exact_posterior
from inference.spikeslab.structure import extract, matches

__all__ = ["SpikeSlab", "matches", "extract", "ep_posterior", "mcmc_posterior", "vi_posterior",
           "enumerate_models", "exact_posterior"]
