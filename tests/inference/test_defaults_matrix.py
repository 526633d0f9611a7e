"""The defaults matrix (issue 21): the library models below x every engine each supports x
{float32, float64} x 3 seeds, with the engines' DEFAULT options, on simulated data whose answer is
known. Not here yet: ``ppca``, ``lds``, ``mixture_of_experts``, ``ibp_linear_gaussian`` (their
float32 default fits are checked in tests/probmodels, against the simulation's truth).

References, never hand-picked numbers:

- ``linear_regression``: the closed form of `probmodels.conjugate` (posterior mean and sd);
  unknown noise (the model's default) for MCMC, VI and Laplace, known noise for EP (README).
- ``logistic_regression``, ``probit_regression``, ``robust_regression``, ``ordinal_regression``
  (2 features): the exact posterior mean and sd by quadrature on a 2-D grid.
- ``spike_and_slab_regression`` (6 features): exact enumeration of the 2^6 inclusion patterns
  (`inference.spikeslab.exact`); ``spike_and_slab_probit`` (3 features): enumeration with the
  weights integrated by Gauss-Hermite quadrature.
- ``gp_regression`` (n = 60, a smooth signal with noise 0.01, lengthscale 2): the closed form of
  `probmodels.conjugate` for the model's own prior covariance in the working dtype (its Gram
  matrix and jitter are the model's: a float64 reference is 3 posterior sds from the float32 model).
- ``gp_classifier``, ``bayes_machine`` (n = 30): predictive probabilities at 15 test inputs against
  a long float64 run (4 x 25000 draws; NUTS, and elliptical slice + Gibbs for the Bayes machine)
  kept with its data in ``tests/fixtures/*_reference.npz``, made by
  ``tests/fixtures/make_gp_reference.py`` (seeded; provenance inside each file).
- ``hmm``, ``gaussian_mixture``, ``dp_mixture``: the simulation's truth (well-separated states and
  components), up to label permutation, per chain; two states or components fitted onto each
  other, or a spurious extra component, fail.
- ``lda``: the simulation's topics; mean total-variation distance of the matched topics.

Tolerances (table ``TOL``): Monte Carlo engines are held to ``K_MC`` exact posterior sds on the
mean and ``SD_RATIO_MC`` on the sd; approximate engines (mean-field VI, Laplace, EP) to 1.5 x the
largest error measured in float64 over the three seeds, and at least 4 Monte Carlo standard errors
of their 1000 independent draws (0.13 sd on a mean, 0.09 on an sd ratio, 0.06 on a probability).
The SAME tolerance applies in float32: float32 with default options must give an answer within
its float64 tolerance (issue 21). Truth-based cells use tolerances stated with their posterior sd.

Every cell also checks: no NaN or inf in any floating draw, draws in the working dtype, and
``diagnostics["converged"]`` a bool that is never True when the answer is out of tolerance. The
three seeds of a cell run inside one test, so they reuse its compiled programs (the data are
arguments of the compiled code; the seed is not a static option).

`make test` runs the float32 cells (JAX's default, what users get; the expensive ones at seed 0);
`make test-all` (the ``slow`` marker) adds every float64 cell and the other seeds.
"""

from __future__ import annotations

import functools
import itertools
import pathlib

import jax
import numpy as np
import pytest
from scipy.special import expit, log_ndtr, ndtr

import inference
import probmodels
from probmodels import simulate

SEEDS = (0, 1, 2)
DTYPES = ("float32", "float64")
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"

# Monte Carlo engines: |mean - exact| < K_MC exact sds. At the default 4 x 1000 draws the Monte
# Carlo standard error of a mean is sd / sqrt(ESS) <= sd / 20 when ESS >= 400 (what `converged`
# asks), so K_MC = 0.25 is 5 Monte Carlo standard errors; measured: <= 0.05 in every cell.
K_MC = 0.25
SD_RATIO_MC = 0.15  # |sd / exact sd - 1|; its Monte Carlo error is ~ 1 / sqrt(2 ESS) <= 0.035
MC = {"mean_err_sd": K_MC, "sd_ratio_err": SD_RATIO_MC}


