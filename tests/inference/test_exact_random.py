"""inference.exact on random networks against brute-force enumeration of every joint configuration:
marginals and log evidence to 1e-10 in float64 and to float32 precision in float32, max-product
against the brute-force argmax, joint draws within Monte Carlo error, belief propagation exact on
polytrees, loopy BP's error on loopy networks, the trace path (and its chunked scope reading)
against the tables, and the jitted JAX passes against the NumPy ones."""

import jax
import numpy as np
import pytest

import inference
import probmodels
from _exact_reference import brute_force, brute_force_argmax, joint_log_table, random_cpts, random_net

# (nodes, seed, max_card, observed): up to 15 binary nodes; one network with 3-valued nodes
CASES = [(6, 0, 2, {}), (10, 1, 3, {"x9": 1, "x4": 0}), (15, 2, 2, {"x14": 1, "x7": 0, "x3": 1})]


def _max_marginal_error(post, ref):
    return max(float(np.max(np.abs(post.marginals[n] - ref[n]))) for n in ref)


@pytest.mark.parametrize("nodes, seed, max_card, observed", CASES)
def test_random_networks_against_brute_force(nodes, seed, max_card, observed):
    net = random_net(nodes, seed=seed, max_card=max_card)
    ref, log_z = brute_force(net, **observed)
    post = inference.exact(net, **observed, num_samples=10)
    assert set(post.marginals) == set(ref)
    assert _max_marginal_error(post, ref) < 1e-10
    assert abs(post.log_evidence - log_z) < 1e-10
    best = inference.most_probable(net, **observed)
    assignment, log_joint = brute_force_argmax(net, **observed)
    assert best.assignment == assignment and abs(best.log_joint - log_joint) < 1e-10


def test_random_networks_float32():
    """float32 (JAX's default precision): marginals to 2e-6, log evidence to 2e-6 relative (the
    largest errors seen: 1.9e-7 and 9e-8 relative, a few epsilons over the ~30 terms summed)."""
    with jax.enable_x64(False):
        for nodes, seed, max_card, observed in CASES:
            net = random_net(nodes, seed=seed, max_card=max_card)
            ref, log_z = brute_force(net, **observed)
            post = inference.exact(net, **observed, num_samples=10)
            assert post.marginals["x0"].dtype == np.float32
            assert _max_marginal_error(post, ref) < 2e-6
            assert abs(post.log_evidence - log_z) < 2e-6 * max(1.0, abs(log_z))


def test_draws_match_marginals_and_pairs_within_monte_carlo_error():
    """20000 joint draws of a 12-node network given two nodes: each node's frequency and each
    adjacent pair's joint frequency within 5 standard errors (each check fails by chance with
    probability ~6e-7)."""
    net = random_net(12, seed=5)
    observed = {"x11": 1, "x5": 0}
    n = 20000
    post = inference.exact(net, **observed, num_samples=n, seed=7)
    ref, _ = brute_force(net, **observed)
    for node, m in ref.items():
        freq, p = post.samples[node].mean(), m[1]
        assert abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12
    configs, logp, col = joint_log_table(net)
    keep = np.all([configs[:, col[k]] == v for k, v in observed.items()], axis=0)
    w = np.exp(logp[keep] - np.logaddexp.reduce(logp[keep]))
    pairs = [(a, b) for b in net.order for a in net.parents[b] if a in ref and b in ref]
    assert len(pairs) >= 5
    for a, b in pairs:
        p = float(w @ (configs[keep, col[a]] * configs[keep, col[b]]))
        freq = np.mean(post.samples[a][0] * post.samples[b][0])
        assert abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12


def random_polytree(nodes, seed):
    """A random tree skeleton with random edge directions (nodes may get several parents)."""
    rng = np.random.default_rng(seed)
    edges = [(int(rng.integers(0, i)), i) for i in range(1, nodes)]
    parents = {i: [] for i in range(nodes)}
    for a, b in edges:
        child, parent = (b, a) if rng.random() < 0.5 else (a, b)
        parents[child].append(parent)
    # a topological order exists (a tree has no directed cycle); bayes_net sorts it
    return probmodels.bayes_net({f"x{i}": {"parents": [f"x{p}" for p in ps],
                                           "probs": rng.dirichlet(np.ones(2), size=2 ** len(ps)).reshape((2,) * len(ps) + (2,))}
                                 for i, ps in parents.items()})


