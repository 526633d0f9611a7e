"""The API check shared by the notebook and docstring tests: every call of a function of
`inference` or `probmodels` in a piece of code names a function that exists and keyword
arguments it (or the engine and model it passes them to) accepts. Checked without running the
code, in milliseconds: what stays checked by default when running the code takes long."""

import ast
import importlib
import inspect

PACKAGES = ("inference", "probmodels")


def _names(tree, scope=None):
    """Local names bound by the code's imports of our packages (and, from ``scope``, the module
    globals a docstring example uses unqualified): name -> object."""
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    out = {k: v for k, v in (scope or {}).items()
           if k not in assigned and (getattr(v, "__module__", None) or "").split(".")[0] in PACKAGES}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    out[(a.asname or a.name).split(".")[0]] = importlib.import_module(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            module = importlib.import_module(node.module)
            for a in node.names:
                obj = getattr(module, a.name, None)
                if obj is None:
                    obj = importlib.import_module(f"{node.module}.{a.name}")
                out[a.asname or a.name] = obj
    return out


def _resolve(node, names):
    """The object an ``a.b.c`` expression names, when it starts at an imported name; else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    obj = names[node.id]
    for p in reversed(parts):
        if not hasattr(obj, p) and inspect.ismodule(obj):
            obj = importlib.import_module(f"{obj.__name__}.{p}")
        else:
            obj = getattr(obj, p)  # AttributeError: the code names what does not exist
    return obj


def check_calls(tree: ast.Module, where: str, scope: dict | None = None) -> int:
    """Assert every resolvable call in ``tree`` names existing functions and keyword arguments;
    returns how many calls were checked."""
    names = _names(tree, scope)
    fit = importlib.import_module("inference").fit
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) or isinstance(node, ast.Name):
            _resolve(node, names)
        if not isinstance(node, ast.Call):
            continue
        fn = _resolve(node.func, names)
        if not callable(fn) or inspect.isclass(fn):
            continue
        # an engine passes other keywords to the model; `inference.fit` to the engine it names
        chain = [fn]
        if fn is fit:  # the engine named, else any engine
            engine = [k.value.value for k in node.keywords if k.arg == "engine" and isinstance(k.value, ast.Constant)]
            chain += [getattr(importlib.import_module("inference"), e) for e in (engine or ("mcmc", "vi", "laplace", "ep"))]
        if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(chain[-1]).parameters.values()):
            model = _resolve(node.args[0], names) if node.args else None
            chain.append(model)
        if not callable(chain[-1]) or any(
                p.kind is p.VAR_KEYWORD for p in inspect.signature(chain[-1]).parameters.values()):
            continue
        allowed = {name for f in chain for name in inspect.signature(f).parameters}
        bad = [k.arg for k in node.keywords if k.arg is not None and k.arg not in allowed]
        assert not bad, f"{where}: {fn.__module__}.{fn.__name__} has no argument(s) {bad}"
        checked += 1
    return checked
