"""Bayesian linear dynamical system with the states integrated out by the Kalman filter.

``x_0 ~ N(0, diag(init_scale^2))``, ``x_t = F x_{t-1} + N(0, Q)``, ``y_t = offset + H x_t +
N(0, R)`` with N = ``state_dim`` states and D observed columns. The ``obs`` site is one
:class:`LinearGaussianSSM` whose ``log_prob`` is the Kalman filter's exact marginal likelihood
(:mod:`inference.kalman`), as ``probmodels.hmm`` sums its states by the forward algorithm; the
states are declared with :func:`inference.latent.recovered` and every engine draws them per
posterior draw by forward-filter backward-sample (site ``states``, (T, N) or (B, T, N)).

Identification. Any invertible A maps (F, Q, H) to (A F A^-1, A Q A', H A^-1) with the same
likelihood, so the parameters are pinned down as in dynamic factor analysis: ``Q`` is diagonal
and the top N x N block of ``H`` is unit lower triangular (ones on the diagonal, zeros above), so
state k is the signal of column k of ``obs`` (order the columns accordingly). The only A that
keeps both is the identity (the LDL' factorisation is unique), so the posterior has one labelling
and chains agree. This needs D >= N.

Sites and priors ("data-scaled" defaults use the observed (non-NaN) values per column, with the
numbers in brackets when ``obs`` is None; m_d, s_d are column d's mean and standard deviation):

- ``transition`` F (N, N): every entry ``Normal(0, transition_scale)``, default 1.
- ``loadings`` (the free entries of H: below the diagonal of the top block, then every entry of
  rows N..D-1, row by row): ``Normal(0, loading_scale * s_d / min_{k<N} s_k)`` for an entry in
  row d, ``loading_scale`` default 2 [the scale 2]; ``emission`` (D, N) is H, a deterministic site.
  (No ``loadings`` site when D = N = 1.)
- ``state_noise`` (N,): standard deviations, Q = diag(state_noise^2), ``HalfNormal(s_k)`` [1].
- ``obs_noise`` (D,): standard deviations, R = diag(obs_noise^2), ``HalfNormal(s_d)`` [1].
- ``offset`` (D,): ``Normal(m_d, 2 s_d)`` [Normal(0, 2)].
- ``init_scale``: the start's prior standard deviations, default ``2 s_k`` for state k [2].

Missing values: NaN entries of ``obs`` are missing (the filter skips them); a batch (B, T, D) of
sequences shares the parameters, shorter ones padded with NaN rows. The log likelihood for LOO is
one number per sequence. Every engine starts from `start` (a data-based guess, a new bootstrap per
chain), not from the prior.

Example:
    >>> import numpy as np, numpyro
    >>> from probmodels.lds import lds
    >>> y = np.random.default_rng(0).normal(size=(40, 2))
    >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(lds, 0)).get_trace(y, state_dim=2)
    >>> [n for n in tr], tr["emission"]["value"].shape
    (['transition', 'loadings', 'emission', 'state_noise', 'obs_noise', 'offset', 'obs'], (2, 2))
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from inference.hmm._checks import check_positive_int, is_traced
from inference.kalman import _checks as kalman_checks
from inference.kalman.univariate import log_likelihood_diagonal
from inference.kalman.linalg import psd_sqrt
from inference.kalman.sampling import sample_pass
from inference.latent import Start, bootstrap_weights, recovered


# ----------------------------------------------------------------------------- distribution
class LinearGaussianSSM(dist.Distribution):
    """Observation sequences of a linear Gaussian state-space model with diagonal observation
    noise ``R = diag(obs_var)`` and the states integrated out: ``log_prob`` is the Kalman filter
    (the univariate form, :mod:`inference.kalman.univariate`), ``sample`` simulates. Event shape
    (T, D); batch shape (B,) for a batch. NaN entries of a value are missing (they do not count)."""

    pytree_data_fields = ("init_mean", "init_cov", "F", "Q", "H", "obs_var", "offset")
    pytree_aux_fields = ("num_steps",)
    support = constraints.independent(constraints.real, 2)

    def __init__(self, init_mean, init_cov, F, Q, H, obs_var, offset, num_steps: int, batch_shape=(), *,
                 validate_args=None):
        self.init_mean, self.init_cov, self.F, self.Q, self.H = init_mean, init_cov, F, Q, H
        self.obs_var, self.offset, self.num_steps = obs_var, offset, int(num_steps)
        super().__init__(batch_shape=tuple(batch_shape), event_shape=(self.num_steps, jnp.shape(H)[0]),
                         validate_args=validate_args)

    def _params(self):
        return self.init_mean, self.init_cov, self.F, self.Q, self.H, jnp.diag(self.obs_var)

    def log_prob(self, value):
        params = (self.init_mean, self.init_cov, self.F, self.Q, self.H)
        return _log_prob(params, self.obs_var, self.offset, value)

    def sample_states(self, key, value):
        """One forward-filter backward-sample draw of the states given ``value``: (…, T, N)."""
        return _sample_states(key, self._params(), self.offset, value)

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + self.batch_shape
        return simulate(key, self._params(), self.offset, self.num_steps, shape)[1]


def _flat(value):
    return jnp.reshape(value, (-1,) + jnp.shape(value)[-2:])


@jax.jit
def _log_prob(params, obs_var, offset, value):
    one = lambda y: log_likelihood_diagonal(params, obs_var, y - offset)  # noqa: E731
    return jax.vmap(one)(_flat(value)).reshape(jnp.shape(value)[:-2])


@jax.jit
def _sample_states(key, params, offset, value):
    flat = _flat(value)
    keys = jax.random.split(key, flat.shape[0])
    draws = jax.vmap(lambda k, y: sample_pass(k, params, y - offset, True, 1)[0])(keys, flat)
    return draws.reshape(jnp.shape(value)[:-1] + (params[0].shape[-1],))


@partial(jax.jit, static_argnames=("num_steps", "shape"))
def simulate(key, params, offset, num_steps: int, shape=()):
    """States (shape + (T, N)) and observations (shape + (T, D)) drawn from the model."""
    init_mean, init_cov, F, Q, H, R = params
    n, d = init_mean.shape[-1], H.shape[0]
    k0, kx, ky = jax.random.split(key, 3)
    x0 = init_mean + jax.random.normal(k0, shape + (n,), F.dtype) @ psd_sqrt(init_cov).T
    noise = jax.random.normal(kx, (num_steps - 1,) + shape + (n,), F.dtype) @ psd_sqrt(Q).T

    def step(x, w):
        x = x @ F.T + w
        return x, x

    _, xs = jax.lax.scan(step, x0, noise)
    x = jnp.moveaxis(jnp.concatenate([x0[None], xs]), 0, -2)  # shape + (T, N)
    y = offset + x @ H.T + jax.random.normal(ky, x.shape[:-1] + (d,), F.dtype) @ psd_sqrt(R).T
    return x, y



# ----------------------------------------------------------------------------- structure
def free_entries(obs_dim: int, state_dim: int):
    """(rows, cols) of H's free entries: below the diagonal of the top N x N block, then all of
    rows N..D-1, row by row."""
    rows, cols = np.nonzero(np.tril(np.ones((obs_dim, state_dim)), -1))
    return rows, cols


def emission_matrix(loadings, obs_dim: int, state_dim: int):
    """H (D, N) from the free entries: unit diagonal, zeros above it in the top block."""
    rows, cols = free_entries(obs_dim, state_dim)
    H = jnp.eye(obs_dim, state_dim, dtype=jnp.result_type(float) if loadings is None else loadings.dtype)
    return H if loadings is None else H.at[rows, cols].set(loadings)


def identify(F, Q, H, init_mean=None, init_cov=None):
    """Map any LDS's (F, Q, H) to this model's form (diagonal Q, unit lower-triangular top of H):
    the similarity x -> A x with A = L^-1 H_top, where H_top Q H_top' = L diag L' (LDL'). Returns
    (F, Q, H[, init_mean, init_cov]) transformed; the likelihood is unchanged. Used to compare an
    EM fit (`inference.kalman.em`) or simulated truth with a posterior."""
    n = F.shape[-1]
    top = H[:n]
    c = np.linalg.cholesky(top @ Q @ top.T)
    L = c / np.diag(c)
    A = np.linalg.solve(L, top)
    Ainv = np.linalg.inv(A)
    out = (A @ F @ Ainv, A @ Q @ A.T, H @ Ainv)
    if init_mean is not None:
        out += (A @ init_mean, A @ init_cov @ A.T)
    return out


# ----------------------------------------------------------------------------- inputs
def _scale(value, name, default):
    if value is None:
        return default
    if is_traced(value):
        return value
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a positive number, got {value!r}") from exc
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def _offset_prior(value, default):
    if value is None:
        return default
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"offset_prior must be a pair (mean, scale), got {value!r}") from exc
    if arr.shape != (2,) or not np.all(np.isfinite(arr)) or arr[1] <= 0:
        raise ValueError(f"offset_prior must be (mean, scale > 0), got {value!r}")
    return float(arr[0]), float(arr[1])


def _prepare(obs, state_dim, num_steps, obs_dim):
    """(obs or None, num_steps, obs_dim, batch_shape); concrete obs validated."""
    state_dim = check_positive_int(state_dim, "state_dim")
    if obs is None:
        if num_steps is None or obs_dim is None:
            raise ValueError("num_steps and obs_dim are required when obs is None (what to simulate)")
        num_steps, obs_dim = check_positive_int(num_steps, "num_steps"), check_positive_int(obs_dim, "obs_dim")
        batch = ()
    else:
        if num_steps is not None or obs_dim is not None:
            raise ValueError("num_steps and obs_dim apply only when obs is None (the shape of obs is used)")
        obs, batched, _ = kalman_checks.check_obs(obs, np.shape(obs)[-1] if np.ndim(obs) in (2, 3) else -1)
        if not is_traced(obs):
            if np.isnan(obs).all():
                raise ValueError("obs holds no observed value (all NaN)")
            obs = np.asarray(obs, jnp.result_type(float))  # numpy: under an abstract trace it stays concrete
        num_steps, obs_dim = np.shape(obs)[-2], np.shape(obs)[-1]
        batch = tuple(np.shape(obs)[:1]) if batched else ()
    if obs_dim < state_dim:
        raise ValueError(f"state_dim={state_dim} exceeds the number of observed columns D={obs_dim}: the "
                         "identified form (unit lower-triangular top of the emission) needs D >= state_dim")
    return obs, state_dim, num_steps, obs_dim, batch


def column_summaries(obs, obs_dim):
    """Per-column mean and standard deviation of the observed (non-NaN) values (zeros and ones
    without data; a constant column has sd 1). Plain numpy for concrete data (no eager JAX
    dispatch, which compiles every operation), jnp when traced."""
    xp = jnp if is_traced(obs) else np
    if obs is None:
        return np.zeros(obs_dim), np.ones(obs_dim)
    y = xp.reshape(xp.asarray(obs), (-1, obs_dim))
    seen = ~xp.isnan(y)
    n = xp.maximum(seen.sum(0), 1)
    mean = xp.where(seen, y, 0.0).sum(0) / n
    sd = xp.sqrt(xp.where(seen, (y - mean) ** 2, 0.0).sum(0) / n)
    return mean, xp.where(sd > 0, sd, 1.0)


# ----------------------------------------------------------------------------- start
@partial(jax.jit, static_argnames=("state_dim",))
def start(rng_key, obs, state_dim):
    """A data-based start (every site but ``obs``), bootstrap-weighted over time steps (a new
    guess per key): ``offset`` the column means; the states ~ the first N centred columns (the
    identified form with H's top block = I); ``loadings`` of the other columns by least squares on
    them; ``transition`` by their lag-one regression, ``state_noise`` its residual sd; ``obs_noise``
    the other columns' residual sd and a third of the first N columns' sd."""
    n = state_dim
    y = jnp.reshape(jnp.asarray(obs, jnp.result_type(float)), (-1,) + jnp.shape(obs)[-2:])  # (B, T, D)
    d = y.shape[-1]
    seen = ~jnp.isnan(y).any(-1)  # (B, T) rows fully observed
    w = bootstrap_weights(rng_key, seen)
    total = jnp.maximum(w.sum(), 1e-12)
    mean = jnp.einsum("bt,btd->d", w, jnp.where(seen[..., None], y, 0.0)) / total
    yc = jnp.where(seen[..., None], y - mean, 0.0)
    sd = jnp.sqrt(jnp.einsum("bt,btd->d", w, yc**2) / total)
    sd = jnp.where(sd > 0, sd, 1.0)
    x = yc[..., :n]
    ridge = 1e-6 * jnp.diag(sd[:n] ** 2)
    gram = jnp.einsum("bt,bti,btj->ij", w, x, x) + total * ridge
    out = {"offset": mean}
    coef = jnp.linalg.solve(gram, jnp.einsum("bt,bti,btd->id", w, x, yc)).T  # (D, N)
    resid_sd = jnp.sqrt(jnp.einsum("bt,btd->d", w, (yc - x @ coef.T) ** 2) / total)
    out["obs_noise"] = jnp.maximum(jnp.where(jnp.arange(d) < n, sd / 3.0, resid_sd), 1e-3 * sd)
    rows, cols = free_entries(d, n)
    if rows.size:
        out["loadings"] = coef[rows, cols] * (rows >= n)  # top block: 0 below the diagonal (H_top = I)
    wp = w[:, 1:] * seen[:, :-1]
    prev, nxt = x[:, :-1], x[:, 1:]
    gram = jnp.einsum("bt,bti,btj->ij", wp, prev, prev) + jnp.maximum(wp.sum(), 1e-12) * ridge
    F = jnp.linalg.solve(gram, jnp.einsum("bt,bti,btj->ij", wp, prev, nxt)).T
    out["transition"] = F
    res = nxt - prev @ F.T
    q = jnp.sqrt(jnp.einsum("bt,btk->k", wp, res**2) / jnp.maximum(wp.sum(), 1e-12))
    out["state_noise"] = jnp.maximum(q, 1e-2 * sd[:n])
    return out


def _start_fn(obs, state_dim):
    memo = {}

    def value(name, rng_key):
        if "start" not in memo:
            memo["start"] = start(rng_key, obs, state_dim)
        return memo["start"][name]

    return value


# ----------------------------------------------------------------------------- model
def lds(obs=None, state_dim=2, *, num_steps=None, obs_dim=None, transition_scale=1.0, loading_scale=2.0,
        offset_prior=None, init_scale=None):
    """Bayesian linear dynamical system; sites ``transition``, ``loadings``, ``emission``
    (deterministic), ``state_noise``, ``obs_noise``, ``offset``, ``obs``, recovered ``states``.

    Args:
        obs: (T, D) one sequence or (B, T, D) a batch (NaN = missing); None to simulate
            ``num_steps`` steps of ``obs_dim`` columns (prior / posterior predictive).
        state_dim: N, 1 <= N <= D (see the module docstring: identification).
        transition_scale, loading_scale, offset_prior, init_scale: prior hyperparameters, see
            the module docstring.

    Fit it with any engine, e.g. ``inference.laplace(probmodels.lds, y, state_dim=2)`` (y: (T, D));
    the posterior then holds ``states`` (chain, draw, T, N). Mean-field VI (``inference.vi``'s
    default guide) gets the means right but its sds too small: against NUTS on the model's example
    data, offsets' sds 0.18-0.24x and loadings' 0.44-0.56x, states' 95% intervals covering 81-87%
    of the true states (NUTS: 88-97%); use NUTS or Laplace for intervals. Prior predictive draws:

    Example:
        >>> import jax, numpy as np, numpyro, probmodels
        >>> draws = numpyro.infer.Predictive(probmodels.lds, num_samples=3)(
        ...     jax.random.PRNGKey(0), None, state_dim=2, num_steps=7, obs_dim=3)
        >>> draws["obs"].shape, draws["emission"].shape, bool(np.isfinite(draws["obs"]).all())
        ((3, 7, 3), (3, 3, 2), True)
    """
    obs, n, num_steps, d, batch = _prepare(obs, state_dim, num_steps, obs_dim)
    transition_scale = _scale(transition_scale, "transition_scale", 1.0)
    loading_scale = _scale(loading_scale, "loading_scale", 2.0)
    mean, sd = column_summaries(obs, d)
    offset_loc, offset_scale = (mean, 2.0 * sd) if offset_prior is None else _offset_prior(offset_prior, None)
    init_sd = 2.0 * sd[:n] if init_scale is None else np.full(n, _scale(init_scale, "init_scale", 1.0))
    dtype = jnp.result_type(float)
    xp = jnp if is_traced(obs) else np  # numpy constants for concrete data: no eager JAX dispatch

    if obs is None:
        infer = lambda name: {}  # noqa: E731 - nothing to start from
    else:
        from_data = _start_fn(obs, n)
        infer = lambda name: {"init": Start(partial(from_data, name), f"probmodels.lds.start {name}")}  # noqa: E731
    F = numpyro.sample("transition", dist.Normal(np.zeros((n, n), dtype), transition_scale).to_event(2),
                       infer=infer("transition"))
    rows, cols = free_entries(d, n)
    loadings = None
    if rows.size:
        scale = loading_scale * sd[rows] / sd[:n].min()
        loadings = numpyro.sample("loadings", dist.Normal(np.zeros(rows.size, dtype), scale).to_event(1),
                                  infer=infer("loadings"))
    H = numpyro.deterministic("emission", emission_matrix(loadings, d, n))
    q = numpyro.sample("state_noise", dist.HalfNormal(sd[:n].astype(dtype)).to_event(1), infer=infer("state_noise"))
    r = numpyro.sample("obs_noise", dist.HalfNormal(sd.astype(dtype)).to_event(1), infer=infer("obs_noise"))
    offset = numpyro.sample("offset", dist.Normal(xp.broadcast_to(offset_loc, (d,)).astype(dtype),
                                                  offset_scale).to_event(1), infer=infer("offset"))
    likelihood = LinearGaussianSSM(np.zeros(n, dtype), xp.diag(init_sd**2).astype(dtype), F, jnp.diag(q**2), H,
                                   r**2, offset, num_steps, batch)
    y = numpyro.sample("obs", likelihood, obs=obs)
    if obs is not None:
        recovered("states", lambda key: likelihood.sample_states(key, y))


# ----------------------------------------------------------------------------- examples
EXAMPLE = {"transition": np.array([[0.8, 0.2], [-0.2, 0.7]]), "emission": np.array([[1.0, 0.0], [0.6, 1.0],
           [-0.5, 0.8]]), "state_noise": np.array([0.6, 0.5]), "obs_noise": np.array([0.3, 0.4, 0.3]),
           "offset": np.array([1.0, -1.0, 0.5])}


def simulate_example(num_steps: int, seed: int = 0, batch: tuple = (), states: bool = False):
    """Observations (batch + (T, 3)) from `EXAMPLE`, a 2-state LDS in this model's identified form
    (the tests' and the demo's truth); with ``states=True`` also the states (batch + (T, 2))."""
    e = EXAMPLE
    params = (np.zeros(2), np.eye(2), e["transition"], np.diag(e["state_noise"] ** 2), e["emission"],
              np.diag(e["obs_noise"] ** 2))
    params = tuple(jnp.asarray(p, jnp.result_type(float)) for p in params)
    x, y = simulate(jax.random.PRNGKey(seed), params, jnp.asarray(e["offset"], params[0].dtype), num_steps,
                    tuple(batch))
    return (np.array(y), np.array(x)) if states else np.array(y)  # writable copies


# ----------------------------------------------------------------------------- demo
def demo_cases():
    """The demo's LDS case (see :mod:`probmodels.demo`): 200 steps of `EXAMPLE` (2 states, 3
    observed columns, 10% of the entries missing), with NUTS, mean-field VI and Laplace. Scored by
    the largest |posterior mean - truth| / posterior sd over the parameters."""
    from probmodels.demo import Case

    y, x = simulate_example(200, seed=0, states=True)
    y[np.random.default_rng(0).random(y.shape) < 0.1] = np.nan
    rows, cols = free_entries(3, 2)
    truth = {**EXAMPLE, "loadings": EXAMPLE["emission"][rows, cols]}
    names = ("transition", "loadings", "state_noise", "obs_noise", "offset")

    def score(post):
        worst = 0.0
        for k in names:
            draws = np.asarray(post.samples[k]).reshape((-1,) + np.shape(truth[k]))
            worst = max(worst, float(np.max(np.abs(draws.mean(0) - truth[k]) / draws.std(0))))
        F = np.asarray(post.samples["transition"]).reshape(-1, 2, 2).mean(0)
        return ("max |mean - truth| / sd", worst,
                f"{worst:.2f} sd; transition {np.round(F, 2).tolist()} (truth {EXAMPLE['transition'].tolist()})")

    def plot(post, path_base):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        states = np.asarray(post.samples["states"]).reshape(-1, 200, 2)
        lo, mid, hi = np.percentile(states, [2.5, 50, 97.5], axis=0)
        fig, axes = plt.subplots(2, 1, figsize=(9, 4), sharex=True)
        for k, ax in enumerate(axes):
            ax.fill_between(np.arange(200), lo[:, k], hi[:, k], alpha=0.3, label="95% posterior")
            ax.plot(mid[:, k], lw=1, label="median")
            ax.plot(x[:, k], "k.", ms=2, label="true state")
            ax.set_ylabel(f"state {k}")
        axes[0].legend(loc="upper right", fontsize=7)
        axes[0].set_title(f"LDS states ({post.engine})")
        path = f"{path_base}_states.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return [path]

    options = {"mcmc": {"num_samples": 500, "num_warmup": 500, "num_chains": 2},  # 300 + 300: R-hat 1.011
               "vi": {"num_samples": 500}, "laplace": {"num_samples": 500}}
    return [Case("lds_simulated", lds, (y,), {"state_dim": 2}, ("mcmc", "vi", "laplace"), score, options, plot)]
