"""First-call latency with and without JAX's persistent compilation cache.

Each measurement is a fresh Python process fitting the same model (logistic regression, 500 x 5)
with one engine; the time is that of the first fit in the process (import excluded). Three
settings: cache off, cache on but empty (cold: a new directory each time), cache on and filled by a
previous process on the same data (warm; for MCMC this includes the NUTS program kept exported,
`inference.exported`). Median of `REPEATS` processes per setting, in interleaved rounds.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compile_cache.py [--out benchmarks/results/compile_cache.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from collect_results import write_report

REPEATS = 3

CHILD = r"""
import json, sys, time
import jax; jax.config.update("jax_enable_x64", True)
import numpy as np
import inference, probmodels
engine = sys.argv[1]
rng = np.random.default_rng(0)
X = rng.normal(size=(500, 5)); y = (X @ np.ones(5) + rng.normal(size=500) > 0).astype(int)
opts = {"mcmc": dict(num_samples=500, num_warmup=500, num_chains=1, progress=False),
        "vi": dict(steps=2000, progress=False), "laplace": {}}[engine]
t0 = time.perf_counter()
inference.fit(probmodels.logistic_regression, X, y, engine=engine, **opts)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def child(engine, env):
    out = subprocess.run([sys.executable, "-c", CHILD, engine], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/compile_cache.md")
    args = parser.parse_args()
    base = dict(os.environ, OMP_NUM_THREADS="1", INFERENCE_PROGRESS="0",
                XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
    rows = []
    for engine in ("laplace", "vi", "mcmc"):
        with tempfile.TemporaryDirectory() as warm_dir:
            child(engine, dict(base, INFERENCE_COMPILATION_CACHE=warm_dir))  # fills the warm cache
            times = {"off": [], "cold": [], "warm": []}
            for _ in range(REPEATS):
                times["off"].append(child(engine, dict(base, INFERENCE_COMPILATION_CACHE="0")))
                with tempfile.TemporaryDirectory() as cold_dir:
                    times["cold"].append(child(engine, dict(base, INFERENCE_COMPILATION_CACHE=cold_dir)))
                times["warm"].append(child(engine, dict(base, INFERENCE_COMPILATION_CACHE=warm_dir)))
        med = {k: float(np.median(v)) for k, v in times.items()}
        rows.append((engine, med["off"], med["cold"], med["warm"]))
        print(engine, times, flush=True)
    lines = ["## Persistent compilation cache: first-call latency (fresh process each)", "",
             f"Median of {REPEATS} fresh processes per setting; logistic regression 500 x 5; MCMC 1 chain x "
             "(500 + 500), VI 2000 steps; OMP_NUM_THREADS=1, single-threaded XLA.", "",
             "| engine | cache off (s) | cache cold (s) | cache warm (s) | warm / off |", "|---|---|---|---|---|"]
    lines += [f"| {e} | {a:.2f} | {b:.2f} | {c:.2f} | {c / a:.2f} |" for e, a, b, c in rows]
    lines += ["", "Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compile_cache.py`", ""]
    text = "\n".join(lines)
    write_report(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
