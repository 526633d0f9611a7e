"""``inference.laplace(..., hyper="map" | "integrate")``: Laplace's evidence of the latent Gaussian
(`inference.hyper.laplace_evidence`) plugged into the engine-agnostic search and integration
(`inference.hyper.fit`). Programs are kept per model structure with the data as arguments
(`inference.compiled`), so refitting on new data of the same shapes compiles nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference import _model, compiled
from inference.hyper import fit, laplace_evidence, sites


def laplace_hyper(model, args, kwargs, hyper: str, *, num_samples: int, max_iter: int, tol: float,
                  seed: int):
    """The `Posterior` of ``inference.laplace`` with ``hyper`` (see `inference.hyper`)."""
    trace = _model.trace_model(model, args, kwargs, seed)  # concrete: the priors' draws start the search
    hs = sites.find(model, args, kwargs, trace)
    dtype = jnp.result_type(float)
    phi0 = sites.initial_phi(model, args, kwargs, hs, trace, dtype)
    newton_tol = 10 * float(np.finfo(dtype).eps)

    def build_pattern(rebuild):
        lm = laplace_evidence.latent_model(model, hs, lambda d: rebuild(d))
        return jax.jit(lambda data, phi: laplace_evidence.offdiagonal(lm, phi, data))

    coupling = float(compiled.call("hyper-pattern", model, args, kwargs, (hs,), build_pattern, phi0))
    diagonal = coupling <= 100 * float(np.finfo(dtype).eps)  # round-off only: each datum on one coordinate

    def build(rebuild):
        lm = laplace_evidence.latent_model(model, hs, lambda d: rebuild(d))
        evidence = lambda phi, warm, data: laplace_evidence.evidence(lm, diagonal, phi, warm, data, newton_tol)  # noqa: E731
        draw = lambda phi, warm, key, num, data: laplace_evidence.draw(lm, diagonal, phi, warm, key, num, data)  # noqa: E731
        return fit.programs(model, hs, lambda d: rebuild(d), evidence, draw, lm.unravel)

    progs, data = compiled.get("laplace-hyper", model, args, kwargs, (hs, diagonal, newton_tol), build)
    lm = laplace_evidence.latent_model(model, hs, None)
    warm0 = jnp.zeros(lm.dim, dtype)
    return fit.run(model, args, kwargs, trace, hs, hyper, progs, data, warm0, phi0, lm.unravel,
                   engine="laplace", num_samples=num_samples, seed=seed, tol=1e-2 * tol, max_iter=max_iter,
                   diagnostics={"mode_finder": "latent-newton", "curvature": "diagonal" if diagonal else "dense",
                                "dimension": lm.dim})
