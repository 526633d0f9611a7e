"""Gamma variates inside a compiled program: `inference.random_draws.log_gammas` (Marsaglia and
Tsang on whole arrays) vs `jax.random.loggamma` (the same sampler, one element at a time,
vmapped) and NumPyro's `dist.Gamma(a).sample` (`jax.random.gamma`).

For each concentration and size: compilation time of a program that only draws (fresh caches
before each, after a warm-up compile so that one-time XLA start-up is not counted) and the median
run time of `REPEATS` warm calls, the three samplers interleaved; plus a Kolmogorov-Smirnov p-value
of each sampler's draws against scipy's CDF (a sanity check: the tests in
tests/inference/test_random_draws.py hold the distribution to account).

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gamma_sampler.py [--x64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import scipy.stats

from inference.random_draws import log_gammas

REPEATS = 15


def samplers():
    return {
        "ours (log_gammas)": lambda key, a: log_gammas(key, [a])[0],
        "jax.random.loggamma": lambda key, a: jax.random.loggamma(key, a, a.shape, a.dtype),
        "numpyro Gamma (log)": lambda key, a: jnp.log(dist.Gamma(a).sample(key)),
    }


def compile_seconds(fn, key, a):
    jax.clear_caches()
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(key, a).compile()
    return time.perf_counter() - t0, compiled


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--x64", action="store_true", help="float64 (default: float32, JAX's default)")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", args.x64)
    dtype = jnp.float64 if args.x64 else jnp.float32
    jax.jit(lambda x: x + 1)(1.0)  # XLA start-up, not counted
    print(f"dtype {jnp.dtype(dtype).name}, jax {jax.__version__}, {REPEATS} warm runs each (median)")
    print("| a | n | sampler | compile (s) | run (s) | KS p |")
    print("|---|---|---|---|---|---|")
    key = jax.random.PRNGKey(0)
    for a0 in (0.3, 2.0, 1000.0):
        for n in (1000, 1_000_000):
            a = jnp.full(n, a0, dtype)
            compiled = {}
            for name, fn in samplers().items():
                compiled[name] = compile_seconds(fn, key, a)
            runs = {name: [] for name in compiled}
            for r in range(REPEATS):  # interleaved: load drifts hit every sampler alike
                for name, (_, prog) in compiled.items():
                    t0 = time.perf_counter()
                    prog(jax.random.PRNGKey(r), a).block_until_ready()
                    runs[name].append(time.perf_counter() - t0)
            for name, (seconds, prog) in compiled.items():
                x = np.asarray(prog(jax.random.PRNGKey(99), a), np.float64)[:100_000]
                p = scipy.stats.kstest(x, scipy.stats.loggamma(a0).cdf).pvalue
                print(f"| {a0:g} | {n:.0e} | {name} | {seconds:.2f} | {statistics.median(runs[name]):.2e} | {p:.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
