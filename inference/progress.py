"""Progress bars that cost nothing on short work.

A `Bar` counts work from the moment it is made, but creates its tqdm bar (imports tqdm, writes
to the terminal or a notebook) only at the first update at least `DELAY` seconds later. A fit of
a few hundredths of a second never shows or pays for a bar; a fit of minutes shows one after a
second. Engines that run their work in chunks from Python (EP's sweeps) size the chunks by the
rate measured so far (`next_chunk`), so a short run is one or two calls and a long one advances
the bar every quarter second. Engines whose loop is one compiled program (NUTS, elliptical slice,
spike-and-slab Gibbs) call `Bar.update` from a host callback: the draws are the same with and
without the bar.

Example:
    >>> bar = Bar(True, total=100, desc="demo")
    >>> bar.update(100); bar.shown   # 100 units in far less than DELAY seconds: no bar
    False
    >>> bar.close()
"""

from __future__ import annotations

import contextlib
import threading
import time

DELAY = 1.0  # seconds of work before a bar appears
CHUNK_SECONDS = 0.25  # target duration of one chunk of a loop run from Python with a bar


def _open(**options):
    """The tqdm bar itself (``tqdm.auto``: a widget in notebooks, text elsewhere)."""
    from tqdm.auto import tqdm

    return tqdm(**options)


class Bar:
    """A tqdm bar over ``total`` units, created only once `DELAY` seconds have passed since the
    `Bar` was made (never when ``on`` is false). `update` is thread-safe, so host callbacks of
    compiled loops may call it; ``postfix`` keywords go to tqdm's ``set_postfix``."""

    def __init__(self, on: bool, total: int, desc: str, unit: str = "it"):
        self.on, self.total, self.desc, self.unit = bool(on), int(total), desc, unit
        self.start = time.perf_counter()
        self.count = 0
        self._bar = None
        self._lock = threading.Lock()

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, n: int = 1, **postfix) -> None:
        if not self.on:
            return
        with self._lock:
            self.count += int(n)
            if self._bar is None:
                if time.perf_counter() - self.start < DELAY:
                    return
                self._bar = _open(total=self.total, desc=self.desc, unit=self.unit, initial=self.count)
            else:
                self._bar.update(int(n))
            if postfix:
                self._bar.set_postfix(**postfix)

    def set_postfix(self, **postfix) -> None:
        """tqdm's ``set_postfix`` once the bar is shown; nothing before."""
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix(**postfix)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            self.on = False

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The bar of the compiled loop now running, which `tick` advances from a host callback: a kept
# program is reused across calls, so it cannot close over one call's bar.
_CURRENT = {"bar": None}
_CURRENT_LOCK = threading.Lock()


def tick(n) -> None:
    """Host side of `every`: advance the bar of the run in progress, if any."""
    with _CURRENT_LOCK:
        bar = _CURRENT["bar"]
    if bar is not None:
        bar.update(int(n))


@contextlib.contextmanager
def running(bar: Bar):
    """Make ``bar`` the one `tick` advances while a compiled loop runs; close it afterwards."""
    with _CURRENT_LOCK:
        _CURRENT["bar"] = bar
    try:
        yield bar
    finally:
        with _CURRENT_LOCK:
            _CURRENT["bar"] = None
        bar.close()


def every(i, total: int, parts: int = 20) -> None:
    """Inside a compiled loop over ``total`` steps (``i`` the step): call `tick` about ``parts``
    times. A host callback does not touch the loop's values: the answer is the same with and
    without it (under ``vmap`` it runs once per batch member)."""
    import jax
    from jax import lax

    rate = max(1, total // parts)
    lax.cond((i + 1) % rate == 0, lambda: jax.debug.callback(tick, rate), lambda: None)


def next_chunk(done: int, elapsed: float, remaining: int) -> int:
    """Units of work for the next call of a loop run from Python with a bar: 1 first (to measure
    the rate), then as many as take about `CHUNK_SECONDS` at the rate so far, at most
    ``remaining``. A run shorter than a quarter second thus takes two calls."""
    if done <= 0 or elapsed <= 0:
        return min(1, remaining)
    return int(max(1, min(remaining, CHUNK_SECONDS * done / elapsed)))
