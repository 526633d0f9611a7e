"""What the EP update consumes: a Gaussian prior in working coordinates, one scalar projection
per likelihood site, and the sites grouped by likelihood kind.

Two working spaces (chosen by :mod:`inference.ep.recognise`):

- ``"weight"`` (more sites than latent dimensions): coordinates ``v`` with prior ``N(0, I)``
  (the latent is ``u = m0 + L0 v``); site ``i`` sees ``z_i = proj[i] @ v``.
- ``"function"`` (at most as many sites as latent dimensions, e.g. a GP): coordinates
  ``z = A (u - m0)`` with prior ``N(0, prior_cov)``; site ``i`` sees ``z_i`` itself.

Either way the likelihood of site ``i`` is a function of ``eta_i = z_i + offset[i]``.
Structure (space, kinds, links, sizes) is static pytree data; arrays are leaves, so an EP run
on new data of the same structure reuses the compiled code.

Example:
    >>> import jax.numpy as jnp
    >>> g = SiteGroup("probit", {"s": jnp.array([1.0, -1.0])})
    >>> p = EPProblem("function", None, jnp.eye(2), jnp.zeros(2), (g,))
    >>> p.num_sites, [float(x) for x in tilted(p, jnp.zeros(2), jnp.ones(2))[0]]
    (2, [-0.6931471805599453, -0.6931471805599453])
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from inference.ep import sites

KINDS = ("probit", "gaussian", "noisy_step", "quadrature")


class SiteGroup:
    """Sites sharing one likelihood kind. ``data`` holds per-site arrays (leading axis = site)
    except ``data["shared"]`` (quadrature: constants shared by all sites).

    Kinds and their data: ``probit`` {s}; ``gaussian`` {y, noise_var, log_const} (likelihood
    ``exp(log_const) N(y | eta, noise_var)``); ``noisy_step`` {s, eps}; ``quadrature``
    {consts, shared} with ``link(eta, consts_i, shared)`` the log-likelihood of one site (a
    :class:`~inference.ep.graph.SiteLink` or any hashable callable; static).
    """

    def __init__(self, kind, data, size=None, link=None, num_points=96):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if size is None:
            size = int(jax.tree_util.tree_leaves(_per_site(data))[0].shape[0])
        self.kind, self.data, self.size, self.link, self.num_points = kind, data, int(size), link, num_points

    def tree_flatten(self):
        return (self.data,), (self.kind, self.size, self.link, self.num_points)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = cls.__new__(cls)
        obj.kind, obj.size, obj.link, obj.num_points = aux
        (obj.data,) = children
        return obj

    def tilted_one(self, m, v, d):
        """Tilted moments of one site with per-site data ``d`` (scalars)."""
        if self.kind == "probit":
            return sites.probit(m, v, d["s"])
        if self.kind == "gaussian":
            log_z, mean, var = sites.gaussian(m, v, d["y"], d["noise_var"])
            return log_z + d["log_const"], mean, var
        if self.kind == "noisy_step":
            return sites.noisy_step(m, v, d["s"], d["eps"])
        return sites.quadrature(lambda e: self.link(e, d["consts"], self.data["shared"]), m, v, self.num_points)

    def per_site(self):
        return _per_site(self.data)

    def tilted(self, m, v):
        """Vectorised over this group's sites."""
        return jax.vmap(self.tilted_one)(m, v, self.per_site())


def _per_site(data):
    return {k: v for k, v in data.items() if k != "shared"}


jax.tree_util.register_pytree_node(SiteGroup, SiteGroup.tree_flatten, SiteGroup.tree_unflatten)


class EPProblem:
    """Prior, projections and site groups in working coordinates (see the module docstring)."""

    def __init__(self, space, proj, prior_cov, offset, groups):
        if space not in ("weight", "function"):
            raise ValueError(f"space must be 'weight' or 'function', got {space!r}")
        self.space, self.proj, self.prior_cov, self.offset, self.groups = space, proj, prior_cov, offset, tuple(groups)

    @property
    def num_sites(self) -> int:
        return int(self.offset.shape[0])

    @property
    def dim(self) -> int:
        return int(self.proj.shape[1]) if self.space == "weight" else self.num_sites

    def starts(self):
        out, s = [], 0
        for g in self.groups:
            out.append(s)
            s += g.size
        return out

    def tree_flatten(self):
        return (self.proj, self.prior_cov, self.offset, self.groups), (self.space,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = cls.__new__(cls)
        (obj.space,) = aux
        obj.proj, obj.prior_cov, obj.offset, groups = children
        obj.groups = tuple(groups)
        return obj


jax.tree_util.register_pytree_node(EPProblem, EPProblem.tree_flatten, EPProblem.tree_unflatten)


def tilted(problem: EPProblem, m, v):
    """Tilted (log Z, mean, var) of every site given cavities ``N(z | m, v)`` (shape (n,)).

    Returned moments are of ``z`` (the offset is added before and removed after)."""
    eta = m + problem.offset
    outs, s = [], 0
    for g in problem.groups:
        outs.append(g.tilted(eta[s:s + g.size], v[s:s + g.size]))
        s += g.size
    log_z, mean, var = (jnp.concatenate([o[k] for o in outs]) for k in range(3))
    return log_z, mean - problem.offset, var


def tilted_site(problem: EPProblem, i, m, v):
    """Tilted (log Z, mean, var) of site ``i`` (a traced index) with cavity ``N(z | m, v)``."""
    starts = problem.starts()
    eta = m + problem.offset[i]

    def branch(k):
        g, s = problem.groups[k], starts[k]

        def run(eta, v):
            j = jnp.clip(i - s, 0, g.size - 1)
            d = jax.tree_util.tree_map(lambda a: a[j], g.per_site())
            return g.tilted_one(eta, v, d)

        return run

    gid = sum((i >= s).astype(jnp.int32) for s in starts[1:]) if len(starts) > 1 else 0
    log_z, mean, var = lax.switch(gid, [branch(k) for k in range(len(problem.groups))], eta, v)
    return log_z, mean - problem.offset[i], var
