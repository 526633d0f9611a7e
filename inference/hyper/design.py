"""Design points and weights for integrating over the hyperparameters (INLA: Rue, Martino &
Chopin 2009, section 6.5).

Points live in standardised coordinates ``z``: ``phi = phi* + A z`` with ``A A' = Sigma``, the
inverse of ``-d^2 F / d phi^2`` at the mode. With ``F`` evaluated at each point,

- **grid** (one or two hyperparameters): a regular grid, step 0.5 out to |z| = 4 for one, step 1
  within |z| <= 3.5 for two; Riemann weights, ``int exp(F) dphi ~ |A| step^k sum_j exp(F_j)``;
- **central composite design** (three or more): the centre, the corners of a two-level
  fractional factorial design of resolution V and the ``2k`` axial points, all but the centre at
  radius ``f0 sqrt(k)`` (``f0 = 1.1``). The integral is ``|A| int [exp(F) / N(z)] N(z) dz`` with
  weights ``w_0 = 1 - 1/f0^2`` at the centre and ``1 / ((N - 1) f0^2)`` elsewhere: they sum to 1 and
  reproduce ``E[z z'] = I`` (resolution V makes the corner columns orthogonal), so the rule is
  exact when ``F`` is the Gaussian of its mode and Hessian and second-order accurate around it.

`rule` returns the points and the log of each point's weight per unit of ``exp(F)``, so that
``log int exp(F) dphi ~ logsumexp(F_j + log_w_j)`` and the posterior mass of point ``j`` is
proportional to ``exp(F_j + log_w_j)``.

Example:
    >>> import numpy as np
    >>> z, log_w = rule(3, np.eye(3))
    >>> z.shape                                  # 1 centre + 8 corners + 6 axial points
    (15, 3)
    >>> F = -0.5 * np.sum(z**2, 1)               # a standard Gaussian: exact
    >>> bool(abs(np.log(np.sum(np.exp(F + log_w))) - 1.5 * np.log(2 * np.pi)) < 1e-12)
    True
"""

from __future__ import annotations

import itertools

import numpy as np

F0 = 1.1


def resolution_v_columns(k: int) -> tuple[int, np.ndarray]:
    """``(m, columns)``: ``k`` vectors of GF(2)^m, no four or fewer summing to zero (so the
    design's main effects and two-factor interactions are not aliased), for the smallest ``m``
    a greedy search reaches. Each column is a bit mask over ``m`` base factors."""
    for m in range(1, 64):
        chosen: list[int] = []
        sums = [{0}, {0}, {0}]  # XORs of at most 1, 2, 3 chosen columns
        for cand in range(1, 2**m):
            if len(chosen) == k:
                break
            if cand in sums[2]:  # cand + (<= 3 chosen) = 0: four columns would be dependent
                continue
            sums = [sums[0] | {cand}, sums[1] | {cand ^ v for v in sums[0]}, sums[2] | {cand ^ v for v in sums[1]}]
            chosen.append(cand)
        if len(chosen) == k:
            return m, np.array(chosen)
    raise ValueError(f"no resolution V design found for {k} factors")  # pragma: no cover


def factorial(k: int) -> np.ndarray:
    """The corners (+-1) of a two-level design of resolution V for ``k`` factors (full for k <= 4)."""
    m, cols = resolution_v_columns(k)
    rows = np.arange(2**m)[:, None]
    parity = np.array([[bin(int(r) & int(c)).count("1") % 2 for c in cols] for r in rows[:, 0]])
    return 1.0 - 2.0 * parity


def rule(k: int, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(z (N, k), log_w (N,))`` for ``k`` hyperparameters whose Gaussian approximation has
    covariance ``sigma`` (the module docstring); the points in ``phi`` are ``phi* + z A'``."""
    half_logdet = 0.5 * np.linalg.slogdet(sigma)[1]
    if k <= 2:
        step, reach = (0.5, 4.0) if k == 1 else (1.0, 3.5)
        axis = np.arange(-np.floor(reach / step), np.floor(reach / step) + 1) * step
        z = np.array(list(itertools.product(axis, repeat=k)))
        z = z[np.sum(z**2, 1) <= reach**2 + 1e-9]
        return z, np.full(len(z), k * np.log(step) + half_logdet)
    radius = F0 * np.sqrt(k)
    corners = factorial(k) * radius / np.sqrt(k)
    axial = np.concatenate([np.eye(k), -np.eye(k)]) * radius
    z = np.concatenate([np.zeros((1, k)), corners, axial])
    n = len(z)
    w = np.r_[1.0 - 1.0 / F0**2, np.full(n - 1, 1.0 / ((n - 1) * F0**2))]
    log_normal = -0.5 * np.sum(z**2, 1) - 0.5 * k * np.log(2 * np.pi)
    return z, np.log(w) - log_normal + half_logdet


def scale(sigma: np.ndarray) -> np.ndarray:
    """``A`` with ``A A' = sigma`` from its eigendecomposition (the axes of the design)."""
    lam, V = np.linalg.eigh(0.5 * (sigma + sigma.T))
    return V * np.sqrt(lam)[None, :]
