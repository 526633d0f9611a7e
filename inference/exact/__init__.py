"""Exact inference for discrete NumPyro programs (Bayesian networks, Markov random fields).

Modules: :mod:`~inference.exact.factors` (the factor graph read from the program's trace),
:mod:`~inference.exact.plan` (min-fill elimination order, cluster tree, tree-width limit),
:mod:`~inference.exact.eliminate` (sum- and max-product variable elimination, marginals, joint
draws), :mod:`~inference.exact.bp` (belief propagation: exact on trees, loopy as an approximation)
and the drivers :func:`~inference.exact.driver.exact` and :func:`~inference.exact.driver.most_probable`.

Inside the package import submodules as ``from inference.exact.X import Y``: the public function
``inference.exact`` and this package share a name, so the package is callable too (as
``inference.ep`` is).

Example:
    >>> import inference, probmodels
    >>> net = probmodels.bayes_net({"R": {"p": 0.4}, "W": {"parents": ["R"], "p": [0.2, 0.9]}})
    >>> round(float(inference.exact(net, W=1, num_samples=10).marginals["R"][1]), 4)
    0.75
"""

import sys as _sys
import types as _types

from inference.exact.driver import MostProbable, exact, most_probable
from inference.exact.plan import MAX_TABLE_SIZE, TreewidthError

__all__ = ["exact", "most_probable", "MostProbable", "TreewidthError", "MAX_TABLE_SIZE"]


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return exact(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
