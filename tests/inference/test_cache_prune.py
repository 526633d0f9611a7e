"""inference.cache: the persistent compilation cache stays under its size cap."""

import os
import time

import pytest

from inference import cache


def _entry(path, name, size, age_s):
    file = os.path.join(path, name)
    with open(file, "wb") as f:
        f.write(b"x" * size)
    t = time.time() - age_s
    os.utime(file, (t, t))
    return file


def test_prune_deletes_the_oldest_entries_down_to_the_cap(tmp_path):
    files = [_entry(tmp_path, f"jit_f{i}-cache", 1000, age_s=100 * (10 - i)) for i in range(10)]  # f0 oldest
    os.makedirs(tmp_path / "sub")  # not a file: left alone
    assert cache.prune(str(tmp_path), 4500) == 6
    assert [os.path.exists(f) for f in files] == [False] * 6 + [True] * 4
    assert cache.prune(str(tmp_path), 4500) == 0
    assert os.path.isdir(tmp_path / "sub")


def test_prune_runs_at_most_once_per_period(tmp_path):
    for i in range(3):
        _entry(tmp_path, f"jit_g{i}-cache", 1000, age_s=10 * (3 - i))
    assert cache.prune_if_due(str(tmp_path), 1500) == 2  # no stamp yet: due
    _entry(tmp_path, "jit_new-cache", 1000, age_s=0)
    assert cache.prune_if_due(str(tmp_path), 1500) is None  # pruned a moment ago
    assert len([f for f in os.listdir(tmp_path) if f.endswith("-cache")]) == 2
    assert cache.prune_if_due(str(tmp_path), 1500, every_s=0) == 1  # due again: the older one goes
    assert os.path.exists(tmp_path / "jit_new-cache")
    assert cache.prune_if_due(str(tmp_path / "missing"), 1500) is None  # never raises


def test_cap_from_environment(monkeypatch):
    monkeypatch.setenv("INFERENCE_COMPILATION_CACHE_MAX_MB", "1.5")
    assert cache._max_bytes() == int(1.5 * 1024**2)
    monkeypatch.setenv("INFERENCE_COMPILATION_CACHE_MAX_MB", "0")
    assert cache._max_bytes() == 0
    monkeypatch.delenv("INFERENCE_COMPILATION_CACHE_MAX_MB")
    assert cache._max_bytes() == cache.DEFAULT_MAX_MB * 1024**2


def test_bad_arguments_raise_and_a_malformed_cap_warns(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="max_bytes"):
        cache.prune(str(tmp_path), -1)
    with pytest.raises(ValueError, match="max_bytes"):
        cache.prune(str(tmp_path), 1.5)
    with pytest.raises(ValueError, match="path"):
        cache.prune(str(tmp_path / "missing"), 10)
    monkeypatch.setenv("INFERENCE_COMPILATION_CACHE_MAX_MB", "lots")
    with pytest.warns(RuntimeWarning, match="INFERENCE_COMPILATION_CACHE_MAX_MB"):
        assert cache._max_bytes() == cache.DEFAULT_MAX_MB * 1024**2
    monkeypatch.setenv("INFERENCE_COMPILATION_CACHE_MAX_MB", "-5")
    assert cache._max_bytes() == 0
