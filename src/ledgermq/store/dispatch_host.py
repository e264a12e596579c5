"""What a window dispatch (store/window_dispatch.py) needs of the dispatch service that runs
it, as a protocol: the service (store/reput.py) runs the window pass, so the pass cannot
import the service back without an import circle. The names and aliases both share live
here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ledgermq.clock import Clock
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.dispatch_hooks import DispatchHook
from ledgermq.store.index import IndexService
from ledgermq.store.queue_table import ConsumeQueueTable

Arrivals = dict[tuple[str, int], int]
"""(topic, queue id) -> the queue's new max offset, for the queues a pass made grow."""
HoldOff = Callable[[], bool]


class DispatchHost(Protocol):
    """The dispatch service's state a window pass reads and moves on (reput position, the
    failure it records, the replica hold-off it honours)."""

    clock: Clock
    queues: ConsumeQueueTable
    index: IndexService | None
    dispatch_hooks: list[DispatchHook]
    dispatch_error: str | None
    reput_from: int
    dispatched_ts: int
    delay_levels_ms: list[int]
    _run_until: float
    _held: bool

    def _dispatch_failed(self, req: DispatchRequest, exc: Exception) -> None: ...

    def _dispatch_recovered(self) -> None: ...
