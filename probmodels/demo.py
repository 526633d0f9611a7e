"""The main job: every library model on vendored or simulated data with every applicable engine.

Prints a table (model, engine, wall time, accuracy / error against the exact answer, log evidence,
agreement with NUTS) and writes posteriors (``.nc``), ArviZ plots (``.png``) and ``report.md`` to
an output folder. Each model family contributes `Case`s in `cases()`.

Example (a quick subset):
    >>> from probmodels import demo
    >>> rows = demo.run("/tmp/demo-doc", only=["linear_regression"], engines=["laplace"], quiet=True)
    >>> rows[0]["engine"]
    'laplace'
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

ENGINE_ORDER = ("mcmc", "vi", "laplace", "ep", "exact")


@dataclass
class Case:
    """One model on one data set, the engines that apply, and how to score a fit."""

    name: str
    model: Callable
    args: tuple
    kwargs: dict
    engines: tuple
    score: Callable  # Posterior -> (metric name, value, formatted)
    options: dict = field(default_factory=dict)  # engine -> engine options
    plot: Callable | None = None  # (posterior, path) -> None: one model-specific picture


def _classification_case(name, model, dataset, train_size, engines, options=None, **model_kw):
    from probmodels import datasets

    X, y = datasets.load(dataset)
    sp = datasets.split(X, y, train_size=train_size, seed=0)

    def score(post):
        pred = post.predict(sp.X_test, **model_kw)["y"].values  # (chain, draw, m) in {0, 1}
        p1 = pred.mean(axis=(0, 1))
        acc = float(np.mean((p1 > 0.5) == (sp.y_test > 0)))
        return "test accuracy", acc, f"{100 * acc:.1f}%"

    return Case(name, model, (sp.X_train, sp.y_train), dict(model_kw), engines, score, options or {})


def _linear_case():
    import probmodels
    from probmodels import conjugate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = X @ np.array([1.0, -0.5, 0.0, 2.0, 0.3]) + 0.8 * rng.normal(size=200)
    exact = conjugate.linear_regression_posterior(X, y, noise_prior=(1.0, 1.0))

    def score(post):
        err = float(np.max(np.abs(post.mean("w") - exact.mean) / np.sqrt(np.diag(exact.cov))))
        return "max |mean - exact| / sd", err, f"{err:.3f} sd (exact log Z {exact.log_evidence:.2f})"

    return Case("linear_regression", probmodels.linear_regression, (X, y), {}, ("mcmc", "vi", "laplace"),
                score, {"vi": {"guide": "mvn"}})


def _truth_score(w_true):
    """Score: the largest error of the posterior mean of ``w`` against the simulation's weights, in
    posterior sds."""

    def score(post):
        w = np.asarray(post.samples["w"], float).reshape(-1, len(w_true))
        err = float(np.max(np.abs(w.mean(0) - w_true) / w.std(0)))
        return "max |mean - true w| / sd", err, f"{err:.2f} sd"

    return score


def _robust_case():
    """Student-t regression on data with 10% gross outliers (a Gaussian-noise fit is pulled by them)."""
    import probmodels

    rng = np.random.default_rng(0)
    w_true = np.array([1.0, -0.5, 2.0])
    X = rng.normal(size=(200, 3))
    y = X @ w_true + rng.standard_t(3.0, size=200)
    y[rng.choice(200, 20, replace=False)] += 15.0
    return Case("robust_regression", probmodels.robust_regression, (X, y), {}, ("mcmc", "vi", "laplace", "ep"),
                _truth_score(w_true))


def _ordinal_case():
    """Ordered probit with 4 categories at the model's default cut points."""
    import probmodels
    from probmodels.regression import default_cutpoints

    rng = np.random.default_rng(1)
    w_true = np.array([1.5, -1.0, 0.5])
    X = rng.normal(size=(300, 3))
    y = np.digitize(X @ w_true + rng.normal(size=300), np.asarray(default_cutpoints(4)))
    return Case("ordinal_regression", probmodels.ordinal_regression, (X, y), {"num_categories": 4},
                ("mcmc", "vi", "laplace", "ep"), _truth_score(w_true))


def cases() -> list[Case]:
    """Every library model the project has, on its demo data."""
    import probmodels

    out = [
        _linear_case(),
        _classification_case("logistic_regression", probmodels.logistic_regression, "breast", 100,
                             ("mcmc", "vi", "laplace", "ep")),
        _classification_case("probit_regression", probmodels.probit_regression, "pima", 100,
                             ("mcmc", "vi", "laplace", "ep")),
        _robust_case(),
        _ordinal_case(),
    ]
    for extra in _family_cases():
        out.extend(extra())
    return out


# Families whose demo cases have been verified end to end; the others are work in progress.
VERIFIED_FAMILIES: tuple[str, ...] = ("probmodels.gp", "probmodels.hmm", "probmodels.lda", "probmodels.lds", "probmodels.mixtures",
                                        "probmodels.spike_slab", "probmodels.bayes_net", "probmodels.experts",
                                        "probmodels.factor", "probmodels.ibp")


def _family_cases():
    """Model families register their demo cases here (each a function returning a list of Case)."""
    found = []
    for module_name in VERIFIED_FAMILIES:
        try:
            module = __import__(module_name, fromlist=["demo_cases"])
        except ImportError:
            continue
        if hasattr(module, "demo_cases"):
            found.append(module.demo_cases)
    return found


