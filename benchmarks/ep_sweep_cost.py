"""Cost of EP's parallel sweeps on twonorm (RBF(sqrt(20))), n = 500, 1000, 2000, float64, medians
of 5 warm runs: the probit GP classifier (``inference.ep.update.run`` alone, no recognition or
draws, undamped) and the Bayes machine (``inference.ep.bayes_machine.fit``, defaults: damping
0.5, learnt noise). Compare two versions of the engine by running this script from each checkout.

Reproduce (the session-19 comparison; 8680b2f formed the global covariance every sweep):
    git worktree add /tmp/before 8680b2f
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/ep_sweep_cost.py
    .venv/bin/python benchmarks/ep_sweep_cost.py
"""

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
from inference.ep import bayes_machine as bm  # noqa: E402
from inference.ep.problem import EPProblem, SiteGroup  # noqa: E402
from inference.ep.update import init, run  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402


def main():
    print("engine:", os.path.dirname(inference.__file__))
    X, y = datasets.load("twonorm")
    for n in (500, 1000, 2000):
        s = datasets.split(X, y, train_size=n, seed=0, test_size=100)
        K = jnp.asarray(gram(RBF(float(np.sqrt(X.shape[1]))), s.X_train)[0])
        signs = jnp.asarray(np.sign(s.y_train), K.dtype)
        p = EPProblem("function", None, K, jnp.zeros(n, K.dtype), (SiteGroup("probit", {"s": signs}),))
        start = jax.jit(init)(p)
        out = jax.block_until_ready(run(p, start, 1.0, 1e-6, 50))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            out = jax.block_until_ready(run(p, start, 1.0, 1e-6, 50))
            times.append(time.perf_counter() - t0)
        t, sweeps = float(np.median(times)), int(out[1])
        print(f"GP classifier, n = {n}: {sweeps} sweeps in {t:.3f} s ({1000 * t / sweeps:.1f} ms per sweep)",
              flush=True)
        res = jax.block_until_ready(bm.fit(K, signs))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            res = jax.block_until_ready(bm.fit(K, signs))
            times.append(time.perf_counter() - t0)
        t, sweeps = float(np.median(times)), int(res.num_iter)
        print(f"Bayes machine, n = {n}: {sweeps} sweeps in {t:.3f} s ({1000 * t / sweeps:.1f} ms per sweep), "
              f"E[eps] {float(res.eps_mean):.4f}, log evidence {float(res.log_evidence):.6f}", flush=True)


if __name__ == "__main__":
    main()
