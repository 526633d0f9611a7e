"""The HMM log likelihood under a gradient: sequential scan (T steps deep) vs a tree reduction
(log2 T deep), on whatever backend JAX runs on.

`probmodels.hmm` sums its states out with `inference.hmm.forward_backward.sequence_log_likelihood`,
a `lax.scan` of T steps: NUTS differentiates it at every leapfrog step. On a GPU each step of the
scan is a kernel launch (its first NUTS fit did not finish in minutes on an H200, RESULTS.md);
the alternative is to multiply the T step matrices in the (logsumexp, +) semiring pairwise, a tree
of depth log2 T (`inference.hmm.parallel.sequence_log_likelihood`, exact, K^3 work per product). This
script times ``value_and_grad`` of both (compiled, warm, best of ``--repeats`` batches of 50 calls)
and checks they agree. Measured on an H200 (RESULTS.md), the tree is now what the model uses on
accelerators, the scan on CPUs.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hmm_likelihood_depth.py [--steps 300,600,2000 --states 2,3,5]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from inference.hmm.forward_backward import _scan_log_likelihood
from inference.hmm.parallel import sequence_log_likelihood as tree_log_likelihood


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="300,600,2000")
    parser.add_argument("--states", default="2,3,5")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--float32", action="store_true", help="float32 (default float64)")
    ns = parser.parse_args()
    jax.config.update("jax_enable_x64", not ns.float32)
    print(f"backend {jax.default_backend()}, devices {jax.devices()}, {'float32' if ns.float32 else 'float64'}")
    print("| T | K | sequential scan (ms) | tree (ms) | tree / scan | compile scan / tree (s) | max abs diff (value, grad) |")
    print("|---|---|---|---|---|---|---|")
    for T in map(int, ns.steps.split(",")):
        for K in map(int, ns.states.split(",")):
            rng = np.random.default_rng(0)
            li = jnp.log(jnp.full(K, 1.0 / K))
            lt = jnp.log(jnp.asarray(rng.dirichlet(np.full(K, 5.0), K)))
            le = jnp.asarray(rng.normal(size=(T, K)))
            mask = jnp.ones(T, bool)
            out, times, compiles = {}, {}, {}
            for name, fn in (("scan", _scan_log_likelihood), ("tree", tree_log_likelihood)):
                vg = jax.jit(jax.value_and_grad(lambda lt, le, fn=fn: fn(li, lt, le, mask), argnums=(0, 1)))
                t = time.perf_counter()
                out[name] = jax.block_until_ready(vg(lt, le))
                compiles[name] = time.perf_counter() - t
                best = np.inf
                for _ in range(ns.repeats):
                    t = time.perf_counter()
                    for _ in range(50):
                        r = vg(lt, le)
                    jax.block_until_ready(r)
                    best = min(best, (time.perf_counter() - t) / 50)
                times[name] = best * 1e3
            (va, (ga1, ga2)), (vb, (gb1, gb2)) = out["scan"], out["tree"]
            diff_v = float(abs(va - vb))
            diff_g = float(max(jnp.max(jnp.abs(ga1 - gb1)), jnp.max(jnp.abs(ga2 - gb2))))
            print(f"| {T} | {K} | {times['scan']:.3f} | {times['tree']:.3f} | {times['tree'] / times['scan']:.2f} | "
                  f"{compiles['scan']:.2f} / {compiles['tree']:.2f} | {diff_v:.1e}, {diff_g:.1e} |", flush=True)


if __name__ == "__main__":
    main()
