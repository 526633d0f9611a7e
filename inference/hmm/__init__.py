"""Message passing for discrete-state hidden Markov models (all in JAX, all jittable).

Arrays in, NamedTuples out: ``log_init`` (K,), ``log_trans`` (K, K) and ``log_emission`` (T, K)
(or a padded batch (B, T, K) with ``lengths``). Sequential ``lax.scan`` passes by default,
associative-scan passes with ``parallel=True``.

    >>> import jax, jax.numpy as jnp
    >>> from inference import hmm
    >>> li, lt = jnp.log(jnp.array([0.6, 0.4])), jnp.log(jnp.array([[0.7, 0.3], [0.4, 0.6]]))
    >>> le = jnp.log(jnp.array([[0.5, 0.1], [0.4, 0.3], [0.1, 0.6]]))
    >>> ll, marginals = hmm.forward_backward(li, lt, le)
    >>> path, log_prob = hmm.viterbi(li, lt, le)
    >>> hmm.sample_states(jax.random.PRNGKey(0), li, lt, le, 5).shape
    (5, 3)
"""

from inference.hmm.baum_welch import BaumWelch, baum_welch, emission_log_likelihood
from inference.hmm.forward_backward import (
    Filtered,
    ForwardBackward,
    Smoothed,
    forward_backward,
    forward_filter,
    log_likelihood,
    pairwise_marginals,
    smoother,
)
from inference.hmm.sampling import sample_states
from inference.hmm.viterbi import Viterbi, viterbi

__all__ = [
    "BaumWelch",
    "Filtered",
    "ForwardBackward",
    "Smoothed",
    "Viterbi",
    "baum_welch",
    "emission_log_likelihood",
    "forward_backward",
    "forward_filter",
    "log_likelihood",
    "pairwise_marginals",
    "sample_states",
    "smoother",
    "viterbi",
]
