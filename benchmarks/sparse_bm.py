"""Sparse vs full Bayes machine on twonorm, n = 2000 training points: time and test error.

Data: the vendored twonorm (7400 x 20, `probmodels.datasets.load("twonorm")`), random splits of
2000 training and 2000 test points, features standardised on the training part. Kernel
``RBF(width)`` with the width chosen by EP evidence on a 300-point subsample of the first split
(grid ``sqrt(20) * 2^k``, k = -2..2); the same width for every machine. Full machine: parallel
EP, O(n^3) per sweep. Sparse machines: active sets of d = 5%, 10%, 20% of n (100, 200, 400), IVM
forward selection + 3 refining passes (`inference.ep.sparse_bm`), O(n d^2). Times are wall clock
after a warm-up call with the same shapes (JIT compilation excluded), single-threaded XLA and
BLAS; prediction time is for the 2000 test points.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sparse_bm.py --splits 3 --out benchmarks/results/sparse_bm.md
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from inference.ep import bayes_machine as bm  # noqa: E402
from inference.ep.sparse_bm import fit_sparse, predict_sparse  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402
from probmodels.selection import select_lengthscale  # noqa: E402

N_TRAIN, N_TEST = 2000, 2000
FRACTIONS = (0.05, 0.10, 0.20)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/sparse_bm.md")
    args = ap.parse_args()
    X, y = datasets.load("twonorm")
    first = datasets.split(X, y, train_size=N_TRAIN, seed=0, test_size=N_TEST)
    sub = np.random.default_rng(0).choice(N_TRAIN, 300, replace=False)
    sel = select_lengthscale(first.X_train[sub], first.y_train[sub], np.sqrt(20.0) * 2.0 ** np.arange(-2, 3))
    k = RBF(sel.lengthscale)
    print(f"width {sel.lengthscale:.3f} (EP evidence on 300 points)", flush=True)
    results = {"full": []} | {f: [] for f in FRACTIONS}
    for seed in range(args.splits):
        s = datasets.split(X, y, train_size=N_TRAIN, seed=seed, test_size=N_TEST)
        K = np.asarray(gram(k, s.X_train)[0])
        Kx, kd = np.asarray(k(s.X_test, s.X_train)), np.asarray(k.diag(s.X_test))
        if seed == 0:
            bm.fit(K, s.y_train, max_iter=1)  # warm-up: compile for these shapes
        res, t_fit = timed(lambda: bm.fit(K, s.y_train))
        (_, _, p), t_pred = timed(lambda: bm.predict(res, Kx, kd))
        err = np.mean((np.asarray(p) > 0.5) != (s.y_test > 0))
        results["full"].append((t_fit, t_pred, err, float(res.eps_mean), int(res.num_iter), bool(res.converged)))
        print(f"split {seed} full: fit {t_fit:.1f}s predict {t_pred:.2f}s error {100 * err:.2f}% "
              f"iters {int(res.num_iter)}", flush=True)
        for frac in FRACTIONS:
            d = int(frac * N_TRAIN)
            if seed == 0:
                fit_sparse(K, s.y_train, active_set_size=d, max_iter=1, num_passes=1)
            sp, t_fit = timed(lambda: fit_sparse(K, s.y_train, active_set_size=d))
            A = np.asarray(sp.active)
            (_, _, p), t_pred = timed(lambda: predict_sparse(sp, Kx[:, A], kd))
            err = np.mean((np.asarray(p) > 0.5) != (s.y_test > 0))
            results[frac].append((t_fit, t_pred, err, float(sp.result.eps_mean), sp.num_swaps, bool(sp.converged)))
            print(f"split {seed} d={d}: fit {t_fit:.1f}s predict {t_pred:.3f}s error {100 * err:.2f}% "
                  f"swaps {sp.num_swaps}", flush=True)
    write(args, sel.lengthscale, results)


def write(args, width, results):
    lines = [
        "# Sparse vs full Bayes machine, twonorm, n = 2000", "",
        f"{args.splits} random splits (2000 train / 2000 test), RBF width {width:.3f} (EP evidence on a "
        "300-point subsample), single-threaded CPU; times exclude JIT compilation. Mean over splits "
        "(test error ± standard error).", "",
        f"Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sparse_bm.py --splits {args.splits}`", "",
        "| machine | active points d | fit time (s) | predict time, 2000 points (s) | test error (%) | E[eps] | converged |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, rows in results.items():
        r = np.asarray([row[:4] for row in rows], dtype=float)
        name, d = ("full", N_TRAIN) if key == "full" else (f"sparse {int(100 * key)}%", int(key * N_TRAIN))
        se = 100 * r[:, 2].std() / np.sqrt(len(r))
        conv = sum(row[5] for row in rows)
        lines.append(f"| {name} | {d} | {r[:, 0].mean():.1f} | {r[:, 1].mean():.3f} | {100 * r[:, 2].mean():.2f} ± "
                     f"{se:.2f} | {r[:, 3].mean():.3f} | {conv}/{len(rows)} |")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
