"""Persistence across the model library: every engine x model family it supports saves with
``post.save`` and reloads with ``inference.load`` losslessly (groups, values, dtypes, dims, attrs;
recovered discrete latents stay integers), and damaged files give a clear error naming the path.

Tiny data and tiny runs: the point is the file format, not the fit (test_posterior.py covers the
regression models and the Posterior contract itself). The spike-and-slab probit pairs fit another
file's problem with its options instead: their programs are compiled there anyway.
"""

import json

import numpy as np
import pytest
import xarray as xr

import inference
import probmodels
from probmodels.kernels import RBF

# spike-and-slab probit: the data, options and seed of test_spikeslab_engines.py's probit fits (its
# `posteriors` fixture, run by default), so the three pairs below run programs that file compiles
# (the run's compilation cache serves them; ~8 s of compilation on their own data)
from test_spikeslab_engines import FAST as SS_OPTIONS, XP, YP

rng = np.random.default_rng(5)
X_CLS = rng.uniform(-1, 1, (12, 1))
Y_CLS = (X_CLS[:, 0] > 0).astype(int)
X_SS = rng.normal(size=(15, 3))
Y_SS = X_SS @ np.array([1.5, 0.0, 0.0]) + 0.3 * rng.normal(size=15)
X_MIX = np.r_[rng.normal(-3, 0.5, (8, 1)), rng.normal(3, 0.5, (8, 1))]
OBS_HMM = np.r_[rng.normal(0, 0.3, 8), rng.normal(3, 0.3, 8)]
COUNTS = rng.poisson(1.0, size=(6, 8)) + 1

MCMC = dict(num_samples=50, num_warmup=50, num_chains=2, progress=False)
VI = dict(steps=300, num_samples=50, progress=False)
FAST = dict(num_samples=50)

# model family -> (model, args, model kwargs, {engine label: (engine, options)})
CASES = {
    "gp_classifier": (probmodels.gp_classifier, (X_CLS, Y_CLS), {"kernel": RBF(0.5)}, {
        "mcmc": ("mcmc", MCMC), "vi": ("vi", VI), "laplace": ("laplace", FAST),
        "ep": ("ep", dict(FAST, progress=False))}),
    "bayes_machine": (probmodels.bayes_machine, (X_CLS, Y_CLS), {"kernel": RBF(0.5)}, {
        "mcmc": ("mcmc", MCMC), "ep": ("ep", dict(FAST, progress=False))}),
    "spike_and_slab_regression": (probmodels.spike_and_slab_regression, (X_SS, Y_SS), {"p_incl": 0.3}, {
        "mcmc": ("mcmc", MCMC), "vi": ("vi", VI), "ep": ("ep", dict(FAST, progress=False))}),
    "spike_and_slab_probit": (probmodels.spike_and_slab_probit, (XP, YP), {"p_incl": 0.3}, {
        engine: (engine, dict(options, seed=1, progress=False)) for engine, options in SS_OPTIONS.items()}),
    "hmm": (probmodels.hmm, (OBS_HMM,), {"num_states": 2}, {
        "mcmc": ("mcmc", MCMC), "vi": ("vi", VI), "laplace": ("laplace", FAST)}),
    "gaussian_mixture": (probmodels.gaussian_mixture, (X_MIX,), {"num_components": 2}, {
        "mcmc": ("mcmc", MCMC), "vi": ("vi", VI), "cavi": ("vi", dict(FAST, method="cavi")),
        "laplace": ("laplace", FAST)}),
    "dp_mixture": (probmodels.dp_mixture, (X_MIX,), {"truncation": 3}, {
        "mcmc": ("mcmc", MCMC), "cavi": ("vi", dict(FAST, method="cavi"))}),  # Laplace: refused (test_mixtures.py)
    "lda": (probmodels.lda, (COUNTS,), {"num_topics": 2}, {
        "mcmc": ("mcmc", MCMC), "batch": ("vi", dict(FAST, method="batch", steps=20)),
        "online": ("vi", dict(FAST, method="online")),
        "stochastic": ("vi", dict(FAST, method="stochastic", steps=50, batch_size=3))}),
}
# Every pair runs under `make test-all`; `make test` runs one pair per engine code path that
# writes its own groups (NUTS with recovered discrete states: hmm; the spike-and-slab Gibbs
# sampler, VI and EP; elliptical slice and Bayes-machine EP; Laplace; EP; CAVI with recovered
# labels; LDA VB (batch and online share one writer); LDA's sampler). The spike-and-slab EP pair is
# the one the damaged-file tests save anyway; hmm's damaged files come from its NUTS fit.
DEFAULT = {("gp_classifier", "laplace"), ("gp_classifier", "ep"), ("bayes_machine", "mcmc"),
           ("bayes_machine", "ep"), ("spike_and_slab_probit", "ep"), ("spike_and_slab_probit", "mcmc"),
           ("spike_and_slab_probit", "vi"), ("hmm", "mcmc"), ("gaussian_mixture", "cavi"),
           ("lda", "batch"), ("lda", "mcmc")}
