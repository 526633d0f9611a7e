"""Engine programs kept on disk (`inference.exported`): read back instead of traced, same draws,
and never reused for a model that computes something else."""

import hashlib
import os
import subprocess
import sys

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import inference
from inference import compiled, exported

SCALE = 5.0


@pytest.fixture(autouse=True)
def _programs_kept(monkeypatch):
    """The suite keeps no exported program (tests/conftest.py); this file tests keeping them."""
    monkeypatch.setenv("INFERENCE_EXPORTED", "1")


def _normal_mean(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, SCALE))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    numpyro.sample("y", dist.Normal(mu, 1.0 + tau), obs=y)


def _other_prior(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 4.0))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    numpyro.sample("y", dist.Normal(mu, 1.0 + tau), obs=y)


def _other_support(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, SCALE))
    tau = numpyro.sample("tau", dist.Exponential(2.0))
    numpyro.sample("y", dist.Normal(mu, 1.0 + tau), obs=y)


def test_the_fingerprint_follows_what_the_model_computes_not_the_data_values(monkeypatch):
    """Equal for new data values of the same shape (the program takes them as arguments);
    different for another prior, another distribution, another data shape, and a changed global
    the model reads (as an edit of its file would give)."""
    y = np.array([1.0, 2.0, 0.5])
    compiled.clear()
    base = exported.fingerprint(_normal_mean, (y,), {})
    assert base is not None
    assert exported.fingerprint(_normal_mean, (y + 3.0,), {}) == base
    assert exported.fingerprint(_other_prior, (y,), {}) != base
    assert exported.fingerprint(_other_support, (y,), {}) != base
    assert exported.fingerprint(_normal_mean, (np.ones(4),), {}) != base
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 4.0)
    compiled.clear()  # a new process: nothing kept in memory
    changed = exported.fingerprint(_normal_mean, (y,), {})
    assert changed is not None and changed != base
    compiled.clear()


def _count_exports(monkeypatch, cache=None) -> list:
    """A list that grows by one per `jax.export.export` call; with ``cache``, programs are kept in
    that directory (not the run's own cache, which the suite switches on: tests/conftest.py)."""
    exports = []
    real = jax.export.export
    monkeypatch.setattr(jax.export, "export", lambda *a, **k: exports.append(1) or real(*a, **k))
    if cache is not None:
        monkeypatch.setattr(compiled, "cache_dir", lambda: str(cache))
    return exports


def _plain(fit, monkeypatch):
    """``fit()`` with the persistent cache off (no program kept or read back: traced), the
    in-process programs forgotten before and after."""
    compiled.clear()
    with monkeypatch.context() as m:
        m.setattr(compiled, "cache_dir", lambda: None)
        out = fit()
    compiled.clear()
    return out


def _refits(fit, monkeypatch, cache):
    """``(plain, [(post, exports so far)] * 2)``: ``fit()`` with the cache off, then twice with
    programs kept in ``cache``, each time with the in-process programs forgotten (a new process)."""
    plain = _plain(fit, monkeypatch)
    exports = _count_exports(monkeypatch, cache=cache)
    runs = []
    for _ in range(2):
        compiled.clear()
        runs.append((fit(), len(exports)))
    compiled.clear()
    return plain, runs


def _draws(post):
    return hashlib.sha256(np.asarray(post.samples["mu"]).tobytes() + np.asarray(post.samples["tau"]).tobytes()).hexdigest()


@pytest.mark.filterwarnings("ignore:.*divergent transitions")
def test_a_kept_program_is_read_back_and_gives_the_same_draws(tmp_path, monkeypatch):
    """First fit: exported and written; after the in-memory programs are gone (a new process) it is
    read back, not traced, and the draws are bitwise those of the program traced without the
    cache. A file that does not deserialize is replaced; a program with a progress bar (a host
    callback, which cannot be exported) is run but never kept."""
    from inference import progress

    y = np.array([1.0, 2.0, 0.5, -0.3])
    fit = lambda **kw: inference.mcmc(_normal_mean, y, num_warmup=30, num_samples=20, num_chains=1,  # noqa: E731
                                      seed=3, **{"progress": False, **kw})
    plain = _draws(_plain(fit, monkeypatch))  # traced, not kept
    exports = _count_exports(monkeypatch, cache=tmp_path)
    compiled.clear()
    assert _draws(fit()) == plain and len(exports) == 1
    files = [p for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX)]
    assert len(files) == 1
    compiled.clear()
    assert _draws(fit()) == plain and len(exports) == 1  # read back
    files[0].write_bytes(b"not a program")
    compiled.clear()
    assert _draws(fit()) == plain and len(exports) == 2  # exported again
    assert files[0].read_bytes() != b"not a program"
    compiled.clear()
    from inference import chains

    monkeypatch.setattr(chains, "_SECONDS", {})  # unmeasured: a bar is offered (a run known short gets none)
    updates = []
    real_update = progress.Bar.update
    monkeypatch.setattr(progress.Bar, "update", lambda self, n=1, **kw: updates.append(n) or real_update(self, n, **kw))
    assert _draws(fit(progress=True)) == plain
    assert sum(updates) >= 50  # the bar's callback ran in the program (30 + 20 iterations) ...
    # ... and that program was neither kept nor read: the one file is the program without the bar
    assert len(exports) == 2 and len([p for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX)]) == 1
    compiled.clear()


