"""Linear algebra shared by the engines: a Cholesky factor with the smallest jitter that works
(NumPy, `cholesky_jitter`, or inside a traced program, `cholesky_jitter_traced`), and the Gaussian
conditional of a latent at new inputs given its value at training inputs.

One place for both: EP's draws and predictions, the Bayes machine's EP and its elliptical slice
sampler, the GP conditioning of every engine's predictions (`inference.conditional`) and the
kernel matrices of `probmodels.kernels` use them.

Example:
    >>> import numpy as np
    >>> K = np.array([[1.0, 1.0], [1.0, 1.0]])        # singular: needs a jitter
    >>> L, jitter = cholesky_jitter(K, "K")
    >>> round(jitter, 12), bool(np.allclose(L @ L.T, K + jitter * np.eye(2)))
    (1e-12, True)
    >>> import jax.numpy as jnp
    >>> Lt = cholesky_jitter_traced(jnp.ones((2, 2)))        # the same inside jax.jit: smallest working jitter
    >>> bool(jnp.all(jnp.isfinite(Lt))), bool(jnp.allclose(Lt @ Lt.T, jnp.ones((2, 2)), atol=1e-6))
    (True, True)
    >>> A, var = conditional(np.linalg.cholesky(np.eye(2)), np.array([[0.5, 0.0]]), np.array([1.0]))
    >>> A.tolist(), var.tolist()
    ([[0.5, 0.0]], [0.75])
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

LADDER = (0.0, 1e-12, 1e-10, 1e-8, 1e-6)  # jitters tried, relative to the mean diagonal


def check_square(A, name: str, symmetric: bool = True) -> float:
    """The mean diagonal of a finite square (symmetric) matrix, or a ValueError naming ``name``."""
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf")
    scale = float(np.mean(np.diag(A))) if A.shape[0] else 1.0
    if not scale > 0:
        raise ValueError(f"{name} is not positive definite: its mean diagonal is {scale:g}")
    asym = float(np.max(np.abs(A - A.T))) if (symmetric and A.size) else 0.0
    if asym > 1e-6 * scale:
        raise ValueError(f"{name} is not symmetric (max |K - K^T| = {asym:.3g})")
    return scale


def cholesky_jitter(A, name: str = "matrix", *, ladder=LADDER, dtype=None, advice: str = ""):
    """``(L, jitter)``: the lower Cholesky factor of ``A + jitter I`` (NumPy, in ``dtype``, default
    ``A``'s float dtype) with ``jitter`` the first of ``ladder`` (relative to the mean diagonal)
    that works, returned absolute. A ValueError names ``name`` when none does."""
    A = np.asarray(A)
    dtype = np.dtype(dtype or (A.dtype if np.issubdtype(A.dtype, np.floating) else float))
    scale = check_square(A, name)
    Ad = A.astype(dtype)
    eye = np.eye(A.shape[0], dtype=dtype)
    for rel in ladder:
        try:
            L = np.linalg.cholesky(Ad + dtype.type(rel * scale) * eye)
        except np.linalg.LinAlgError:
            continue
        if np.all(np.isfinite(L)) and np.all(np.diag(L) > 0):
            return L, float(rel * scale)
    min_eig = float(np.linalg.eigvalsh(0.5 * (A + A.T).astype(float))[0])
    raise ValueError(f"{name} is not positive definite even with jitter {ladder[-1]:g} x mean diagonal "
                     f"(smallest eigenvalue {min_eig:.3g}, mean diagonal {scale:.3g})" + (f"; {advice}" if advice else ""))


def cholesky_jitter_traced(C, max_tries: int = 16):
    """`cholesky_jitter` inside a traced program (no error possible there): the Cholesky factor of
    ``C`` plus the smallest jitter (0, then eps, 10 eps, ... of the mean diagonal, ``eps`` of
    ``C``'s dtype) that gives a finite factor; a non-finite factor when ``max_tries`` do not."""
    return jitter_search_traced(C, max_tries)[1]


def jitter_search_traced(C, max_tries: int = 16):
    """``(jitter, factor)`` of `cholesky_jitter_traced`. Reverse-mode differentiation cannot pass
    the search's while loop: differentiate ``cholesky(C + stop_gradient(jitter) I)`` instead.

    Example:
        >>> import jax.numpy as jnp
        >>> jitter, L = jitter_search_traced(jnp.ones((2, 2)))     # singular: a jitter is needed
        >>> bool(jitter > 0), bool(jnp.allclose(L @ L.T, jnp.ones((2, 2)) + jitter * jnp.eye(2)))
        (True, True)
    """
    import jax.numpy as jnp
    from jax import lax

    eye = jnp.eye(C.shape[0], dtype=C.dtype)
    scale = jnp.maximum(jnp.mean(jnp.diag(C)), jnp.finfo(C.dtype).tiny)
    eps = jnp.finfo(C.dtype).eps

    def jitter(k):
        return jnp.where(k == 0, 0.0, eps * 10.0 ** (k - 1).astype(C.dtype)) * scale

    def cond(c):
        k, L = c
        return (~jnp.all(jnp.isfinite(L))) & (k < max_tries)

    def body(c):
        k, _ = c
        return k + 1, jnp.linalg.cholesky(C + jitter(k + 1) * eye)

    k0 = jnp.asarray(0, jnp.int32)
    k, L = lax.while_loop(cond, body, (k0, jnp.linalg.cholesky(C + jitter(k0) * eye)))
    return jitter(k), L


def conditional(L, K_cross, k_new):
    """Gaussian conditional of new values given training values ``f`` with prior covariance
    ``K = L L^T``: ``E[f* | f] = m* + A (f - m)`` with ``A = K*n K^-1`` (m, n), and its covariance
    ``k_new - A Kn*`` (``k_new`` (m, m)) or variances (``k_new`` (m,), the diagonal). NumPy."""
    L, K_cross, k_new = (np.asarray(x, float) for x in (L, K_cross, k_new))
    W = scipy.linalg.solve_triangular(L, K_cross.T, lower=True)  # L^-1 Kn*
    A = scipy.linalg.solve_triangular(L.T, W, lower=False).T
    if k_new.ndim == 1:
        return A, np.maximum(k_new - np.sum(W * W, axis=0), 0.0)
    cov = k_new - W.T @ W
    return A, 0.5 * (cov + cov.T)
