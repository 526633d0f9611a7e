"""Run by test_sharding.py in a child process with 4 simulated CPU devices: Laplace and VI on
logistic regression (n = 2000, d = 5, float64) with the data sharded over the devices against the
same engines on one device; the placement and the partitioned program. Prints one JSON line."""

import json
import os
import warnings

if "device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4 " + os.environ.get("XLA_FLAGS", "")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer.util import log_density  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
import probmodels  # noqa: E402
from inference import sharding  # noqa: E402

warnings.simplefilter("ignore")  # VI's "no plateau" warning: the step count is fixed on purpose
n, d = 2000, 5
rng = np.random.default_rng(0)
X = rng.normal(size=(n, d))
y = (rng.uniform(size=n) < 1 / (1 + np.exp(-X @ np.array([1.0, -0.5, 0.25, 0.0, 2.0])))).astype(int)
model = probmodels.logistic_regression
out = {"num_devices": jax.device_count()}


def diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


# Laplace: MAP, covariance, log evidence; on all 4 devices and on a 2-device mesh.
one = inference.laplace(model, X, y, num_samples=200, progress=False)
for label, shard in (("laplace4", True), ("laplace2", sharding.make_mesh(jax.devices()[:2]))):
    post = inference.laplace(model, X, y, num_samples=200, progress=False, shard_data=shard)
    out[label] = {"loc": diff(post.approximation["loc"], one.approximation["loc"]),
                  "cov": diff(post.approximation["cov"], one.approximation["cov"]),
                  "log_evidence": abs(post.log_evidence - one.log_evidence),
                  "samples": diff(post.samples["w"], one.samples["w"]),
                  "num_shards": post.diagnostics["num_shards"], "devices": post.diagnostics["devices"]}

# VI: fixed seed and step count (steps = 3 chunks, no early stop checks differ), both guides.
for guide in ("normal", "mvn"):
    opts = dict(guide=guide, steps=600, check_every=200, learning_rate=0.05, num_samples=200, seed=3,
                progress=False)
    a = inference.vi(model, X, y, **opts)
    b = inference.vi(model, X, y, shard_data=True, **opts)
    out[f"vi_{guide}"] = {
        "params": max(diff(a.approximation[k], b.approximation[k]) for k in a.approximation),
        "elbo_trace": diff(a.diagnostics["elbo_trace"], b.diagnostics["elbo_trace"]),
        "elbo": abs(a.log_evidence - b.log_evidence), "samples": diff(a.samples["w"], b.samples["w"]),
        "steps": [a.diagnostics["steps"], b.diagnostics["steps"]],
        "num_shards": b.diagnostics["num_shards"], "moved": diff(a.approximation["param_auto_loc"], 0.0)}

# Placement: rows split over the 4 devices, the keyword option untouched.
args, kwargs = sharding.shard_model_args((X, y), {"prior_scale": 2.0}, n)
out["placement"] = {
    "X_devices": len(args[0].sharding.device_set), "y_devices": len(args[1].sharding.device_set),
    "X_shards": sorted({tuple(s.data.shape) for s in args[0].addressable_shards}),
    "X_equal": bool(np.array_equal(np.asarray(args[0]), X)), "kwargs": kwargs}

# The compiled gradient of the log density over sharded data is partitioned: each device reduces its
# rows and an all-reduce sums them.
data = sharding.place_data(sharding.split_data((X, y), {}, n), sharding.make_mesh())
grad = jax.jit(jax.grad(lambda w, dd: log_density(model, *sharding.merge_data((X, y), {}, dd),
                                                  {"w": w})[0]))
hlo = grad.lower(jnp.zeros(d), data).compile().as_text()
out["all_reduce"] = "all-reduce" in hlo

# Rows not divisible by the devices: a ValueError naming the argument.
errors = {}
for label, call in (
    ("rows3", lambda: inference.laplace(model, X, y, progress=False,
                                        shard_data=sharding.make_mesh(jax.devices()[:3]))),
    ("rows_odd", lambda: inference.vi(model, X[:-1], y[:-1], steps=20, check_every=10, progress=False,
                                      shard_data=True)),
):
    try:
        call()
        errors[label] = None
    except ValueError as exc:
        errors[label] = str(exc)
out["errors"] = errors
print(json.dumps(out))