_SCRIPT = """
import hashlib, importlib, pathlib, sys, numpy as np, jax
sys.dont_write_bytecode = True  # the edit below keeps the file's size: a cached .pyc could hide it
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[2])
import inference
from inference import compiled, exported
exports = []
real = jax.export.export
jax.export.export = lambda *a, **k: exports.append(1) or real(*a, **k)
from program_model import model
fit = lambda: inference.mcmc(model, np.array([1.0, 2.0, 0.5, -0.3]), num_warmup=30, num_samples=20, num_chains=2,
                             chain_method="parallel", seed=3, progress=False)
digest = lambda post: hashlib.sha256(np.asarray(post.samples["mu"]).tobytes()).hexdigest()[:16]
files = lambda: len([p for p in pathlib.Path(directory).iterdir() if p.name.startswith(exported.PREFIX)])
directory = sys.argv[1]
if directory.startswith("plain+"):  # first a fit with the program cache off (nothing kept), then as a new process would
    compiled.cache_dir = lambda: None
    post = fit()
    print("PLAIN", len(exports), digest(post), post.diagnostics["chain_method"])
    compiled.clear()
    directory = directory[len("plain+"):]
compiled.cache_dir = lambda: directory
post = fit()
print(len(exports), digest(post), post.diagnostics["chain_method"], files())
if len(sys.argv) > 3:  # then the model's file edited, reloaded, nothing kept in memory (as a new process)
    source = pathlib.Path(sys.argv[2], "program_model.py")
    source.write_text(source.read_text().replace("5.0", "4.0"))
    model = importlib.reload(sys.modules["program_model"]).model
    compiled.clear()
    post = fit()
    print(len(exports), digest(post), post.diagnostics["chain_method"], files())
"""

_MODEL = """
import numpyro, numpyro.distributions as dist

def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfNormal(2.0))
    numpyro.sample("y", dist.Normal(mu, 1.0 + tau), obs=y)
"""


def test_a_kept_program_carries_over_to_a_new_process(tmp_path):
    """Fresh interpreters (``PYTHONHASHSEED=random``, chains on two devices): the second reads the
    first's program instead of exporting it and gets the draws of a fit without the program cache
    (run in the first interpreter before its program cache was switched on, with nothing kept); an
    edit of the model's file (then in the second interpreter: the file rewritten and reloaded, the
    in-memory programs dropped: a third interpreter cost its start and imports, ~3 s) writes a new program with other
    draws. The interpreters share a compilation cache of their own, as a user's processes do (it
    was off: each compiled anew)."""
    (tmp_path / "program_model.py").write_text(_MODEL)
    cache = tmp_path / "cache"
    cache.mkdir()
    plains = []

    def child(directory, *extra):
        env = {**os.environ, "INFERENCE_COMPILATION_CACHE": str(tmp_path / "xla"), "PYTHONHASHSEED": "random",
               "XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false"}
        out = subprocess.run([sys.executable, "-c", _SCRIPT, directory, str(tmp_path), *extra], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        fits = []  # (exports so far, draws' digest, program files after the fit), per fit with the cache on
        for line in out.stdout.splitlines():
            if line.startswith("PLAIN "):
                plains.append(line.split()[1:])
            elif len(line.split()) == 4 and line.split()[0].isdigit():
                exports, digest, method, files = line.split()
                assert method == "parallel"
                fits.append((int(exports), digest, int(files)))
        return fits

    fits = child("plain+" + str(cache))
    assert len(plains) == 1 and plains[0][0] == "0" and plains[0][2] == "parallel"  # cache off: nothing exported
    plain = plains[0][1]
    assert fits == [(1, plain, 1)]  # exported and written
    fits = child(str(cache), "edit")
    assert len(fits) == 2 and fits[0] == (0, plain, 1)  # read back
    exports, digest, files = fits[1]  # the edited model: exported and written anew, other draws
    assert exports == 1 and digest != plain and files == 2


def test_laplace_programs_are_kept_per_argument_shapes(tmp_path, monkeypatch):
    """Laplace's programs (start, the potential at a point and at many, its derivatives (what
    the damped Newton mode search of a 2-dimensional problem runs on), constraining, the
    pointwise log likelihood) are kept too, each per shapes of its arguments: a new process
    exports none of them again, and the fit is bitwise the one without the cache."""
    y = np.array([1.0, 2.0, 0.5, -0.3, 1.1])
    fit = lambda: inference.laplace(_normal_mean, y, num_samples=50, seed=2)  # noqa: E731
    plain, runs = _refits(fit, monkeypatch, tmp_path)
    assert runs[0][1] == runs[1][1] >= 6  # exported on the first fit only
    for post, _ in runs:
        assert post.log_evidence == plain.log_evidence
        for name in ("mu", "tau"):
            np.testing.assert_array_equal(post.samples[name], plain.samples[name])
        np.testing.assert_array_equal(post.log_likelihood["y"], plain.log_likelihood["y"])
    files = [p for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX)]
    assert len(files) == runs[0][1] and all(p.stat().st_size > 0 for p in files)


