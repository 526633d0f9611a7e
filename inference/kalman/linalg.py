"""Small dense linear algebra for the Kalman passes, batched over leading axes.

The passes solve many tiny systems (N states, D observations, typically <= 10) inside
``lax.scan`` and ``lax.associative_scan``. For such sizes a Gauss-Jordan elimination written in
``jnp`` ops (a ``fori_loop`` over the columns) compiles about 2x faster than a Cholesky
factorisation and its triangular solves (LAPACK calls that XLA:CPU wraps in much code), and one
system per scan step runs faster too (the custom calls cost a fixed overhead per step: the N = 10
smoother 0.23 s against 0.28 s at T = 1e4; at N = 20 0.79 s against 1.00 s, so LAPACK above
``SMALL_SOLVE``). Thousands of systems at once (the parallel passes): Gauss-Jordan up to N = 6,
and up to 8 while there are few of them (`small_batched`): each of its N steps sweeps the whole
batch, where LAPACK works one small system at a time, so at N = 7-10 LAPACK wins on long
sequences (jax 0.12, one thread, the parallel smoother at T = 1e5: N = 8 1.25 s against 1.83,
N = 10 1.96 s against 4.94) and Gauss-Jordan on short ones (T = 1e3, N = 8: 10.5 ms against 12.1);
at N <= 6 Gauss-Jordan at every length (N = 5, T = 1e6: 6.1 s against 7.7). Partial
pivoting; for symmetric positive definite matrices (innovation and predicted covariances)
elimination needs no growth control, and the log determinant is the sum of the log pivots.

Example:
    >>> import numpy as np
    >>> from inference.kalman.linalg import solve_psd
    >>> x, logdet = solve_psd(np.array([[4.0, 2.0], [2.0, 3.0]]), np.eye(2))
    >>> np.round(np.asarray(x) @ np.array([[4.0, 2.0], [2.0, 3.0]]), 12).tolist(), round(float(logdet), 6)
    ([[1.0, 0.0], [0.0, 1.0]], 2.079442)
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import cho_solve, lu_factor, lu_solve

SMALL_SOLVE = 12  # one system per step: Gauss-Jordan up to this (faster than LAPACK at N = 10, slower at 20)
# batched systems (the parallel passes): Gauss-Jordan up to N = 6, and up to N = 8 while
# batch * N^2 <= BATCHED_WORK (`small_batched`), LAPACK above
BATCHED_WORK = 1.3e5


def small_batched(batch: int) -> int:
    """The ``small`` of `solve` / `solve_psd` for ``batch`` systems solved at once: the largest N
    solved by Gauss-Jordan, 6 at least and 8 at most, while ``batch * N**2 <= BATCHED_WORK``
    (module docstring: the parallel smoother on one CPU thread, jax 0.12).

    Example:
        >>> small_batched(500), small_batched(2000), small_batched(10**5)
        (8, 8, 6)
    """
    return max(6, min(8, math.isqrt(int(BATCHED_WORK // max(int(batch), 1)))))


def sym(a):
    """The symmetric part of a (…, N, N) array."""
    return 0.5 * (a + jnp.swapaxes(a, -1, -2))


def mm(a, b):
    """Batched matrix product (XLA's dot). A broadcast multiply-and-sum for inner sizes up to 8,
    once faster to compile inside the associative scan, is now slower to run and to compile (jax
    0.12, parallel smoother at T = 1000: N = 5 9.5 -> 5.9 ms, N = 8 14.9 -> 8.8 ms, together with
    Gauss-Jordan for the batched systems; the sequential passes unchanged). Full precision: where a float32 product
    would run at reduced precision by default (a GPU's TF32), it does not (the passes may be called
    outside an engine's `inference.compiled.scope`)."""
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _gauss_jordan(m, b):
    """(m^-1 b, log |det m|) by Gauss-Jordan elimination with partial pivoting."""
    n = m.shape[-1]
    rows = jnp.arange(n)

    def eliminate(k, carry):
        aug, logdet = carry
        col = jnp.abs(aug[..., :, k])
        p = jnp.argmax(jnp.where(rows >= k, col, -1.0), axis=-1)  # pivot row at or below k
        order = jnp.where(rows == k, p[..., None], jnp.where(rows == p[..., None], k, rows))
        aug = jnp.take_along_axis(aug, order[..., :, None], axis=-2)  # swap rows k and p
        pivot_value = aug[..., k, k]
        pivot = aug[..., k, :] / pivot_value[..., None]
        factor = jnp.where(rows == k, 0.0, aug[..., :, k])
        aug = aug - factor[..., :, None] * pivot[..., None, :]
        aug = jnp.where((rows == k)[:, None], pivot[..., None, :], aug)
        return aug, logdet + jnp.log(jnp.abs(pivot_value))

    init = (jnp.concatenate([m, b], axis=-1), jnp.zeros(m.shape[:-2], m.dtype))
    aug, logdet = lax.fori_loop(0, n, eliminate, init)
    return aug[..., n:], logdet


def solve(m, b, small: int = SMALL_SOLVE):
    """m^-1 b for batched (…, N, N) ``m`` and (…, N, K) ``b`` (general ``m``); Gauss-Jordan for
    N <= ``small``, LAPACK's LU above."""
    if m.shape[-1] > small:
        return lu_solve(lu_factor(m), b)
    return _gauss_jordan(m, b)[0]


def solve_psd(m, b, small: int = SMALL_SOLVE):
    """(m^-1 b, log det m) for symmetric positive definite ``m``; Gauss-Jordan for N <= ``small``,
    Cholesky above."""
    if m.shape[-1] > small:
        chol = jnp.linalg.cholesky(m)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
        return cho_solve((chol, True), b), logdet
    return _gauss_jordan(m, b)


def joseph(dtype) -> bool:
    """Whether covariance updates use the Joseph forms (sums of positive semi-definite terms):
    below 64 bits, where rounding in the short forms (``P - K H P``, ``P_f + G (P_s - P_p) G'``,
    a difference of positive semi-definite matrices) can make a covariance indefinite. In float64
    the short forms are used: the same values to rounding, 4 fewer N^3 products per filter step
    and 3 per smoother step (N = 20: the smoother ~1.3x faster)."""
    return jnp.finfo(dtype).bits < 64


def add_jitter(a):
    """``a + 10 N eps max(diag a) I``: keeps the solve with a singular positive semi-definite
    ``a`` finite, and in the singular directions of the smoother's predicted covariance the
    right-hand side vanishes too, so the answer there is 0 (as with a pseudo-inverse)."""
    n = a.shape[-1]
    eps = jnp.finfo(a.dtype).eps
    scale = jnp.max(jnp.diagonal(a, axis1=-2, axis2=-1), axis=-1)[..., None, None]
    return a + 10.0 * n * eps * scale * jnp.eye(n, dtype=a.dtype)


def psd_sqrt(a):
    """A factor B with B B' = a for symmetric positive semi-definite (…, N, N) ``a``: pivoted
    outer-product Cholesky (each step takes the largest remaining diagonal entry; a pivot <= 0,
    rounding in a singular direction, ends the factor with zero columns), in ``jnp`` ops, so it
    compiles in a fraction of the time of ``eigh`` (FFBS draws with it)."""
    n = a.shape[-1]
    rows = jnp.arange(n)

    def step(k, carry):
        resid, factor = carry
        diag = jnp.diagonal(resid, axis1=-2, axis2=-1)
        p = jnp.argmax(diag, axis=-1)
        pivot = jnp.max(diag, axis=-1)
        col = jnp.take_along_axis(resid, p[..., None, None], axis=-1)[..., 0]  # resid[:, p]
        col = jnp.where((pivot > 0)[..., None], col / jnp.sqrt(jnp.where(pivot > 0, pivot, 1.0))[..., None], 0.0)
        resid = resid - col[..., :, None] * col[..., None, :]
        factor = jnp.where(rows == k, col[..., :, None], factor)
        return resid, factor

    return lax.fori_loop(0, n, step, (sym(a), jnp.zeros_like(a)))[1]
