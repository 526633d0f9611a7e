"""EP vs NUTS at equal accuracy on the probit GP classifier, against a long NUTS run (issue 22).

Test error barely depends on posterior detail (an unconverged NUTS run matches it), so each
method is scored against a gold standard instead: a long NUTS run (4 chains x 10,000 draws after
2,000 warm-up each) on the same training data. By default the gold run samples the exact
posterior in coordinates preconditioned by the Laplace approximation (`preconditioned`): the
whitened parametrisation that `inference.mcmc` uses needs ~0.1 s per draw at n = 1000 (trees of
~1000 leapfrog steps), ~20 minutes per chain. ``--gold plain`` runs `inference.mcmc` itself; where
both gold runs exist their difference is reported (a check of the gold standard).
Two error metrics, against the gold run:

- ``pred MAE``: mean absolute error of the test predictive probabilities
  ``p(y* = 1 | x*) = E[Phi(f* / ...)]`` (each draw of f conditioned at the test inputs,
  `probmodels.gp.latent_predictive`, and ``Phi(m* / sqrt(1 + v*))`` averaged over draws; EP and
  Laplace from their Gaussian over f exactly, ``Phi(m* / sqrt(1 + v* + a' S a))``);
- ``max |dmean| / sd``: the largest error of a latent marginal mean, in the gold posterior SDs.

The gold run's own Monte Carlo error is estimated from its four chains (per test point, the SD of
the chain means / 2) and reported as a floor: errors near it are not resolved.

Methods: EP (``inference.ep``, defaults), Laplace (``inference.laplace``, defaults), and NUTS
(``inference.mcmc``, one chain, warm-up = draws, growing numbers of draws, seeds other than the
gold run's). Times are wall clock of the warm fit (each method called once before on the same
shapes, so compilation is excluded; NUTS at each number of draws has its own programs and is run
twice, the second timed). The ratio of NUTS time to EP time at EP's error is read off the NUTS
points: if no NUTS run reaches EP's error, NUTS's error is extrapolated along ``c / sqrt(draws)``
(fitted to the NUTS runs whose error is at least twice the gold floor) and the ratio says so.

Data: vendored sets (`probmodels.datasets`), a random split by seed 0, features standardised on the
training part; kernel ``RBF(sqrt(p))`` fixed (p features), no hyperparameters learnt.

Reproduce (float64, one CPU thread; the gold runs are cached in ``--gold-dir`` and reused):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_vs_nuts_accuracy.py --sets pima:300 twonorm:1000 \
        --out benchmarks/results/ep_vs_nuts_accuracy.md
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.scipy.linalg import solve_triangular  # noqa: E402
from jax.scipy.special import log_ndtr  # noqa: E402
from scipy.stats import norm  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
from probmodels import datasets  # noqa: E402
from probmodels.gp import gp_classifier, latent_predictive  # noqa: E402
from probmodels.kernels import RBF, gram  # noqa: E402


class Problem:
    """One data set at one training size: the split, the kernel and the test-point projections."""

    def __init__(self, name, n, test_size):
        X, y = datasets.load(name)
        self.name, self.n = name, n
        s = datasets.split(X, y, train_size=n, seed=0, test_size=min(test_size, len(X) - n))
        self.X, self.y, self.X_test = s.X_train, s.y_train, s.X_test
        self.kernel = RBF(float(np.sqrt(X.shape[1])))
        K = np.asarray(gram(self.kernel, self.X)[0])
        # f* | f = A' f + noise of variance v*
        self.A = np.linalg.solve(K, np.asarray(self.kernel(self.X_test, self.X)).T)  # (n, m)
        _, self.v = latent_predictive(np.zeros((1, n)), self.X, self.X_test, self.kernel)

    def predictive_from_draws(self, f_draws, batch=2000):
        """Mean over draws of Phi(m* / sqrt(1 + v*)), (m,)."""
        f_draws = np.asarray(f_draws).reshape(-1, self.n)
        total = np.zeros(self.A.shape[1])
        for i in range(0, len(f_draws), batch):
            total += norm.cdf((f_draws[i:i + batch] @ self.A) / np.sqrt(1.0 + self.v)).sum(axis=0)
        return total / len(f_draws)

    def predictive_from_gaussian(self, mean, cov):
        """Exact predictive of a Gaussian N(mean, cov) over f: Phi(a'm / sqrt(1 + v* + a'Sa))."""
        extra = np.sum(self.A * (cov @ self.A), axis=0)
        return norm.cdf((mean @ self.A) / np.sqrt(1.0 + self.v + extra))


def preconditioned(LK, m, C, y=None):
    """The probit GP classifier's exact posterior over f, sampled in z with f = m + C z (m, C a
    Laplace mode and covariance factor: z is near N(0, I) there, so NUTS takes short trees where
    the whitened f = L v needs ~1000 leapfrog steps per draw at n = 1000). The target is exact:
    prior N(f; 0, K) and likelihood through a factor (the affine map's Jacobian is constant)."""
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([m.shape[0]]).to_event(1))
    f = numpyro.deterministic("f", m + C @ z)
    a = solve_triangular(LK, f, lower=True)
    numpyro.factor("prior", -0.5 * a @ a + 0.5 * z @ z)  # N(f; 0, K) / N(z; 0, I), up to constants
    numpyro.sample("y", dist.Bernoulli(logits=log_ndtr(f) - log_ndtr(-f)), obs=y)


