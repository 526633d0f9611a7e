"""Mixture posterior summaries: brute force for co-clustering and occupancy, known permutations
for label switching, SciPy for the predictive density, warnings for truncation and poor Laplace
fits, and the DataTree dims that `postprocess` names."""

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import inference
from inference import mixture_diagnostics as md


def _z(seed=0, shape=(2, 5, 7), k=4):
    return np.random.default_rng(seed).integers(0, k, size=shape)


def test_co_clustering_and_occupancy_match_brute_force():
    z = _z()
    flat = z.reshape(-1, z.shape[-1])
    n = z.shape[-1]
    brute = np.array([[np.mean(flat[:, i] == flat[:, j]) for j in range(n)] for i in range(n)])
    assert np.array_equal(md.co_clustering(z, chunk=3), brute)
    assert np.array_equal(md.occupied_components(z), np.array([[len(set(r)) for r in c] for c in z]))
    counts = md.component_counts(z, 4)
    assert counts.shape == (2, 5, 4) and np.array_equal(counts[1, 2], np.bincount(z[1, 2], minlength=4))


def test_effective_components_and_truncation_mass():
    w = np.array([[[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]])
    assert md.effective_components(w) == pytest.approx(np.array([[4.0, 1.0]]))
    heavy = np.tile(np.array([0.5, 0.3, 0.15, 0.05]), (1, 10, 1))
    with pytest.warns(UserWarning, match="beyond its truncation"):
        out = md.check_truncation(heavy, tol=0.01)
    assert out["truncation_mass_mean"] == pytest.approx(0.05) and not out["truncation_ok"]
    light = np.tile(np.array([0.7, 0.2999, 0.0, 0.0001]), (1, 10, 1))
    assert md.check_truncation(light, tol=0.01)["truncation_ok"]


def _switched_samples(seed=0, num_draws=40):
    """Draws of a 3-component mixture whose labels are permuted in known draws."""
    rng = np.random.default_rng(seed)
    locs = np.array([[-3.0, 0.0], [0.0, 4.0], [3.0, 0.0]])
    weights = np.array([0.5, 0.2, 0.3])
    perms = np.tile(np.arange(3), (1, num_draws, 1))
    perms[0, 10:20] = [2, 0, 1]
    perms[0, 30:] = [1, 0, 2]
    L = locs[perms] + 0.05 * rng.normal(size=(1, num_draws, 3, 2))
    W = weights[perms]
    cov = np.broadcast_to(np.eye(2), (1, num_draws, 3, 2, 2)) * (1 + np.arange(3))[perms][..., None, None]
    true_z = rng.integers(0, 3, size=25)
    # z in each draw's own labels: label j of the draw is true component perms[j]
    inv = np.argsort(perms, axis=-1)
    z = np.take_along_axis(inv, np.broadcast_to(true_z, (1, num_draws, 25)), axis=-1)
    return {"locs": L, "weights": W, "cov": cov, "z": z}, perms, true_z


def test_label_permutations_are_recovered_and_relabel_undoes_them():
    samples, perms, true_z = _switched_samples()
    found = md.label_permutations(samples["locs"], reference=samples["locs"][0, 0])
    # found[s] maps reference label -> draw label, the inverse of "draw label -> true label"
    assert np.array_equal(found, np.argsort(perms, axis=-1))
    fixed = md.relabel(samples, found)
    assert np.allclose(fixed["weights"], np.array([0.5, 0.2, 0.3]))
    assert np.allclose(fixed["cov"][..., 0, 0], np.array([1.0, 2.0, 3.0]))
    assert np.array_equal(fixed["z"], np.broadcast_to(true_z, fixed["z"].shape))
    info = md.label_switching(samples)
    assert info["fraction"] == pytest.approx(20 / 40) and info["within_chain"] == pytest.approx(20 / 40)
    assert not info["chains_disagree"]


def test_relabel_recomputes_sticks_from_weights():
    w = np.array([[[0.1, 0.6, 0.3]]])
    v = np.array([[[0.1, 0.6 / 0.9]]])
    out = md.relabel({"weights": w, "sticks": v, "locs": np.zeros((1, 1, 3, 1))}, np.array([[[1, 2, 0]]]))
    assert np.allclose(out["weights"], [[[0.6, 0.3, 0.1]]])
    assert np.allclose(out["sticks"], [[[0.6, 0.75]]])


def test_a_nearly_empty_component_on_an_occupied_one_is_not_taken_for_it():
    # Draw 1 has an empty component (weight 1e-4) sitting exactly on the reference's first one.
    locs = np.array([[[[0.0, 0.0], [5.0, 5.0], [9.0, 9.0]], [[0.05, 0.0], [5.0, 5.0], [0.0, 0.0]]]])
    weights = np.array([[[0.6, 0.4 - 1e-4, 1e-4], [0.6, 0.4 - 1e-4, 1e-4]]])
    perms = md.label_permutations(locs, reference_weights=weights[0, 0], weights=weights)
    assert np.array_equal(perms[0, 1], [0, 1, 2])


def test_predictive_log_density_matches_scipy():
    rng = np.random.default_rng(3)
    S, K = 6, 2
    weights = rng.dirichlet(np.ones(K), size=(1, S))
    locs = rng.normal(size=(1, S, K, 2))
    A = rng.normal(size=(1, S, K, 2, 2))
    cov = A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(2)
    post = inference.Posterior(engine="mcmc", samples={"weights": weights, "locs": locs, "cov": cov})
    X_new = rng.normal(size=(4, 2))
    dens = np.zeros((S, 4))
    for s in range(S):
        for k in range(K):
            dens[s] += weights[0, s, k] * stats.multivariate_normal.pdf(X_new, locs[0, s, k], cov[0, s, k])
    assert md.predictive_log_density(post, X_new) == pytest.approx(np.log(dens.mean(0)), rel=1e-10)
    scales = np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))
    diag = inference.Posterior(engine="vi", samples={"weights": weights, "locs": locs, "scales": scales})
    ref = logsumexp(np.log(weights[0])[:, None, :] + np.sum(stats.norm.logpdf(
        X_new[None, :, None, :], locs[0][:, None], scales[0][:, None]), -1), axis=-1)
    assert md.predictive_log_density(diag, X_new) == pytest.approx(logsumexp(ref, 0) - np.log(S), rel=1e-10)
    with pytest.raises(ValueError, match="X_new"):
        md.predictive_log_density(post, np.ones((3, 5)))