# --------------------------------------------------------------------------- references


def _grid_posterior(X, y, loglik, prior_scale=1.0):
    """Exact mean and sd of a 2-weight GLM posterior (prior N(0, prior_scale^2 I)) by quadrature:
    a coarse grid finds the bulk, a 201 x 201 grid over mean +- 9 sd integrates it."""

    def moments(lo, hi, m):
        W = np.stack(np.meshgrid(np.linspace(lo[0], hi[0], m), np.linspace(lo[1], hi[1], m), indexing="ij"), -1)
        W = W.reshape(-1, 2)
        logp = loglik(X @ W.T, y[:, None]).sum(0) - 0.5 * np.sum(W**2, 1) / prior_scale**2
        p = np.exp(logp - logp.max())
        p /= p.sum()
        mean = p @ W
        return mean, np.sqrt(p @ (W - mean) ** 2)

    mean, sd = moments(np.full(2, -6.0), np.full(2, 6.0), 121)
    return moments(mean - 9 * sd, mean + 9 * sd, 201)


def _logistic_loglik(eta, y):
    return -y * np.logaddexp(0, -eta) - (1 - y) * np.logaddexp(0, eta)


def _probit_loglik(eta, y):
    return y * log_ndtr(eta) + (1 - y) * log_ndtr(-eta)


def test_grid_posterior_matches_the_conjugate_closed_form():
    """The quadrature reference is itself checked: a Gaussian likelihood through it gives the
    closed form of `probmodels.conjugate` to 1e-6."""
    X, y = np.random.default_rng(0).normal(size=(40, 2)), np.random.default_rng(1).normal(size=40)
    mean, sd = _grid_posterior(X, y, lambda eta, y: -0.5 * (y - eta) ** 2)
    exact = probmodels.conjugate.linear_regression_posterior(X, y, noise_scale=1.0)
    np.testing.assert_allclose(mean, exact.mean, atol=1e-6)
    np.testing.assert_allclose(sd, np.sqrt(np.diag(exact.cov)), rtol=1e-6)


# --------------------------------------------------------------------------- data, cached per seed
# (the engines and both dtypes of a case share one data set and reference per seed)


@functools.lru_cache(maxsize=None)
def _linear(seed, known_noise):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(100, 3))
    y = X @ np.array([1.0, -0.5, 0.3]) + 0.8 * rng.normal(size=100)
    kwargs = {"noise_scale": 0.8} if known_noise else {}
    ref = probmodels.conjugate.linear_regression_posterior(X, y, **kwargs)
    return (X, y), kwargs, (ref.mean, np.sqrt(np.diag(ref.cov)))


@functools.lru_cache(maxsize=None)
def _glm(seed, link):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(100, 2))
    eta = X @ np.array([1.5, -1.0])
    y = (rng.random(100) < (expit(eta) if link == "logistic" else ndtr(eta))).astype(np.int64)
    return (X, y), {}, _grid_posterior(X, y, _logistic_loglik if link == "logistic" else _probit_loglik)


@functools.lru_cache(maxsize=None)
def _robust(seed):
    """``robust_regression``'s own generative noise: Student-t with 3 degrees of freedom, scale 1."""
    from scipy.stats import t as student_t

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(100, 2))
    y = X @ np.array([1.5, -1.0]) + rng.standard_t(3.0, size=100)
    return (X, y), {}, _grid_posterior(X, y, lambda eta, y: student_t.logpdf(y - eta, 3.0))


