"""Prediction for latents that grow with the data (a GP's ``f``), for every engine's draws.

``Posterior.predict(X_new)`` runs the model forward at the new inputs with each posterior draw
substituted. That is right for latents whose shape does not depend on the inputs (regression
weights), but a function-space latent ``f ~ N(m(X), K(X, X))`` has one entry per row of ``X``: its
training draws cannot be substituted at new rows. For such sites the new block is drawn from the
Gaussian prior conditioned on each training draw, ``f* | f ~ N(m* + K*n Kn^-1 (f - mn), K** -
K*n Kn^-1 Kn*)``. The model's prior is read on the training inputs stacked with the new ones
(`stack_inputs`): an argument is stacked when it is an array passed at prediction whose training
counterpart has the same trailing shape and as many rows as the latent has (e.g. ``X``). The
training block of the stacked prior must reproduce the training prior, else a ValueError says so.
Every engine uses this rule (EP, Laplace, VI, NUTS, the Bayes machine's EP and elliptical slice
sampler). A latent that changes shape but is not Gaussian in the prior, or whose prior depends on
other latents (kernel hyperparameters sampled by the model), gets a ValueError naming it instead
of a silently wrong prediction.

Example:
    >>> import numpy as np, inference
    >>> from probmodels import gp_classifier
    >>> from probmodels.kernels import RBF
    >>> X = np.linspace(-1, 1, 20)[:, None]; y = X[:, 0] > 0
    >>> post = inference.laplace(gp_classifier, X, y, kernel=RBF(0.5), num_samples=100, progress=False)
    >>> pp = post.predict(np.array([[-0.9], [0.9]]))
    >>> pp["y"].shape, post.predictions["f"].shape
    ((1, 100, 2), (1, 100, 2))
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np

from inference import linalg
from inference.trace_reading import abstract_trace, latent_blocks, prior_of

CHUNK = 512  # new points conditioned at once (`chunks`)


def changed_latents(flat: dict, trace) -> list[str]:
    """Latent sites whose shape at the new inputs (``trace``) differs from their draws'."""
    return [n for n, v in flat.items() if n in trace and tuple(np.shape(trace[n]["value"])) != np.shape(v)[1:]]


def is_data(v, n=None) -> bool:
    return isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) >= 1 and (n is None or np.shape(v)[0] == n)


def _stack(train, new, n):
    if is_data(train, n) and isinstance(new, (np.ndarray, jax.Array, list)):
        new_arr = np.asarray(new)
        if new_arr.ndim == np.ndim(train) and new_arr.shape[1:] == np.shape(train)[1:]:
            return np.concatenate([np.asarray(train), new_arr]), True
        if new_arr.ndim == 1 and np.shape(train)[1:] == (1,):  # one input column given as a vector
            return np.concatenate([np.asarray(train), new_arr[:, None]]), True
    return new, False


def check_trailing_shapes(model, train_args, train_kwargs, args, kwargs, changed) -> None:
    """Latent sites that change shape with the inputs (a GP's f; or regression weights, when the
    new X has other columns) need new rows shaped as the fit's: an input of the fit's rank with
    another trailing shape is named (not a GP's "cannot be extended")."""
    try:
        names = list(inspect.signature(model).parameters)
    except (TypeError, ValueError):
        names = []
    pairs = [(names[i] if i < len(names) else f"argument {i}", t, a) for i, (t, a) in enumerate(zip(train_args, args))]
    pairs += [(k, train_kwargs[k], v) for k, v in kwargs.items() if k in train_kwargs]
    arrays = (np.ndarray, jax.Array, list)
    for name, t, a in pairs:
        if isinstance(t, arrays) and isinstance(a, arrays) and len(np.shape(t)) == len(np.shape(a)) >= 2 \
                and np.shape(t)[1:] != np.shape(a)[1:]:
            raise ValueError(
                f"predict: {name} has shape {np.shape(a)} but the fit's {name} had {np.shape(t)}: new rows need "
                f"the fit's trailing shape {np.shape(t)[1:]} (latent sites {sorted(changed)} would change shape)")


