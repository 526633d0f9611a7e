"""Running a NumPyro program outside an engine: trace, sites, pointwise log likelihood, recovered
latents and posterior predictive draws. Shared by every engine; no engine logic here."""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax import lax
from numpyro import handlers
from numpyro.infer import Predictive, init_to_uniform
from numpyro.infer import log_likelihood as _numpyro_log_likelihood

from inference import compiled
from inference.conditional import changed_latents, check_trailing_shapes, conditional_draws
from inference.latent import recovering, site_init  # noqa: F401 - engines call _model.site_init
from inference.trace_reading import latent_sites, observed_sites  # noqa: F401 - engines call _model.latent_sites


def init_strategy(model, args, kwargs, seed, default):
    """Where an engine starts: ``model.init_values(args, kwargs, seed)`` when the model offers a
    starting point, else each site's declared data-driven start (`site_init`), else ``default``."""
    from numpyro.infer import init_to_value

    start = getattr(model, "init_values", None)
    return init_to_value(values=start(args, kwargs, seed)) if callable(start) else site_init(default)


def has_site_init(trace) -> bool:
    """Whether some latent site declares a data-driven start: an engine that keeps a guide or a
    starting point across calls must not keep this one (it depends on the data)."""
    return any(s["type"] == "sample" and not s["is_observed"] and "init" in (s.get("infer") or {})
               for s in trace.values())


def start_values(model, args, kwargs, seed: int = 0, default=None, trace=None, key=None) -> dict:
    """The latent sites' values at the start `site_init` gives (``default``, a NumPyro init
    strategy, for a site without a declared start; None: a prior draw), constrained, by site:
    what a fit can be compared with (mixture diagnostics), or an engine's start. One program
    kept per model structure and ``default`` (`inference.compiled`): run eagerly, a Gaussian
    mixture's start compiled ~60 operations one by one (~2 s) after every first fit. With the
    model's ``trace`` (`structure_trace`) showing every latent site declaring its start,
    ``default`` is unused and dropped from the key: VI's start and the mixture diagnostics' then
    share one program (a DP mixture's k-means start: 2 s of compilation each). ``key``: the
    random key of the start instead of ``seed``'s (NUTS: one start per chain, same program)."""
    from inference import compiled

    if trace is not None and all("init" in (s.get("infer") or {}) for s in trace.values()
                                 if s["type"] == "sample" and not s["is_observed"]):
        default = None

    strategy = site_init(default or (lambda site: None))  # None: the site samples as usual

    def build(rebuild):
        def run(arrays, key):
            a, kw = rebuild(arrays)
            seeded = handlers.seed(model, rng_seed=key)  # inside substitute: the strategy sees the site's key
            tr = handlers.trace(handlers.substitute(seeded, substitute_fn=strategy)).get_trace(*a, **kw)
            return {n: s["value"] for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}

        return jax.jit(run)

    return compiled.call("start", model, args, kwargs, (default,), build,
                         jax.random.PRNGKey(seed) if key is None else key)


def init_values(model, args, kwargs, seed):
    """``model.init_values(args, kwargs, seed)`` (constrained values by site) or ``None``."""
    start = getattr(model, "init_values", None)
    return start(args, kwargs, seed) if callable(start) else None


def check_offered(model, engine: str) -> None:
    """Raise ValueError, before any work, when the model family refuses ``engine``: it lists the
    reason in ``model.refused_engines`` (e.g. the DP mixture refuses Laplace)."""
    reason = (getattr(model, "refused_engines", None) or {}).get(engine)
    if reason:
        raise ValueError(f"inference.{engine} is not offered for {getattr(model, '__name__', 'this model')}: {reason}")


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


def refuse_subsampling(trace: OrderedDict, engine: str) -> None:
    """A ValueError naming a plate of ``trace`` that draws a subsample of the data
    (``numpyro.plate(..., subsample_size=...)``): NUTS, Laplace, EP and exact inference need the
    exact log density, and VI's convergence check, Pareto k and draws too, so ``engine`` refuses
    the plate before any work instead of fitting one random subsample (or failing after the fit)."""
    for name, site in trace.items():
        if site["type"] != "plate" or len(site["args"]) != 2 or site["args"][1] is None:
            continue
        size, subsample = (int(a) for a in site["args"])
        if subsample < size:
            raise ValueError(
                f"plate {name!r} draws a subsample of the data (subsample_size={subsample} of {size}): {engine} "
                "fits the whole data set; drop subsample_size (minibatch SVI: NumPyro's SVI)")