@functools.lru_cache(maxsize=None)
def _ordinal(seed):
    """``ordinal_regression``'s own generative process: 3 categories at its default cut points
    (-0.5, 0.5), unit probit noise."""
    from probmodels.regression import default_cutpoints

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(100, 2))
    cuts = np.asarray(default_cutpoints(3), np.float64)
    y = np.digitize(X @ np.array([1.5, -1.0]) + rng.normal(size=100), cuts)
    edges = np.concatenate([[-np.inf], cuts, [np.inf]])

    def loglik(eta, y):  # log(Phi(b_y+1 - eta) - Phi(b_y - eta)), stable in either tail
        hi, lo = edges[y + 1] - eta, edges[y] - eta
        with np.errstate(divide="ignore"):  # -inf: a grid point of zero likelihood (each branch in its own tail)
            upper = log_ndtr(hi) + np.log1p(-np.exp(log_ndtr(lo) - log_ndtr(hi)))
            lower = log_ndtr(-lo) + np.log1p(-np.exp(log_ndtr(-hi) - log_ndtr(-lo)))
        return np.where(lo > 0, lower, upper)

    return (X, y), {"num_categories": 3}, _grid_posterior(X, y, loglik)


@functools.lru_cache(maxsize=None)
def _ss_regression(seed):
    from inference.spikeslab.exact import exact_posterior

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(50, 6))
    y = X @ np.array([1.5, 0.0, -1.0, 0.0, 0.0, 0.0]) + rng.normal(size=50)
    ex = exact_posterior(probmodels.spike_and_slab_regression, X, y)
    return (X, y), {}, (np.asarray(ex.inclusion, np.float64), np.asarray(ex.w_mean, np.float64))


@functools.lru_cache(maxsize=None)
def _ss_probit(seed):
    from inference.spikeslab.exact import enumerate_probit
    from probmodels.spike_slab import default_p_incl

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 3))
    y = (rng.random(60) < ndtr(X @ np.array([2.0, 0.0, -1.5]))).astype(np.int64)
    ex = enumerate_probit(X, 2.0 * y - 1.0, p_incl=np.full(3, default_p_incl(3)), slab_var=np.ones(3))
    return (X, y), {}, (np.asarray(ex.inclusion, np.float64), None)


@functools.lru_cache(maxsize=None)
def _gp(name, seed):
    from probmodels.kernels import RBF

    with np.load(FIXTURES / f"{name}_reference.npz") as f:
        ref = {k: f[k] for k in f.files}
    return (ref["X"], ref["y"]), {"kernel": RBF(float(ref["lengthscale"]))}, ref


@functools.lru_cache(maxsize=None)
def _gpr(seed, x64):
    """A smooth signal observed with little noise (0.01) at 60 inputs, RBF(2): the posterior is
    tight (sd ~0.01) and the Gram matrix near-singular, as when emulating a smooth simulator."""
    from probmodels.conjugate import gp_regression_posterior
    from probmodels.kernels import RBF

    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(60, 1)), 0)
    y = np.sin(2 * X[:, 0]) + 0.01 * rng.normal(size=60)
    kwargs = {"kernel": RBF(2.0), "noise": 0.01}
    with jax.enable_x64(x64):  # the model's Gram matrix and jitter in the working dtype
        ref = gp_regression_posterior(X, y, **kwargs)
    return (X, y), kwargs, (np.asarray(ref.mean, np.float64), np.sqrt(np.diag(np.asarray(ref.cov, np.float64))))


HMM_LOCS, HMM_SCALES = (-1.0, 2.0), (0.5, 0.5)


@functools.lru_cache(maxsize=None)
def _hmm(seed):
    sim = simulate.gaussian_hmm(150, seed=seed, locs=HMM_LOCS, scales=HMM_SCALES)
    return (sim.obs,), {"num_states": 2}, sim


@functools.lru_cache(maxsize=None)
def _mixture(seed, dp):
    sim = simulate.gaussian_mixture_data(150, seed=seed)  # 3 components, means (-3, 0), (3, 0), (0, 4)
    return (sim.X,), {"truncation": 6} if dp else {"num_components": 3}, sim


