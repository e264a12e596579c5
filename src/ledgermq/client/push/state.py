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
    """Per-topic pull and consume rates over the last minute (``ConsumerStatsManager``, coarse)."""

    WINDOW = 60.0

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._events: dict[str, deque[tuple[float, str, float]]] = {}
        self.failed_total: dict[str, int] = {}

    def _add(self, topic: str, kind: str, value: float) -> None:
        q = self._events.setdefault(topic, deque())
        now = self._clock.monotonic()
        q.append((now, kind, value))
        while q and now - q[0][0] > self.WINDOW:
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

    def status(self, topic: str) -> dict[str, Any]:
        now = self._clock.monotonic()
        events = [e for e in self._events.get(topic, ()) if now - e[0] <= self.WINDOW]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _, kind, value in events:
            sums[kind] = sums.get(kind, 0.0) + value
            counts[kind] = counts.get(kind, 0) + 1
        return {
            "consumeFailedMsgs": self.failed_total.get(topic, 0),
            "consumeFailedTPS": sums.get("consumeFailedTPS", 0.0) / self.WINDOW,
            "consumeOKTPS": sums.get("consumeOKTPS", 0.0) / self.WINDOW,
            "consumeRT": 0.0,
            "pullRT": sums.get("pullRT", 0.0) / counts["pullRT"] if counts.get("pullRT") else 0.0,
            "pullTPS": sums.get("pullTPS", 0.0) / self.WINDOW,
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
