"""Model structures that a generic engine cannot handle and a dedicated one can.

Recognised by the distribution types in the model's trace, never by the model's name:
spike-and-slab sites (Gibbs / fully factorised EP / Bernoulli-Gaussian VI in `inference.spikeslab`)
and the Bayes machine's noisy-step likelihood (elliptical slice sampling in `inference.ess`, its own
EP in `inference.ep.bayes_machine`).
"""

from __future__ import annotations


def has_spike_and_slab(trace) -> bool:
    try:  # the distribution module only: importing the engines costs ~0.1 s on a first fit
        from inference.spikeslab.distribution import is_spike_slab
    except ImportError:
        return False
    return any(site["type"] == "sample" and is_spike_slab(site["fn"]) for site in trace.values())


def has_noisy_step(trace) -> bool:
    try:
        from inference.distributions import NoisyStep
    except ImportError:
        return False
    return any(
        site["type"] == "sample" and isinstance(_base(site["fn"]), NoisyStep) for site in trace.values()
    )


def _base(fn):
    """Strip Independent / ExpandedDistribution wrappers."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn
