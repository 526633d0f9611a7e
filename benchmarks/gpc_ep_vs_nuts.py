"""EP vs NUTS on the probit GP classifier, n = 500: time to the same test error.

Data: the vendored twonorm (`probmodels.datasets.load("twonorm")`), 500 training and 2000 test
points (features standardised on the training part), kernel ``RBF(sqrt(20))``. EP:
``inference.ep(gp_classifier, ...)`` (parallel schedule, defaults), the predictive
``Phi(m / sqrt(1 + v))`` at the test points from its Gaussian approximation. NUTS:
``inference.mcmc`` on the whitened model ``f = L v, v ~ N(0, I)`` (the parametrisation NUTS
handles best: the centred one is far slower), one chain, and test error from the average of
``Phi(f* / ...)`` over draws (`probmodels.gp.latent_predictive`). NUTS is run with growing numbers of
draws (warm-up = draws) until its test error is within 0.5 points of EP's; times are wall clock
including JIT compilation for both (first call in the process), and EP's time without
compilation (second call) is reported too. Single-threaded XLA and BLAS.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gpc_ep_vs_nuts.py --out benchmarks/results/gpc_ep_vs_nuts.md
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.scipy.special import log_ndtr  # noqa: E402
from scipy.stats import norm  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.gp import gp_classifier, latent_predictive  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402
from collect_results import write_report  # noqa: E402


def whitened(L, y=None):
    """The probit GP classifier with f = L v, v ~ N(0, I): the same posterior over f."""
    v = numpyro.sample("v", dist.Normal(0.0, 1.0).expand([L.shape[0]]).to_event(1))
    f = numpyro.deterministic("f", L @ v)
    numpyro.sample("y", dist.Bernoulli(logits=log_ndtr(f) - log_ndtr(-f)), obs=y)


def test_error(p, y_test):
    return float(np.mean((p > 0.5) != (y_test > 0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--draws", type=int, nargs="*", default=[100, 250, 500])
    ap.add_argument("--nuts-model", choices=("whitened", "centred"), default="whitened",
                    help="NUTS on f = L v written by hand (whitened) or on the library's gp_classifier, which "
                         "inference.mcmc now samples whitened too (inference.whiten; 'centred' before 2026-11-25)")
    ap.add_argument("--out", default="benchmarks/results/gpc_ep_vs_nuts.md")
    args = ap.parse_args()
    X, y = datasets.load("twonorm")
    s = datasets.split(X, y, train_size=args.n, seed=0, test_size=2000)
    k = RBF(float(np.sqrt(X.shape[1])))

    def ep_fit():
        t0 = time.perf_counter()
        post = inference.ep(gp_classifier, s.X_train, s.y_train, kernel=k, progress=False, num_samples=200)
        m, v = latent_predictive(post.approximation["mean"][None], s.X_train, s.X_test, k)
        # the approximation's covariance adds A^T Sigma A to the conditional variance
        K = np.asarray(gram(k, s.X_train)[0])
        A = np.linalg.solve(K, np.asarray(k(s.X_test, s.X_train)).T)
        v = v + np.sum(A * (post.approximation["cov"] @ A), axis=0)  # diag(A^T Sigma A) by BLAS (einsum: 0.3 s)
        err = test_error(norm.cdf(m[0] / np.sqrt(1.0 + v)), s.y_test)
        return post, err, time.perf_counter() - t0

    post, ep_err, ep_time = ep_fit()
    _, _, ep_time_warm = ep_fit()
    print(f"EP: error {100 * ep_err:.2f}%  time {ep_time:.1f}s (warm {ep_time_warm:.2f}s), "
          f"{post.diagnostics.get('iterations')} sweeps", flush=True)
    L = np.linalg.cholesky(np.asarray(gram(k, s.X_train)[0]))
    rows = []
    for draws in args.draws:
        t0 = time.perf_counter()
        common = dict(num_samples=draws, num_warmup=draws, num_chains=1, progress=False, seed=0)
        if args.nuts_model == "whitened":
            ref = inference.mcmc(whitened, L, (s.y_train > 0).astype(np.int32), **common)
        else:
            ref = inference.mcmc(gp_classifier, s.X_train, s.y_train, kernel=k, **common)
        m, v = latent_predictive(ref.samples["f"], s.X_train, s.X_test, k)
        p = np.mean(norm.cdf(m / np.sqrt(1.0 + v)), axis=0)
        t = time.perf_counter() - t0
        err = test_error(p, s.y_test)
        rows.append((draws, err, t, ref.diagnostics.get("max_rhat"), ref.diagnostics.get("min_ess")))
        print(f"NUTS {draws}+{draws}: error {100 * err:.2f}%  time {t:.1f}s", flush=True)
        if abs(err - ep_err) <= 0.005:
            break
    write(args, ep_err, ep_time, ep_time_warm, post, rows)


def write(args, ep_err, ep_time, ep_time_warm, post, rows):
    lines = ["# EP vs NUTS: probit GP classifier, twonorm, n = %d (2000 test points)" % args.n, "",
             "Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gpc_ep_vs_nuts.py "
             f"--n {args.n} --draws {' '.join(map(str, args.draws))} --nuts-model {args.nuts_model}`", "",
             f"Machine: 2-core CPU shared with other processes (load average {os.getloadavg()[0]:.1f} at the end), "
             "single-threaded XLA/BLAS. Times include JIT compilation (the persistent compilation cache may serve "
             "executables) unless marked warm.", "",
             "| method | draws (warm-up + kept) | test error % | time s | ratio to EP |", "|---|---|---|---|---|",
             f"| EP (parallel, {post.diagnostics.get('iterations')} sweeps) | - | {100 * ep_err:.2f} | "
             f"{ep_time:.1f} (warm {ep_time_warm:.2f}) | 1 |"]
    for draws, err, t, rhat, ess in rows:
        lines.append(f"| NUTS, {args.nuts_model}, 1 chain (R-hat {rhat:.3f}, min ESS {ess:.0f}) | {draws} + {draws} | "
                     f"{100 * err:.2f} | {t:.1f} | {t / ep_time:.0f}x ({t / ep_time_warm:.0f}x warm) |")
    write_report(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