XFAIL: dict = {}  # pair -> reason; none left


def _marks(pair):
    marks = [] if pair in DEFAULT else [pytest.mark.slow]
    if pair in XFAIL:
        marks.append(pytest.mark.xfail(strict=True, reason=XFAIL[pair]))
    return marks


PAIRS = [pytest.param(family, label, marks=_marks((family, label)), id=f"{family}-{label}")
         for family, (_, _, _, engines) in CASES.items() for label in engines]
DISCRETE = {"z", "states"}  # recovered / sampled discrete latents: integer dtype on disk and back


@pytest.fixture(scope="module")
def fits():
    """Fits on demand, once per (family, engine) for the whole module."""
    cache = {}

    def get(family, label):
        if (family, label) not in cache:
            model, args, kw, engines = CASES[family]
            engine, options = engines[label]
            with _quiet():
                cache[family, label] = getattr(inference, engine)(model, *args, **kw, **options)
        return cache[family, label]

    return get


class _quiet:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")  # tiny runs: convergence warnings are expected here

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


VOLATILE_ATTRS = {"created_at"}  # ArviZ stamps each group with the time it was built


def _group_attrs(dt):
    """Group attrs without the time stamp; values as plain lists (netCDF stores a list attr, e.g.
    ArviZ's ``sample_dims``, as an array, an empty one as float64)."""
    norm = lambda v: v if isinstance(v, str) else np.asarray(v).tolist()  # noqa: E731
    return {name: {k: norm(v) for k, v in dt[name].attrs.items() if k not in VOLATILE_ATTRS}
            for name in dt.children}


def _assert_lossless(post, back):
    assert back.engine == post.engine and back.seed == post.seed
    assert back.log_evidence == post.log_evidence and back.evidence_method == post.evidence_method
    for field in ("samples", "log_likelihood", "observed_data", "sample_stats", "approximation", "predictions"):
        a, b = getattr(post, field), getattr(back, field)
        assert set(a) == set(b), field
        for k in a:
            assert a[k].dtype == b[k].dtype, (field, k, a[k].dtype, b[k].dtype)
            assert a[k].shape == b[k].shape, (field, k)
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{field}[{k}]")
    assert back.dims == post.dims
    # diagnostics go through JSON: equal up to tuples becoming lists
    assert json.loads(json.dumps(inference.posterior._jsonable(post.diagnostics))) == back.diagnostics


