"""EP's default schedule on logistic regressions with a broad weight prior (RESULTS.md, "EP when
damped parallel EP fails"): how many of 8 simulated data sets (n = 300, d = 3, weights N(0, 1))
converge, and which schedule ran ('p' parallel, 's' the sequential fallback).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_broad_prior.py f64   # or f32
"""
import sys, warnings, numpy as np, jax
if sys.argv[1] == "f64": jax.config.update("jax_enable_x64", True)
import inference, probmodels
warnings.simplefilter("ignore")
out = {}
for ps in [30.0, 100.0]:
    for seed in range(8):
        rng = np.random.default_rng(seed)
        X, w = rng.normal(size=(300, 3)), rng.normal(size=3)
        y = (rng.uniform(size=300) < 1 / (1 + np.exp(-X @ w))).astype(int)
        p = inference.ep(probmodels.logistic_regression, X, y, progress=False, prior_scale=ps, num_samples=10)
        out.setdefault(ps, []).append((p.diagnostics["converged"], p.diagnostics["schedule"][0]))
print(sys.argv[1], {k: (sum(c for c, _ in v), "".join(s for _, s in v)) for k, v in out.items()})
