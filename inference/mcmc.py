"""MCMC: NumPyro's NUTS behind the common `Posterior`.

Discrete latents that the model sums out (mixtures, HMMs) are recovered per draw afterwards
(`inference.latent`); other discrete sites get a Gibbs step beside HMC (NumPyro's
``DiscreteHMCGibbs``); spike-and-slab models go to their own collapsed Gibbs sampler and
gradient-free likelihoods (the Bayes machine's step) to elliptical slice sampling.

Example:
    >>> import numpy as np, inference, probmodels
    >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
    >>> post = inference.mcmc(probmodels.linear_regression, X, y, noise_scale=1.0,
    ...                       num_samples=200, num_warmup=200, num_chains=2, progress=False)
    >>> post.samples["w"].shape
    (2, 200, 2)
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, init_to_uniform

from inference import _model, _options, _special, compiled, convergence, whiten
from inference.chains import run_nuts
from inference.posterior import Posterior


@compiled.scoped
def mcmc(
    model,
    *args,
    num_samples: int = 1000,
    num_warmup: int = 1000,
    num_chains: int = 4,
    seed: int = 0,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    chain_method: str | None = None,
    progress: bool | None = None,
    model_kwargs: dict | None = None,
    **kwargs,
) -> Posterior:
    """Sample the posterior of ``model(*args, **kwargs)`` with NUTS.

    Engine options are keyword-only; every other keyword goes to the model (``model_kwargs=``
    passes model arguments whose names collide with an option). ``chain_method`` defaults to
    `default_chain_method`. ``progress``: a bar, shown once sampling has run
    for a second (`inference.progress`). A multivariate-normal latent (a GP's ``f``) is sampled
    in whitened coordinates, ``f = loc + L z`` (`inference.whiten`; same posterior, the draws are
    of ``f``; ``lp`` is minus NUTS's potential, in the sampler's coordinates). Spike-and-slab models (collapsed Gibbs) and the Bayes
    machine (elliptical slice) run their own samplers, chains vectorised: there ``target_accept``,
    ``max_tree_depth`` and a ``chain_method`` other than ``"vectorized"`` raise ValueError.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = X @ np.array([1.0, -1.0])
        >>> post = inference.mcmc(probmodels.linear_regression, X, y, noise_scale=1.0, num_samples=200,
        ...                       num_warmup=200, num_chains=2, progress=False)
        >>> post.samples["w"].shape, sorted(post.to_arviz().children)[:3]
        ((2, 200, 2), ['log_likelihood', 'observed_data', 'posterior'])
    """
    num_samples = _options.positive_int(num_samples, "num_samples")
    num_warmup = _options.positive_int(num_warmup, "num_warmup", minimum=0)
    num_chains = _options.positive_int(num_chains, "num_chains")
    seed = _options.seed(seed)
    target_accept = _options.unit_interval(target_accept, "target_accept")
    max_tree_depth = _options.positive_int(max_tree_depth, "max_tree_depth")
    chain_method_given = chain_method
    if chain_method is None:
        chain_method = default_chain_method(num_chains)
    if chain_method not in ("parallel", "sequential", "vectorized"):
        raise ValueError(f"chain_method must be 'parallel', 'sequential' or 'vectorized', got {chain_method!r}")
    progress = _options.progress(progress)
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _options.model_arguments(mcmc, model, args, kwargs)
    trace = _model.structure_trace(model, args, kwargs, seed)
    _model.refuse_subsampling(trace, "inference.mcmc")
    if not _model.latent_sites(trace):
        raise ValueError("model has no latent sample sites: nothing to infer")
    if _special.has_spike_and_slab(trace) or _special.has_noisy_step(trace):
        trace = _model.trace_model(model, args, kwargs, seed)  # their engines read concrete values

    common = dict(num_samples=num_samples, num_warmup=num_warmup, num_chains=num_chains, seed=seed,
                  progress=progress)
    sampler = getattr(model, "mcmc_sampler", None)  # a family's own sampler (the IBP's blocked Gibbs)
    if callable(sampler):
        _options.unsupported("this model's own sampler", target_accept=(target_accept, 0.8),
                             max_tree_depth=(max_tree_depth, 10), chain_method=(chain_method_given, None))
        return _model.postprocess(model, sampler(model, args, kwargs, trace, **common))
    if _special.has_spike_and_slab(trace) or _special.has_noisy_step(trace):
        # dedicated samplers without a NUTS step, their chains vectorised: refuse NUTS's options
        spikeslab = _special.has_spike_and_slab(trace)
        _options.unsupported(
            "the spike-and-slab Gibbs sampler" if spikeslab else "elliptical slice sampling (Bayes machine)",
            target_accept=(target_accept, 0.8), max_tree_depth=(max_tree_depth, 10),
            chain_method=(None if chain_method_given == "vectorized" else chain_method_given, None))
        if spikeslab:
            from inference.spikeslab import mcmc_posterior
        else:
            from inference.ess import mcmc_posterior

        return mcmc_posterior(model, args, kwargs, trace, **common)

    latent = set(_model.latent_sites(trace))
    loglik_flat, white = None, []
    discrete = _model.discrete_latent_sites(trace)
    enumerated = [name for name in discrete if (trace[name].get("infer") or {}).get("enumerate") == "parallel"]
    if enumerated:
        # NumPyro's Gibbs kernel leaves such sites to HMC's enumeration (funsor), which this
        # library does not run: it failed inside NumPyro ("Block DiscreteGibbs owns no sites")
        raise ValueError(
            f"discrete latent site(s) {enumerated} are marked infer={{'enumerate': 'parallel'}}: inference.mcmc "
            f"does not enumerate discrete sites (NumPyro's enumeration needs funsor); drop the mark to sample "
            f"them by Gibbs steps beside NUTS, or sum them out in the model (a mixture distribution such as "
            f"numpyro.distributions.MixtureSameFamily, as probmodels.gaussian_mixture does, and "
            f"inference.latent.recovered to draw them per posterior draw)")
    if discrete:
        samples_flat, sample_stats = _run_discrete(model, args, kwargs, target_accept, max_tree_depth, chain_method,
                                                   **common)
        sampler_name = "discrete-hmc-gibbs"
    else:
        if chain_method == "parallel" and jax.local_device_count() < num_chains:
            chain_method = "sequential"  # as NumPyro does, without its warning
        starts = _model.init_values(model, args, kwargs, seed)
        white = whiten.sites(trace) if starts is None else []
        draws, stats, loglik_chains = run_nuts(
            model, args, kwargs, seed=seed, num_warmup=num_warmup, num_samples=num_samples,
            num_chains=num_chains, chain_method=chain_method, target_accept=target_accept,
            max_tree_depth=max_tree_depth, latent=latent, init_values=starts,
            site_starts=_model.has_site_init(trace), progress=progress,
            white=white, trace=trace)
        flatten = lambda tree: {k: v.reshape((-1,) + v.shape[2:]) for k, v in tree.items()}  # noqa: E731
        samples_flat, loglik_flat = flatten(draws), flatten(loglik_chains)
        sample_stats = {"lp": -stats.pop("potential_energy")}
        rename = {"diverging": "diverging", "num_steps": "n_steps", "accept_prob": "acceptance_rate",
                  "energy": "energy"}
        sample_stats.update({rename[k]: v for k, v in stats.items() if k in rename})
        sampler_name = "nuts"

    samples, loglik, observed = _model.finish_samples(
        model, samples_flat, args, kwargs, seed + 1, num_chains, trace=trace, loglik=loglik_flat
    )
    diagnostics = convergence_diagnostics(
        {k: v for k, v in samples.items() if k in latent}, sample_stats.get("diverging"),
        discrete=sampler_name == "discrete-hmc-gibbs")
    diagnostics["chain_method"] = chain_method
    diagnostics["sampler"] = sampler_name
    diagnostics["whitened"] = list(white)  # sites NUTS sampled in whitened coordinates
    if diagnostics["divergences"]:
        warnings.warn(
            f"{diagnostics['divergences']} divergent transitions: raise target_accept (now "
            f"{target_accept}) or reparameterise the model", skip_file_prefixes=_options.INTERNAL)
    post = Posterior(
        engine="mcmc", samples=samples, log_likelihood=loglik, observed_data=observed,
        sample_stats=sample_stats, diagnostics=diagnostics, model=model, model_args=args,
        model_kwargs=kwargs, seed=seed,
    )
    return _model.postprocess(model, post)


def default_chain_method(num_chains: int) -> str:
    """``"parallel"`` when there are at least ``num_chains`` (> 1) devices; else ``"vectorized"`` on
    an accelerator (a NUTS step there is bound by kernel launches, so one launch serves every chain:
    3.9x faster than one chain after another for a linear regression on an H200) and
    ``"sequential"`` on a CPU (one compilation reused by every chain; vectorised chains are slower
    there, since every chain takes as many leapfrog steps as the longest one).

    Example:
        >>> import jax
        >>> default_chain_method(1) == ("sequential" if jax.default_backend() == "cpu" else "vectorized")
        True
    """
    num_chains = _options.positive_int(num_chains, "num_chains")
    if jax.local_device_count() >= num_chains > 1:
        return "parallel"
    return "sequential" if jax.default_backend() == "cpu" else "vectorized"


def _run_discrete(model, args, kwargs, target_accept, max_tree_depth, chain_method,
                  *, num_samples, num_warmup, num_chains, seed, progress):
    """Discrete sites the model does not sum out: NumPyro's Gibbs steps beside NUTS."""
    nuts = NUTS(model, target_accept_prob=target_accept, max_tree_depth=max_tree_depth,
                init_strategy=_model.init_strategy(model, args, kwargs, seed, init_to_uniform))
    sampler = MCMC(DiscreteHMCGibbs(nuts), num_warmup=num_warmup, num_samples=num_samples,
                   num_chains=num_chains, chain_method=chain_method, progress_bar=progress)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="There are not enough devices")
        sampler.run(jax.random.PRNGKey(seed), *args, extra_fields=("hmc_state.potential_energy",), **kwargs)
    stats = sampler.get_extra_fields(group_by_chain=True)
    return sampler.get_samples(group_by_chain=False), {"lp": -np.asarray(stats["hmc_state.potential_energy"])}


def convergence_diagnostics(samples: dict, diverging=None, discrete: bool = False) -> dict:
    """`inference.convergence.mcmc` over the float sites of ``(chain, draw, ...)`` draws (README.md,
    "What `converged` means"): rank-normalised split R-hat < 1.01, bulk ESS >= 100 per chain, and
    no divergent transition. ``discrete``: the integer sites too (those the Gibbs steps sampled;
    elsewhere integer sites are recovered per draw, e.g. assignments that switch labels)."""
    if discrete:
        return convergence.mcmc(dict(samples), diverging)
    floats = {k: v for k, v in samples.items() if np.issubdtype(np.asarray(v).dtype, np.floating)}
    return convergence.mcmc(floats, diverging)
