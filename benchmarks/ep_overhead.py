"""EP's per-call overhead: a warm ``inference.ep`` call against its sweeps plus its draws (issue 22).

Goal: a warm call on an n = 500 probit GP classifier costs at most 1.5x its sweeps plus its draws.
Measured in one process, interleaved, median of ``--repeat`` rounds, after two warm-up calls:

- ``call``: ``inference.ep(model, X, y, progress=False)`` (defaults: 1000 draws);
- ``sweeps``: EP's sweeps alone on the recognised problem, from the initial sites, as the call
  runs them (`inference.ep.driver._default_damping_run`, same tolerance);
- ``draws``: everything that produces the 1000 draws from the converged sites
  (`inference.ep.driver.gaussian_draws`, named `_posterior_draws` before session 66: the latent Gaussian, its Cholesky factor, the draws, their
  log density, log joint, the model's other sites and the pointwise log likelihood; the model's
  program fingerprint, which a call computes once for its recognition, is not counted here);
- ``overhead`` = call / (sweeps + draws).

The rest of a call is reading the model (tracing, the program fingerprint, recognition of the
prior and the sites), the evidence and building the `Posterior`.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_overhead.py
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import inference  # noqa: E402
import probmodels  # noqa: E402
from inference import compiled  # noqa: E402
from inference._model import structure_trace  # noqa: E402
from inference.ep import driver  # noqa: E402
from inference.ep.recognise import recognise  # noqa: E402


def cases():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=500) > 0).astype(int)
    yield "probit GP classifier, n = 500", probmodels.gp_classifier, (X, y)
    X = rng.normal(size=(200, 3))
    y = (X @ np.array([1.0, -0.5, 0.25]) + 0.3 * rng.normal(size=200) > 0).astype(int)
    yield "probit regression, 200 x 3", probmodels.probit_regression, (X, y)


def measure(model, args, repeat):
    call = lambda: inference.ep(model, *args, progress=False)  # noqa: E731
    post = call(); call()
    tol = post.diagnostics["tol"]
    with compiled.scope():
        trace = structure_trace(model, args, {}, 0)
        rec = recognise(model, args, {}, trace, seed=0)

    def sweeps():
        t0 = time.perf_counter()
        out = driver._default_damping_run(rec.problem, "parallel", None, tol, 200, False)
        jax.block_until_ready(out[0])
        return time.perf_counter() - t0, out[0]

    state = sweeps()[1]

    def draws():  # the model's fingerprint is computed once per call, by the recognition: not here
        with compiled.scope():
            compiled.fingerprint(model, args, {})
            t0 = time.perf_counter()
            driver.gaussian_draws(model, args, {}, trace, rec, state, 1000, 0)
            return time.perf_counter() - t0, None

    def whole():
        t0 = time.perf_counter(); call(); return time.perf_counter() - t0, None

    draws()
    t = {"call": [], "sweeps": [], "draws": []}
    for _ in range(repeat):
        for name, fn in (("call", whole), ("sweeps", sweeps), ("draws", draws)):
            t[name].append(fn()[0])
    med = {k: float(np.median(v)) for k, v in t.items()}
    return med, post.diagnostics["iterations"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--x64", action="store_true", help="float64 (default: JAX's float32)")
    args = ap.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    print(f"{'float64' if args.x64 else 'float32'}, median of {args.repeat} warm rounds, one CPU thread")
    print("| model | sweeps | call (ms) | sweeps (ms) | draws (ms) | call / (sweeps + draws) |")
    print("|---|---|---|---|---|---|")
    for label, model, data in cases():
        med, it = measure(model, data, args.repeat)
        ratio = med["call"] / (med["sweeps"] + med["draws"])
        print(f"| {label} | {it} | {1e3 * med['call']:.1f} | {1e3 * med['sweeps']:.1f} | {1e3 * med['draws']:.1f} "
              f"| {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
