"""Exact inference on discrete Bayesian networks: inference.exact vs pgmpy, side by side in one run.

For each network (random DAGs of 20-60 nodes, and pgmpy's own example networks, which it ships
offline), a fixed evidence set (~20% of the nodes, values drawn from the network), and every
unobserved node's posterior marginal:

- ours: ``inference.exact(net, **evidence)`` (min-fill variable elimination, downward pass for all
  marginals, plus 1000 joint posterior draws and the observed nodes' log likelihood at each, as
  every call returns); "first" is the first call on that network in the process (planning
  included; the passes run in NumPy: nothing is compiled), "warm" the median of repeated calls;
  "jit first" is the same passes as one XLA program (``jit=True``),
  compile included, and "jit warm" its later calls;
- pgmpy ``VariableElimination.query([node], evidence)`` and ``BeliefPropagation.query([node],
  evidence)`` for every unobserved node (VE: one elimination each, pgmpy's default greedy order;
  BP: each query prunes the network, builds and calibrates a junction tree). ``query(all,
  joint=False)`` builds the joint of all queried nodes first in both (2.7 TiB asked for at 40
  nodes); pgmpy's BP is skipped where the junction tree of the whole network (its triangulation
  heuristic) has a clique table above 2**24 entries (81 GiB asked for at 60 nodes).

The marginals of all three are compared (max absolute difference; the goal is 1e-10) so that a
fast wrong answer cannot win. Reproduce (bench extra: ``pip install -e '.[bench]'``):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_vs_pgmpy.py --out benchmarks/results/exact_vs_pgmpy.md
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
os.environ.setdefault("INFERENCE_COMPILATION_CACHE", "0")
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
import probmodels  # noqa: E402


def random_network(num_nodes: int, seed: int, window: int = 6, max_parents: int = 3):
    """Parents (at least one) among the ``window`` previous nodes (so the tree width stays
    moderate), 2-3 values per node, rows from a Dirichlet(1)."""
    rng = np.random.default_rng(seed)
    cards = rng.choice([2, 2, 3], size=num_nodes)
    cpts = {}
    for i in range(num_nodes):
        pool = list(range(max(0, i - window), i))
        k = int(rng.integers(1, min(max_parents, len(pool)) + 1)) if pool else 0  # connected (pgmpy's BP
        # triangulation fails on an isolated node)
        parents = sorted(rng.choice(pool, size=k, replace=False).tolist()) if k else []
        shape = tuple(int(cards[p]) for p in parents) + (int(cards[i]),)
        table = rng.dirichlet(np.ones(cards[i]), size=int(np.prod(shape[:-1]))).reshape(shape)
        cpts[f"x{i}"] = {"parents": [f"x{p}" for p in parents], "probs": table}
    return cpts


def from_pgmpy(model):
    """A pgmpy network as bayes_net tables (states in pgmpy's order) and its state names. The
    tables' rows are renormalised, in pgmpy's model too: the BIF files print rounded decimals, so
    rows sum to one only to ~1e-7, and with such rows pgmpy's pruning of barren nodes (exact only
    when rows sum to one) moved its marginals by up to 2e-8 from the full network's."""
    cpts, states = {}, {}
    for cpd in model.get_cpds():
        var = cpd.variable
        flat = cpd.get_values()
        cpd.values = (flat / flat.sum(axis=0, keepdims=True)).reshape(cpd.cardinality)
        values = cpd.get_values().reshape([cpd.cardinality[0]] + list(cpd.cardinality[1:]))
        cpts[var] = {"parents": list(cpd.variables[1:]), "probs": np.moveaxis(values, 0, -1)}
        states.update({v: list(cpd.state_names[v]) for v in cpd.variables})
    return cpts, states


def to_pgmpy(cpts):
    from pgmpy.factors.discrete import TabularCPD
    from pgmpy.models import DiscreteBayesianNetwork

    model = DiscreteBayesianNetwork([(p, n) for n, s in cpts.items() for p in s["parents"]])
    model.add_nodes_from(cpts)
    cards = {n: s["probs"].shape[-1] for n, s in cpts.items()}
    for n, s in cpts.items():
        values = np.moveaxis(s["probs"], -1, 0).reshape(cards[n], -1)
        model.add_cpds(TabularCPD(n, cards[n], values, evidence=s["parents"] or None,
                                  evidence_card=[cards[p] for p in s["parents"]] or None,
                                  state_names={v: list(range(cards[v])) for v in [n] + s["parents"]}))
    model.check_model()
    return model, {n: list(range(k)) for n, k in cards.items()}


