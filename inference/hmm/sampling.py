"""Forward-filter backward-sample (FFBS): exact joint draws of the state path from p(z | x).

Filter once (O(T K^2)), then walk backwards drawing z_t from p(z_t | z_{t+1}, x_{0:t}) ∝
filtered_t(i) A[i, z_{t+1}] for all ``num_samples`` paths at once (Gumbel-max on (S, K) logits per
step). This is how the Bayesian HMM (``probmodels.hmm``) recovers its marginalised states per
posterior draw.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from inference.hmm import sample_states
    >>> li = jnp.log(jnp.array([0.6, 0.4]))
    >>> lt = jnp.log(jnp.array([[0.7, 0.3], [0.4, 0.6]]))
    >>> le = jnp.log(jnp.array([[0.5, 0.1], [0.4, 0.3], [0.1, 0.6]]))
    >>> sample_states(jax.random.PRNGKey(0), li, lt, le, 1000).shape
    (1000, 3)
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inference.hmm import _checks
from inference.hmm.forward_backward import UNROLL, forward_pass, over_batch, prepare


def sample_pass(rng_key, log_init, log_trans, log_emission, mask, num_samples: int):
    """FFBS for one sequence: (num_samples, T) int32 paths."""
    log_filtered, _ = forward_pass(log_init, log_trans, log_emission, mask)
    num_steps = log_emission.shape[0]
    keys = jax.random.split(rng_key, num_steps)
    z_last = jax.random.categorical(keys[-1], log_filtered[-1], shape=(num_samples,)).astype(jnp.int32)

    def step(z_next, inputs):
        lf, key, keep_next = inputs
        logits = lf[None, :] + log_trans[:, z_next].T  # (S, K): p(z_t | z_{t+1}, x_{0:t})
        z = jax.random.categorical(key, logits).astype(jnp.int32)
        z = jnp.where(keep_next, z, z_next)
        return z, z

    _, zs = lax.scan(step, z_last, (log_filtered[:-1], keys[:-1], mask[1:]), reverse=True, unroll=UNROLL)
    return jnp.concatenate([zs, z_last[None]]).T


@partial(jax.jit, static_argnames=("num_samples",))
def _run(rng_key, log_init, log_trans, log_emission, mask, num_samples: int):
    if log_emission.ndim == 3:
        keys = jax.random.split(rng_key, log_emission.shape[0])
        draws = over_batch(lambda k, le, m: sample_pass(k, log_init, log_trans, le, m, num_samples),
                           keys, log_emission, mask)
        return jnp.moveaxis(draws, 0, 1)  # (num_samples, B, T)
    return sample_pass(rng_key, log_init, log_trans, log_emission, mask, num_samples)


def _check_key(key):
    if _checks.is_traced(key):
        return key
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key, got shape {key.shape}")
        return key
    arr = np.asarray(key)
    if arr.dtype != np.uint32 or arr.shape != (2,):
        raise TypeError(f"key must be a jax PRNG key (jax.random.PRNGKey(seed)), got {arr.dtype} {arr.shape}")
    return key


def sample_states(key, log_init, log_trans, log_emission, num_samples: int, *, lengths=None):
    """Draw ``num_samples`` state paths from p(z | x): int32 (num_samples, T), or
    (num_samples, B, T) for a padded batch (padded steps repeat the last state)."""
    key = _check_key(key)
    num_samples = _checks.check_positive_int(num_samples, "num_samples")
    return _run(key, *prepare(log_init, log_trans, log_emission, lengths), num_samples=num_samples)
