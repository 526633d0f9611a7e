"""The notebooks in notebooks/ cannot rot: by default every code cell parses and every call of a
function of `inference` or `probmodels` names the function and keyword arguments it has (the
API the notebooks use, checked in a second); with the slow checks (``make test-all``) every
notebook executes top to bottom (~250 s on two workers, each notebook in a fresh kernel)."""

import ast
import os
import pathlib

import nbformat
import pytest
from _api_calls import PACKAGES, check_calls

ROOT = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("*.ipynb"))


def _code(path):
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_calls_name_existing_functions_and_arguments(path):
    tree = ast.Module(body=[s for src in _code(path) for s in ast.parse(src).body], type_ignores=[])
    checked = check_calls(tree, path.name)
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
