"""JAX's persistent compilation cache, on by default so a second process fitting the same model
does not compile again. Opt out with ``INFERENCE_COMPILATION_CACHE=0`` (or point it elsewhere with
``INFERENCE_COMPILATION_CACHE=/some/dir``); a cache directory the user already configured in JAX
is left alone."""

from __future__ import annotations

import os


def default_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "probmodels", "jax")


def enable(path: str | None = None) -> str | None:
    """Turn the cache on (``path`` defaults to ``$XDG_CACHE_HOME/probmodels/jax``); returns the
    directory in use, or ``None`` when switched off."""
    import jax

    setting = os.environ.get("INFERENCE_COMPILATION_CACHE", "1")
    if setting in ("0", "false", "False", "off"):
        return None
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    path = path or (setting if setting not in ("1", "true", "True", "on") else default_dir())
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
    return path