def stack_inputs(train_args, train_kwargs, new_args, new_kwargs, n, keep_kwargs: bool = False):
    """``(args, kwargs, stacked)``: each new argument stacked under its training counterpart when
    that is a data array with ``n`` rows. Other new arguments are taken as given; with
    ``keep_kwargs`` the training keyword arguments that are not data (a kernel, a noise rate) are
    kept unless given anew. ``stacked``: whether any argument was stacked."""
    args = [_stack(train_args[i] if i < len(train_args) else None, a, n) for i, a in enumerate(new_args)]
    kwargs = {k: v for k, v in train_kwargs.items() if not is_data(_array(v), n)} if keep_kwargs else {}
    news = {k: _stack(train_kwargs.get(k), v, n) for k, v in new_kwargs.items()}
    kwargs.update({k: v for k, (v, _) in news.items()})
    stacked = any(flag for _, flag in args) or any(flag for _, flag in news.values())
    return tuple(v for v, _ in args), kwargs, stacked


def _array(v):
    return np.asarray(v) if isinstance(v, list) else v


def num_new(new_args, new_kwargs) -> int:
    for v in list(new_args) + list(new_kwargs.values()):
        if is_data(_array(v)):
            return int(np.shape(v)[0])
    raise ValueError("predict needs new inputs (an array with one row per new point)")


def chunks(new_args, new_kwargs, m):
    """The new inputs in pieces of `CHUNK` rows."""
    for start in range(0, m, CHUNK):
        sl = slice(start, min(start + CHUNK, m))
        cut = lambda v: np.asarray(v)[sl] if is_data(_array(v), m) else v  # noqa: E731
        yield tuple(cut(v) for v in new_args), {k: cut(v) for k, v in new_kwargs.items()}


def stacked_prior(model, train_args, train_kwargs, blocks, m0, S0, changed, new_shapes, args, kwargs,
                  keep_kwargs: bool = False):
    """The joint prior of the latent ``blocks`` on [training; new] inputs: ``(mean, cov, t, s)``
    with ``t`` / ``s`` the indices of the training / new entries. ``changed``: the blocks that
    grow with the data; ``new_shapes``: their shapes at the new inputs. Checks that the training
    block reproduces the training prior ``(m0, S0)``."""
    n_rows = {b.shape[0] for b in changed if b.shape}
    if len(n_rows) != 1:
        raise ValueError(f"cannot predict: latent sites {[b.name for b in changed]} change shape with the "
                         f"inputs but do not share one leading (data) axis")
    (n,) = n_rows
    joint_args, joint_kwargs, stacked = stack_inputs(train_args, train_kwargs, args, kwargs, n, keep_kwargs)
    if not stacked:
        raise ValueError(f"cannot predict: no argument of predict() looks like new rows of a training input "
                         f"with {n} rows (same trailing shape), so the GP latent cannot be extended")
    names = {b.name for b in blocks}
    joint_blocks = latent_blocks(abstract_trace(model, joint_args, joint_kwargs), names)
    if [b.name for b in joint_blocks] != [b.name for b in blocks]:
        raise ValueError("cannot predict: the model's latent sites differ on the stacked [training; new] inputs")
    m0j, S0j = prior_of(model, joint_args, joint_kwargs, joint_blocks)
    train_idx, new_idx = [], []
    by_name = {b.name: b for b in blocks}
    changed_names = {b.name for b in changed}
    for jb in joint_blocks:
        tb = by_name[jb.name]
        idx = np.arange(jb.offset, jb.offset + jb.size)
        if jb.name in changed_names:
            m = new_shapes[jb.name][0]
            if jb.shape != (n + m,) + tb.shape[1:]:
                raise ValueError(f"cannot predict: latent site {jb.name!r} has shape {jb.shape} on the stacked "
                                 f"inputs, expected {(n + m,) + tb.shape[1:]}")
            rest = tb.size // n
            train_idx.append(idx[: n * rest])
            new_idx.append(idx[n * rest:])
        else:
            train_idx.append(idx)
    t, s = np.concatenate(train_idx), np.concatenate(new_idx)
    big = max(float(np.max(np.abs(S0))), 1e-300)
    block, off = S0j[np.ix_(t, t)], ~np.eye(t.size, dtype=bool)
    # the diagonal may differ by a kernel's jitter (escalated for one matrix and not the other)
    if not (np.allclose(block[off], S0[off], atol=1e-6 * big, rtol=0)
            and np.allclose(np.diag(block), np.diag(S0), rtol=1e-2, atol=1e-6 * big)
            and np.allclose(m0j[t], m0, atol=1e-6 * max(big, 1.0) ** 0.5)):
        raise ValueError("cannot predict: the prior of the latent on the stacked [training; new] inputs does not "
                         "reproduce the training prior; pass predict() the same hyperparameters as the fit")
    return m0j, S0j, t, s