def test_a_program_that_cannot_be_exported_is_run_as_it_is_and_not_tried_again(tmp_path, monkeypatch):
    """A host callback cannot be exported: `keep` returns the program itself and leaves an empty
    file, so a later process does not spend a trace on trying again."""
    seen = []
    fn = jax.jit(lambda x: (jax.debug.callback(lambda v: seen.append(float(v)), x.sum()), 2 * x)[1])
    file = str(tmp_path / (exported.PREFIX + "callback"))
    exports = _count_exports(monkeypatch)
    x = np.ones(3)
    assert exported.keep(fn, file, (x,)) is fn and len(exports) == 1
    assert os.path.getsize(file) == 0
    assert exported.keep(fn, file, (x,)) is fn and len(exports) == 1  # not tried again
    np.testing.assert_array_equal(fn(x), 2 * x)


@pytest.mark.filterwarnings("ignore:VI did not reach")
def test_vi_draws_program_is_kept_and_gives_the_same_fit(tmp_path, monkeypatch):
    """VI keeps its draws' program and the pointwise log likelihood on disk (its ELBO steps carry
    optimizer NamedTuples, which export cannot serialise, so they are not asked for): a new process
    exports nothing again and the fit is bitwise the one without the cache."""
    y = np.array([1.0, 2.0, 0.5, -0.3, 1.1])
    # 50 draws of the same 5 values as the Laplace test: its log-likelihood programs serve this fit
    fit = lambda: inference.vi(_normal_mean, y, steps=300, check_every=100, num_samples=50, seed=4,  # noqa: E731
                               progress=False)
    plain, runs = _refits(fit, monkeypatch, tmp_path)
    assert [n for _, n in runs] == [2, 2]  # draws and log likelihood, exported on the first fit only
    for post, _ in runs:
        for name in ("mu", "tau"):
            np.testing.assert_array_equal(post.samples[name], plain.samples[name])
        np.testing.assert_array_equal(post.sample_stats["log_q"], plain.sample_stats["log_q"])
    assert all(p.stat().st_size > 0 for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX))


def test_a_kept_program_called_with_other_shapes_gets_its_own_program(tmp_path, monkeypatch):
    """The same kept function called with other argument shapes (the log likelihood of 50 draws,
    then of 30: engines differ in their numbers of draws) gets its own exported program, as
    ``jax.jit`` would trace again. Regression: one exported program per structure raised a shape
    mismatch on the second call (found by `make demo`)."""
    from inference import _model

    y = np.array([1.0, 2.0, 0.5, -0.3])
    rng = np.random.default_rng(0)
    draws = {n: {"mu": rng.normal(size=n), "tau": rng.gamma(2.0, size=n)} for n in (50, 30)}
    compiled.clear()
    plain = {n: _model.pointwise_log_likelihood(_normal_mean, d, (y,), {})["y"] for n, d in draws.items()}
    exports = _count_exports(monkeypatch, cache=tmp_path)
    compiled.clear()
    for n, d in draws.items():
        np.testing.assert_array_equal(_model.pointwise_log_likelihood(_normal_mean, d, (y,), {})["y"], plain[n])
    assert len(exports) == 2
    compiled.clear()


