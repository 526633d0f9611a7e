"""inference.mcmc vs raw NumPyro NUTS vs Stan (pystan) on two posteriors, in one run.

Models: logistic regression (N=2000, D=20, simulated, seeded) and the non-centred eight schools.
Same draws for every sampler (2 chains x 1000 warmup + 1000 draws, 2 chains in parallel for all:
NumPyro on 2 forced host devices, Stan on 2 processes). Samplers: ours (`inference.mcmc`, which
also computes the pointwise log likelihood and convergence diagnostics), raw NumPyro as usually
written (a new `MCMC` per fit), raw NumPyro reusing one `MCMC` object (`jit_model_args=True`),
its best case, and raw NumPyro doing the same job as ours (draws + `numpyro.infer.log_likelihood`
+ `numpyro.diagnostics.summary`). Reported: wall time of the first call in a fresh process (median of 7 processes per
sampler, so no sampler warms in-process caches for another, interleaved round by round across
samplers so that machine load drifts hit all alike; tracing and compilation included; on the
benchmark's own data one discarded process per sampler first fills the persistent compilation
cache), the median of
3 repeated calls, min bulk ESS over parameters, ESS/s, and the ratios ours/raw NumPyro (overhead)
and ours/Stan.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mcmc_overhead.py [--stan-python PY] [--out FILE]

(``--stan-python``: an interpreter with pystan, e.g. a Python 3.12 venv, when .venv is 3.13.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2 "
                      "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import arviz as az  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
from collect_results import write_report  # noqa: E402

CHAINS, WARMUP, DRAWS = 2, 1000, 1000
REPEATS = 3


def logistic_data(seed=0, n=2000, d=20):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d) * 0.5
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ w))).astype(int)
    return X, y


def logistic(X, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    theta_tilde = numpyro.sample("theta_tilde", dist.Normal(jnp.zeros(8), 1.0).to_event(1))
    numpyro.deterministic("theta", mu + tau * theta_tilde)
    numpyro.sample("y", dist.Normal(mu + tau * theta_tilde, sigma), obs=y)


STAN = {
    "logistic": """
data { int N; int D; matrix[N, D] X; array[N] int<lower=0, upper=1> y; }
parameters { vector[D] w; }
model { w ~ normal(0, 1); y ~ bernoulli_logit(X * w); }
""",
    "eight_schools": """
data { array[8] real y; array[8] real<lower=0> sigma; }
parameters { real mu; real<lower=0> tau; vector[8] theta_tilde; }
model { mu ~ normal(0, 5); tau ~ cauchy(0, 5); theta_tilde ~ normal(0, 1);
        y ~ normal(mu + tau * theta_tilde, sigma); }
""",
}


def min_bulk_ess(draws: dict) -> float:
    dt = az.from_dict({"posterior": draws})
    ess = az.ess(dt, method="bulk")
    return float(min(float(ess[v].min()) for v in ess.data_vars))


def run_ours(model, args, kwargs, params):
    t0 = time.perf_counter()
    post = inference.mcmc(model, *args, num_samples=DRAWS, num_warmup=WARMUP, num_chains=CHAINS,
                          chain_method="parallel", seed=1, progress=False, **kwargs)
    t = time.perf_counter() - t0
    return t, min_bulk_ess({k: post.samples[k] for k in params})


def run_raw(model, args, kwargs, params, sampler=None):
    t0 = time.perf_counter()
    mc = sampler or MCMC(NUTS(model), num_warmup=WARMUP, num_samples=DRAWS, num_chains=CHAINS,
                         chain_method="parallel", progress_bar=False)
    mc.run(jax.random.PRNGKey(1), *args, **kwargs)
    s = mc.get_samples(group_by_chain=True)
    jax.block_until_ready(s)
    t = time.perf_counter() - t0
    return t, min_bulk_ess({k: np.asarray(s[k]) for k in params})


def run_raw_full(model, args, kwargs, params):
    """Raw NumPyro doing what `inference.mcmc` returns: draws, pointwise log likelihood (for LOO)
    and R-hat / ESS, as its documentation shows."""
    from numpyro.diagnostics import summary
    from numpyro.infer import log_likelihood

    t0 = time.perf_counter()
    mc = MCMC(NUTS(model), num_warmup=WARMUP, num_samples=DRAWS, num_chains=CHAINS,
              chain_method="parallel", progress_bar=False)
    mc.run(jax.random.PRNGKey(1), *args, **kwargs)
    s = mc.get_samples(group_by_chain=True)
    ll = log_likelihood(model, mc.get_samples(), *args, **kwargs)
    summary({k: np.asarray(v) for k, v in s.items()})
    jax.block_until_ready(ll)
    t = time.perf_counter() - t0
    return t, min_bulk_ess({k: np.asarray(s[k]) for k in params})


STAN_CHILD = r"""
import json, sys, time
import numpy as np, stan
code, data_path, out_path, chains, warmup, draws = sys.argv[1:7]
data = {k: (v.tolist() if v.ndim else v.item()) for k, v in np.load(data_path).items()}
# no random_seed: httpstan returns a stored fit for a repeated seeded request (a lookup, not a
# sampling run: 0.21 s instead of 1.7 s on logistic); unseeded fits always sample and are deleted
posterior = stan.build(open(code).read(), data=data)   # C++ build: cached, not timed
t0 = time.perf_counter()
fit = posterior.sample(num_chains=int(chains), num_samples=int(draws), num_warmup=int(warmup))
seconds = time.perf_counter() - t0
np.savez(out_path, seconds=seconds, **{p: np.asarray(fit[p]) for p in fit.param_names})
"""


def run_stan(name, data, params, python):
    """Stan in a child process: pystan's httpstan has no Python 3.13 build, so ``python`` may be
    another interpreter (any with pystan installed)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        code = os.path.join(tmp, "model.stan")
        with open(code, "w") as fh:
            fh.write(STAN[name])
        np.savez(os.path.join(tmp, "data.npz"), **{k: np.asarray(v) for k, v in data.items()})
        out = os.path.join(tmp, "out.npz")
        subprocess.run([python, "-c", STAN_CHILD, code, os.path.join(tmp, "data.npz"), out,
                        str(CHAINS), str(WARMUP), str(DRAWS)], check=True, capture_output=True)
        res = np.load(out)
        draws = {}
        for p in params:
            v = np.asarray(res[p])  # (param dims..., draws * chains), chain-major (pystan 3)
            v = v.reshape(-1, CHAINS, DRAWS)
            draws[p] = np.moveaxis(v, 0, -1)
        return float(res["seconds"]), min_bulk_ess(draws)


