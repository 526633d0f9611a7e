"""VI on GP classifiers: natural-gradient steps to the full-rank ELBO optimum (`inference.latent_vi`,
the default since session 66) against stochastic VI on the whitened guide (mean-field, and
full-rank "mvn"), with EP's log Z beside them. RESULTS.md, "VI on latent-Gaussian models".

ELBO is the exact objective all three maximise (higher: q nearer the posterior in KL); the same
draws give Pareto k; seconds are warm (the second of two identical fits), one CPU thread.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/latent_vi.py f64   # or f32
"""
import sys
import time
import warnings

import jax
import numpy as np

if sys.argv[1] == "f64":
    jax.config.update("jax_enable_x64", True)
import inference  # noqa: E402
import probmodels  # noqa: E402
from probmodels.kernels import RBF  # noqa: E402

warnings.simplefilter("ignore")
METHODS = {"natural-gradient": {}, "SVI mean-field": {"check_every": 499},
           "SVI mvn": {"guide": "mvn", "check_every": 499}}
print(f"| n | seed | method | ELBO | converged | steps | Pareto k | warm s |  ({sys.argv[1]})")
print("|---|---|---|---|---|---|---|---|")
for n in (100, 300):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, 2))
        y = (np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(int)
        fit = lambda **o: inference.vi(probmodels.gp_classifier, X, y, kernel=RBF(1.0), seed=seed,  # noqa: E731
                                       progress=False, **o)
        for name, opts in METHODS.items():
            fit(**opts)
            t = time.perf_counter()
            d = fit(**opts).diagnostics
            dt = time.perf_counter() - t
            print(f"| {n} | {seed} | {name} | {d['elbo']:.3f} | {d['converged']} | {d['steps']} | "
                  f"{d['pareto_k']:.2f} | {dt:.2f} |")
        ep = inference.ep(probmodels.gp_classifier, X, y, kernel=RBF(1.0), seed=seed, progress=False)
        print(f"| {n} | {seed} | EP log Z | {ep.log_evidence:.3f} | {ep.diagnostics['converged']} | "
              f"{ep.diagnostics['iterations']} | {ep.diagnostics['pareto_k']:.2f} | |")
