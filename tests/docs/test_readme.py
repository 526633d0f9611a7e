"""The README's quickstart runs as written (in a scratch directory)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_quickstart_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python block"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INFERENCE_PROGRESS", "0")
    namespace = {}
    exec(compile(blocks[0], "README quickstart", "exec"), namespace)
    post = namespace["post"]
    assert post.engine == "mcmc" and (tmp_path / "fit.nc").exists()