FRESH = 7  # fresh processes per (model, sampler) for the first-call time (single runs vary by +-20%)


def problem_list(data_seed=None):
    """The two problems; ``data_seed`` draws new data of the same shapes (logistic: a new design and
    labels; eight schools: the effects plus N(0, 1) noise), as a user fitting a new data set would."""
    X, y = logistic_data() if data_seed is None else logistic_data(seed=data_seed)
    school_y = SCHOOLS_Y if data_seed is None else SCHOOLS_Y + np.random.default_rng(data_seed).normal(size=8)
    return [
        ("logistic", logistic, (X, y), {}, ["w"],
         {"N": X.shape[0], "D": X.shape[1], "X": X, "y": y.astype(int)}),
        ("eight_schools", eight_schools, (SCHOOLS_SIGMA, school_y), {}, ["mu", "tau", "theta_tilde"],
         {"y": school_y, "sigma": SCHOOLS_SIGMA}),
    ]


def first_call(name, label, data_seed=None):
    """One sampler's first call in this (fresh) process, after imports and JAX's backend start-up
    (which every sampler would pay once, whichever runs first): prints the seconds."""
    import warnings

    (jnp.zeros(2) + 1).block_until_ready()
    _, model, margs, mkw, params, _ = next(p for p in problem_list(data_seed) if p[0] == name)
    fn = {"ours": run_ours, "numpyro": run_raw, "numpyro+loglik+diagnostics": run_raw_full}[label]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(f"FIRST {fn(model, margs, mkw, params)[0]!r}")


def _fresh_process(name, label, new_data):
    import subprocess

    seed = ["--data-seed", str(time.time_ns() % 2**31)] if new_data else []
    out = subprocess.run([sys.executable, __file__, "--first", name, label, *seed], check=True,
                         capture_output=True, text=True).stdout
    return float(next(line for line in out.splitlines() if line.startswith("FIRST")).split()[1])


