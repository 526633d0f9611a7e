"""From engine draws to a :class:`~inference.posterior.Posterior` for spike-and-slab models:
deterministic sites and pointwise log likelihood (shared helpers), the model's log joint ``lp``
at each draw, diagnostics, and the predictor for new inputs.

Predictions (``Posterior.predict``) hold the likelihood site's draws (``y``: 0/1 labels or real
responses) and ``<y>_mean``: for MCMC and VI ``E[y | draw]`` (``Phi(x^T w + b)`` or ``x^T w + b``)
at each draw, for EP the closed-form predictive of EP's Gaussian ``Q`` (the same at every draw);
either way its average over draws is the predictive probability or mean.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from inference import _model
from inference._model import finish_samples, trace_model
from inference.posterior import Posterior
from inference.spikeslab.structure import Problem, extract


def log_joint(model, args, kwargs, flat: dict, batch_size: int = 256) -> np.ndarray:
    """``log p(y, z, w[, tau])`` of the model at each flat draw, ``batch_size`` draws at a time."""
    n = next(iter(flat.values())).shape[0]
    return _model.log_joint(model, flat, args, kwargs, batch_size=min(batch_size, n))


def flat_draws(prob: Problem, z, w, precision=None) -> dict:
    out = {prob.z_site: np.asarray(z, np.int32), prob.w_site: np.asarray(w)}
    if prob.precision_site is not None:
        out[prob.precision_site] = np.asarray(precision)
    return out


def build(engine, prob: Problem, model, args, kwargs, flat, num_chains, seed, *, log_q=None, log_evidence=None,
          evidence_method=None, diagnostics=None, approximation=None, predictor=None) -> Posterior:
    key = jax.random.PRNGKey(seed)
    samples, loglik, observed = finish_samples(model, flat, args, kwargs, key, num_chains)
    stats = {}
    if log_q is not None:
        to_chains = lambda v: np.asarray(v).reshape((num_chains, -1))  # noqa: E731
        stats = {"lp": to_chains(log_joint(model, args, kwargs, flat)), "log_q": to_chains(log_q)}
    return Posterior(engine=engine, samples=samples, log_likelihood=loglik, observed_data=observed,
                     sample_stats=stats, log_evidence=log_evidence, evidence_method=evidence_method,
                     diagnostics=diagnostics, approximation=approximation or {},
                     predictor=predictor, model=model, model_args=tuple(args), model_kwargs=dict(kwargs), seed=seed)


def new_inputs(model, args, kwargs, num_features: int):
    """Raw ``(X, b, c)`` of the likelihood at new inputs (undoing the unit-noise scaling); new
    inputs with other than the fit's ``num_features`` columns are refused, naming both."""
    prob = extract(model, args, kwargs, trace_model(model, args, kwargs))
    if prob.X.shape[1] != num_features:
        raise ValueError(f"predict: the new inputs have {prob.X.shape[1]} features (columns of X), the fit "
                         f"had {num_features}")
    c = prob.noise_scale
    return prob, jnp.asarray(prob.X * c[:, None]), jnp.asarray(prob.offset * c), jnp.asarray(c)


def draw_predictor(model, prob: Problem, samples_fn):
    """Predictor for MCMC / VI: ``E[y | draw]`` and a ``y`` draw at each posterior draw.

    ``samples_fn()`` returns ``(w, precision)`` with leading ``(chain, draw)`` axes."""

    def predictor(rng_key, *args, **kwargs):
        _, X, b, c = new_inputs(model, args, kwargs, prob.X.shape[1])
        w, tau = samples_fn()
        y, mean = _draw_predict(rng_key, jnp.asarray(w), jnp.asarray(tau), X, b, c, prob.likelihood == "probit")
        return {prob.y_site: np.asarray(y), f"{prob.y_site}_mean": np.asarray(mean)}

    return predictor


@partial(jax.jit, static_argnames=("probit",))
def _draw_predict(rng_key, w, tau, X, b, c, probit):
    f = jnp.einsum("cdj,ij->cdi", w, X) + b
    if probit:
        mean = jax.scipy.stats.norm.cdf(f)
        return jax.random.bernoulli(rng_key, mean).astype(jnp.int32), mean
    return f + c / jnp.sqrt(tau)[..., None] * jax.random.normal(rng_key, f.shape), f
