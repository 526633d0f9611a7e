"""The data digest stored beside a reference in tests/fixtures/*.npz: a test recomputes it from the
data it rebuilds, so a reference made on other data fails loudly instead of comparing silently."""

import hashlib

import numpy as np


def data_digest(*arrays) -> str:
    """SHA-256 of the arrays' float64 bytes, in order."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a, dtype=np.float64)).tobytes())
    return h.hexdigest()