@functools.lru_cache(maxsize=None)
def _lda(seed, tiny):
    if tiny:  # NUTS: a tiny corpus (README: "NUTS (small corpora)")
        corpus = simulate.lda_corpus(40, vocab_size=20, num_topics=2, doc_length=50, seed=seed)
    else:
        corpus = simulate.lda_corpus(150, vocab_size=40, num_topics=3, doc_length=80, seed=seed)
    return (corpus.counts,), {"num_topics": corpus.topics.shape[0]}, corpus


# --------------------------------------------------------------------------- error measures
# measure(post, reference) -> {name: error}; an error is within tolerance when <= TOL[...][name]


def _draws(post, site):
    return np.asarray(post.samples[site], np.float64)


def _gaussian_measure(post, ref, site="w"):
    mean, sd = ref
    w = _draws(post, site)
    return {"mean_err_sd": float(np.max(np.abs(w.mean(axis=(0, 1)) - mean) / sd)),
            "sd_ratio_err": float(np.max(np.abs(w.std(axis=(0, 1)) / sd - 1)))}


def _ss_measure(post, ref):
    incl, w_mean = ref
    out = {"incl_err": float(np.max(np.abs(_draws(post, "z").mean(axis=(0, 1)) - incl)))}
    if w_mean is not None:
        out["w_mean_err"] = float(np.max(np.abs(_draws(post, "w").mean(axis=(0, 1)) - w_mean)))
    return out


def _gp_measure(post, ref):
    """Largest error of the posterior predictive P(y = 1) at the test inputs (and, for the Bayes
    machine, of E[eps] in reference sds), every engine's draws of f pushed through the same GP
    conditional (`probmodels.gp.latent_predictive`)."""
    from probmodels.gp import latent_predictive
    from probmodels.kernels import RBF

    f = _draws(post, "f").reshape(-1, ref["X"].shape[0])
    mean, var = latent_predictive(f, ref["X"], ref["X_test"], RBF(float(ref["lengthscale"])))
    if "eps_mean" not in ref:  # probit GP classifier
        return {"pred_err": float(np.max(np.abs(ndtr(mean / np.sqrt(1.0 + var)).mean(0) - ref["p_test"])))}
    eps = _draws(post, "eps").reshape(-1, 1)
    p = (eps + (1 - 2 * eps) * ndtr(mean / np.sqrt(var))).mean(0)
    return {"pred_err": float(np.max(np.abs(p - ref["p_test"]))),
            "eps_err_sd": float(abs(eps.mean() - ref["eps_mean"]) / ref["eps_sd"])}


def _hmm_measure(post, sim):
    """Per chain (chains in different labelings must not be averaged into one collapsed mean):
    state means sorted, then their error, the transition matrix's error in that order, and
    whether two states coincide (means less than 1 apart; the truth: 3 apart, sd 0.5)."""
    locs, trans = _draws(post, "locs"), _draws(post, "trans")
    err_loc, err_trans, collapsed = 0.0, 0.0, 0.0
    for c in range(locs.shape[0]):
        m = locs[c].mean(0)
        order = np.argsort(m)
        err_loc = max(err_loc, float(np.max(np.abs(m[order] - sim.locs))))
        err_trans = max(err_trans, float(np.max(np.abs(trans[c].mean(0)[np.ix_(order, order)] - sim.trans))))
        collapsed = max(collapsed, float(np.abs(m[1] - m[0]) < 1.0))
    return {"locs_err": err_loc, "trans_err": err_trans, "collapsed": collapsed}


