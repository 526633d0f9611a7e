"""Brute-force references for the exact-inference tests: every joint configuration enumerated
(NumPy, float64), and random Bayesian networks."""

import itertools

import numpy as np
from scipy.special import logsumexp

import probmodels


def random_cpts(num_nodes, *, max_parents=3, seed=0, max_card=2, edge_prob=0.5):
    """A random DAG (each node picks up to ``max_parents`` among the earlier ones) with random
    tables (rows from a Dirichlet(1)); cards in 2..max_card."""
    rng = np.random.default_rng(seed)
    cards = rng.integers(2, max_card + 1, size=num_nodes)
    cpts = {}
    for i in range(num_nodes):
        earlier = [j for j in range(i) if rng.random() < edge_prob]
        parents = list(rng.permutation(earlier)[:max_parents]) if earlier else []
        shape = tuple(int(cards[p]) for p in parents) + (int(cards[i]),)
        table = rng.dirichlet(np.ones(cards[i]), size=int(np.prod(shape[:-1]))).reshape(shape)
        cpts[f"x{i}"] = {"parents": [f"x{p}" for p in parents], "probs": table}
    return cpts


def joint_log_table(net):
    """``(configs, log p)``: every joint configuration of the network's nodes (in ``net.order``)."""
    cards = [net.cards[n] for n in net.order]
    configs = np.array(list(itertools.product(*[range(k) for k in cards])), dtype=int)
    col = {n: i for i, n in enumerate(net.order)}
    logp = np.zeros(len(configs))
    with np.errstate(divide="ignore"):
        for n in net.order:
            idx = tuple(configs[:, col[p]] for p in net.parents[n]) + (configs[:, col[n]],)
            logp += np.log(net.tables[n][idx])
    return configs, logp, col


def brute_force(net, **observed):
    """``(marginals, log evidence)`` of every unobserved node given ``observed``."""
    configs, logp, col = joint_log_table(net)
    keep = np.ones(len(configs), bool)
    for n, v in observed.items():
        keep &= configs[:, col[n]] == v
    configs, logp = configs[keep], logp[keep]
    log_z = logsumexp(logp)
    w = np.exp(logp - log_z)
    marg = {n: np.bincount(configs[:, col[n]], weights=w, minlength=net.cards[n])
            for n in net.order if n not in observed}
    return marg, float(log_z)


def brute_force_argmax(net, **observed):
    """``(assignment, log joint)`` of the most probable configuration given ``observed``."""
    configs, logp, col = joint_log_table(net)
    keep = np.ones(len(configs), bool)
    for n, v in observed.items():
        keep &= configs[:, col[n]] == v
    configs, logp = configs[keep], logp[keep]
    best = int(np.argmax(logp))
    return {n: int(configs[best, col[n]]) for n in net.order if n not in observed}, float(logp[best])


def random_net(num_nodes, **kw):
    return probmodels.bayes_net(random_cpts(num_nodes, **kw))
