"""What the EP update consumes: a Gaussian prior in working coordinates, one scalar projection
per likelihood site, and the sites grouped by site type (:mod:`inference.ep.site_types`).

Two working spaces (chosen by :mod:`inference.ep.recognise`):

- ``"weight"`` (more sites than latent dimensions): coordinates ``v`` with prior ``N(0, I)``
  (the latent is ``u = m0 + L0 v``); site ``i`` sees ``z_i = proj[i] @ v``.
- ``"function"`` (at most as many sites as latent dimensions, e.g. a GP): coordinates
  ``z = A (u - m0)`` with prior ``N(0, prior_cov)``; site ``i`` sees ``z_i`` itself.

Either way the likelihood of site ``i`` is a function of ``eta_i = z_i + offset[i]``.
Structure (space, site types, sizes) is static pytree data; arrays are leaves, so an EP run
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

from inference.ep import site_types

KINDS = ("probit", "gaussian", "noisy_step", "quadrature", "ordinal")  # names of the site types


class SiteGroup:
    """Sites sharing one site type (:mod:`inference.ep.site_types`, static). ``data`` holds
    per-site arrays (leading axis = site) except ``data["shared"]`` (constants shared by all
    sites, e.g. a quadrature link's). ``site`` may be given as a type's name (``"probit"``; with
    ``link`` and ``num_points`` for ``"quadrature"``).
    """

    def __init__(self, site, data, size=None, link=None, num_points=96):
        if isinstance(site, str):
            site = site_types.from_name(site, link, num_points)
        if size is None:
            size = int(jax.tree_util.tree_leaves(_per_site(data))[0].shape[0])
        self.site, self.data, self.size = site, data, int(size)

    @property
    def kind(self) -> str:
        """The site type's name (what ``diagnostics["site_kinds"]`` reports)."""
        return self.site.name

    def tree_flatten(self):
        return (self.data,), (self.site, self.size)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = cls.__new__(cls)
        obj.site, obj.size = aux
        (obj.data,) = children
        return obj

    def tilted_one(self, m, v, d):
        """Tilted moments of one site with per-site data ``d`` (scalars)."""
        return self.site.tilted(m, v, d, self.data.get("shared"))

    def log_lik(self, eta):
        """Log likelihood of this group's sites at ``eta`` (shape (size,))."""
        return self.site.log_lik(eta, self.per_site(), self.data.get("shared"))

    def initial(self, offset, dtype):
        """Starting ``(tau, nu)`` of this group's sites (zero unless the type says otherwise)."""
        start = self.site.initial(self.per_site(), offset)
        if start is None:
            zero = jnp.zeros(self.size, dtype)
            return zero, zero
        return start

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
