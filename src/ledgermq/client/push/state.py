"""What the push consumer's parts share and see change while it runs, handed to each of
them explicitly: the settings (frozen), the subscriptions, the listener's kind, the pause
switch and the lifecycle, the per-queue pull thresholds (a share of the topic-wide ones
when those are set), and the pull and consume rates reported to admin tools.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ledgermq.client.consumer.common import SubscriptionData
from ledgermq.client.push.settings import PushSettings
from ledgermq.clock import Clock

__all__ = ["ConsumerStats", "PushState"]


class ConsumerStats:
    """Per-topic pull and consume rates over the last minute (``ConsumerStatsManager``, coarse).

    Kept as one-second buckets of (sum, count) per kind, not one event per call: a push
    consumer reports every consumed message, and a minute of events at 100,000 messages a
    second was six million tuples held for the collector to walk."""

    WINDOW = 60.0

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # topic -> kind -> buckets [second, sum, count], oldest first
        self._buckets: dict[str, dict[str, deque[list[float]]]] = {}
        self.failed_total: dict[str, int] = {}

    def _add(self, topic: str, kind: str, value: float) -> None:
        kinds = self._buckets.get(topic)
        if kinds is None:
            kinds = self._buckets[topic] = {}
        q = kinds.get(kind)
        if q is None:
            q = kinds[kind] = deque()
        second = float(int(self._clock.monotonic()))
        if q and q[-1][0] == second:
            last = q[-1]
            last[1] += value
            last[2] += 1
            return
        q.append([second, value, 1])
        while second - q[0][0] > self.WINDOW:
            q.popleft()

    def pulled(self, topic: str, rt_ms: float, count: int) -> None:
        self._add(topic, "pullRT", rt_ms)
        self._add(topic, "pullTPS", count)

    def consumed(self, topic: str, ok: int, failed: int) -> None:
        if ok:
            self._add(topic, "consumeOKTPS", ok)
        if failed:
            self._add(topic, "consumeFailedTPS", failed)
            self.failed_total[topic] = self.failed_total.get(topic, 0) + failed

    def _window(self, topic: str, kind: str) -> tuple[float, int]:
        """Sum and count of ``kind`` over the buckets of the last minute."""
        now = self._clock.monotonic()
        total, count = 0.0, 0
        for second, value, n in self._buckets.get(topic, {}).get(kind, ()):
            if now - second <= self.WINDOW:
                total += value
                count += int(n)
        return total, count

    def status(self, topic: str) -> dict[str, Any]:
        rt_sum, rt_count = self._window(topic, "pullRT")
        return {
            "consumeFailedMsgs": self.failed_total.get(topic, 0),
            "consumeFailedTPS": self._window(topic, "consumeFailedTPS")[0] / self.WINDOW,
            "consumeOKTPS": self._window(topic, "consumeOKTPS")[0] / self.WINDOW,
            "consumeRT": 0.0,
            "pullRT": rt_sum / rt_count if rt_count else 0.0,
            "pullTPS": self._window(topic, "pullTPS")[0] / self.WINDOW,
        }


@dataclass(eq=False)
class PushState:
    """One push consumer's shared, changing state; its settings never change."""

    settings: PushSettings
    clock: Clock
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    lifecycle: str = "created"
    paused: bool = False
    orderly: bool = False
    start_ms: int = 0
    queue_threshold_count: int = 0
    queue_threshold_mib: int = 0
    stats: ConsumerStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ConsumerStats(self.clock)
        self.queue_threshold_count = self.settings.pull_threshold_for_queue
        self.queue_threshold_mib = self.settings.pull_threshold_size_for_queue

    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def active(self) -> bool:
        """Pull loops may go on: running, or starting (the first rebalance may dispatch
        before ``start`` returns)."""
        return self.lifecycle in ("running", "starting")

    def share_topic_thresholds(self, queues: int) -> None:
        """Topic-wide thresholds, when set, are split among the queues read now (Java's
        ``RebalancePushImpl.messageQueueChanged``): the per-queue ones are what loops check."""
        settings = self.settings
        if queues:
            if settings.pull_threshold_for_topic != -1:
                self.queue_threshold_count = max(1, settings.pull_threshold_for_topic // queues)
            if settings.pull_threshold_size_for_topic != -1:
                self.queue_threshold_mib = max(1, settings.pull_threshold_size_for_topic // queues)
