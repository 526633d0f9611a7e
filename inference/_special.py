"""Model structures that a generic engine cannot handle and a dedicated one can.

Recognised by the distribution types in the model's trace, never by the model's name:
spike-and-slab sites (Gibbs / fully factorised EP / Bernoulli-Gaussian VI in `inference.spikeslab`)
and the Bayes machine's noisy-step likelihood (elliptical slice sampling in `inference.ess`, its own
EP in `inference.ep.bayes_machine`).
"""

from __future__ import annotations

import sys

from inference.trace_reading import unwrap


def has_spike_and_slab(trace) -> bool:
    # No import: a SpikeSlab site needs its module loaded, so an unloaded module means there is none
    # (importing it would run the spike-and-slab package, ~0.03-0.4 s on a first fit).
    module = sys.modules.get("inference.spikeslab.distribution")
    if module is None:
        return False
    return any(site["type"] == "sample" and module.is_spike_slab(site["fn"]) for site in trace.values())


def has_noisy_step(trace) -> bool:
    module = sys.modules.get("inference.distributions")
    if module is None:
        return False
    return any(site["type"] == "sample" and isinstance(unwrap(site["fn"]), module.NoisyStep) for site in trace.values())
