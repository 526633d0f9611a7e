"""What a progress bar costs a short fit: warm fits of a few hundredths of a second, with and
without ``progress``.

Fits (JAX's default float32, the user's configuration): EP on a user-written probit regression
(n = 200, d = 3), Laplace on logistic regression (n = 200, d = 3), NUTS on the same logistic
regression (1 chain, 200 warmup + 200 draws) and mean-field SVI (2000 steps). Each fit is first
run once with and once without a bar (compilation), then `REPEATS` times each, alternating, so
that machine load drifts hit both alike; reported: the median wall time of each and the overhead
of the bar. A bar (`inference.progress`) appears only once a fit has run for a second, so none of
these fits shows one; what is measured is the cost of offering it (chunked EP sweeps, host
callbacks in the NUTS program, the bar object). The bars' output goes to stderr.

``--code DIR`` runs the same measurement on another checkout of the library (the code before
the lazy bars, for the before/after table of the report).

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/progress_overhead.py [--out benchmarks/results/progress.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from collect_results import write_report

REPEATS = 41
NOTE = ("Before: the commit before NUTS skipped the bar's host callback (`--before` a checkout of "
        "8143a20~1: lazy bars, NUTS with the callback on every run); after: main at the time of the run. "
        "Quiet machine (nothing else running), 2026-11-25. A host callback in the NUTS program costs "
        "~3-7 ms a call however few its ticks; a NUTS run whose program finished in under half a second "
        "before now runs without it (same draws; only whether a bar can show depends on it), so a bar on "
        "a 0.03 s NUTS fit costs nothing, where it cost +14-23%.")

CHILD = r"""
import json, sys, time
import numpy as np, numpyro, numpyro.distributions as dist
from jax.scipy.stats import norm
import inference

def probit(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(X @ w)), obs=y)

def logistic(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

rng = np.random.default_rng(0)
X = rng.normal(size=(200, 3)); y = (X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=200) > 0).astype(float)
fits = {
    "EP, probit regression (n = 200)": lambda p: inference.ep(probit, X, y, num_samples=200, progress=p),
    "Laplace, logistic regression (n = 200)": lambda p: inference.laplace(logistic, X, y, num_samples=200, progress=p),
    "NUTS, logistic regression (200 + 200 draws)": lambda p: inference.mcmc(
        logistic, X, y, num_warmup=200, num_samples=200, num_chains=1, progress=p),
    "SVI mean field, logistic regression (2000 steps)": lambda p: inference.vi(
        logistic, X, y, steps=2000, check_every=500, num_samples=200, progress=p),
}
repeats = int(sys.argv[1])
out = {}
for name, fit in fits.items():
    fit(False); fit(True)
    times = {False: [], True: []}
    for _ in range(repeats):
        for p in (False, True):
            t0 = time.perf_counter(); fit(p); times[p].append(time.perf_counter() - t0)
    out[name] = {"off": float(np.median(times[False])), "on": float(np.median(times[True]))}
print(json.dumps(out))
"""


def measure(code_dir: str, repeats: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false",
               PYTHONPATH=code_dir, PYTHONWARNINGS="ignore")
    env.pop("INFERENCE_PROGRESS", None)
    res = subprocess.run([sys.executable, "-c", CHILD, str(repeats)], env=env, cwd=code_dir, check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/progress.md")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--before", default=None, help="a checkout of the code before the lazy bars")
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    after = measure(here, args.repeats)
    before = measure(args.before, args.repeats) if args.before else None

    def row(name, m):
        return f"{m['off'] * 1e3:.1f} | {m['on'] * 1e3:.1f} | {100 * (m['on'] / m['off'] - 1):+.0f}%"

    head = "| fit | no bar (ms) | bar offered (ms) | overhead |"
    lines = ["# Progress bars on short fits", "",
             f"Median wall time of {args.repeats} warm calls each, with and without `progress` (alternating), "
             "float32, OMP_NUM_THREADS=1, one process. A bar appears only once a fit has run for a second "
             "(`inference.progress`); target: under 10% overhead on a 0.03 s fit.", "",
             "Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/progress_overhead.py`", ""]
    if before:
        lines += ["| fit | before: no bar (ms) | before: bar (ms) | before: overhead | after: no bar (ms) "
                  "| after: bar offered (ms) | after: overhead |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {name} | {row(name, before[name])} | {row(name, after[name])} |" for name in after]
    else:
        lines += [head, "|---|---|---|---|"] + [f"| {name} | {row(name, m)} |" for name, m in after.items()]
    if before:
        lines += ["", NOTE]
    text = "\n".join(lines) + "\n"
    write_report(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
