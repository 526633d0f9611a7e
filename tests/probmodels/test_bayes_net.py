"""probmodels.bayes_net: the program it builds, its tables, noisy-OR and logistic CPDs, and every
bad input (raised when the network is built, before any tracing)."""

import numpy as np
import pytest
from numpyro import handlers

import probmodels
from probmodels import bayes_net, logistic_cpd, noisy_or

SPRINKLER = {"C": {"p": 0.5}, "S": {"parents": ["C"], "p": [0.5, 0.1]}, "R": {"parents": ["C"], "p": [0.1, 0.8]},
             "W": {"parents": ["S", "R"], "p": [[0.1, 0.9], [0.9, 0.95]]}}


def test_program_sites_distributions_and_observations():
    net = bayes_net({**SPRINKLER, "K": {"parents": ["W"], "probs": [[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]}})
    values = {"C": 1, "S": 0, "R": 1, "K": 2}  # substituted: no random numbers drawn (nothing to compile)
    tr = handlers.trace(handlers.substitute(net, data=values)).get_trace(W=1)
    assert [n for n in tr] == ["C", "S", "R", "W", "K"]
    assert type(tr["W"]["fn"]).__name__ == "BernoulliProbs" and type(tr["K"]["fn"]).__name__ == "CategoricalProbs"
    assert tr["W"]["is_observed"] and int(tr["W"]["value"]) == 1
    np.testing.assert_allclose(tr["K"]["fn"].probs, [0.6, 0.3, 0.1])  # looked up at W = 1
    s, r = int(tr["S"]["value"]), int(tr["R"]["value"])
    assert float(tr["W"]["fn"].probs) == pytest.approx([[0.1, 0.9], [0.9, 0.95]][s][r])


def test_tables_forms_and_factor_tables():
    full = bayes_net({"R": ([], [0.6, 0.4]), "W": (["R"], [[0.8, 0.2], [0.1, 0.9]])})
    short = bayes_net({"R": {"p": 0.4}, "W": {"parents": "R", "p": [0.2, 0.9]}})
    for n in ("R", "W"):
        np.testing.assert_allclose(full.tables[n], short.tables[n])
    graph, tables, supports, observed = short.factor_tables(W=1)
    assert graph.names == ("R",) and graph.observed == ("W",) and observed == {"W": 1}
    assert graph.scopes == ((0,), (0,)) and graph.factor_sites == ("R", "W")
    np.testing.assert_allclose(np.exp(tables[1]), [0.2, 0.9])  # P(W = 1 | R)
    graph, tables, _, _ = short.factor_tables()
    assert graph.scopes == ((0,), (0, 1))
    np.testing.assert_allclose(np.exp(tables[1]), [[0.8, 0.2], [0.1, 0.9]])
    assert "W | R" in repr(short)


def test_noisy_or_and_logistic_tables():
    t = noisy_or(["A", "B", "C"], [0.1, 0.2, 0.5], leak=0.05)["probs"]
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                off = (1 - 0.05) * 0.1 ** a * 0.2 ** b * 0.5 ** c
                assert t[a, b, c, 1] == pytest.approx(1 - off, abs=1e-15)
    assert noisy_or(["R", "S"], 0.1)["probs"][1, 1, 1] == pytest.approx(0.99, abs=1e-15)
    lg = logistic_cpd(["A", "B"], [1.5, -2.0], bias=0.25, cards=[3, 2])["probs"]
    assert lg.shape == (3, 2, 2)
    assert lg[2, 1, 1] == pytest.approx(1 / (1 + np.exp(-(0.25 + 3.0 - 2.0))), abs=1e-15)
    net = bayes_net({"A": {"probs": [0.2, 0.3, 0.5]}, "B": {"p": 0.5},
                     "Y": logistic_cpd(["A", "B"], [1.5, -2.0], bias=0.25, cards=[3, 2])})
    assert net.cards == {"A": 3, "B": 2, "Y": 2}


BAD = [
    ({"A": {"parents": ["B"], "p": [0.1, 0.2]}, "B": {"parents": ["A"], "p": [0.3, 0.4]}}, ValueError, "node 'A' is on a cycle"),
    ({"A": {"parents": ["A"], "p": [0.1, 0.2]}}, ValueError, "node 'A' is on a cycle"),
    ({"A": {"probs": [0.3, 0.6]}}, ValueError, "node 'A': its table row sums to 0.9"),
    ({"A": {"p": 0.5}, "B": {"parents": ["A"], "probs": [[0.5, 0.5], [0.7, 0.4]]}}, ValueError,
     r"node 'B': its table row at parents \{'A': 1\} sums to 1.1"),
    ({"A": {"p": 0.5}, "B": {"parents": ["A"], "p": [0.1, 0.2, 0.3]}}, ValueError, "node 'B': .*shape"),
    ({"A": {"probs": [0.2, 0.3, 0.5]}, "B": {"parents": ["A"], "probs": [[0.5, 0.5], [0.5, 0.5]]}}, ValueError,
     r"node 'B': the table has shape \(2, 2\), expected \(3, 2\)"),
    ({"A": {"p": 0.5}, "B": {"parents": ["Z"], "p": [0.1, 0.2]}}, ValueError, "node 'B': unknown parent 'Z'"),
    ({"A": {"p": 1.5}}, ValueError, r"node 'A': probabilities must lie in \[0, 1\]"),
    ({"A": {"p": np.nan}}, ValueError, "node 'A': probabilities"),
    ({"A": {"p": 0.5, "probs": [0.5, 0.5]}}, ValueError, "node 'A': give exactly one"),
    ({"A": {"prob": 0.5}}, ValueError, "node 'A': unknown key"),
    ({"A": {"p": 0.5}, "B": {"parents": ["A", "A"], "p": [0.1, 0.2]}}, ValueError, "node 'B': a parent is listed twice"),
    ({"A": 0.5}, TypeError, "node 'A'"),
    ({"A": {"p": "high"}}, TypeError, "node 'A'"),
    ({}, TypeError, "cpts"),
    ([("A", 0.5)], TypeError, "cpts"),
]


@pytest.mark.parametrize("cpts, error, match", BAD, ids=[m[:24] for _, _, m in BAD])
def test_bad_networks_name_the_node(cpts, error, match):
    with pytest.raises(error, match=match):
        bayes_net(cpts)


def test_bad_observations_and_cpd_arguments():
    net = bayes_net(SPRINKLER)
    for value, match in ((2, "W: observed value 2"), (0.5, "W: observed value 0.5"), (np.array([1, 0]), "W: an observed node"),
                         ("yes", "W: observed value")):
        with pytest.raises(ValueError, match=match):
            net(W=value)
    with pytest.raises(TypeError, match="unknown node"):
        net(Q=1)
    with pytest.raises(ValueError, match="q: one probability per parent"):
        noisy_or(["A", "B"], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="q: probabilities"):
        noisy_or(["A"], 1.5)
    with pytest.raises(ValueError, match="leak"):
        noisy_or(["A"], 0.5, leak=1.0)
    with pytest.raises(ValueError, match="weights"):
        logistic_cpd(["A", "B"], [1.0])
    with pytest.raises(ValueError, match="cards"):
        logistic_cpd(["A"], [1.0], cards=[0])
    assert probmodels.bayes_net is bayes_net


def test_demo_case_scores_and_draws(tmp_path):
    import inference
    from probmodels.bayes_net import demo_cases

    (case,) = demo_cases()
    post = inference.exact(case.model, *case.args, **case.kwargs, num_samples=10)
    name, value, text = case.score(post)
    assert value < 1e-6 and "P(S | W) 0.4196" in text  # the book's 0.583493 to its 6 digits
    (path,) = case.plot(post, str(tmp_path / "sprinkler"))
    assert path.endswith(".png")
