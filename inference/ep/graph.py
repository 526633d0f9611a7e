"""Reading a traced computation as "an elementwise function of an affine projection".

EP needs each observation's log-likelihood as ``h_i(eta_i)`` with ``eta_i = a_i^T u + b_i``. This
module finds that structure in the jaxpr of ``u -> per-observation log-likelihood``:

1. :func:`flatten` inlines nested calls (``jit``, ``custom_jvp_call``, ...) into one list of
   equations over integer variable ids.
2. :func:`tag` propagates, forward, whether each variable is constant in ``u``, affine in ``u``
   (``dot_general``/``mul`` by a constant, ``add``, slicing, broadcasting, ...) or neither.
3. :func:`split` walks back from an output through elementwise operations to the last affine
   variables (the *frontier*); what lies between is the link, returned as a :class:`Link`, a
   scalar program ``eta -> h`` with its constants sliced per observation.

The affine part itself is read numerically (Jacobian and value at zero, then checked at a random
point) by the caller. Example:

    >>> import jax, jax.numpy as jnp
    >>> X = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> g = flatten(jax.make_jaxpr(lambda u: jnp.log1p(jnp.exp(X @ u)))(jnp.zeros(2)))
    >>> tags = tag(g)
    >>> frontier, link = split(g, tags, g.outputs[0])
    >>> len(frontier), round(float(link(jnp.asarray(0.0), [1.0, 0.0])), 6)
    (1, 0.693147)
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

CONST, AFFINE, NONLIN = 0, 1, 2

CALLS = {"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
         "custom_vjp_call_jaxpr", "remat", "checkpoint", "custom_lin"}
# Structural ops: affine when every u-dependent operand is affine (positions that must be
# constant are listed in _CONST_OPERANDS).
LINEAR = {"add", "sub", "neg", "add_any", "concatenate", "pad", "select_n", "broadcast_in_dim",
          "reshape", "squeeze", "expand_dims", "transpose", "slice", "dynamic_slice", "gather",
          "dynamic_update_slice", "reduce_sum", "cumsum", "rev", "copy", "copy_p", "real",
          "convert_element_type", "reduce_precision", "optimization_barrier"}
_CONST_OPERANDS = {"select_n": (0,), "dynamic_slice": "tail", "gather": (1,),
                   "dynamic_update_slice": "tail2"}
ELEMENTWISE = {
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "erf",
    "erfc", "erf_inv", "lgamma", "digamma", "polygamma", "igamma", "igammac", "zeta",
    "bessel_i0e", "bessel_i1e", "random_gamma_grad", "regularized_incomplete_beta", "abs",
    "sign", "floor", "ceil", "round", "neg", "add", "add_any", "sub", "mul", "div", "rem", "pow",
    "integer_pow", "square", "max", "min", "atan2", "nextafter", "select_n", "clamp", "eq", "ne",
    "lt", "le", "gt", "ge", "and", "or", "not", "xor", "is_finite", "convert_element_type",
    "copy", "copy_p", "stop_gradient", "reduce_precision", "real", "imag",
    # jax >= 0.12.1 writes ndtr / erfc with these (Horner polynomials, bit tricks on floats)
    "polynomial", "bitcast_convert_type",
}
# Shape-only ops that are harmless on a per-observation scalar (checked: sizes 1 or n).
PASS_THROUGH = {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "copy", "copy_p",
                "optimization_barrier"}


@dataclass(frozen=True)
class Lit:
    """A literal operand (a constant written into the jaxpr)."""

    value: object


@dataclass
class Eqn:
    prim: object
    params: dict
    ins: list  # int ids or Lit
    outs: list  # int ids


@dataclass
class Graph:
    """A flattened jaxpr: ``inputs`` and ``outputs`` are variable ids, ``consts`` their values."""

    eqns: list
    inputs: list
    outputs: list
    consts: dict
    avals: dict


def _inner(eqn):
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = eqn.params.get(key)
        if isinstance(j, jcore.ClosedJaxpr):
            return j.jaxpr, list(j.consts)
        if isinstance(j, jcore.Jaxpr):
            return j, []
    return None


def flatten(closed) -> Graph:
    """Inline every call-like equation of a ``ClosedJaxpr`` into one flat :class:`Graph`."""
    g = Graph([], [], [], {}, {})
    counter = iter(range(1 << 60))

    def new(var):
        i = next(counter)
        g.avals[i] = var.aval
        return i

    def read(env, x):
        return Lit(x.val) if isinstance(x, jcore.Literal) else env[x]

    def inline(jaxpr, env):
        for eqn in jaxpr.eqns:
            ins = [read(env, x) for x in eqn.invars]
            inner = _inner(eqn) if eqn.primitive.name in CALLS else None
            if inner is not None:
                sub, consts = inner
                sub_env = {}
                for v, c in zip(sub.constvars, consts):
                    sub_env[v] = new(v)
                    g.consts[sub_env[v]] = c
                # custom_vjp / custom_jvp may prepend consts not in the call jaxpr's invars
                for v, x in zip(sub.invars, ins[len(ins) - len(sub.invars):]):
                    sub_env[v] = x
                inline(sub, sub_env)
                for o, so in zip(eqn.outvars, sub.outvars):
                    env[o] = read(sub_env, so)
                continue
            outs = [new(o) for o in eqn.outvars]
            for o, i in zip(eqn.outvars, outs):
                env[o] = i
            g.eqns.append(Eqn(eqn.primitive, dict(eqn.params), ins, outs))

    jaxpr = closed.jaxpr
    env = {}
    for v, c in zip(jaxpr.constvars, closed.consts):
        env[v] = new(v)
        g.consts[env[v]] = c
    for v in jaxpr.invars:
        env[v] = new(v)
        g.inputs.append(env[v])
    inline(jaxpr, env)
    g.outputs = [read(env, o) for o in jaxpr.outvars]
    return g


def _tag_eqn(eqn, tin):
    if all(t == CONST for t in tin):
        return CONST
    if any(t == NONLIN for t in tin):
        return NONLIN
    name = eqn.prim.name
    dep = [k for k, t in enumerate(tin) if t != CONST]
    if name in LINEAR:
        fixed = _CONST_OPERANDS.get(name, ())
        if fixed == "tail":
            fixed = tuple(range(1, len(tin)))
        elif fixed == "tail2":
            fixed = tuple(range(2, len(tin)))
        if any(k in fixed for k in dep):
            return NONLIN
        if name == "convert_element_type":
            new = eqn.params.get("new_dtype")
            if new is None or not jnp.issubdtype(new, jnp.inexact):
                return NONLIN
        return AFFINE
    if name in ("mul", "dot_general"):
        return AFFINE if len(dep) == 1 else NONLIN
    if name == "div":
        return AFFINE if dep == [0] else NONLIN
    return NONLIN


def tag(g: Graph) -> dict:
    """Variable id -> CONST, AFFINE or NONLIN, with ``g.inputs`` affine."""
    tags = {i: CONST for i in g.consts}
    tags.update({i: AFFINE for i in g.inputs})
    rd = lambda x: CONST if isinstance(x, Lit) else tags[x]  # noqa: E731
    for eqn in g.eqns:
        t = _tag_eqn(eqn, [rd(x) for x in eqn.ins])
        for o in eqn.outs:
            tags[o] = t
    return tags


def _bind(eqn, vals):
    params = eqn.prim.get_bind_params(eqn.params)
    subfuns = []
    if isinstance(params, tuple):  # older JAX: (subfuns, params)
        subfuns, params = params
    out = eqn.prim.bind(*subfuns, *vals, **params)
    return out if eqn.prim.multiple_results else [out]


def evaluate(g: Graph, targets, inputs=None, known=None, tags=None, only_const=False):
    """Values of the variables ``targets`` (ids): runs the ancestors of the targets only.

    ``inputs`` are the graph inputs' values; ``known`` maps ids to values computed before (they
    are not recomputed); ``only_const=True`` evaluates constants (no inputs needed).
    """
    producer = {o: k for k, e in enumerate(g.eqns) for o in e.outs}
    vals = dict(g.consts)
    if inputs is not None:
        vals.update(zip(g.inputs, inputs))
    vals.update(known or {})
    needed, stack = set(), [t for t in targets if not isinstance(t, Lit)]
    while stack:
        x = stack.pop()
        if x in vals:
            continue
        k = producer.get(x)
        if k is None or k in needed:
            continue
        needed.add(k)
        stack.extend(i for i in g.eqns[k].ins if not isinstance(i, Lit) and i not in vals)
    for k in sorted(needed):
        eqn = g.eqns[k]
        if only_const and tags is not None and tags[eqn.outs[0]] != CONST:
            continue
        ins = [x.value if isinstance(x, Lit) else vals[x] for x in eqn.ins]
        for o, v in zip(eqn.outs, _bind(eqn, ins)):
            vals[o] = v
    return [t.value if isinstance(t, Lit) else vals[t] for t in targets]


class NotElementwise(ValueError):
    """The output is not an elementwise function of affine projections of u (message says why)."""


@dataclass(frozen=True, eq=False)
class Link:
    """Scalar program ``eta -> h`` extracted from a graph: the equations between the frontier
    and the output. ``consts`` lists the graph constants (one scalar per observation each), then
    one scale and one shift per frontier variable: frontier ``k`` is set to ``scale_k * eta +
    shift_k`` (several frontier variables may be affine images of one projection, e.g. ``x`` and
    ``-x`` inside ``log_ndtr``). Equality and hash are structural, so an identical model traced
    again reuses compiled EP code."""

    eqns: tuple
    frontier: tuple
    const_ids: tuple
    output: object
    key: str

    def __eq__(self, other):
        return isinstance(other, Link) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):  # structural, like equality: names EP programs kept on disk (inference.exported)
        return f"Link({self.key!r})"

    def __call__(self, eta, consts):
        k = len(self.const_ids)
        nf = len(self.frontier)
        scales, shifts = consts[k:k + nf], consts[k + nf:k + 2 * nf]
        vals = {f: a * eta + c for f, a, c in zip(self.frontier, scales, shifts)}
        vals.update(zip(self.const_ids, consts[:k]))
        for eqn in self.eqns:
            ins = [x.value if isinstance(x, Lit) else vals[x] for x in eqn.ins]
            if eqn.prim.name in PASS_THROUGH:
                outs = [jnp.reshape(ins[0], ())]
            else:
                outs = _bind(eqn, ins)
            for o, v in zip(eqn.outs, outs):
                vals[o] = v
        out = self.output
        return out.value if isinstance(out, Lit) else vals[out]


@dataclass(frozen=True)
class SiteLink:
    """A :class:`Link` called per site: ``layout[k]`` says whether constant ``k`` is shared by all
    sites (a scalar) or per site; ``per_site`` and ``shared`` hold them in order."""

    link: Link
    layout: tuple

    def __call__(self, eta, per_site, shared):
        it_p, it_s = iter(per_site), iter(shared)
        return self.link(eta, [next(it_s) if sh else next(it_p) for sh in self.layout])


def split(g: Graph, tags: dict, output) -> tuple[list, Link | None]:
    """Frontier ids and link of ``output``; ``([], None)`` if it is constant in u.

    Raises :class:`NotElementwise` when the output depends on u through a non-elementwise
    operation of a non-affine quantity, or mixes observations.
    """
    if isinstance(output, Lit) or tags[output] == CONST:
        return [], None
    size = int(np.prod(g.avals[output].shape))
    producer = {o: k for k, e in enumerate(g.eqns) for o in e.outs}
    frontier, region, consts = [], set(), []
    stack, seen = [output], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if tags[x] == AFFINE:
            frontier.append(x)
            continue
        n_x = int(np.prod(g.avals[x].shape))
        if n_x not in (1, size):
            raise NotElementwise(f"an intermediate of shape {g.avals[x].shape} mixes observations")
        k = producer[x]
        eqn = g.eqns[k]
        name = eqn.prim.name
        if name not in ELEMENTWISE and name not in PASS_THROUGH:
            raise NotElementwise(f"`{name}` is applied to a non-linear function of the latent")
        region.add(k)
        for i in eqn.ins:
            if isinstance(i, Lit):
                continue
            if tags[i] == CONST:
                if int(np.prod(g.avals[i].shape)) not in (1, size):
                    raise NotElementwise(f"a constant of shape {g.avals[i].shape} mixes observations")
                if i not in consts:
                    consts.append(i)
            else:
                stack.append(i)
    for f in frontier:
        if int(np.prod(g.avals[f].shape)) not in (1, size):
            raise NotElementwise(f"the affine projection has shape {g.avals[f].shape}, not one value per observation")
    eqns = tuple(g.eqns[k] for k in sorted(region))
    frontier = sorted(frontier)
    key = _structure_key(eqns, frontier, consts, output)
    return frontier, Link(eqns, tuple(frontier), tuple(consts), output, key)


def _structure_key(eqns, frontier, consts, output) -> str:
    names = {f: f"f{k}" for k, f in enumerate(frontier)}
    names.update({c: f"c{k}" for k, c in enumerate(consts)})

    def nm(x):
        return _lit_name(x) if isinstance(x, Lit) else names.setdefault(x, f"v{len(names)}")

    lines = [_eqn_line(e, nm) for e in eqns]
    lines.append(f"out {nm(output)}")
    return "\n".join(lines)


def _lit_name(x: Lit) -> str:
    return f"lit({np.asarray(x.value).dtype}:{np.asarray(x.value).tolist()!r})"


def _eqn_line(e: Eqn, nm) -> str:
    """One equation as text (primitive, parameters, operands named by ``nm``), for structural keys."""
    params = ",".join(f"{k}={e.params[k]!r}" for k in sorted(e.params))
    return f"{' '.join(nm(x) for x in e.outs)} = {e.prim.name}[{params}] {' '.join(nm(x) for x in e.ins)}"


_PROGRAMS: dict = {}  # jitted graph programs by structural key: a model refitted (new data of the
# same shapes, distributed EP's shards) reuses them instead of compiling a closure per call
_MAX_PROGRAMS = 256


def graph_key(g: Graph) -> str:
    """Structural fingerprint of ``g``: its equations (primitive, parameters, operand ids,
    literals) and the shapes and dtypes of its inputs and constants, not the constants' values.
    Two traces of one model on data of the same shapes get equal keys and equal variable ids
    (:func:`flatten` numbers variables in trace order)."""
    if "_key" not in g.__dict__:
        def nm(x):
            return _lit_name(x) if isinstance(x, Lit) else str(x)

        lines = [_eqn_line(e, nm) for e in g.eqns]
        lines.append(f"in {[(i, str(g.avals[i])) for i in g.inputs]} out {[nm(o) for o in g.outputs]}")
        lines.append(f"consts {[(i, str(g.avals[i])) for i in sorted(g.consts)]}")
        g.__dict__["_key"] = "\n".join(lines)
    return g.__dict__["_key"]


def program(key, make):
    """``make()`` (a jitted function) once per ``key``."""
    fn = _PROGRAMS.get(key)
    if fn is None:
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        fn = _PROGRAMS[key] = make()
    return fn


def const_env(g: Graph, tags: dict, targets) -> dict:
    """Values of every constant (u-independent) ancestor of ``targets``, and of the targets
    that are constant: computed once (in one compiled call), then passed as ``known`` to
    :func:`evaluate`."""
    producer = {o: k for k, e in enumerate(g.eqns) for o in e.outs}
    needed, stack, seen = set(), [t for t in targets if not isinstance(t, Lit)], set()
    while stack:
        x = stack.pop()
        if x in seen or x in g.consts:
            continue
        seen.add(x)
        k = producer.get(x)
        if k is None:
            continue
        if tags[x] == CONST:
            needed.add(k)
        stack.extend(i for i in g.eqns[k].ins if not isinstance(i, Lit))
    order = sorted(needed)
    eqns = g.eqns  # not g: the kept program must not hold the graph's constants (the data)

    def run(consts):
        vals = dict(consts)
        for k in order:
            eqn = eqns[k]
            ins = [x.value if isinstance(x, Lit) else vals[x] for x in eqn.ins]
            for o, v in zip(eqn.outs, _bind(eqn, ins)):
                vals[o] = v
        return {o: vals[o] for k in order for o in eqns[k].outs}

    consts = {k: jnp.asarray(v) for k, v in g.consts.items()}
    out = program(("const_env", graph_key(g), tuple(order)), lambda: jax.jit(run))(consts) if order else {}
    return {**consts, **out}


def link_constants(link: Link, env: dict) -> list:
    """Constants of ``link`` from ``env`` (see :func:`const_env`), each flattened to length n or
    reshaped to a scalar."""
    return [jnp.ravel(jnp.asarray(env[c])) if np.size(env[c]) > 1 else jnp.reshape(jnp.asarray(env[c]), ())
            for c in link.const_ids]
