"""Simulation-based calibration for every small model x engine pair, one table.

MCMC must pass (uniform ranks, Bonferroni over parameters at 1%); for VI, Laplace and EP the table
gives the measured miscalibration per parameter: bias of the normalised rank (> 0: the posterior
sits below the truth) and dispersion 12 var(u) (> 1 over-confident, < 1 under-confident).

Reproduce (about 1-2 s per fit, dominated by compilation, on 2 CPU cores):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sbc_report.py --replicates 100 --approx-replicates 50

Writes benchmarks/results/sbc.md and rank histograms under benchmarks/results/sbc/.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("INFERENCE_PROGRESS", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import probmodels  # noqa: E402
from inference.sbc import sbc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def cases():
    """(name, model, args, model kwargs, engines); small designs so each fit takes ~1 s."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    Xc = rng.normal(size=(40, 2))
    out = [
        ("linear_regression (known noise)", probmodels.linear_regression, (X, X @ np.ones(2)),
         {"noise_scale": 1.0}, ("mcmc", "vi", "laplace", "ep")),
        ("linear_regression (Gamma precision)", probmodels.linear_regression, (X, X @ np.ones(2)),
         {}, ("mcmc", "vi", "laplace")),
        ("probit_regression", probmodels.probit_regression, (Xc, (Xc[:, 0] > 0).astype(int)),
         {}, ("mcmc", "vi", "laplace", "ep")),
        ("gaussian_mixture (2 components, ordered, 1-D, n=60)", probmodels.gaussian_mixture,
         (np.r_[np.zeros(30), 3 * np.ones(30)],), {"num_components": 2, "ordered": True},
         ("mcmc", "vi", "laplace")),
        ("hmm (2 states, gaussian, T=60)", probmodels.hmm, (np.r_[np.zeros(30), 3 * np.ones(30)],),
         {"num_states": 2, "loc_prior": (0.0, 2.0), "scale_prior": (3.0, 2.0)}, ("mcmc", "vi", "laplace")),
    ]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicates", type=int, default=100, help="replicates per MCMC pair")
    p.add_argument("--approx-replicates", type=int, default=50, help="replicates per VI/Laplace/EP pair")
    p.add_argument("--engines", nargs="*", default=None)
    p.add_argument("--models", nargs="*", default=None, help="substrings of the model names to run")
    p.add_argument("--append", action="store_true", help="add rows to an existing table")
    p.add_argument("--out", default=os.path.join(HERE, "results", "sbc.md"))
    args = p.parse_args(argv)
    figdir = os.path.join(os.path.dirname(args.out), "sbc")
    os.makedirs(figdir, exist_ok=True)
    lines = [
        "## Simulation-based calibration",
        "",
        "Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sbc_report.py "
        f"--replicates {args.replicates} --approx-replicates {args.approx_replicates}`. "
        "Ranks of the prior draw among 99 thinned posterior draws; pass = chi-square uniformity "
        "(10 bins) at 1% with Bonferroni over parameters. Bias: mean normalised rank - 1/2 "
        "(> 0: posterior below the truth). Dispersion: 12 var(u), 1 when calibrated, > 1 "
        "over-confident, < 1 under-confident. Engine options: MCMC 2 chains x 400 warmup + 400 "
        "draws; VI mean-field normal; Laplace; EP (400 draws each).",
        "",
        "| model | engine | replicates | failed fits | pass | min p | bias (range) | dispersion (range) | 90% coverage (mean) | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if args.append and os.path.exists(args.out):  # keep the table so far, add rows below it
        lines = [ln for ln in open(args.out).read().rstrip().splitlines() if not ln.startswith("Rank histograms")]
        while lines and not lines[-1].strip():
            lines.pop()
    for name, model, margs, kw, engines in cases():
        if args.models and not any(m in name for m in args.models):
            continue
        for engine in engines:
            if args.engines and engine not in args.engines:
                continue
            n = args.replicates if engine == "mcmc" else args.approx_replicates
            t0 = time.perf_counter()
            res = sbc(model, *margs, engine=engine, num_replicates=n, seed=0, progress=False, **kw)
            dt = time.perf_counter() - t0
            slug = name.split(" ")[0] + ("_gamma" if "Gamma" in name else "") + f"_{engine}"
            res.plot(os.path.join(figdir, f"{slug}.png"))
            row = (f"| {name} | {engine} | {res.ranks.shape[0]} | {res.failures} | "
                   f"{'yes' if res.passed() else 'no'} | {res.p_values.min():.3f} | "
                   f"{res.bias.min():+.3f} .. {res.bias.max():+.3f} | "
                   f"{res.dispersion.min():.2f} .. {res.dispersion.max():.2f} | "
                   f"{res.coverage_90.mean():.2f} | {dt:.0f} |")
            print(row, flush=True)
            lines.append(row)
    lines += ["", "Rank histograms: `benchmarks/results/sbc/*.png`.", ""]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
