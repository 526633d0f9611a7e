"""Helpers of the ``*_revisions.py`` benchmarks: a base revision checked out in a temporary ``git
worktree``, and a child process that runs a code string against one checkout (compilation cache
and progress bars off, one XLA thread) and prints one JSON line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project root


@contextlib.contextmanager
def worktree(revision: str):
    """The path of ``revision`` checked out in a temporary worktree (removed afterwards)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", path, revision], cwd=HERE, check=True,
                       capture_output=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", path], cwd=HERE, capture_output=True)


def run_child(root: str, code: str, *argv, xla_flags: str = "--xla_cpu_multi_thread_eigen=false",
              timeout: float = 3600):
    """Run ``code`` with ``root``'s packages first on the path; the JSON of its last output line."""
    env = dict(os.environ, PYTHONPATH=root, INFERENCE_COMPILATION_CACHE="0", INFERENCE_PROGRESS="0",
               XLA_FLAGS=xla_flags)
    res = subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])
