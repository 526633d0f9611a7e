"""Reading a Bayes-machine model from its trace, for every engine that handles one (EP in
`inference.ep.bayes_machine`, elliptical slice sampling in `inference.ess`).

What is recognised (by distribution types and values in the trace, never by the model's name):

- one observed site whose distribution is `inference.distributions.NoisyStep(f, eps)`;
- its ``f`` is the value of a latent site that is ``MultivariateNormal(loc, cov)`` (or an
  independent ``Normal``): the GP prior ``N(m0, K)``;
- its ``eps`` is either the value of a scalar ``Beta(a0, b0)`` latent site (the noise rate is
  learnt) or a constant (fixed noise, e.g. 0: the "eps=0 machine").

Any other latent or observed site is an error naming it. Prediction at new inputs (`predictor`,
every engine's ``post.predict``) conditions the GP on each posterior draw, the prior at new
inputs read by `inference.conditional.latent_at_new_inputs`.

Example:
    >>> import numpy as np
    >>> from inference._model import trace_model
    >>> from probmodels.gp import bayes_machine
    >>> X = np.random.default_rng(0).uniform(-1, 1, (8, 2)); y = X[:, 0] > 0
    >>> parts = bayes_machine_parts(trace_model(bayes_machine, (X, y), {}))
    >>> parts.latent, parts.eps_site, parts.K.shape, parts.noise_prior
    ('f', 'eps', (8, 8), (1.0, 10.0))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from inference import linalg
from inference.conditional import check_trailing_shapes, chunks, conditioned, latent_at_new_inputs, num_new
from inference.distributions import NoisyStep
from inference.trace_reading import LatentBlock, gaussian_prior, unwrap

JITTER_LADDER = (0.0, 1e-10, 1e-8, 1e-6, 1e-4)  # jitters tried on the GP prior K (relative to its mean diagonal)


def jittered_cholesky(K, name: str = "K"):
    """``(L, jitter)``: the Cholesky factor (JAX's float dtype) of ``K + jitter I`` with the smallest
    jitter on `JITTER_LADDER` that works (`inference.linalg.cholesky_jitter`), as every Bayes-machine
    engine factorises its prior (and its EP posterior covariance); a ValueError naming ``name``.

    Example:
        >>> L, jitter = jittered_cholesky(np.array([[4.0, 2.0], [2.0, 2.0]]))
        >>> L.tolist(), jitter
        ([[2.0, 0.0], [1.0, 1.0]], 0.0)
    """
    L, jitter = linalg.cholesky_jitter(np.asarray(K, dtype=float), name, ladder=JITTER_LADDER,
                                       dtype=jnp.result_type(float))
    return jnp.asarray(L), jitter


class BMParts:
    """The pieces of a Bayes-machine-like model read from one concrete trace."""

    def __init__(self, latent, observed, eps_site, K, prior_mean, t, noise_prior, fixed_eps):
        self.latent, self.observed, self.eps_site = latent, observed, eps_site
        self.K, self.prior_mean, self.t = K, prior_mean, t
        self.noise_prior, self.fixed_eps = noise_prior, fixed_eps

    @property
    def learn_noise(self) -> bool:
        return self.eps_site is not None


def bayes_machine_parts(trace) -> BMParts:
    """Recognise latent GP + NoisyStep likelihood (+ Beta noise rate) in a concrete trace."""
    samples = {n: s for n, s in trace.items() if s["type"] == "sample"}
    noisy = [n for n, s in samples.items() if isinstance(unwrap(s["fn"]), NoisyStep)]
    if len(noisy) != 1:
        raise ValueError(f"expected exactly one NoisyStep likelihood site, found {noisy or 'none'}")
    obs = noisy[0]
    if not samples[obs]["is_observed"]:
        raise ValueError(f"site {obs!r}: the NoisyStep site has no observed labels (pass y=...)")
    others = [n for n, s in samples.items() if s["is_observed"] and n != obs]
    if others:
        raise ValueError(f"site {others[0]!r}: EP for the Bayes machine handles one NoisyStep likelihood; "
                         f"another observed site is not supported")
    nstep = unwrap(samples[obs]["fn"])
    f_val, eps_val = np.asarray(nstep.f), np.asarray(nstep.eps)
    if f_val.ndim != 1:
        raise ValueError(f"site {obs!r}: NoisyStep must have a 1-D batch of labels, got shape {f_val.shape}")
    latents = [n for n, s in samples.items() if not s["is_observed"]]
    f_site = next((n for n in latents if np.shape(samples[n]["value"]) == f_val.shape
                   and np.array_equal(np.asarray(samples[n]["value"]), f_val)), None)
    if f_site is None:
        raise ValueError(f"site {obs!r}: NoisyStep's f must be the value of a latent Gaussian site itself "
                         f"(not a transformation of one)")
    if not isinstance(unwrap(samples[f_site]["fn"]), (dist.MultivariateNormal, dist.Normal)):
        raise ValueError(f"site {f_site!r}: the NoisyStep latent must have a MultivariateNormal (GP) or Normal "
                         f"prior, got {type(unwrap(samples[f_site]['fn'])).__name__}")
    m0, K = (np.asarray(x) for x in gaussian_prior(f_site, samples[f_site], "the Bayes machine"))
    eps_site, noise_prior, fixed_eps = None, None, 0.0
    if not np.all(eps_val == eps_val.ravel()[0]):
        raise ValueError(f"site {obs!r}: NoisyStep's eps must be one scalar noise rate shared by all labels")
    e = float(eps_val.ravel()[0])
    eps_site = next((n for n in latents if n != f_site and np.ndim(samples[n]["value"]) == 0
                     and float(samples[n]["value"]) == e), None)
    if eps_site is not None:
        beta = unwrap(samples[eps_site]["fn"])
        if not isinstance(beta, dist.Beta):
            raise ValueError(f"site {eps_site!r}: the noise rate needs a Beta prior for EP, got {type(beta).__name__}")
        noise_prior = (float(beta.concentration1), float(beta.concentration0))
    elif not (0.0 <= e < 0.5):
        raise ValueError(f"site {obs!r}: a fixed noise rate must lie in [0, 0.5), got {e}")
    else:
        fixed_eps = e
    extra = [n for n in latents if n not in (f_site, eps_site)]
    if extra:
        raise ValueError(f"site {extra[0]!r}: the Bayes machine's engines (EP, and elliptical slice sampling "
                         f"for inference.mcmc) handle only the GP latent ({f_site!r}) and a Beta noise rate; "
                         f"this latent site is not supported (a kernel hyperparameter given as a prior: "
                         f"inference.ep(..., hyper='map' | 'integrate') learns or integrates it by EP's evidence)")
    t = np.where(np.asarray(samples[obs]["value"]) > 0.5, 1.0, -1.0)
    return BMParts(f_site, obs, eps_site, K, m0, t, noise_prior, fixed_eps)


def predictor(model, args, kwargs, parts: BMParts, samples: dict):
    """``post.predict(X_new)`` of every Bayes-machine engine (EP, its sparse form, elliptical slice
    sampling): for every draw of the training latents ``f`` in ``samples``, a draw of the latent at
    the new inputs from the GP conditional ``N(m* + A (f - m0), K** - A Kn*)``, ``A = K*n K^-1``
    (the joint prior read from the model by `inference.conditional.latent_at_new_inputs`; new
    points in chunks of 512 rows, jointly within a chunk), then labels from NoisyStep with that
    draw's eps. The predictive draws are paired with the posterior's: at a training input each
    draw returns its own latent. (EP's predictor drew each new point from its marginal predictive,
    independent of the draws and of the other new points.) In NumPy and float64 (eager JAX would
    compile every operation anew for each shape of new inputs), the prior's factor computed at the
    first call."""
    block = LatentBlock(parts.latent, (len(parts.t),), 0, len(parts.t))
    factor = {}

    def predict(rng_key, *new_args, **new_kwargs):
        check_trailing_shapes(model, args, kwargs, new_args, new_kwargs, [parts.latent])
        if "L" not in factor:
            factor["L"] = linalg.cholesky_jitter(np.asarray(parts.K, float), "prior covariance",
                                                 ladder=JITTER_LADDER, dtype=np.float64)[0]
        m = num_new(new_args, new_kwargs)
        f = np.asarray(samples[parts.latent])
        num_chains, num_draws = f.shape[:2]
        g = f.reshape(num_chains * num_draws, -1) - parts.prior_mean  # (s, n)
        rng = np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())
        out = []
        for c_args, c_kwargs in chunks(new_args, new_kwargs, m):
            K_cross, K_new, m_new = latent_at_new_inputs(model, args, kwargs, block, parts.prior_mean, parts.K,
                                                         c_args, c_kwargs)
            eps = rng.standard_normal((g.shape[0], len(m_new)))
            out.append(conditioned(factor["L"], K_cross, K_new, np.asarray(m_new), g, eps))
        f_new = np.concatenate(out, axis=1)
        if parts.learn_noise:
            eps = np.asarray(samples[parts.eps_site]).reshape(-1, 1)
        else:
            eps = np.full((f_new.shape[0], 1), parts.fixed_eps)
        flip = rng.uniform(size=f_new.shape) < eps
        y_new = ((f_new > 0) != flip).astype(np.int32)
        shape = (num_chains, num_draws, m)
        return {parts.observed: y_new.reshape(shape), parts.latent: f_new.reshape(shape).astype(f.dtype)}

    return predict
