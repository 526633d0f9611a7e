"""Compiled functions kept across calls (inference.compiled, inference.chains): a second fit of
the same model on new data of the same shape neither traces nor compiles, gives the right answer,
and NUTS chains are NumPyro's (same kernel, keys and initialisation)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

import inference
from inference import compiled


def test_split_keeps_arrays_dynamic_and_the_rest_in_the_key():
    a, b = np.ones((3, 2)), np.zeros(3, dtype=np.int32)
    sp = compiled.split((a, "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    assert len(sp.arrays) == 2 and sp.key is not None
    args, kwargs = sp.rebuild([2 * a, b + 1])
    assert args[1] == "gaussian" and kwargs["scale"] == 2.0 and kwargs["mask"] is None
    np.testing.assert_array_equal(args[0], 2 * a)
    np.testing.assert_array_equal(kwargs["y"], b + 1)
    same = compiled.split((5 * a, "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    other_static = compiled.split((a, "poisson"), {"y": b, "scale": 2.0, "mask": None})
    other_shape = compiled.split((np.ones((4, 2)), "gaussian"), {"y": b, "scale": 2.0, "mask": None})
    assert same.key == sp.key
    assert other_static.key != sp.key and other_shape.key != sp.key


def test_call_builds_once_per_structure():
    builds = []

    def model(x, power=1):
        pass

    def build(rebuild):
        builds.append(1)
        return jax.jit(lambda arrays: rebuild(arrays)[0][0].sum() ** rebuild(arrays)[1]["power"])

    compiled.clear()
    assert float(compiled.call("t", model, (np.ones(3),), {"power": 1}, (), build)) == 3.0
    assert float(compiled.call("t", model, (2 * np.ones(3),), {"power": 1}, (), build)) == 6.0
    assert len(builds) == 1
    assert float(compiled.call("t", model, (np.ones(3),), {"power": 2}, (), build)) == 9.0
    assert float(compiled.call("t", model, (np.ones(4),), {"power": 1}, (), build)) == 4.0
    assert len(builds) == 3


def test_a_model_that_needs_concrete_data_falls_back_to_constants():
    def model(x):
        return np.asarray(x).sum()  # NumPy on the input: cannot be traced

    def build(rebuild):
        return jax.jit(lambda arrays: jnp.asarray(model(*rebuild(arrays)[0])))

    compiled.clear()
    assert float(compiled.call("t", model, (np.arange(4.0),), {}, (), build)) == 6.0
    assert float(compiled.call("t", model, (np.arange(5.0)[1:],), {}, (), build)) == 10.0


def _counting_model():
    traced = []

    def model(x, y=None):
        if isinstance(x, jax.core.Tracer):
            traced.append(1)
        w = numpyro.sample("w", dist.Normal(jnp.zeros(x.shape[1]), 1.0).to_event(1))
        numpyro.deterministic("fit", x @ w)
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)

    return model, traced


def test_second_mcmc_fit_on_new_data_does_not_retrace():
    model, traced = _counting_model()
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    w = np.array([1.0, -2.0])
    opts = dict(num_samples=300, num_warmup=300, num_chains=2, seed=3, progress=False)
    inference.mcmc(model, X1, X1 @ w, **opts)
    assert traced, "the data should reach the compiled programs as traced arguments"
    before = len(traced)
    post = inference.mcmc(model, X2, X2 @ w, **opts)
    assert len(traced) == before  # no tracing, so no compilation
    # ... and the answer is the one for the new data: conjugate posterior mean
    prec = np.eye(2) + X2.T @ X2
    exact = np.linalg.solve(prec, X2.T @ (X2 @ w))
    sd = np.sqrt(np.diag(np.linalg.inv(prec)))
    assert np.all(np.abs(post.mean("w") - exact) < 0.15 * sd)  # MC error ~0.04 sd at ESS ~600
    np.testing.assert_allclose(post.samples["fit"], np.einsum("nd,csd->csn", X2, post.samples["w"]),
                               atol=1e-10)
    assert post.log_likelihood["y"].shape == (2, 300, 30)


@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_chains_are_numpyros(chain_method):
    """Same kernel, keys and start: NumPyro's draws, up to float rounding (different compiled
    programs round differently, and the chaotic dynamics amplify it over hundreds of steps, so
    the check uses a short run)."""
    model, _ = _counting_model()
    X = np.random.default_rng(1).normal(size=(20, 2))
    y = X @ np.array([0.5, 1.0])
    post = inference.mcmc(model, X, y, num_samples=10, num_warmup=10, num_chains=2, seed=4,
                          chain_method=chain_method, progress=False)
    raw = MCMC(NUTS(model), num_warmup=10, num_samples=10, num_chains=2, chain_method=chain_method,
               progress_bar=False)
    raw.run(jax.random.PRNGKey(4), X, y)
    np.testing.assert_allclose(post.samples["w"], np.asarray(raw.get_samples(group_by_chain=True)["w"]),
                               atol=1e-6)


def test_progress_bar_does_not_change_the_draws(capsys):
    model, _ = _counting_model()
    X = np.random.default_rng(2).normal(size=(20, 2))
    y = X @ np.array([0.5, 1.0])
    opts = dict(num_samples=50, num_warmup=50, num_chains=1, seed=5)
    quiet = inference.mcmc(model, X, y, progress=False, **opts)
    shown = inference.mcmc(model, X, y, progress=True, **opts)
    np.testing.assert_array_equal(quiet.samples["w"], shown.samples["w"])


def test_a_model_that_converts_only_concrete_data_keeps_its_data_constant():
    """An input check that converts labels but steps aside under tracing would see raw {-1, +1}
    labels when traced: the log-joint comparison catches it and the data stay concrete."""

    def model(X, y=None):
        if y is not None and not isinstance(y, jax.core.Tracer):
            y = (np.asarray(y) > 0).astype(np.int32)
        w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    y = np.where(X @ np.array([2.0, -2.0]) > 0, 1, -1)
    assert not compiled.traceable(model, (X, y), {})
    assert compiled.traceable(model, (X, (y > 0).astype(np.int32)), {})
    post = inference.mcmc(model, X, y, num_samples=200, num_warmup=200, num_chains=1, seed=0, progress=False)
    w = post.mean("w")
    assert w[0] > 0.5 and w[1] < -0.5 and post.diagnostics["max_rhat"] < 1.05


def test_the_traceability_check_program_does_not_depend_on_the_data_values():
    """The check's program takes the data as arguments (the concrete version's jaxpr constants
    included): two data sets of the same shapes lower to the same program text, so the persistent
    cache serves it for new data; the constants it is given are the new data's."""

    def model(X, y=None):
        w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    rng = np.random.default_rng(4)
    texts = []
    for _ in range(2):
        X, y = rng.normal(size=(40, 3)), rng.integers(0, 2, 40)
        fn, consts, arrays = compiled.check_program(model, (X, y), {})
        texts.append(fn.lower(consts, arrays).as_text())
        assert any(np.shape(c) == X.shape and np.allclose(np.asarray(c), X) for c in consts)
    assert texts[0] == texts[1]


