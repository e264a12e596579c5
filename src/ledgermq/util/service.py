"""A background thread that runs a step every interval and never dies silently.

The store is synchronous (no asyncio), so its flush, reput and clean loops are threads.
Each ``step`` exception is logged with the service's name and the loop goes on; ``stop``
wakes the thread at once and joins it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ServiceThread:
    """Subclasses implement ``step``; ``wakeup`` cuts the current wait short."""

    name = "service"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._skip_on_stop = False
        self.failures = 0

    def step(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Runs once in the service thread after the loop ends (final flush and so on)."""

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wakeup(self) -> None:
        if not self._wake.is_set():  # the hot path (every put) skips the Event's lock
            self._wake.set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, timeout: float = 10.0, *, final_step: bool = True) -> None:
        """Stop the loop; ``final_step=False`` skips ``on_stop`` (crash simulation only)."""
        self._skip_on_stop = not final_step
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("%s did not stop within %.1fs", self.name, timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._safe(self.step)
        if not self._skip_on_stop:
            self._safe(self.on_stop)

    def _safe(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            self.failures += 1
            log.exception("%s: step failed (failure %d); the loop goes on", self.name, self.failures)
