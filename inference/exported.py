"""Engine programs kept on disk as exported StableHLO, so that a new process skips tracing them.

`inference.compiled` keeps an engine's program per model structure within one process. A new
process (a script run again, a fresh worker) traces and lowers it again before JAX's persistent
compilation cache can serve its executable: ~0.3 s of a 0.6-0.9 s NUTS fit. A program passed to
`keep` is therefore written once with `jax.export` beside that cache (~60 KB for NUTS), and a
later process reads it back (~1 ms) and only lowers the small wrapper that calls it, whose
executable the cache serves. Every process runs the wrapper, the one that writes the file too, so
a seed gives the same draws whether the program was traced or read.

The file's name hashes everything the program depends on:

- the engine step and its options, the structure of the data (tree, shapes, dtypes, other leaves)
  and the shapes of the step's other arguments;
- the model, by its `inference.compiled.fingerprint`: the jaxpr of one trace of it with the data
  traced, that jaxpr's constants and a table of its sites. So an edit of the model's code, a
  helper or a global it reads changes the name, and its source files are not needed;
- the files of this package, the versions of jax, jaxlib, numpyro and optax, and the platform,
  device kind and number of devices.

``INFERENCE_EXPORTED=0`` keeps no program (the persistent cache still serves executables).

Programs that depend on their arguments only (EP's start, sweeps, evidence and Gaussian of the
latents, the Bayes machine's EP loop) are kept with `flat` instead, named by their arguments' tree
and shapes: every model whose EP problem has that structure shares them.

Kept this way: the NUTS chains (without a progress bar: a host callback cannot be exported),
Laplace's programs, EP's programs (through flat arrays, `flat`), VI's draws, every engine's
pointwise log likelihood and the log joint (``lp``) of EP's and ESS's draws (see the ``persist``
argument of `inference.compiled.call` and `inference.compiled.get`). Nothing is kept when the
persistent cache is off, or when the name would not be the same in another process (an option or
a leaf whose ``repr`` holds an object address). A program that cannot be exported leaves an empty
file, so later processes do not try again. Loading a file runs no Python code; a file that does
not deserialize is deleted and the program exported again.

Example:
    >>> import numpy as np, numpyro, numpyro.distributions as dist
    >>> from inference import exported
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    ...     numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
    >>> a, b = exported.fingerprint(model, (np.ones(3),), {}), exported.fingerprint(model, (np.zeros(3),), {})
    >>> a == b, len(a)   # the data's values do not enter: the program takes them as arguments
    (True, 64)
"""

from __future__ import annotations

import hashlib
import os

import jax
import numpy as np

from inference import compiled

PREFIX = "probmodels-program-"
_ADDRESS = compiled._ADDRESS
_NOT_KEPT = object()  # an empty file: this program cannot be exported
_FLAT: list = []  # the in-process programs of each `flat` function (emptied by `clear`)


def _enabled() -> bool:
    """Whether programs are kept: the persistent cache is on and ``INFERENCE_EXPORTED`` is not
    ``0``. Off, each process traces its programs and the cache still serves their executables:
    the test suite runs so (tests/conftest.py), as a first process compiles a read-back program
    more slowly than the one it traced (NUTS, 2.5 -> 3.0 s) and gains only in a later process."""
    from inference.cache import _OFF

    return bool(compiled.cache_dir()) and os.environ.get("INFERENCE_EXPORTED", "1") not in _OFF


def fingerprint(model, args: tuple, kwargs: dict) -> str | None:
    """`inference.compiled.fingerprint`'s portable digest of what ``model`` computes (``None``:
    not available, or not reproducible in another process)."""
    fp = compiled.fingerprint(model, args, kwargs)
    return None if fp is None else fp.portable


def path(tag: str, model, args: tuple, kwargs: dict, options: tuple, extra: tuple) -> str | None:
    """The file for the program of engine step ``tag`` with ``options`` on this model and
    structure, called with the further arguments ``extra`` (their shapes enter the name), or
    ``None`` when it is not kept (cache off, or a name another process would not reproduce)."""
    if not _enabled():
        return None
    sp = compiled.split(args, kwargs)
    if sp.key is None or not compiled._simple(options):
        return None
    treedef, static, avals, x64 = sp.key
    static = [(i, f"{t.__module__}.{t.__qualname__}", v) for i, t, v in static]
    extra_avals = _avals(extra)
    if extra_avals is None or not compiled._simple([v for *_, v in static]):
        return None
    fp = fingerprint(model, args, kwargs)
    if fp is None:
        return None
    return _file((tag, options, str(treedef), static, avals, x64, extra_avals, fp))


def _avals(tree) -> tuple | None:
    """The tree's structure and its leaves' shapes and dtypes; ``None`` for leaves without a plain
    dtype (typed PRNG keys, Python scalars): not kept."""
    leaves, treedef = jax.tree.flatten(tree)
    shapes = _shapes(leaves)
    return None if shapes is None else (str(treedef), shapes)


def _shapes(leaves) -> tuple | None:
    try:
        return tuple((np.shape(x), np.dtype(x.dtype).str) for x in leaves)
    except (AttributeError, TypeError):
        return None


