"""Distributed EP (4 shards on 4 simulated CPU devices, local engine EP) on logistic regression:
two revisions side by side in one invocation. Each revision's child process (the base from a
temporary ``git worktree``) fits the same data twice (the first fit includes compilation, the
second is warm) and reports seconds, outer iterations and the posterior mean; full-data EP in the
same child is the reference for the mean.

Reproduce (from the project root):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distributed_ep_revisions.py --base 1ac5011 --n 4000
"""

from __future__ import annotations

import argparse

import numpy as np
from revisions import HERE, run_child, worktree

CHILD = r"""
import json, sys, time
import jax; jax.config.update("jax_enable_x64", True)
import numpy as np
import inference, probmodels
n, d = int(sys.argv[1]), 5
rng = np.random.default_rng(0)
X = rng.normal(size=(n, d))
y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ np.array([1.0, -0.5, 0.25, 0.0, 2.0])))).astype(int)
out = {}
for label in ("first", "warm"):
    t = time.perf_counter()
    post = inference.distributed_ep(probmodels.logistic_regression, X, y, num_shards=4, progress=False)
    out[label] = time.perf_counter() - t
out["iterations"] = post.diagnostics["iterations"]
full = inference.ep(probmodels.logistic_regression, X, y, progress=False)
sd = np.sqrt(np.diag(full.approximation["cov"]))
out["max_mean_diff_sd"] = float(np.max(np.abs(post.approximation["mean"] - full.approximation["mean"]) / sd))
print(json.dumps(out))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the base revision (a commit)")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    flags = "--xla_force_host_platform_device_count=4 --xla_cpu_multi_thread_eigen=false"
    with worktree(args.base) as base:
        rows = {args.base: [], "this revision": []}
        for _ in range(args.repeats):  # interleaved
            rows[args.base].append(run_child(base, CHILD, args.n, xla_flags=flags))
            rows["this revision"].append(run_child(HERE, CHILD, args.n, xla_flags=flags))
    print(f"logistic regression, n = {args.n}, d = 5, 4 shards on 4 CPU devices; {args.repeats} processes each\n")
    print("| revision | first fit (s) | warm fit (s) | outer iterations | max |mean - full EP| / sd |")
    print("|---|---|---|---|---|")
    med = {}
    for name, cells in rows.items():
        med[name] = {k: float(np.median([c[k] for c in cells])) for k in ("first", "warm")}
        print(f"| {name} | {med[name]['first']:.2f} | {med[name]['warm']:.2f} | {cells[0]['iterations']} | "
              f"{cells[0]['max_mean_diff_sd']:.1e} |")
    b, h = med[args.base], med["this revision"]
    print(f"\nratios this revision / base (medians): first {h['first'] / b['first']:.2f}, warm {h['warm'] / b['warm']:.2f}")


if __name__ == "__main__":
    main()
