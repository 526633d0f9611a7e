"""Expectation propagation for latent-Gaussian NumPyro programs.

Layers: :mod:`~inference.ep.sites` (tilted moments), :mod:`~inference.ep.state` (EPState,
EPInfo), :mod:`~inference.ep.problem` and :mod:`~inference.ep.gaussian` (what a sweep works on),
:mod:`~inference.ep.update` (``init``/``update``/``run``), :mod:`~inference.ep.evidence`,
:mod:`~inference.ep.graph` and :mod:`~inference.ep.recognise` (reading the model),
:mod:`~inference.ep.predict`, and the public driver :func:`~inference.ep.driver.ep`.

Inside the package always import submodules as ``from inference.ep.X import Y``: the public
function ``inference.ep`` and this package share a name. Python rebinds ``inference.ep`` to the
package whenever the package is first imported after ``inference`` itself (e.g. by ``from
inference.ep.sites import probit``), so the package is made callable too: ``inference.ep(model,
...)`` runs :func:`~inference.ep.driver.ep` whichever of the two the name points to.
"""

import sys as _sys
import types as _types

from inference.ep.driver import ep
from inference.ep.evidence import log_evidence
from inference.ep.state import EPInfo, EPState
from inference.ep.update import init, run

# ``update`` and ``recognise`` are not re-exported: they would hide the submodules of the same
# name (``from inference.ep.update import update``).
__all__ = ["ep", "EPState", "EPInfo", "init", "run", "log_evidence"]


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return ep(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