def _mixture_measure(post, sim):
    """Per chain: the components holding > 5% of the weight, matched to the true ones (the
    permutation with the smallest largest distance); their largest location distance and weight
    error, and the number of components beyond the true 3 (spurious or split ones)."""
    locs, weights = _draws(post, "locs"), _draws(post, "weights")
    k_true = sim.locs.shape[0]
    err_loc, err_w, extra = 0.0, 0.0, 0.0
    for c in range(locs.shape[0]):
        m, w = locs[c].mean(0), weights[c].mean(0)
        keep = np.flatnonzero(w > 0.05)
        extra = max(extra, float(len(keep) - k_true))
        if len(keep) < k_true:  # components merged: nothing to match
            return {"locs_err": np.inf, "weights_err": np.inf, "extra_components": extra}
        dist, perm = min((float(np.max(np.linalg.norm(m[keep][list(p)] - sim.locs, axis=1))), list(p))
                         for p in itertools.permutations(range(len(keep)), k_true))
        err_loc = max(err_loc, dist)
        err_w = max(err_w, float(np.max(np.abs(w[keep][perm] - sim.weights))))
    return {"locs_err": err_loc, "weights_err": err_w, "extra_components": extra}


def _lda_measure(post, corpus):
    """Per chain: mean total-variation distance between the posterior-mean topics and the true
    ones, under the best matching of the topics."""
    topics = _draws(post, "topics")
    err = 0.0
    for c in range(topics.shape[0]):
        est = topics[c].mean(0)
        err = max(err, min(float(np.mean(0.5 * np.abs(est[list(p)] - corpus.topics).sum(1)))
                           for p in itertools.permutations(range(est.shape[0]))))
    return {"topic_tv": err}


# --------------------------------------------------------------------------- the matrix