def test_pareto_k_flags_a_poor_approximation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 2000))
    good = inference.Posterior(engine="vi", samples={"w": x[..., None]},
                               sample_stats={"lp": stats.norm.logpdf(x), "log_q": stats.norm.logpdf(x)})
    # q = N(0, 1) for a target N(0, 3^2): heavy importance-weight tail, k > 0.7.
    poor = inference.Posterior(engine="vi", samples={"w": x[..., None]},
                               sample_stats={"lp": stats.norm.logpdf(x, 0, 3), "log_q": stats.norm.logpdf(x)})
    assert md.pareto_k(good) < 0.5 and md.pareto_k(poor) > 0.7


def _laplace_post(z, lp_minus_log_q):
    S, n = z.shape[1:]
    rng = np.random.default_rng(1)
    base = rng.normal(size=(1, S))
    return inference.Posterior(
        engine="laplace",
        samples={"weights": np.full((1, S, 3), 1 / 3), "locs": rng.normal(size=(1, S, 3, 2)) + np.array([[0.0], [5.0], [10.0]]),
                 "cov": np.broadcast_to(np.eye(2), (1, S, 3, 2, 2)).copy(), "z": z},
        sample_stats={"lp": base + lp_minus_log_q, "log_q": base}, observed_data={"X": np.zeros((n, 2))},
        diagnostics={"converged": True, "condition_number": 10.0})


def test_postprocess_warns_about_a_poor_laplace_fit_and_names_dims():
    S, n = 200, 30
    z = np.tile(np.r_[np.zeros(15, int), np.ones(15, int)], (1, S, 1))  # component 2 empty
    post = _laplace_post(z, np.zeros((1, S)))
    with pytest.warns(UserWarning, match=r"components \[2\] hold fewer than"):
        out = md.postprocess(post)
    mix = out.diagnostics["mixture"]
    assert mix["laplace_poor"] and mix["empty_components"] == [2] and mix["occupied_probs"] == {2: 1.0}
    assert out.diagnostics["converged"] is False  # a poor approximation is never `converged`
    assert md.postprocess(out) is out  # idempotent
    dt = out.to_arviz()
    assert dt.posterior["z"].dims == ("chain", "draw", "point")
    assert dt.observed_data["X"].dims == ("point", "feature")
    # All components used and a Gaussian target: no warning.
    z_full = np.tile(np.arange(30) % 3, (1, S, 1))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = md.postprocess(_laplace_post(z_full, np.zeros((1, S))))
    assert not ok.diagnostics["mixture"]["laplace_poor"] and ok.diagnostics["converged"] is True


