"""Every docstring example in the verified public modules runs and gives the output it shows
(so the examples in the documentation cannot rot). Family modules join when their tests do.

The examples that fit a library model with an engine (`FITS`) compile that engine's programs for
that model: 2-7 s a docstring on one worker of `make test`, ~125 s of the ~180 s all examples took
(2026-11-27), where the same fits are tested in tests/probmodels and tests/inference. By default
their code is checked without running it, as the notebooks' is (it parses; every call of a
function of `inference` or `probmodels` names a function that exists and arguments it takes);
they run, output compared, with the slow checks (``make test-all``). Every other example runs by
default."""

import ast
import doctest
import importlib

import pytest
from _api_calls import check_calls

MODULES = [
    "inference.fit", "inference.convergence", "inference.laplace", "inference.latent", "inference.latent_vi", "inference.linalg", "inference.mcmc", "inference.posterior",
    "inference.vi", "inference.ep.driver", "inference.ep.evidence", "inference.ep.gaussian",
    "inference.ep.graph", "inference.ep.problem", "inference.ep.recognise", "inference.ep.site_types", "inference.ep.sites",
    "inference.ep.state", "inference.ep.update", "inference.sbc",
    "probmodels.conjugate", "probmodels.datasets", "probmodels.regression", "probmodels.simulate",
    "inference.distributed_ep", "inference.sharding", "inference.compiled", "inference.exported", "inference.cache", "inference.lda_vb", "probmodels.lda", "probmodels.text",
    "inference.hmm", "inference.hmm.baum_welch", "inference.hmm.forward_backward", "inference.hmm.parallel",
    "inference.hmm.sampling", "inference.hmm.viterbi", "probmodels.hmm",
    "inference.spikeslab", "probmodels.spike_slab", "probmodels.kernels", "probmodels.gp",
    "probmodels.selection", "inference.ess", "inference.ep.bayes_machine", "inference.ep.bm_posterior",
    "inference.ep.sparse_bm", "probmodels.mixtures", "inference.mixture_cavi", "inference.mixture_diagnostics",
    "inference.exact", "inference.exact.bp", "inference.exact.driver", "inference.exact.eliminate",
    "inference.exact.factors", "inference.exact.plan", "probmodels.bayes_net", "probmodels.graphs",
    "probmodels.experts", "inference.moe_em", "probmodels.factor", "probmodels.ibp", "inference.ibp_vi",
    "inference.ibp_gibbs", "inference.random_draws", "inference.hyper.ss_fit", "inference.spikeslab.gibbs_hyper",
    "inference.kalman", "inference.kalman.driver", "inference.kalman.em", "inference.kalman.linalg",
    "inference.kalman.parallel", "inference.kalman.sampling", "inference.kalman.sequential",
    "inference.kalman.univariate", "probmodels.lds",
]


# Docstrings (doctest names) whose examples fit a library model with an engine, and those in
# the same module that repeat such a fit (they reuse its programs when run after it).
FITS = {
    "probmodels.experts", "probmodels.experts.mixture_of_experts",
    "probmodels.factor", "probmodels.factor.ppca",
    "probmodels.gp", "probmodels.gp.bayes_machine", "probmodels.gp.gp_classifier", "probmodels.gp.gp_regression",
    "probmodels.hmm.hmm", "probmodels.ibp", "probmodels.ibp.ibp_linear_gaussian", "probmodels.lda", "probmodels.lda.lda",
    "probmodels.mixtures", "probmodels.mixtures.dp_mixture", "probmodels.mixtures.gaussian_mixture",
    "probmodels.regression.logistic_regression", "probmodels.regression.ordinal_regression",
    "probmodels.regression.robust_regression", "probmodels.selection", "probmodels.spike_slab.spike_and_slab_probit",
    "probmodels.spike_slab.spike_and_slab_regression",
    "inference.distributed_ep.distributed_ep", "inference.ep.bayes_machine", "inference.ep.bm_posterior",
    "inference.ep.sparse_bm", "inference.ess", "inference.moe_em", "inference.moe_em.em", "inference.hyper.ss_fit",
    "inference.sbc.sbc", "inference.spikeslab.gibbs_hyper",
}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _docstrings(name):
    """The docstrings of module ``name`` that hold examples (doctest's `DocTest`s)."""
    return [t for t in doctest.DocTestFinder().find(importlib.import_module(name)) if t.examples]


def _run(tests, name):
    runner = doctest.DocTestRunner(optionflags=FLAGS, verbose=False)
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    """Every example runs and shows its output, but those in `FITS`, whose code is checked here
    without running it (they run below, with the slow checks)."""
    monkeypatch.chdir(tmp_path)
    tests = _docstrings(name)
    _run([t for t in tests if t.name not in FITS], name)
    for t in tests:
        if t.name in FITS:
            tree = ast.parse("".join(e.source for e in t.examples))
            assert check_calls(tree, t.name, scope=t.globs), f"{t.name}: no call of inference or probmodels"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({m for m in MODULES if any(f == m or f.startswith(m + ".") for f in FITS)}))
def test_docstring_fits_run(name, tmp_path, monkeypatch):
    """The examples in `FITS` run and show their output."""
    monkeypatch.chdir(tmp_path)
    _run([t for t in _docstrings(name) if t.name in FITS], name)


def test_fits_names_docstrings_with_examples():
    """`FITS` names no docstring that is gone or has no example (a stale name would hide nothing,
    but would read as if it were checked)."""
    found = {t.name for m in MODULES for t in _docstrings(m)}
    assert FITS <= found, sorted(FITS - found)


def test_every_public_name_has_an_example():
    """Issue: docstrings on every public function with a runnable example (run above)."""
    import inspect

    import inference
    import probmodels

    missing = []
    for pkg in (inference, probmodels):
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            if not inspect.ismodule(obj) and ">>>" not in (inspect.getdoc(obj) or ""):
                missing.append(f"{pkg.__name__}.{name}")
    assert not missing, f"public names without a docstring example: {missing}"