def _logistic(X, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _concrete_only(X, y=None):
    if y is not None and not isinstance(y, jax.core.Tracer):
        y = (np.asarray(y) > 0).astype(np.int32)
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def test_the_traceability_verdict_is_kept_on_disk_for_the_same_model_and_data(tmp_path, monkeypatch):
    """The check's verdict is written to the cache directory and read back after the in-memory
    kept functions are gone (a new process): the check does not run again for the same model and
    data, runs for new data values, and a negative verdict is kept too."""
    monkeypatch.setattr(compiled, "_verdict_dir", lambda: str(tmp_path))
    calls = []
    real = compiled.check_program
    monkeypatch.setattr(compiled, "check_program", lambda *a: calls.append(a[0]) or real(*a))
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y01 = (X[:, 0] > 0).astype(np.int64)
    ypm = 2 * y01 - 1
    compiled.clear()
    assert compiled.traceable(_logistic, (X, y01), {}) and len(calls) == 1
    assert compiled.traceable(_concrete_only, (X, y01), {}) and len(calls) == 2
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.startswith(compiled.VERDICT_PREFIX) for f in files)
    compiled.clear()  # as in a new process
    assert compiled.traceable(_logistic, (X, y01), {}) and compiled.traceable(_concrete_only, (X, y01), {})
    assert len(calls) == 2  # both read from disk
    compiled.clear()
    # same structure, other label values: the check runs, and catches the concrete-only conversion
    assert not compiled.traceable(_concrete_only, (X, ypm), {}) and len(calls) == 3
    compiled.clear()
    assert not compiled.traceable(_concrete_only, (X, ypm), {}) and len(calls) == 3  # the "no" is kept too
    # a closure over an array has no stable name: not kept on disk
    Xc = X.copy()
    closure = lambda X, y=None: _logistic(X + 0 * Xc, y)  # noqa: E731
    assert compiled.verdict_path(closure, compiled.split((X, y01), {}).key, [X, y01]) is None
    assert compiled.verdict_path(_logistic, compiled.split((X, y01), {}).key, [X, y01]) is not None
    monkeypatch.setattr(compiled, "_verdict_dir", lambda: None)  # cache off: nothing on disk
    assert compiled.verdict_path(_logistic, compiled.split((X, y01), {}).key, [X, y01]) is None
    compiled.clear()