# ----------------------------------------------------------------------------- collapse
def test_component_distances_are_pooled_sd_units():
    locs = np.array([0.0, 1.0, 5.0])[None, None, :, None]  # (chain, draw, K, d)
    scales = np.array([1.0, 1.0, 3.0])[None, None, :, None]
    d = md.component_distances({"locs": locs, "scales": scales})[0, 0]
    assert d[0, 1] == pytest.approx(1.0) and d[0, 2] == pytest.approx(5.0 / np.sqrt(5.0)) and d[1, 0] == d[0, 1]
    cov = np.broadcast_to(np.diag([4.0, 1.0]), (1, 1, 2, 2, 2)).copy()
    d = md.component_distances({"locs": np.array([[[[0.0, 0.0], [2.0, 1.0]]]]), "cov": cov})[0, 0]
    assert d[0, 1] == pytest.approx(np.sqrt(2.0))  # (2/2)^2 + (1/1)^2
    rates = md.component_distances({"rates": np.array([[[4.0, 9.0]]])})[0, 0]
    assert rates[0, 1] == pytest.approx(5.0 / np.sqrt(6.5))
    probs = md.component_distances({"probs": np.array([[[[0.5, 0.5], [0.7, 0.3]]]])})[0, 0]
    assert probs[0, 1] == pytest.approx(10 * 0.2)


def _mixture_post(locs, cov, X, spread=0.01):
    """A Posterior of gaussian_mixture on X whose draws sit at (locs, cov) with locs spread by
    ``spread`` (sd), equal weights, with its exact pointwise log likelihood."""
    from inference import _model
    from probmodels.mixtures import gaussian_mixture

    S, k = 50, locs.shape[0]
    rng = np.random.default_rng(0)
    samples = {"weights": np.full((1, S, k), 1.0 / k), "locs": locs + spread * rng.normal(size=(1, S) + locs.shape),
               "cov": np.broadcast_to(cov, (1, S) + cov.shape).copy()}
    flat = {n: v[0] for n, v in samples.items()}
    ll = _model.pointwise_log_likelihood(gaussian_mixture, flat, (X,), {"num_components": k})
    return inference.Posterior(engine="vi", samples=samples, log_likelihood={n: v[None] for n, v in ll.items()},
                               diagnostics={"converged": True}, model=gaussian_mixture, model_args=(X,),
                               model_kwargs={"num_components": k})


def test_a_collapsed_mixture_is_flagged_not_converged_and_warned():
    """Two well-separated clusters fitted by two components that sit together between them: the
    fit's log likelihood is hundreds of nats short of the data-driven start's, so it is flagged,
    with the pair named, converged=False and a warning; the right fit is not flagged."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(-3.0, 0.5, (100, 1)), rng.normal(3.0, 0.5, (100, 1))]
    stuck = _mixture_post(np.array([[0.0], [0.01]]), np.stack([np.eye(1) * 9.25] * 2), X)
    with pytest.warns(UserWarning, match=r"degenerate vi fit: components \[\[0, 1\]\] have collapsed"):
        out = md.check_collapse(stuck)
    report = out.diagnostics["collapsed"]
    assert report["flagged"] and report["pairs"] == [[0, 1]] and report["loglik_gap"] > 100
    assert out.diagnostics["converged"] is False and md.check_collapse(out) is out  # idempotent
    right = _mixture_post(np.array([[-3.0], [3.0]]), np.stack([np.eye(1) * 0.25] * 2), X)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = md.check_collapse(right)
    assert not ok.diagnostics["collapsed"]["flagged"] and ok.diagnostics["converged"] is True
    assert ok.diagnostics["collapsed"]["pairs"] == [] and ok.diagnostics["collapsed"]["loglik_gap"] < 0


def test_an_over_dispersed_fit_is_flagged_whatever_the_spread_of_its_log_likelihood():
    """The right components with draws spread far wider than the data allow (sd 1.5 on locations
    whose posterior sd is 0.05): their log likelihood is hundreds of nats short of the start, with
    an sd of the same size, which must not excuse the shortfall (the cap of `collapse`)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(-3.0, 0.5, (100, 1)), rng.normal(3.0, 0.5, (100, 1))]
    wide = _mixture_post(np.array([[-3.0], [3.0]]), np.stack([np.eye(1) * 0.25] * 2), X, spread=1.5)
    report = md.collapse(wide)
    ll = sum(np.asarray(v).reshape(1, 50, -1).sum(-1) for v in wide.log_likelihood.values())
    assert report["loglik_gap"] < md.COLLAPSE_MARGIN + 3.0 * ll.std()  # what the uncapped rule excused
    assert report["flagged"] and report["pairs"] == [] and report["empty"] == []


