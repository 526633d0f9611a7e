"""Baum-Welch EM (inference/hmm/baum_welch.py): monotone likelihood, parameter recovery on
simulated Gaussian / Poisson / categorical HMMs, padded batches, identical iterates to hmmlearn
(when installed), no recompiles when tol changes, bad input."""

import numpy as np
import pytest
from scipy import stats

from inference import hmm
from inference.hmm.baum_welch import _fit

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:hmmlearn.*")

TRANS = np.array([[0.95, 0.05], [0.10, 0.90]])


def simulate_states(num_steps, seed, trans=TRANS):
    rng = np.random.default_rng(seed)
    z = np.zeros(num_steps, int)
    for t in range(1, num_steps):
        z[t] = rng.choice(len(trans), p=trans[z[t - 1]])
    return z, rng


def gaussian_data(num_steps=2000, seed=0, locs=(-1.0, 1.5), scales=(0.5, 0.7)):
    z, rng = simulate_states(num_steps, seed)
    return rng.normal(np.asarray(locs)[z], np.asarray(scales)[z]), z


def poisson_data(num_steps=2000, seed=0, rates=(2.0, 9.0)):
    z, rng = simulate_states(num_steps, seed)
    return rng.poisson(np.asarray(rates)[z]), z


def host_fit(fit):
    """The fit's params and likelihood trace as NumPy arrays (same values): indexing and arithmetic
    on the JAX arrays ran eagerly, a small program compiled for each (~20 per test)."""
    return {k: np.asarray(v) for k, v in fit.params.items()}, np.asarray(fit.log_likelihood)


def gaussian_log_emission(x, params):
    """log N(x_t | locs_k, scales_k) (T, K) by SciPy: no eager JAX programs for the reference."""
    return stats.norm.logpdf(np.asarray(x)[:, None], params["locs"], params["scales"])


def se_of_mean(spread, z, k):
    """Standard error of a state's mean with the states known: spread / sqrt(n_k)."""
    return spread / np.sqrt(np.sum(z == k))


def test_gaussian_recovery_and_monotone_likelihood():
    locs, scales = np.array([-1.0, 1.5]), np.array([0.5, 0.7])
    x, z = gaussian_data(locs=locs, scales=scales)
    fit = hmm.baum_welch(x, 2)
    assert fit.converged and fit.num_iters < 200
    params, trace = host_fit(fit)
    assert np.all(np.diff(trace) >= -1e-8 * np.abs(trace[1:]))  # EM never decreases the likelihood
    for k in range(2):  # within 4 standard errors of the truth
        assert abs(params["locs"][k] - locs[k]) < 4 * se_of_mean(scales[k], z, k)
        assert abs(params["scales"][k] - scales[k]) < 4 * scales[k] / np.sqrt(2 * np.sum(z == k))
    counts = np.array([[np.sum((z[:-1] == i) & (z[1:] == j)) for j in range(2)] for i in range(2)])
    se_trans = np.sqrt(TRANS * (1 - TRANS) / counts.sum(1, keepdims=True))
    assert np.all(np.abs(params["trans"] - TRANS) < 4 * se_trans)
    # the last trace entry is the log likelihood at the returned parameters
    le = gaussian_log_emission(x, params)
    ll, _ = hmm.forward_backward(np.log(params["init"]), np.log(params["trans"]), le)
    np.testing.assert_allclose(ll, trace[-1], rtol=1e-12)


def test_poisson_recovery():
    rates = np.array([2.0, 9.0])
    x, z = poisson_data(rates=rates)
    fit = hmm.baum_welch(x, 2, "poisson")
    assert fit.converged
    params, _ = host_fit(fit)
    for k in range(2):
        assert abs(params["rates"][k] - rates[k]) < 4 * se_of_mean(np.sqrt(rates[k]), z, k)


def test_categorical_recovery():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]])
    z, rng = simulate_states(3000, 1)
    x = np.array([rng.choice(3, p=probs[k]) for k in z])
    fit = hmm.baum_welch(x, 2, "categorical", seed=0)
    probs_fit = np.asarray(fit.params["probs"])
    order = np.argsort(probs_fit[:, 0])[::-1]  # label the state with more category 0 first
    est = probs_fit[order]
    n = np.array([np.sum(z == 0), np.sum(z == 1)])[:, None]
    assert np.all(np.abs(est - probs) < 4 * np.sqrt(probs * (1 - probs) / n) + 0.02)


def test_padded_batch_equals_concatenated_likelihood():
    """Three sequences of different lengths: the fitted log likelihood is the sum of the
    per-sequence forward-algorithm log likelihoods at the fitted parameters (each sequence padded
    to T = 2000 with ``lengths``: the program the recovery test compiled, one instead of three)."""
    xs = [gaussian_data(n, seed)[0] for n, seed in ((300, 1), (120, 2), (40, 3))]
    lengths = np.array([len(v) for v in xs])
    batch = np.full((3, 300), np.nan)  # NaN padding is allowed: it is masked out
    for b, v in enumerate(xs):
        batch[b, : len(v)] = v
    fit = hmm.baum_welch(batch, 2, lengths=lengths)
    params, trace = host_fit(fit)
    total = 0.0
    for v in xs:
        le = gaussian_log_emission(np.pad(v, (0, 2000 - len(v))), params)  # padding: ignored
        total += float(hmm.forward_backward(np.log(params["init"]), np.log(params["trans"]), le, lengths=len(v))[0])
    np.testing.assert_allclose(trace[-1], total, rtol=1e-12)
    assert abs(params["locs"][0] + 1.0) < 0.15 and abs(params["locs"][1] - 1.5) < 0.15