def structure_trace(model, args, kwargs, seed: int = 0) -> OrderedDict:
    """The model's sites without running it op by op: one abstract trace (``jax.eval_shape``) with
    the data closed over, so the model's own checks of its concrete inputs still raise first.
    Latent values and the distributions' parameters in it are abstract: read names, types,
    supports and observed values only. Falls back to `trace_model` (eager) when the model fails
    under tracing or an observed value is computed inside the model. A first fit in a new process
    otherwise paid one compilation per operation of the eager trace (~0.3-0.4 s)."""
    check_model(model)
    holder = {}

    def run():
        with handlers.seed(rng_seed=seed):
            holder["trace"] = handlers.trace(model).get_trace(*args, **kwargs)

    try:
        jax.eval_shape(run)
    except Exception:  # noqa: BLE001 - the eager trace raises the model's own error, or succeeds
        return concrete_trace(model, args, kwargs, seed)
    trace = holder["trace"]
    computed = tuple(n for n, s in trace.items()
                     if s["type"] == "sample" and s["is_observed"] and isinstance(s["value"], jax.core.Tracer))
    if computed:  # observed values the model computes from its inputs (e.g. jnp.asarray(X))
        try:
            values = _observed_values(model, args, kwargs, seed, computed)
        except Exception:  # noqa: BLE001 - the eager trace raises the model's own error, or succeeds
            return concrete_trace(model, args, kwargs, seed)
        for name in computed:
            trace[name] = {**trace[name], "value": values[name]}
    return trace


def _observed_values(model, args, kwargs, seed, names):
    """The observed values ``names`` from one compiled run of the model (its unused draws are
    dead code to XLA): the eager trace this replaces paid one compilation per operation, ~140 of
    them (4.8 s) for a Gaussian mixture in a new process."""
    return read_compiled("observed-values", model, args, kwargs, seed, tuple(names),
                         lambda tr: {n: tr[n]["value"] for n in names})


def read_compiled(tag, model, args, kwargs, seed, names: tuple, read):
    """``read(trace)`` (a pytree of arrays) from one compiled run of the model under ``seed``,
    kept per model structure, ``tag`` and ``names`` with the data and the key as arguments
    (`inference.compiled`): a refit with new data or another seed compiles nothing."""

    def build(rebuild):
        def run(arrays, key):
            a, kw = rebuild(arrays)
            with handlers.seed(rng_seed=key):
                return read(handlers.trace(model).get_trace(*a, **kw))

        return jax.jit(run)

    return compiled.call(tag, model, args, kwargs, names, build, jax.random.PRNGKey(seed))


def concrete_trace(model, args, kwargs, seed: int = 0) -> OrderedDict:
    """An eager trace with the latents at a uniform point of the unconstrained space instead of
    prior draws, for readers of the structure, the observed values and the priors' concrete
    parameters (`structure_trace`'s fallback, the VI families' own schemes): no sampler is
    compiled (drawing an HMM's Dirichlet and inverse-gamma priors compiled for ~3 s of CPU in a
    new process; a Gaussian mixture's Student-t, chi-square and Dirichlet ones ~6 s). A site that
    cannot be placed there (a support without a bijection) is drawn."""
    try:
        sub = handlers.substitute(handlers.seed(model, rng_seed=seed), substitute_fn=init_to_uniform)
        return handlers.trace(sub).get_trace(*args, **kwargs)
    except (NotImplementedError, ValueError, TypeError):
        return trace_model(model, args, kwargs, seed)


def support_point(model, args, kwargs, seed: int, names) -> dict:
    """The values of sites ``names`` at `concrete_trace`'s point (uniform in the unconstrained
    space), from one compiled run with the data closed over: for callers that need some valid value
    of a few sites, not a draw. Op by op, a Gaussian mixture's trace compiled ~160 small programs
    (~5 s in a new process). Falls back to `concrete_trace` when the model cannot run traced."""

    def point():
        tr = concrete_trace(model, args, kwargs, seed)
        return {n: tr[n]["value"] for n in names}

    try:
        return jax.jit(point)()
    except Exception:  # noqa: BLE001 - run eagerly: the model's own error, or its values
        return point()


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def deterministic_sites(trace) -> list[str]:
    return [name for name, site in trace.items() if site["type"] == "deterministic"]