def gold(problem, path, chains=4, draws=10_000, warmup=2_000, kind="preconditioned"):
    """The long NUTS run's summaries (latent means and SDs, test predictive and its MC error),
    cached in ``path``. ``kind``: "preconditioned" (`preconditioned`, the default) or "plain"
    (`inference.mcmc` on the library's model, which samples the GP whitened)."""
    if os.path.exists(path):
        return dict(np.load(path))
    if kind == "preconditioned":
        lap = inference.laplace(gp_classifier, problem.X, problem.y, kernel=problem.kernel, progress=False)
        m, C = lap.approximation["loc"], np.linalg.cholesky(lap.approximation["cov"])
        LK = np.linalg.cholesky(np.asarray(gram(problem.kernel, problem.X)[0]))
        model, margs = preconditioned, (LK, m, C, (problem.y > 0).astype(float))  # labels in {-1, +1}
    else:
        model, margs = gp_classifier, (problem.X, problem.y)
    means, sq, preds, secs, rhat_in = [], [], [], [], []
    for c in range(chains):  # one chain per call: each chain's draws are reduced and dropped
        t = time.perf_counter()
        kw = {} if kind == "preconditioned" else {"kernel": problem.kernel}
        post = inference.mcmc(model, *margs, num_chains=1, num_samples=draws, num_warmup=warmup, seed=1000 + c,
                              progress=False, **kw)
        secs.append(time.perf_counter() - t)
        f = np.asarray(post.samples["f"]).reshape(draws, problem.n)
        means.append(f.mean(0)); sq.append((f ** 2).mean(0)); preds.append(problem.predictive_from_draws(f))
        rhat_in.append(f[::10])
        print(f"  gold chain {c}: {secs[-1]:.0f} s, {post.diagnostics['divergences']} divergences", flush=True)
    means, sq, preds = np.array(means), np.array(sq), np.array(preds)
    f_mean = means.mean(0)
    f_sd = np.sqrt(np.maximum(sq.mean(0) - f_mean ** 2, 0.0))
    thinned = np.stack(rhat_in)  # (chains, draws / 10, n)
    import arviz as az

    rhat = float(np.max(az.rhat(thinned)))
    ess = float(np.min(az.ess(thinned)))  # thinning never raises the ESS: a lower bound for the full run
    out = dict(f_mean=f_mean, f_sd=f_sd, pred=preds.mean(0), pred_se=preds.std(0, ddof=1) / np.sqrt(chains),
               f_mean_se=means.std(0, ddof=1) / np.sqrt(chains), seconds=np.array(secs), rhat=rhat,
               ess_lower=ess, draws=draws, warmup=warmup, chains=chains, kind=kind)
    np.savez(path, **out)
    return out


