"""LDA on Reuters: held-out perplexity and fit time, probmodels' VB against scikit-learn and `lda`.

Corpus: the vendored Reuters set (395 documents, 4258 words), the fixed split of
`probmodels.text.held_out_split` (seed 0: 316 training documents, 79 test documents whose words
are halved at random). Every method fits the same model (K topics, alpha = 0.1, eta = 0.01) on
the training documents and is scored by the same document-completion perplexity
(`probmodels.text.perplexity`): its topic point estimate (K, V) is fixed, each test document's
topic proportions are folded in from the observed half, and the other half is scored.

Methods: probmodels online VB (`inference.lda_vb.fit`, defaults: mini-batches of 64, tau0 = 10,
kappa = 0.7, three starts with one probe pass each, stop at a relative ELBO change < 1e-3
between passes), the same with one start and scikit-learn's budget of 10 passes, the same with
the number of passes time-matched to scikit-learn online default (measured on the same seed just
before: floor(10 x its CPU time / ours-at-10-passes' CPU time), so ours takes no more of its
time; the measured time is reported), probmodels batch
VB (stop at < 1e-4 between sweeps); scikit-learn `LatentDirichletAllocation` online and batch with
its defaults (10 passes / iterations) and online with 30 passes; the `lda` package's collapsed
Gibbs sampler (500 sweeps; its `topic_word_` estimate). Each method runs with ``--seeds`` seeds;
the table gives mean and standard deviation of the perplexity and the median over seeds of the
fastest of ``--repeats`` identical runs' CPU and wall time of the fit alone (on a shared machine
both are inflated by other work; CPU time less so). probmodels' JIT
compilation happens in a warm-up fit before timing and is reported on its own line, with the
end-to-end `inference.vi(lda, ..., method="online")` time (trace, fit, 100 posterior draws).

Reproduce (single-threaded everything; about 5 minutes of CPU):
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lda_reuters.py --seeds 3 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("INFERENCE_COMPILATION_CACHE", "0")  # measure compilation honestly

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import inference  # noqa: E402
from inference.lda_vb import Triplets, fit  # noqa: E402
from probmodels.datasets import load_reuters  # noqa: E402
from probmodels.lda import lda  # noqa: E402
from probmodels.text import document_terms, held_out_split, perplexity, top_words  # noqa: E402
from collect_results import write_report  # noqa: E402

ALPHA, ETA = 0.1, 0.01
MATCHED = "probmodels online VB (1 start, passes time-matched to scikit-learn online default)"
SK_ONLINE, OURS_10 = "scikit-learn online (default: 10 passes)", "probmodels online VB (1 start, 10 passes)"
MAX_MATCHED_PASSES = 30


def _timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def methods(train, num_topics):
    """name -> fit(seed) returning the (K, V) topic point estimate."""
    terms = document_terms(train)
    data, (num_docs, vocab_size) = Triplets(terms.doc, terms.word, terms.count), terms.shape
    ours = lambda **kw: lambda seed: np.asarray(fit(  # noqa: E731
        data, num_docs, vocab_size, num_topics=num_topics, alpha=ALPHA, eta=ETA, seed=seed, **kw)[0].lam)
    passes = -(-num_docs // 64)  # mini-batches per pass

    def sklearn(method, max_iter):
        from sklearn.decomposition import LatentDirichletAllocation

        return lambda seed: LatentDirichletAllocation(
            num_topics, doc_topic_prior=ALPHA, topic_word_prior=ETA, learning_method=method, max_iter=max_iter,
            random_state=seed).fit(train).components_

    def gibbs(n_iter):
        import logging

        import lda as lda_package

        logging.getLogger("lda").setLevel(logging.WARNING)
        return lambda seed: lda_package.LDA(n_topics=num_topics, n_iter=n_iter, alpha=ALPHA, eta=ETA,
                                            random_state=seed, refresh=10**9).fit(train.astype(np.int64)).topic_word_

    return {
        "probmodels online VB (default: 3 starts, tol 1e-3)": ours(method="online", tol=1e-3),
        "probmodels online VB (1 start, 10 passes)": ours(method="online", num_restarts=1, steps=10 * passes),
        "probmodels batch VB (3 starts, tol 1e-4)": ours(method="batch", tol=1e-4),
        "scikit-learn online (default: 10 passes)": sklearn("online", 10),
        MATCHED: lambda seed, n: ours(method="online", num_restarts=1, steps=n * passes)(seed),
        "scikit-learn online (30 passes)": sklearn("online", 30),
        "scikit-learn batch (default: 10 iterations)": sklearn("batch", 10),
        "lda collapsed Gibbs (500 sweeps)": gibbs(500),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--topics", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per fit; the fastest counts")
    ap.add_argument("--out", default="benchmarks/results/lda.md")
    args = ap.parse_args()
    corpus = load_reuters()
    split = held_out_split(corpus.counts, test_fraction=0.2, seed=0)
    score = lambda topics: perplexity(topics, split.observed, split.held_out, alpha=ALPHA)  # noqa: E731
    load_start = os.getloadavg()
    sections = []
    for k in args.topics:
        runs = methods(split.train, k)
        # compilation: the first fits of each probmodels method compile; time them, then warm.
        compile_lines = []
        for name, run in runs.items():
            if name.startswith("probmodels") and name != MATCHED:
                _, cpu, wall = _timed(lambda: run(0))
                compile_lines.append(f"first call incl. JIT compilation, {name}: {cpu:.1f} s CPU, {wall:.1f} s wall")
        results = {name: [] for name in runs}
        matched_passes = []
        for seed in range(args.seeds):  # interleaved, so a load change hits every method alike
            for name, run in runs.items():
                if name == MATCHED:  # after scikit-learn online and ours at 10 passes on this seed
                    n = _matched_passes(results[SK_ONLINE][-1][1], results[OURS_10][-1][1])
                    matched_passes.append(n)
                    run = (lambda n: lambda seed: runs[MATCHED](seed, n))(n)
                timed = [_timed(lambda: run(seed)) for _ in range(args.repeats)]  # same seed: same fit
                topics = timed[0][0]
                cpu, wall = min(t[1] for t in timed), min(t[2] for t in timed)
                results[name].append((score(topics), cpu, wall))
                print(f"K={k} seed={seed} {name}: perplexity {results[name][-1][0]:.0f}, {cpu:.2f} s CPU, "
                      f"{wall:.2f} s wall", flush=True)
        compile_lines.insert(0, f"time-matched row: passes per seed {matched_passes}, chosen as floor(10 x scikit-learn "
                             "online default's CPU s / ours-at-10-passes' CPU s) on the same seed (at most "
                             f"{MAX_MATCHED_PASSES}); its CPU s column is measured, not assumed")
        post, cpu, wall = _timed(lambda: inference.vi(lda, split.train, num_topics=k, method="online", tol=1e-3,
                                                      num_samples=100, progress=False))
        compile_lines.append(f"end to end `inference.vi(lda, train, num_topics={k}, method='online', tol=1e-3, "
                             f"num_samples=100)` (warm): {cpu:.1f} s CPU, {wall:.1f} s wall; held-out perplexity "
                             f"{score(post.approximation['topics_concentration']):.0f}")
        sections.append(_section(k, results, compile_lines, top_words(
            post.approximation["topics_concentration"], corpus.tokens, 8)))
    _write(args, sections, load_start)


def _matched_passes(sklearn_cpu, ours_10_cpu):
    """Passes for ours to take no more CPU time than scikit-learn online did: the 10-pass time
    scaled linearly (conservative: init and the final E-step do not scale with the passes)."""
    return int(min(MAX_MATCHED_PASSES, max(1, np.floor(10 * sklearn_cpu / ours_10_cpu))))


def _section(k, results, compile_lines, words):
    lines = [f"## K = {k}", "",
             "| method | held-out perplexity (mean ± sd) | per seed | CPU s (median) | wall s (median) |",
             "|---|---|---|---|---|"]
    for name, rows in results.items():
        r = np.asarray(rows)
        lines.append(f"| {name} | {r[:, 0].mean():.0f} ± {r[:, 0].std(ddof=1) if len(r) > 1 else 0:.0f} | "
                     f"{', '.join(f'{v:.0f}' for v in r[:, 0])} | {np.median(r[:, 1]):.2f} | {np.median(r[:, 2]):.2f} |")
    (sk, ours) = (np.asarray(results[n]) for n in (SK_ONLINE, MATCHED))
    met = sk[:, 0].mean() >= ours[:, 0].mean() and np.median(ours[:, 1]) <= np.median(sk[:, 1])
    per_seed = sum(int(o[0] <= t[0] and o[1] <= t[1]) for o, t in zip(ours, sk))
    lines += ["", f"Goal (perplexity at least as good as scikit-learn online default's in no more of its CPU time), "
              f"time-matched row against it: mean perplexity {ours[:, 0].mean():.0f} vs {sk[:, 0].mean():.0f}, median "
              f"CPU {np.median(ours[:, 1]):.2f} s vs {np.median(sk[:, 1]):.2f} s: **{'met' if met else 'not met'}** "
              f"(both better or equal on {per_seed} of {len(sk)} seeds)."]
    lines += [""] + [f"- {line}" for line in compile_lines] + ["", "Top words (probmodels online VB, seed 0):", ""]
    lines += [f"- topic {i}: {' '.join(w)}" for i, w in enumerate(words)] + [""]
    return "\n".join(lines)


def _write(args, sections, load_start):
    import lda as lda_package
    import sklearn

    header = [
        "# LDA on Reuters: held-out perplexity and time", "",
        "Produced by `benchmarks/lda_reuters.py` (protocol in its docstring). Reproduce with",
        "", f"    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lda_reuters.py --seeds {args.seeds} --repeats "
        f"{args.repeats}", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, jax "
        f"{jax.__version__}, scikit-learn {sklearn.__version__}, lda {lda_package.__version__ if hasattr(lda_package, '__version__') else '?'}; "
        f"all single-threaded (OMP_NUM_THREADS=1, XLA intra-op threads 1); load average at start "
        f"{load_start[0]:.1f}, at end {os.getloadavg()[0]:.1f} (a shared machine: wall times are inflated by "
        "the load, CPU times much less).", "",
        "Model for every method: alpha = 0.1, eta = 0.01. Perplexity: document completion on 79 test documents "
        "(same fold-in from each method's topics; lower is better).", "",
    ]
    write_report(args.out, "\n".join(header + sections))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
