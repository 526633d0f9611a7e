"""NUTS chains as one compiled function, kept across calls (see `inference.compiled`).

NumPyro's ``MCMC.run`` traces, lowers and compiles its chains on every call, even when the
persistent cache holds the executable (0.3-0.5 s for a small model). Here warmup and sampling of
all chains are one function of ``(keys, init_values, data arrays)`` built once per model
structure and options, so a second fit of the same model on data of the same shape only runs.
The chains are NumPyro's: same kernel, same key splitting, same initialisation, so a seed gives
raw NumPyro's draws; only a model whose sites declare data-driven starts (`inference.latent`)
starts each chain at its own declared start, computed by the start program the other engines
share (one call per chain key) and passed in as that chain's initial values.

Chains run in parallel over devices (``shard_map``, one chain per device), one after the other on one device
(``lax.map``: one compilation for all chains) or vectorised (``vmap``).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.infer import NUTS, init_to_uniform, init_to_value
from numpyro.infer import log_likelihood as _log_likelihood
from numpyro.infer.util import unconstrain_fn

from inference import _model, compiled, whiten
from inference import progress as progress_bar

STAT_FIELDS = ("diverging", "num_steps", "accept_prob", "potential_energy", "energy")


def _build(model, options):
    num_warmup, num_samples, num_chains, method, target_accept, max_tree_depth, progress, has_init, latent, starts, white, per_chain = options
    # multivariate-normal latents (a GP's f) are sampled whitened, f = loc + L z (`inference.whiten`):
    # the same posterior, without the prior's correlations in the geometry NUTS adapts to
    sampled = whiten.whitened(model, white) if white else model
    # NumPyro's own init_to_uniform unless a site declares a data-driven start: its fast path draws
    # the start in unconstrained space, so a model without starts gets NumPyro's chains exactly
    default = _model.site_init(init_to_uniform) if starts else init_to_uniform
    total = num_warmup + num_samples

    def tick(i):  # a lazy bar (`inference.progress`): a run shorter than a second shows none
        if progress:
            progress_bar.every(i, total)

    def build(rebuild):
        def one_chain(arrays, key, init):
            args, kwargs = rebuild(arrays)
            strategy = init_to_value(values=init) if has_init else default
            kernel = NUTS(sampled, target_accept_prob=target_accept, max_tree_depth=max_tree_depth,
                          init_strategy=strategy)
            # declared starts, checked inside their supports: NumPyro's search for a valid start
            # (a while loop holding a second copy of the potential's gradient, ~8% of the
            # program's compilation) is left out, the start given in unconstrained space
            start = unconstrain_fn(sampled, args, kwargs, init) if per_chain else None
            state = kernel.init(key, num_warmup, start, model_args=args, model_kwargs=kwargs)
            constrain = kernel.postprocess_fn(args, kwargs)

            def record(s):  # the model's sites (a whitened site's f from its deterministic site)
                values = {k: v for k, v in constrain(s.z).items() if k not in {n + whiten.SUFFIX for n in white}}
                return values, {f: getattr(s, f) for f in STAT_FIELDS}

            def step(i, carry):  # warmup and sampling in one loop, as NumPyro's fori_collect:
                s, buf = carry   # the kernel is traced once (its adaptation switches off itself)
                tick(i)
                s = kernel.sample(s, args, kwargs)

                def write(buf):
                    return jax.tree.map(lambda b, x: lax.dynamic_update_index_in_dim(b, x, i - num_warmup, 0),
                                        buf, record(s))

                return s, lax.cond(i >= num_warmup, write, lambda b: b, buf)

            buf = jax.tree.map(lambda a: jnp.zeros((num_samples,) + a.shape, a.dtype), jax.eval_shape(record, state))
            _, (draws, stats) = lax.fori_loop(0, total, step, (state, buf))
            # the pointwise log likelihood of the draws in the same program: a separate one is
            # another trace, lowering and cache load on a first fit (~0.1 s)
            loglik = _log_likelihood(model, {k: draws[k] for k in latent}, *args, batch_ndims=1, **kwargs)
            return draws, stats, loglik

        if method == "parallel":  # one chain per device, each running its own program
            from jax.sharding import Mesh, NamedSharding, PartitionSpec

            mesh = Mesh(np.array(jax.local_devices()[:num_chains]), ("chain",))
            def per_device(arrays, keys, init):  # the local block holds one chain: no vmap
                init = jax.tree.map(lambda x: x[0], init) if per_chain else init
                return jax.tree.map(lambda x: x[None], one_chain(arrays, keys[0], init))

            # explicit shardings: a program exported to disk (`inference.exported`) needs them
            same, by_chain = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("chain"))
            init_spec = PartitionSpec("chain") if per_chain else PartitionSpec()
            return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("chain"), init_spec),
                                         out_specs=PartitionSpec("chain"), check_vma=False),
                           in_shardings=(same, by_chain, by_chain if per_chain else same), out_shardings=by_chain)
        if method == "vectorized":
            return jax.jit(jax.vmap(one_chain, in_axes=(None, 0, 0 if per_chain else None)))
        if per_chain:
            return jax.jit(lambda arrays, keys, init: lax.map(lambda ki: one_chain(arrays, *ki), (keys, init)))
        return jax.jit(lambda arrays, keys, init: lax.map(lambda k: one_chain(arrays, k, init), keys))

    return build


def _inside_support(values: dict, trace) -> bool:
    """Whether each start is finite and inside its site's support (where the ``trace`` shows a
    support that can be checked on these values)."""
    for name, value in values.items():
        value = np.asarray(value)
        if not np.all(np.isfinite(value)):
            return False
        site = (trace or {}).get(name)
        if site is None:
            continue
        try:
            inside = np.asarray(site["fn"].support.check(value))
        except Exception:  # noqa: BLE001 - a support with abstract parameters: not checked here
            continue
        if not np.all(inside):
            return False
    return True


_SECONDS: dict = {}  # shortest wall time of a NUTS run, per model, data structure and settings


def _timing_key(model, args, kwargs, settings):
    key = compiled.split(args, kwargs).key
    if key is None:
        return None
    try:
        hash((model, key, settings))
    except TypeError:
        return None
    return (model, key, settings)


def run_nuts(model, args, kwargs, *, seed, num_warmup, num_samples, num_chains, chain_method,
             target_accept, max_tree_depth, latent, init_values=None, site_starts=False, progress=False,
             white=(), trace=None):
    """Run ``num_chains`` NUTS chains; returns ``(samples, stats, loglik)`` with leading axes
    ``(chain, draw)``. ``samples`` holds the constrained latent and deterministic sites, ``stats``
    NumPyro's per-draw fields (`STAT_FIELDS`), ``loglik`` the pointwise log likelihood of every
    observed site given the ``latent`` sites of each draw. ``site_starts``: some site declares a
    data-driven start (`inference.latent.site_init`). ``white``: latent sites sampled in whitened
    coordinates (`inference.whiten`; the draws are of the sites themselves). ``trace``: the model's
    structure trace (`inference._model.structure_trace`), when the caller has one."""
    key = jax.random.PRNGKey(seed)
    keys = jax.random.split(key, num_chains) if num_chains > 1 else key[None]
    per_chain = init_values is None and bool(site_starts) and not white
    if per_chain:  # the declared starts, one per chain, from the program VI, Laplace and the
        # mixture diagnostics run: inside the chains' program NumPyro traced a mixture's k-means
        # start twice (its transforms, its validity loop), ~1/3 of that program's compilation
        starts = [_model.start_values(model, args, kwargs, default=init_to_uniform, trace=trace, key=k) for k in keys]
        per_chain = all(_inside_support(s, trace) for s in starts)
        if per_chain:  # else NumPyro's own search, which draws the declared starts again with new keys
            init_values = {k: np.stack([np.asarray(s[k]) for s in starts]) for k in starts[0]}
    has_init = init_values is not None
    init = {k: jnp.asarray(v) for k, v in init_values.items()} if has_init else None
    settings = (num_warmup, num_samples, num_chains, chain_method, float(target_accept),
                int(max_tree_depth), has_init, tuple(sorted(latent)), bool(site_starts), tuple(white), per_chain)
    # The bar's host callback costs ~5 ms a call however few ticks it makes (+15-20% on a 0.03 s
    # fit): a run whose program finished in under half a second before runs without it (same
    # draws, `test_progress_bar_does_not_change_the_draws`). Only whether a bar shows depends on it.
    timing = _timing_key(model, args, kwargs, settings)
    progress = bool(progress) and _SECONDS.get(timing, float("inf")) >= progress_bar.DELAY / 2
    options = settings[:6] + (progress,) + settings[6:]
    bar = progress_bar.Bar(progress, num_chains * (num_warmup + num_samples), f"NUTS, {num_chains} chains")
    start = time.perf_counter()
    with progress_bar.running(bar):
        samples, stats, loglik = jax.device_get(compiled.call("nuts", model, args, kwargs, options,
                                                              _build(model, options), keys, init,
                                                              persist=not progress))
    if timing is not None:
        _SECONDS[timing] = min(_SECONDS.get(timing, float("inf")), time.perf_counter() - start)
        while len(_SECONDS) > 256:
            _SECONDS.pop(next(iter(_SECONDS)))
    to_np = lambda tree: {k: np.asarray(v) for k, v in tree.items()}  # noqa: E731
    return to_np(samples), to_np(stats), to_np(loglik)
