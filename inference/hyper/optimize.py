"""The hyperparameters' mode: BFGS on ``F(phi) = log Z(theta(phi)) + log p(phi)``, engine-agnostic.

``value_and_grad(phi, warm) -> (F, grad F, new_warm, ok, log_z)`` is one compiled program (the
engine's evidence with its exact gradient, `inference.hyper`); this loop only chooses where to
evaluate it next, so the search, the Hessian of `hessian` and the design points of an
integration all reuse the one program (compiling it dominates a small problem). Each evaluation
starts the engine's inner fixed point (Laplace's Newton, EP's sites) from the ``warm`` state of
the last accepted point. The step is BFGS's, at most ``max_step`` long in any coordinate (a
factor e^2 on a log-scale parameter), with Armijo backtracking. It stops when the predicted gain
``g' H^-1 g / 2`` falls to ``max(tol, 100 eps max(1, |F|))`` with the Hessian itself, not only
BFGS's estimate (converged; checked by central differences of the gradient, ``2k`` evaluations,
at most ``MAX_CHECKS`` times; a Hessian with a clearly negative eigenvalue there is a saddle, not
converged), when no step along the direction improves ``F`` (stalled), or after ``max_iter``
iterations. ``loose(phi, warm, grad_norm)``, when given, evaluates each line search's full step
instead: an engine may run its inner fixed point there to a tolerance that follows the gradient
norm of the last accepted point (EP's sweeps, `inference.hyper.ep_fit.loosen`). A full step that
fails is searched again exactly (from the current point evaluated exactly, where a loose value
put it), and a point is evaluated exactly before the search judges it converged or stops; the
Hessian checks are exact.

Example (a concave quadratic, its own gradient exact):
    >>> import numpy as np
    >>> vg = lambda p, w: (-np.sum((p - 1.0) ** 2), -2 * (p - 1.0), w, True, 0.0)
    >>> res = maximize(vg, np.zeros(2), None, tol=1e-12, max_iter=50)
    >>> bool(res.converged), np.round(res.phi, 6).tolist()
    (True, [1.0, 1.0])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

ARMIJO = 1e-4
MAX_HALVINGS = 40
MAX_CHECKS = 3  # Hessian checks of a predicted convergence (each 2k evaluations)
# A Hessian check that finds an eigenvalue of -d^2 F below -SADDLE x the largest in magnitude
# (beyond the error of central differences of gradients from an inner fixed point) says the
# search stopped at a saddle, not a maximum: not converged.
SADDLE = {np.dtype(np.float32): 0.1, np.dtype(np.float64): 0.01}


class MapResult(NamedTuple):
    phi: np.ndarray  # the mode (unconstrained)
    value: float  # F at the mode
    log_z: float  # the engine's log evidence at the mode
    grad: np.ndarray
    warm: Any  # the engine's state at the mode
    converged: bool
    iterations: int
    evaluations: int
    trace: list  # F at each accepted point
    gain: float  # the predicted gain left at the mode
    stalled: bool
    saddle: bool = False  # the Hessian check found a direction of ascent curvature: not a maximum


def _host(out):
    F, g, warm, ok, log_z = out
    return float(F), np.asarray(g, dtype=np.float64), warm, bool(ok), float(log_z)


def maximize(value_and_grad, phi0, warm0, *, tol: float, max_iter: int, max_step: float = 2.0,
             loose=None) -> MapResult:
    """BFGS from ``phi0`` (module docstring). Raises FloatingPointError when ``F`` or its
    gradient is not finite at the start (a hyperparameter value the engine cannot handle)."""
    dtype = np.asarray(phi0).dtype
    eps = float(np.finfo(dtype).eps)
    phi = np.asarray(phi0, dtype=np.float64)
    F, g, warm, ok, log_z = _host(value_and_grad(phi.astype(dtype), warm0))
    if not (np.isfinite(F) and np.all(np.isfinite(g))):
        raise FloatingPointError(f"the log evidence or its gradient is not finite at the hyperparameters' start "
                                 f"(unconstrained {phi.tolist()}): F = {F}, ok = {ok}")
    k = phi.size
    Hinv = np.eye(k)
    trace, evaluations, stalled, gain = [F], 1, False, np.inf
    exact = True  # the current point was evaluated by value_and_grad (not `loose`)

    def small(gain, F):
        return gain <= max(tol, 100 * eps * max(1.0, abs(F)))

    def checked(gain):
        """(gain read with the Hessian itself where BFGS's is small, that Hessian or None, whether
        it is a saddle): a Hessian that is not positive definite leaves BFGS's gain, and is a
        saddle where an eigenvalue is clearly negative (`SADDLE`)."""
        if not (small(gain, F) and ok):
            return gain, None, False
        H = hessian(value_and_grad, phi.astype(dtype), warm)
        newton = _newton_gain(H, g)
        if newton is None:
            lam = np.linalg.eigvalsh(H)
            saddle = np.all(np.isfinite(lam)) and lam[0] < -SADDLE[np.dtype(dtype)] * np.max(np.abs(lam))
            return gain, None, bool(saddle)
        return max(gain, newton), H, False

    checks = 0
    it = 0
    saddle = False
    loose_ok = loose is not None  # this iteration's full step may be evaluated by `loose`

    def settle():
        """The current point evaluated again exactly, where a loose trial evaluation put it."""
        nonlocal F, g, warm, ok, log_z, evaluations, exact
        if not exact:
            F, g, warm, ok, log_z = _host(value_and_grad(phi.astype(dtype), warm))
            evaluations, exact = evaluations + 1, True
            trace[-1] = F

    def direction():  # BFGS's ascent direction and its predicted gain (from the gradient if not ascent)
        nonlocal Hinv
        p = Hinv @ g
        if not float(g @ p) > 0:
            Hinv = np.eye(k)
            p = g.copy()
        return p, 0.5 * float(g @ p)

    def accepted(trial, t):  # Armijo's sufficient increase along p from the current point
        F_t, g_t = trial[0], trial[1]
        return np.isfinite(F_t) and np.all(np.isfinite(g_t)) and F_t >= F + ARMIJO * t * float(g @ p)

    for it in range(1, max_iter + 1):
        p, gain = direction()
        if small(gain, F) and ok and not exact:  # near the mode: read it exactly, then judge
            settle()
            p, gain = direction()
        if small(gain, F) and ok:
            # BFGS's H^-1 can be far too small along a flat direction (scaled by a steep one's
            # curvature), predicting no gain where there is: the gain is read again with the
            # Hessian itself (central differences of the exact gradient), and the search goes on
            # with it where it is larger
            checks += 1
            evaluations += 2 * k
            gain, H, saddle = checked(gain)
            if H is None or small(gain, F) or checks > MAX_CHECKS:
                break
            Hinv = np.linalg.inv(H)
            p = Hinv @ g
        t = min(1.0, max_step / max(float(np.max(np.abs(p))), 1e-300))
        if loose_ok:  # the full step, evaluated loosely; if it fails, the search goes on exactly
            trial = _host(loose((phi + t * p).astype(dtype), warm, float(np.linalg.norm(g))))
            evaluations += 1
            if not accepted(trial, t):
                loose_ok = False
                if not exact:  # perhaps the loose values' own error (float32): from this point exactly
                    settle()
                    continue
                t *= 0.5  # a step too long
        if not loose_ok:
            for _ in range(MAX_HALVINGS):
                trial = _host(value_and_grad((phi + t * p).astype(dtype), warm))
                evaluations += 1
                if accepted(trial, t):
                    break
                t *= 0.5
            else:
                stalled = True
                settle()
                break
        g_t = trial[1]
        s = t * p
        y = g - g_t  # the change of the gradient of -F
        sy = float(s @ y)
        if sy > 1e-12 * np.linalg.norm(s) * np.linalg.norm(y):
            if it == 1:
                Hinv = np.eye(k) * sy / float(y @ y)
            rho = 1.0 / sy
            V = np.eye(k) - rho * np.outer(s, y)
            Hinv = V @ Hinv @ V.T + rho * np.outer(s, s)
        phi = phi + s
        F, g, warm, ok, log_z = trial
        exact, loose_ok = not loose_ok, loose is not None
        trace.append(F)
    else:  # max_iter reached: BFGS's predicted gain, read again with the Hessian where it is small
        settle()
        gain = 0.5 * float(g @ (Hinv @ g))
        if small(gain, F) and ok:
            evaluations += 2 * k
            gain, _, saddle = checked(gain)
    converged = bool(ok and small(gain, F) and np.isfinite(F) and not saddle)
    return MapResult(phi.astype(dtype), F, log_z, g, warm, converged, it, evaluations, trace, float(gain), stalled,
                     saddle)


def _newton_gain(H, g):
    """``g' H^-1 g / 2`` with ``H = -d^2 F``, or None where ``H`` is not positive definite (not
    a strict maximum: the check cannot read a gain there)."""
    try:
        L = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        return None
    r = np.linalg.solve(L, g)
    return 0.5 * float(r @ r)


def hessian(value_and_grad, phi, warm, step: float | None = None) -> np.ndarray:
    """``-d^2 F / d phi^2`` at ``phi`` by central differences of the exact gradient (``2k``
    evaluations, warm-started at ``warm``), symmetrised. ``step`` defaults to ``eps^(1/3)``
    of the dtype (6e-6 in float64, 5e-3 in float32)."""
    dtype = np.asarray(phi).dtype
    h = float(np.finfo(dtype).eps) ** (1.0 / 3.0) if step is None else step
    phi = np.asarray(phi, dtype=np.float64)
    k = phi.size
    H = np.empty((k, k))
    for j in range(k):
        e = np.zeros(k)
        e[j] = h
        g_plus = _host(value_and_grad((phi + e).astype(dtype), warm))[1]
        g_minus = _host(value_and_grad((phi - e).astype(dtype), warm))[1]
        H[:, j] = -(g_plus - g_minus) / (2 * h)
    return 0.5 * (H + H.T)