def _file(what: tuple) -> str | None:
    """The file named by a hash of ``what`` and of the environment (this package's files, the
    jax/jaxlib/numpyro/optax versions, platform, device kind and count); ``None`` when the cache
    is off or the text holds an object address (another process would not reproduce it)."""
    import jaxlib
    import numpyro
    import optax

    directory = compiled.cache_dir()
    if not directory or not _enabled():
        return None
    devices = jax.local_devices()
    text = repr(what + (jax.__version__, jaxlib.__version__, numpyro.__version__, optax.__version__,
                        compiled._package_stamps(("inference",)),
                        devices[0].platform, devices[0].device_kind, len(devices)))
    if _ADDRESS.search(text):
        return None
    return os.path.join(directory, PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40])


def keep(fn, file: str | None, call_args: tuple):
    """The program ``fn`` (a ``jax.jit`` function, called with ``call_args``) as read from ``file``,
    or exported now and written there; ``fn`` itself when it cannot be kept (an empty file records
    that, so later processes do not try again). Errors from tracing ``fn`` (a model that needs
    concrete data) propagate, as calling ``fn`` would raise them."""
    if file is None or not hasattr(fn, "trace"):
        return fn
    exp = _load(file)
    if exp is _NOT_KEPT:
        return fn
    if exp is None:
        try:
            exp = jax.export.export(fn)(*call_args)
            blob = exp.serialize()
        except compiled._TRACER_ERRORS:
            raise
        except Exception:  # noqa: BLE001 - e.g. an effect, custom call or pytree node export does not support
            compiled.write_file(file, b"")
            return fn
        if not _usable(exp):
            compiled.write_file(file, b"")
            return fn
        compiled.write_file(file, bytes(blob))
    return _runner(exp)


def lazy(fn, tag: str, model, args: tuple, kwargs: dict, options: tuple):
    """``fn`` kept with `keep` once per shapes of the arguments it is called with: an exported
    program has fixed shapes, where ``jax.jit`` traces again (``persist`` of `compiled.call` and
    `compiled.get`; e.g. the log likelihood of 1000 draws, then of 200)."""
    kept = {}

    def run(*call_args):
        leaves, tree = jax.tree.flatten(call_args)
        signature = (tree, tuple((np.shape(x), str(getattr(x, "dtype", type(x).__name__))) for x in leaves))
        program = kept.get(signature)
        if program is None:
            program = kept[signature] = keep(fn, path(tag, model, args, kwargs, options, call_args), call_args)
        return program(*call_args)

    return run


def flat(fn, tag: str, options: tuple, out_tree):
    """``fn`` (pure: its result depends on its arguments only, returning a pytree of structure
    ``out_tree``) jitted and kept on disk per structure of its arguments, through flat arrays: the
    exported program takes and returns plain arrays, so pytree classes (EP's problem and state)
    need no serialisation. The name hashes ``tag``, ``options`` and the arguments' tree (with its
    static data: EP's likelihood kinds, sizes and links) and shapes, not a model: programs like
    EP's sweeps depend on the problem, so every model with that problem's structure shares them
    (a grid over kernel widths traces them once)."""
    programs = {}
    _FLAT.append(programs)

    def run(*call_args):
        leaves, tree = jax.tree.flatten(call_args)
        shapes = _shapes(leaves)
        program = programs.get((tree, shapes))
        if program is None:
            def flat_fn(*xs):
                return tuple(jax.tree.leaves(fn(*jax.tree.unflatten(tree, xs))))

            kept = shapes is not None and compiled._simple(options)
            file = _file((tag, options, str(tree), shapes)) if kept else None
            program = programs[(tree, shapes)] = keep(jax.jit(flat_fn), file, tuple(leaves))
        return jax.tree.unflatten(out_tree, program(*leaves))

    return run


def clear() -> None:
    """Forget the in-process programs of `flat` functions (`inference.compiled.clear` calls it)."""
    for programs in _FLAT:
        programs.clear()


def _load(file: str):
    try:
        with open(file, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    if not blob:
        return _NOT_KEPT
    try:
        exp = jax.export.deserialize(bytearray(blob))
    except Exception:  # noqa: BLE001 - truncated or from another jax: export again
        exp = None
    if exp is None or not _usable(exp):
        try:
            os.remove(file)
        except OSError:
            pass
        return None
    return exp


def _usable(exp) -> bool:
    """A multi-device program can be called only when it was exported with the shardings of all
    its arguments and results given, on at most as many devices as this process has."""
    if exp.nr_devices == 1:
        return True
    shardings = tuple(exp.in_shardings_jax(None)) + tuple(exp.out_shardings_jax(None))
    return exp.nr_devices <= jax.local_device_count() and all(s is not None for s in shardings)


def _runner(exp):
    """``jax.jit(exp.call)``, on a mesh of this process's first devices shaped as when exported."""
    if exp.nr_devices == 1:
        return jax.jit(exp.call)
    from jax.sharding import Mesh

    abstract = exp.in_shardings_jax(None)[0].mesh
    devices = np.array(jax.local_devices()[:exp.nr_devices]).reshape(abstract.axis_sizes)
    mesh = Mesh(devices, abstract.axis_names)
    in_shardings = jax.tree.unflatten(exp.in_tree, exp.in_shardings_jax(mesh))[0]
    out_shardings = jax.tree.unflatten(exp.out_tree, exp.out_shardings_jax(mesh))
    return jax.jit(exp.call, in_shardings=in_shardings, out_shardings=out_shardings)
