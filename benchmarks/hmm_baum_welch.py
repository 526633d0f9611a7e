"""Baum-Welch time per EM iteration: inference.hmm.baum_welch vs hmmlearn, one CPU thread each.

Both fit a univariate Gaussian HMM to the same simulated sequence from the same start values for a
fixed number of iterations (tol = 0, so neither stops early) in float64, and both run full EM
(E step: forward-backward + expected transition counts; M step: initial, transition, means and
variances). hmmlearn is configured for plain maximum likelihood (no priors: covars_prior = 0,
means_weight = 0) and runs with both its implementations ("log", its default, and "scaling").
Ours is compiled first (compile time reported separately; ``max_iter`` fixes an array shape).
The final log likelihoods are compared so that a fast wrong answer cannot win.

Reproduce (bench extra installed: ``pip install -e '.[bench]'``):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hmm_baum_welch.py --out benchmarks/results/hmm_baum_welch.md
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
os.environ.setdefault("INFERENCE_COMPILATION_CACHE", "0")  # report real compile times
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from inference import hmm  # noqa: E402


def simulate(num_steps: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    trans = rng.dirichlet(np.ones(k), size=k) + 8.0 * np.eye(k)
    trans /= trans.sum(1, keepdims=True)
    z = np.zeros(num_steps, int)
    u = rng.random(num_steps)
    cum = trans.cumsum(1)
    for t in range(1, num_steps):
        z[t] = min(np.searchsorted(cum[z[t - 1]], u[t]), k - 1)
    locs = np.linspace(-2.0 * k, 2.0 * k, k)
    x = rng.normal(locs[z], 1.0)
    start = {"init": np.full(k, 1.0 / k), "trans": np.full((k, k), 0.2 / max(k - 1, 1)) + (0.8 - 0.2 / max(k - 1, 1)) * np.eye(k),
             "locs": np.quantile(x, (np.arange(k) + 0.5) / k) + 0.1, "scales": np.full(k, x.std())}
    if k == 1:
        start["trans"] = np.ones((1, 1))
    return x, start


def run_ours(x, start, iters):
    fit = lambda: hmm.baum_welch(x, len(start["init"]), init_params=start, max_iter=iters, tol=0.0)  # noqa: E731
    t0 = time.perf_counter()
    fit()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = fit()
    run = time.perf_counter() - t0
    # the log likelihood after iters - 2 updates: the last one hmmlearn records (see below)
    return run / out.num_iters, first - run, float(out.log_likelihood[-2])


def run_hmmlearn(x, start, iters, implementation):
    from hmmlearn.hmm import GaussianHMM

    k = len(start["init"])
    model = GaussianHMM(k, "diag", covars_prior=0, covars_weight=0, means_prior=0, means_weight=0, min_covar=0,
                        n_iter=iters - 1, tol=0, init_params="", implementation=implementation)
    model.startprob_, model.transmat_ = start["init"], start["trans"]
    model.means_, model.covars_ = start["locs"][:, None], (start["scales"] ** 2)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model.fit(x[:, None])
        run = time.perf_counter() - t0
    # hmmlearn's n_iter E steps each record the log likelihood before their M step; ours records
    # max_iter E steps and skips the last M step, so both evaluate iters - 1 updates.
    return run / (iters - 1), 0.0, float(model.monitor_.history[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10000,100000")
    parser.add_argument("--states", default="2,10")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import hmmlearn

    header = (f"jax {jax.__version__}, hmmlearn {hmmlearn.__version__}; {platform.machine()}, 1 thread, float64; "
              f"seconds per EM iteration ({args.iters} iterations, compile excluded and shown in brackets); "
              f"xR = hmmlearn / ours (R > 1: ours faster)")
    rows = ["| T | K | ours | hmmlearn log | hmmlearn scaling | log likelihood after the same number of updates: ours / hmmlearn |",
            "|---|---|---|---|---|---|"]
    print(header, flush=True)
    for num_steps in [int(float(s)) for s in args.steps.split(",")]:
        for k in [int(s) for s in args.states.split(",")]:
            x, start = simulate(num_steps, k)
            ours = run_ours(x, start, args.iters)
            log_impl = run_hmmlearn(x, start, args.iters, "log")
            scaling = run_hmmlearn(x, start, args.iters, "scaling")
            rows.append(
                f"| {num_steps:.0e} | {k} | {ours[0]:.4f} [{ours[1]:.1f}] | {log_impl[0]:.4f}, x{log_impl[0] / ours[0]:.2f} "
                f"| {scaling[0]:.4f}, x{scaling[0] / ours[0]:.2f} | {ours[2]:.6f} / {log_impl[2]:.6f} |")
            print(rows[-1], flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join([header, "", *rows]) + "\n")


if __name__ == "__main__":
    main()
