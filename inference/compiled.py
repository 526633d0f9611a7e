"""Compiled functions kept across engine calls, with the data passed as arguments.

An engine that closes over the data traces and compiles afresh on every call (0.3-1 s even when
the persistent cache holds the executable). Here a function is built and compiled once per
*structure*: the model, the tree of its arguments, the shape and dtype of every array leaf, the
value of every other leaf (ints, strings, ``None``: they may steer Python control flow in the
model) and the engine's options. The arrays are passed as arguments, so fitting the same model
again on new data of the same shape (SBC, cross-validation, the CLI, a benchmark's second call)
runs without tracing or compiling.

A model may treat concrete and traced inputs differently: input checks that convert data (labels
{-1, +1} to {0, 1}, NaN padding to a mask) step aside under tracing, and NumPy on an input fails.
So before a structure's first compilation its log joint at a draw from the model is computed with
the data as constants and as arguments; unless the two agree, that structure keeps its data as constants (compiled per call, as a
plain NumPyro engine does). The verdict (~0.1 s in a new process: a trace, a lowering and a
cached program) is also kept on disk beside JAX's persistent compilation cache, keyed by the
structure, the data's contents, the model's source files and the library versions, so a later
process fitting the same model to the same data (a script run again) skips the check; on other
data the check runs (see `verdict_path`). Programs called with ``persist=True`` are kept on
disk too, exported, so that a later process does not trace them again (`inference.exported`).

Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from inference import compiled
    >>> def model(x, scale=1.0):
    ...     pass
    >>> build = lambda rebuild: jax.jit(lambda arrays: rebuild(arrays)[0][0].sum())
    >>> float(compiled.call("demo", model, (np.ones(3),), {}, (), build))
    3.0
    >>> compiled.call("demo", model, (2 * np.ones(3),), {}, (), build) == 6.0   # no retrace
    Array(True, dtype=bool)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

MAX_ENTRIES = 64
_CACHE: "OrderedDict[tuple, Any]" = OrderedDict()
_CONSTANTS: set = set()  # structures whose model needs concrete data
_TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


class Split(NamedTuple):
    """The array leaves of ``(args, kwargs)``, a hashable key of everything else (``None`` when
    some leaf cannot be hashed) and ``rebuild(arrays) -> (args, kwargs)``."""

    arrays: list
    key: tuple | None
    rebuild: Callable


def _is_data(x) -> bool:
    if not isinstance(x, (np.ndarray, jax.Array)):
        return False
    try:
        return bool(np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_))
    except TypeError:  # extended dtypes (PRNG keys) stay static
        return False


def _static_key(x):
    """A non-array leaf as it enters the key: itself, or for a SciPy sparse matrix (unhashable; a
    corpus of counts for LDA) its format, shape and a digest of its contents, so refits on the
    same matrix reuse the kept functions (which close over the first call's, equal, matrix)."""
    import sys

    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and sparse.issparse(x):
        parts = [(name, getattr(x, name, None)) for name in ("data", "indices", "indptr", "row", "col", "offsets")]
        return ("sparse", x.format, x.shape, str(x.dtype), _digest(p for p in parts if isinstance(p[1], np.ndarray)))
    return x


def _digest(named_arrays) -> str:
    """A content digest of ``(name, array)`` pairs (host arrays)."""
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    for name, a in named_arrays:
        h.update(str(name).encode())
        h.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1))
    return h.hexdigest()


def split(args: tuple, kwargs: dict) -> Split:
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    where = [i for i, x in enumerate(leaves) if _is_data(x)]
    arrays = [leaves[i] for i in where]
    static = tuple((i, type(x), _static_key(x)) for i, x in enumerate(leaves) if i not in set(where))
    avals = tuple((np.shape(x), np.dtype(x.dtype).str) for x in arrays)
    key = (treedef, static, avals, bool(jax.config.jax_enable_x64))
    try:
        hash(key)
    except TypeError:
        key = None

    def rebuild(new_arrays):
        out = list(leaves)
        for i, a in zip(where, new_arrays):
            out[i] = a
        return jax.tree_util.tree_unflatten(treedef, out)

    return Split(arrays, key, rebuild)


def _entry(tag, model, args, kwargs, options, build):
    """``(fn, arrays, key, new)``: the kept function for this structure (built now if ``new``) or,
    for a structure that keeps its data as constants, a fresh build over them (``key`` None or in
    `_CONSTANTS`)."""
    sp = split(args, kwargs)
    key = None
    if sp.key is not None:
        key = (tag, model, sp.key, options)
        try:
            hash(key)
        except TypeError:
            key = None
    if key is not None and key not in _CACHE and not traceable(model, args, kwargs):
        _CONSTANTS.add(key)
    if key is None or key in _CONSTANTS:
        return build(lambda _arrays: (tuple(args), dict(kwargs))), [], None, False
    fn = _CACHE.get(key)
    if fn is not None:
        _CACHE.move_to_end(key)
        return fn, sp.arrays, key, False
    fn = _CACHE[key] = build(sp.rebuild)
    while len(_CACHE) > MAX_ENTRIES:
        _CACHE.popitem(last=False)
    return fn, sp.arrays, key, True


