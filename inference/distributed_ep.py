"""Expectation propagation over data shards ("EP as a way of life", Gelman et al. 2020, JMLR 21).

The rows of the data are split into ``K`` shards. The posterior is approximated by
``g(theta) = p0(theta) prod_k g_k(theta)`` with one Gaussian site ``g_k`` per shard. Each iteration
fits, for every shard, the *tilted* distribution ``g_{-k}(theta) p(y_k | theta)`` (the cavity
``g / g_k`` as the prior of the shard's own model) with a local engine -- our EP engine, Laplace, or
NUTS (moment matching) -- on the shard's device, and sets ``g_k = tilted / cavity`` (damped). Only
``d x d`` natural parameters travel between shards; the data never move.

    post = inference.distributed_ep(probmodels.logistic_regression, X, y, num_shards=4)

Scope: models with one latent site, a real vector with a Gaussian prior (``Normal``/``MVN``),
and observed sites whose rows are the data rows; every array argument whose first dimension is
the number of rows is split with them. Shards are placed round-robin on this process's devices
(``jax.local_devices()``): one host for now (docs/distributed.md). With ``local_engine="ep"`` the
shards on different devices are fitted at the same time, one thread per device.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.primitives import Messenger

from inference import _model, _options, compiled, convergence
from inference.ep.driver import gaussian_fit, recognition
from inference.posterior import Posterior
from inference.trace_reading import gaussian_prior

LOCAL_ENGINES = ("ep", "laplace", "mcmc")
_DEFAULT_TOL = {"ep": 1e-4, "laplace": 1e-4, "mcmc": 0.05}


class _CavityPrior(Messenger):
    """Replace the prior of latent site ``name`` by ``N(mean, cov)`` (the cavity)."""

    def __init__(self, fn, name, mean, cov):
        self.name, self.mean, self.cov = name, mean, cov
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["name"] == self.name:
            msg["fn"] = dist.MultivariateNormal(self.mean, covariance_matrix=self.cov)


def _with_cavity(model, name):
    """The tilted model: ``model`` with the prior of ``name`` replaced by the cavity, whose mean and
    covariance are the model arguments ``_cavity_mean`` / ``_cavity_cov``. One program for every
    shard and iteration, so local engines compile it once (see `inference.compiled`)."""

    def tilted(*args, _cavity_mean=None, _cavity_cov=None, **kwargs):
        with _CavityPrior(None, name, jnp.asarray(_cavity_mean), jnp.asarray(_cavity_cov)):
            return model(*args, **kwargs)

    return tilted


def _gaussian_prior(name, site):
    """Mean and covariance of a Normal / MultivariateNormal prior on a real vector."""
    value = np.asarray(site["value"])
    if value.ndim != 1:
        raise ValueError(f"distributed_ep needs the latent site to be a vector; site {name!r} has "
                         f"shape {value.shape}")
    mean, cov = gaussian_prior(name, site, "distributed_ep", "use inference.mcmc or inference.vi on the full data")
    return np.asarray(mean, float), np.asarray(cov, float)


def _log_partition(Q, r):
    """``log int exp(-theta' Q theta / 2 + r' theta) dtheta`` (Q positive definite)."""
    L = np.linalg.cholesky(Q)
    m = np.linalg.solve(Q, r)
    return 0.5 * r @ m - np.sum(np.log(np.diag(L))) + 0.5 * len(r) * np.log(2 * np.pi)


def _is_pd(Q) -> bool:
    try:
        np.linalg.cholesky(Q)
        return True
    except np.linalg.LinAlgError:
        return False


def _split(args, kwargs, n, shards):
    """Per shard: the positional and keyword arguments with every length-n array sliced."""

    def cut(v, idx):
        if hasattr(v, "shape") and np.ndim(v) >= 1 and np.shape(v)[0] == n:
            return np.asarray(v)[idx]
        return v

    return [(tuple(cut(a, idx) for a in args), {k: cut(v, idx) for k, v in kwargs.items()}) for idx in shards]


def _tilted_moments(post, engine, name):
    if engine == "laplace":
        return np.asarray(post.approximation["loc"], float), np.asarray(post.approximation["cov"], float)
    draws = np.asarray(post.samples[name], float).reshape(-1, post.samples[name].shape[-1])
    return draws.mean(axis=0), np.cov(draws.T).reshape(draws.shape[1], draws.shape[1])


@compiled.scoped
def distributed_ep(model, *args, num_shards: int = 4, local_engine: str = "ep", damping: float = 0.5,
                   tol: float | None = None, max_iter: int = 50, num_samples: int = 1000, seed: int = 0,
                   local_options: dict | None = None, progress: bool | None = None,
                   model_kwargs: dict | None = None, **kwargs) -> Posterior:
    """EP over ``num_shards`` data shards with a local engine per shard; returns a `Posterior`.

    Args:
        num_shards: number of row blocks (contiguous, ``np.array_split``).
        local_engine: ``"ep"`` (our EP engine on the shard), ``"laplace"`` or ``"mcmc"`` (NUTS,
            tilted moments from draws: the answer then carries Monte Carlo noise).
        damping: fraction of each site update taken, in (0, 1].
        tol: stop when no posterior mean moves more than ``tol`` sds and no variance changes by
            more than a fraction ``tol`` (default 1e-4; 0.05 for ``"mcmc"``, whose moments are noisy).
        local_options: options passed to the local engine.

    Example:
        >>> import numpy as np, inference, probmodels
        >>> X = np.random.default_rng(0).normal(size=(400, 2)); y = (X[:, 0] > 0).astype(int)
        >>> post = inference.distributed_ep(probmodels.probit_regression, X, y, num_shards=4,
        ...                                 progress=False)
        >>> post.diagnostics["converged"], post.diagnostics["num_shards"]
        (True, 4)
    """
    import inference

    num_shards = _options.positive_int(num_shards, "num_shards")
    if local_engine not in LOCAL_ENGINES:
        raise ValueError(f"local_engine must be one of {LOCAL_ENGINES}, got {local_engine!r}")
    damping = _options.unit_interval(damping, "damping", closed_right=True)
    tol = _DEFAULT_TOL[local_engine] if tol is None else _options.positive_float(tol, "tol")
    max_iter = _options.positive_int(max_iter, "max_iter")
    num_samples = _options.positive_int(num_samples, "num_samples")
    seed = _options.seed(seed)
    show = _options.progress(progress)
    if local_options is not None and not isinstance(local_options, dict):
        raise TypeError(f"local_options must be a dict, got {type(local_options).__name__}")
    local_options = dict(local_options or {})
    kwargs = _options.model_kwargs(kwargs, model_kwargs)
    _options.model_arguments(distributed_ep, model, args, kwargs)

    trace = _model.trace_model(model, args, kwargs, seed)
    _model.refuse_subsampling(trace, "inference.distributed_ep")
    latent = _model.latent_sites(trace)
    if len(latent) != 1:
        raise ValueError(f"distributed_ep needs exactly one latent site (a Gaussian vector); the model "
                         f"has {latent}: stack them into one vector site")
    name = latent[0]
    mean0, cov0 = _gaussian_prior(name, trace[name])
    observed = _model.observed_sites(trace)
    if not observed:
        raise ValueError("model has no observed sites: nothing to shard")
    rows = {np.shape(v)[0] if np.ndim(v) else None for v in observed.values()}
    if len(rows) != 1 or None in rows:
        raise ValueError(f"the observed sites must share their number of rows to be sharded, got "
                         f"{ {k: np.shape(v) for k, v in observed.items()} }")
    n = rows.pop()
    if num_shards > n:
        raise ValueError(f"num_shards={num_shards} exceeds the number of data rows ({n})")
    shards = np.array_split(np.arange(n), num_shards)
    pieces = _split(args, kwargs, n, shards)
    devices = jax.local_devices()
    placement = [devices[k % len(devices)] for k in range(num_shards)]

    d = mean0.size
    Q0 = np.linalg.inv(cov0)
    r0 = Q0 @ mean0
    Qk = np.zeros((num_shards, d, d))
    rk = np.zeros((num_shards, d))
    Q, r = Q0.copy(), r0.copy()
    mean, cov = mean0.copy(), cov0.copy()
    engine_fn = getattr(inference, local_engine)
    opts = {"num_samples": 200, "progress": False} if local_engine != "mcmc" else \
        {"num_samples": 1000, "num_warmup": 500, "num_chains": 1, "progress": False}
    opts.update(local_options)
    ep_opts = {k: v for k, v in local_options.items() if k in ("schedule", "damping", "tol", "max_iter")}
    log_zk = np.zeros(num_shards)
    log_sk = np.zeros(num_shards)
    skipped, change, it = 0, np.inf, 0
    from inference.progress import Bar

    bar = Bar(show, max_iter, f"distributed EP ({num_shards} shards, {local_engine})")
    tilted = _with_cavity(model, name)
    recognised = [None] * num_shards  # each shard's EP recognition (local_engine="ep")
    local_sites = [None] * num_shards  # and its converged sites, the next iteration's start
    def shard_inputs(k, cav_mean, cav_cov):
        a, kw = pieces[k]
        return a, {**kw, "_cavity_mean": cav_mean, "_cavity_cov": cav_cov}

    def local_fit(k, it, cav_mean, cav_cov):
        """Shard ``k``'s tilted moments and local log evidence under the cavity, on its device
        (each call in its own scope: the scope and the default device are per thread)."""
        a, kw = shard_inputs(k, cav_mean, cav_cov)
        with compiled.scope(), jax.default_device(placement[k]):
            if local_engine == "ep":  # the Gaussian fit only: no draws, one compilation; the
                # shard's model is read once, each cavity then only changes the EP problem's prior,
                # and the shard's sites start where its last fit left them
                fit = gaussian_fit(tilted, a, kw, seed=seed, prior=(cav_mean, cav_cov), recognised=recognised[k],
                                   sites=local_sites[k], **ep_opts)
                recognised[k], local_sites[k] = fit.recognised, fit.sites
                return fit.mean, fit.cov, fit.log_evidence
            post = engine_fn(tilted, *a, seed=seed + 7919 * it + k, **opts, **kw)
            return (*_tilted_moments(post, local_engine, name), post.log_evidence)

    # With the local EP, shards on different devices run at the same time, one thread per device
    # (each device's shards in turn): their compiled programs, the first compilation included. The
    # model is read (`recognition`) in this thread beforehand: NumPyro's handler stack is global.
    # Laplace and NUTS read the model at every call, so they run one shard after another, as does
    # everything on one device. Each shard's update depends only on the last iteration's global
    # approximation: the answer does not depend on the order.
    lanes = {}
    for k, dev in enumerate(placement):
        lanes.setdefault(dev, []).append(k)
    pool = ThreadPoolExecutor(max_workers=len(lanes)) if len(lanes) > 1 and local_engine == "ep" else None

    def fits(tasks):
        def lane(ks):
            return {k: local_fit(k, *tasks[k]) for k in ks if k in tasks}

        if pool is None:
            return lane(list(tasks))
        for k, (_, cav_mean, cav_cov) in tasks.items():
            if recognised[k] is None:
                with jax.default_device(placement[k]):
                    recognised[k] = recognition(tilted, *shard_inputs(k, cav_mean, cav_cov), seed)
        out = {}
        for part in pool.map(lane, lanes.values()):
            out.update(part)
        return out

    try:
        for it in range(1, max_iter + 1):
            new_Q, new_r = Qk.copy(), rk.copy()
            tasks, cavities = {}, {}
            for k in range(num_shards):
                Qc, rc = Q - Qk[k], r - rk[k]
                if not _is_pd(Qc):
                    skipped += 1
                    continue
                cav_cov = np.linalg.inv(Qc)
                cav_cov = 0.5 * (cav_cov + cav_cov.T)
                tasks[k] = (it, cav_cov @ rc, cav_cov)
                cavities[k] = (Qc, rc)
            with warnings.catch_warnings():  # the local engines' own warnings (in the worker threads too)
                warnings.simplefilter("ignore")
                results = fits(tasks)
            for k in sorted(results):
                m_t, S_t, local_log_z = results[k]
                Qc, rc = cavities[k]
                S_t = 0.5 * (S_t + S_t.T)
                if not (np.all(np.isfinite(m_t)) and np.all(np.isfinite(S_t)) and _is_pd(S_t)):
                    skipped += 1
                    continue
                Qt = np.linalg.inv(S_t)
                rt = Qt @ m_t
                new_Q[k] = Qk[k] + damping * (Qt - Qc - Qk[k])
                new_r[k] = rk[k] + damping * (rt - rc - rk[k])
                if local_log_z is not None:
                    log_zk[k] = local_log_z
                    log_sk[k] = local_log_z + _log_partition(Qc, rc) - _log_partition(Qt, rt)
                else:
                    log_sk[k] = np.nan
            # a damped step that leaves the global approximation improper is halved
            step = 1.0
            while True:
                cand_Q = Qk + step * (new_Q - Qk)
                cand_r = rk + step * (new_r - rk)
                Q_new = Q0 + cand_Q.sum(axis=0)
                if _is_pd(Q_new) or step < 1e-3:
                    break
                step *= 0.5
            if not _is_pd(Q_new):
                raise FloatingPointError("distributed EP: the global approximation lost positive definiteness; "
                                         "lower damping or use fewer shards")
            Qk, rk = cand_Q, cand_r
            Q, r = Q_new, Q0 @ mean0 + rk.sum(axis=0)
            new_cov = np.linalg.inv(Q)
            new_cov = 0.5 * (new_cov + new_cov.T)
            new_mean = new_cov @ r
            sd = np.sqrt(np.diag(new_cov))
            change = float(max(np.max(np.abs(new_mean - mean) / sd),
                               np.max(np.abs(np.diag(new_cov) - np.diag(cov)) / np.diag(new_cov))))
            mean, cov = new_mean, new_cov
            if bar is not None:
                bar.update()
                bar.set_postfix(change=f"{change:.2e}")
            if change <= tol:
                break
    finally:
        if pool is not None:
            pool.shutdown()
    if bar is not None:
        bar.close()
    converged = bool(change <= tol)
    if not converged:
        warnings.warn(f"distributed EP did not converge in {it} iterations (largest change {change:.3g} > "
                      f"tol={tol:g}); lower damping, raise max_iter, or use more local draws", RuntimeWarning,
                      skip_file_prefixes=_options.INTERNAL)

    log_z = None
    if np.all(np.isfinite(log_sk)):
        log_z = float(_log_partition(Q, r) - _log_partition(Q0, r0) + log_sk.sum())
    key = jax.random.PRNGKey(seed)
    L = np.linalg.cholesky(cov)
    eps = np.asarray(jax.random.normal(key, (num_samples, d), dtype=jnp.result_type(float)))
    draws = mean + eps @ L.T
    log_q = -0.5 * np.sum(eps ** 2, axis=1) - np.sum(np.log(np.diag(L))) - 0.5 * d * np.log(2 * np.pi)
    flat = {name: draws.reshape((num_samples,) + np.shape(trace[name]["value"]))}
    lp = _model.log_joint(model, flat, args, kwargs)
    samples, log_lik, observed_data = _model.finish_samples(model, flat, args, kwargs, jax.random.fold_in(key, 3), 1)
    diagnostics = {
        "converged": convergence.ep(change, tol, log_z), "iterations": int(it), "max_change": float(change),
        "distributed": True, "num_shards": int(num_shards), "local_engine": local_engine, "skipped_shard_updates": int(skipped),
        "devices": [str(dv) for dv in placement], "shard_sizes": [int(len(s)) for s in shards],
    }
    return Posterior(
        engine="ep", samples=samples, log_likelihood=log_lik, observed_data=observed_data,
        sample_stats={"lp": lp[None], "log_q": log_q[None]}, log_evidence=log_z,
        evidence_method="ep" if log_z is not None else None, diagnostics=diagnostics,
        approximation={"mean": mean, "cov": cov, "site_precision": Qk, "site_shift": rk,
                       "site_log_evidence": log_zk},
        model=model, model_args=tuple(args), model_kwargs=dict(kwargs), seed=seed,
    )