# case -> (model, data(seed, engine), measure, {engine: tolerances}); EP on linear regression
# needs a known noise (README), NUTS on LDA a tiny corpus.
CASES = {
    "linear_regression": (probmodels.linear_regression, lambda s, e: _linear(s, e == "ep"), _gaussian_measure, {
        "mcmc": MC,
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09},  # f64 max 0.084, 0.050
        "laplace": {"mean_err_sd": 0.13, "sd_ratio_err": 0.10},  # f64 max 0.025, 0.064
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),  # exact (Gaussian); f64 max 0.080, 0.036
    "logistic_regression": (probmodels.logistic_regression, lambda s, e: _glm(s, "logistic"), _gaussian_measure, {
        "mcmc": MC,
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.13},  # f64 max 0.041, 0.083
        "laplace": {"mean_err_sd": 0.23, "sd_ratio_err": 0.09},  # mode != mean; f64 max 0.155, 0.029
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),  # f64 max 0.048, 0.039
    "probit_regression": (probmodels.probit_regression, lambda s, e: _glm(s, "probit"), _gaussian_measure, {
        "mcmc": MC,
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.19},  # f64 max 0.028, 0.125
        "laplace": {"mean_err_sd": 0.33, "sd_ratio_err": 0.09},  # mode != mean; f64 max 0.217, 0.016
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),  # f64 max 0.049, 0.043
    # Student-t likelihood (not log-concave: EP meets negative site precisions); every f64 error is
    # below the Monte Carlo floor (max: EP 0.039, 0.027; Laplace 0.037, 0.046; VI 0.057, 0.025)
    "robust_regression": (probmodels.robust_regression, lambda s, e: _robust(s), _gaussian_measure, {
        "mcmc": MC,
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09},
        "laplace": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09},
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),
    "ordinal_regression": (probmodels.ordinal_regression, lambda s, e: _ordinal(s), _gaussian_measure, {
        "mcmc": MC,
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.17},  # f64 max 0.046, 0.112
        "laplace": {"mean_err_sd": 0.22, "sd_ratio_err": 0.09},  # mode != mean; f64 max 0.146, 0.019
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),  # f64 max 0.049, 0.034
    # Gibbs (weights integrated out): incl. probability and E[w] within 0.05 (exact: 4000 draws;
    # measured <= 0.004); VI / EP: the 0.06 Monte Carlo floor of 1000 draws (f64 max 0.011, 0.008)
    "spike_and_slab_regression": (probmodels.spike_and_slab_regression, lambda s, e: _ss_regression(s), _ss_measure, {
        "mcmc": {"incl_err": 0.05, "w_mean_err": 0.05},
        "vi": {"incl_err": 0.06, "w_mean_err": 0.06},
        "ep": {"incl_err": 0.06, "w_mean_err": 0.06}}),
    "spike_and_slab_probit": (probmodels.spike_and_slab_probit, lambda s, e: _ss_probit(s), _ss_measure, {
        "mcmc": {"incl_err": 0.05},  # f64 max 0.009
        # mean-field Bernoulli-Gaussian VI with the probit's auxiliary variables under-includes
        # the null feature (0.17-0.24 against exact 0.39-0.53): f64 max 0.296
        "vi": {"incl_err": 0.45},
        "ep": {"incl_err": 0.06}}),  # f64 max 0.017
    # f at the 60 inputs against the closed form (largest error over the inputs); EP and Laplace
    # are exact for a Gaussian likelihood: the Monte Carlo floor (f64 max 0.105, 0.067 and 0.072,
    # 0.042; EP f32 0.122, 0.063: 3.0 sds off before its mean was refined, session 57); so is VI's
    # full-rank optimum by natural-gradient steps (`inference.latent_vi`, session 66: f64 max 0.105,
    # 0.067, f32 0.103, 0.065; whitened mean-field SVI before it: means 4.5-5.2 sds off at the cap)
    "gp_regression": (probmodels.gp_regression, lambda s, e: _gpr(s, bool(jax.config.jax_enable_x64)),
                      functools.partial(_gaussian_measure, site="f"), {
        "mcmc": MC,  # f64 max 0.040, 0.045
        "vi": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09},
        "laplace": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09},
        "ep": {"mean_err_sd": 0.13, "sd_ratio_err": 0.09}}),
    # predictive P(y = 1) at 15 test inputs; the reference's own Monte Carlo error is < 3e-4
    "gp_classifier": (probmodels.gp_classifier, lambda s, e: _gp("gp_classifier", s), _gp_measure, {
        # NUTS on f whitened (`inference.whiten`): bulk ESS 4300-6200, f64 max 0.009, f32 0.014
        # (on f as written: ESS 42-82, max 0.028, converged=False, 35 s a fit)
        "mcmc": {"pred_err": 0.03},
        # the Monte Carlo floor; VI's full-rank optimum (`inference.latent_vi`): f64 max 0.015, f32
        # 0.013 (mean-field SVI on f whitened: f64 max 0.030; in f's own coordinates it stopped at
        # ELBO -90 against log Z -18, pred_err 0.61)
        "vi": {"pred_err": 0.06},
        "laplace": {"pred_err": 0.05},  # f64 max 0.025
        "ep": {"pred_err": 0.04}}),  # f64 max 0.015
    "bayes_machine": (probmodels.bayes_machine, lambda s, e: _gp("bayes_machine", s), _gp_measure, {
        # elliptical slice + Gibbs at defaults: f64 max 0.034 and 0.08 sd, ESS as NUTS's above
        "mcmc": {"pred_err": 0.08, "eps_err_sd": K_MC},
        "ep": {"pred_err": 0.06, "eps_err_sd": 0.5}}),  # f64 max 0.040, 0.34
    # truth-based: posterior sd of a state mean ~ 0.5 / sqrt(75) = 0.06, of a transition
    # probability <= 0.045; tolerances of 5 and ~3.5 posterior sds (f64 max 0.126, 0.057)
    "hmm": (probmodels.hmm, lambda s, e: _hmm(s), _hmm_measure,
            {e: {"locs_err": 0.3, "trans_err": 0.15, "collapsed": 0.0} for e in ("mcmc", "vi", "laplace")}),
    # posterior sd of the smallest component's mean (30 points, variance ~0.8) ~ 0.16 per
    # coordinate, of a weight ~ 0.035: tolerances ~ 3 sds (f64 max 0.358, 0.070 for the finite mixture)
    "gaussian_mixture": (probmodels.gaussian_mixture, lambda s, e: _mixture(s, False), _mixture_measure,
                         {e: {"locs_err": 0.6, "weights_err": 0.1, "extra_components": 0.0}
                          for e in ("mcmc", "vi", "laplace")}),
    # Laplace is not offered for the DP mixture (refused up front: test_mixtures.py)
    "dp_mixture": (probmodels.dp_mixture, lambda s, e: _mixture(s, True), _mixture_measure,
                   {e: {"locs_err": 0.6, "weights_err": 0.1, "extra_components": 0.0}
                    for e in ("mcmc", "vi")}),
    # f64 max: VI (online VB, the default; 12000 words) 0.012; NUTS (2 topics, 20 words, 40
    # documents, 2000 words) 0.027; the data alone put the topics ~0.015 / ~0.03 from the truth
    # NUTS is not offered for LDA (README: with the default sparse Dirichlet priors it diverges,
    # 190-300 divergent transitions here, and says converged=False; topics on a tiny corpus were
    # still within 0.033 of the truth)
    "lda": (probmodels.lda, lambda s, e: _lda(s, e == "mcmc"), _lda_measure, {"vi": {"topic_tv": 0.05}}),
}