def call(tag: str, model, args: tuple, kwargs: dict, options: tuple, build: Callable, *extra,
         persist: bool = False):
    """``build(rebuild)(arrays, *extra)``, where ``build`` runs once per structure.

    ``build`` receives ``rebuild(arrays) -> (args, kwargs)`` and returns the function to keep
    (typically ``jax.jit``-ed); ``tag`` names the engine step and ``options`` its static settings.
    With ``persist`` the program is also kept on disk for later processes (`inference.exported`;
    only for programs without host callbacks).
    """
    fn, arrays, key, new = _entry(tag, model, args, kwargs, options, build)
    if not new:
        return fn(arrays, *extra)
    try:
        if persist:  # kept per shapes of all arguments: ``extra`` may change shape (draws)
            from inference import exported

            fn = _CACHE[key] = exported.lazy(fn, tag, model, args, kwargs, options)
        return fn(arrays, *extra)
    except _TRACER_ERRORS:  # this step needs concrete data: keep them constant from now on
        _CACHE.pop(key, None)
        _CONSTANTS.add(key)
        return build(lambda _arrays: (tuple(args), dict(kwargs)))([], *extra)


def get(tag: str, model, args: tuple, kwargs: dict, options: tuple, build: Callable, persist=False):
    """``(fn, arrays)``: ``build(rebuild)`` kept per structure (like `call`) and the arrays to pass
    it, for engines that call the kept functions several times (``arrays`` is ``[]`` when the
    structure keeps its data as constants). With ``persist`` each jitted function (or field of a
    NamedTuple of them; ``persist`` may name the fields) is also kept on disk, per shapes of its
    arguments (`inference.exported`)."""
    fn, arrays, key, new = _entry(tag, model, args, kwargs, options, build)
    if new and persist:
        from inference import exported

        def wrap(name, f):
            chosen = persist is True or name in persist
            return exported.lazy(f, f"{tag}.{name}", model, args, kwargs, options) if chosen and hasattr(f, "trace") else f

        if isinstance(fn, tuple) and hasattr(fn, "_fields"):
            fn = fn._replace(**{name: wrap(name, getattr(fn, name)) for name in fn._fields})
        else:
            fn = wrap("", fn)
        _CACHE[key] = fn
    return fn, arrays


def traceable(model, args: tuple, kwargs: dict) -> bool:
    """Whether ``model`` gives the same log joint with its array arguments traced as with them
    concrete, at a draw of its own latents (once per structure; the verdict is read from and
    written to the persistent cache directory when one is in use, see `verdict_path`)."""

    def compute():
        sp = split(args, kwargs)
        if not sp.arrays:
            return True
        path = verdict_path(model, sp.key, sp.arrays)
        stored = _read_verdict(path)
        if stored is not None:
            return stored
        try:
            fn, consts, arrays = check_program(model, args, kwargs)
            concrete, lazy = (np.asarray(v) for v in fn(consts, arrays))
        except Exception:  # noqa: BLE001 - any failure means: keep the data concrete
            ok = False
        else:
            rtol = 1e-6 if jax.config.jax_enable_x64 else 1e-4  # rounding differs between programs
            ok = bool(np.allclose(concrete, lazy, rtol=rtol, atol=1e-8, equal_nan=True))
        _write_verdict(path, ok)
        return ok

    return memo("traceable", model, args, kwargs, compute)


VERDICT_PREFIX = "probmodels-traceable-"
_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def _simple(x) -> bool:
    """Values whose ``repr`` is the same in every process (no object addresses)."""
    if isinstance(x, (tuple, list)):
        return all(_simple(v) for v in x)
    if isinstance(x, dict):
        return all(_simple(k) and _simple(v) for k, v in x.items())
    return isinstance(x, _SIMPLE)


MAX_HASHED_BYTES = 256 * 2**20  # larger data are not hashed: their verdict is not kept on disk


