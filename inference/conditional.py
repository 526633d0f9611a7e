"""Prediction for latents that grow with the data (a GP's ``f``), for every engine's draws.

``Posterior.predict(X_new)`` runs the model forward at the new inputs with each posterior draw
substituted. That is right for latents whose shape does not depend on the inputs (regression
weights), but a function-space latent ``f ~ N(m(X), K(X, X))`` has one entry per row of ``X``: its
training draws cannot be substituted at new rows. For such sites the new block is drawn from the
Gaussian prior conditioned on each training draw, ``f* | f ~ N(m* + K*n Kn^-1 (f - mn), K** -
K*n Kn^-1 Kn*)``, by the same rule EP's predictor uses (`inference.ep.predict`): the model's prior
is read on the training inputs stacked with the new ones. A latent that changes shape but is not
Gaussian in the prior, or whose prior depends on other latents (kernel hyperparameters sampled by
the model), gets a ValueError naming it instead of a silently wrong prediction.

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

from types import SimpleNamespace

import numpy as np


def changed_latents(flat: dict, trace) -> list[str]:
    """Latent sites whose shape at the new inputs (``trace``) differs from their draws'."""
    return [n for n, v in flat.items() if n in trace and tuple(np.shape(trace[n]["value"])) != np.shape(v)[1:]]


def conditional_draws(model, train_args, train_kwargs, flat: dict, names: list[str], args, kwargs, rng_key) -> dict:
    """Draws of the latent sites ``names`` at the new inputs, one per posterior draw in ``flat``
    (``{site: (draws, ...)}``), from their Gaussian prior conditioned on the training draw."""
    from inference.ep.predict import _conditional
    from inference.ep.recognise import abstract_trace, latent_blocks, prior_of

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
    rec = SimpleNamespace(blocks=blocks, m0=m0, S0=S0)
    return _conditional(model, train_args, train_kwargs, rec, u_draws, blocks, new_blocks, args, kwargs, rng_key)