def errors(problem, ref, pred, f_mean):
    return (float(np.mean(np.abs(pred - ref["pred"]))),
            float(np.max(np.abs(f_mean - ref["f_mean"]) / ref["f_sd"])))


def timed(fn, repeat=2):
    out, ts = None, []
    for _ in range(repeat):
        t = time.perf_counter(); out = fn(); ts.append(time.perf_counter() - t)
    return out, ts[-1]


def run(problem, ref, draws_list, nuts_seeds):
    rows = []
    post, t = timed(lambda: inference.ep(gp_classifier, problem.X, problem.y, kernel=problem.kernel, progress=False))
    a = post.approximation
    rows.append(("EP", None, t, *errors(problem, ref, problem.predictive_from_gaussian(a["mean"], a["cov"]), a["mean"]),
                 f"{post.diagnostics['iterations']} sweeps, converged={post.diagnostics['converged']}"))
    post, t = timed(lambda: inference.laplace(gp_classifier, problem.X, problem.y, kernel=problem.kernel,
                                              progress=False))
    a = post.approximation
    rows.append(("Laplace", None, t, *errors(problem, ref, problem.predictive_from_gaussian(a["loc"], a["cov"]),
                                             a["loc"]), f"converged={post.diagnostics['converged']}"))
    for d in draws_list:
        errs = []
        for seed in nuts_seeds:
            post, t = timed(lambda: inference.mcmc(gp_classifier, problem.X, problem.y, kernel=problem.kernel,
                                                   num_chains=1, num_samples=d, num_warmup=d, seed=seed,
                                                   progress=False), repeat=2 if seed == nuts_seeds[0] else 1)
            f = np.asarray(post.samples["f"]).reshape(d, problem.n)
            errs.append((t, *errors(problem, ref, problem.predictive_from_draws(f), f.mean(0))))
        e = np.array(errs)
        rows.append(("NUTS", d, float(np.median(e[:, 0])), float(np.median(e[:, 1])), float(np.median(e[:, 2])),
                     f"median of {len(nuts_seeds)} seeds; pred MAE range {e[:, 1].min():.2g}-{e[:, 1].max():.2g}"))
        print("  ", rows[-1], flush=True)
    return rows


