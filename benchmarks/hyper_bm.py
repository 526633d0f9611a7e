"""Bayes machine kernel width: grid search by EP evidence against ``hyper="map"`` (issue 23).

Protocol: the thesis Table 6.3 sets, training sizes and splits of `bayes_machine_table.py`
(`load`), features standardised on the training part, Gaussian kernel.

- ``grid``: `probmodels.selection.select_lengthscale` over ``sqrt(p) * 2^k``, k = -2, -1.5, ..., 2
  (the table's grid, 9 widths): the width with the largest EP log evidence;
- ``map``: ``inference.ep(bayes_machine, ..., kernel=RBF(dist.LogNormal(log sqrt(p), 1)),
  hyper="map")``: the continuous maximum of log Z_EP + log prior (BFGS on the exact gradient).

Both predict the test labels with the Bayes machine's EP at the chosen width (`bayes_machine.fit`
and `bayes_machine.predict`, P(y = 1) > 0.5), so the errors differ only by the width. Reported per
set (mean over splits): the chosen log width, the EP log evidence log p(y | width) at it, the
test error, and warm wall seconds per selection (median over the splits after the first; the
first ``map`` fit of each training shape compiles and is reported apart).

Reproduce:
    OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python \\
        benchmarks/hyper_bm.py --splits 4 --out benchmarks/results/hyper_bm.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inference  # noqa: E402
from bayes_machine_table import EXPONENTS, TRAIN, load  # noqa: E402
from inference.ep import bayes_machine as bm  # noqa: E402
from probmodels import bayes_machine  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402
from probmodels.selection import select_lengthscale  # noqa: E402


def test_error(s, ls):
    """``(test error, log Z_EP)`` of the Bayes machine at width ``ls``."""
    k = RBF(float(ls))
    res = bm.fit(np.asarray(gram(k, s.X_train)[0]), s.y_train)
    _, _, p = bm.predict(res, k(s.X_test, s.X_train), k.diag(s.X_test))
    return float(np.mean((np.asarray(p) > 0.5) != (s.y_test > 0))), float(res.log_evidence)


def grid_width(s):
    p = s.X_train.shape[1]
    return select_lengthscale(s.X_train, s.y_train, np.sqrt(p) * 2.0 ** EXPONENTS).lengthscale, {}


def map_width(s):
    p = s.X_train.shape[1]
    kernel = RBF(lengthscale=dist.LogNormal(float(np.log(np.sqrt(p))), 1.0))
    post = inference.ep(bayes_machine, s.X_train, s.y_train, kernel=kernel, hyper="map", num_samples=100,
                        progress=False)
    info = post.diagnostics["hyper"]
    return float(np.exp(info["unconstrained"][0])), {"converged": post.diagnostics["converged"],
                                                      "iterations": info["iterations"]}


METHODS = {"grid": grid_width, "map": map_width}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=4)
    ap.add_argument("--sets", nargs="*", default=list(TRAIN))
    ap.add_argument("--out", default="benchmarks/results/hyper_bm.md")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows, total = [], time.perf_counter()
    for name in args.sets:
        cells = {m: [] for m in METHODS}
        for seed in range(args.splits):
            s = load(name, seed)
            for m, choose in METHODS.items():
                t = time.perf_counter()
                ls, extra = choose(s)
                seconds = time.perf_counter() - t
                err, log_z = test_error(s, ls)
                cells[m].append(dict(log_ls=np.log(ls), log_z=log_z, err=err, seconds=seconds, **extra))
                print(f"{name} split {seed} {m}: width {ls:.3f} log Z {log_z:.3f} error {100 * err:.1f}% "
                      f"{seconds:.2f} s {extra}", flush=True)
        rows.append((name, cells))
    cmd = "OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python " + " ".join(sys.argv)
    lines = [f"# Bayes machine width: grid vs hyper='map' ({args.splits} splits per set)", "",
             f"`{cmd}` ({time.perf_counter() - total:.0f} s, {jax.devices()[0].device_kind}, "
             f"jax {jax.__version__}). Protocol: benchmarks/hyper_bm.py.", "",
             "| set | log width grid | log width map | log Z grid | log Z map | error % grid | error % map "
             "| s grid (warm) | s map (warm) | s map (first) | map converged |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cells in rows:
        g, m = cells["grid"], cells["map"]
        mean = lambda c, k: float(np.mean([x[k] for x in c]))  # noqa: E731
        warm = lambda c: float(np.median([x["seconds"] for x in c[1:]])) if len(c) > 1 else float("nan")  # noqa: E731
        lines.append(f"| {name} | {mean(g, 'log_ls'):.2f} | {mean(m, 'log_ls'):.2f} | {mean(g, 'log_z'):.2f} | "
                     f"{mean(m, 'log_z'):.2f} | {100 * mean(g, 'err'):.1f} | {100 * mean(m, 'err'):.1f} | "
                     f"{warm(g):.2f} | {warm(m):.2f} | {m[0]['seconds']:.1f} | "
                     f"{sum(x['converged'] for x in m)}/{len(m)} |")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
