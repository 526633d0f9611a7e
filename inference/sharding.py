"""Data parallelism for VI and Laplace: the model's data rows split over a 1-D device mesh.

Every array argument of the model (positional or keyword) whose leading dimension is the number of
data rows ``n`` (the leading dimension shared by the observed sites) is placed on the mesh with
``NamedSharding(mesh, P("data"))``: device ``k`` holds rows ``k n/D .. (k+1) n/D``. The engines
pass these arrays through the ``jit`` boundary as arguments, so XLA's SPMD partitioner splits the
likelihood: each device evaluates its rows and the gradient is summed across devices. Everything
else (priors, sizes, small arrays) stays as given: closed over by the compiled function, hence
replicated on every device.

``n`` must be divisible by the number of devices on the ``"data"`` axis: padding rows would change
the likelihood, so a `ValueError` naming the argument is raised instead (use a mesh over a divisor
of ``n``, e.g. ``make_mesh(jax.devices()[:2])``, or drop a few rows).

Several hosts: call ``jax.distributed.initialize()`` on every host first; ``jax.devices()`` then
lists the devices of all hosts, and `place_data` builds each global array from the full host copy
(every host passes the same data; each materialises only its own rows).

Example:
    >>> import numpy as np, inference, probmodels
    >>> from inference import sharding
    >>> X = np.random.default_rng(0).normal(size=(40, 2)); y = (X[:, 0] > 0).astype(int)
    >>> post = inference.laplace(probmodels.logistic_regression, X, y, shard_data=True, num_samples=50)
    >>> post.diagnostics["num_shards"] == len(sharding.make_mesh().devices.flat)
    True
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "data"


class ShardedData(NamedTuple):
    """The row-indexed model arguments, placed on ``mesh``: ``args`` maps positions and ``kwargs``
    maps names to sharded arrays (the other arguments are not held here)."""

    args: dict
    kwargs: dict


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh with axis ``"data"`` over ``devices`` (default: ``jax.devices()``, all hosts)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices is empty: a mesh needs at least one device")
    return Mesh(np.array(devices), (AXIS,))


def resolve_mesh(shard_data) -> Mesh | None:
    """``shard_data`` (``False``, ``True`` or a `Mesh` with a ``"data"`` axis) as a mesh or None."""
    if shard_data is False or shard_data is None:
        return None
    if shard_data is True:
        return make_mesh()
    if isinstance(shard_data, Mesh):
        if AXIS not in shard_data.axis_names:
            raise ValueError(f"shard_data mesh must have an axis named {AXIS!r}, got axes "
                             f"{shard_data.axis_names}")
        return shard_data
    raise TypeError(f"shard_data must be False, True or a jax.sharding.Mesh with a {AXIS!r} axis, got "
                    f"{shard_data!r}")


def num_shards(mesh: Mesh) -> int:
    """Number of row blocks: the size of the mesh's ``"data"`` axis."""
    return int(mesh.shape[AXIS])


def data_rows(observed: dict) -> int:
    """The number of data rows: the leading dimension shared by all observed sites."""
    rows = {np.shape(v)[0] if np.ndim(v) else None for v in observed.values()}
    if not observed or len(rows) != 1 or None in rows:
        raise ValueError("shard_data needs observed sites that share their number of rows (leading "
                         f"dimension), got { {k: np.shape(v) for k, v in observed.items()} }")
    return rows.pop()


def _is_rows(value, n: int) -> bool:
    return hasattr(value, "shape") and np.ndim(value) >= 1 and np.shape(value)[0] == n


def split_data(args: tuple, kwargs: dict, n: int) -> ShardedData:
    """The arguments whose leading dimension is ``n`` (as given, not yet placed)."""
    return ShardedData({i: a for i, a in enumerate(args) if _is_rows(a, n)},
                       {k: v for k, v in kwargs.items() if _is_rows(v, n)})


def merge_data(args: tuple, kwargs: dict, data: ShardedData) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with the row arrays replaced by those of ``data``."""
    return (tuple(data.args.get(i, a) for i, a in enumerate(args)),
            {k: data.kwargs.get(k, v) for k, v in kwargs.items()})


def _place(value, sharding, name):
    arr = np.asarray(value)
    size = sharding.mesh.shape[AXIS]
    if arr.shape[0] % size:
        raise ValueError(f"{name} has {arr.shape[0]} rows, not divisible by the {size} devices of the "
                         f"mesh: use a mesh over a divisor of the number of rows (sharding.make_mesh("
                         f"jax.devices()[:k])) or drop {arr.shape[0] % size} rows")
    # Every host holds the full array; each builds only its addressable row blocks (multi-host safe).
    return jax.make_array_from_callback(arr.shape, sharding, lambda index: arr[index])


def place_data(data: ShardedData, mesh: Mesh, names=()) -> ShardedData:
    """Put each row array on ``mesh`` split by rows (``P("data")``); ValueError if not divisible.
    ``names``: the model's positional parameter names, for error messages."""
    rows = NamedSharding(mesh, P(AXIS))
    label = lambda i: repr(names[i]) if i < len(names) else str(i)  # noqa: E731
    return ShardedData({i: _place(a, rows, f"argument {label(i)}") for i, a in data.args.items()},
                       {k: _place(v, rows, f"argument {k!r}") for k, v in data.kwargs.items()})


def positional_names(model) -> tuple:
    """The names of ``model``'s positional parameters (empty if it has no inspectable signature)."""
    import inspect

    try:
        params = inspect.signature(model).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def shard_model_args(args: tuple, kwargs: dict, n: int, mesh: Mesh | None = None) -> tuple[tuple, dict]:
    """The model's arguments on ``mesh``: row arrays split by rows, other arrays replicated, and
    non-array arguments unchanged."""
    mesh = make_mesh() if mesh is None else mesh
    replicated = NamedSharding(mesh, P())
    data = place_data(split_data(args, kwargs, n), mesh)

    def rep(v):
        return jax.device_put(v, replicated) if isinstance(v, (np.ndarray, jax.Array)) else v

    args, kwargs = merge_data(tuple(rep(a) for a in args), {k: rep(v) for k, v in kwargs.items()}, data)
    return args, kwargs


def prepare(model, args: tuple, kwargs: dict, trace, mesh: Mesh) -> ShardedData:
    """For an engine: the model's row arrays placed on ``mesh``, checked to give the same log
    density traced as concrete. Runs before the engine compiles anything."""
    from inference import compiled

    observed = {k: s["value"] for k, s in trace.items() if s["type"] == "sample" and s["is_observed"]}
    n = data_rows(observed)
    data = split_data(args, kwargs, n)
    if not data.args and not data.kwargs:
        raise ValueError(f"shard_data: no model argument has the {n} data rows as leading dimension")
    placed = place_data(data, mesh, positional_names(model))
    if not compiled.traceable(model, args, kwargs):  # the model must see the same data traced
        raise ValueError(
            "shard_data: the model's log density with its data traced differs from the one with the "
            "data as given (or fails); the model converts its data eagerly (e.g. labels {-1, +1} to "
            "{0, 1}): pass the data already in the model's form, or use shard_data=False")
    return placed


def diagnostics(mesh: Mesh) -> dict:
    """What an engine records about its mesh: the number of row blocks and the devices."""
    return {"num_shards": num_shards(mesh), "devices": [str(d) for d in mesh.devices.flat]}
