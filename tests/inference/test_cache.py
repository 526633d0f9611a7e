"""inference.cache: the persistent compilation cache is opt-in (issue 21, finding 9: importing
`inference` switched it on for the user's whole process)."""

import os
import subprocess
import sys

_SCRIPT = """
import jax
watched = ("jax_compilation_cache_dir", "jax_enable_x64", "jax_persistent_cache_min_compile_time_secs",
           "jax_persistent_cache_min_entry_size_bytes", "jax_default_matmul_precision")
before = {k: getattr(jax.config, k) for k in watched}
import inference, probmodels
after = {k: getattr(jax.config, k) for k in watched}
print("IMPORT", before == after, after["jax_compilation_cache_dir"])
import numpyro, numpyro.distributions as dist
def coin():
    numpyro.sample("c", dist.Bernoulli(0.3))
inference.exact(coin)  # an engine call that compiles next to nothing (a Laplace fit: ~1 s a child)
print("FIT", jax.config.jax_compilation_cache_dir)
"""


def _run(env_value, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INFERENCE_COMPILATION_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    if env_value is not None:
        env["INFERENCE_COMPILATION_CACHE"] = env_value
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.split(" ")[0] in ("IMPORT", "FIT"))
    return lines["IMPORT"], lines["FIT"]


def test_importing_changes_no_jax_configuration_and_the_cache_is_opt_in(tmp_path):
    imported, fitted = _run(None, tmp_path)
    assert imported == "True None" and fitted == "None"  # nothing, not even after a fit
    imported, fitted = _run(str(tmp_path / "mine"), tmp_path)
    assert imported == "True None" and fitted == str(tmp_path / "mine")  # asked for: at the first fit
    imported, fitted = _run("1", tmp_path)
    assert fitted == str(tmp_path / "xdg" / "probmodels" / "jax")
    imported, fitted = _run("0", tmp_path)
    assert fitted == "None"