def evidence_for(net, fraction, seed):
    """Observed values for ~``fraction`` of the nodes, drawn forward from the network."""
    rng = np.random.default_rng(seed)
    value = {}
    for n in net.order:
        row = net.tables[n][tuple(value[p] for p in net.parents[n])]
        value[n] = int(rng.choice(len(row), p=row / row.sum()))
    chosen = rng.choice(len(net.order), size=max(1, int(fraction * len(net.order))), replace=False)
    return {net.order[i]: value[net.order[i]] for i in sorted(chosen)}


MAX_PGMPY_CLIQUE = 2**24  # entries of pgmpy's largest junction-tree clique table beyond which BP is skipped
BP_BUDGET_S = 200.0  # pgmpy BP is skipped where one query times the number of nodes exceeds this


def pgmpy_largest_clique(model) -> int:
    """Entries of the largest clique table of the junction tree pgmpy's BeliefPropagation builds
    (its own triangulation heuristic), computed without allocating it."""
    import networkx as nx

    mm = model.to_markov_model()
    card = mm.get_cardinality()
    return max(int(np.prod([card[v] for v in c])) for c in nx.find_cliques(mm.triangulate()))


def timed(fn, repeats, slow_s=float("inf")):
    """``(result, first call s, median of ``repeats`` more calls s)``; no repeats after a first call
    over ``slow_s`` seconds (its warm time is then the first's)."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    if first > slow_s:
        return out, first, first
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return out, first, float(np.median(times)) if times else float("nan")


def bench(name, cpts, model, states, evidence, repeats, jit_max_nodes):
    """One network: ours (NumPy passes; jitted passes up to ``jit_max_nodes``) and pgmpy's VE and BP."""
    from pgmpy.inference import BeliefPropagation, VariableElimination

    net = probmodels.bayes_net(cpts)
    query = [n for n in net.order if n not in evidence]
    pg_evidence = {n: states[n][v] for n, v in evidence.items()}

    post, ours_first, ours_warm = timed(lambda: inference.exact(net, **evidence), repeats)
    width = post.diagnostics["width"]
    jit_first = jit_warm = float("nan")
    if len(net.order) <= jit_max_nodes:
        _, jit_first, jit_warm = timed(lambda: inference.exact(net, **evidence, jit=True), repeats)

    ve = VariableElimination(model)
    # one query per node: ``query(all, joint=False)`` builds the joint of every queried node first
    # (2**16 entries on the 20-node network, 1.7 TiB asked for on the 60-node one)
    ve_out, ve_first, ve_warm = timed(lambda: {n: ve.query([n], evidence=pg_evidence, show_progress=False) for n in query},
                                      max(1, repeats // 2), slow_s=10.0)
    clique = pgmpy_largest_clique(model)
    bp_out, bp_first, bp_warm, bp_note = None, float("nan"), float("nan"), ""
    if clique > MAX_PGMPY_CLIQUE:  # its junction tree alone would not fit in memory (81 GiB asked for on random-60)
        bp_note = f"junction-tree clique table {clique:.0e} entries"
    else:
        try:
            bp = BeliefPropagation(model)
            t0 = time.perf_counter()
            bp.query([query[0]], evidence=pg_evidence, show_progress=False)
            one = time.perf_counter() - t0
            if one * len(query) > BP_BUDGET_S:
                bp_note = f"one query took {one:.1f} s (x {len(query)} nodes)"
            else:
                bp_out, bp_first, bp_warm = timed(lambda: {n: bp.query([n], evidence=pg_evidence, show_progress=False)
                                                           for n in query}, 1, slow_s=10.0)
        except Exception as exc:  # noqa: BLE001 - pgmpy's own failure, reported in the table
            bp_note = f"pgmpy raised {type(exc).__name__}: {exc}"

    def gap(out):
        if out is None:
            return float("nan")
        worst = 0.0
        for n in query:
            factor = out[n]
            order = [factor.state_names[n].index(s) for s in states[n]]
            worst = max(worst, float(np.max(np.abs(np.asarray(factor.values)[order] - post.marginals[n]))))
        return worst

    return dict(name=name, nodes=len(net.order), observed=len(evidence), width=width, pgmpy_clique=clique,
                ours_table=post.diagnostics["max_table"], ours_first=ours_first,
                ours_warm=ours_warm, jit_first=jit_first, jit_warm=jit_warm, ve_first=ve_first, ve_warm=ve_warm,
                bp_first=bp_first, bp_warm=bp_warm, bp_note=bp_note, gap_ve=gap(ve_out), gap_bp=gap(bp_out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[20, 30, 40, 50, 60])
    parser.add_argument("--networks", nargs="*", default=["asia", "sachs", "child", "insurance", "alarm", "hailfinder",
                                                          "hepar2", "win95pts"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--jit-max-nodes", type=int, default=30, help="also time jit=True up to this many nodes")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.getLogger("pgmpy").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    from pgmpy.utils import get_example_model

    jax.devices()  # JAX's backend starts once per process (~0.1 s): not charged to the first jit timing
    rows = []
    for size in args.sizes:
        cpts = random_network(size, seed=size)
        net = probmodels.bayes_net(cpts)
        model, states = to_pgmpy(cpts)
        rows.append(bench(f"random-{size}", cpts, model, states, evidence_for(net, 0.2, seed=size), args.repeats,
                          args.jit_max_nodes))
        print(rows[-1], flush=True)
    for name in args.networks:
        model = get_example_model(name)
        cpts, states = from_pgmpy(model)
        net = probmodels.bayes_net(cpts)
        rows.append(bench(name, cpts, model, states, evidence_for(net, 0.2, seed=1), args.repeats, args.jit_max_nodes))
        print(rows[-1], flush=True)
    text = report(rows, args)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(text)


def report(rows, args):
    import pgmpy

    def ms(v):
        return "-" if not np.isfinite(v) else f"{1e3 * v:.1f}"

    def ratio(a, b, note):
        return f"skipped: {note}" if not np.isfinite(a) else f"{a / b:.0f}"

    lines = [
        "# Exact inference on Bayesian networks: inference.exact vs pgmpy",
        "",
        f"Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_vs_pgmpy.py {' '.join(os.sys.argv[1:])}`",
        f"Machine: {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores, "
        f"JAX backend {jax.default_backend()}; pgmpy {pgmpy.__version__}; date {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "All unobserved nodes' posterior marginals given ~20% of the nodes observed, float64. Times in ms: ours "
        "(NumPy passes on CPU) first call on the network and warm median; ours with jit=True (first includes XLA "
        "compilation); pgmpy VariableElimination and BeliefPropagation (one query per node), first and warm "
        "median. Ratio = pgmpy warm / ours warm (> 1: ours faster). Gap = max |marginal difference|. "
        f"pgmpy BP is skipped where its junction tree (its own triangulation) has a clique table above {MAX_PGMPY_CLIQUE:.0e} "
        f"entries, or where one query times the number of nodes would exceed {BP_BUDGET_S:.0f} s; a pgmpy first call "
        "over 10 s is not repeated (warm = first).",
        "",
        "| network | nodes | observed | width (ours) | largest table ours / pgmpy BP | ours first | ours warm | jit first | jit warm | pgmpy VE first | "
        "pgmpy VE warm | pgmpy BP first | pgmpy BP warm | VE / ours | BP / ours | gap VE | gap BP |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['nodes']} | {r['observed']} | {r['width']} | {r['ours_table']:.0e} / {r['pgmpy_clique']:.0e} | {ms(r['ours_first'])} | {ms(r['ours_warm'])} | "
            f"{ms(r['jit_first'])} | {ms(r['jit_warm'])} | {ms(r['ve_first'])} | {ms(r['ve_warm'])} | {ms(r['bp_first'])} | "
            f"{ms(r['bp_warm'])} | {r['ve_warm'] / r['ours_warm']:.1f} | {ratio(r['bp_warm'], r['ours_warm'], r['bp_note'])} | "
            f"{r['gap_ve']:.1e} | {r['gap_bp']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
