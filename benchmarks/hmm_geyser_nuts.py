"""NUTS on the Bayesian HMM of the Old Faithful geyser durations: effective samples per second.

``inference.mcmc(probmodels.hmm, duration, num_states=2)`` (Gaussian emissions, ordered locs; the
model's log likelihood is :func:`inference.hmm.log_likelihood`'s exact log-space forward pass and
the states are recovered by forward-filtering backward-sampling afterwards), 2 chains of 500
warmup + 500 draws, as in notebooks/hmm.ipynb. Reported: wall time, the minimum bulk ESS over
every continuous coordinate (init, trans, locs, scales) and that ESS per second. The first call
in the process includes compilation; the second (a new seed, same shapes) is the steady-state
number (JAX reuses the compiled sampler).

Reproduce:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hmm_geyser_nuts.py
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

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
import probmodels  # noqa: E402
from probmodels import datasets  # noqa: E402


def min_bulk_ess(post) -> tuple[float, str]:
    """Smallest bulk ESS over the continuous coordinates, and which one."""
    table = post.summary()  # continuous sites only (the discrete states are left out)
    return float(table["ess_bulk"].min()), str(table["ess_bulk"].idxmin())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    duration = datasets.load_unsupervised("geyser")[:, 1]
    print(f"jax {jax.__version__}, {platform.processor() or platform.machine()}, 1 thread, float64; "
          f"geyser durations T = {duration.size}, K = 2, {args.chains} chains x ({args.warmup} warmup + "
          f"{args.samples} draws)\n")
    print("| call | wall s | min bulk ESS (coordinate) | min bulk ESS / s | divergences | max R-hat |")
    print("|---|---|---|---|---|---|")
    for call, seed in (("first (with compile)", 0), ("second (compiled)", 1)):
        t0 = time.perf_counter()
        post = inference.mcmc(probmodels.hmm, duration, num_states=2, num_samples=args.samples,
                              num_warmup=args.warmup, num_chains=args.chains, seed=seed, progress=False)
        jax.block_until_ready(post.samples)
        wall = time.perf_counter() - t0
        ess, where = min_bulk_ess(post)
        rhat = float(post.summary()["r_hat"].max())
        div = post.diagnostics["divergences"]
        print(f"| {call} | {wall:.1f} | {ess:.0f} ({where}) | {ess / wall:.1f} | {div} | {rhat:.3f} |", flush=True)


if __name__ == "__main__":
    main()
