"""First-fit latency of two revisions side by side: each measurement is a fresh Python process
(compilation cache off) fitting one library model with one engine at default options; the time is
that of the first fit (imports excluded). The revisions run interleaved, ``--repeats`` rounds;
the median per revision and their ratio are reported. The base revision runs from a temporary
``git worktree``.

Reproduce (from the project root):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_fit_revisions.py --base 06627c2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_fit_revisions.py --base e41a531 \
        --cases gaussian_mixture:mcmc,hmm:mcmc,gaussian_mixture:cavi,dp_mixture:cavi
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_fit_revisions.py --base 40babde \
        --cases lda:vi,spike_and_slab_probit:mcmc,spike_and_slab_regression:mcmc,gp_classifier:ep,probit_regression:ep

Engine ``cavi`` is ``inference.vi(..., method="cavi")``.
"""

from __future__ import annotations

import argparse

import numpy as np
from revisions import HERE, run_child, worktree

CASES = [("gaussian_mixture", "laplace"), ("hmm", "laplace"), ("logistic_regression", "laplace"),
         ("gaussian_mixture", "mcmc"), ("hmm", "mcmc"), ("bayes_machine", "ep"), ("gp_classifier", "laplace")]

CHILD = r"""
import json, sys, time
import jax; jax.config.update("jax_enable_x64", True)
import numpy as np
import inference, probmodels
name, engine = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
if name in ("gaussian_mixture", "dp_mixture"):
    args = (np.concatenate([rng.normal(-2, .5, (100, 1)), rng.normal(2, .5, (100, 1))]),)
    kw = {"num_components": 2} if name == "gaussian_mixture" else {"truncation": 6}
elif name == "hmm":
    args, kw = (np.concatenate([rng.normal(-1, .5, 100), rng.normal(2, .5, 100)]),), {"num_states": 2}
elif name == "lda":
    from probmodels.datasets import lda_corpus
    args, kw = (lda_corpus(150, vocab_size=40, num_topics=3, seed=0).counts,), {"num_topics": 3}
elif name.startswith("spike_and_slab"):
    X = rng.normal(size=(40, 6))
    y = X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=40)
    args, kw = (X, y > 0 if name.endswith("probit") else y), {}
else:
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(int) if name == "bayes_machine" else (X @ [1.5, -1.0] > 0).astype(int)
    args, kw = (X, y), {}
if engine == "cavi":
    engine, kw = "vi", {**kw, "method": "cavi"}
t0 = time.perf_counter()
getattr(inference, engine)(getattr(probmodels, name), *args, seed=0, progress=False, **kw)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def run(root, name, engine):
    return run_child(root, CHILD, name, engine)["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="06627c2", help="the revision to compare with (default: 06627c2)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default=",".join(f"{m}:{e}" for m, e in CASES),
                        help="comma-separated model:engine pairs (default: the table's seven)")
    opts = parser.parse_args()
    cases = [tuple(c.split(":")) for c in opts.cases.split(",")]
    with worktree(opts.base) as base:
        rows = []
        for name, engine in cases:
            times = {"base": [], "head": []}
            for _ in range(opts.repeats):
                times["base"].append(run(base, name, engine))
                times["head"].append(run(HERE, name, engine))
            b, h = np.median(times["base"]), np.median(times["head"])
            rows.append(f"| {name} | {engine} | {b:.2f} | {h:.2f} | {h / b:.2f} |")
            print(rows[-1], flush=True)
    print(f"\n| model | engine | {opts.base} (s) | HEAD (s) | HEAD / base |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
