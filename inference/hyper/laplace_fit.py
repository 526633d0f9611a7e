"""``inference.laplace(..., hyper="map" | "integrate")``: Laplace's evidence of the latent Gaussian
(`inference.hyper.laplace_evidence`) plugged into the engine-agnostic search and integration
(`inference.hyper.fit`). Programs are kept per model structure with the data as arguments
(`inference.compiled`), so refitting on new data of the same shapes compiles nothing."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference import compiled
from inference.hyper import fit, laplace_evidence, sites


class Setup(NamedTuple):
    """What a fit needs: the sites, the compiled programs and the data to pass them, the start."""

    hs: sites.HyperSites
    progs: fit.Programs
    data: list
    phi0: jax.Array
    warm0: jax.Array
    diagonal: bool


def setup(model, args, kwargs, trace) -> Setup:
    """The hyperparameter sites of ``model`` and Laplace's compiled programs, kept per model
    structure; ``trace`` is the model's structure trace (names, distributions, shapes)."""
    hs = compiled.memo("hyper-sites", model, args, kwargs, lambda: sites.find(model, args, kwargs, trace))
    dtype = jnp.result_type(float)
    newton_tol = 10 * float(np.finfo(dtype).eps)

    def build_init(rebuild):  # the start and the likelihood's curvature pattern, one small program
        lm = laplace_evidence.latent_model(model, hs, lambda d: rebuild(d))

        def init(data):
            a, kw = rebuild(data)
            phi0 = sites.initial_phi(sites.run(model, a, kw, hs, jnp.zeros(sites.size(hs), dtype)), hs).astype(dtype)
            return phi0, laplace_evidence.offdiagonal(lm, phi0, data)

        return jax.jit(init)

    phi0, coupling = compiled.call("hyper-init", model, args, kwargs, (hs,), build_init)
    diagonal = float(coupling) <= 100 * float(np.finfo(dtype).eps)  # round-off only: each datum on one coordinate

    def build(rebuild):
        lm = laplace_evidence.latent_model(model, hs, lambda d: rebuild(d))
        evidence = lambda phi, warm, data: laplace_evidence.evidence(lm, diagonal, phi, warm, data, newton_tol)  # noqa: E731
        draw = lambda phi, warm, key, num, data: laplace_evidence.draw(lm, diagonal, phi, warm, key, num, data)  # noqa: E731
        return fit.programs(model, hs, lambda d: rebuild(d), evidence, draw, lm.unravel)

    progs, data = compiled.get("laplace-hyper", model, args, kwargs, (hs, diagonal, newton_tol), build)
    dim = laplace_evidence.latent_model(model, hs, None).dim
    return Setup(hs, progs, data, phi0, jnp.zeros(dim, dtype), diagonal)


def laplace_hyper(model, args, kwargs, trace, hyper: str, *, num_samples: int, max_iter: int, tol: float,
                  seed: int):
    """The `Posterior` of ``inference.laplace`` with ``hyper`` (see `inference.hyper`); ``trace``
    is the model's structure trace (abstract values: names, distributions, shapes)."""
    st = setup(model, args, kwargs, trace)
    return fit.run(model, args, kwargs, trace, st.hs, hyper, st.progs, st.data, st.warm0, st.phi0,
                   engine="laplace", num_samples=num_samples, seed=seed, tol=1e-2 * tol, max_iter=max_iter,
                   diagnostics={"mode_finder": "latent-newton", "curvature": "diagonal" if st.diagonal else "dense",
                                "dimension": int(st.warm0.shape[0])})
