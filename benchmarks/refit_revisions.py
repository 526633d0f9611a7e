"""Refits of two revisions side by side: what a second and third fit of the same model cost (SBC,
cross-validation, a refit with another seed), in XLA compilations and seconds.

Each revision runs in its own process (compilation cache off, one XLA thread): every demo case
(`probmodels.demo.cases`, the non-MCMC engines it lists) fitted with seed 0, then refitted with
seeds 1 and 2 on the same data; and `inference.sbc` with ``--replicates`` replicates of EP on
probit regression and of Laplace on linear regression (n = 30, new data and seed per replicate).
A kept program should make every refit compile nothing. The base revision runs from a temporary
``git worktree``.

Reproduce (from the project root):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/refit_revisions.py --base c65becc
"""

from __future__ import annotations

import argparse

from revisions import HERE, run_child, worktree

CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import jax; jax.config.update("jax_enable_x64", True)
import numpy as np
count = {"n": 0}
def listen(event, secs, **kw):
    if "backend_compile" in event:
        count["n"] += 1
jax.monitoring.register_event_duration_secs_listener(listen)
import inference, probmodels
from probmodels.demo import cases
replicates = int(sys.argv[1])
out = {}
def timed(fn):
    n, t = count["n"], time.perf_counter()
    fn()
    return count["n"] - n, time.perf_counter() - t
for case in cases():
    for engine in case.engines:
        if engine in ("mcmc", "exact"):
            continue
        opts = dict(case.options.get(engine, {}), progress=False)
        fit = lambda seed: getattr(inference, engine)(case.model, *case.args, **case.kwargs, **opts, seed=seed)
        first = timed(lambda: fit(0))
        second, third = timed(lambda: fit(1)), timed(lambda: fit(2))
        out[f"{case.name}:{engine}"] = [first, second, third]
X = np.random.default_rng(0).normal(size=(30, 2))
y = X @ np.array([1.0, -1.0])
out["sbc ep probit"] = timed(lambda: inference.sbc(probmodels.probit_regression, X, (y > 0).astype(int), engine="ep",
                                                   num_replicates=replicates, num_draws=19, progress=False))
out["sbc laplace linear"] = timed(lambda: inference.sbc(probmodels.linear_regression, X, y, noise_scale=1.0,
                                                        engine="laplace", num_replicates=replicates, num_draws=19,
                                                        progress=False))
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare with (a worktree)")
    parser.add_argument("--replicates", type=int, default=60)
    ns = parser.parse_args()
    with worktree(ns.base) as base:
        results = {"base": run_child(base, CHILD, ns.replicates), "HEAD": run_child(HERE, CHILD, ns.replicates)}
    print(f"| case | first fit, base: compilations / s | refit (seed 1), base | refit, HEAD | refit (seed 2), base "
          f"| refit (seed 2), HEAD |")
    print("|---|---|---|---|---|---|")
    for name, rows in results["base"].items():
        head = results["HEAD"][name]
        if name.startswith("sbc"):
            print(f"| {name}, {ns.replicates} replicates (whole call) | - | {rows[0]} / {rows[1]:.1f} | "
                  f"{head[0]} / {head[1]:.1f} | - | - |")
            continue
        (c0, t0), (c1, t1), (c2, t2) = rows
        (_, _), (h1, s1), (h2, s2) = head
        print(f"| {name} | {c0} / {t0:.1f} | {c1} / {t1:.2f} | {h1} / {s1:.2f} | {c2} / {t2:.2f} | {h2} / {s2:.2f} |")


if __name__ == "__main__":
    main()