def conditioned(L, K_cross, K_new, m_new, centred, eps):
    """Draws at new inputs, one per row of ``centred`` (training draws minus their prior mean),
    from the Gaussian prior conditioned on that row: ``m_new + centred A' + eps Lc'`` with
    ``A = K*n K^-1`` (``K = L L'``) and ``Lc Lc'`` the conditional covariance ``K** - A Kn*``;
    ``eps`` standard normal (rows x new points). NumPy."""
    A, cov = linalg.conditional(L, K_cross, K_new)
    Lc, _ = linalg.cholesky_jitter(cov, "conditional prior covariance at the new inputs")
    return m_new + centred @ A.T + eps @ Lc.T


def extend_draws(model, train_args, train_kwargs, blocks, m0, S0, u_draws, changed, new_blocks, args, kwargs,
                 rng_key) -> dict:
    """Draws at the new inputs of the latent blocks in ``changed``, one per row of ``u_draws`` (the
    concatenated training latents), from the stacked prior conditioned on each draw."""
    new_shapes = {b.name: new_blocks[b.name].shape for b in changed}
    m0j, S0j, t, s = stacked_prior(model, train_args, train_kwargs, blocks, m0, S0, changed, new_shapes,
                                   args, kwargs)
    L, _ = linalg.cholesky_jitter(S0j[np.ix_(t, t)], "training prior covariance")
    eps = np.asarray(jax.random.normal(rng_key, (u_draws.shape[0], s.size), dtype=jnp.result_type(float)))
    new_u = conditioned(L, S0j[np.ix_(s, t)], S0j[np.ix_(s, s)], m0j[s], u_draws - m0, eps)
    out, start = {}, 0
    for name, shape in new_shapes.items():
        size = int(np.prod(shape))
        out[name] = new_u[:, start:start + size].reshape((-1,) + shape)
        start += size
    return out


def latent_at_new_inputs(model, train_args, train_kwargs, block, m0, K, args, kwargs):
    """``(K_cross (m, n), K_new (m, m), prior mean (m,))`` of one latent vector site ``block`` at
    new inputs, from the stacked prior (training keyword arguments that are not data are kept)."""
    new_block = {b.name: b for b in latent_blocks(abstract_trace(model, args, kwargs), {block.name})}
    if block.name not in new_block:
        raise ValueError(f"predict: the model run on the new inputs has no site {block.name!r}")
    m0j, S0j, t, s = stacked_prior(model, train_args, train_kwargs, [block], m0, K, [block],
                                   {block.name: new_block[block.name].shape}, args, kwargs, keep_kwargs=True)
    return S0j[np.ix_(s, t)], S0j[np.ix_(s, s)], m0j[s]


def conditional_draws(model, train_args, train_kwargs, flat: dict, names: list[str], args, kwargs, rng_key) -> dict:
    """Draws of the latent sites ``names`` at the new inputs, one per posterior draw in ``flat``
    (``{site: (draws, ...)}``), from their Gaussian prior conditioned on the training draw."""
    names_set = set(names)
    blocks = latent_blocks(abstract_trace(model, train_args, train_kwargs), names_set)
    try:
        m0, S0 = prior_of(model, train_args, train_kwargs, blocks)
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise ValueError(f"cannot predict: latent site(s) {names} change shape with the inputs and are not "
                         f"Gaussian in the prior, so their draws cannot be extended to new inputs ({exc})") from exc
    others = {k: v for k, v in flat.items() if k not in names_set}
    if others:  # the conditioning uses one prior: it must not depend on the other latents
        for i in sorted({0, len(next(iter(others.values()))) - 1}):
            m1, S1 = prior_of(model, train_args, train_kwargs, blocks, values={k: v[i] for k, v in others.items()})
            scale = max(float(np.max(np.abs(S0))), 1e-300)
            if not (np.allclose(S1, S0, rtol=0, atol=1e-8 * scale) and np.allclose(m1, m0, rtol=0, atol=1e-8 * scale ** 0.5)):
                raise ValueError(f"cannot predict: the prior of latent site(s) {names} depends on other latent "
                                 f"sites (e.g. sampled kernel hyperparameters); conditioning per draw is not "
                                 f"supported")
    u_draws = np.concatenate([np.asarray(flat[b.name]).reshape(len(flat[b.name]), -1) for b in blocks], axis=1)
    new_blocks = {b.name: b for b in latent_blocks(abstract_trace(model, args, kwargs), names_set)}
    return extend_draws(model, train_args, train_kwargs, blocks, m0, S0, u_draws, blocks, new_blocks, args, kwargs,
                        rng_key)
