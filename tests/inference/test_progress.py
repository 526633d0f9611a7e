"""inference.progress: a bar appears only once work has lasted a second, and costs short fits
nothing; a bar never changes an answer."""

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import tqdm.auto
from jax.scipy.stats import norm

import inference
import probmodels
from inference import progress


@pytest.fixture
def bars(monkeypatch):
    """Every tqdm bar created (engines import ``tqdm.auto.tqdm`` when they make one)."""
    made = []

    class Recorder:
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("desc"))

        def update(self, n=1):
            pass

        def set_postfix(self, **kwargs):
            pass

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    return made


def probit(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(X @ w)), obs=y)


RNG = np.random.default_rng(0)
X = RNG.normal(size=(200, 3))
Y = (X @ np.array([1.0, -1.0, 0.5]) + RNG.normal(size=200) > 0).astype(float)


def test_bar_appears_only_after_the_delay(bars, monkeypatch):
    bar = progress.Bar(True, 10, "short")
    bar.update(10)
    bar.close()
    assert bars == [] and not bar.shown
    monkeypatch.setattr(progress, "DELAY", 0.0)
    bar = progress.Bar(True, 10, "long")
    bar.update(3)
    assert bar.shown and bars == ["long"]
    bar.close()
    assert progress.Bar(False, 10, "off").update(5) is None and bars == ["long"]


def test_next_chunk_sizes_by_the_measured_rate():
    assert progress.next_chunk(0, 0.0, 200) == 1  # first: measure
    assert progress.next_chunk(1, 1e-4, 199) == 199  # fast: the rest in one call
    assert progress.next_chunk(10, 1.0, 100) == 2  # 0.1 s per unit: a quarter second's worth


def test_short_ep_fit_creates_no_bar_and_same_answer(bars, monkeypatch):
    """Finding 6 of issue 21: EP (probit, n = 200, ~0.03 s) made a tqdm bar on every call (and ran
    its sweeps in 6 chunks); a short fit now creates none. With a bar forced (DELAY 0) the sweeps,
    and so the answer, are those of the fit without one. The first ``progress=True`` call may
    compile (and so show a bar): with the persistent cache on, the quiet fit's programs can come
    from `inference.exported`'s store, and the bar's host callback is never exported."""
    quiet = inference.ep(probit, X, Y, num_samples=50, progress=False)
    inference.ep(probit, X, Y, num_samples=50, progress=True)  # compiled
    bars.clear()
    post = inference.ep(probit, X, Y, num_samples=50, progress=True)
    assert bars == []
    monkeypatch.setattr(progress, "DELAY", 0.0)
    shown = inference.ep(probit, X, Y, num_samples=50, progress=True)
    assert bars == ["EP"]
    for p in (post, shown):
        np.testing.assert_array_equal(p.approximation["mean"], quiet.approximation["mean"])
        assert p.diagnostics["iterations"] == quiet.diagnostics["iterations"]


@pytest.mark.filterwarnings("ignore:VI did not reach")
def test_short_nuts_and_vi_fits_create_no_bar(bars):
    """Once compiled (a first call compiles for seconds, and may show a bar), short fits show none."""
    def fits():
        inference.mcmc(probit, X, Y, num_warmup=50, num_samples=50, num_chains=1, progress=True)
        inference.vi(probit, X, Y, steps=200, check_every=100, num_samples=20, progress=True)

    fits()
    bars.clear()
    fits()
    assert bars == []


def test_laplace_progress_is_honoured(bars, monkeypatch):
    """``progress`` was accepted and discarded by Laplace (finding 7): it now drives a bar over the
    fit's stages, shown only on a fit longer than the delay."""
    inference.laplace(probit, X, Y, num_samples=20, progress=False)  # compiled (seconds) here
    inference.laplace(probit, X, Y, num_samples=20, progress=True)
    assert bars == []
    monkeypatch.setattr(progress, "DELAY", 0.0)
    inference.laplace(probit, X, Y, num_samples=20, progress=False)
    assert bars == []
    inference.laplace(probit, X, Y, num_samples=20, progress=True)
    assert bars == ["laplace"]


def _gibbs_data():
    rng = np.random.default_rng(1)
    Xs = rng.normal(size=(30, 5))
    return Xs, Xs[:, 0] * 2.0 + 0.3 * rng.normal(size=30)


@pytest.mark.parametrize("case", ["gibbs", "ess"])
def test_dedicated_samplers_give_the_same_draws_with_a_bar(case, bars, monkeypatch):
    """The spike-and-slab Gibbs sampler and elliptical slice sampling ran their chains in blocks
    with other keys when a bar was on, so ``progress`` changed the draws (and cost a compilation
    per block size); now one program, a host callback advancing the bar."""
    if case == "gibbs":
        model, args, kw = probmodels.spike_and_slab_regression, _gibbs_data(), {"noise_scale": 0.3}
    else:
        Xb = np.random.default_rng(2).uniform(-1, 1, (12, 2))
        model, args, kw = probmodels.bayes_machine, (Xb, Xb[:, 0] > 0), {}
    opts = dict(num_warmup=20, num_samples=20, num_chains=2, seed=3)
    quiet = inference.mcmc(model, *args, progress=False, **opts, **kw)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    shown = inference.mcmc(model, *args, progress=True, **opts, **kw)
    assert len(bars) == 1
    for name in quiet.samples:
        np.testing.assert_array_equal(shown.samples[name], quiet.samples[name])
