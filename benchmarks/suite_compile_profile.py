"""Where `make test`'s time goes: a pytest plugin that times each test and the XLA compilations
inside it, and counts programs compiled more than once in one process (same module text).

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -n 2 --dist worksteal -q -m "not slow" \
        -p suite_compile_profile
    .venv/bin/python benchmarks/suite_compile_profile.py     # summary of the per-worker files

Each worker writes ``suite-compile-profile-<worker>.json`` in the working directory (override with
``SUITE_PROFILE_DIR``): rows ``[test id, seconds, compile seconds, compilations]`` and the repeated
programs. A compilation served by the persistent compilation cache is not counted (it is a read).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sys
import time

import pytest

_ACC = {"seconds": 0.0, "count": 0}
_SEEN: dict = {}  # module-text digest -> [compilations, seconds, name]
_ROWS: list = []
_PROGRAMS: list = []  # [test id, program name, seconds, module text characters]
_CURRENT = {"test": ""}


def _install():
    from jax._src import compiler

    original = compiler.backend_compile_and_load

    def timed(backend, module, *args, **kwargs):
        text = re.sub(r"@jit_\w+|sym_name = \"[^\"]*\"|module @\S+", "",
                      module.operation.get_asm(enable_debug_info=False))
        digest = hashlib.sha1(text.encode()).hexdigest()
        t0 = time.perf_counter()
        out = original(backend, module, *args, **kwargs)
        dt = time.perf_counter() - t0
        _ACC["seconds"] += dt
        _ACC["count"] += 1
        name = str(module.operation.attributes["sym_name"])
        _PROGRAMS.append([_CURRENT["test"], name, dt, len(text)])
        seen = _SEEN.setdefault(digest, [0, 0.0, name])
        seen[0] += 1
        seen[1] += dt
        return out

    compiler.backend_compile_and_load = timed


_DURATIONS: dict = {}  # jax.monitoring event -> [count, seconds] (tracing, lowering, compiling)


def _record(event, seconds, **_):
    d = _DURATIONS.setdefault(event, [0, 0.0])
    d[0] += 1
    d[1] += seconds


def pytest_configure(config):
    import jax

    _install()
    jax.monitoring.register_event_duration_secs_listener(_record)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, n0, t0 = _ACC["seconds"], _ACC["count"], time.perf_counter()
    _CURRENT["test"] = item.nodeid
    yield
    _ROWS.append([item.nodeid, time.perf_counter() - t0, _ACC["seconds"] - c0, _ACC["count"] - n0])


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    repeated = [[name, c, s] for c, s, name in _SEEN.values() if c > 1]
    path = os.path.join(os.environ.get("SUITE_PROFILE_DIR", "."), f"suite-compile-profile-{worker}.json")
    with open(path, "w") as f:
        json.dump({"rows": _ROWS, "repeated": repeated, "programs": _PROGRAMS, "durations": _DURATIONS}, f)


def summary(paths) -> str:
    rows, repeated = [], []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        rows += d["rows"]
        repeated += d["repeated"]
    total, comp, count = (sum(r[i] for r in rows) for i in (1, 2, 3))
    waste = sum(s * (c - 1) / c for _, c, s in repeated)
    lines = [f"{len(rows)} tests: {total:.0f} s summed over tests, XLA compilation {comp:.0f} s "
             f"({100 * comp / max(total, 1e-9):.0f}%) in {count} compilations; programs compiled again in "
             f"the same process: {sum(c - 1 for _, c, _ in repeated)} compilations, {waste:.1f} s",
             "longest tests (seconds, compile seconds, compilations):"]
    for r in sorted(rows, key=lambda r: -r[1])[:25]:
        lines.append(f"  {r[1]:6.1f} {r[2]:6.1f} {r[3]:5d}  {r[0]}")
    return "\n".join(lines)


if __name__ == "__main__":
    found = sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "suite-compile-profile-*.json")))
    if not found:
        sys.exit("no suite-compile-profile-*.json here: run pytest with -p suite_compile_profile first")
    print(summary(found))
