"""Forward-backward throughput: inference.hmm vs hmmlearn and dynamax, one CPU thread each.

Every library gets the same (T, K) per-step log likelihoods, initial and transition probabilities
and computes the log likelihood and the smoothed marginals p(z_t | x) (T, K), in float64:

- ours: ``inference.hmm.forward_backward`` (sequential ``lax.scan``) and ``inference.hmm.smoother``
  (adds filtered marginals and the summed expected transition counts, which dynamax's smoothers
  also return), each also with ``parallel=True`` (associative scan) where its O(T K^3) work fits
  a CPU run (T K^3 <= 1e8);
- hmmlearn 0.3: the C++ kernels its ``score_samples`` runs per sequence, both implementations:
  ``"log"`` (its default; forward_log + backward_log + log-normalise) and ``"scaling"``
  (exp of the frame log likelihoods + forward_scaling + backward_scaling + normalise);
- dynamax: ``hmm_smoother`` (sequential) and ``parallel_hmm_smoother``, jitted; both also return
  filtered probabilities and transition statistics, so they are compared with our ``smoother``.

One batched row (``--batch B,T,K``, default 100 sequences of lengths drawn in [T/2, T], T = 1000,
K = 10) pads the sequences to T: ours takes the (B, T, K) array with ``lengths``, hmmlearn's
kernels run sequence by sequence on the true lengths (as its ``score_samples`` does), dynamax's
smoothers are ``vmap``-ed over the padded array with zero log likelihoods in the padding (which
leaves every real step's marginals and the log likelihood unchanged). Marginals are compared on
the real steps only.

JAX functions are compiled first (compile time reported separately), then timed: the best of up
to three runs (one run once a run takes over 5 s), because the 2-core machine is shared. Ratios
are peer time / our time (> 1: ours faster): hmmlearn against ``forward_backward``, dynamax
against ``smoother`` (sequential with sequential, parallel with parallel). Marginals are checked
against ours (max abs difference) and log likelihoods to 1e-8 relative (a WARNING line if not),
so a fast wrong answer cannot win.

Reproduce (bench extra installed: ``pip install -e '.[bench]'``; the parallel columns' compiles
take minutes beyond T = 1e3, so the long rows are run without them):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hmm_forward_backward.py --steps 1000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hmm_forward_backward.py --steps 100000,1000000 \
        --max-parallel-work 0 --batch ''
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
os.environ.setdefault("INFERENCE_COMPILATION_CACHE", "0")  # report real compile times
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from inference import hmm  # noqa: E402


def problem(num_steps: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.ones(k))
    trans = rng.dirichlet(np.ones(k), size=k) + 4.0 * np.eye(k)  # sticky
    trans /= trans.sum(1, keepdims=True)
    log_emission = rng.normal(scale=2.0, size=(num_steps, k))
    return init, trans, log_emission


def batch_problem(batch: int, num_steps: int, k: int, seed: int = 1):
    """B sequences padded to ``num_steps`` (lengths uniform in [T/2, T]); padding holds zeros."""
    init, trans, _ = problem(1, k, seed)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(num_steps // 2, num_steps + 1, size=batch)
    lengths[0] = num_steps
    log_emission = rng.normal(scale=2.0, size=(batch, num_steps, k))
    log_emission[np.arange(num_steps)[None, :] >= lengths[:, None]] = 0.0
    return init, trans, log_emission, lengths


REPEATS = 3  # best of up to 3 runs (fewer when one run takes > 5 s): the machine is shared


def timed(fn, *args, repeats=None):
    best, out = float("inf"), None
    for i in range(REPEATS if repeats is None else repeats):
        t0 = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
        if best > 5.0:
            break
    return best, out


def run_ours(init, trans, le, lengths, parallel, fn=None):
    fn = fn or hmm.forward_backward
    li, lt = np.log(init), np.log(trans)
    compile_s, _ = timed(lambda: fn(li, lt, le, parallel=parallel, lengths=lengths), repeats=1)
    run_s, out = timed(lambda: fn(li, lt, le, parallel=parallel, lengths=lengths))
    return run_s, compile_s - run_s, np.asarray(out[0]), np.asarray(out[1])


def run_hmmlearn(init, trans, le, lengths, implementation):
    from hmmlearn import _hmmc
    from hmmlearn.utils import log_normalize, normalize

    def log_impl(x):
        ll, fwd = _hmmc.forward_log(init, trans, x)
        bwd = _hmmc.backward_log(init, trans, x)
        g = fwd + bwd
        log_normalize(g, axis=1)
        return ll, np.exp(g)

    def scaling_impl(x):
        frame = np.exp(x)
        ll, fwd, scale = _hmmc.forward_scaling(init, trans, frame)
        bwd = _hmmc.backward_scaling(init, trans, frame, scale)
        g = fwd * bwd
        normalize(g, axis=1)
        return ll, g

    impl = log_impl if implementation == "log" else scaling_impl
    if lengths is None:
        run_s, (ll, marg) = timed(lambda: impl(le))
        return run_s, 0.0, float(ll), marg

    def batch():  # sequence by sequence on the true lengths, as score_samples(X, lengths) does
        lls, marg = np.zeros(len(lengths)), np.zeros_like(le)
        for b, n in enumerate(lengths):
            lls[b], marg[b, :n] = impl(np.ascontiguousarray(le[b, :n]))
        return lls, marg

    run_s, (ll, marg) = timed(batch)
    return run_s, 0.0, ll, marg


def run_dynamax(init, trans, le, lengths, parallel):
    from dynamax.hidden_markov_model import hmm_smoother, parallel_hmm_smoother

    fn = parallel_hmm_smoother if parallel else hmm_smoother
    fn = jax.jit(fn if lengths is None else jax.vmap(fn, in_axes=(None, None, 0)))  # padding: zeros
    args = (jax.numpy.asarray(init), jax.numpy.asarray(trans), jax.numpy.asarray(le))
    compile_s, _ = timed(fn, *args, repeats=1)
    run_s, post = timed(fn, *args)
    return run_s, compile_s - run_s, np.asarray(post.marginal_loglik), np.asarray(post.smoothed_probs)


def main():
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,100000,1000000")
    parser.add_argument("--states", default="2,10,50")
    parser.add_argument("--max-parallel-work", type=float, default=1e8, help="largest T K^3 run with parallel scans")
    parser.add_argument("--max-log-work", type=float, default=2e8,
                        help="largest T K^2 run with hmmlearn's log-space kernels (K^2 exp/log per step: "
                             "about a minute at T = 1e6, K = 50)")
    parser.add_argument("--batch", default="100,1000,10",
                        help="B,T,K of the padded-batch row ('' to skip): B sequences, lengths in [T/2, T]")
    parser.add_argument("--out", default=None, help="write the markdown table here too")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help="best of this many runs per cell (fewer once a run takes > 5 s); more "
                             "repeats steady the short cells on a shared machine")
    args = parser.parse_args()
    REPEATS = args.repeats
    import dynamax
    import hmmlearn

    header = (f"jax {jax.__version__}, hmmlearn {hmmlearn.__version__}, dynamax {dynamax.__version__}; "
              f"{platform.processor() or platform.machine()}, 1 thread, float64; seconds for one run "
              f"(compile excluded, shown in brackets); xR = this column's time / its reference's "
              f"(hmmlearn vs ours fb, dynamax vs ours smoother, parallel vs sequential): R > 1 = ours faster")
    columns = [  # (name, runner, reference column for the ratio)
        ("ours fb", lambda *a: run_ours(*a, False), None),
        ("ours fb parallel", lambda *a: run_ours(*a, True), "ours fb"),
        ("ours smoother", lambda *a: run_ours(*a, False, hmm.smoother), None),
        ("ours smoother parallel", lambda *a: run_ours(*a, True, hmm.smoother), "ours smoother"),
        ("hmmlearn log", lambda *a: run_hmmlearn(*a, "log"), "ours fb"),
        ("hmmlearn scaling", lambda *a: run_hmmlearn(*a, "scaling"), "ours fb"),
        ("dynamax", lambda *a: run_dynamax(*a, False), "ours smoother"),
        ("dynamax parallel", lambda *a: run_dynamax(*a, True), "ours smoother parallel"),
    ]
    rows = ["| T | K | " + " | ".join(c[0] for c in columns) + " | max abs diff of marginals vs ours |",
            "|---" * (len(columns) + 3) + "|"]
    print(header, flush=True)
    def cases():  # built one at a time (T = 1e6, K = 50 is 400 MB)
        for t in [int(float(s)) for s in args.steps.split(",")]:
            for k in [int(s) for s in args.states.split(",")]:
                yield f"{t:.0e}", k, *problem(t, k), None
        if args.batch:
            nb, tb, kb = (int(float(s)) for s in args.batch.split(","))
            yield f"B = {nb} x T <= {tb:.0e}", kb, *batch_problem(nb, tb, kb)

    for label, k, init, trans, le, lengths in cases():
        num_steps = le.shape[-2] * (1 if le.ndim == 2 else le.shape[0])
        real = (np.ones(le.shape[:-1], bool) if lengths is None
                else np.arange(le.shape[-2])[None, :] < lengths[:, None])
        small = num_steps * k**3 <= args.max_parallel_work
        results = {}
        for name, runner, _ in columns:
            if "parallel" in name and not small:
                continue
            if name == "hmmlearn log" and num_steps * k**2 > args.max_log_work:
                continue
            results[name] = runner(init, trans, le, lengths)
        _, _, ref_ll, ref_m = results["ours fb"]
        cells, diffs = [], []
        for name, _, ref in columns:
            if name not in results:
                work = (f"T K^2 = {num_steps * k**2:.0e}" if name == "hmmlearn log"
                        else f"T K^3 = {num_steps * k**3:.0e}")
                cells.append(f"skipped ({work})")
                continue
            s, c, ll, m = results[name]
            diffs.append(float(np.max(np.abs(m - ref_m)[real])))
            if not np.allclose(ll, ref_ll, rtol=1e-8):
                print(f"  WARNING {name}: log likelihood {ll} vs ours {ref_ll}")
            ratio = f", x{s / results[ref][0]:.2f}" if ref in results else ""
            compile_note = f" [{c:.1f}]" if c > 0.05 else ""
            cells.append(f"{s:.4f}{compile_note}{ratio}")
        rows.append(f"| {label} | {k} | " + " | ".join(cells) + f" | {max(diffs):.1e} |")
        print(rows[-1], flush=True)
    table = "\n".join([header, "", *rows])
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