def verdict_path(model, key, arrays) -> str | None:
    """The file holding `traceable`'s verdict for ``model`` on the structure ``key`` with these
    data ``arrays`` in the persistent cache directory (``None``: not kept on disk). The name hashes
    everything the check's outcome depends on: the structure (tree, shapes, dtypes, static leaves),
    the data's contents (a model may convert concrete data that it leaves alone when traced, so a
    verdict on other values would not carry over), the model's module, name, defaults and closure
    values, the size and mtime of every loaded file of its top-level package and of this one, and
    the versions of jax and numpyro. Only plain functions with defaults and closures of plain
    values qualify (other objects' ``repr`` can differ between processes); a structure whose
    ``repr`` holds an object address never matches again, which only costs the check."""
    import hashlib
    import inspect
    import os
    import types

    directory = _verdict_dir()
    if key is None or not directory or not isinstance(model, types.FunctionType):
        return None
    arrays = [np.asarray(a) for a in arrays]  # one host copy, for the size and the digest
    if sum(a.nbytes for a in arrays) > MAX_HASHED_BYTES:
        return None
    closure = tuple(c.cell_contents for c in model.__closure__ or ())
    extras = (model.__defaults__, model.__kwdefaults__, closure)
    if not _simple(extras):
        return None
    try:
        import numpyro

        source = inspect.getsourcefile(model)
        if source is None:
            return None
        text = repr((model.__module__, model.__qualname__, _stamp(source), extras, key, _digest(enumerate(arrays)),
                     jax.__version__, numpyro.__version__,
                     _package_stamps((model.__module__.split(".")[0], "inference"))))
    except (OSError, TypeError, ValueError):
        return None
    return os.path.join(directory, VERDICT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40])


def _verdict_dir() -> str | None:
    """The persistent compilation cache's directory (``None`` when off: verdicts stay in memory)."""
    return jax.config.jax_compilation_cache_dir


def _stamp(path: str) -> tuple:
    import os

    st = os.stat(path)
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)


def _package_stamps(packages: tuple) -> tuple:
    """Path, size and mtime of every loaded module file of these top-level packages: an edit to
    any of them (the model's helpers, this package) changes the verdict's name."""
    import sys

    files = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in packages:
            file = getattr(module, "__file__", None)
            if file:
                files.add(file)
    return tuple(_stamp(f) for f in sorted(files))


def _read_verdict(path: str | None) -> bool | None:
    if path is None:
        return None
    try:
        with open(path) as f:
            value = f.read()
    except OSError:
        return None
    return {"1": True, "0": False}.get(value)


def _write_verdict(path: str | None, ok: bool) -> None:
    if path is not None:
        write_file(path, b"1" if ok else b"0")


def write_file(path: str, data: bytes) -> None:
    """Written to a temporary name and renamed (another process never reads half a file); a
    cache directory that cannot be written is left as it is."""
    import os

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass


def check_program(model, args: tuple, kwargs: dict):
    """``(fn, consts, arrays)`` for `traceable`: ``fn(consts, arrays)`` is one jitted program that
    draws the latents and returns the log joint with the data as the model saw them concretely
    and with the data traced. The concrete data become the jaxpr's constants ``consts`` and are
    passed as arguments, not embedded, so the program does not depend on their values and the
    persistent cache serves it for new data of the same shapes (embedded, a first fit on new data
    compiled it: ~1 s for eight schools)."""
    from numpyro import handlers
    from numpyro.infer import init_to_uniform
    from numpyro.infer.util import log_density

    sp = split(args, kwargs)

    def draw():  # compiled, not eager: op-by-op dispatch compiles every primitive anew
        seeded = handlers.seed(model, rng_seed=0)
        try:
            trace = handlers.trace(seeded).get_trace(*args, **kwargs)
        except NotImplementedError:  # a site that cannot be sampled (ImproperUniform)
            sub = handlers.substitute(seeded, substitute_fn=init_to_uniform)
            trace = handlers.trace(sub).get_trace(*args, **kwargs)
        return {n: s["value"] for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}

    def with_constants():  # the model sees its concrete data: a draw and its log joint
        p = draw()
        return p, log_density(model, args, kwargs, p)[0]

    closed, shapes = jax.make_jaxpr(with_constants, return_shape=True)()
    out_tree = jax.tree.structure(shapes)

    def both(consts, arrays):  # one program: the constants version, then the traced one
        p, lp_const = jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, consts))
        a, kw = sp.rebuild(arrays)
        return lp_const, log_density(model, a, kw, p)[0]

    return jax.jit(both), list(closed.consts), sp.arrays


def memo(tag: str, model, args: tuple, kwargs: dict, compute: Callable):
    """``compute()`` once per structure, for facts that depend only on it (site names)."""
    sp = split(args, kwargs)
    key = None if sp.key is None else (tag, model, sp.key)
    try:
        if key is not None and key in _CACHE:
            return _CACHE[key]
    except TypeError:
        key = None
    value = compute()
    if key is not None:
        _CACHE[key] = value
    return value


def clear() -> None:
    """Forget every kept function (``jax.clear_caches()`` frees the executables themselves)."""
    from inference import exported

    _CACHE.clear()
    _CONSTANTS.clear()
    exported.clear()
