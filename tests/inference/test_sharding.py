"""Sharded VI and Laplace (`inference.sharding`): on 4 simulated devices (a child process, so this
process keeps its one device) they equal the single-device run to 1e-5, the data really are split
by rows and the compiled likelihood is partitioned; bad input raises before any compilation."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.sharding import Mesh

import inference
import probmodels
from inference import sharding

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(2)
X = rng.normal(size=(200, 3))
Y = (X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=200) > 0).astype(int)
TOL = 1e-5


@pytest.fixture(scope="module")
def child():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4 --xla_cpu_multi_thread_eigen=false")
    out = subprocess.run([sys.executable, os.path.join(HERE, "_sharding_check.py")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_child_has_four_devices(child):
    assert child["num_devices"] == 4


@pytest.mark.parametrize("label, shards", [("laplace4", 4), ("laplace2", 2)])
def test_sharded_laplace_equals_one_device(child, label, shards):
    res = child[label]
    assert res["num_shards"] == shards and res["devices"] == [f"cpu:{k}" for k in range(shards)]
    for key in ("loc", "cov", "log_evidence", "samples"):
        assert res[key] < TOL, (key, res[key])


@pytest.mark.parametrize("guide", ["normal", "mvn"])
def test_sharded_vi_equals_one_device(child, guide):
    res = child[f"vi_{guide}"]
    assert res["num_shards"] == 4 and res["steps"] == [600, 600]
    assert res["moved"] > 0.5  # the fit went somewhere: the comparison is not of two initial states
    for key in ("params", "elbo_trace", "elbo", "samples"):
        assert res[key] < TOL, (key, res[key])


def test_data_are_split_by_rows_and_the_likelihood_is_partitioned(child):
    p = child["placement"]
    assert p["X_devices"] == 4 and p["y_devices"] == 4 and p["X_shards"] == [[500, 5]] and p["X_equal"]
    assert p["kwargs"] == {"prior_scale": 2.0}
    assert child["all_reduce"]


@pytest.mark.parametrize("label, rows, devices", [("rows3", 2000, 3), ("rows_odd", 1999, 4)])
def test_rows_not_divisible_name_the_argument(child, label, rows, devices):
    msg = child["errors"][label]
    assert msg is not None and "'X'" in msg and f"{rows} rows" in msg and f"{devices} devices" in msg


def test_one_device_mesh_equals_unsharded():
    a = inference.laplace(probmodels.logistic_regression, X, Y, num_samples=50, progress=False)
    b = inference.laplace(probmodels.logistic_regression, X, Y, num_samples=50, progress=False, shard_data=True)
    np.testing.assert_allclose(b.approximation["loc"], a.approximation["loc"], atol=TOL)
    np.testing.assert_allclose(b.approximation["cov"], a.approximation["cov"], atol=TOL)
    assert abs(a.log_evidence - b.log_evidence) < TOL
    assert b.diagnostics["num_shards"] == 1 and "num_shards" not in a.diagnostics


def test_make_mesh_and_split():
    mesh = sharding.make_mesh()
    assert mesh.axis_names == ("data",) and sharding.num_shards(mesh) == jax.device_count()
    data = sharding.split_data((X, Y, 3.0), {"w": np.ones(200), "v": np.ones(3)}, 200)
    assert sorted(data.args) == [0, 1] and sorted(data.kwargs) == ["w"]
    args, kwargs = sharding.merge_data((X, Y, 3.0), {"w": 0, "v": 1}, data._replace(args={1: "y"}))
    assert args[0] is X and args[1] == "y" and args[2] == 3.0
    assert kwargs["w"] is data.kwargs["w"] and kwargs["v"] == 1
    with pytest.raises(ValueError, match="devices is empty"):
        sharding.make_mesh([])


@pytest.mark.parametrize("engine", [inference.laplace, inference.vi])
@pytest.mark.parametrize("bad, error, match", [
    ("yes", TypeError, "shard_data must be False, True or a jax.sharding.Mesh"),
    (4, TypeError, "shard_data must be"),
    (Mesh(np.array(jax.devices()), ("batch",)), ValueError, "axis named 'data'"),
])
def test_bad_shard_data(engine, bad, error, match):
    with pytest.raises(error, match=match):
        engine(probmodels.logistic_regression, X, Y, shard_data=bad, progress=False)


def _eager_labels(X, y=None):
    """Logistic regression that maps labels {-1, +1} to {0, 1} on concrete data only."""
    if y is not None and not isinstance(y, jax.core.Tracer):
        y = (np.asarray(y) > 0).astype(np.int32)
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


@pytest.mark.parametrize("engine", [inference.laplace, inference.vi])
def test_eager_data_conversion_is_caught(engine):
    # sharded (traced) data would skip the conversion and fit other data; the engines refuse instead
    # of returning a wrong answer
    with pytest.raises(ValueError, match="converts its data eagerly"):
        engine(_eager_labels, X, 2 * Y - 1, shard_data=True, progress=False)


def test_traced_label_map_is_accepted():
    # probmodels maps {-1, +1} labels under tracing too: sharded and plain fits agree
    a = inference.laplace(probmodels.logistic_regression, X, Y, num_samples=20, progress=False)
    b = inference.laplace(probmodels.logistic_regression, X, 2 * Y - 1, num_samples=20, progress=False,
                          shard_data=True)
    np.testing.assert_allclose(b.approximation["loc"], a.approximation["loc"], atol=TOL)


def test_vi_shard_data_needs_svi():
    with pytest.raises(ValueError, match="method='svi' only"):
        inference.vi(probmodels.logistic_regression, X, Y, method="cavi", shard_data=True, progress=False)
