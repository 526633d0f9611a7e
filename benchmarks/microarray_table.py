"""Spike-and-slab probit on microarray data: EP vs collapsed Gibbs MCMC vs a Gaussian-prior
baseline (thesis ch. 7 protocol), and EP vs MCMC time at equal test error on leukemia.

Protocol: random 2/3 - 1/3 splits (seed = split index), genes standardised with the training part
(`probmodels.datasets.split`); colon log10, leukemia Dudoit et al. (2002) preprocessing (3571
genes), srbct as shipped (`probmodels.datasets.load_microarray`). Model: `spike_and_slab_probit`
with the thesis prior (p_incl = 32 / d, slab N(0, 1)). A test point is classified by its
predictive probability (> 1/2 means +1).

- EP (full): `inference.spikeslab.ep_posterior`, full-covariance EP (O(n^2 d) per sweep; default).
- EP (factorised): the fully factorised EP of thesis ch. 7 (O(n d) per sweep), sequential over
  the likelihood factors as in the thesis (the parallel schedule oscillates on these genes).
- MCMC: `inference.spikeslab.mcmc_posterior`, collapsed Gibbs (indicators with w integrated out,
  Albert-Chib utilities with w integrated out), one draw per full scan.
- Gaussian prior: probit regression with w ~ N(0, I) on all genes, by the same full-covariance EP
  with p_incl -> 1 (every gene in the slab), i.e. the non-sparse baseline.

Times are single-threaded, per split, medians over splits (the first split of each data set also
pays compilation): "call" is the whole engine call (recognising the model, inference, draws,
pointwise log likelihood) plus prediction; "core" is the algorithm alone (EP sweeps to convergence
with its evidence; the Gibbs scans), from the engines' diagnostics (``fit_seconds``,
``sampling_seconds``). Equal error on leukemia: the MCMC test error using only its first k draws
(after the warmup) is compared with EP's on the same splits; MCMC core time at k = per-scan time
x (warmup + k) x chains, against EP's core time.

Published test errors (%) over 50 splits, EP / MCMC (Hernandez-Lobato 2009, ch. 7):
colon 16.3 / 17.2, leukemia 4.2 / 5.4, srbct 4.0 / 3.9.

Reproduce (what ran for benchmarks/results/microarray.md is recorded there):
    .venv/bin/python benchmarks/microarray_table.py --splits 50 --mcmc-splits 10 \\
        --out benchmarks/results/microarray.md
"""

from __future__ import annotations

import argparse
import json
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
from scipy.stats import norm  # noqa: E402

jax.config.update("jax_enable_x64", True)

from inference._model import trace_model  # noqa: E402
from inference.spikeslab import ep_posterior, mcmc_posterior  # noqa: E402
from probmodels.spike_slab import spike_and_slab_probit, standardize  # noqa: E402

DATASETS = ("colon", "leukemia", "srbct")
PUBLISHED = {"colon": (16.3, 17.2), "leukemia": (4.2, 5.4), "srbct": (4.0, 3.9)}
EQUAL_ERROR_K = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def load(name):
    """``probmodels.datasets.load_microarray`` when present, else the same preprocessing here."""
    try:
        from probmodels.datasets import load_microarray

        X, y = load_microarray(name)
        return np.asarray(X, float), np.where(np.asarray(y) > 0, 1, -1)
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        data = np.load(os.path.join(here, "..", "..", "shared", "data", "microarray", f"{name}.npz"))
        X, y = data["X"].astype(float), np.where(data["y"] > 0, 1, -1)
        if name == "colon":
            X = np.log10(X)
        elif name == "leukemia":
            X = np.clip(X, 100.0, 16000.0)
            keep = (X.max(0) / X.min(0) > 5) & (X.max(0) - X.min(0) > 500)
            X = np.log10(X[:, keep])
            X = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)
        return X, y


def split(X, y, seed):
    try:
        from probmodels.datasets import split as _split

        s = _split(X, y, 2 / 3, seed=seed)
        return s.X_train, s.y_train, s.X_test, s.y_test
    except ImportError:
        perm = np.random.default_rng(seed).permutation(len(y))
        k = int(round(2 / 3 * len(y)))
        Xa, Xb = standardize(X[perm[:k]], X[perm[k:]])
        return Xa, y[perm[:k]], Xb, y[perm[k:]]


def error(prob, y_test):
    return float(np.mean(np.where(prob > 0.5, 1, -1) != y_test))


