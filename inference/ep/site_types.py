"""EP site types: small static values, each owning one likelihood's maths.

A site type is a frozen (hashable) dataclass carried in the static structure of an
:class:`~inference.ep.problem.SiteGroup`; the per-site data stay pytree leaves, so a new data set
of the same structure reuses the compiled EP. Each type gives

- ``tilted(m, v, d, shared)``: tilted ``(log Z, mean, var)`` of one site with cavity
  ``N(eta | m, v)`` and per-site data ``d`` (a dict of scalars; ``shared``: constants common to
  the group), from :mod:`inference.ep.sites`;
- ``log_lik(eta, d, shared)``: the log likelihood of the group's sites (arrays), for Laplace's
  Newton steps (`inference.latent_newton`); ``smooth`` says whether it has derivatives;
- ``initial(d, offset)``: starting site parameters ``(tau, nu)``, or ``None`` for zero sites.

Adding a likelihood to EP is one new type here (plus, for the recogniser to produce it, a rule in
:mod:`inference.ep.recognise`). ``name`` is what ``diagnostics["site_kinds"]`` reports.

Example:
    >>> import jax.numpy as jnp
    >>> log_z, mean, var = Probit().tilted(jnp.asarray(0.0), jnp.asarray(1.0), {"s": jnp.asarray(1.0)}, None)
    >>> round(float(jnp.exp(log_z)), 6), Probit().name
    (0.5, 'probit')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr

from inference.ep import sites


@dataclass(frozen=True)
class Probit:
    """``Phi(s eta)``; data ``{s}`` (+1 or -1)."""

    name: ClassVar[str] = "probit"
    smooth: ClassVar[bool] = True

    def tilted(self, m, v, d, shared):
        return sites.probit(m, v, d["s"])

    def log_lik(self, eta, d, shared):
        return log_ndtr(d["s"] * eta)

    def initial(self, d, offset):
        return None


@dataclass(frozen=True)
class Gaussian:
    """``exp(log_const) N(y | eta, noise_var)``; data ``{y, noise_var, log_const}``. Exact: its sites
    start at their final values."""

    name: ClassVar[str] = "gaussian"
    smooth: ClassVar[bool] = True

    def tilted(self, m, v, d, shared):
        log_z, mean, var = sites.gaussian(m, v, d["y"], d["noise_var"])
        return log_z + d["log_const"], mean, var

    def log_lik(self, eta, d, shared):
        r = eta - d["y"]
        return d["log_const"] - 0.5 * (r * r / d["noise_var"] + jnp.log(2 * jnp.pi * d["noise_var"]))

    def initial(self, d, offset):
        tau = 1.0 / d["noise_var"]
        return tau, d["y"] / d["noise_var"] - tau * offset


@dataclass(frozen=True)
class NoisyStep:
    """``eps + (1 - 2 eps) step(s eta)``; data ``{s, eps}``. No derivatives (Laplace refuses it)."""

    name: ClassVar[str] = "noisy_step"
    smooth: ClassVar[bool] = False

    def tilted(self, m, v, d, shared):
        return sites.noisy_step(m, v, d["s"], d["eps"])

    def log_lik(self, eta, d, shared):
        raise ValueError("the noisy step has no derivatives")

    def initial(self, d, offset):
        return None


@dataclass(frozen=True)
class Quadrature:
    """Any univariate log likelihood ``link(eta, consts_i, shared)`` (a hashable callable, e.g. a
    :class:`~inference.ep.graph.SiteLink`); data ``{consts}``. Tilted moments by
    :func:`~inference.ep.sites.quadrature` with ``num_points`` nodes. Non-log-concave links
    (Student-t) give negative site precisions, which EP keeps while the cavities stay valid."""

    link: object
    num_points: int = 96
    name: ClassVar[str] = "quadrature"
    smooth: ClassVar[bool] = True

    def tilted(self, m, v, d, shared):
        return sites.quadrature(lambda e: self.link(e, d["consts"], shared), m, v, self.num_points)

    def log_lik(self, eta, d, shared):
        return jax.vmap(lambda e, c: self.link(e, c, shared))(eta, d["consts"])

    def initial(self, d, offset):
        return None


@dataclass(frozen=True)
class Ordinal:
    """Ordered probit (Chu & Ghahramani 2005): ``Phi((hi - eta) / s) - Phi((lo - eta) / s)``; data
    ``{lo, hi, s}``, the cut points around the observed category (``lo = -inf`` for the first,
    ``hi = +inf`` for the last) and the noise scale. Closed form, :func:`~inference.ep.sites.ordinal`."""

    name: ClassVar[str] = "ordinal"
    smooth: ClassVar[bool] = True

    def tilted(self, m, v, d, shared):
        return sites.ordinal(m, v, d["lo"], d["hi"], d["s"])

    def log_lik(self, eta, d, shared):
        return sites.log_diff_ndtr((d["hi"] - eta) / d["s"], (d["lo"] - eta) / d["s"])

    def initial(self, d, offset):
        return None


BY_NAME = {"probit": Probit(), "gaussian": Gaussian(), "noisy_step": NoisyStep(), "ordinal": Ordinal()}


def from_name(kind: str, link=None, num_points: int = 96):
    """The site type of a legacy kind string (``SiteGroup("probit", ...)``)."""
    if kind == "quadrature":
        return Quadrature(link, num_points)
    if kind not in BY_NAME:
        raise ValueError(f"kind must be one of {tuple(BY_NAME) + ('quadrature',)}, got {kind!r}")
    return BY_NAME[kind]
