"""Likelihood and prior distributions that the engines recognise by type.

Models use these so the engines can see structure a plain NumPyro distribution hides (a step
likelihood has no gradient, a spike-and-slab site mixes a point mass with a Gaussian).
Each class is an ordinary NumPyro distribution: sampling and ``log_prob`` work everywhere.
"""


# --------------------------------------------------------------------------- noisy step (Bayes machine)

import jax as _jax  # noqa: E402
import jax.numpy as _jnp  # noqa: E402
from numpyro.distributions import Distribution as _Distribution  # noqa: E402
from numpyro.distributions import constraints as _constraints  # noqa: E402
from numpyro.distributions.util import promote_shapes as _promote_shapes  # noqa: E402


class NoisyStep(_Distribution):
    """Labels in {0, 1} with ``P(y = 1 | f, eps) = eps + (1 - 2 eps) * step(f)``.

    The Bayes machine's likelihood: the sign of the latent ``f`` gives the label, flipped with
    probability ``eps`` (label noise). With labels ``t = 2 y - 1`` in {-1, +1} this is
    ``P(t | f, eps) = eps + (1 - 2 eps) * step(t f)``; ``step(0)`` counts as 0 (a null set under any
    continuous ``f``). The log density is piecewise constant in ``f``, so it has no useful gradient
    there: MCMC uses elliptical slice sampling (`inference.ess`), EP closed-form moments
    (`inference.ep.bayes_machine`).

    Example:
        >>> import jax.numpy as jnp
        >>> d = NoisyStep(jnp.array([2.0, -1.0]), 0.1)
        >>> [round(float(v), 4) for v in jnp.exp(d.log_prob(jnp.array([1, 1])))]
        [0.9, 0.1]
    """

    arg_constraints = {"f": _constraints.real, "eps": _constraints.unit_interval}
    support = _constraints.boolean
    has_enumerate_support = True
    pytree_data_fields = ("f", "eps")

    def __init__(self, f, eps=0.0, *, validate_args=None):
        self.f, self.eps = _promote_shapes(f, eps)
        batch_shape = _jax.lax.broadcast_shapes(_jnp.shape(f), _jnp.shape(eps))
        self.f = _jnp.broadcast_to(self.f, batch_shape)
        self.eps = _jnp.broadcast_to(self.eps, batch_shape)
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    @property
    def probs(self):
        """``P(y = 1)``."""
        return self.eps + (1.0 - 2.0 * self.eps) * (self.f > 0)

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        p = self.probs
        return p * (1.0 - p)

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        flip = _jax.random.uniform(key, shape) < self.eps
        sign = _jnp.broadcast_to(self.f > 0, shape)
        return _jnp.where(flip, ~sign, sign).astype(_jnp.int32)

    def log_prob(self, value):
        # Right label (sign of f agrees with y) has probability 1 - eps, a wrong one eps.
        agree = (value > 0.5) == (self.f > 0)
        eps = _jnp.asarray(self.eps, dtype=_jnp.result_type(self.f, float))
        return _jnp.where(agree, _jnp.log1p(-eps), _jnp.log(eps))

    def enumerate_support(self, expand=True):
        values = _jnp.arange(2, dtype=_jnp.int32).reshape((2,) + (1,) * len(self.batch_shape))
        if expand:
            values = _jnp.broadcast_to(values, (2,) + tuple(self.batch_shape))
        return values


# --------------------------------------------------------------------------- ordered probit (ordinal regression)


class OrderedProbit(_Distribution):
    """Ordered categories ``y`` in {0, ..., K-1} from a latent ``eta``: ``P(y = k | eta) =
    Phi((b_k - eta) / s) - Phi((b_{k-1} - eta) / s)`` with cut points ``b_1 < ... < b_{K-1}``
    (``b_0 = -inf``, ``b_K = +inf``) and noise scale ``s`` (Chu & Ghahramani 2005).

    ``log_prob`` is computed in log space (log normal CDFs and their difference), finite and with
    finite gradients for any finite ``eta``, so NUTS, VI and Laplace use it directly; EP reads it
    as a closed-form ordinal site (`inference.ep.site_types.Ordinal`).

    Example:
        >>> import jax.numpy as jnp
        >>> d = OrderedProbit(jnp.array([0.0, 0.0]), jnp.array([-1.0, 1.0]))
        >>> [round(float(p), 4) for p in jnp.exp(d.log_prob(jnp.array([0, 1])))]
        [0.1587, 0.6827]
    """

    arg_constraints = {"eta": _constraints.real, "cutpoints": _constraints.ordered_vector,
                       "scale": _constraints.positive}
    pytree_data_fields = ("eta", "cutpoints", "scale")

    def __init__(self, eta, cutpoints, scale=1.0, *, validate_args=None):
        self.eta = _jnp.asarray(eta)
        self.cutpoints = _jnp.asarray(cutpoints)
        self.scale = _jnp.asarray(scale, self.eta.dtype)
        super().__init__(batch_shape=_jnp.shape(self.eta), validate_args=validate_args)

    @_constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return _constraints.integer_interval(0, self.cutpoints.shape[-1])

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        latent = self.eta + self.scale * _jax.random.normal(key, shape, self.eta.dtype)
        return _jnp.sum(latent[..., None] > self.cutpoints, axis=-1)

    def log_prob(self, value):
        from jax.scipy.special import log_ndtr

        from inference.ep.sites import log_diff_ndtr

        last = self.cutpoints.shape[-1]  # K - 1
        y = _jnp.asarray(value).astype(_jnp.int32)
        z_hi = (_jnp.take(self.cutpoints, _jnp.clip(y, 0, last - 1)) - self.eta) / self.scale
        z_lo = (_jnp.take(self.cutpoints, _jnp.clip(y - 1, 0, last - 1)) - self.eta) / self.scale
        first, top = y <= 0, y >= last
        # the middle form on safe arguments (it is not selected at the extremes; no NaN gradient)
        mid = log_diff_ndtr(_jnp.where(top, z_lo + 1.0, z_hi), _jnp.where(first, z_hi - 1.0, z_lo))
        return _jnp.where(first, log_ndtr(z_hi), _jnp.where(top, log_ndtr(-z_lo), mid))
