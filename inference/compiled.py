"""Compiled engine programs kept across calls, keyed by what the model computes.

An engine that closes over the data traces and compiles afresh on every call (0.3-1 s). Here an
engine step is built once per key and takes the data as arguments, so fitting the same model again
on new data of the same shapes (SBC, cross-validation, a refit) neither traces nor compiles. The
key is the step and its options, the model, the structure of its arguments (tree, shapes, dtypes,
the value of every non-array leaf) and the model's `fingerprint`: a digest of the jaxpr of one
trace of it with the data traced, and of that jaxpr's constants. Whatever a trace sees (a global,
a closure cell, a default argument, a kernel's attribute, a captured array changed in place) is in
the jaxpr or its constants, so a change to it gives a new key and the new answer. The fingerprint
costs one trace (10-40 ms warm for the library's models, against 0.3-1 s of compilation saved) and
is taken once per engine call (`scoped`).

A model may treat concrete and traced data differently: an input check that recodes labels
({-1, +1} to {0, 1}) when they are concrete steps aside under tracing. So the data are passed as
arguments only after `traceable` found the model's log joint the same with the data concrete and
traced: the same program once what does not depend on the latents is compared by value, up to
rounding (`same_program`, no compilation for the library's models), or else the same number at a draw (a
compiled check); otherwise they stay constants and the step is compiled per call, as a plain
NumPyro engine does. The verdict depends on the data's values, so it is kept per fingerprint,
structure and digest of the data's contents; so is EP's recognition of a model (`memo` with
``contents``: what it reads off the data, its projections and priors). Nothing here is written to
disk (`inference.exported`
keeps programs across processes when the persistent cache is switched on).

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

import contextlib
import functools
import hashlib
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

MAX_ENTRIES = 256
MAX_HASHED_BYTES = 256 * 2**20  # larger data or constants are not hashed: their steps are not kept
_CACHE: "OrderedDict[tuple, Any]" = OrderedDict()  # programs, verdicts and facts, by full key
_CONSTANTS: set = set()  # keys of steps that failed to trace with the data as arguments
_SCOPE = threading.local()  # fingerprints taken during the current engine call (see `scoped`)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
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


class Fingerprint(NamedTuple):
    """Digests of what a model computes: ``local`` for this process (object addresses in the
    jaxpr's parameters included) and ``portable`` for files other processes read (``None`` when
    the text holds an address, which another process would not reproduce)."""

    local: str
    portable: str | None


def _is_data(x) -> bool:
    if not isinstance(x, (np.ndarray, jax.Array)):
        return False
    try:
        return bool(np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_))
    except TypeError:  # extended dtypes (PRNG keys) stay static
        return False


def _static_key(x):
    """A non-array leaf as it enters the key: itself, or for a SciPy sparse matrix (unhashable; a
    corpus of counts for LDA) its format, shape and a digest of its contents."""
    import sys

    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and sparse.issparse(x):
        parts = [(name, getattr(x, name, None)) for name in ("data", "indices", "indptr", "row", "col", "offsets")]
        return ("sparse", x.format, x.shape, str(x.dtype), _digest(p for p in parts if isinstance(p[1], np.ndarray)))
    return x


def _digest(named_arrays) -> str:
    """A content digest of ``(name, array)`` pairs (host arrays)."""
    h = hashlib.blake2b(digest_size=20)
    for name, a in named_arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1))
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


# Matrix products inside every engine call: true float32 (or float64) arithmetic. JAX's default
# lets a float32 product run in TensorFloat32 on recent NVIDIA GPUs (10-bit mantissa, ~1e-3
# relative; bfloat16 passes on TPU), which the engines' linear algebra (Gram matrices, X'X,
# Cholesky updates of EP and Kalman) cannot absorb: on an H200, 7 float32 cells of the defaults
# matrix (every spike-and-slab engine, logistic EP) failed that pass on CPU, where the setting
# changes nothing. Scoped to the call (`scope`): the user's own JAX configuration is untouched.
# Set only where some backend is not a CPU (`reduced_precision_products`): the setting is part of
# every jit cache key, so on a CPU, where it changes nothing, it only made each program a user's
# code (or a test) also runs outside an engine call trace, lower and compile a second time (-7 %
# wall, 35 of 1208 compilations, over five test files that call library functions both ways).
MATMUL_PRECISION = "float32"


def reduced_precision_products() -> bool:
    """Whether a float32 matrix product may run at reduced precision at JAX's default setting:
    some available backend is not a CPU (a GPU's TF32, a TPU's bfloat16 passes).

    Example:
        >>> import jax
        >>> reduced_precision_products() == any(d.platform != "cpu" for d in jax.devices())
        True
    """
    from jax.extend.backend import backends

    return any(name != "cpu" for name in backends())


@contextlib.contextmanager
def scope():
    """Within it, a model's fingerprint is taken once per structure: one engine call cannot
    change what the model computes; matrix products run at full precision (`MATMUL_PRECISION`, set
    where a backend would otherwise reduce it: `reduced_precision_products`).
    Nested scopes share the outermost one. The first scope also reads
    ``INFERENCE_COMPILATION_CACHE`` (`inference.cache.from_environment`)."""
    if getattr(_SCOPE, "memo", None) is not None:
        yield
        return
    from inference import cache

    cache.from_environment()  # the opt-in persistent cache, asked for by environment variable
    _SCOPE.memo = {}
    try:
        full = reduced_precision_products()
        with jax.default_matmul_precision(MATMUL_PRECISION) if full else contextlib.nullcontext():
            yield
    finally:
        _SCOPE.memo = None


def scoped(engine):
    """``engine`` run inside `scope` (decorates the public engine functions)."""

    @functools.wraps(engine)
    def run(*args, **kwargs):
        with scope():
            return engine(*args, **kwargs)

    return run


def fingerprint(model, args: tuple, kwargs: dict) -> Fingerprint | None:
    """What ``model`` computes on data of this structure (see `Fingerprint`); ``None`` when it
    cannot be traced with its data as arguments (the data then stay constants)."""
    memo = getattr(_SCOPE, "memo", None)
    sp = split(args, kwargs)
    key = None if sp.key is None else (model, sp.key)
    if memo is not None and key is not None and key in memo:
        return memo[key]
    try:
        fp = _fingerprint(model, sp)
    except Exception:  # noqa: BLE001 - no fingerprint only means: the data stay constants
        fp = None
    if memo is not None and key is not None:
        memo[key] = fp
    return fp


def _fingerprint(model, sp: Split) -> Fingerprint | None:
    """One trace of ``model`` with the data traced and recovery on (`inference.latent`): each
    site's value, log density, scale, mask and bijection to unconstrained space, its declared start
    (`inference.latent.Start`, which the engines' programs run), each deterministic site, the
    jaxpr's constants and a table of the sites' names, types, supports and ``infer`` settings."""
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.distributions.transforms import biject_to
    from numpyro.infer import init_to_uniform

    from inference.latent import recovering

    table = []

    def run(arrays):
        a, kw = sp.rebuild(arrays)
        seeded = handlers.seed(model, rng_seed=0)
        with recovering():
            try:
                trace = handlers.trace(seeded).get_trace(*a, **kw)
            except NotImplementedError:  # a site that cannot be sampled (ImproperUniform)
                trace = handlers.trace(handlers.substitute(seeded, substitute_fn=init_to_uniform)).get_trace(*a, **kw)
        table.clear()
        out = []
        for name, site in trace.items():
            fn = site.get("fn")
            table.append((name, site["type"], type(fn).__qualname__, repr(getattr(fn, "support", None)),
                          site.get("is_observed"), repr(site.get("infer"))))
            if site["type"] == "sample":
                value = site["value"]
                parts = [value, fn.log_prob(value), jnp.asarray(1.0 if site.get("scale") is None else site["scale"]),
                         jnp.asarray(True if site.get("mask") is None else site["mask"])]
                if not site["is_observed"] and not getattr(fn.support, "is_discrete", False):
                    bijection = biject_to(fn.support)  # traced only: the values are meaningless
                    u = bijection.inv(value)
                    parts += [u, bijection.log_abs_det_jacobian(u, value)]
                start = (site.get("infer") or {}).get("init")
                if start is not None and not site["is_observed"]:  # a declared start runs inside the
                    parts.append(start(site["kwargs"]["rng_key"]))  # engines' programs: its code too
                out.append(parts)
            elif site["type"] in ("deterministic", "param"):
                out.append(site["value"])
        return out

    closed = jax.make_jaxpr(run)(sp.arrays)
    consts = [np.asarray(c) for c in closed.consts]
    if sum(c.nbytes for c in consts) > MAX_HASHED_BYTES:
        return None
    text = str(closed.jaxpr) + repr(table)
    h = hashlib.sha256(text.encode())
    h.update(_digest(enumerate(consts)).encode())
    local = h.hexdigest()
    return Fingerprint(local, None if _ADDRESS.search(text) else local)


def _keep(key, value):
    _CACHE[key] = value
    while len(_CACHE) > MAX_ENTRIES:
        _CACHE.popitem(last=False)
    return value


def _entry(tag, model, args, kwargs, options, build):
    """``(fn, arrays, key, new)``: the kept function for this key (built now if ``new``) or, for
    a model whose data must stay constants, a fresh build over them (``key`` None)."""
    sp = split(args, kwargs)
    fp = fingerprint(model, args, kwargs) if sp.key is not None else None
    key = None
    if fp is not None:
        key = (tag, model, fp.local, sp.key, options)
        try:
            hash(key)
        except TypeError:
            key = None
    if key is None or key in _CONSTANTS or not traceable(model, args, kwargs):
        constants = _fresh(args, kwargs)
        return build(lambda _arrays: constants), [], None, False
    fn = _CACHE.get(key)
    if fn is not None:
        _CACHE.move_to_end(key)
        return fn, sp.arrays, key, False
    return _keep(key, build(sp.rebuild)), sp.arrays, key, True


def call(tag: str, model, args: tuple, kwargs: dict, options: tuple, build: Callable, *extra,
         persist: bool = False):
    """``build(rebuild)(arrays, *extra)``, where ``build`` runs once per key.

    ``build`` receives ``rebuild(arrays) -> (args, kwargs)`` and returns the function to keep
    (typically ``jax.jit``-ed); ``tag`` names the engine step and ``options`` its static settings.
    With ``persist`` the program is also kept on disk for later processes (`inference.exported`;
    only for programs without host callbacks, and only when the persistent cache is on).
    """
    fn, arrays, key, new = _entry(tag, model, args, kwargs, options, build)
    if not new:
        return fn(arrays, *extra)
    try:
        if persist:  # kept per shapes of all arguments: ``extra`` may change shape (draws)
            from inference import exported

            fn = _CACHE[key] = exported.lazy(fn, tag, model, args, kwargs, options)
        return fn(arrays, *extra)
    except _TRACER_ERRORS:  # this step needs concrete data: keep them constant for this key
        _CACHE.pop(key, None)
        _CONSTANTS.add(key)
        constants = _fresh(args, kwargs)
        return build(lambda _arrays: constants)([], *extra)


def get(tag: str, model, args: tuple, kwargs: dict, options: tuple, build: Callable, persist=False):
    """``(fn, arrays)``: ``build(rebuild)`` kept per key (like `call`) and the arrays to pass it,
    for engines that call the kept functions several times (``arrays`` is ``[]`` when the data
    stay constants). With ``persist`` each jitted function (or field of a NamedTuple of them;
    ``persist`` may name the fields) is also kept on disk (`inference.exported`)."""
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
    concrete: the same program (`same_program`) or else the same value at a point of its latents
    (`check_program`). Kept per fingerprint, structure and data contents (data over
    `MAX_HASHED_BYTES` are checked on every call)."""
    sp = split(args, kwargs)
    if not sp.arrays:
        return True
    fp = fingerprint(model, args, kwargs)
    if fp is None or sp.key is None:
        return False
    host = [np.asarray(a) for a in sp.arrays]
    digest = _digest(enumerate(host)) if sum(a.nbytes for a in host) <= MAX_HASHED_BYTES else None
    key = ("traceable", model, fp.local, sp.key, digest)
    if digest is not None and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    try:
        ok = same_program(model, args, kwargs)
    except Exception:  # noqa: BLE001 - no verdict from the programs' text: the numbers decide
        ok = False
    if not ok:
        try:
            fn, consts, arrays = check_program(model, args, kwargs)
            concrete, lazy = (np.asarray(v) for v in _check_executable(fn, consts, arrays)(consts, arrays))
        except Exception:  # noqa: BLE001 - any failure means: keep the data concrete
            ok = False
        else:
            rtol = 1e-6 if jax.config.jax_enable_x64 else 1e-4  # rounding differs between programs
            ok = bool(np.allclose(concrete, lazy, rtol=rtol, atol=1e-8, equal_nan=True))
    if digest is not None:
        _keep(key, ok)
    return ok


def same_program(model, args: tuple, kwargs: dict) -> bool:
    """Whether ``model``'s log joint, as a function of its latents, is the same program with the
    data concrete as with the data traced, up to what does not depend on the latents: the same
    equations on equal inputs (`_Folded`; equal up to rounding: `_rounding_apart`). Then both
    compute the same numbers on these data (up to that rounding) and
    `traceable` needs no compiled check (0.3-2 s of a first fit). ``False`` says only that the
    programs differ (a model that recodes its data with NumPy); the numbers then decide."""
    from numpyro.infer.util import log_density

    sp = split(args, kwargs)
    concrete_args, concrete_kwargs = _fresh(args, kwargs)
    point = jax.eval_shape(lambda: _point(model, concrete_args, concrete_kwargs))
    constant = jax.make_jaxpr(lambda p: log_density(model, concrete_args, concrete_kwargs, p)[0])(point)
    fp = fingerprint(model, args, kwargs)
    key = ("same-program", model, None if fp is None else fp.local, sp.key, jax.tree.structure(point),
           tuple((s.shape, str(s.dtype)) for s in jax.tree.leaves(point)))
    traced = _CACHE.get(key) if fp is not None else None  # the data's values are not in it
    if traced is None:
        traced = jax.make_jaxpr(lambda p, arrays: log_density(model, *sp.rebuild(arrays), p)[0])(point, sp.arrays)
        if fp is not None:
            _keep(key, traced)
    num_latent = len(jax.tree.leaves(point))
    data = {v: np.asarray(x, v.aval.dtype) for v, x in zip(traced.jaxpr.invars[num_latent:], sp.arrays)}
    a = _Folded(constant.jaxpr, dict(zip(constant.jaxpr.constvars, constant.consts)))
    b = _Folded(traced.jaxpr, {**dict(zip(traced.jaxpr.constvars, traced.consts)), **data})
    if a.text != b.text or len(a.inputs) != len(b.inputs):
        return False
    differ: dict = {}
    for u, v in zip(a.inputs, b.inputs):
        _frontier(a, b, u, v, differ, set())
    if not differ:
        return True
    pairs = list(differ.values())
    for x, y in zip(a.values([u for u, _ in pairs]), b.values([v for _, v in pairs])):
        x, y = np.asarray(x), np.asarray(y)  # different expressions or contents: the values decide
        if x.shape != y.shape or x.dtype != y.dtype or not _rounding_apart(x, y):
            return False
    return True


SAME_ULPS = 4  # `_rounding_apart`: NumPy and XLA computing the same expression differ by ~1/2 ulp


def _rounding_apart(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether ``x`` and ``y`` are equal (NaN, inf and their places included) but for at most
    `SAME_ULPS` units in the last place of the arrays' largest magnitude: a GP's kernel computed by
    NumPy on concrete inputs and by XLA on traced ones differs by ~1/2 of one (30 x 2 inputs),
    which sent every first fit of a GP model to the compiled check (0.3-2 s). A model that treats
    concrete data otherwise (recodes labels, shifts or rescales them) moves values by far more."""
    if np.array_equal(x, y, equal_nan=True):
        return True
    if not np.issubdtype(x.dtype, np.floating):
        return False
    finite = np.isfinite(x)
    if not (np.array_equal(finite, np.isfinite(y)) and np.array_equal(x[~finite], y[~finite], equal_nan=True)):
        return False
    eps = float(np.finfo(x.dtype).eps)
    x, y = x[finite].astype(np.float64), y[finite].astype(np.float64)
    scale = max(np.max(np.abs(x), initial=0.0), np.max(np.abs(y), initial=0.0))
    return bool(np.max(np.abs(x - y), initial=0.0) <= SAME_ULPS * eps * scale)


def _frontier(a: "_Folded", b: "_Folded", u, v, differ: dict, seen: set) -> None:
    """Adds to ``differ`` the pairs of known values below ``u`` (of ``a``) and ``v`` (of ``b``)
    where their expressions first part (a constant against an equation, different operations);
    above them both apply the same operations, so equal values there mean equal values here
    (compared by value, up to the rounding by which NumPy and XLA differ: `_rounding_apart`)."""
    from jax.extend.core import Literal

    stack = [(u, v)]
    while stack:
        u, v = stack.pop()
        pair = tuple(id(x) if isinstance(x, Literal) else x for x in (u, v))  # literals: unhashable
        if pair in seen or a._id(u) == b._id(v):
            continue
        seen.add(pair)
        p = None if isinstance(u, Literal) else a.producer.get(u)
        q = None if isinstance(v, Literal) else b.producer.get(v)
        if (p is not None and q is not None and p.primitive is q.primitive and len(p.invars) == len(q.invars)
                and p.outvars.index(u) == q.outvars.index(v) and a.parts[id(p)] == b.parts[id(q)]):
            stack.extend(zip(p.invars, q.invars))
        else:
            differ[pair] = (u, v)


_COMMUTATIVE = frozenset({"add", "mul", "eq", "ne", "and", "or", "xor"})  # exactly, signed zeros included


class _Folded:
    """A jaxpr split into what depends on its unknown inputs (``text``: those equations, with the
    values they take from the rest, scalar literals included, as constants ``inputs`` in order of
    first use) and what does not, which is not evaluated: each such value gets an id (a digest of
    a known input's contents, or of the equation and its inputs' ids), so equal ids mean equal
    values, and `values` evaluates some on demand. Two programs that compute the same function
    of their unknown inputs through the same equations give the same text."""

    def __init__(self, jaxpr, known: dict):
        from jax.extend.core import Literal, Var

        self.jaxpr, self.known, self.producer, self.order, self.parts = jaxpr, dict(known), {}, [], {}
        self.ids = {v: "v" + _digest([("", np.asarray(x))]) for v, x in known.items()}
        rest = []
        for eqn in jaxpr.eqns:
            if not eqn.effects and all(isinstance(v, Literal) or v in self.ids for v in eqn.invars):
                self.order.append(eqn)
                parts = [eqn.primitive.name, str(eqn.params), _nested_constants(eqn.params)]
                self.parts[id(eqn)] = parts[1:]
                parts += [self._id(v) for v in eqn.invars]
                key = hashlib.sha256("|".join(parts).encode()).hexdigest()
                for i, out in enumerate(eqn.outvars):
                    self.ids[out], self.producer[out] = f"{key}:{i}", eqn
            else:
                rest.append(eqn)
        used: dict = {}  # known variable or lifted literal -> its constant, in order of first use
        lifted: dict = {}  # one constant per literal value: a trace inlines a concrete scalar
        eqns = []          # at each use, where the other trace computes it once
        for eqn in rest:
            invars = list(eqn.invars)
            if eqn.primitive.name in _COMMUTATIVE and len(invars) == 2 and self._is_known(invars[0]) \
                    and not self._is_known(invars[1]):
                invars.reverse()  # `y == f` on a NumPy y runs as `f == y` (NumPy defers to JAX)
            for i, v in enumerate(invars):
                if isinstance(v, Literal) and np.ndim(v.val) == 0:
                    var = lifted.get(self._id(v))
                    if var is None:
                        var = lifted[self._id(v)] = Var(v.aval)
                        self.ids[var], self.known[var] = self._id(v), v.val
                    invars[i] = used.setdefault(var, var)
                elif not isinstance(v, Literal) and v in self.ids:
                    used.setdefault(v, v)
            eqns.append(eqn.replace(invars=invars))
        for v in jaxpr.outvars:
            if not isinstance(v, Literal) and v in self.ids:
                used.setdefault(v, v)
        self.inputs = list(used)
        unknown = [v for v in jaxpr.invars if v not in known]
        self.text = str(jaxpr.replace(constvars=self.inputs, invars=unknown, eqns=eqns))
        self.text += "".join(_nested_constants(eqn.params) for eqn in eqns)  # not in the text above

    def _is_known(self, v) -> bool:
        from jax.extend.core import Literal

        return isinstance(v, Literal) or v in self.ids

    def _id(self, v) -> str:
        from jax.extend.core import Literal

        if isinstance(v, Literal):
            return f"l{v.aval.dtype}:{np.asarray(v.val).tobytes().hex()}"
        return self.ids[v]

    def values(self, variables: list) -> list:
        """The values of known variables. Those computed by equations come from one program of
        just those equations, compiled for a short compile (`CHECK_COMPILER_OPTIONS`) and kept
        per its text, so a refit on new data reuses it (op by op, each operation compiled apart,
        a GP classifier's kernel took 1 s)."""
        from jax.extend.core import Literal

        needed, stack = set(), [v for v in variables if not isinstance(v, Literal) and v not in self.known]
        while stack:
            eqn = self.producer[stack.pop()]
            if id(eqn) not in needed:
                needed.add(id(eqn))
                stack.extend(u for u in eqn.invars if not isinstance(u, Literal) and u not in self.known)
        if not needed:
            return [v.val if isinstance(v, Literal) else self.known[v] for v in variables]
        eqns = [eqn for eqn in self.order if id(eqn) in needed]
        leaves = list({u: None for eqn in eqns for u in eqn.invars
                       if not isinstance(u, Literal) and u in self.known})
        leaves += [v for v in variables if not isinstance(v, Literal) and v in self.known and v not in leaves]

        sub = self.jaxpr.replace(constvars=[], invars=leaves, outvars=list(variables), eqns=eqns)
        arguments = [self.known[u] for u in leaves]
        key = ("same-values", str(sub) + "".join(_nested_constants(eqn.params) for eqn in eqns),
               tuple((np.shape(x), str(np.asarray(x).dtype)) for x in arguments))
        program = _CACHE.get(key)  # a refit on new data reuses it
        if program is None:
            lowered = jax.jit(lambda xs: jax.core.eval_jaxpr(sub, [], *xs)).lower(arguments)
            program = _keep(key, _compile_short(lowered, lowered.compile))
        else:
            _CACHE.move_to_end(key)
        return program(arguments)


def _nested_constants(params) -> str:
    """A digest of the constants of the closed jaxprs inside an equation's parameters (a nested
    program's, a custom derivative's), which its printed text leaves out; ``""`` when none."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    found = []

    def visit(x):
        if isinstance(x, (ClosedJaxpr, Jaxpr)):  # one class since jax 0.10
            found.extend(np.asarray(c) for c in getattr(x, "consts", ()) if isinstance(c, (np.ndarray, jax.Array, np.generic)))
            inner = getattr(x, "jaxpr", x)
            for eqn in inner.eqns:
                visit(eqn.params)
        elif isinstance(x, dict):
            for value in x.values():
                visit(value)
        elif isinstance(x, (tuple, list)):
            for value in x:
                visit(value)

    visit(params)
    return _digest(enumerate(found)) if found else ""


def _point_trace(model, args: tuple, kwargs: dict):
    """A trace of ``model`` at a point of its latents: uniform in the unconstrained space (any
    point in the support serves, and a Gamma / Beta / Dirichlet prior's compiled sampler cost
    seconds: ~2 s of a linear regression's first VI fit), or a prior draw for a support without
    a bijection."""
    from numpyro import handlers
    from numpyro.infer import init_to_uniform

    seeded = handlers.seed(model, rng_seed=0)
    try:
        return handlers.trace(handlers.substitute(seeded, substitute_fn=init_to_uniform)).get_trace(*args, **kwargs)
    except (NotImplementedError, ValueError):  # a support without a bijection: a prior draw
        return handlers.trace(seeded).get_trace(*args, **kwargs)


def _point(model, args: tuple, kwargs: dict) -> dict:
    """The latents' values at `_point_trace`'s point, by name."""
    trace = _point_trace(model, args, kwargs)
    return {n: s["value"] for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}


def check_program(model, args: tuple, kwargs: dict):
    """``(fn, consts, arrays)`` for `traceable`: ``fn(consts, arrays)`` is one jitted program that
    draws the latents and returns the log joint with the data as the model saw them concretely
    and with the data traced. The concrete data become the jaxpr's constants ``consts``, passed as
    arguments, so the program is kept per text of that jaxpr: new data of the same shapes that the
    model handles the same way reuse it."""
    from numpyro.infer.util import log_density

    sp = split(args, kwargs)
    args, kwargs = _fresh(args, kwargs)

    def with_constants():  # the model sees its concrete data: a point and its log joint, one trace
        trace = _point_trace(model, args, kwargs)
        return {n: s["value"] for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}, _log_joint(trace)

    closed, shapes = jax.make_jaxpr(with_constants, return_shape=True)()
    out_tree = jax.tree.structure(shapes)
    jaxpr, consts = _scalars_as_constants(closed.jaxpr, list(closed.consts))
    fp = fingerprint(model, args, kwargs)
    text = str(jaxpr) + str(out_tree) + repr([(np.shape(c), str(np.asarray(c).dtype)) for c in consts])
    key = ("check", model, None if fp is None else fp.local, sp.key, hashlib.sha256(text.encode()).hexdigest())

    def both(consts, arrays):  # one program: the constants version, then the traced one
        p, lp_const = jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(jaxpr, consts))
        a, kw = sp.rebuild(arrays)
        return lp_const, log_density(model, a, kw, p)[0]

    try:
        fn = _CACHE.get(key) or _keep(key, jax.jit(both))
    except TypeError:  # an unhashable key: not kept
        fn = jax.jit(both)
    return fn, consts, sp.arrays


def _scalars_as_constants(jaxpr, consts):
    """``(jaxpr, consts)`` with every scalar literal of the top-level equations made a constant.
    A trace inlines a concrete scalar (a 0-d data array, a hyperparameter fixed at a design point)
    as a literal, so the jaxpr's text, and the check's program, changed with its value: a GP
    classifier's prediction from 17 design points compiled the check 34 times (18 s). As
    constants the values are arguments of one program; the computation is the same."""
    from jax.extend.core import Literal, Var

    lifted, values, eqns = [], [], []
    for eqn in jaxpr.eqns:
        scalars = [i for i, v in enumerate(eqn.invars) if isinstance(v, Literal) and np.ndim(v.val) == 0]
        if not scalars:
            eqns.append(eqn)
            continue
        invars = list(eqn.invars)
        for i in scalars:
            lifted.append(Var(invars[i].aval))
            values.append(np.asarray(invars[i].val, dtype=invars[i].aval.dtype))
            invars[i] = lifted[-1]
        eqns.append(eqn.replace(invars=invars))
    if not lifted:
        return jaxpr, consts
    return jaxpr.replace(constvars=list(jaxpr.constvars) + lifted, eqns=eqns), consts + values


# The check runs once per model and data: its program is compiled for a short compile, not a fast
# run (the same log joint twice, compared with each other): 1.5 -> 1.05 s for a Gaussian mixture,
# 1.35 -> 1.05 s for an HMM (measured 2026-11-26), paid by nearly every first fit.
CHECK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _check_executable(fn, consts, arrays):
    """`check_program`'s ``fn`` compiled with `CHECK_COMPILER_OPTIONS`, kept per argument shapes;
    ``fn`` itself where the backend refuses those options (the check must not fail for them: a
    failed check keeps the data constant, a program per data set)."""
    avals = tuple((np.shape(x), str(getattr(x, "dtype", type(x).__name__))) for x in jax.tree.leaves((consts, arrays)))
    key = ("check-executable", fn, avals)
    exe = _CACHE.get(key)
    if exe is None:
        exe = _keep(key, _compile_short(fn.lower(consts, arrays), lambda: fn))
    return exe


def _compile_short(lowered, fallback):
    """``lowered`` compiled with `CHECK_COMPILER_OPTIONS`, or ``fallback()`` where the backend
    refuses those options."""
    try:
        return lowered.compile(compiler_options=CHECK_COMPILER_OPTIONS)
    except Exception:  # noqa: BLE001 - an option this backend does not know
        return fallback()


def _fresh(args: tuple, kwargs: dict) -> tuple:
    """``(args, kwargs)`` with every NumPy array leaf copied, for programs that close over the data.
    JAX keeps the device copy of a NumPy constant per array object: an array first closed over with
    float64 off stays float32 in a later trace with it on (jax 0.12, ``jax.enable_x64``), and the
    program then mixes float32 and float64. A new object is converted anew."""
    def copy(x):
        return np.array(x, copy=True) if isinstance(x, np.ndarray) else x

    a, kw = jax.tree_util.tree_map(copy, (tuple(args), dict(kwargs)))
    return tuple(a), dict(kw)


def _log_joint(trace):
    """The log joint of a trace's sample sites, as `numpyro.infer.util.log_density` sums it."""
    import jax.numpy as jnp

    total = 0.0
    for site in trace.values():
        if site["type"] == "sample":
            inter = site["intermediates"]
            lp = site["fn"].log_prob(site["value"], inter) if inter else site["fn"].log_prob(site["value"])
            total = total + (lp if site["scale"] is None else site["scale"] * lp).sum()
    return jnp.asarray(total)


def memo(tag: str, model, args: tuple, kwargs: dict, compute: Callable, contents: bool = False):
    """``compute()`` once per model fingerprint and structure, for facts that depend only on
    them (site names); with ``contents``, once per fingerprint, structure and data contents, for
    what is read off the data too (EP's recognition of a model: its projections and priors).
    Data over `MAX_HASHED_BYTES` are not kept: ``compute()`` runs on every call."""
    sp = split(args, kwargs)
    fp = fingerprint(model, args, kwargs) if sp.key is not None else None
    key = None if fp is None else (tag, model, fp.local, sp.key)
    if key is not None and contents:
        host = [np.asarray(a) for a in sp.arrays]
        key = key + (_digest(enumerate(host)),) if sum(a.nbytes for a in host) <= MAX_HASHED_BYTES else None
    try:
        if key is not None and key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    except TypeError:
        key = None
    value = compute()
    if key is not None:
        _keep(key, value)
    return value


def cache_dir() -> str | None:
    """The persistent compilation cache's directory (``None`` when off)."""
    return jax.config.jax_compilation_cache_dir


_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def _simple(x) -> bool:
    """Values whose ``repr`` is the same in every process (no object addresses)."""
    if isinstance(x, (tuple, list)):
        return all(_simple(v) for v in x)
    if isinstance(x, dict):
        return all(_simple(k) and _simple(v) for k, v in x.items())
    return isinstance(x, _SIMPLE)


def _stamp(path: str) -> tuple:
    import os

    st = os.stat(path)
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)


def _package_stamps(packages: tuple) -> tuple:
    """Path, size and mtime of every loaded module file of these top-level packages."""
    import sys

    files = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in packages:
            file = getattr(module, "__file__", None)
            if file:
                files.add(file)
    return tuple(_stamp(f) for f in sorted(files))


def write_file(path: str, data: bytes) -> None:
    """Written to a temporary name (per process and thread) and renamed: another process or
    thread never reads half a file; a cache directory that cannot be written is left as it is."""
    import os

    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass


def clear() -> None:
    """Forget every kept function (``jax.clear_caches()`` frees the executables themselves)."""
    from inference import exported

    _CACHE.clear()
    _CONSTANTS.clear()
    exported.clear()