def test_a_fit_held_back_by_its_scale_prior_is_flagged_with_the_prior_named():
    """States far apart (means -10 and 10) with little noise (sd 0.1): the HMM's default scale
    prior, scales^2 ~ InverseGamma(2, var(obs) = 100), outweighs the 150 points of each state (its
    sum of squares 100 against the data's ~1.5): fitted scales ~1.15, not 0.1. Nothing coincides,
    so the warning names the prior rather than a collapse; with a scale prior on the data's scale
    the same fit is right and not flagged."""
    import probmodels
    from probmodels import simulate

    sim = simulate.gaussian_hmm(300, seed=0, locs=(-10.0, 10.0), scales=(0.1, 0.1))
    # The default prior (2, var(obs)) given explicitly, both priors as arrays: the model takes a
    # traced prior as it is, so the two fits share their compiled Laplace programs (with the
    # default, or Python floats, the second fit compiled 3 more: ~40% of this test's compilation).
    default = np.array([2.0, np.var(np.asarray(sim.obs))])
    with pytest.warns(UserWarning, match="priors may outweigh the data"):
        post = inference.laplace(probmodels.hmm, sim.obs, num_states=2, scale_prior=default, seed=0)
    assert post.diagnostics["collapsed"]["flagged"] and not post.diagnostics["converged"]
    assert post.diagnostics["collapsed"]["pairs"] == [] and np.all(post.mean("scales") > 0.5)
    good = inference.laplace(probmodels.hmm, sim.obs, num_states=2, scale_prior=np.array([2.0, 0.01]), seed=0)
    assert not good.diagnostics["collapsed"]["flagged"] and good.diagnostics["converged"]
    np.testing.assert_allclose(good.mean("scales"), 0.1, rtol=0.2)
    np.testing.assert_allclose(good.mean("locs"), [-10.0, 10.0], atol=0.05)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])  # ids: tests/conftest.py
def test_vi_and_the_diagnostics_share_one_start_program(x64):
    """Every latent site of a Gaussian mixture declares its start (k-means), so the strategy for
    the others (VI's prior mean, the diagnostics' prior draw) is unused: given the model's trace,
    as VI and the diagnostics give it, one start program, not two (each ~1-2 s of compilation
    on a first fit), with the same start."""
    import jax
    import probmodels
    from inference import _model, compiled
    from inference.latent import init_to_prior_mean

    rng = np.random.default_rng(3)
    X = np.r_[rng.normal(-3, 1, (40, 1)), rng.normal(3, 1, (40, 1))]
    args, kwargs = (X,), {"num_components": 2}
    compiled.clear()
    with jax.enable_x64(x64):
        trace = _model.structure_trace(probmodels.gaussian_mixture, args, kwargs)
        a = _model.start_values(probmodels.gaussian_mixture, args, kwargs, 1, default=init_to_prior_mean, trace=trace)
        b = _model.start_values(probmodels.gaussian_mixture, args, kwargs, 1, trace=trace)
        starts = [k for k in compiled._CACHE if isinstance(k, tuple) and k[:2] == ("start", probmodels.gaussian_mixture)]
    assert len(starts) == 1, starts
    assert sorted(a) == sorted(b) == ["cov", "locs", "weights"]
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    compiled.clear()
