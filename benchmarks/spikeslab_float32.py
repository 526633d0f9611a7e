"""Spike-and-slab regression EP in float32 against float64, side by side in one run.

Defaults of ``inference.ep(probmodels.spike_and_slab_regression, X, y)`` (unknown noise: EP on a
grid of noise precisions), simulated designs with three effects (2, -1.5, 1) among d genes, noise
sd 0.5. Per case: the warm fit time in each precision (second call; the first compiles), their
ratio, ``converged`` in each, and the largest difference of the inclusion probabilities. A
float32 fit that raises is reported with its error. Run it against another revision with
``PYTHONPATH=<worktree>`` to compare before and after.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/spikeslab_float32.py
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import numpy as np

import inference
import probmodels

CASES = ["60x50:1", "60x50:0", "30x40:0", "30x80:1", "30x200:0", "30x300:0"]


def three_effects(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = np.zeros(d)
    w[:3] = [2.0, -1.5, 1.0]
    return X, X @ w + 0.5 * rng.normal(size=n)


def warm_fit(X, y, x64):
    with jax.enable_x64(x64), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inference.ep(probmodels.spike_and_slab_regression, X, y, num_samples=10, progress=False)
        start = time.perf_counter()
        post = inference.ep(probmodels.spike_and_slab_regression, X, y, num_samples=10, progress=False)
        return post, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="n x d : seed, comma separated")
    args = parser.parse_args()
    print("| n x d | seed | float64 s | float32 s | ratio | converged 64 / 32 | max incl diff |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        shape, seed = case.split(":")
        n, d = map(int, shape.split("x"))
        X, y = three_effects(int(seed), n, d)
        f64, t64 = warm_fit(X, y, True)
        try:
            f32, t32 = warm_fit(X, y, False)
        except (ValueError, FloatingPointError) as err:
            what = "refused" if isinstance(err, ValueError) else "raised"
            print(f"| {n} x {d} | {seed} | {t64:.2f} | {what} | | {f64.diagnostics['converged']} / - | "
                  f"{type(err).__name__}: {str(err)[:60]}... |", flush=True)
            continue
        diff = np.max(np.abs(np.asarray(f32.approximation["inclusion_probability"], float)
                             - np.asarray(f64.approximation["inclusion_probability"], float)))
        print(f"| {n} x {d} | {seed} | {t64:.2f} | {t32:.2f} | {t32 / t64:.1f} | {f64.diagnostics['converged']} / "
              f"{f32.diagnostics['converged']} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
