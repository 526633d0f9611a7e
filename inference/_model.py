"""Running a NumPyro program outside an engine: trace, sites, pointwise log likelihood, recovered
latents and posterior predictive draws. Shared by every engine; no engine logic here."""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.infer import Predictive, init_to_uniform
from numpyro.infer import log_likelihood as _numpyro_log_likelihood

from inference.latent import recovering


def init_strategy(model, args, kwargs, seed, default):
    """Where an engine starts: ``model.init_values(args, kwargs, seed)`` when the model offers a
    starting point (e.g. mixtures: k-means++ / CAVI, between label-switched modes), else ``default``."""
    from numpyro.infer import init_to_value

    start = getattr(model, "init_values", None)
    return init_to_value(values=start(args, kwargs, seed)) if callable(start) else default


def postprocess(model, post):
    """``model.postprocess(post)`` when the model family adds diagnostics (mixtures: label
    switching, truncation, poor Laplace fit), else ``post`` unchanged."""
    hook = getattr(model, "postprocess", None)
    return hook(post) if callable(hook) else post


def check_model(model) -> None:
    if not callable(model):
        raise TypeError(f"model must be a callable NumPyro program, got {type(model).__name__}")


def trace_model(model, args, kwargs, seed: int = 0, recover: bool = False) -> OrderedDict:
    """Run the model once eagerly (concrete arrays, no jit), so that a model's own input checks
    raise their clear errors before any JAX tracing."""
    check_model(model)
    ctx = recovering() if recover else _nullcontext()
    with ctx, handlers.seed(rng_seed=seed):
        try:
            return handlers.trace(model).get_trace(*args, **kwargs)
        except NotImplementedError:
            # A site that cannot be sampled (ImproperUniform): take NumPyro's initial values.
            sub = handlers.substitute(handlers.seed(model, rng_seed=seed), substitute_fn=init_to_uniform)
            return handlers.trace(sub).get_trace(*args, **kwargs)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def observed_sites(trace) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(site["value"])
        for name, site in trace.items()
        if site["type"] == "sample" and site["is_observed"]
    }


def latent_sites(trace) -> list[str]:
    return [
        name for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"]
    ]


def deterministic_sites(trace) -> list[str]:
    return [name for name, site in trace.items() if site["type"] == "deterministic"]


def recovered_site_names(model, args, kwargs) -> list[str]:
    plain = trace_model(model, args, kwargs)
    with_rec = trace_model(model, args, kwargs, recover=True)
    return [n for n, s in with_rec.items() if s["type"] == "deterministic" and n not in plain]


def discrete_latent_sites(trace) -> list[str]:
    return [
        name for name in latent_sites(trace)
        if getattr(trace[name]["fn"], "support", None) is not None
        and getattr(trace[name]["fn"].support, "is_discrete", False)
    ]


def pointwise_log_likelihood(model, flat_samples, args, kwargs) -> dict[str, np.ndarray]:
    """Observed site -> log p(y_i | draw) with shape ``(num_draws, *obs_shape)``."""
    if not flat_samples:
        return {}
    out = _numpyro_log_likelihood(model, flat_samples, *args, batch_ndims=1, **kwargs)
    return {k: np.asarray(v) for k, v in out.items()}


def recover_latents(model, flat_samples, args, kwargs, rng_key, names) -> dict[str, np.ndarray]:
    """Draw each recovered discrete latent once per posterior draw (see `inference.latent`)."""
    if not names:
        return {}
    with recovering():
        pred = Predictive(model, posterior_samples=flat_samples, return_sites=list(names), batch_ndims=1)
        out = pred(rng_key, *args, **kwargs)
    return {k: np.asarray(v) for k, v in out.items()}


def to_chains(flat: dict, num_chains: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).reshape((num_chains, -1) + np.shape(v)[1:]) for k, v in flat.items()}


def predictive_draws(post, rng_key, *args, **kwargs) -> dict[str, np.ndarray]:
    """Posterior predictive of the observed sites at new inputs, one draw per posterior draw."""
    model = post.model
    trace = trace_model(model, args, kwargs)
    latent = set(latent_sites(trace))
    flat = {k: v for k, v in post.flat_samples().items() if k in latent}
    observed = list(post.observed_data) or [
        n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"] and n not in flat
    ]
    pred = Predictive(model, posterior_samples=flat, return_sites=observed, batch_ndims=1)
    out = pred(rng_key, *args, **kwargs)
    return to_chains({k: np.asarray(v) for k, v in out.items()}, post.num_chains)


def finish_samples(model, flat_samples, args, kwargs, rng_key, num_chains):
    """From flat latent draws (constrained space) to the Posterior's samples, log likelihood and
    observed data: adds deterministic and recovered sites, reshapes to (chain, draw)."""
    trace = trace_model(model, args, kwargs)
    rec_names = recovered_site_names(model, args, kwargs)
    det_names = [n for n in deterministic_sites(trace) if n not in flat_samples]
    flat = {k: jnp.asarray(v) for k, v in flat_samples.items()}
    if det_names:
        pred = Predictive(model, posterior_samples=flat, return_sites=det_names, batch_ndims=1)
        flat.update(pred(jax.random.fold_in(rng_key, 1), *args, **kwargs))
    latent_only = {k: v for k, v in flat.items() if k in set(latent_sites(trace))}
    flat.update(recover_latents(model, latent_only, args, kwargs, jax.random.fold_in(rng_key, 2), rec_names))
    loglik = pointwise_log_likelihood(model, latent_only, args, kwargs)
    return (
        to_chains(flat, num_chains),
        to_chains(loglik, num_chains),
        observed_sites(trace),
    )
