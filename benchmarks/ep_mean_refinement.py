"""Cost of the refined EP latent mean (`inference.ep.gaussian._refined_alpha`, session 57) inside
`inference.ep.gaussian.to_latent`, side by side with the unrefined form in one process: jitted,
warm, median of 20 calls, GP regression sites (tau = 1e4) on an RBF(2) Gram matrix, float32 and
float64, and the largest mean error of each against the float64 closed form in posterior sds.

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

from inference.ep import gaussian  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402


def unrefined(problem, latent, tau, nu):
    """`to_latent` as it was before the refinement (function space)."""
    K = problem.prior_cov
    s, _, solve, _ = gaussian._function_parts(K, tau)
    W = s[:, None] * latent.AS0
    alpha = nu - s * solve(s * (K @ nu))
    return latent.m0 + latent.AS0.T @ alpha, gaussian._sym(latent.S0 - W.T @ solve(W))


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

    print("| n | dtype | unrefined s | refined s | ratio | mean error unrefined / refined (sds) |")
    print("|---|---|---|---|---|---|")
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
                problem = EPProblem("function", None, K, jnp.zeros(n, K.dtype), ())
                latent = gaussian.LatentMap(jnp.zeros(n, K.dtype), None, K, K)
                old, new = jax.jit(lambda t, v: unrefined(problem, latent, t, v)), \
                    jax.jit(lambda t, v: gaussian.to_latent(problem, latent, t, v))
                t_old, t_new = median_seconds(old, tau, nu), median_seconds(new, tau, nu)
                e_old, e_new = (float(np.max(np.abs(np.asarray(f(tau, nu)[0], np.float64) - exact) / sd)) for f in (old, new))
                print(f"| {n} | {K.dtype} | {t_old:.5f} | {t_new:.5f} | {t_new / t_old:.2f} | {e_old:.3g} / {e_new:.3g} |")


if __name__ == "__main__":
    main()
