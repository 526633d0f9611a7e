"""GP classifier with kernel hyperparameters learnt or integrated over (issue 23): EP and Laplace
``hyper=`` against scikit-learn's GaussianProcessClassifier and joint NUTS.

Protocol: the thesis Table 6.3 classification sets and training sizes of
`benchmarks/bayes_machine_table.py` (`TRAIN`, its `load`: random splits by seed, the rest for
testing, twonorm / threenorm 1000 test points, features standardised on the training part). The
model is `probmodels.gp_classifier` (probit link) with an RBF kernel whose hyperparameters are
priors, chosen once for every set (p = number of features):

    lengthscale ~ LogNormal(log sqrt(p), 1)   (isotropic; ARD: one per feature, same prior)
    variance    ~ LogNormal(0, 1)

Methods, per data set and split:

- ``EP map iso``: ``inference.ep(..., hyper="map")``, isotropic RBF;
- ``EP map ARD``: the same with an ARD RBF;
- ``EP int iso``: ``inference.ep(..., hyper="integrate")``, isotropic;
- ``Lap map iso``: ``inference.laplace(..., hyper="map")``, isotropic;
- ``sklearn``: ``GaussianProcessClassifier(ConstantKernel(1.0) * RBF(sqrt(p)))`` (Laplace, logistic
  link, its own L-BFGS-B type-II ML, default bounds, no restarts), ``predict_proba``;
- ``NUTS``: ``inference.mcmc`` on the same model (f whitened), jointly over f and the
  hyperparameters (``--nuts-sets``, ``--nuts-splits``, chains x warm-up / draws from
  ``--nuts-draws``); its split R-hat max over the hyperparameters and f.

Predictive probabilities at the test inputs, the same for every library engine: each posterior
draw of f at the training inputs (with its draw's hyperparameters) is conditioned to the test
inputs by `probmodels.gp.latent_predictive` (mean m, variance v of f* | f) and pushed through
``Phi(m / sqrt(1 + v))``; the probabilities are averaged over draws. Test error: P(y=1) > 0.5
against the label; test log loss: mean of ``-log p(y_test)`` (probabilities clipped to 1e-12).
Wall seconds per fit include drawing the posterior samples, not the test prediction; the first
fit of each training shape includes JAX compilation and is reported separately from the median
of the later ("warm") fits. Then twonorm at ``--big-n`` training points (1000 test points),
``--big-splits`` splits, EP map iso against scikit-learn (the speed goal).

Reproduce (the main run of benchmarks/results/hyper_gpc.md, about 15 minutes single-threaded;
the file's later sections give the two smaller invocations appended to it):
    OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python \\
        benchmarks/hyper_gpc.py --splits 5 --nuts-sets crabs --nuts-splits 1 --nuts-draws 2 500 \\
        --big-n 1000 --big-splits 1 --out benchmarks/results/hyper_gpc.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from scipy.special import ndtr  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inference  # noqa: E402
from bayes_machine_table import TEST, TRAIN  # noqa: E402
from probmodels import datasets, gp_classifier  # noqa: E402
from probmodels.gp import latent_predictive  # noqa: E402
from probmodels.kernels import RBF  # noqa: E402

METHODS = ("EP map iso", "EP map ARD", "EP int iso", "Lap map iso", "sklearn", "NUTS")
NUM_SAMPLES = 1000  # posterior draws of f for the predictive (EP / Laplace)


def load(name: str, seed: int, train_size: int | None = None):
    train = TRAIN[name] if train_size is None else train_size
    if name == "threenorm":
        X, y = datasets.threenorm(train + TEST[name], seed=seed)
    else:
        X, y = datasets.load(name)
    s = datasets.split(X, y, train_size=train, seed=seed, test_size=TEST.get(name))
    return s, (np.asarray(s.y_train) > 0).astype(np.int64), (np.asarray(s.y_test) > 0).astype(np.int64)


def kernel(p: int, ard: bool):
    loc = float(np.log(np.sqrt(p)))
    ls = dist.LogNormal(jnp.full(p, loc), 1.0) if ard else dist.LogNormal(loc, 1.0)
    return RBF(ls, variance=dist.LogNormal(0.0, 1.0))


def predictive(post, X_train, X_test):
    """P(y=1) at X_test averaged over draws; draws sharing hyperparameter values are conditioned
    together (map: one group; integrate: one per design point; NUTS: one per draw)."""
    f = np.asarray(post.samples["f"], dtype=float).reshape(-1, X_train.shape[0])
    s = len(f)
    ls = np.asarray(post.samples["lengthscale"], dtype=float).reshape(s, -1)
    var = np.asarray(post.samples["variance"], dtype=float).reshape(s)
    keys = np.column_stack([ls, var])
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    p = np.zeros(X_test.shape[0])
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        l = ls[idx[0]]
        k = RBF(float(l[0]) if l.size == 1 else l, float(var[idx[0]]))
        m, v = latent_predictive(f[idx], X_train, X_test, k)
        p += ndtr(m / np.sqrt(1.0 + v)).sum(0)
    return p / s


def scores(p, y):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    err = 100.0 * np.mean((p > 0.5) != (y > 0))
    loss = -np.mean(np.where(y > 0, np.log(p), np.log1p(-p)))
    return err, loss


def hyper_note(post, method):
    d = post.diagnostics
    h = d.get("hyper", {}) if isinstance(d, dict) else {}
    if method == "NUTS":
        return {"rhat": d.get("max_rhat", d.get("rhat")), "converged": d.get("converged")}
    return {"converged": bool(d.get("converged")) and bool(h.get("converged", True)),
            "values": h.get("values")}


def fit(method, s, ytr, args):
    X = np.asarray(s.X_train)
    p = X.shape[1]
    if method == "sklearn":
        from sklearn.gaussian_process import GaussianProcessClassifier
        from sklearn.gaussian_process.kernels import RBF as SkRBF
        from sklearn.gaussian_process.kernels import ConstantKernel

        t = time.perf_counter()
        gpc = GaussianProcessClassifier(ConstantKernel(1.0) * SkRBF(float(np.sqrt(p))), random_state=0).fit(X, ytr)
        sec = time.perf_counter() - t
        return gpc.predict_proba(np.asarray(s.X_test))[:, 1], sec, {"converged": None, "values": str(gpc.kernel_)}
    k = kernel(p, ard=(method == "EP map ARD"))
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method.startswith("EP"):
            post = inference.ep(gp_classifier, X, ytr, kernel=k, hyper="integrate" if "int" in method else "map",
                                num_samples=NUM_SAMPLES, seed=0, progress=False)
        elif method.startswith("Lap"):
            post = inference.laplace(gp_classifier, X, ytr, kernel=k, hyper="map", num_samples=NUM_SAMPLES, seed=0)
        else:  # NUTS
            chains, draws = args.nuts_draws
            post = inference.mcmc(gp_classifier, X, ytr, kernel=k, num_chains=chains, num_warmup=draws,
                                  num_samples=draws, seed=0, progress=False)
    sec = time.perf_counter() - t
    note = hyper_note(post, method)
    if method == "NUTS":
        from numpyro.diagnostics import split_gelman_rubin

        rh = [float(np.nanmax(split_gelman_rubin(np.asarray(post.samples[k_], dtype=float))))
              for k_ in ("f", "lengthscale", "variance")]
        note = {"rhat": max(rh), "rhat_hyper": max(rh[1:]), "converged": post.diagnostics.get("converged")}
    return predictive(post, X, np.asarray(s.X_test)), sec, note


def run_cell(method, s, ytr, yte, args, log):
    try:
        prob, sec, note = fit(method, s, ytr, args)
        err, loss = scores(prob, yte)
        return {"err": err, "loss": loss, "sec": sec, "note": note}
    except Exception as e:  # reported in the table, never fatal
        log(f"    {method} FAILED: {type(e).__name__}: {e}")
        traceback.print_exc()
        return {"fail": f"{type(e).__name__}: {str(e)[:120]}"}


def summarise(cells):
    ok = [c for c in cells if "fail" not in c]
    out = {"n": len(ok), "fails": len(cells) - len(ok)}
    if ok:
        err, loss = np.array([c["err"] for c in ok]), np.array([c["loss"] for c in ok])
        se = lambda a: a.std() / np.sqrt(len(a)) if len(a) > 1 else np.nan  # noqa: E731
        out.update(err=(err.mean(), se(err)), loss=(loss.mean(), se(loss)), first=ok[0]["sec"],
                   warm=float(np.median([c["sec"] for c in ok[1:]])) if len(ok) > 1 else np.nan)
        conv = [c["note"].get("converged") for c in ok]
        out["conv"] = sum(bool(c) for c in conv if c is not None), sum(c is not None for c in conv)
        if any("rhat" in c["note"] for c in ok):
            out["rhat"] = max(c["note"]["rhat"] for c in ok)
            out["rhat_hyper"] = max(c["note"]["rhat_hyper"] for c in ok)
    return out


def fmt(x, d=1):
    m, se = x
    return f"{m:.{d}f}" if not np.isfinite(se) else f"{m:.{d}f} ± {se:.{d}f}"


def write(args, rows, big, cmd, total):
    lines = ["# GP classifier hyperparameters learnt (issue 23)", "",
             f"Reproduce: `{cmd}`", "",
             f"Run: {args.splits} split(s) (seeds 0..{args.splits - 1}) on {', '.join(args.sets)}; "
             f"NUTS ({args.nuts_draws[0]} chains x {args.nuts_draws[1]} warm-up / {args.nuts_draws[1]} draws) on "
             f"{', '.join(args.nuts_sets) or 'none'}, {args.nuts_splits} split(s); twonorm at n = {args.big_n}: "
             f"{args.big_splits} split(s). float64, one CPU thread. Total wall {total:.0f} s.", "",
             "Priors: lengthscale ~ LogNormal(log sqrt(p), 1) (ARD: per feature), variance ~ LogNormal(0, 1). "
             "Test error (%) and test log loss: mean ± standard error over splits. Seconds: first fit "
             "(includes JAX compilation for that training shape) / median of the later fits. "
             "conv: fits whose final inference and hyperparameter search reported converged / fits.", "",
             "| data set | n train | method | test error % | test log loss | s first | s warm median | conv | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, ntr, summ in rows + big:
        for method, sm in summ.items():
            if sm["n"] == 0:
                lines.append(f"| {name} | {ntr} | {method} | failed | | | | | {sm.get('why', '')} |")
                continue
            note = []
            if sm["fails"]:
                note.append(f"{sm['fails']} failed: {sm.get('why', '')}")
            if "rhat" in sm:
                note.append(f"max R-hat {sm['rhat']:.3f} (hyper {sm['rhat_hyper']:.3f})")
            conv = f"{sm['conv'][0]}/{sm['conv'][1]}" if sm["conv"][1] else "-"
            warm = f"{sm['warm']:.2f}" if np.isfinite(sm["warm"]) else "-"
            lines.append(f"| {name} | {ntr} | {method} | {fmt(sm['err'])} | {fmt(sm['loss'], 3)} | "
                         f"{sm['first']:.2f} | {warm} | {conv} | {'; '.join(note)} |")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def run_set(label, methods, splits, loader, args, log):
    """Every method on ``splits`` splits (``loader(seed) -> (data, y_train, y_test)``; NUTS on the
    first ``args.nuts_splits`` only): ``(training size, {method: summary})``."""
    cells = {m: [] for m in methods}
    for seed in range(splits):
        s, ytr, yte = loader(seed)
        for m in methods:
            if m == "NUTS" and seed >= args.nuts_splits:
                continue
            c = run_cell(m, s, ytr, yte, args, log)
            cells[m].append(c)
            if "fail" not in c:
                log(f"{label} split {seed} {m:12s} err {c['err']:5.1f}  loss {c['loss']:.3f}  "
                    f"{c['sec']:6.2f}s  {c['note']}")
    summ = {}
    for m, cs in cells.items():
        summ[m] = summarise(cs)
        fails = [c["fail"] for c in cs if "fail" in c]
        if fails:
            summ[m]["why"] = fails[0]
    return len(ytr), summ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--sets", nargs="*", default=[n for n in TRAIN])
    ap.add_argument("--methods", nargs="*", default=[m for m in METHODS if m != "NUTS"])
    ap.add_argument("--nuts-sets", nargs="*", default=["crabs"])
    ap.add_argument("--nuts-splits", type=int, default=1)
    ap.add_argument("--nuts-draws", type=int, nargs=2, default=[2, 500], metavar=("CHAINS", "DRAWS"))
    ap.add_argument("--big-n", type=int, default=1000)
    ap.add_argument("--big-splits", type=int, default=1)
    ap.add_argument("--big-methods", nargs="*", default=["EP map iso", "sklearn"])
    ap.add_argument("--out", default="benchmarks/results/hyper_gpc.md")
    args = ap.parse_args()
    cmd = "OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false .venv/bin/python " + " ".join(
        ["benchmarks/hyper_gpc.py"] + sys.argv[1:])
    t0 = time.time()
    log = lambda msg: print(f"[{time.time() - t0:6.0f}s] {msg}", flush=True)  # noqa: E731
    rows, big = [], []
    for name in args.sets:
        methods = list(args.methods) + (["NUTS"] if name in args.nuts_sets else [])
        n, summ = run_set(name, methods, args.splits, lambda seed: load(name, seed), args, log)
        rows.append((name, n, summ))
        write(args, rows, big, cmd, time.time() - t0)
    if args.big_splits:
        _, summ = run_set(f"twonorm n={args.big_n}", args.big_methods, args.big_splits,
                          lambda seed: load("twonorm", seed, train_size=args.big_n), args, log)
        big.append((f"twonorm (n = {args.big_n})", args.big_n, summ))
    write(args, rows, big, cmd, time.time() - t0)
    log("done")


if __name__ == "__main__":
    main()