@pytest.mark.parametrize("family, label", PAIRS)
def test_save_load_round_trip_is_lossless(fits, family, label, tmp_path):
    post = fits(family, label)
    path = tmp_path / "fit.nc"
    post.save(path)
    back = inference.load(path)
    _assert_lossless(post, back)
    for name in DISCRETE & set(post.samples):
        assert np.issubdtype(back.samples[name].dtype, np.integer), name
    # the file itself: the same groups, variables, dims and attrs as the in-memory DataTree, and
    # saving the loaded Posterior again writes the same file content
    on_disk = xr.open_datatree(path, engine="h5netcdf")
    in_memory = post.to_arviz()
    assert set(on_disk.children) == set(in_memory.children)
    assert dict(on_disk.attrs) == dict(in_memory.attrs)
    assert _group_attrs(on_disk) == _group_attrs(in_memory)
    for group in in_memory.children:
        xr.testing.assert_equal(on_disk[group].to_dataset(), in_memory[group].to_dataset())
        for var, da in in_memory[group].to_dataset().data_vars.items():
            assert on_disk[group][var].dims == da.dims, (group, var)
    back.save(tmp_path / "again.nc")
    again = xr.open_datatree(tmp_path / "again.nc", engine="h5netcdf")
    assert dict(again.attrs) == dict(on_disk.attrs) and _group_attrs(again) == _group_attrs(on_disk)
    for group in on_disk.children:
        xr.testing.assert_identical(again[group].to_dataset().drop_attrs(), on_disk[group].to_dataset().drop_attrs())
    on_disk.close()
    again.close()


# --------------------------------------------------------------------------- damaged files

DAMAGE_FAMILIES = ["hmm", "gaussian_mixture", "spike_and_slab_probit"]
DAMAGE_ENGINES = {"hmm": "mcmc", "gaussian_mixture": "cavi", "spike_and_slab_probit": "ep"}  # default pairs: no extra fit


# h5netcdf's File.__del__ on a file it failed to open raises AttributeError ('_writable'),
# reported by pytest as unraisable: noise from the library, not from inference.load
damaged = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module", params=DAMAGE_FAMILIES)
def saved(request, fits, tmp_path_factory):
    family = request.param
    path = tmp_path_factory.mktemp(family) / "fit.nc"
    fits(family, DAMAGE_ENGINES[family]).save(path)
    return path


@damaged
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_files_name_the_path(saved, fraction, tmp_path):
    raw = saved.read_bytes()
    bad = tmp_path / "truncated.nc"
    bad.write_bytes(raw[: int(len(raw) * fraction)])
    with pytest.raises(ValueError, match=r"path: .*truncated\.nc.* not a readable posterior"):
        inference.load(bad)


@damaged
@pytest.mark.parametrize("size", [1, 100, 10_000])
def test_random_bytes_name_the_path(size, tmp_path):
    bad = tmp_path / "random.nc"
    bad.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match=r"path: .*random\.nc.* not a readable posterior"):
        inference.load(bad)


@damaged
def test_corrupted_header_names_the_path(saved, tmp_path):
    raw = bytearray(saved.read_bytes())
    raw[100:116] = b"\xff" * 16  # inside the HDF5 superblock / root object header
    bad = tmp_path / "header.nc"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"path: .*header\.nc"):
        inference.load(bad)


@damaged
def test_missing_path_and_directory_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path: .*nowhere\.nc"):
        inference.load(tmp_path / "nowhere.nc")
    with pytest.raises((ValueError, OSError), match=r"path: .*"):
        inference.load(tmp_path)


def test_netcdf_not_from_posterior_save_is_named(tmp_path):
    path = tmp_path / "other.nc"
    xr.Dataset({"a": ("x", np.arange(3))}).to_netcdf(path, engine="h5netcdf")
    with pytest.raises(ValueError, match=r"path: .*other\.nc.*not written by Posterior\.save"):
        inference.load(path)


def test_corrupted_values_are_detected(fits, tmp_path):
    post = fits("hmm", "mcmc")  # a default pair's fit (also saved by the damaged-file tests)
    path = tmp_path / "fit.nc"
    post.save(path)
    raw = bytearray(path.read_bytes())
    # flip bytes inside the largest stored array (its bytes are found verbatim in the file)
    target = post.samples["trans"].tobytes()
    start = bytes(raw).find(target)
    assert start > 0
    raw[start + 8:start + 24] = b"\x7f" * 16
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="path"):
        inference.load(path)