def _probit(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(probs=jax.scipy.stats.norm.cdf(X @ w)), obs=y)


def test_ep_programs_are_kept_and_give_the_same_fit(tmp_path, monkeypatch):
    """EP's programs are kept on disk through flat arrays (`exported.flat`: its problem and state
    are pytree classes): start, sweeps, evidence, the Gaussian of the latents, and the log joint
    (``lp``) and pointwise log likelihood of its draws. A new process exports none of them again,
    and the fit is bitwise the one without the cache."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = (X @ np.array([1.5, -1.0]) + rng.normal(size=40) > 0).astype(int)
    fit = lambda: inference.ep(_probit, X, y, num_samples=30, seed=3, progress=False)  # noqa: E731
    plain, runs = _refits(fit, monkeypatch, tmp_path)
    assert [n for _, n in runs] == [6, 6]  # exported on the first fit only
    for post, _ in runs:
        assert post.log_evidence == plain.log_evidence
        assert post.diagnostics["iterations"] == plain.diagnostics["iterations"]
        for key in ("mean", "cov", "site_tau", "site_nu"):
            np.testing.assert_array_equal(post.approximation[key], plain.approximation[key])
        np.testing.assert_array_equal(post.sample_stats["lp"], plain.sample_stats["lp"])
        np.testing.assert_array_equal(post.log_likelihood["y"], plain.log_likelihood["y"])
    files = [p for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX)]
    assert len(files) == 6 and all(p.stat().st_size > 0 for p in files)


def test_bayes_machine_ep_program_is_kept_and_gives_the_same_fit(tmp_path, monkeypatch):
    """The Bayes machine's EP loop (`inference.ep.bayes_machine.run`, through flat arrays) is kept
    on disk with the log joint and log likelihood of its draws: a new process exports none of them
    again, and the fit is bitwise the one without the cache. Shapes, labels' dtype and options are
    test_persistence.py's Bayes-machine EP fit's (12 x 1 inputs, 0/1 labels, 50 draws): the kept
    programs are the ones that fit compiles."""
    import probmodels
    from probmodels.kernels import RBF

    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, size=(12, 1))
    y = (np.abs(X[:, 0]) >= 0.5).astype(int)
    y[:2] = 1 - y[:2]
    fit = lambda: inference.ep(probmodels.bayes_machine, X, y, kernel=RBF(0.5), num_samples=50,  # noqa: E731
                               progress=False)
    plain, runs = _refits(fit, monkeypatch, tmp_path)
    assert [n for _, n in runs] == [3, 3]  # EP loop, log joint, log likelihood: on the first fit only
    for post, _ in runs:
        assert post.log_evidence == plain.log_evidence
        for key in ("mean", "cov", "eps_a", "eps_b", "site_tau"):
            np.testing.assert_array_equal(post.approximation[key], plain.approximation[key])
        np.testing.assert_array_equal(post.sample_stats["lp"], plain.sample_stats["lp"])
    files = [p for p in tmp_path.iterdir() if p.name.startswith(exported.PREFIX)]
    assert len(files) == 3 and all(p.stat().st_size > 0 for p in files)


def test_ep_programs_are_shared_by_models_with_the_same_problem_structure(tmp_path, monkeypatch):
    """EP's programs are named by the structure of the problem they solve, not by the model: a GP
    classifier refitted with another kernel width (another model structure: the width is static)
    exports only its own log joint and log likelihood, not EP's 4 programs again. Regression: when
    they were named by the model, a grid over widths traced and exported them at every width.
    Shapes and options are test_persistence.py's GP-classifier EP fit's (12 x 1 inputs, 0/1 labels,
    50 draws; its width first): that fit compiles the programs of the first width."""
    import probmodels
    from probmodels.kernels import RBF

    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 1))
    y = (X[:, 0] > 0).astype(int)
    compiled.clear()
    exports = _count_exports(monkeypatch, cache=tmp_path)
    counts = []
    for width in (0.5, 1.0):
        inference.ep(probmodels.gp_classifier, X, y, kernel=RBF(width), num_samples=50, progress=False)
        counts.append(len(exports))
    assert counts == [6, 8]
    compiled.clear()
