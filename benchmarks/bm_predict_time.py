"""Bayes-machine `post.predict` seconds per warm call, EP and ESS (MCMC) posteriors: circle data,
200 training points, 1000 new points, 1000 draws (RESULTS.md, "EP when damped parallel EP fails",
the predictor paragraph). Before/after in one run: the old tree through PYTHONPATH.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bm_predict_time.py after
"""
import sys, time, numpy as np, jax
jax.config.update("jax_enable_x64", True)
import inference
from probmodels.gp import bayes_machine
from probmodels.simulate import circle
X, y = circle(200, 0.1, seed=0)
Xt, _ = circle(1000, 0.0, seed=1)
out = []
for eng, kw in [("ep", dict(num_samples=1000)), ("mcmc", dict(num_samples=250, num_warmup=100, num_chains=4))]:
    post = getattr(inference, eng)(bayes_machine, X, y, progress=False, **kw)
    post.predictor(jax.random.PRNGKey(0), Xt)  # first call (reads the model at the new inputs)
    ts = []
    for k in range(3):
        t = time.perf_counter(); post.predictor(jax.random.PRNGKey(k), Xt); ts.append(time.perf_counter() - t)
    out.append(f"{eng} {min(ts):.3f}s")
print(sys.argv[1], *out)