def recovered_site_names(model, args, kwargs, trace=None) -> list[str]:
    """Sites that `inference.recovered` adds when recovery is on (one eager trace per structure)."""

    def compute():
        plain = trace if trace is not None else trace_model(model, args, kwargs)
        names = []

        def abstract():  # names only: an abstract trace, nothing runs or compiles
            with recovering(), handlers.seed(rng_seed=0):
                tr = handlers.trace(model).get_trace(*args, **kwargs)
            names.extend(n for n, s in tr.items() if s["type"] == "deterministic")

        try:
            jax.eval_shape(abstract)
        except Exception:  # noqa: BLE001 - e.g. an ImproperUniform site: trace eagerly instead
            names[:] = [n for n, s in trace_model(model, args, kwargs, recover=True).items()
                        if s["type"] == "deterministic"]
        return [n for n in names if n not in plain]

    return compiled.memo("recovered-names", model, args, kwargs, compute)


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

    def build(rebuild):
        def loglik(arrays, samples):
            a, kw = rebuild(arrays)
            return _numpyro_log_likelihood(model, samples, *a, batch_ndims=1, **kw)

        return jax.jit(loglik)

    out = compiled.call("loglik", model, args, kwargs, (), build, _as_jax(flat_samples), persist=True)
    return {k: np.asarray(v) for k, v in out.items()}


def log_joint(model, flat_samples, args, kwargs, batch_size: int | None = None) -> np.ndarray:
    """``log p(draw, y)`` of each flat draw (the ``lp`` sample statistic), one program per model
    structure with the data as arguments (a closure over the data recompiles on every call:
    ~0.25 s per EP fit). ``batch_size``: draws evaluated at once (``lax.map``; default all, vmap),
    to bound memory when each draw is large."""
    from numpyro.infer.util import log_density

    def build(rebuild):
        def run(arrays, samples):
            a, kw = rebuild(arrays)
            fn = lambda p: log_density(model, a, kw, p)[0]  # noqa: E731
            return jax.vmap(fn)(samples) if batch_size is None else lax.map(fn, samples, batch_size=batch_size)

        return jax.jit(run)

    return np.asarray(compiled.call("logjoint", model, args, kwargs, (batch_size,), build, _as_jax(flat_samples),
                                     persist=True))


def _as_jax(tree: dict) -> dict:
    return {k: jnp.asarray(v) for k, v in tree.items()}


def _predictive(tag, model, flat_samples, args, kwargs, rng_key, names, recover=False):
    """Sites ``names`` of the model run once per draw (``Predictive``), compiled per structure."""
    names = tuple(names)

    def build(rebuild):
        def run(arrays, samples, key):
            a, kw = rebuild(arrays)
            pred = Predictive(model, posterior_samples=samples, return_sites=list(names), batch_ndims=1)
            if recover:
                with recovering():  # read while tracing
                    return pred(key, *a, **kw)
            return pred(key, *a, **kw)

        return jax.jit(run)

    out = compiled.call(tag, model, args, kwargs, names, build, _as_jax(flat_samples), rng_key)
    return {k: np.asarray(v) for k, v in out.items()}


def recover_latents(model, flat_samples, args, kwargs, rng_key, names) -> dict[str, np.ndarray]:
    """Draw each recovered discrete latent once per posterior draw (see `inference.latent`)."""
    if not names:
        return {}
    return _predictive("recover", model, flat_samples, args, kwargs, rng_key, names, recover=True)


def to_chains(flat: dict, num_chains: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v).reshape((num_chains, -1) + np.shape(v)[1:]) for k, v in flat.items()}


def fit_options(post, args, kwargs) -> dict:
    """The keyword arguments of the fit that a `Posterior.predict` call leaves out and that are the
    model's options, to be passed again. One that feeds an observed site (the fit's trace without
    it observes fewer sites: ``y=y``, a Bayes net's evidence ``W=1``) is data and is left out; a
    scalar (0-d arrays too), tuple or object (a kernel, a distribution) is carried; an array or
    list that feeds no observed site (ordinal cut points, HMM sequence lengths: an option or data
    of the training inputs, which cannot be told apart) is refused with a ValueError naming it.
    Without this ``predict(X_new)`` ran the model at its defaults: a linear regression fitted with
    ``noise_scale=0.7`` predicted with its unknown-noise branch and a prior draw of the precision
    (predictive sds 2.7-6.5x the closed form); ordinal regression with its default cut points."""
    import inspect

    fitted = dict(post.model_kwargs or {})
    if post.model is None or not fitted:
        return {}
    try:
        given = inspect.signature(post.model).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # not inspectable, or a call the model will refuse itself
        given = dict(kwargs)
    left_out = {k: v for k, v in fitted.items() if k not in given}
    if not left_out:
        return {}
    try:
        observed = set(observed_sites(structure_trace(post.model, post.model_args, fitted)))
    except Exception:  # noqa: BLE001 - a loaded Posterior given its options but not its data
        return {k: v for k, v in left_out.items() if _is_option(v)}
    keep, arrays = {}, []
    for k, v in left_out.items():
        try:
            without = structure_trace(post.model, post.model_args, {q: w for q, w in fitted.items() if q != k})
        except Exception:  # noqa: BLE001 - the model needs it (a required argument)
            without = None
        if without is not None and set(observed_sites(without)) != observed:
            continue  # data of an observed site
        if _is_option(v):
            keep[k] = v
        else:
            arrays.append(k)
    if arrays:
        raise ValueError(
            f"predict() leaves out {arrays}, given to the fit as arrays that feed no observed site (options "
            f"such as cut points, or data of the training inputs): pass them again, or as None for the "
            f"model's default")
    return keep


