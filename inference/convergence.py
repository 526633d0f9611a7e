"""What ``diagnostics["converged"]`` means: one rule per engine kind, defined here and nowhere else.

``converged`` is a promise that the answer is what the engine was asked to compute: ``False``
whenever it may not be, and never ``True`` on a NaN or inf anywhere (README.md, "What `converged`
means", has the table).

- **MCMC** (`mcmc`): Vehtari, Gelman, Simpson, Carpenter & Buerkner (2021), "Rank-normalization,
  folding, and localization": the rank-normalised split R-hat (the larger of the bulk and the
  folded, tail, R-hat) below 1.01 for every varying coordinate, the bulk ESS (rank-normalised,
  split chains) at least 100 per chain (so 400 for 4 chains, 100 for one chain, whose halves are
  compared), and no divergent transition. A coordinate constant over every draw of every chain is
  genuinely constant and carries no information: it is skipped. A coordinate that varies but is
  constant within a (split) chain has R-hat infinity (chains stuck apart), never NaN. If nothing
  varies at all, or there are fewer than 4 draws per chain, nothing shows mixing: ``False``.
- **VI** (`vi`): the ELBO plateau (or the coordinate-ascent fixed point) was reached before the
  step cap, and the ELBO is finite.
- **Laplace** (`laplace`): at the returned mode the potential and the gradient are finite, the
  Hessian is positive definite, and either the gradient norm is at most ``tol * max(1, |U|)`` or
  the Newton decrement ``g' H^-1 g / 2`` (the log density still to gain) is at the working
  precision of ``U``, ``10 eps max(1, |U|)`` (``eps`` of the dtype: the same meaning in float32
  and float64).
- **EP** (`ep`): the largest site change fell to ``tol`` before ``max_iter``, and the log evidence
  (where the engine computes one) is finite.
- **Exact** (`exact`): variable elimination and belief propagation on a tree compute the answer
  itself, so every marginal finite is enough; loopy belief propagation (an approximation) also
  needs its largest message change at most ``tol`` before ``max_iter``.

Example:
    >>> import numpy as np
    >>> from inference import convergence
    >>> rng = np.random.default_rng(0)
    >>> convergence.mcmc({"x": rng.normal(size=(4, 500))})["converged"]
    True
    >>> stuck = np.repeat(np.array([0.0, 1.0, 0.0, 1.0])[:, None], 500, axis=1)  # chains stuck apart
    >>> d = convergence.mcmc({"x": stuck}); d["converged"], d["max_rhat"]
    (False, inf)
"""

from __future__ import annotations

import numpy as np

RHAT_MAX = 1.01
ESS_PER_CHAIN = 100
MIN_DRAWS = 4


def _finite(*values) -> bool:
    return all(v is not None and bool(np.all(np.isfinite(np.asarray(v, float)))) for v in values)


def _z_scale(x):
    """Rank-normalise over all chains and draws (axis 0 and 1 of ``(chain, draw, k)``), ties averaged."""
    from scipy.special import ndtri
    from scipy.stats import rankdata

    c, n, k = x.shape
    r = rankdata(x.reshape(c * n, k), axis=0)
    return ndtri((r - 0.375) / (c * n + 0.25)).reshape(c, n, k)


def _split(x):
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, -half:]], axis=0)


def _rhat(x):
    """R-hat of already split chains ``(chain, draw, k)`` (Gelman et al. BDA3, eq. 11.4)."""
    n = x.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        w = x.var(axis=1, ddof=1).mean(axis=0)
        b = n * x.mean(axis=1).var(axis=0, ddof=1)
        return np.sqrt(((n - 1) / n * w + b / n) / w)


def rhat_ess(samples: dict) -> tuple[float, float]:
    """``(max R-hat, min bulk ESS)`` over the varying coordinates of ``(chain, draw, ...)`` draws,
    as defined in the module docstring; ``(nan, nan)`` when no coordinate varies or there are
    fewer than 4 draws per chain. Integer sites count (as ranks)."""
    from numpyro.diagnostics import effective_sample_size

    rhats, esss = [], []
    for value in samples.values():
        v = np.asarray(value, dtype=float)
        if v.ndim < 2 or v.shape[1] < MIN_DRAWS:
            return float("nan"), float("nan")
        flat = v.reshape(v.shape[:2] + (-1,))
        varying = ~np.all(flat == flat[:1, :1], axis=(0, 1))
        flat = flat[..., varying]
        if flat.shape[-1] == 0:
            continue  # genuinely constant: no information either way
        if not np.all(np.isfinite(flat)):
            return float("inf"), 0.0
        split = _split(flat)
        bulk = _rhat(_z_scale(split))
        tail = _rhat(_z_scale(_split(np.abs(flat - np.median(flat, axis=(0, 1))))))
        rhat = np.maximum(np.where(np.isnan(bulk), np.inf, bulk), np.where(np.isnan(tail), np.inf, tail))
        with np.errstate(invalid="ignore", divide="ignore"):
            ess = np.asarray(effective_sample_size(_z_scale(split)), float)
        ess = np.where(np.isfinite(ess), ess, 0.0)
        ess = np.where(np.isinf(rhat), 0.0, ess)  # chains that never move within themselves
        rhats.append(float(np.max(rhat)))
        esss.append(float(np.min(ess)))
    if not rhats:
        return float("nan"), float("nan")
    return max(rhats), min(esss)


