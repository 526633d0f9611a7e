"""JAX's persistent compilation cache (and `inference.exported`'s programs beside it), opt-in:
importing `inference` changes no JAX configuration. Switch it on with ``inference.cache.enable()``
or the environment variable ``INFERENCE_COMPILATION_CACHE=1`` (or ``=/some/dir``), read at the
first engine call; ``probmodels demo`` and ``probmodels fit`` switch it on themselves
(``INFERENCE_COMPILATION_CACHE=0`` keeps it off there too). A second process fitting the same
model then reads its programs instead of compiling them. A cache directory the user already
configured in JAX is left alone. ``INFERENCE_EXPORTED=0`` keeps the executables but not the
traced programs beside them (`inference.exported`).

Every new data shape adds programs, so the directory would grow without bound (7 GB, 34,000 files
after some months of this project's benchmarks). At most once a day, when a process that used the
cache exits, the oldest-written entries are deleted until the directory holds at most
``INFERENCE_COMPILATION_CACHE_MAX_MB`` (default 2048; 0 or less: never). A deleted program is
compiled again when next needed. Scanning 34,000 entries takes ~0.1 s, paid at exit, not import.
"""

from __future__ import annotations

import atexit
import os
import time

DEFAULT_MAX_MB = 2048
PRUNE_EVERY_S = 24 * 3600
STAMP = ".probmodels-pruned"


def default_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "probmodels", "jax")


_OFF = ("0", "false", "False", "off", "")
_ON = ("1", "true", "True", "on")
_ENVIRONMENT_READ = {"done": False}


def enable(path: str | None = None) -> str | None:
    """Turn the cache on (``path`` defaults to ``$INFERENCE_COMPILATION_CACHE`` when that names a
    directory, else ``$XDG_CACHE_HOME/probmodels/jax``); returns the directory in use, or ``None``
    when ``INFERENCE_COMPILATION_CACHE=0`` forbids it or the directory cannot be made.

    Example:
        >>> import os, tempfile, jax
        >>> from inference import cache
        >>> before = jax.config.jax_compilation_cache_dir
        >>> d = tempfile.mkdtemp()
        >>> cache.enable(d) == (before or d) or os.environ.get("INFERENCE_COMPILATION_CACHE") in cache._OFF
        True
    """
    import jax

    setting = os.environ.get("INFERENCE_COMPILATION_CACHE")
    if setting is not None and setting in _OFF:
        return None
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    if path is None:
        path = setting if setting is not None and setting not in _ON else default_dir()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None  # read-only home: run without the cache rather than fail
    jax.config.update("jax_compilation_cache_dir", path)
    # every program, even the small ones that op-by-op model traces compile: a new process then
    # reads them (~10 ms each) instead of compiling them (~25 ms each). JAX's size cap
    # (jax_compilation_cache_max_size) is left unset: with it every read took longer (first fit
    # 1.8 s -> 4.4 s); delete the directory to reclaim the space.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    max_bytes = _max_bytes()
    if max_bytes > 0:
        atexit.register(prune_if_due, path, max_bytes)
    return path


def from_environment() -> str | None:
    """`enable` if ``INFERENCE_COMPILATION_CACHE`` asks for it (``1`` or a directory); read once,
    at the first engine call (`inference.compiled.scope`). Returns the directory, or ``None``."""
    if _ENVIRONMENT_READ["done"]:
        return None
    _ENVIRONMENT_READ["done"] = True
    setting = os.environ.get("INFERENCE_COMPILATION_CACHE")
    if setting is None or setting in _OFF:
        return None
    return enable()


def _max_bytes() -> int:
    raw = os.environ.get("INFERENCE_COMPILATION_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        mb = float(raw)
        if mb != mb:
            raise ValueError
    except ValueError:
        import warnings

        warnings.warn(f"INFERENCE_COMPILATION_CACHE_MAX_MB must be a number of megabytes, got {raw!r}; "
                      f"using {DEFAULT_MAX_MB}", RuntimeWarning, stacklevel=2)
        return DEFAULT_MAX_MB * 1024**2
    return int(mb * 1024**2) if mb > 0 else 0


def prune_if_due(path: str, max_bytes: int, every_s: float = PRUNE_EVERY_S) -> int | None:
    """`prune` unless it ran less than ``every_s`` ago (a stamp file's mtime); the number of files
    deleted, or None when not due. Never raises: a cache it cannot manage is left as it is."""
    stamp = os.path.join(path, STAMP)
    try:
        if time.time() - os.path.getmtime(stamp) < every_s:
            return None
    except OSError:
        pass
    try:
        with open(stamp, "w"):
            pass
        return prune(path, max_bytes)
    except OSError:
        return None


def prune(path: str, max_bytes: int) -> int:
    """Delete the oldest-written cache entries until the files in ``path`` total at most
    ``max_bytes``; returns how many were deleted. Another process reading an entry keeps its open
    file (POSIX); one that misses an entry compiles and writes it again.

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> for i in range(3):
        ...     with open(os.path.join(d, f"entry{i}"), "wb") as f:
        ...         _ = f.write(b"x" * 100)
        ...     os.utime(os.path.join(d, f"entry{i}"), (1000 + i, 1000 + i))
        >>> prune(d, max_bytes=150), sorted(os.listdir(d))
        (2, ['entry2'])
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    if not os.path.isdir(path):
        raise ValueError(f"path: {path!r} is not a directory")
    entries, total = [], 0
    with os.scandir(path) as it:
        for e in it:
            if e.name == STAMP or not e.is_file(follow_symlinks=False):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, e.path))
            total += st.st_size
    removed = 0
    for _, size, file in sorted(entries):
        if total <= max_bytes:
            break
        try:
            os.remove(file)
        except OSError:
            continue
        total -= size
        removed += 1
    return removed