def _is_option(v) -> bool:
    """A scalar (a 0-d array too), a tuple (``noise_prior=(1.0, 1.0)``) or an object (a kernel, a
    distribution); arrays and lists of one or more dimensions are not."""
    if isinstance(v, tuple):
        return True
    if isinstance(v, list):
        return False
    try:
        return np.ndim(v) == 0
    except ValueError:
        return True


def predictive_draws(post, rng_key, *args, **kwargs) -> dict[str, np.ndarray]:
    """Posterior predictive of the observed sites at new inputs, one draw per posterior draw."""
    model = post.model
    trace = structure_trace(model, args, kwargs)  # names and shapes: an eager trace cost ~1.3 s
    latent = set(latent_sites(trace))
    drawn = post.flat_samples()
    if (post.model_args or post.model_kwargs) and latent - set(drawn):  # sites the draws do not hold
        try:
            fit_trace = structure_trace(model, post.model_args, post.model_kwargs)
            fitted = set(latent_sites(fit_trace)) | set(observed_sites(fit_trace))
        except Exception:  # noqa: BLE001 - a loaded Posterior given no training data
            fitted = latent
        if latent - fitted:
            raise ValueError(
                f"cannot predict: at these arguments the model has latent sites the fitted model did not "
                f"have ({sorted(latent - fitted)}), which would be drawn from their prior; pass predict() "
                f"the model options of the fit (fitted with {sorted(post.model_kwargs)})")
    flat = {k: v for k, v in drawn.items() if k in latent}
    observed = list(post.observed_data) or [
        n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"] and n not in flat
    ]
    changed = changed_latents(flat, trace)  # a GP's f at new inputs: conditioned, not substituted
    if changed:
        check_trailing_shapes(model, post.model_args, post.model_kwargs, args, kwargs, changed)
        flat.update(conditional_draws(model, post.model_args, post.model_kwargs, flat, changed, args, kwargs,
                                      jax.random.fold_in(rng_key, 7)))
    # one program per model structure, the draws and new inputs as arguments (NumPyro's eager
    # Predictive compiled its scan on every call: ~0.35 s for a GP classifier's 2000 draws)
    out = _predictive("predict", model, flat, args, kwargs, rng_key, observed)
    out.update({n: flat[n] for n in changed})
    return to_chains({k: np.asarray(v) for k, v in out.items()}, post.num_chains)


def finish_samples(model, flat_samples, args, kwargs, rng_key, num_chains, trace=None, loglik=None):
    """From flat latent draws (constrained space) to the Posterior's samples, log likelihood and
    observed data: adds deterministic and recovered sites, reshapes to (chain, draw). ``rng_key``:
    a key, or an int seed for one (made only if needed); ``trace``: the engine's eager trace of
    the model, when it has one; ``loglik``: the flat pointwise log likelihood, when the engine
    computed it with the draws."""
    trace = trace if trace is not None else trace_model(model, args, kwargs)
    rec_names = recovered_site_names(model, args, kwargs, trace=trace)
    det_names = [n for n in deterministic_sites(trace) if n not in flat_samples]
    flat = {k: jnp.asarray(v) for k, v in flat_samples.items()}
    latent_only = {k: v for k, v in flat.items() if k in set(latent_sites(trace))}

    def key(i):  # derived only when used: eager key ops compile (~0.02 s each) in a new process
        return jax.random.fold_in(jax.random.PRNGKey(rng_key) if isinstance(rng_key, int) else rng_key, i)

    if det_names:
        flat.update(_predictive("deterministic", model, latent_only, args, kwargs, key(1), det_names))
    if rec_names:
        flat.update(recover_latents(model, latent_only, args, kwargs, key(2), rec_names))
    if loglik is None:
        loglik = pointwise_log_likelihood(model, latent_only, args, kwargs)
    return (
        to_chains(flat, num_chains),
        to_chains(loglik, num_chains),
        observed_sites(trace),
    )