def _agreement(post, ref) -> float | None:
    """Max over shared continuous coordinates of |mean - NUTS mean| / NUTS sd."""
    if ref is None or post is ref:
        return None
    worst = 0.0
    for k, v in ref.samples.items():
        if k not in post.samples or not np.issubdtype(v.dtype, np.floating):
            continue
        if post.samples[k].shape[2:] != v.shape[2:]:
            continue
        sd = v.std(axis=(0, 1))
        ok = sd > 0
        if ok.any():
            worst = max(worst, float(np.max(np.abs(post.mean(k) - ref.mean(k))[ok] / sd[ok])))
    return worst


def _plot(post, path_base):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dt = post.to_arviz()
    names = [k for k, v in post.samples.items() if np.issubdtype(v.dtype, np.floating) and v[0, 0].size <= 12]
    if not names:
        return []
    pc = az.plot_forest(dt, var_names=names, backend="matplotlib")
    paths = [f"{path_base}_forest.png"]
    pc.savefig(paths[0])
    plt.close("all")
    if post.engine == "mcmc":  # chains: trace plot of the (at most 4) smallest sites
        small = sorted(names, key=lambda k: post.samples[k][0, 0].size)[:4]
        pc = az.plot_trace(dt, var_names=small, backend="matplotlib")
        paths.append(f"{path_base}_trace.png")
        pc.savefig(paths[-1])
        plt.close("all")
    return paths


def run(out: str = "demo-output", *, only=None, engines=None, quiet: bool = False, plots: bool = True):
    """Run the demo; returns the table rows (dicts). ``only`` / ``engines`` restrict it."""
    import inference

    os.makedirs(out, exist_ok=True)
    all_cases = [c for c in cases() if only is None or c.name in only]
    jobs = [(c, e) for c in all_cases for e in ENGINE_ORDER if e in c.engines and (engines is None or e in engines)]
    rows, refs = [], {}
    bar = None
    if not quiet:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), desc="demo")
    for case, engine in jobs:
        opts = dict(case.options.get(engine, {}))
        opts.setdefault("seed", 0)
        opts.setdefault("progress", False)  # one bar: the demo's own
        row = {"model": case.name, "engine": engine}
        try:
            t0 = time.perf_counter()
            post = getattr(inference, engine)(case.model, *case.args, **case.kwargs, **opts)
            row["time_s"] = time.perf_counter() - t0
            if engine == "mcmc":
                refs[case.name] = post
            metric, value, text = case.score(post)
            row.update(metric=metric, value=value, text=text, log_evidence=post.log_evidence,
                       evidence_method=post.evidence_method, converged=post.diagnostics.get("converged"),
                       agreement=_agreement(post, refs.get(case.name)))
            base = os.path.join(out, f"{case.name}_{engine}")
            post.save(base + ".nc")
            row["files"] = [base + ".nc"]
            if plots:
                row["files"] += _plot(post, base)
                if case.plot is not None:
                    row["files"] += case.plot(post, base) or []
        except Exception as exc:  # a failing engine is reported in the table, not hidden
            row.update(error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc())
        rows.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    table = format_table(rows)
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write(report(rows, out))
    if not quiet:
        print(table)
        print(f"\nPosteriors, plots and report.md written to {out}/")
    return rows


def format_table(rows) -> str:
    """The demo's table; ``converged`` is each fit's ``diagnostics["converged"]`` (NO: the answer
    may be wrong, e.g. a short NUTS run whose R-hat or ESS fails; the row's numbers stand as
    measured, not as a reference)."""
    head = (f"{'model':<28} {'engine':<8} {'time':>8}  {'converged':>9}  {'log evidence':>20}  {'vs NUTS':>8}  "
            "result")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<28} {r['engine']:<8} {'-':>8}  {'-':>9}  {'-':>20}  {'-':>8}  "
                         f"FAILED {r['error'][:80]}")
            continue
        conv = {True: "yes", False: "NO"}.get(r.get("converged"), "-")
        ev = "-" if r["log_evidence"] is None else f"{r['log_evidence']:.2f} ({r['evidence_method']})"
        agr = "-" if r["agreement"] is None else f"{r['agreement']:.2f} sd"
        lines.append(f"{r['model']:<28} {r['engine']:<8} {r['time_s']:>7.1f}s  {conv:>9}  {ev:>20}  {agr:>8}  "
                     f"{r['metric']}: {r['text']}")
    return "\n".join(lines)


def report(rows, out) -> str:
    parts = ["# probmodels demo report", "", "```", format_table(rows), "```", "",
             "`converged`: the fit's `diagnostics[\"converged\"]` (README: MCMC split R-hat, bulk ESS and "
             "divergences; VI an ELBO plateau; Laplace the gradient and Hessian at the mode; EP the site change). "
             "The demo's runs are short: NO marks a fit whose numbers may be off.",
             "`vs NUTS`: largest |posterior mean - NUTS mean| / NUTS sd over the model's continuous sites, "
             "against this demo's NUTS run (a reference only where that run converged).", ""]
    for r in rows:
        pngs = [f for f in r.get("files", []) if f.endswith(".png")]
        if pngs:
            parts.append(f"## {r['model']} — {r['engine']}")
            parts += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in pngs]
            parts.append("")
        if "error" in r:
            parts += [f"## {r['model']} — {r['engine']} FAILED", "```", r["trace"], "```", ""]
    return "\n".join(parts)