# Cells whose three seeds took more than ~15 s on one worker of `make test` (measured 2026-11-25:
# GP classifier NUTS 32-45 s before its latent was whitened (now ~4 s; VI ~13 s, the seeds after
# the first ~0.2 s), DP mixture VI ~30 s, Gaussian mixture NUTS ~27 s, ...; DP mixture NUTS
# ~90 s a seed): by default they run seed 0, and `make test-all` (the `slow` marker) seeds 1 and 2.
EXPENSIVE = {("dp_mixture", "mcmc"), ("gp_regression", "mcmc"), ("dp_mixture", "vi"), ("gaussian_mixture", "mcmc"),
             ("gaussian_mixture", "vi"), ("gaussian_mixture", "laplace"), ("gp_classifier", "laplace"), ("hmm", "mcmc"), ("hmm", "vi"),
             ("hmm", "laplace"), ("lda", "vi"), ("linear_regression", "vi"), ("spike_and_slab_probit", "mcmc"),
             ("spike_and_slab_regression", "mcmc")}
# Known defects, kept visible (strict: the cell fails the suite once it starts passing), by cell id.
KNOWN = {
    # (gp_regression-vi, float32 and float64, were here from session 57 to 65: whitened mean-field
    # SVI ended 4.5-5.2 sds off at the step cap; since session 66 VI takes `inference.latent_vi`)
    "dp_mixture-mcmc-float64-seeds12": "NUTS at defaults keeps a spurious occupied component at seed 1 in float64 "
                                       "(location error 1.5; reported converged=False)",
    # b8580c6 (2026-11-27) said these two recovered the truth once chains started at their own
    # declared starts; on 2026-11-28 they fail with the same numbers at b8580c6, at 093fd01 and
    # at HEAD (the starts are finite, inside their supports, potential ~585 and finite gradient)
    "dp_mixture-mcmc-float32": "NUTS at defaults in float32, seed 0: an extra occupied component "
                               "(location error 2.59, weights error 0.16; reported converged=False)",
    "dp_mixture-mcmc-float32-seeds12": "NUTS at defaults in float32, seed 1: an extra occupied component "
                                       "(location error 2.45, weights error 0.13; reported converged=False); "
                                       "seed 2 recovers the truth",
}
# Too long for `make test` even at one seed (DP mixture NUTS: 35-80 s a seed): every seed runs with
# the slow checks, as the other DP-mixture NUTS checks (tests/probmodels/test_mixtures.py) do.
SLOW_ONLY = {("dp_mixture", "mcmc")}


