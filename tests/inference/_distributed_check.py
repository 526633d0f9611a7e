"""Run by test_distributed_ep.py in a child process with 4 simulated CPU devices:
distributed EP (4 shards, one per device) on logistic regression, n = 20,000, against NUTS on the
full data and full-data EP (the shards' local EPs run at the same time, one thread per device).
Prints one JSON line."""

import json
import os
import sys

if "device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4 " + os.environ.get("XLA_FLAGS", "")

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
import probmodels  # noqa: E402

n, d = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000, 5
rng = np.random.default_rng(0)
X = rng.normal(size=(n, d))
w_true = np.array([1.0, -0.5, 0.25, 0.0, 2.0])
y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ w_true))).astype(int)
post = inference.distributed_ep(probmodels.logistic_regression, X, y, num_shards=4, progress=False)
# the shards ran at the same time, one thread per device: the fixed point is still full-data EP's
full = inference.ep(probmodels.logistic_regression, X, y, progress=False)
full_sd = np.sqrt(np.diag(full.approximation["cov"]))
nuts = inference.mcmc(probmodels.logistic_regression, X, y, num_samples=1000, num_warmup=500, num_chains=2,
                      progress=False)
sd = nuts.samples["w"].reshape(-1, d).std(0)
print(json.dumps({
    "devices": post.diagnostics["devices"], "num_devices": jax.device_count(),
    "converged": post.diagnostics["converged"], "nuts_converged": nuts.diagnostics["converged"],
    "max_full_ep_diff_sd": float(np.max(np.abs(post.approximation["mean"] - full.approximation["mean"]) / full_sd)),
    "max_mean_diff_sd": float(np.max(np.abs(post.mean("w") - nuts.mean("w")) / sd)),
    "max_sd_ratio_dev": float(np.max(np.abs(post.samples["w"].reshape(-1, d).std(0) / sd - 1))),
}))
