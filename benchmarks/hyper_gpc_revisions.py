"""EP ``hyper="map"`` on a GP classifier at twonorm n = 1000: two revisions and scikit-learn side by
side in one invocation. Each revision's child process (the base from a temporary ``git
worktree``) fits ``--splits`` random splits in turn with the `hyper_gpc.py` setup (isotropic RBF,
lengthscale ~ LogNormal(log sqrt(p), 1), variance ~ LogNormal(0, 1), 1000 draws): the first fit
includes compilation, the later ones are warm. scikit-learn's `GaussianProcessClassifier`
(`hyper_gpc.py`'s, Laplace with its own optimiser) fits the same splits in its own child. Reported:
per split wall seconds, test log loss and error; the medians of the warm fits and their ratios.

Reproduce (from the project root):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hyper_gpc_revisions.py --base 1ac5011 --splits 4
"""

from __future__ import annotations

import argparse

import numpy as np
from revisions import HERE, run_child, worktree

CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, "benchmarks")
import jax; jax.config.update("jax_enable_x64", True)
import numpy as np
import hyper_gpc as H
method, n, splits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
for seed in range(splits):
    s, ytr, yte = H.load("twonorm", seed, train_size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, sec, note = H.fit(method, s, ytr, None)
    err, loss = H.scores(p, yte)
    out.append({"seconds": sec, "err": float(err), "loss": float(loss), "note": str(note)})
print(json.dumps(out))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the base revision (a commit)")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--splits", type=int, default=4)
    args = parser.parse_args()
    with worktree(args.base) as base:
        rows = {f"EP map iso, {args.base}": run_child(base, CHILD, "EP map iso", args.n, args.splits),
                "EP map iso, this revision": run_child(HERE, CHILD, "EP map iso", args.n, args.splits),
                "scikit-learn": run_child(HERE, CHILD, "sklearn", args.n, args.splits)}
    print(f"twonorm n = {args.n}, {args.splits} splits (split 0 first: compilation for EP)\n")
    print("| method | seconds per split | warm median (s) | log loss per split | error % per split |")
    print("|---|---|---|---|---|")
    warm = {}
    for name, cells in rows.items():
        warm[name] = float(np.median([c["seconds"] for c in cells[1:]])) if len(cells) > 1 else cells[0]["seconds"]
        print(f"| {name} | {', '.join(f'{c['seconds']:.2f}' for c in cells)} | {warm[name]:.2f} | "
              f"{', '.join(f'{c['loss']:.4f}' for c in cells)} | {', '.join(f'{c['err']:.1f}' for c in cells)} |")
    names = list(rows)
    print(f"\nwarm ratios: this revision / base {warm[names[1]] / warm[names[0]]:.2f}, "
          f"this revision / scikit-learn {warm[names[1]] / warm[names[2]]:.2f}")


if __name__ == "__main__":
    main()