def test_belief_propagation_is_exact_on_polytrees_and_loopy_bp_is_reported():
    net = random_polytree(12, seed=3)
    observed = {"x4": 1, "x9": 0}
    ref, log_z = brute_force(net, **observed)
    for method in ("bp", "loopy"):
        post = inference.exact(net, **observed, method=method, num_samples=10)
        assert post.diagnostics["converged"]
        assert _max_marginal_error(post, ref) < (1e-10 if method == "bp" else 1e-7)
        assert abs(post.log_evidence - log_z) < (1e-10 if method == "bp" else 1e-7)
    # loopy BP on loopy networks: an approximation, its error against exact reported
    errors = []
    for seed in (1, 2):
        net = random_net(10, seed=seed, max_parents=2)
        exact = inference.exact(net, x9=1, num_samples=10)
        loopy = inference.exact(net, x9=1, method="loopy", num_samples=10)
        assert loopy.evidence_method == "bethe"
        errors.append((_max_marginal_error(loopy, exact.marginals), abs(loopy.log_evidence - exact.log_evidence),
                       loopy.diagnostics["converged"], loopy.diagnostics["iterations"]))
    print("loopy BP vs exact on random 10-node networks (max marginal error, |log Z error|, converged, sweeps):", errors)
    assert all(conv for *_, conv, _ in errors)
    assert all(1e-6 < err < 0.1 for err, *_ in errors)  # wrong, as it should be on loops, but close


def test_loopy_bp_that_does_not_converge_says_so():
    """A frustrated cycle (strong anti-couplings around a triangle) with no damping oscillates:
    converged=False after max_iter sweeps, and the marginals still finite."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def triangle():
        x = [numpyro.sample(f"x{i}", dist.Bernoulli(jnp.array([0.9, 0.1, 0.5])[i])) for i in range(3)]
        for i, j in ((0, 1), (1, 2), (2, 0)):
            numpyro.factor(f"f{i}{j}", jnp.where(x[i] == x[j], -4.0, 4.0))

    post = inference.exact(triangle, method="loopy", damping=0.0, max_iter=50, num_samples=10)
    assert not post.diagnostics["converged"] and post.diagnostics["iterations"] == 50
    assert all(np.all(np.isfinite(m)) for m in post.marginals.values())


def test_trace_path_reads_the_same_factor_graph(monkeypatch):
    """A random network with 3-valued nodes run as an opaque program (no tables handed over),
    its scopes read two sites at a time: the same answers as the network's own tables."""
    from inference.exact import factors

    net = random_net(8, seed=4, max_card=3)
    observed = {"x7": 1, "x2": 0}
    monkeypatch.setattr(factors, "CHUNK", 2)
    post = inference.exact(lambda **kw: net(**kw), **observed, num_samples=10)
    ref, log_z = brute_force(net, **observed)
    assert _max_marginal_error(post, ref) < 1e-12 and abs(post.log_evidence - log_z) < 1e-12


def test_jitted_passes_equal_numpy_passes():
    """The JAX passes (what runs on an accelerator) against the NumPy ones, on a 4-node network
    (compiling is the cost: max-product and loopy BP jitted run with the slow checks)."""
    net = random_net(4, seed=0)
    a, b = inference.exact(net, x3=1, num_samples=50, jit=True), inference.exact(net, x3=1, num_samples=50, jit=False)
    for n in a.marginals:
        np.testing.assert_allclose(a.marginals[n], b.marginals[n], atol=1e-14)
        np.testing.assert_array_equal(a.samples[n], b.samples[n])  # same noise, same draws
    assert a.log_evidence == pytest.approx(b.log_evidence, abs=1e-14)


@pytest.mark.slow
def test_jitted_max_product_and_loopy_bp_equal_numpy():
    net = random_net(6, seed=0)
    a, b = inference.most_probable(net, x5=1, jit=True), inference.most_probable(net, x5=1, jit=False)
    assert a.assignment == b.assignment and a.log_prob == pytest.approx(b.log_prob, abs=1e-14)
    a = inference.exact(net, x5=1, method="loopy", num_samples=10, jit=True)
    b = inference.exact(net, x5=1, method="loopy", num_samples=10, jit=False)
    assert a.diagnostics["iterations"] == b.diagnostics["iterations"]
    for n in a.marginals:
        np.testing.assert_allclose(a.marginals[n], b.marginals[n], atol=1e-12)


def test_random_cpts_are_valid_tables():
    cpts = random_cpts(5, seed=0, max_card=3)
    for spec in cpts.values():
        np.testing.assert_allclose(spec["probs"].sum(-1), 1.0)
