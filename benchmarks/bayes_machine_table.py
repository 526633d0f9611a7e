"""Bayes machine (EP, width by evidence) vs SVM vs probit GP classifier: thesis Table 6.3 protocol.

For each classification set: random splits with the thesis' training sizes (the rest for testing;
twonorm and threenorm 1000 test points), features standardised with the training part
(`probmodels.datasets.split`), Gaussian kernel ``RBF(lengthscale)``.

- BM: `inference.ep.bayes_machine.fit` (parallel EP, damping 0.5, Beta(1, 10) noise prior) at
  every width of the grid ``sqrt(p) * 2^k``, k = -2, -1.5, ..., 2; the width with the largest EP
  evidence predicts (`probmodels.selection.select_lengthscale`).
- SVM: scikit-learn ``SVC(kernel="rbf")``, C in 2^-3..2^10 and gamma = 1 / (2 width^2) over the same
  width grid, chosen by 5-fold stratified cross-validation on the training part.
- GPC: probit GP classifier (`probmodels.gp.gp_classifier`'s model), EP at the array level
  (`probit_gp_ep`: the EP problem, schedule and tolerances of `inference.ep` on that model, one
  compiled program for all widths, variances and splits of a shape), width and kernel variance
  (1, 10, ..., 10^4) by EP evidence over the width grid x variances; predictive
  ``Phi(m / sqrt(1 + v))``. ``--gpc sklearn`` uses scikit-learn's ``GaussianProcessClassifier``
  (Laplace, width by marginal likelihood) instead.

The published numbers (Hernández-Lobato 2009, Table 6.3; test error %) are printed beside ours.

Reproduce (about 15-30 minutes single-threaded at 20 splits, all 11 sets):
    OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python \\
        benchmarks/bayes_machine_table.py --splits 20 --out benchmarks/results/bayes_machine_table.md
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import norm  # noqa: E402

jax.config.update("jax_enable_x64", True)

from inference.ep import bayes_machine as bm  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402
from probmodels.selection import select_lengthscale  # noqa: E402

TRAIN = {"australian": 100, "boston": 100, "breast": 100, "crabs": 66, "digits35": 70, "german": 100,
         "heart": 90, "new_thyroid": 100, "pima": 100, "threenorm": 100, "twonorm": 100}
TEST = {"twonorm": 1000, "threenorm": 1000}
PUBLISHED = {  # BM / SVM / GPC test error (%)
    "australian": (15.1, 15.8, 15.5), "boston": (14.8, 16.4, 14.7), "breast": (3.3, 3.5, 3.5),
    "crabs": (0.9, 1.0, 1.3), "digits35": (1.6, 1.9, 1.6), "german": (27.7, 29.0, 28.3),
    "heart": (18.1, 18.9, 19.2), "new_thyroid": (4.6, 5.1, 4.5), "pima": (27.0, 27.2, 27.6),
    "threenorm": (15.6, 16.2, 16.6), "twonorm": (3.0, 3.2, 3.4),
}
EXPONENTS = np.arange(-2.0, 2.01, 0.5)


def load(name: str, seed: int):
    if name == "threenorm":
        X, y = datasets.threenorm(TRAIN[name] + TEST[name], seed=seed)
    else:
        X, y = datasets.load(name)
    return datasets.split(X, y, train_size=TRAIN[name], seed=seed, test_size=TEST.get(name))


def bm_error(s, grid):
    sel = select_lengthscale(s.X_train, s.y_train, grid)
    k = sel.kernel
    _, _, p = bm.predict(sel.result, k(s.X_test, s.X_train), k.diag(s.X_test))
    return np.mean((np.asarray(p) > 0.5) != (s.y_test > 0)), sel


def svm_error(s, grid):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    params = {"C": 2.0 ** np.arange(-3, 11), "gamma": 1.0 / (2.0 * grid**2)}
    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    search = GridSearchCV(SVC(kernel="rbf"), params, cv=cv).fit(s.X_train, s.y_train)
    return np.mean(search.predict(s.X_test) != s.y_test)


VARIANCES = (1.0, 10.0, 100.0, 1000.0, 10000.0)  # GPC kernel variances, selected with the width by EP evidence


def probit_gp_ep(K, signs):
    """EP for the probit GP classifier at the array level: prior ``f ~ N(0, K)``, sites
    ``Phi(s_i f_i)``. The same EP problem the generic driver builds for
    ``inference.ep(gp_classifier, ...)`` (function space, closed-form probit sites, parallel
    schedule, damping 0.5, tol 1e-6, 200 sweeps), without model recognition or posterior draws, so
    one compiled program serves every width, variance and split of equal shape.

    Returns ``(log_evidence or -inf, mean, cov, converged)`` of the EP Gaussian over ``f``."""
    from inference.ep.evidence import log_evidence
    from inference.ep.problem import EPProblem, SiteGroup
    from inference.ep.update import run

    K = jnp.asarray(K)
    problem = EPProblem("function", None, K, jnp.zeros(K.shape[0], K.dtype),
                        (SiteGroup("probit", {"s": jnp.asarray(signs, K.dtype)}),))
    state, _, _, change = run(problem, _init(problem), 0.5, 1e-6, 200, "parallel")
    log_z, ok = log_evidence(problem, state)
    ev = float(log_z) if bool(ok) else -np.inf
    mean, cov, _ = _gaussian(problem, state.tau, state.nu)
    return ev, np.asarray(mean), np.asarray(cov), bool(float(change) <= 1e-6)


@jax.jit
def _gaussian(problem, tau, nu):
    from inference.ep.gaussian import from_sites

    return from_sites(problem, tau, nu)


@jax.jit
def _init(problem):
    from inference.ep.update import init

    return init(problem)


def gpc_ep_error(s, grid, variances=VARIANCES):
    """Probit GP by EP; width and kernel variance by EP evidence; exact probit predictive."""
    signs = np.where(np.asarray(s.y_train) > 0, 1.0, -1.0)
    best = None
    for var in variances:
        for ls in grid:
            k = RBF(float(ls), float(var))
            K = np.asarray(gram(k, s.X_train)[0])
            ev, mean, cov, _ = probit_gp_ep(K, signs)
            if best is None or ev > best[0]:
                best = (ev, k, K, mean, cov)
    _, k, K, mean, cov = best
    Kx = np.asarray(k(s.X_test, s.X_train))
    L = np.linalg.cholesky(K)
    W = np.linalg.solve(L, Kx.T)  # L^-1 k*
    A = np.linalg.solve(L.T, W)  # K^-1 k*
    m = A.T @ mean
    v = np.asarray(k.diag(s.X_test)) - np.sum(W * W, 0) + np.einsum("ij,ik,kj->j", A, cov, A)
    p = norm.cdf(m / np.sqrt(1.0 + np.maximum(v, 0.0)))
    return np.mean((p > 0.5) != (s.y_test > 0)), (float(k.lengthscale), float(k.variance))


def gpc_driver_error(s, grid):
    """The previous, slow route (kept for the equivalence check): the generic ``inference.ep`` on
    ``gp_classifier`` at every width, kernel variance 1."""
    from inference.ep.driver import ep
    from probmodels.gp import gp_classifier

    best = None
    for ls in grid:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            post = ep(gp_classifier, s.X_train, s.y_train, kernel=RBF(float(ls)), num_samples=2, progress=False)
        ev = post.log_evidence if post.log_evidence is not None else -np.inf
        if best is None or ev > best[0]:
            best = (ev, float(ls), post)
    return best


def gpc_sklearn_error(s, grid):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF as SkRBF
    from sklearn.gaussian_process.kernels import ConstantKernel

    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * SkRBF(float(np.median(grid)), (grid.min(), grid.max()))
    gpc = GaussianProcessClassifier(kernel, n_restarts_optimizer=2, random_state=0).fit(s.X_train, s.y_train)
    return np.mean(gpc.predict(s.X_test) != s.y_test)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--datasets", nargs="*", default=list(TRAIN))
    ap.add_argument("--gpc", choices=("ep", "sklearn", "none"), default="ep")
    ap.add_argument("--no-svm", action="store_true", help="skip the SVM (its grid search is most of the time)")
    ap.add_argument("--out", default="benchmarks/results/bayes_machine_table.md")
    args = ap.parse_args()
    rows = []
    for name in args.datasets:
        errs = {"BM": [], "SVM": [], "GPC": []}
        secs = {"BM": 0.0, "SVM": 0.0, "GPC": 0.0}
        eps, gpc_var, t0 = [], [], time.time()
        for seed in range(args.splits):
            s = load(name, seed)
            grid = np.sqrt(s.X_train.shape[1]) * 2.0**EXPONENTS
            t = time.time()
            e, sel = bm_error(s, grid)
            secs["BM"] += time.time() - t
            errs["BM"].append(e)
            eps.append(float(sel.result.eps_mean))
            t = time.time()
            if not args.no_svm:
                errs["SVM"].append(svm_error(s, grid))
            secs["SVM"] += time.time() - t
            t = time.time()
            if args.gpc == "ep":
                e, (_, var) = gpc_ep_error(s, grid)
                errs["GPC"].append(e)
                gpc_var.append(var)
            elif args.gpc == "sklearn":
                errs["GPC"].append(gpc_sklearn_error(s, grid))
            secs["GPC"] += time.time() - t
        stats = {k: (100 * np.mean(v), 100 * np.std(v) / np.sqrt(len(v))) if v else (np.nan, np.nan)
                 for k, v in errs.items()}
        var_counts = {v: gpc_var.count(v) for v in VARIANCES} if gpc_var else {}
        rows.append((name, len(s.y_train), len(s.y_test), stats, float(np.mean(eps)), var_counts, secs,
                     time.time() - t0))
        print(f"{name:12s} BM {stats['BM'][0]:5.1f}±{stats['BM'][1]:.1f}  "
              f"SVM {stats['SVM'][0]:5.1f}±{stats['SVM'][1]:.1f}  GPC {stats['GPC'][0]:5.1f}±{stats['GPC'][1]:.1f}  "
              f"| published {PUBLISHED[name]}  "
              f"E[eps] {np.mean(eps):.3f}  GPC variances {var_counts}  "
              f"({time.time() - t0:.0f}s: BM {secs['BM']:.0f} SVM {secs['SVM']:.0f} GPC {secs['GPC']:.0f})",
              flush=True)
        write(args, rows)  # after every data set, so a cut-short run keeps what it has


def write(args, rows):
    gpc = {"ep": "probit GP by EP (width and kernel variance by EP evidence)",
           "sklearn": "scikit-learn GaussianProcessClassifier (Laplace, width by marginal likelihood)",
           "none": "not run"}[args.gpc]
    cmd = ("OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python "
           f"benchmarks/bayes_machine_table.py --splits {args.splits} --gpc {args.gpc}"
           + (" --no-svm" if args.no_svm else ""))
    if args.datasets != list(TRAIN):
        cmd += " --datasets " + " ".join(args.datasets)
    lines = [
        "# Bayes machine vs SVM vs GP classifier (thesis Table 6.3 protocol)", "",
        f"Test error (%), mean ± standard error over {args.splits} random splits (seeds 0..{args.splits - 1}); "
        "published numbers from Hernández-Lobato (2009), Table 6.3. GPC column: " + gpc + ".", "",
        f"Reproduce: `{cmd}`", "",
        "| data set | train | test | BM (ours) | SVM (ours) | GPC (ours) | BM (pub.) | SVM (pub.) | GPC (pub.) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cell = lambda st, k: f"{st[k][0]:.1f} ± {st[k][1]:.1f}" if np.isfinite(st[k][0]) else "-"  # noqa: E731
    for name, ntr, nte, st, *_ in rows:
        pub = PUBLISHED[name]
        lines.append(f"| {name} | {ntr} | {nte} | {cell(st, 'BM')} | {cell(st, 'SVM')} | {cell(st, 'GPC')} | "
                     f"{pub[0]} | {pub[1]} | {pub[2]} |")
    lines += [
        "", "Per data set: the Bayes machine's mean learnt label-noise rate, how often the GPC chose each "
        f"kernel variance of {VARIANCES}, and wall seconds (all splits; per method, then total):", "",
        "| data set | BM E[eps] | GPC variance chosen (" + " / ".join(f"{v:g}" for v in VARIANCES)
        + ") | BM s | SVM s | GPC s | total s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _, _, _, eps, var_counts, secs, total in rows:
        vc = " / ".join(str(var_counts.get(v, 0)) for v in VARIANCES) if var_counts else "-"
        lines.append(f"| {name} | {eps:.3f} | {vc} | {secs['BM']:.0f} | {secs['SVM']:.0f} | {secs['GPC']:.0f} | "
                     f"{total:.0f} |")
    missing = [n for n in TRAIN if n not in [r[0] for r in rows]]
    lines += ["", "Notes:", "",
              "- Machine: 2 CPU cores shared with other processes (other jobs ran during the benchmark), "
              "single-threaded XLA and BLAS; the seconds are indicative only. They include JAX compilation "
              "(once per training-set shape).",
              "- BM: `select_lengthscale` (parallel EP, damping 0.5, Beta(1, 10) noise prior) over widths "
              "sqrt(p) 2^k, k = -2, -1.5, ..., 2. SVM: `SVC(kernel='rbf')`, C in 2^-3..2^10 and gamma = "
              "1 / (2 width^2) on the same widths, 5-fold stratified CV, one job.",
              "- GPC: probit GP classifier, EP at the array level (`probit_gp_ep`: the same EP problem, schedule, "
              "damping and tolerance as `inference.ep(gp_classifier, ...)`, checked to agree with it to 1e-12 in "
              "log evidence, mean and covariance) for every (width, variance) pair of the width grid x "
              f"variances {VARIANCES}; the pair with the largest EP evidence predicts with Phi(m / sqrt(1 + v)). "
              "Selecting the variance matters on the nearly separable sets (crabs, digits35, new_thyroid, twonorm), "
              "where variance 1 is far too small; there the evidence keeps growing with the variance (towards the "
              "noise-free step likelihood), so the largest grid value is chosen, and the GPC's predictions come "
              "close to the Bayes machine's."]
    if missing:
        lines.append("- Not run: " + ", ".join(missing) + ".")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
