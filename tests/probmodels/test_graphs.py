"""probmodels.graphs: parents read from programs, d-separation on textbook cases (checked against
numerical conditional independence in a random parameterisation), moralisation, pictures."""

import itertools

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import probmodels
from probmodels import graphs

# Koller & Friedman (2009) fig. 3.3's student network: D(ifficulty), I(ntelligence), G(rade),
# S(AT), L(etter)
STUDENT = {"D": (), "I": (), "G": ("D", "I"), "S": ("I",), "L": ("G",)}
# Alpaydin's sprinkler and Pearl's alarm (burglary B, earthquake E, alarm A, John J, Mary M)
SPRINKLER = {"C": (), "S": ("C",), "R": ("C",), "W": ("S", "R")}
ALARM = {"B": (), "E": (), "A": ("B", "E"), "J": ("A",), "M": ("A",)}

TEXTBOOK = [  # (graph, x, y, given, d-separated)
    (STUDENT, "D", "I", (), True),            # marginally independent causes
    (STUDENT, "D", "I", ("G",), False),       # explaining away through the collider G
    (STUDENT, "D", "I", ("L",), False),       # ... or through its descendant L
    (STUDENT, "D", "S", (), True),
    (STUDENT, "D", "S", ("G",), False),       # D -> G <- I -> S, G given
    (STUDENT, "D", "S", ("G", "I"), True),    # ... blocked again at I
    (STUDENT, "L", "S", (), False),           # L <- G <- I -> S
    (STUDENT, "L", "S", ("I",), True),
    (STUDENT, "L", "S", ("G",), True),
    (SPRINKLER, "S", "R", (), False),         # common cause C
    (SPRINKLER, "S", "R", ("C",), True),
    (SPRINKLER, "S", "R", ("C", "W"), False),  # explaining away
    (SPRINKLER, "C", "W", ("S", "R"), True),
    (ALARM, "B", "E", (), True),
    (ALARM, "B", "E", ("J",), False),
    (ALARM, "J", "M", (), False),
    (ALARM, "J", "M", ("A",), True),
    (ALARM, "B", "M", ("A",), True),
]


@pytest.mark.parametrize("graph, x, y, given, expected", TEXTBOOK)
def test_textbook_d_separation(graph, x, y, given, expected):
    assert graphs.d_separated(graph, x, y, given) is expected
    assert graphs.d_separated(graph, y, x, given) is expected  # symmetric


def test_d_separation_agrees_with_numerical_independence():
    """Every (x, y, given) query of the student network against a random binary
    parameterisation: d-separated implies independence to 1e-12, and here (generic numbers)
    d-connected gives a dependence above 1e-4."""
    net = probmodels.bayes_net(_random_tables(STUDENT, seed=0))
    order = list(net.order)
    configs = np.array(list(itertools.product((0, 1), repeat=len(order))))
    col = {n: i for i, n in enumerate(order)}
    p = np.ones(len(configs))
    for n in order:
        p *= net.tables[n][tuple(configs[:, col[q]] for q in net.parents[n]) + (configs[:, col[n]],)]
    for x, y in itertools.combinations(order, 2):
        rest = [n for n in order if n not in (x, y)]
        for k in range(len(rest) + 1):
            for given in itertools.combinations(rest, k):
                gap = _dependence(p, configs, col, x, y, given)
                if graphs.d_separated(STUDENT, x, y, given):
                    assert gap < 1e-12, (x, y, given, gap)
                else:
                    assert gap > 1e-4, (x, y, given, gap)


def _random_tables(graph, seed):
    rng = np.random.default_rng(seed)
    return {n: {"parents": list(ps), "p": rng.uniform(0.1, 0.9, size=(2,) * len(ps))} for n, ps in graph.items()}


def _dependence(p, configs, col, x, y, given):
    """max |P(x, y | z) - P(x | z) P(y | z)| over values."""
    worst = 0.0
    for z in itertools.product((0, 1), repeat=len(given)):
        mask = np.all([configs[:, col[g]] == v for g, v in zip(given, z)], axis=0) if given else np.ones(len(p), bool)
        pz = p[mask].sum()
        for a, b in itertools.product((0, 1), repeat=2):
            pxy = p[mask & (configs[:, col[x]] == a) & (configs[:, col[y]] == b)].sum() / pz
            px = p[mask & (configs[:, col[x]] == a)].sum() / pz
            py = p[mask & (configs[:, col[y]] == b)].sum() / pz
            worst = max(worst, abs(pxy - px * py))
    return worst


def test_parents_from_programs_network_hand_written_and_mrf():
    net = probmodels.bayes_net(_random_tables(STUDENT, seed=1))
    assert graphs.parents(net) == {n: tuple(ps) for n, ps in STUDENT.items()}
    assert graphs.parents(net, G=1) == graphs.parents(net)

    def model(y=None):
        a = numpyro.sample("a", dist.Bernoulli(0.5))
        b = numpyro.sample("b", dist.Categorical(jnp.array([[0.2, 0.8], [0.5, 0.5]])[a]))
        mid = numpyro.deterministic("mid", a + b)  # looked through
        numpyro.sample("y", dist.Normal(mid, 1.0), obs=y)
        numpyro.factor("tie", jnp.where(a == b, 1.0, 0.0))

    assert graphs.parents(model, y=0.5) == {"a": (), "b": ("a",), "y": ("a", "b"), "tie": ("a", "b")}
    # the factor site is an observed child of a and b: given it, a and b are dependent
    assert not graphs.d_separated(model, "a", "y", "b", model_kwargs={"y": 0.5})


def test_moral_graph_and_reachable():
    moral = graphs.moralize(STUDENT)
    assert moral["D"] == ("I", "G") and moral["I"] == ("D", "G", "S") and moral["L"] == ("G",)
    assert graphs.moralize(probmodels.bayes_net(_random_tables(SPRINKLER, seed=2)))["S"] == ("C", "R", "W")
    assert graphs.reachable(STUDENT, {"D"}, {"G"}) == {"D", "I", "S"}
    assert graphs.layers(STUDENT) == {"D": 0, "I": 0, "G": 1, "S": 1, "L": 2}


def test_bad_queries_name_the_argument():
    with pytest.raises(ValueError, match="xs: unknown site"):
        graphs.d_separated(STUDENT, "Q", "D")
    with pytest.raises(ValueError, match="given: unknown site"):
        graphs.d_separated(STUDENT, "D", "I", "Z")
    with pytest.raises(ValueError, match="xs and ys must not share"):
        graphs.d_separated(STUDENT, ["D", "I"], "I")
    with pytest.raises(ValueError, match="xs and given must not share"):
        graphs.d_separated(STUDENT, "D", "I", "D")
    with pytest.raises(ValueError, match="cycle"):
        graphs.d_separated({"a": ("b",), "b": ("a",)}, "a", "b")
    with pytest.raises(ValueError, match="node 'b': unknown parent"):
        graphs.moralize({"b": ("z",)})
    with pytest.raises(TypeError, match="model"):
        graphs.parents(42)


def test_draw_writes_a_picture(tmp_path):
    net = probmodels.bayes_net(_random_tables(SPRINKLER, seed=3))
    path = tmp_path / "sprinkler.png"
    graphs.draw(net, path, model_kwargs={"W": 1})
    assert path.stat().st_size > 1000
