"""The EP latent mean in function space (`inference.ep.gaussian.site_alpha`) against the forms it
replaced, side by side in one process: jitted `to_latent`, warm, median of 20 calls, GP regression
sites (tau = 1 / noise^2 = 1e4) on an RBF(2) Gram matrix of n sorted inputs on [-3, 3], float32 and
float64, and the largest mean error of each in posterior sds against the float64 closed form from
the same Gram matrix. Forms:

- ``woodbury``: ``alpha = nu - S M^-1 S K nu`` (to session 56);
- ``woodbury+1``: the same with one step of iterative refinement (session 57);
- ``site_alpha``: ``S M^-1 (nu / S)`` with one refinement step (session 58, what EP uses now);
- ``cholesky``: ``(K + noise^2 I)^-1 y`` by a Cholesky in the working dtype (the closed form's own
  accuracy: the floor for the dtype, not an EP form).

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_mean_refinement.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.linalg import cho_solve  # noqa: E402

from inference.ep import gaussian  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402


def woodbury(K, tau, nu, refine):
    s, _, solve, _ = gaussian._function_parts(K, tau)

    def apply(r):
        return r - s * solve(s * (K @ r))

    alpha = apply(nu)
    if refine:
        alpha = alpha + apply(nu - alpha - tau * (K @ alpha))
    return K @ alpha


def current(K, tau, nu):
    s, _, solve, _ = gaussian._function_parts(K, tau)
    return K @ gaussian.site_alpha(K, tau, nu, s, solve)


def cholesky(K, tau, nu):
    L = jnp.linalg.cholesky(K + jnp.diag(1.0 / tau))
    return K @ cho_solve((L, True), nu / tau)


FORMS = {
    "woodbury": lambda K, t, v: woodbury(K, t, v, False),
    "woodbury+1": lambda K, t, v: woodbury(K, t, v, True),
    "site_alpha": current,
    "cholesky": cholesky,
}


def median_seconds(fn, *args, repeat=20):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    from inference.ep.problem import EPProblem

    print("| n | dtype | to_latent s (woodbury+1 / site_alpha) | " + " | ".join(f"{k} error (sds)" for k in FORMS) + " |")
    print("|---|---|---|" + "---|" * len(FORMS))
    for n in (60, 500, 1000):
        for x64 in (False, True):
            with jax.enable_x64(x64):
                rng = np.random.default_rng(0)
                X = np.sort(rng.uniform(-3, 3, size=(n, 1)), 0)
                y = np.sin(2 * X[:, 0]) + 0.01 * rng.normal(size=n)
                K = jnp.asarray(gram(RBF(2.0), X)[0])
                Kd = np.asarray(K, np.float64)
                C = Kd + 1e-4 * np.eye(n)
                exact = Kd @ np.linalg.solve(C, y)
                sd = np.sqrt(np.diag(Kd - Kd @ np.linalg.solve(C, Kd)))
                tau = jnp.full(n, 1e4, K.dtype)
                nu = jnp.asarray(y, K.dtype) * tau
                errors = []
                for form in FORMS.values():
                    m = np.asarray(jax.jit(form)(K, tau, nu), np.float64)
                    errors.append(f"{np.max(np.abs(m - exact) / sd):.3g}")
                problem = EPProblem("function", None, K, jnp.zeros(n, K.dtype), ())
                latent = gaussian.LatentMap(jnp.zeros(n, K.dtype), None, K, K)

                def old_to_latent(t, v):
                    s, _, solve, _ = gaussian._function_parts(K, t)
                    W = s[:, None] * latent.AS0

                    def apply(r):
                        return r - s * solve(s * (K @ r))

                    a = apply(v)
                    a = a + apply(v - a - t * (K @ a))
                    return latent.AS0.T @ a, gaussian._sym(latent.S0 - W.T @ solve(W))

                new_to_latent = jax.jit(lambda t, v: gaussian.to_latent(problem, latent, t, v))
                t_old, t_new = median_seconds(jax.jit(old_to_latent), tau, nu), median_seconds(new_to_latent, tau, nu)
                print(f"| {n} | {K.dtype} | {t_old:.5f} / {t_new:.5f} | " + " | ".join(errors) + " |", flush=True)


if __name__ == "__main__":
    main()
