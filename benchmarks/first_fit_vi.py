"""First VI fit in a fresh process: `inference.vi` vs raw NumPyro SVI, side by side in one run.

What a user waits for when a script starts: the first fit of a model, tracing and XLA compilation
included, in a new process with no compilation cache. Samplers: ours (`inference.vi` with its
defaults: AutoNormal, Adam, convergence checks every chunk of steps, draws, pointwise log
likelihood, diagnostics) and raw NumPyro as usually written (``SVI(model, AutoNormal(model),
Adam(0.01), Trace_ELBO()).run`` for the same number of steps, then ``Predictive`` draws of the
guide), each in its own process, rounds interleaved so that machine load drifts hit both alike.
Models: linear regression (100 x 3), Gaussian mixture (2 components, 100 points in 1-D), HMM
(2 Gaussian states, 300 points), from `probmodels`. Reported: median wall seconds over the
processes, the number of XLA compilations, and ours/raw.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_fit_vi.py [--processes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODELS = ("linear_regression", "gaussian_mixture", "hmm")
STEPS = 2000  # raw NumPyro's steps: ours stops at convergence (reported) or at its default cap


def child(model_name: str, sampler: str) -> dict:
    import time

    import jax

    jax.config.update("jax_enable_x64", True)
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(secs) if "backend_compile" in event else None)
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, Predictive, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    import inference
    import probmodels

    rng = np.random.default_rng(0)
    if model_name == "linear_regression":
        X = rng.normal(size=(100, 3))
        args, kwargs = (X, X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=100)), {}
    elif model_name == "gaussian_mixture":
        args, kwargs = (np.r_[rng.normal(-3, 1, (50, 1)), rng.normal(3, 1, (50, 1))],), {"num_components": 2}
    else:
        args, kwargs = (np.r_[rng.normal(-1, 0.5, 150), rng.normal(2, 0.5, 150)],), {"num_states": 2}
    model = getattr(probmodels, model_name)
    start = time.perf_counter()
    steps = STEPS
    if sampler == "ours":
        post = inference.vi(model, *args, progress=False, **kwargs)
        steps = int(post.diagnostics["steps"])
    else:
        guide = AutoNormal(model)
        svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
        res = svi.run(jax.random.PRNGKey(0), STEPS, *args, progress_bar=False, **kwargs)
        draws = Predictive(guide, params=res.params, num_samples=1000)(jax.random.PRNGKey(1), *args, **kwargs)
        jax.block_until_ready(draws)
    return {"seconds": time.perf_counter() - start, "compiles": len(compiles),
            "compile_seconds": sum(compiles), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child(*ns.child)))
        return
    env = dict(os.environ, INFERENCE_COMPILATION_CACHE="0", INFERENCE_PROGRESS="0",
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false"))
    results = {(m, s): [] for m in MODELS for s in ("ours", "raw")}
    for _ in range(ns.processes):
        for m in MODELS:
            for s in ("ours", "raw"):
                out = subprocess.run([sys.executable, __file__, "--child", m, s], capture_output=True, text=True,
                                     env=env, check=True)
                results[m, s].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| model | ours: first fit (s) | ours: compilations (s compiling) | ours: steps | raw NumPyro SVI: first fit (s) "
          "| raw: compilations (s compiling) | ours / raw |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        o, r = results[m, "ours"], results[m, "raw"]
        med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"| {m} | {med(o, 'seconds'):.2f} | {med(o, 'compiles'):.0f} ({med(o, 'compile_seconds'):.1f}) "
              f"| {med(o, 'steps'):.0f} | {med(r, 'seconds'):.2f} | {med(r, 'compiles'):.0f} "
              f"({med(r, 'compile_seconds'):.1f}) | {med(o, 'seconds') / med(r, 'seconds'):.2f} |")


if __name__ == "__main__":
    main()
