"""NUTS and mean-field VI on the GP classifier at default options, before and after the latent was
whitened (`inference.whiten`), side by side in one run.

Data: the defaults matrix's GP classifier (tests/fixtures/gp_classifier_reference.npz: n = 30,
probit, RBF, with predictive probabilities at 15 test inputs from a long NUTS run). For each
checkout (``--before DIR``: a checkout of the code before, e.g. ``git worktree add /tmp/before
4e0dbfb``), each dtype and seeds 0-2: the warm wall time of a fit (the seed-0 fit, which
compiles, is reported apart), bulk ESS / R-hat / converged (NUTS), the ELBO (VI) and the largest
error of the predictive probabilities against the reference. Each checkout runs in its own process.

Reproduce:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gp_whitening.py --before /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, pathlib
import numpy as np, jax
from scipy.special import ndtr
import inference, probmodels
from probmodels.gp import latent_predictive
from probmodels.kernels import RBF
root = pathlib.Path(sys.argv[1])
with np.load(root / "tests" / "fixtures" / "gp_classifier_reference.npz") as f:
    ref = {k: f[k] for k in f.files}
kernel = RBF(float(ref["lengthscale"]))
out = []
for dtype in ("float64", "float32"):
    for engine in ("mcmc", "vi"):
        for seed in (0, 1, 2):
            with jax.enable_x64(dtype == "float64"):
                t = time.perf_counter()
                post = getattr(inference, engine)(probmodels.gp_classifier, ref["X"], ref["y"], kernel=kernel,
                                                  seed=seed, progress=False)
                seconds = time.perf_counter() - t
            d = post.diagnostics
            m, v = latent_predictive(np.asarray(post.samples["f"], float).reshape(-1, 30), ref["X"], ref["X_test"], kernel)
            err = float(np.max(np.abs(ndtr(m / np.sqrt(1 + v)).mean(0) - ref["p_test"])))
            out.append(dict(dtype=dtype, engine=engine, seed=seed, seconds=seconds, err=err,
                            converged=bool(d["converged"]), ess=float(d.get("min_ess", np.nan)),
                            rhat=float(d.get("max_rhat", np.nan)), elbo=float(d.get("elbo", np.nan))))
    from inference import compiled
    compiled.clear(); jax.clear_caches()
print(json.dumps(out))
"""


def measure(code_dir, root):
    env = dict(os.environ, PYTHONPATH=code_dir, OMP_NUM_THREADS="1", INFERENCE_PROGRESS="0")
    res = subprocess.run([sys.executable, "-c", CHILD, root], env=env, cwd=code_dir, check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def rows(label, results):
    lines = []
    for dtype in ("float64", "float32"):
        for engine in ("mcmc", "vi"):
            r = [x for x in results if x["dtype"] == dtype and x["engine"] == engine]
            warm = [x["seconds"] for x in r if x["seed"] > 0]
            if engine == "mcmc":
                quality = (f"ESS {min(x['ess'] for x in r):.0f}-{max(x['ess'] for x in r):.0f}, R-hat <= "
                           f"{max(x['rhat'] for x in r):.3f}")
            else:
                quality = f"ELBO {min(x['elbo'] for x in r):.1f} to {max(x['elbo'] for x in r):.1f}"
            lines.append(f"| {label} | {dtype} | {engine} | {r[0]['seconds']:.1f} | {min(warm):.2f}-{max(warm):.2f} | "
                         f"{quality} | {sum(x['converged'] for x in r)}/3 | {max(x['err'] for x in r):.3f} |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a checkout of the code before the whitening")
    ap.add_argument("--out", default="benchmarks/results/gp_whitening.md")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    before, after = measure(args.before, here), measure(here, here)
    text = "\n".join([
        "# GP classifier at default options: NUTS and VI before / after whitening f", "",
        "n = 30 (the defaults matrix's fixture), seeds 0-2, one process per checkout, OMP_NUM_THREADS=1. "
        "First fit: seed 0 (compiles); warm: seeds 1-2. Error: largest |P(y=1) - reference| at 15 test inputs.", "",
        "Reproduce: `git worktree add /tmp/before 4e0dbfb; OMP_NUM_THREADS=1 .venv/bin/python "
        "benchmarks/gp_whitening.py --before /tmp/before`", "",
        "| code | dtype | engine | first fit (s) | warm fit (s) | sampler / optimiser | converged | pred. error |",
        "|---|---|---|---|---|---|---|---|", *rows("before", before), *rows("after", after), ""])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