def ratio_at_ep_error(rows, floor):
    """NUTS time / EP time at EP's predictive error, and how it was obtained."""
    ep = rows[0]
    nuts = [r for r in rows if r[0] == "NUTS"]
    reached = [r for r in nuts if r[3] <= ep[3]]
    if reached:
        r = reached[0]
        return r[2] / ep[2], f"NUTS reaches it at {r[1]} draws"
    fit = [r for r in nuts if r[3] >= 2 * floor]
    if len(fit) < 2:
        return None, "no NUTS run above twice the gold floor to extrapolate from"
    d = np.array([r[1] for r in fit], float); err = np.array([r[3] for r in fit]); t = np.array([r[2] for r in fit])
    c = float(np.exp(np.mean(np.log(err) + 0.5 * np.log(d))))  # err = c / sqrt(d), least squares in logs
    d_star = (c / ep[3]) ** 2
    per_draw = float(np.polyfit(d, t, 1)[0])  # seconds per draw (warm-up + kept = 2 d draws)
    t_star = t[-1] + per_draw * (d_star - d[-1])
    return t_star / ep[2], f"extrapolated: c / sqrt(draws) with c = {c:.3g} reaches it at ~{d_star:,.0f} draws"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["pima:300", "twonorm:1000"], help="name:training size")
    ap.add_argument("--test-size", type=int, default=1000, help="at most; fewer where the set is smaller")
    ap.add_argument("--draws", type=int, nargs="+", default=[100, 250, 500, 1000, 2500])
    ap.add_argument("--nuts-seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--gold-draws", type=int, default=10_000)
    ap.add_argument("--gold", choices=("preconditioned", "plain"), default="preconditioned",
                    help="the gold run's parametrisation (see `gold`)")
    ap.add_argument("--gold-dir", default="benchmarks/results/gold")
    ap.add_argument("--out", default="benchmarks/results/ep_vs_nuts_accuracy.md")
    args = ap.parse_args()
    os.makedirs(args.gold_dir, exist_ok=True)
    lines = ["# EP vs NUTS at equal accuracy (probit GP classifier, gold standard: long NUTS)", "",
             "Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ep_vs_nuts_accuracy.py "
             + " ".join(f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                        for k, v in vars(args).items()) + "`", "",
             f"Date {time.strftime('%Y-%m-%d %H:%M')}, JAX {jax.__version__}, float64, one CPU thread.", ""]
    plot = []
    for spec in args.sets:
        name, n = spec.split(":")
        problem = Problem(name, int(n), args.test_size)
        print(f"{name} n={n}", flush=True)
        ref = gold(problem, os.path.join(args.gold_dir, f"{name}_{n}_{args.gold_draws}_{args.gold}.npz"),
                   draws=args.gold_draws, kind=args.gold)
        floor = float(np.mean(ref["pred_se"])) * np.sqrt(2 / np.pi)  # mean |N(0, se^2)|
        other = os.path.join(args.gold_dir, f"{name}_{n}_{args.gold_draws}_"
                             f"{'plain' if args.gold == 'preconditioned' else 'preconditioned'}.npz")
        check = ""
        if os.path.exists(other):
            o = dict(np.load(other))
            check = (f" The other gold run ({o['kind']}, {o['seconds'].sum():.0f} s, R-hat {float(o['rhat']):.4f}) "
                     f"differs from this one by pred MAE {np.mean(np.abs(o['pred'] - ref['pred'])):.1e} and "
                     f"max |dmean| / sd {np.max(np.abs(o['f_mean'] - ref['f_mean']) / ref['f_sd']):.3f}.")
        rows = run(problem, ref, args.draws, args.nuts_seeds)
        ratio, how = ratio_at_ep_error(rows, floor)
        lines += [f"## {name}, n = {n} ({len(problem.X_test)} test points)", "",
                  f"Gold ({ref['kind']} NUTS): {int(ref['chains'])} chains x {int(ref['draws'])} draws ({int(ref['warmup'])} warm-up), "
                  f"{ref['seconds'].sum():.0f} s; max split R-hat {float(ref['rhat']):.4f}, min ESS >= "
                  f"{float(ref['ess_lower']):.0f} (the ESS of every 10th draw); its own MC error: pred MAE floor "
                  f"~{floor:.1e}, latent means {float(np.max(ref['f_mean_se'] / ref['f_sd'])):.1e} sd at most." + check, "",
                  "| method | draws (warm-up + kept) | warm time s | pred MAE | max abs dmean / sd | notes |",
                  "|---|---|---|---|---|---|"]
        for m, d, t, e1, e2, note in rows:
            lines.append(f"| {m} | {'-' if d is None else f'{d} + {d}'} | {t:.3f} | {e1:.2e} | {e2:.3f} | {note} |")
        lines += ["", f"NUTS time / EP time at EP's predictive error: "
                  + ("-" if ratio is None else f"**{ratio:,.0f}x**") + f" ({how}).", ""]
        plot.append((spec, rows, floor))
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    _plot(plot, os.path.splitext(args.out)[0] + ".png")
    print("\n".join(lines))


def _plot(panels, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (spec, rows, floor) in zip(axes[0], panels):
        nuts = [r for r in rows if r[0] == "NUTS"]
        ax.loglog([r[2] for r in nuts], [r[3] for r in nuts], "o-", label="NUTS (1 chain, growing draws)")
        for r, mk in zip(rows[:2], ("*", "s")):
            ax.loglog([r[2]], [r[3]], mk, ms=12, label=r[0])
        ax.axhline(floor, ls=":", c="grey", label="gold run's MC error")
        ax.set(title=spec, xlabel="warm wall time (s)", ylabel="test predictive MAE vs gold")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