@pytest.mark.parametrize("emission", ["gaussian", "poisson", "categorical"])
def test_same_iterates_as_hmmlearn(emission):
    """From the same start, 5 EM iterations give hmmlearn's parameters and likelihoods (1e-8)."""
    hl = pytest.importorskip("hmmlearn.hmm")
    x = {"gaussian": gaussian_data(500)[0], "poisson": poisson_data(500)[0],
         "categorical": poisson_data(500)[0].clip(0, 5)}[emission]
    start = {"init": np.array([0.6, 0.4]), "trans": np.array([[0.8, 0.2], [0.3, 0.7]])}
    if emission == "gaussian":
        start.update(locs=np.array([-0.5, 0.5]), scales=np.array([1.0, 1.5]))
        model = hl.GaussianHMM(2, "diag", covars_prior=0, covars_weight=0, means_prior=0, means_weight=0,
                               min_covar=0, n_iter=5, tol=0, init_params="")
        model.means_, model.covars_ = start["locs"][:, None], (start["scales"] ** 2)[:, None]
    elif emission == "poisson":
        start.update(rates=np.array([3.0, 6.0]))
        model = hl.PoissonHMM(2, n_iter=5, tol=0, init_params="")
        model.lambdas_ = start["rates"][:, None]
    else:
        start.update(probs=np.array([[0.3, 0.2, 0.2, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.2, 0.2, 0.3]]))
        model = hl.CategoricalHMM(2, emissionprob_prior=1.0, n_iter=5, tol=0, init_params="", n_features=6)
        model.emissionprob_ = start["probs"]
    model.startprob_, model.transmat_ = start["init"], start["trans"]
    model.fit(np.asarray(x).reshape(-1, 1))
    fit = hmm.baum_welch(x, 2, emission, init_params=start, max_iter=6, tol=0.0)
    np.testing.assert_allclose(np.asarray(fit.log_likelihood)[:5], list(model.monitor_.history), rtol=1e-10)
    np.testing.assert_allclose(fit.params["trans"], model.transmat_, atol=1e-8)
    np.testing.assert_allclose(fit.params["init"], model.startprob_, atol=1e-8)
    theirs = {"gaussian": lambda: model.means_.ravel(), "poisson": lambda: model.lambdas_.ravel(),
              "categorical": lambda: model.emissionprob_}[emission]()
    mine = {"gaussian": "locs", "poisson": "rates", "categorical": "probs"}[emission]
    np.testing.assert_allclose(fit.params[mine], theirs, atol=1e-8)


def test_single_state_is_the_plain_mle():
    x, _ = gaussian_data(300)
    fit = hmm.baum_welch(x, 1)
    np.testing.assert_allclose(fit.params["locs"], [x.mean()], atol=1e-10)
    np.testing.assert_allclose(fit.params["scales"], [x.std()], atol=1e-10)


def test_changing_tol_does_not_recompile():
    x, _ = gaussian_data()  # the recovery test's shape: its compile is reused
    hmm.baum_welch(x, 2, tol=1e-2)
    before = _fit._cache_size()
    hmm.baum_welch(x, 2, tol=1e-6)
    hmm.baum_welch(x + 1.0, 2, tol=1e-3)
    assert _fit._cache_size() == before


@pytest.mark.parametrize("kwargs,match,error", [
    (dict(num_states=0), "num_states must be >= 1", ValueError),
    (dict(num_states=2.0), "num_states must be an int", TypeError),
    (dict(num_states=True), "num_states must be an int", TypeError),
    (dict(emission="gamma"), "emission must be one of", ValueError),
    (dict(obs=np.array([0.1, np.nan, 0.3])), "obs contains NaN", ValueError),
    (dict(obs=np.array([0.1, np.inf, 0.3])), "obs contains inf", ValueError),
    (dict(obs=np.zeros((2, 3, 4))), r"obs must have shape \(T,\) or \(B, T\)", ValueError),
    (dict(obs=np.array(["a", "b"])), "obs must be numeric", TypeError),
    (dict(obs=np.array([0, 1.5, 2]), emission="categorical"), "obs must hold integers", ValueError),
    (dict(obs=np.array([0, 1.5, 2]), emission="poisson"), "obs must hold integers", ValueError),
    (dict(obs=np.array([0, -1, 2]), emission="poisson"), "obs must be non-negative", ValueError),
    (dict(obs=np.array([0, 3, 2]), emission="categorical", num_categories=3), "num_categories=3", ValueError),
    (dict(max_iter=0), "max_iter must be >= 1", ValueError),
    (dict(tol=-1.0), "tol must be", ValueError),
    (dict(min_scale=0.0), "min_scale must be", ValueError),
    (dict(init_params={"locs": np.zeros(3)}), r"init_params\['locs'\] must have shape", ValueError),
    (dict(init_params={"rates": np.ones(2)}), "unknown key 'rates'", ValueError),
    (dict(init_params={"trans": np.ones((2, 2))}), "must sum to 1", ValueError),
    (dict(lengths=np.array([1, 2])), "lengths must be a scalar", ValueError),
    (dict(obs=np.zeros((2, 5)), lengths=np.array([6, 1])), r"lengths must lie in \[1, T=5\]", ValueError),
])
def test_bad_input(kwargs, match, error):
    args = dict(obs=np.array([0.1, 0.5, -0.3, 1.2]), num_states=2)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        hmm.baum_welch(**args)
