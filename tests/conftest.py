"""Test configuration: float64 on (exact checks need it), one XLA thread per op (fair, stable
CPU timings on 2-core machines), XLA's LLVM backend at optimisation level 1 (a shorter
compilation, see below), no progress bars, and a persistent compilation cache that lives for one
run only (`_run_cache`)."""

import os


def _run_cache():
    """A fresh, empty compilation-cache directory for this run, shared by its xdist workers (they
    inherit the environment) and the subprocesses its tests start, deleted at exit. A program
    two tests (or both workers) compile is compiled once: -17% wall on the three longest files
    (517 -> 428 s, 2026-11-26). Every run still compiles what it tests, independent of what
    earlier runs left on disk. ``INFERENCE_COMPILATION_CACHE`` set by the caller wins (``0``:
    no cache; runs on 2026-11-22 saw XLA:CPU segfault in the cache's (de)serialisation, see
    the crash handling below)."""
    import atexit
    import shutil
    import tempfile

    if "INFERENCE_COMPILATION_CACHE" in os.environ or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    path = tempfile.mkdtemp(prefix="probmodels-test-xla-")
    os.environ["INFERENCE_COMPILATION_CACHE"] = path
    os.environ["INFERENCE_COMPILATION_CACHE_MAX_MB"] = "0"  # never prune: the directory goes at exit
    atexit.register(shutil.rmtree, path, ignore_errors=True)


# XLA's LLVM backend at optimisation level 1 (users get 3): under jax 0.12.1 level 3 compiles a NUTS
# program in 1.9-2.3 s, level 1 in 1.2 s with code as fast; `make test` 26m30s -> 22m23s. Results
# differ by round-off only (an MCMC chain then follows another path). Measurements and the flags
# that did not help: benchmarks/RESULTS.md, "jax 0.12.1 and XLA's optimisation level". `make demo`
# runs at XLA's defaults, as users do; an XLA_FLAGS set by the caller replaces this one.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=1")
os.environ.setdefault("INFERENCE_PROGRESS", "0")
# The run's cache serves executables, but no traced program is kept beside them
# (`inference.exported`, tested on its own in tests/inference/test_exported.py): a read-back program
# compiles more slowly than the one just traced (NUTS 2.5 -> 3.0 s) and helps only a later process.
# Five of the longest files, 2 workers (2026-12-06): 328 s with programs kept, 265 s without.
os.environ.setdefault("INFERENCE_EXPORTED", "0")
_run_cache()
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # as `make test` does
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _unverified():
    import pathlib

    listing = pathlib.Path(__file__).with_name("unverified.txt")
    if not listing.exists():
        return []
    lines = [ln.strip() for ln in listing.read_text().splitlines()]
    return [ln.removeprefix("tests/") for ln in lines if ln and not ln.startswith("#")]


# Work in progress whose tests have not been seen passing yet (see tests/unverified.txt).
collect_ignore = _unverified()

# `make test` runs two workers with `--dist worksteal`: tests are split between them and an idle
# worker takes pending tests from the other, so no worker is left alone with a long file at the
# end, as with `--dist loadfile` (one file per worker). Measured on 2026-11-26 (1370 tests): the
# per-test times sum to 4236 s and the run took 35m46s, within 1 % of that sum over two workers.
# ~75 % of it is XLA compilation (one program per model, engine, dtype, shapes and static options),
# so tests that fit the same thing share a fit or at least its shapes and options. The longest files
# (by --durations: the defaults matrix ~430 s, the docstrings ~350 s, ...) go first, so their tests
# spread over both workers from the start.
LONG_FIRST = (
    "inference/test_defaults_matrix.py", "notebooks/test_notebooks.py", "docs/test_docstrings.py", "inference/test_stress.py",
    "probmodels/test_mixtures.py", "probmodels/test_hmm.py", "inference/test_persistence.py",
    "inference/test_spikeslab_engines.py", "inference/test_sharding.py", "inference/test_distributed_ep.py",
)


# Switching float64 off and on in one process (``jax.enable_x64``, the float32 tests) can leave JAX's
# caches holding float32 copies of NumPy constants that a later float64 trace reuses: programs with
# mixed f32/f64 operands (measured with jax 0.12; `inference.compiled` copies the data it closes
# over for that reason). So the float32 tests run after the float64 ones (see the sort below), and
# when a worker goes from a float32 test to a float64 one, every kept program and JAX cache is
# dropped, so the tests after it start clean. Clearing after every float32 test instead threw away
# the compiled programs (eager operations included) that the next float32 test would reuse.
_FLOAT32_TESTS = ("float32", "single_precision", "x64=False", "x64-False", "f32")


def _is_float32(item) -> bool:
    return any(word in item.nodeid for word in _FLOAT32_TESTS)


def pytest_runtest_teardown(item, nextitem):
    if _is_float32(item) and (nextitem is None or not _is_float32(nextitem)):
        from inference import compiled

        compiled.clear()
        jax.clear_caches()


def pytest_collection_modifyitems(config, items):
    import pathlib

    root = pathlib.Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONG_FIRST)}

    def key(item):
        try:
            rel = pathlib.Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(rel, len(rank))

    # float64 tests first, then float32 ones (each group longest files first); stable: the order
    # inside each file, and of the other files, is kept
    items.sort(key=lambda item: (_is_float32(item), key(item)))


# A worker killed by a signal (XLA:CPU's compiler segfaulted once in a full run on 2026-11-26,
# inside `backend_compile_and_load` of an ordinary jit, persistent cache off; earlier runs saw
# it in the cache's (de)serialisation; never reproducible test by test) loses its current test.
# That test runs once more, on the fresh worker xdist starts; a second crash fails it. The
# rerun is reported ("R", and a line naming the test), never hidden.
_CRASHED: set = set()


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_handlecrashitem(crashitem, report, sched):
    if crashitem in _CRASHED:
        return
    _CRASHED.add(crashitem)
    sched.mark_test_pending(crashitem)
    report.outcome = "rerun"
    report.longrepr = f"{report.longrepr}: running it once more on a fresh worker"


def pytest_report_teststatus(report):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None
