"""Latency-based fault avoidance for producers (RocketMQ ``MQFaultStrategy`` and
``LatencyFaultToleranceImpl``, 4.9.7), pure and clock-injected.

After every send attempt the producer reports the broker's latency; with
``sendLatencyFaultEnable`` a slow broker is kept out of queue selection for a while:

==============================  =====  =====  =====  =====  =====  =====  ======
latency at least (ms)              50    100    550   1000   2000   3000   15000
not available for (ms)              0      0  30000  60000 120000 180000  600000
==============================  =====  =====  =====  =====  =====  =====  ======

A failed attempt (connection error, timeout, broker error) is "isolated": it counts as a
30000 ms latency, so the broker is skipped for 600 s, until a later success clears it.
Without the flag nothing is recorded and selection only avoids the last failed broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledgermq.clock import SYSTEM_CLOCK, Clock

# MQFaultStrategy in rocketmq-all-4.9.7 (5.x uses other arrays).
LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency_ms: int
    start_ms: float  # available again from this monotonic time (ms)

    def is_available(self, now_ms: float) -> bool:
        return now_ms >= self.start_ms

    def sort_key(self, now_ms: float) -> tuple[bool, int, float]:
        """``FaultItem.compareTo``: available first, then lower latency, then earlier start."""
        return (not self.is_available(now_ms), self.current_latency_ms, self.start_ms)


class LatencyFaultTolerance:
    """Per-broker unavailability windows."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.items: dict[str, FaultItem] = {}
        self._worst_index = 0

    def _now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def update_fault_item(self, name: str, current_latency_ms: int, not_available_ms: int) -> None:
        start = self._now_ms() + not_available_ms
        item = self.items.get(name)
        if item is None:
            self.items[name] = FaultItem(name, current_latency_ms, start)
        else:
            item.current_latency_ms = current_latency_ms
            item.start_ms = start

    def is_available(self, name: str) -> bool:
        item = self.items.get(name)
        return item is None or item.is_available(self._now_ms())

    def remove(self, name: str) -> None:
        self.items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker: round-robin over the better half of the sorted items."""
        if not self.items:
            return None
        now = self._now_ms()
        ranked = sorted(self.items.values(), key=lambda it: it.sort_key(now))
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        self._worst_index += 1
        return ranked[self._worst_index % half].name


class FaultStrategy:
    """``MQFaultStrategy``: turns latencies into unavailability windows when enabled."""

    def __init__(
        self,
        enabled: bool = False,
        *,
        clock: Clock = SYSTEM_CLOCK,
        latency_max_ms: Sequence[int] = LATENCY_MAX_MS,
        not_available_duration_ms: Sequence[int] = NOT_AVAILABLE_DURATION_MS,
    ) -> None:
        if len(latency_max_ms) != len(not_available_duration_ms):
            raise ValueError("latency_max_ms and not_available_duration_ms must have the same length")
        self.enabled = enabled
        self.latency_max_ms = tuple(latency_max_ms)
        self.not_available_duration_ms = tuple(not_available_duration_ms)
        self.tolerance = LatencyFaultTolerance(clock)

    def compute_not_available_duration(self, latency_ms: int) -> int:
        for limit, duration in zip(
            reversed(self.latency_max_ms), reversed(self.not_available_duration_ms), strict=True
        ):
            if latency_ms >= limit:
                return duration
        return 0

    def update_fault_item(self, broker_name: str, latency_ms: int, isolation: bool) -> None:
        if not self.enabled:
            return
        duration = self.compute_not_available_duration(ISOLATION_LATENCY_MS if isolation else latency_ms)
        self.tolerance.update_fault_item(broker_name, latency_ms, duration)

    def is_available(self, broker_name: str) -> bool:
        return not self.enabled or self.tolerance.is_available(broker_name)
