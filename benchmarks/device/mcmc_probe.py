"""Where a NUTS fit's time goes on a GPU: compilation or the sampler's steps (one process, no pytest).

On an H100 on 2026-11-27 none of the 8 float32 MCMC cells of the defaults matrix finished within
440 s (15 pytest workers sharing the GPU), while every EP, Laplace and VI cell passed. This script
times, for a few library models in float32 (JAX's default, what the matrix runs), our
`inference.mcmc` first fit (compilation included), XLA compilation alone, and a warm refit, then
raw NumPyro's MCMC on the same model and draws, so the two can be compared on the same device.
Each step prints as it finishes, so a run stopped at its time limit still shows what it reached.
Measured on an H200 on 2026-11-27 (benchmarks/RESULTS.md): the time is the sampler's steps, not
compilation (linear regression: 7.6 s warm with chains one after another, 1.9 s vectorised, now the
default there); the HMM's first fit did not finish in ~200 s; on 2026-11-28, with its log
likelihood a tree on accelerators, it took 37.8 s (23.4 s warm, against 6.5 s on one CPU core).

    python3 benchmarks/device/mcmc_probe.py [--models linear_regression,hmm] [--warmup 500 --samples 500]
        [--chain-method vectorized|sequential|parallel]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("INFERENCE_PROGRESS", "0")
os.environ.setdefault("INFERENCE_COMPILATION_CACHE", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402

COMPILE = {"s": 0.0, "n": 0}


def _listen(event, secs, **kw):
    if "backend_compile" in event:
        COMPILE["s"] += secs
        COMPILE["n"] += 1


def data(name):
    rng = np.random.default_rng(0)
    if name in ("linear_regression", "logistic_regression"):
        X = rng.normal(size=(100, 3))
        eta = X @ np.array([1.0, -1.0, 0.5])
        y = eta + rng.normal(size=100) if name == "linear_regression" else (rng.uniform(size=100) < 1 / (1 + np.exp(-eta))).astype(int)
        return (X, y), {}
    if name == "hmm":
        return (np.r_[rng.normal(-1, 0.5, 150), rng.normal(2, 0.5, 150)],), {"num_states": 2}
    if name == "gaussian_mixture":
        return (np.r_[rng.normal(-3, 1, (50, 1)), rng.normal(3, 1, (50, 1))],), {"num_components": 2}
    raise ValueError(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="linear_regression,hmm")
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--chain-method", default=None, help="ours only (default: the library's default)")
    ns = parser.parse_args()
    jax.monitoring.register_event_duration_secs_listener(_listen)
    from numpyro.infer import MCMC, NUTS

    import inference
    import probmodels

    print("devices", jax.devices(), "x64", jax.config.jax_enable_x64, flush=True)
    for name in ns.models.split(","):
        args, kwargs = data(name)
        model = getattr(probmodels, name)
        opts = dict(num_warmup=ns.warmup, num_samples=ns.samples, num_chains=ns.chains, progress=False,
                    chain_method=ns.chain_method)
        for label, seed in (("ours, first fit", 0), ("ours, warm refit", 1)):
            c0, n0, t = COMPILE["s"], COMPILE["n"], time.perf_counter()
            post = inference.mcmc(model, *args, seed=seed, **opts, **kwargs)
            print(f"{name}: {label}: {time.perf_counter() - t:.1f} s, of which XLA compilation {COMPILE['s'] - c0:.1f} s "
                  f"({COMPILE['n'] - n0} programs); chain_method {post.diagnostics.get('chain_method')}, "
                  f"converged {post.diagnostics['converged']}", flush=True)
        mcmc = MCMC(NUTS(model), num_warmup=ns.warmup, num_samples=ns.samples, num_chains=ns.chains,
                    chain_method="sequential" if jax.local_device_count() < ns.chains else "parallel", progress_bar=False)
        for label, seed in (("raw NumPyro, first run", 0), ("raw NumPyro, second run", 1)):
            c0, n0, t = COMPILE["s"], COMPILE["n"], time.perf_counter()
            mcmc.run(jax.random.PRNGKey(seed), *args, **kwargs)
            jax.block_until_ready(mcmc.get_samples())
            print(f"{name}: {label}: {time.perf_counter() - t:.1f} s, of which XLA compilation {COMPILE['s'] - c0:.1f} s "
                  f"({COMPILE['n'] - n0} programs)", flush=True)


if __name__ == "__main__":
    main()