def mcmc(samples: dict, diverging=None) -> dict:
    """MCMC diagnostics of ``(chain, draw, ...)`` draws: ``converged`` (module docstring),
    ``max_rhat``, ``min_ess`` (bulk) and ``divergences`` (count of ``diverging``)."""
    num_chains = int(np.shape(next(iter(samples.values())))[0]) if samples else 1
    max_rhat, min_ess = rhat_ess(samples) if samples else (float("nan"), float("nan"))
    divergences = int(np.sum(np.asarray(diverging))) if diverging is not None else 0
    converged = bool(_finite(max_rhat, min_ess) and max_rhat < RHAT_MAX
                     and min_ess >= ESS_PER_CHAIN * num_chains and divergences == 0)
    return {"converged": converged, "max_rhat": max_rhat, "min_ess": min_ess, "divergences": divergences}


def vi(plateau: bool, elbo, stationarity: dict | None = None) -> bool:
    """VI: the ELBO plateau (or fixed point) reached before the step cap, with a finite ELBO, and
    for a named autoguide q at the ELBO's optimum (``stationarity["at_optimum"]``, `inference.vi`)."""
    at_optimum = stationarity is None or bool(stationarity["at_optimum"])
    return bool(plateau) and _finite(elbo) and at_optimum


def laplace(grad_norm, value, tol, *, hessian_pd: bool, decrement=None, dtype=np.float64) -> bool:
    """Laplace: finite ``U`` and gradient, positive-definite Hessian, and the gradient norm at most
    ``tol * max(1, |U|)`` or the Newton ``decrement`` (``g' H^-1 g / 2``) at most
    ``10 eps max(1, |U|)``."""
    if not (hessian_pd and _finite(grad_norm, value)):
        return False
    scale = max(1.0, abs(float(value)))
    if float(grad_norm) <= tol * scale:
        return True
    eps = float(np.finfo(dtype).eps)
    return decrement is not None and _finite(decrement) and float(decrement) <= 10 * eps * scale


PARETO_K_POOR = 0.7  # Yao et al. (2018): above it q is a poor importance proposal for the posterior


def pareto_k(log_w) -> float | None:
    """Pareto k-hat of importance log weights ``log_w = lp - log_q`` of draws from an approximate
    posterior q (Yao, Vehtari, Simpson & Gelman 2018, "Yes, but did it work?"): below 0.5 q is close
    to the posterior, above 0.7 (`PARETO_K_POOR`) its sds and tails may be far off even where its
    means are right; above 1 the weights have no finite mean. ``None`` with fewer than 50 finite
    weights; ``inf`` when the weights span more than float64 can hold (~700 nats: one draw carries
    all the weight, where PSIS's fit gave NaN). A diagnostic reported beside ``converged``, not part
    of it: k-hat from 1000 draws scatters around 0.7 on good fits (0.5-1.15 measured on mixtures
    whose means are right). One exception, `inference.vi`: SVI's Gaussian q of a whitened GP latent
    with k > 1 is not converged (mean-field sds up to 7x off; good full-rank fits: 0.2-0.6).

    Example:
        >>> import numpy as np
        >>> from inference.convergence import pareto_k
        >>> log_w = np.random.default_rng(0).normal(size=1000)  # q close to the posterior
        >>> round(pareto_k(log_w), 2), round(pareto_k(10 * log_w), 1), pareto_k(1000 * log_w)
        (0.37, 3.9, inf)
    """
    log_w = np.asarray(log_w, np.float64).ravel()
    if log_w.size < 50 or not np.all(np.isfinite(log_w)):
        return None
    if np.ptp(log_w) <= 1e-10 * max(1.0, np.abs(log_w).max()):
        return 0.0  # q proportional to the posterior: no tail at all
    from arviz_stats.base.array import array_stats

    try:
        # arviz-stats' psislw takes the log likelihood of LOO and negates it: pass -log w.
        _, khat = array_stats.psislw(-(log_w - log_w.max()))
    except ValueError:  # a degenerate tail (e.g. all tail values equal)
        return None
    return float(khat) if np.isfinite(khat) else float("inf")


NO_EVIDENCE = object()  # `ep`'s default: the engine computes no log evidence


def ep(max_change, tol, log_evidence=NO_EVIDENCE) -> bool:
    """EP: the largest site change (every one, if an array) at most ``tol``, reached before
    ``max_iter``, and ``log_evidence`` finite where the engine computes one (``None`` there: it is
    undefined, so not converged)."""
    changes_ok = _finite(max_change) and bool(np.all(np.asarray(max_change) <= tol))
    return changes_ok and (log_evidence is NO_EVIDENCE or _finite(log_evidence))


def exact(marginals, max_change=None, tol=None) -> bool:
    """Exact inference: every marginal finite; for loopy BP (``max_change`` given) also the largest
    message change at most ``tol``."""
    ok = all(_finite(m) for m in marginals)
    if max_change is None:
        return ok
    return ok and _finite(max_change) and float(max_change) <= float(tol)