def fresh_first(name, labels):
    """``{(label, new_data): (median, times)}`` over `FRESH` fresh processes of the first-call
    time: each sampler starts from the same state (no other sampler has warmed JAX's or NumPyro's
    in-process caches before it). Rounds interleave the samplers. On the benchmark's data, one
    discarded process per sampler first fills the persistent cache (what "an earlier process fitted
    these data" means); with ``new_data`` every process fits a data set no earlier process has seen
    (a program that embeds the data cannot come from the persistent cache)."""
    for label in labels:
        _fresh_process(name, label, False)
    times = {(label, new): [] for label in labels for new in (False, True)}
    for _ in range(FRESH):
        for new in (False, True):
            for label in labels:
                times[label, new].append(_fresh_process(name, label, new))
    return {k: (float(np.median(v)), v) for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", nargs=2, metavar=("MODEL", "SAMPLER"), help=argparse.SUPPRESS)
    parser.add_argument("--data-seed", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="benchmarks/results/mcmc.md")
    parser.add_argument("--no-stan", action="store_true")
    parser.add_argument("--stan-python", default=sys.executable,
                        help="interpreter with pystan installed (pystan has no Python 3.13 build)")
    args = parser.parse_args()
    if args.first:
        return first_call(*args.first, data_seed=args.data_seed)
    problems = problem_list()
    rows, fresh, fresh_new = [], {}, {}
    for name, model, margs, mkw, params, stan_data in problems:
        res = {}
        reused = MCMC(NUTS(model), num_warmup=WARMUP, num_samples=DRAWS, num_chains=CHAINS,
                      chain_method="parallel", progress_bar=False, jit_model_args=True)
        runners = (("ours", run_ours), ("numpyro", run_raw),
                   ("numpyro-reused", lambda *a: run_raw(*a, sampler=reused)),
                   ("numpyro+loglik+diagnostics", run_raw_full))
        labels = ("ours", "numpyro", "numpyro+loglik+diagnostics")
        first_calls = fresh_first(name, labels)  # interleaved rounds of fresh processes
        for label in labels:
            fresh[name, label], fresh_new[name, label] = first_calls[label, False], first_calls[label, True]
            print(name, label, "fresh-process first calls", fresh[name, label][1], "new data",
                  fresh_new[name, label][1], flush=True)
        for label, fn in runners:
            first = fn(model, margs, mkw, params)
            again = [fn(model, margs, mkw, params) for _ in range(REPEATS)]
            second = sorted(again)[REPEATS // 2]  # median time (ESS is the same every repeat)
            res[label] = (first, second)
            print(name, label, "first", first, "repeats", again, flush=True)
        if not args.no_stan:
            try:
                res["stan"] = (run_stan(name, stan_data, params, args.stan_python),) * 2
                print(name, "stan", res["stan"][0], flush=True)
            except Exception as exc:  # pystan missing or failing: say so in the table
                res["stan"] = None
                print("stan failed:", exc, file=sys.stderr)
        rows.append((name, res))
    lines = [
        "## MCMC: inference.mcmc vs raw NumPyro NUTS vs Stan",
        "",
        f"{CHAINS} chains x ({WARMUP} warmup + {DRAWS} draws), chains in parallel on 2 cores for all; "
        "float64; OMP_NUM_THREADS=1, single-threaded XLA. `ours` returns the full Posterior (draws, "
        "pointwise log likelihood, R-hat/ESS diagnostics); raw NumPyro returns draws only, except "
        "`numpyro+loglik+diagnostics` (draws, `numpyro.infer.log_likelihood`, `numpyro.diagnostics.summary`). Time 1st: "
        f"first call in a fresh process (median of {FRESH} processes per sampler in interleaved rounds, each "
        "after imports and JAX's backend start-up; min-max in brackets), tracing and compilation included, "
        "after one discarded process per sampler filled the persistent compilation cache for these data; "
        "for numpyro-reused the first call in the benchmark process, for Stan its first "
        f"sampling call. Time again: median of {REPEATS} further calls. Stan's time "
        "excludes the C++ build. ESS: min bulk ESS over parameters (ArviZ), of the repeated call.",
        "",
        "| model | sampler | time 1st (s) | time again (s) | min ESS | ESS/s (again) | ours/this time (1st) | ours/this time (again) | ours/this ESS/s (again) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in rows:
        for label, (median, _) in ((k[1], v) for k, v in fresh.items() if k[0] == name):
            (_, e1), again = res[label]
            res[label] = ((median, e1), again)
        (t1o, _), (t2o, eo2) = res["ours"]
        ours_rate = eo2 / t2o
        for label in ("ours", "numpyro", "numpyro-reused", "numpyro+loglik+diagnostics", "stan"):
            if res.get(label) is None:
                lines.append(f"| {name} | {label} | - | - | - | - | - | - | - |")
                continue
            (t1, e1), (t2, e2) = res[label]
            cmp = ("", "", "") if label == "ours" else (
                f"{t1o / t1:.3f}", f"{t2o / t2:.3f}", f"{ours_rate / (e2 / t2):.2f}")
            spread = fresh.get((name, label))
            t1s = f"{t1:.2f}" if spread is None else f"{t1:.2f} ({min(spread[1]):.2f}-{max(spread[1]):.2f})"
            lines.append(f"| {name} | {label} | {t1s} | {t2:.3f} | {e2:.0f} | {e2 / t2:.0f} | "
                         f"{cmp[0]} | {cmp[1]} | {cmp[2]} |")
    lines += ["", f"First call in a fresh process on a data set no earlier process has seen (median of {FRESH} "
              "processes, min-max in brackets, each with its own new data of the same shapes): programs that embed the data (raw "
              "NumPyro's) cannot be served by the persistent compilation cache, ours take the data as arguments.",
              "", "| model | sampler | time 1st, new data (s) | ours/this |", "|---|---|---|---|"]
    for name, _ in rows:
        ours_new = fresh_new[name, "ours"][0]
        for label in ("ours", "numpyro", "numpyro+loglik+diagnostics"):
            t, times = fresh_new[name, label]
            lines.append(f"| {name} | {label} | {t:.2f} ({min(times):.2f}-{max(times):.2f}) | "
                         f"{'' if label == 'ours' else f'{ours_new / t:.3f}'} |")
    lines += ["", "Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mcmc_overhead.py "
              "--stan-python PY` (PY: a Python 3.12 with pystan; httpstan has no 3.13 build)", ""]
    text = "\n".join(lines)
    write_report(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
