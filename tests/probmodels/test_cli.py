"""The command line end to end: CSV in, NetCDF out, loaded back; clear errors for bad input."""

import numpy as np
import pytest

import inference
from probmodels import cli

FAST = {
    "mcmc": ["num_samples=150", "num_warmup=150", "num_chains=1"],
    "vi": ["steps=3000", "learning_rate=0.05", "num_samples=150", "check_every=250"],
    "laplace": ["num_samples=150"],
    "ep": ["num_samples=150"],
}


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.where(X @ np.array([1.5, -1.0]) + 0.3 * rng.normal(size=60) > 0, 1, -1)
    path = tmp_path_factory.mktemp("cli") / "data.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,label", comments="")
    return str(path), X, y


@pytest.mark.parametrize("engine", ["mcmc", "vi", "laplace", "ep"])
def test_fit_writes_a_posterior_that_loads_back(engine, csv_file, tmp_path, capsys):
    path, X, y = csv_file
    out = str(tmp_path / f"{engine}.nc")
    argv = ["fit", "probit_regression", "--data", path, "--target", "label", "--engine", engine,
            "--out", out, "--set", "prior_scale=2.0"]
    for opt in FAST[engine]:
        argv += ["--option", opt]
    assert cli.main(argv) == 0
    post = inference.load(out)
    assert post.engine == engine
    assert post.samples["w"].shape[-1] == 2
    # the separating direction (1.5, -1) is found by every engine
    w = post.mean("w")
    assert w[0] > 0 > w[1]
    np.testing.assert_array_equal(np.asarray(post.observed_data["y"]), (y > 0).astype(int))  # {-1,1} -> {0,1}
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["summary", out]) == 0
    assert "w[0]" in capsys.readouterr().out


def test_help_lists_models_engines_and_hyperparameters(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for word in ("linear_regression", "probit_regression", "prior_scale", "mcmc", "laplace", "ep"):
        assert word in text


@pytest.mark.parametrize("argv, message", [
    (["fit", "probit_regression", "--data", "/no/such.csv", "--out", "x.nc"], "does not exist"),
    (["fit", "no_such_model", "--data", "{csv}", "--out", "x.nc"], "unknown model"),
    (["fit", "probit_regression", "--data", "{csv}", "--target", "nope", "--out", "x.nc"], "'nope' not in"),
    (["fit", "probit_regression", "--data", "{csv}", "--target", "label", "--set", "bogus=1", "--out", "x.nc"],
     "no hyperparameter 'bogus'"),
    (["fit", "probit_regression", "--data", "{csv}", "--target", "label", "--option", "steps=5",
      "--engine", "laplace", "--out", "x.nc"], "not an option of engine"),
    (["fit", "probit_regression", "--data", "{bad}", "--out", "x.nc"], "non-numeric"),
    (["summary", "/no/such.nc"], "error"),
])
def test_bad_input_is_a_clear_error(argv, message, csv_file, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,y\n1.0,1\nfoo,-1\n")
    argv = [a.format(csv=csv_file[0], bad=str(bad)) for a in argv]
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert message in str(exc.value)


def test_wrong_labels_name_the_argument(csv_file, tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("a,y\n0.5,3\n-0.5,7\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "probit_regression", "--data", str(path), "--engine", "laplace",
                  "--out", str(tmp_path / "x.nc")])
    assert "y" in str(exc.value)
