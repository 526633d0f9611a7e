"""Anderson-accelerated parallel EP (`inference.ep.anderson.run`) against plain undamped parallel
sweeps (`inference.ep.update.run`, what `inference.ep` runs by default) from EP's cold start (zero
sites), on the recognised problems of four models: sweeps to the same tolerance, warm time (median
of 5 runs, compilation excluded) and the distance between the two fixed points (largest
|mean difference| / marginal sd). The hyperparameter search (`inference.hyper.ep_fit`) uses
Anderson for its warm-started evaluations, where it halved the sweeps; this asks whether plain
`inference.ep` should use it too.

Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_anderson_cold.py`
"""

import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402

import probmodels  # noqa: E402
from inference import _options  # noqa: E402
from inference._model import trace_model  # noqa: E402
from inference.ep import anderson  # noqa: E402
from inference.ep.recognise import recognise  # noqa: E402
from inference.ep.update import init, run  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.kernels import RBF  # noqa: E402


def poisson_regression(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Poisson(jnp.exp(X @ w)), obs=y)


def cases(dtype):
    X, y = datasets.load("twonorm")
    s = datasets.split(X, y, train_size=1000, seed=0, test_size=100)
    Xt, yt = s.X_train.astype(dtype), s.y_train
    rng = np.random.default_rng(0)
    Xp = rng.normal(size=(300, 5)).astype(dtype)
    yp = rng.poisson(np.exp(0.3 * Xp @ np.ones(5)))
    return {
        "GP classifier (probit), twonorm n = 500": (probmodels.gp_classifier, (Xt[:500], yt[:500]),
                                                    {"kernel": RBF(float(np.sqrt(X.shape[1])))}),
        "logistic regression, twonorm n = 1000": (probmodels.logistic_regression, (Xt, yt), {}),
        "probit regression, twonorm n = 1000": (probmodels.probit_regression, (Xt, yt), {}),
        "Poisson regression, simulated n = 300": (poisson_regression, (Xp, yp), {}),
    }


def timed(fn, *args):
    out = jax.block_until_ready(fn(*args))  # compiles
    times = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return out, statistics.median(times)


def main():
    plain = jax.jit(lambda p, s, tol: run(p, s, 1.0, tol, 200))
    fast = jax.jit(lambda p, s, tol: anderson.run(p, s, tol, 200))
    print("| model | dtype | tol | plain sweeps | Anderson sweeps | plain (ms) | Anderson (ms) | Anderson / plain | max |mean diff| / sd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype, x64 in (("float64", True), ("float32", False)):
        with jax.enable_x64(x64):
            for name, (model, args, kwargs) in cases(np.float64 if x64 else np.float32).items():
                trace = trace_model(model, args, kwargs, 0)
                problem = recognise(model, args, kwargs, trace, seed=0).problem
                tol = _options.working_tol(1e-6, problem.offset.dtype)
                start = init(problem)
                (sp, it_p, _, ch_p), tp = timed(plain, problem, start, tol)
                (sa, it_a, ch_a), ta = timed(fast, problem, start, tol)
                assert float(ch_p) <= tol and float(ch_a) <= tol, (name, dtype, float(ch_p), float(ch_a))
                diff = float(jnp.max(jnp.abs(sa.mean - sp.mean) / jnp.sqrt(sp.var)))
                print(f"| {name} | {dtype} | {tol:g} | {int(it_p)} | {int(it_a)} | {1e3 * tp:.2f} | {1e3 * ta:.2f} "
                      f"| {ta / tp:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