def _cells():
    out = []

    def known(cell_id):
        return [pytest.mark.xfail(strict=True, reason=KNOWN[cell_id])] if cell_id in KNOWN else []

    for name, case in CASES.items():
        for engine in case[3]:
            for dtype in DTYPES:
                # float32 (JAX's default: what users get) runs by default; the same cells in float64,
                # where every other test file checks these engines, run with the slow checks
                default = dtype == "float32" and (name, engine) not in SLOW_ONLY
                marks = [] if default else [pytest.mark.slow]
                cell_id = f"{name}-{engine}-{dtype}"
                if (name, engine) in EXPENSIVE:
                    rest = [pytest.mark.slow] + known(cell_id + "-seeds12")
                    out.append(pytest.param(name, engine, dtype, SEEDS[1:], marks=rest, id=cell_id + "-seeds12"))
                    seeds = SEEDS[:1]
                else:
                    seeds = SEEDS
                out.append(pytest.param(name, engine, dtype, seeds, marks=marks + known(cell_id), id=cell_id))
    return out


CELLS = _cells()


def run_cell(name, engine, dtype, seeds=SEEDS):
    """Fit one cell (default engine options) for each seed; returns a dict per seed with the
    error measures, ``converged``, non-finite sites, floating dtypes, the fit's wall and CPU seconds."""
    import time

    model, data, measure, _ = CASES[name]
    out = []
    with jax.enable_x64(dtype == "float64"):
        for seed in seeds:
            args, kwargs, ref = data(seed, engine)
            t0, c0 = time.perf_counter(), time.process_time()
            post = getattr(inference, engine)(model, *args, seed=seed, **kwargs)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            floating = {k: np.asarray(v) for k, v in post.samples.items() if np.issubdtype(np.asarray(v).dtype, np.floating)}
            out.append(dict(seed=seed, errors=measure(post, ref), converged=post.diagnostics["converged"],
                            nonfinite=sorted(k for k, v in floating.items() if not np.all(np.isfinite(v))),
                            dtypes=sorted({str(v.dtype) for v in floating.values()}), seconds=seconds, cpu=cpu))
    return out


def test_float32_and_float64_fits_in_one_process():
    """A session that switches float64 on and off between fits (a notebook; this matrix on one
    worker) gets each fit in its working dtype, right. At b00aa48 the second fit reused the
    first one's program: "'stablehlo.subtract' op requires compatible types" (f32 and f64)."""
    (X, y), _, (mean, sd) = _linear(0, False)
    for dtype in ("float32", "float64", "float32"):
        with jax.enable_x64(dtype == "float64"):
            post = inference.laplace(probmodels.linear_regression, X, y, seed=0)
        assert post.samples["w"].dtype == dtype
        assert np.max(np.abs(post.mean("w") - mean) / sd) < CASES["linear_regression"][3]["laplace"]["mean_err_sd"]


@pytest.mark.parametrize("name, engine, dtype, seeds", CELLS)
def test_defaults(name, engine, dtype, seeds):
    tol = CASES[name][3][engine]
    problems = []
    for r in run_cell(name, engine, dtype, seeds):
        where = f"{name} {engine} {dtype} seed {r['seed']}"
        errors = ", ".join(f"{k} {v:.3g} (tol {tol[k]:g})" for k, v in r["errors"].items())
        print(f"{where}: {errors}, converged={r['converged']}, {r['seconds']:.1f} s (CPU {r['cpu']:.1f} s)")
        if r["nonfinite"]:
            problems.append(f"{where}: non-finite draws at {r['nonfinite']}")
        if r["dtypes"] != [dtype]:
            problems.append(f"{where}: draws in {r['dtypes']}, expected {dtype}")
        if not isinstance(r["converged"], bool):
            problems.append(f"{where}: converged is {type(r['converged']).__name__}, not bool")
        if any(not v <= tol[k] for k, v in r["errors"].items()):  # NaN counts as out of tolerance
            problems.append(f"{where}: out of tolerance: {errors}"
                            + (" AND marked converged" if r["converged"] else " (converged=False)"))
    assert not problems, "\n".join(problems)