def run_ep(Xtr, ytr, Xte, yte, **options):
    start = time.perf_counter()
    args, kw = (Xtr, ytr), options.pop("model_kwargs", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        post = ep_posterior(spike_and_slab_probit, args, kw, trace_model(spike_and_slab_probit, args, kw),
                            num_samples=50, **options)
        prob = np.asarray(post.predict(Xte)["y_mean"]).mean(axis=(0, 1))
    return {"error": error(prob, yte), "time": time.perf_counter() - start, "core": post.diagnostics["fit_seconds"],
            "iterations": post.diagnostics["iterations"], "converged": post.diagnostics["converged"]}


def run_mcmc(Xtr, ytr, Xte, yte, num_samples, num_warmup, num_chains, seed):
    start = time.perf_counter()
    args = (Xtr, ytr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        post = mcmc_posterior(spike_and_slab_probit, args, {}, trace_model(spike_and_slab_probit, args, {}),
                              num_samples=num_samples, num_warmup=num_warmup, num_chains=num_chains, seed=seed)
    w = post.samples["w"]  # (chain, draw, d)
    per_draw = norm.cdf(np.einsum("cdj,ij->cdi", w, Xte))
    elapsed = time.perf_counter() - start
    prefix = {k: error(per_draw[:, :k].mean(axis=(0, 1)), yte) for k in EQUAL_ERROR_K if k <= num_samples}
    return {"error": error(per_draw.mean(axis=(0, 1)), yte), "time": elapsed, "prefix_error": prefix,
            "core": post.diagnostics["sampling_seconds"],
            "max_rhat": post.diagnostics["max_rhat"], "scans": (num_samples + num_warmup) * num_chains}


def summarise(values):
    v = np.asarray(values, float)
    return 100 * v.mean(), 100 * v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--splits", type=int, default=50, help="splits for EP and the Gaussian baseline")
    ap.add_argument("--mcmc-splits", type=int, default=10, help="first splits that also run MCMC")
    ap.add_argument("--mcmc-samples", type=int, default=1000)
    ap.add_argument("--mcmc-warmup", type=int, default=200)
    ap.add_argument("--mcmc-chains", type=int, default=2)
    ap.add_argument("--out", default=None, help="markdown results file (a .json with per-split numbers beside it)")
    a = ap.parse_args(argv)
    results, started = {}, time.time()
    for name in a.datasets:
        X, y = load(name)
        res = {"ep_full": [], "ep_factorized": [], "gaussian": [], "mcmc": [], "shape": list(X.shape)}
        for s in range(a.splits):
            Xtr, ytr, Xte, yte = split(X, y, s)
            res["ep_full"].append(run_ep(Xtr, ytr, Xte, yte))
            res["ep_factorized"].append(run_ep(Xtr, ytr, Xte, yte, covariance="factorized", schedule="sequential"))
            res["gaussian"].append(run_ep(Xtr, ytr, Xte, yte, model_kwargs={"p_incl": 1 - 1e-9}))
            if s < a.mcmc_splits:
                res["mcmc"].append(run_mcmc(Xtr, ytr, Xte, yte, a.mcmc_samples, a.mcmc_warmup, a.mcmc_chains, s))
            line = " ".join(f"{k}={res[k][-1]['error']:.3f}/{res[k][-1]['time']:.1f}s" for k in
                            ("ep_full", "ep_factorized", "gaussian", "mcmc") if len(res[k]) == s + 1)
            print(f"{name} split {s}: {line}", flush=True)
        results[name] = res
        if a.out:
            write(a, results, time.time() - started)
    if a.out:
        write(a, results, time.time() - started)
    return results


def equal_error(res, warmup, chains):
    """MCMC error with its first k draws vs EP on the same splits; time at k draws."""
    m = len(res["mcmc"])
    ep_err = float(np.mean([r["error"] for r in res["ep_full"][:m]]))
    ep_time = float(np.median([r["core"] for r in res["ep_full"][1:] or res["ep_full"]]))
    per_scan = float(np.median([r["core"] / r["scans"] for r in res["mcmc"][1:] or res["mcmc"]]))
    rows = []
    for k in EQUAL_ERROR_K:
        errs = [r["prefix_error"].get(str(k), r["prefix_error"].get(k)) for r in res["mcmc"]]
        if any(e is None for e in errs):
            continue
        rows.append((k, float(np.mean(errs)), per_scan * (warmup + k) * chains))
    reach = [row for row in rows if row[1] <= ep_err + 1e-12]
    return ep_err, ep_time, per_scan, rows, (reach[0] if reach else None)


def write(a, results, elapsed):
    lines = ["# Spike-and-slab probit on microarray data: EP vs MCMC", "",
             "Produced by `benchmarks/microarray_table.py` (protocol in its docstring). Command:", "",
             "    .venv/bin/python benchmarks/microarray_table.py " + " ".join(sys.argv[1:]), "",
             f"What ran: {a.splits} random 2/3-1/3 splits per data set for EP and the Gaussian baseline; MCMC "
             f"({a.mcmc_chains} chains x {a.mcmc_samples} draws after {a.mcmc_warmup} warmup scans) on the first "
             f"{a.mcmc_splits} of them. Single-threaded CPU on a shared 2-core machine (other jobs running), "
             f"total {elapsed / 60:.0f} min. Errors are mean +- standard error over splits (%); times are "
             "medians per split in seconds.", "",
             "| data set (n x d) | method | splits | test error % | call (s) | core (s) | published EP / MCMC % |",
             "|---|---|---|---|---|---|---|"]
    labels = {"ep_full": "EP (full covariance)", "ep_factorized": "EP (factorised, thesis ch. 7)",
              "mcmc": "MCMC (collapsed Gibbs)", "gaussian": "Gaussian prior, all genes (EP)"}
    for name, res in results.items():
        for key in ("ep_full", "ep_factorized", "mcmc", "gaussian"):
            if not res[key]:
                continue
            mean, se = summarise([r["error"] for r in res[key]])
            t = float(np.median([r["time"] for r in res[key]]))
            core = float(np.median([r["core"] for r in res[key][1:] or res[key]]))
            pub = "%.1f / %.1f" % PUBLISHED[name] if key == "ep_full" else ""
            lines.append(f"| {name} ({res['shape'][0]} x {res['shape'][1]}) | {labels[key]} | {len(res[key])} | "
                         f"{mean:.1f} +- {se:.1f} | {t:.2f} | {core:.3f} | {pub} |")
        if res["mcmc"]:
            m = len(res["mcmc"])
            ep_m, _ = summarise([r["error"] for r in res["ep_full"][:m]])
            mc_m, _ = summarise([r["error"] for r in res["mcmc"]])
            lines.append(f"| {name} | EP (full) on the {m} MCMC splits | {m} | {ep_m:.1f} | | | MCMC there: {mc_m:.1f} |")
        conv = [r["converged"] for k in ("ep_full", "ep_factorized", "gaussian") for r in res[k]]
        rh = [r["max_rhat"] for r in res["mcmc"]]
        lines.append("")
        lines.append(f"{name}: EP converged in {sum(conv)}/{len(conv)} fits"
                     + (f"; MCMC max R-hat median {np.median(rh):.3f} (max {np.max(rh):.3f})" if rh else ""))
        lines.append("")
    if "leukemia" in results and results["leukemia"]["mcmc"]:
        ep_err, ep_time, per_scan, rows, reach = equal_error(results["leukemia"], a.mcmc_warmup, a.mcmc_chains)
        lines += ["## EP vs MCMC time at equal test error (leukemia)", "",
                  f"EP (full) mean test error on the MCMC splits: {100 * ep_err:.1f}%, median core time {ep_time:.3f} s. "
                  f"MCMC per-scan time {1000 * per_scan:.1f} ms; MCMC error using its first k draws after "
                  f"{a.mcmc_warmup} warmup scans x {a.mcmc_chains} chains:", "",
                  "| k draws | MCMC test error % | MCMC core time (s) | / EP core time |", "|---|---|---|---|"]
        lines += [f"| {k} | {100 * e:.1f} | {t:.1f} | {t / ep_time:.0f}x |" for k, e, t in rows]
        lines.append("")
        if reach:
            lines.append(f"MCMC first matches EP's error at k = {reach[0]} draws: {reach[2]:.1f} s, "
                         f"{reach[2] / ep_time:.0f}x EP's time (goal: EP >= 100x faster).")
        else:
            lines.append(f"MCMC does not reach EP's error within {rows[-1][0]} draws; at that point it took "
                         f"{rows[-1][2]:.1f} s, {rows[-1][2] / ep_time:.0f}x EP's time.")
        n_test = len(results["leukemia"]["mcmc"]) * round(results["leukemia"]["shape"][0] / 3)
        lines.append("")
        lines.append(f"Caveat: these errors count mistakes on {n_test} test patients in all, so they move in steps "
                     f"of {100 / n_test:.1f} points and differences of a few points between k values are noise; "
                     "most of MCMC's time at small k is its warmup. The full table's 'call' column (the "
                     "whole engine call plus prediction) gives the end-to-end ratio at the MCMC run length used.")
    lines.append("")
    with open(a.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.splitext(a.out)[0] + ".json", "w") as fh:
        json.dump(results, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
