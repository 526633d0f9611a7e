"""The notebooks in notebooks/ cannot rot: by default every code cell parses and every call of a
function of `inference` or `probmodels` names the function and keyword arguments it has (the
API the notebooks use, checked in a second); with the slow checks (``make test-all``) every
notebook executes top to bottom (~250 s on two workers, each notebook in a fresh kernel)."""

import ast
import importlib
import inspect
import os
import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("*.ipynb"))
PACKAGES = ("inference", "probmodels")


def _code(path):
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _names(tree):
    """Local names bound by the notebook's imports of our packages: name -> object."""
    out = {}
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
            obj = getattr(obj, p)  # AttributeError: the notebook names what does not exist
    return obj


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_calls_name_existing_functions_and_arguments(path):
    tree = ast.Module(body=[s for src in _code(path) for s in ast.parse(src).body], type_ignores=[])
    names = _names(tree)
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
        if fn is getattr(names.get("inference"), "fit", None):  # the engine named, else any engine
            engine = [k.value.value for k in node.keywords if k.arg == "engine" and isinstance(k.value, ast.Constant)]
            chain += [getattr(names["inference"], e) for e in (engine or ("mcmc", "vi", "laplace", "ep"))]
        if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(chain[-1]).parameters.values()):
            model = _resolve(node.args[0], names) if node.args else None
            chain.append(model)
        if not callable(chain[-1]) or any(
                p.kind is p.VAR_KEYWORD for p in inspect.signature(chain[-1]).parameters.values()):
            continue
        allowed = {name for f in chain for name in inspect.signature(f).parameters}
        bad = [k.arg for k in node.keywords if k.arg is not None and k.arg not in allowed]
        assert not bad, f"{path.name}: {fn.__module__}.{fn.__name__} has no argument(s) {bad}"
        checked += 1
    assert checked, f"{path.name}: no call of {PACKAGES} found"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_backup = dict(os.environ)
    os.environ.update({"MPLBACKEND": "Agg", "INFERENCE_PROGRESS": "0"})
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
