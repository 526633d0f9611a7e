"""Command line: ``probmodels demo``, ``probmodels fit``, ``probmodels summary``.

    probmodels demo [--out DIR]
    probmodels fit MODEL --data FILE.csv [--target COL] --engine ENGINE --out FILE.nc [--set k=v ...]
    probmodels summary FILE.nc
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

# model name -> (module, what the CSV holds): "Xy" features + a --target column, "X" features only
# (clustering), "series" one observation column (--target, or the only column), "counts" a
# document-term count matrix (one row per document).
MODELS = {
    "linear_regression": ("probmodels.regression", "Xy"),
    "logistic_regression": ("probmodels.regression", "Xy"),
    "probit_regression": ("probmodels.regression", "Xy"),
    "gp_classifier": ("probmodels.gp", "Xy"),
    "bayes_machine": ("probmodels.gp", "Xy"),
    "spike_and_slab_regression": ("probmodels.spike_slab", "Xy"),
    "spike_and_slab_probit": ("probmodels.spike_slab", "Xy"),
    "gaussian_mixture": ("probmodels.mixtures", "X"),
    "dp_mixture": ("probmodels.mixtures", "X"),
    "hmm": ("probmodels.hmm", "series"),
    "lds": ("probmodels.lds", "X"),  # every column observed, one row per time step
    "lda": ("probmodels.lda", "counts"),
}
ENGINES = ("mcmc", "vi", "laplace", "ep", "exact")  # exact: discrete programs (the demo's Bayesian network)


def _model(name):
    if name not in MODELS:
        raise SystemExit(f"error: unknown model {name!r}; choose from {', '.join(sorted(MODELS))}")
    module = __import__(MODELS[name][0], fromlist=[name])
    return getattr(module, name)


def _engine_options(engine) -> set:
    import inference

    fn = getattr(inference, engine)
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _model_help() -> str:
    lines = ["models and their hyperparameters (--set name=value):"]
    for name in sorted(MODELS):
        try:
            fn = _model(name)
        except (ImportError, SystemExit, AttributeError):
            continue
        params = [f"{p.name}={p.default!r}" for p in inspect.signature(fn).parameters.values()
                  if p.kind is inspect.Parameter.KEYWORD_ONLY]
        lines.append(f"  {name}: {', '.join(params) or '(none)'}")
    lines.append(f"engines: {', '.join(ENGINES)}")
    return "\n".join(lines)


def _read_csv(path, target, kind="Xy"):
    """Numeric CSV with a header row -> the model's data arguments (clear errors, no tracebacks)."""
    import numpy as np

    if not os.path.exists(path):
        raise SystemExit(f"error: --data file {path!r} does not exist")
    with open(path) as fh:
        header = fh.readline().strip().split(",")
    header = [h.strip().strip('"') for h in header]
    if header == [""]:
        raise SystemExit(f"error: {path} is empty; expected a header row and numeric rows")
    if kind == "series" and target is None and len(header) == 1:
        target = header[0]
    if kind in ("Xy", "series") and target is None:
        target = "y"
    if kind in ("Xy", "series") and target not in header:
        raise SystemExit(f"error: --target column {target!r} not in {path} (columns: {', '.join(header)})")
    try:
        data = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=float)
    except ValueError as exc:
        raise SystemExit(f"error: {path} is not a numeric CSV ({exc})") from exc
    data = np.atleast_2d(data)
    if data.shape[1] != len(header) or np.isnan(data).any():
        raise SystemExit(f"error: {path} has non-numeric or missing values; every column must be numeric")
    if data.size == 0 or data.shape[0] == 0:
        raise SystemExit(f"error: {path} has a header but no data rows")
    if kind == "X":
        return (data,)
    if kind == "counts":
        if (data < 0).any() or (data != np.round(data)).any():
            raise SystemExit(f"error: {path} must hold non-negative integer counts for this model")
        return (data.astype(np.int64),)
    j = header.index(target)
    if kind == "series":
        return (data[:, j],)
    return np.delete(data, j, axis=1), data[:, j]


def _parse_value(text):
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _pairs(items, flag) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"error: {flag} expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v.strip())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="probmodels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="every library model with every applicable engine")
    p_demo.add_argument("--out", default="demo-output", help="output folder (default demo-output)")
    p_demo.add_argument("--only", nargs="*", help="restrict to these models")
    p_demo.add_argument("--engines", nargs="*", choices=ENGINES, help="restrict to these engines")
    p_fit = sub.add_parser("fit", help="fit a library model to a CSV", epilog=_model_help(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p_fit.add_argument("model", help="library model name (see below)")
    p_fit.add_argument("--data", required=True, help="CSV with a header row, numeric columns")
    p_fit.add_argument("--target", default=None,
                       help="label / response column (default y; for hmm the observation column)")
    p_fit.add_argument("--engine", default="mcmc", choices=ENGINES)
    p_fit.add_argument("--out", required=True, help="output NetCDF file")
    p_fit.add_argument("--seed", type=int, default=0)
    p_fit.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="model hyperparameter, e.g. --set prior_scale=2.0")
    p_fit.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                       help="engine option, e.g. --option num_samples=500 --option guide=mvn")
    p_sum = sub.add_parser("summary", help="ArviZ summary of a saved posterior")
    p_sum.add_argument("path")
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    if args.command in ("demo", "fit"):  # the command line opts in to the persistent cache
        from inference import cache

        cache.enable()
    if args.command == "demo":
        from probmodels import demo

        rows = demo.run(args.out, only=args.only, engines=args.engines)
        return 1 if any("error" in r for r in rows) else 0
    if args.command == "summary":
        import inference

        try:
            post = inference.load(args.path)
        except (FileNotFoundError, ValueError) as exc:
            raise SystemExit(f"error: {exc}") from exc
        print(post.summary().to_string())
        ev = "none" if post.log_evidence is None else f"{post.log_evidence:.4f} ({post.evidence_method})"
        print(f"\nengine: {post.engine}   log evidence: {ev}   converged: {post.diagnostics.get('converged')}")
        return 0
    import inference

    model = _model(args.model)
    data = _read_csv(args.data, args.target, MODELS[args.model][1])
    hyper = _pairs(args.set, "--set")
    accepted = {p.name for p in inspect.signature(model).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}
    for k in hyper:
        if k not in accepted:
            raise SystemExit(f"error: --set {k}: {args.model} has no hyperparameter {k!r} "
                             f"(it has: {', '.join(sorted(accepted)) or 'none'})")
    if MODELS[args.model][1] == "series" and hyper.get("emission") in ("categorical", "poisson"):
        import numpy as np

        obs = data[0]
        if (obs < 0).any() or (obs != np.round(obs)).any():
            raise SystemExit(f"error: emission={hyper['emission']!r} needs non-negative integer observations")
        data = (obs.astype(np.int64),)
    options = _pairs(args.option, "--option")
    known = _engine_options(args.engine)
    for k in options:
        if k not in known:
            raise SystemExit(f"error: --option {k}: not an option of engine {args.engine!r} "
                             f"(options: {', '.join(sorted(known))})")
    try:
        post = getattr(inference, args.engine)(model, *data, seed=args.seed, **options,
                                                model_kwargs=hyper)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"error: {exc}") from exc
    post.save(args.out)
    print(post.summary().to_string())
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