_VERDICT_SCRIPT = """
import sys, numpy as np, jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[2])
from inference import compiled
from verdict_model import model
compiled._verdict_dir = lambda: sys.argv[1]
calls = []
real = compiled.check_program
compiled.check_program = lambda *a: calls.append(1) or real(*a)
rng = np.random.default_rng(0)
X = rng.normal(size=(30, 2)); y = (X[:, 0] > 0).astype(np.int64)
print(compiled.traceable(model, (X, y), {}), len(calls))
"""

_VERDICT_MODEL = """
import jax.numpy as jnp, numpyro, numpyro.distributions as dist

def model(X, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)
"""


def test_the_traceability_verdict_carries_over_to_a_new_process(tmp_path):
    """The verdict's file name is the same in a fresh interpreter (no object addresses, no
    per-process hashing in the key): the second process reads it instead of checking; editing the
    model's file makes the next process check again."""
    import os
    import subprocess
    import sys

    (tmp_path / "verdict_model.py").write_text(_VERDICT_MODEL)
    cache = tmp_path / "cache"
    cache.mkdir()

    def child():
        env = {**os.environ, "INFERENCE_COMPILATION_CACHE": "0", "PYTHONHASHSEED": "random"}
        out = subprocess.run([sys.executable, "-c", _VERDICT_SCRIPT, str(cache), str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()[-2:]

    assert child() == ["True", "1"]  # checked, verdict written
    assert child() == ["True", "0"]  # read from disk
    (tmp_path / "verdict_model.py").write_text(_VERDICT_MODEL + "\n# edited\n")
    assert child() == ["True", "1"]  # the model's file changed: checked again


def test_a_sparse_matrix_argument_is_keyed_by_its_contents():
    """A SciPy sparse matrix (an LDA corpus) cannot be hashed: it enters the key as a digest of its
    contents, so refits on the same matrix reuse the kept functions and other contents do not."""
    import scipy.sparse

    A = scipy.sparse.random(20, 30, density=0.2, format="csr", random_state=0)
    key = compiled.split((A,), {"num_topics": 3}).key
    assert key is not None
    assert compiled.split((A.copy(),), {"num_topics": 3}).key == key
    B = A.copy()
    B.data[0] += 1.0
    assert compiled.split((B,), {"num_topics": 3}).key != key
    assert compiled.split((A.tocsc(),), {"num_topics": 3}).key != key  # another format: another program
