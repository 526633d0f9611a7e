"""inference.exact / most_probable on the seeds' networks (Alpaydin 14.2-14.5, sprinkler family),
hand-written programs (the trace path), Markov random fields via numpyro.factor, the Posterior
contract and bad input. Random networks against brute force: test_exact_random.py."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

import inference
import probmodels
from _exact_reference import brute_force, brute_force_argmax
from inference.exact import TreewidthError

P = {"p": 0.5}  # shorthand below
CHAIN = {"C": {"p": 0.4}, "R": {"parents": ["C"], "p": [0.1, 0.8]}, "W": {"parents": ["R"], "p": [0.2, 0.9]}}
WET = {"parents": ["S", "R"], "p": [[0.1, 0.9], [0.9, 0.95]]}  # P(W | S, R): rows S, columns R
EXPLAIN = {"R": {"p": 0.4}, "S": {"p": 0.2}, "W": WET}
SPRINKLER = {"C": {"p": 0.5}, "S": {"parents": ["C"], "p": [0.5, 0.1]}, "R": {"parents": ["C"], "p": [0.1, 0.8]}, "W": WET}


def p1(post, site):
    return float(post.marginals[site][1])


# ----------------------------------------------------------------------------- the seeds' numbers
def test_two_node_network_rain_given_wet_grass():
    net = probmodels.bayes_net({"R": {"p": 0.4}, "W": {"parents": ["R"], "p": [0.2, 0.9]}})
    assert p1(inference.exact(net, W=1, num_samples=10), "R") == pytest.approx(0.75, abs=1e-12)


def test_chain_prediction_and_diagnosis():
    """P(W) = 0.466 (the book prints 0.48, a typo), P(C | W) = 0.65236."""
    net = probmodels.bayes_net(CHAIN)
    assert p1(inference.exact(net, num_samples=10), "W") == pytest.approx(0.466, abs=1e-12)
    post = inference.exact(net, W=1, num_samples=10)
    assert p1(post, "C") == pytest.approx(0.4 * (0.8 * 0.9 + 0.2 * 0.2) / 0.466, abs=1e-12)
    assert round(p1(post, "C"), 5) == 0.65236
    assert post.log_evidence == pytest.approx(np.log(0.466), abs=1e-12) and post.evidence_method == "exact"


def test_explaining_away():
    net = probmodels.bayes_net(EXPLAIN)
    assert round(p1(inference.exact(net, W=1, num_samples=10), "S"), 6) == 0.353846
    assert round(p1(inference.exact(net, R=1, W=1, num_samples=10), "S"), 6) == 0.208791
    # P(W) = .076 + .288 + .108 + .048 = .52; P(S, W) = .076 + .108; P(R, S, W) = .076, P(R, W) = .364
    assert p1(inference.exact(net, W=1, num_samples=10), "S") == pytest.approx(0.184 / 0.52, abs=1e-12)
    assert p1(inference.exact(net, R=1, W=1, num_samples=10), "S") == pytest.approx(0.076 / 0.364, abs=1e-12)


def test_loopy_sprinkler_network():
    net = probmodels.bayes_net(SPRINKLER)
    assert p1(inference.exact(net, num_samples=10), "W") == pytest.approx(0.65125, abs=1e-12)
    assert round(p1(inference.exact(net, W=1, num_samples=10), "C"), 6) == 0.583493
    assert round(p1(inference.exact(net, R=1, W=1, num_samples=10), "S"), 6) == 0.151255


def test_noisy_or_gives_point_99():
    net = probmodels.bayes_net({"R": {"p": 0.4}, "S": {"p": 0.2}, "W": probmodels.noisy_or(["R", "S"], 0.1)})
    post = inference.exact(net, R=1, S=1, num_samples=10)
    assert p1(post, "W") == pytest.approx(0.99, abs=1e-12)


# ----------------------------------------------------------------------------- draws, max-product
def test_draws_are_joint_posterior_draws():
    """Frequencies of single sites and of the pair (R, S) given W = 1 within 5 Monte Carlo standard
    errors of the exact probabilities: the draws are joint (explaining away makes R and S
    dependent: P(R = 1, S = 1 | W) = 0.1646 against 0.7077 * 0.3538 = 0.2504 if independent)."""
    net = probmodels.bayes_net(EXPLAIN)
    n = 20000
    post = inference.exact(net, W=1, num_samples=n, seed=3)
    r, s = post.samples["R"][0], post.samples["S"][0]
    joint = 0.4 * 0.2 * 0.95 / (0.4 * 0.2 * 0.95 + 0.4 * 0.8 * 0.9 + 0.6 * 0.2 * 0.9 + 0.6 * 0.8 * 0.1)
    for freq, p in ((r.mean(), p1(post, "R")), (s.mean(), p1(post, "S")), (np.mean(r * s), joint)):
        assert abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n)
    assert abs(joint - p1(post, "R") * p1(post, "S")) > 10 * np.sqrt(0.25 / n)  # the check can tell


def test_most_probable_matches_brute_force():
    net = probmodels.bayes_net(SPRINKLER)
    for obs in ({}, {"W": 1}, {"W": 0, "C": 1}):
        best = inference.most_probable(net, **obs)
        ref, log_joint = brute_force_argmax(net, **obs)
        _, log_z = brute_force(net, **obs)
        assert best.assignment == ref
        assert best.log_joint == pytest.approx(log_joint, abs=1e-12)
        assert best.log_prob == pytest.approx(log_joint - log_z, abs=1e-12)


# ----------------------------------------------------------------------------- the trace path
def sprinkler_by_hand(W=None, R=None):
    """The sprinkler network written as a program (no tables handed over: read from the trace)."""
    c = numpyro.sample("C", dist.Bernoulli(0.5))
    s = numpyro.sample("S", dist.Bernoulli(jnp.where(c == 1, 0.1, 0.5)))
    r = numpyro.sample("R", dist.Bernoulli(jnp.array([0.1, 0.8])[c]), obs=R)
    numpyro.sample("W", dist.Bernoulli(jnp.array([[0.1, 0.9], [0.9, 0.95]])[s, r]), obs=W)


def test_hand_written_program_equals_the_network():
    net = probmodels.bayes_net(SPRINKLER)
    for obs in ({"W": 1}, {"W": 1, "R": 1}):
        ours, ref = inference.exact(sprinkler_by_hand, **obs, num_samples=50), inference.exact(net, **obs, num_samples=50)
        for site in ref.marginals:
            np.testing.assert_allclose(ours.marginals[site], ref.marginals[site], atol=1e-14)
        assert ours.log_evidence == pytest.approx(ref.log_evidence, abs=1e-14)
        for post in (ours, ref):  # pointwise log likelihood: log P(W = 1 | S, R) at each draw
            s_, r_ = post.samples["S"][0], post.samples["R"][0] if "R" in post.samples else np.ones(50, int)
            np.testing.assert_allclose(post.log_likelihood["W"][0], np.log(np.array([[0.1, 0.9], [0.9, 0.95]])[s_, r_]),
                                       atol=1e-14)
    a, b = inference.most_probable(sprinkler_by_hand, W=1), inference.most_probable(net, W=1)
    assert a.assignment == b.assignment and a.log_prob == pytest.approx(b.log_prob, abs=1e-14)


def ising(J=0.5, h=0.3):
    """A pairwise MRF: a 2x3 grid of spins with couplings J and a field h on the first spin."""
    x = [numpyro.sample(f"x{i}", dist.Bernoulli(0.5)) for i in range(6)]
    spin = [2 * v - 1 for v in x]
    for i, j in ((0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (1, 4), (2, 5)):
        numpyro.factor(f"pair{i}{j}", J * spin[i] * spin[j])
    numpyro.factor("field", h * spin[0])
    numpyro.deterministic("total", sum(x))


def test_pairwise_mrf_via_factor_sites():
    post = inference.exact(ising, num_samples=4000, seed=1)
    configs = np.array(np.meshgrid(*[[0, 1]] * 6, indexing="ij")).reshape(6, -1).T
    spin = 2 * configs - 1
    pairs = ((0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (1, 4), (2, 5))
    logw = 6 * np.log(0.5) + sum(0.5 * spin[:, i] * spin[:, j] for i, j in pairs) + 0.3 * spin[:, 0]
    log_z = logsumexp(logw)
    w = np.exp(logw - log_z)
    assert post.log_evidence == pytest.approx(log_z, abs=1e-12)
    for i in range(6):
        assert p1(post, f"x{i}") == pytest.approx(w @ configs[:, i], abs=1e-12)
    np.testing.assert_array_equal(post.samples["total"][0], sum(post.samples[f"x{i}"][0] for i in range(6)))
    loopy = inference.exact(ising, method="loopy", num_samples=10)
    assert loopy.diagnostics["converged"] and loopy.evidence_method == "bethe"
    err = max(abs(p1(loopy, f"x{i}") - p1(post, f"x{i}")) for i in range(6))
    assert 1e-4 < err < 0.05  # an approximation on a loopy grid, close but not exact


def test_discrete_latent_with_continuous_observations():
    """A two-component mixture with one shared assignment: p(z | y) in closed form."""
    def mix(y):
        z = numpyro.sample("z", dist.Categorical(jnp.array([0.3, 0.7])))
        with numpyro.plate("n", y.shape[0]):
            numpyro.sample("y", dist.Normal(jnp.array([-1.0, 1.0])[z], 1.0), obs=y)

    y = np.array([0.5, 1.2, -0.3])
    post = inference.exact(mix, y, num_samples=20)
    logp = np.log([0.3, 0.7]) + np.array([norm.logpdf(y, m, 1).sum() for m in (-1.0, 1.0)])
    np.testing.assert_allclose(post.marginals["z"], np.exp(logp - logsumexp(logp)), atol=1e-12)
    assert post.log_evidence == pytest.approx(logsumexp(logp), abs=1e-12)
    z = post.samples["z"][0]  # pointwise log likelihood at each draw, per observation
    np.testing.assert_allclose(post.log_likelihood["y"][0], norm.logpdf(y, np.array([-1.0, 1.0])[z][:, None], 1), atol=1e-12)


# ----------------------------------------------------------------------------- BP
def test_belief_propagation_exact_on_a_polytree():
    """A polytree (two roots, a collider, a child with two parents) by BP: marginals, evidence
    and joint draws as VE (the draws by tree sampling: pair frequencies within 5 SE)."""
    cpts = {"A": {"p": 0.3}, "B": {"p": 0.6}, "C": {"parents": ["A", "B"], "p": [[0.1, 0.7], [0.5, 0.9]]},
            "D": {"parents": ["C"], "p": [0.2, 0.8]}, "E": {"parents": ["C"], "p": [0.6, 0.3]}}
    net = probmodels.bayes_net(cpts)
    n = 20000
    ve = inference.exact(net, D=1, num_samples=10)
    tree = inference.exact(net, D=1, method="bp", num_samples=n, seed=2)
    for site in ve.marginals:
        np.testing.assert_allclose(tree.marginals[site], ve.marginals[site], atol=1e-12)
    assert tree.log_evidence == pytest.approx(ve.log_evidence, abs=1e-12) and tree.evidence_method == "exact"
    assert tree.diagnostics["converged"]
    configs_a, configs_b = tree.samples["A"][0], tree.samples["B"][0]
    joint = float(np.sum(brute_pair(net, "A", "B", D=1)[1, 1]))
    assert abs(np.mean(configs_a * configs_b) - joint) < 5 * np.sqrt(joint * (1 - joint) / n)
    with pytest.raises(ValueError, match="loop"):
        inference.exact(probmodels.bayes_net(SPRINKLER), method="bp")


def brute_pair(net, a, b, **observed):
    from _exact_reference import joint_log_table

    configs, logp, col = joint_log_table(net)
    keep = np.all([configs[:, col[n]] == v for n, v in observed.items()], axis=0)
    w = np.exp(logp[keep] - logsumexp(logp[keep]))
    out = np.zeros((net.cards[a], net.cards[b]))
    np.add.at(out, (configs[keep, col[a]], configs[keep, col[b]]), w)
    return out


# ----------------------------------------------------------------------------- Posterior contract
def test_posterior_contract_arviz_save_load(tmp_path):
    net = probmodels.bayes_net(SPRINKLER)
    post = inference.fit(net, engine="exact", W=1, num_samples=200)
    assert post.engine == "exact" and post.diagnostics["converged"] and post.num_chains == 1
    assert post.samples["C"].shape == (1, 200) and post.log_likelihood["W"].shape == (1, 200)
    np.testing.assert_allclose(post.sample_stats["log_q"], post.sample_stats["lp"] - post.log_evidence)
    dt = post.to_arviz()
    assert {"posterior", "sample_stats", "log_likelihood", "observed_data", "marginals"} <= set(dt.children)
    assert post.summary(var_names=["C", "S"]).shape[0] == 2
    path = tmp_path / "net.nc"
    post.save(path)
    back = inference.load(path)
    assert back.engine == "exact" and back.log_evidence == post.log_evidence
    for site, m in post.marginals.items():
        np.testing.assert_array_equal(back.marginals[site], m)
    np.testing.assert_array_equal(back.samples["S"], post.samples["S"])


# ----------------------------------------------------------------------------- bad input
def test_bad_options_are_named_before_tracing():
    net = probmodels.bayes_net(CHAIN)
    for kw, match in (({"method": "junction"}, "method"), ({"num_samples": 0}, "num_samples"),
                      ({"method": "loopy", "damping": 1.0}, "damping"), ({"tol": -1.0}, "tol"),
                      ({"max_iter": 0}, "max_iter"), ({"max_table_size": 0}, "max_table_size")):
        with pytest.raises(ValueError, match=match):
            inference.exact(net, **kw)
    with pytest.raises(TypeError, match="unknown node"):
        inference.exact(net, X=1)
    with pytest.raises(ValueError, match="W: observed value 2"):
        inference.exact(net, W=2)
    with pytest.raises(TypeError, match="model"):
        inference.exact("not a model")


def test_models_outside_the_class_name_the_site():
    def continuous():
        numpyro.sample("a", dist.Normal(0.0, 1.0))
        numpyro.sample("b", dist.Bernoulli(0.5))

    def poisson():
        numpyro.sample("n", dist.Poisson(3.0))

    def vector():
        numpyro.sample("v", dist.Bernoulli(0.5).expand([3]))

    def branching():
        a = numpyro.sample("a", dist.Bernoulli(0.3))
        numpyro.sample("b", dist.Bernoulli(0.9 if a == 1 else 0.2))

    def impossible():
        a = numpyro.sample("a", dist.Bernoulli(0.3))
        numpyro.factor("never", jnp.where(a == 1, -jnp.inf, -jnp.inf))

    def nan_table():
        a = numpyro.sample("a", dist.Bernoulli(0.3))
        numpyro.factor("f", jnp.where(a == 1, jnp.nan, 0.0))

    cases = ((continuous, "site 'a' is a continuous latent"), (poisson, "site 'n'.*infinite"),
             (vector, "site 'v' has shape"), (branching, "enumerat"), (impossible, "probability zero"),
             (nan_table, "site 'f'.*NaN"))
    for model, match in cases:
        with pytest.raises(ValueError, match=match):
            inference.exact(model)
    with pytest.raises(ValueError, match="nothing to infer"):
        inference.exact(lambda: numpyro.sample("y", dist.Bernoulli(0.5), obs=1))


def test_too_wide_a_network_gives_its_tree_width():
    """A 12-node clique of binary variables needs a 2**12 table: over a limit of 1000 entries."""
    net = probmodels.bayes_net({f"x{i}": {"parents": [f"x{j}" for j in range(i)], "p": np.full((2,) * i, 0.3)}
                                for i in range(12)})
    with pytest.raises(TreewidthError, match="tree width 11"):
        inference.exact(net, max_table_size=1000)
    with pytest.raises(TreewidthError, match="tree width 11"):
        inference.most_probable(net, max_table_size=1000)
