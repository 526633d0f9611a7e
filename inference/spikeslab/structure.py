"""Recognise a spike-and-slab model from its NumPyro trace and read off the arrays the engines use.

Supported: one :class:`SpikeSlab` weight site ``w`` (d,), its Bernoulli indicator site ``z`` (d,),
and one likelihood site whose distribution depends on ``w`` only through ``f = X w + b``:

* ``Normal(f, c)`` -- fixed noise, or ``Normal(f, c / sqrt(tau))`` with a ``Gamma`` site ``tau``
  whose slab is ``SpikeSlab(z, s / sqrt(tau))`` (conjugate Normal-Gamma);
* ``Bernoulli`` with probability ``Phi(f)`` (probit).

``X`` and ``b`` are found by differentiating the likelihood's parameters with respect to ``w`` and
checked at a random point, so user-written models are recognised too; anything else raises a
``ValueError`` naming the site. Observations are returned in unit-noise form: Gaussian rows are
divided by ``c`` (``log_scale_adjust`` = -sum log c restores the evidence); probit labels as +-1.

Example:
    >>> import numpy as np
    >>> from probmodels.spike_slab import spike_and_slab_probit
    >>> from inference._model import trace_model
    >>> X = np.eye(3); args, kw = (X, np.array([1, 0, 1])), {}
    >>> prob = extract(spike_and_slab_probit, args, kw, trace_model(spike_and_slab_probit, args, kw))
    >>> prob.likelihood, prob.X.shape, prob.y.tolist()
    ('probit', (3, 3), [1.0, -1.0, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from scipy.special import ndtr, ndtri
from numpyro import handlers

from inference import compiled
from inference.spikeslab.distribution import SpikeSlab, is_spike_slab
from inference.trace_reading import unwrap


@dataclass(frozen=True)
class Problem:
    """A spike-and-slab model in engine form (numpy arrays, unit-noise scaling applied)."""

    likelihood: str  # "gaussian" | "probit"
    z_site: str
    w_site: str
    y_site: str
    precision_site: str | None
    X: np.ndarray  # (n, d), rows divided by the noise scale c for "gaussian"
    y: np.ndarray | None  # (n,) scaled residual targets (gaussian) or +-1 labels (probit)
    offset: np.ndarray  # (n,) b, on the probit scale or divided by c
    p_incl: np.ndarray  # (d,)
    slab_var: np.ndarray  # (d,) slab variance at precision = 1
    noise_prior: tuple[float, float] | None  # Gamma (shape, rate) of the precision, or None (unit)
    log_scale_adjust: float  # -sum(log c) for gaussian, 0 for probit
    noise_scale: np.ndarray  # (n,) c: the rows' noise scale at precision 1 (ones for probit)

    @property
    def num_features(self) -> int:
        return int(self.X.shape[1])


def spike_slab_sites(trace) -> list[str]:
    return [n for n, s in trace.items() if s["type"] == "sample" and is_spike_slab(s["fn"])]


def matches(trace) -> bool:
    """Does the traced model contain a spike-and-slab site?"""
    return bool(spike_slab_sites(trace))


def prior_hyperparameters(model, args, kwargs, trace) -> list[str]:
    """The continuous unobserved sites that only the indicators or the weights depend on: the
    prior's hyperparameters (``p_incl``, ``slab_scale`` given as priors), which the engines take as
    numbers and ``inference.ep(..., hyper=...)`` learns (`inference.hyper.ss_fit`). A Gamma noise
    precision is not one (the likelihood depends on it). Read from NumPyro's provenance tracking
    (an abstract run), once per model structure."""
    ss = spike_slab_sites(trace)
    candidates = [n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]
                  and n not in ss and not s["fn"].support.is_discrete]
    if len(ss) != 1 or not candidates:
        return []

    def find():
        from numpyro.infer.inspect import get_model_relations

        parents = get_model_relations(model, args, kwargs)["sample_sample"]
        prior_sites = set(ss) | {n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]
                                 and s["fn"].support.is_discrete}
        children = {n: {c for c, ps in parents.items() if n in ps} for n in candidates}
        return [n for n in candidates if children[n] and children[n] <= prior_sites]

    return compiled.memo("spikeslab-prior-hyperparameters", model, args, kwargs, find)


def extract(model, args, kwargs, trace) -> Problem:
    """Read (X, y, b, p_incl, slab, noise) from a traced spike-and-slab model, or raise."""
    ss = spike_slab_sites(trace)
    if len(ss) != 1:
        raise ValueError(f"spike-and-slab engines support exactly one SpikeSlab site, found {ss}")
    w_name = ss[0]
    w_val = np.asarray(trace[w_name]["value"])
    if w_val.ndim != 1:
        raise ValueError(f"site {w_name!r}: the spike-and-slab weights must be a vector, got shape {w_val.shape}")
    d = w_val.shape[0]
    z_name, prec_name, y_name = None, None, None
    for name, site in trace.items():
        if site["type"] != "sample" or name == w_name:
            continue
        base = unwrap(site["fn"])
        if site["is_observed"]:
            if y_name is not None:
                raise ValueError(f"site {name!r}: only one likelihood site is supported (also {y_name!r})")
            y_name = name
        elif isinstance(base, (dist.BernoulliProbs, dist.BernoulliLogits)) and np.shape(site["value"]) == (d,) \
                and z_name is None:
            z_name = name
        elif isinstance(base, dist.Gamma) and np.shape(site["value"]) == () and prec_name is None:
            prec_name = name
        elif y_name is None and _is_likelihood(base):
            y_name = name  # predictive use: the likelihood site is not observed
        else:
            raise ValueError(
                f"site {name!r}: a spike-and-slab model may hold only the indicators (Bernoulli), the "
                f"weights (SpikeSlab), a Gamma noise precision and one Normal/probit likelihood; "
                f"{type(base).__name__} here is not supported"
            )
    if z_name is None:
        raise ValueError(f"site {w_name!r}: no Bernoulli indicator site of shape ({d},) found for it")
    if y_name is None:
        raise ValueError("no likelihood site found: the model needs an observed Normal or probit site")
    z_fn = trace[z_name]["fn"]
    p = np.exp(np.asarray(_per_coordinate_log_prob(z_fn, d)))
    if not np.all((p > 0) & (p < 1)):
        raise ValueError(f"site {z_name!r}: inclusion probabilities must lie strictly inside (0, 1)")
    observed = trace[y_name]["is_observed"]
    y_obs = np.asarray(trace[y_name]["value"], dtype=float) if observed else None

    base_lik = unwrap(trace[y_name]["fn"])
    if isinstance(base_lik, dist.Normal):
        lik = "gaussian"
    elif isinstance(base_lik, (dist.BernoulliProbs, dist.BernoulliLogits)):
        lik = "probit"
    else:
        raise ValueError(f"site {y_name!r}: likelihood {type(base_lik).__name__} is not supported by the "
                         f"spike-and-slab engines (Normal or probit Bernoulli)")
    n = int(np.size(trace[y_name]["value"]))

    probe, param = _probe_functions(model, args, kwargs, (z_name, w_name, prec_name, y_name), lik, n, d)
    (m0, c, slab1), (c4, slab4), jac = jax.tree.map(lambda a: np.asarray(a, dtype=float), probe())
    if lik == "gaussian":
        b = m0
        X = jac
    else:
        b = np.asarray(ndtri(np.clip(m0, 1e-300, 1 - 1e-16)), dtype=float)
        X = jac / (np.exp(-0.5 * b**2) / np.sqrt(2 * np.pi))[:, None]
    _check_affine(param, X, b, lik, y_name, w_name)
    noise_prior, log_adj = None, 0.0
    if lik == "gaussian":
        noise_prior = _noise_structure(prec_name, trace, c, c4, slab1, slab4, y_name, w_name)
        log_adj = -float(np.sum(np.log(c)))
        y = None if y_obs is None else (y_obs - b) / c
        X, b = X / c[:, None], b / c
    else:
        if prec_name is not None:
            raise ValueError(f"site {prec_name!r}: a noise precision has no role in a probit likelihood")
        c = np.ones(n)
        y = None if y_obs is None else np.where(y_obs > 0, 1.0, -1.0)
    return Problem(lik, z_name, w_name, y_name, prec_name, X, y, b, p, slab1**2, noise_prior, log_adj, c)


def _probe_functions(model, args, kwargs, names, lik, n, d):
    """``probe() -> ((mean, scale, slab) at w = 0, tau = 1; (scale, slab) at tau = 4; d mean / d w)``
    and ``param(w)`` (mean or probability at ``w``), compiled once per model and argument
    structure by `inference.compiled` (array arguments traced, so repeated fits of the same model
    and shapes -- splits, engines, predictions -- do not recompile; a model that needs concrete
    arrays gets its data as constants)."""
    (probe_j, param_j), arrays = compiled.get("spikeslab-probe", model, args, kwargs, (names, lik, n, d),
                                              lambda rebuild: _make_probes(model, rebuild, names, lik, n, d))
    out = probe_j(arrays)
    return (lambda: out), (lambda w: param_j(arrays, w))


def _make_probes(model, rebuild, names, lik, n, d):
    z_name, w_name, prec_name, y_name = names

    def params(arrays, w, tau):
        """(mean or probability (n,), noise scale (n,), slab scale (d,)) with every z_j = 1."""
        args, kwargs = rebuild(arrays)
        data = {z_name: jnp.ones(d, jnp.int32), w_name: w}
        if prec_name is not None:
            data[prec_name] = tau
        with handlers.seed(rng_seed=0):
            tr = handlers.trace(handlers.substitute(model, data=data)).get_trace(*args, **kwargs)
        fn, wfn = unwrap(tr[y_name]["fn"]), unwrap(tr[w_name]["fn"])
        mean = fn.loc if lik == "gaussian" else fn.probs
        scale = fn.scale if lik == "gaussian" else jnp.ones(())
        return jnp.broadcast_to(mean, (n,)), jnp.broadcast_to(scale, (n,)), jnp.broadcast_to(wfn.scale, (d,))

    @jax.jit
    def probe(arrays):
        zero = jnp.zeros(d)
        jac = (jax.jacrev if n <= d else jax.jacfwd)(lambda w: params(arrays, w, 1.0)[0])(zero)
        return params(arrays, zero, 1.0), params(arrays, zero, 4.0)[1:], jac

    @jax.jit
    def param(arrays, w):
        return params(arrays, w, 1.0)[0]

    return probe, param


def _is_likelihood(base) -> bool:
    return isinstance(base, (dist.Normal, dist.BernoulliProbs, dist.BernoulliLogits))


def _per_coordinate_log_prob(fn, d):
    base = unwrap(fn)
    return np.broadcast_to(-np.logaddexp(0.0, -np.asarray(base.logits, dtype=float)), (d,))


def _check_affine(param, X, b, lik, y_name, w_name):
    d = X.shape[1]
    rows = np.sqrt(np.maximum((X**2).sum(1).mean(), 1e-30))
    w = np.random.default_rng(0).normal(size=d) * 0.7 / rows
    got = np.asarray(param(jnp.asarray(w)), dtype=float)
    f = X @ w + b
    if lik == "gaussian":
        ok = np.allclose(got, f, rtol=1e-6, atol=1e-6 * (1 + np.abs(f).max()))
        what = "its mean is not affine in"
    else:
        ok = np.allclose(got, ndtr(f), rtol=1e-5, atol=1e-6)
        what = "its probability is not Phi(x^T w + b) (only the probit link is supported) in"
    if not ok:
        raise ValueError(f"site {y_name!r}: {what} site {w_name!r}")


def _noise_structure(prec_name, trace, c, c4, slab1, slab4, y_name, w_name):
    if prec_name is None:
        return None
    if not np.allclose(c4, c / 2, rtol=1e-8):
        raise ValueError(f"site {y_name!r}: its scale must be c / sqrt({prec_name}) for a Gamma noise precision")
    if not np.allclose(slab4, slab1 / 2, rtol=1e-8):
        raise ValueError(
            f"site {w_name!r}: with an unknown noise precision the slab scale must be "
            f"slab_scale / sqrt({prec_name}) (conjugate Normal-Gamma), so that w and {prec_name} "
            f"integrate out in closed form"
        )
    gam = unwrap(trace[prec_name]["fn"])
    return float(gam.concentration), float(gam.rate)


__all__ = ["Problem", "extract", "matches", "prior_hyperparameters", "SpikeSlab"]
