"""Discrete latents that a model marginalises out and the engines recover per posterior draw.

A model that sums out mixture assignments or HMM states declares, after computing the marginal
likelihood, how to draw the latent from its conditional posterior given the other sites::

    log_resp = ...                                     # (n, K) log responsibilities
    inference.recovered("z", lambda key: jax.random.categorical(key, log_resp))

During inference this is a no-op (the model's density is unchanged). After inference every engine
re-runs the model on each draw with recovery switched on, and the value is stored as a posterior
site (so it reaches ArviZ as draws). Example:

    >>> import jax, jax.numpy as jnp, numpyro
    >>> from inference.latent import recovered, recovering
    >>> def model():
    ...     recovered("z", lambda key: jax.random.bernoulli(key, 0.5, (3,)).astype(jnp.int32))
    >>> with numpyro.handlers.seed(rng_seed=0), recovering():
    ...     tr = numpyro.handlers.trace(model).get_trace()
    >>> tr["z"]["value"].shape
    (3,)
"""

from __future__ import annotations

import contextlib

import numpyro

_STATE = {"on": False}


def recovered(name: str, sample_fn) -> None:
    """Declare discrete latent ``name``; ``sample_fn(rng_key)`` draws it given the other sites.

    Example (a two-component mixture with its assignments summed out, then recovered per draw):
        >>> import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
        >>> import inference
        >>> def mixture(x):
        ...     mu = numpyro.sample("mu", dist.Normal(jnp.zeros(2), 5.0).to_event(1))
        ...     logp = jnp.log(0.5) + dist.Normal(mu, 1.0).log_prob(x[:, None])   # (n, 2)
        ...     numpyro.factor("x", jax.nn.logsumexp(logp, axis=1).sum())
        ...     inference.recovered("z", lambda key: jax.random.categorical(key, logp))
        >>> x = np.r_[np.full(5, -3.0), np.full(5, 3.0)]
        >>> post = inference.laplace(mixture, x, num_samples=20)
        >>> post.samples["z"].shape, post.samples["z"].dtype.kind
        ((1, 20, 10), 'i')
    """
    if _STATE["on"]:
        numpyro.deterministic(name, sample_fn(numpyro.prng_key()))


def is_recovering() -> bool:
    return _STATE["on"]


@contextlib.contextmanager
def recovering():
    """Switch recovery on while tracing (the flag is read when the model is traced)."""
    old = _STATE["on"]
    _STATE["on"] = True
    try:
        yield
    finally:
        _STATE["on"] = old
