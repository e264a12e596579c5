"""The Trends page's data: every ``interval_s`` one sample of in/out TPS per broker and per
topic, the last ``points`` samples kept (ten minutes at the defaults).

Rates are differences of counters the cluster already keeps, divided by the time between
two samples, so they are exact over each interval (not a broker's one-minute average):

* per broker: runtime info's ``msgPutTotalTodayNow`` (messages stored) and
  ``msgGetTotalTodayNow`` (messages returned by pulls);
* per topic, in: the sum of its queues' max offsets (GET_TOPIC_STATS_INFO on each broker
  group of its route); out: the sum of its consumer groups' committed offsets
  (GET_CONSUME_STATS of each group), i.e. what consumers have acknowledged.

System topics (retry, DLQ, scheduling, TBW102) are left out. A counter that goes down (a
restart, an offset reset) starts a new baseline instead of a negative rate; an item that
could not be asked this round gets a gap (null), never a made-up zero. Sampling runs for
the console's whole life so the charts have a history when opened; a round that fails as a
whole (the name server is away) is counted, its reason kept for the page, and the next
round runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import RETRY_PREFIX, select_broker_addr
from ledgermq.admin.operations import SYSTEM_TOPIC_PREFIXES
from ledgermq.aio.periodic import Periodic
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import LedgerError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Series:
    """One chart's two lines, aligned with ``TrendSampler.times``."""

    inbound: deque[float | None]
    outbound: deque[float | None]


@dataclass(slots=True)
class _Counter:
    """The previous reading of one counter pair, to take rates from."""

    at: float
    inbound: int | None
    outbound: int | None


@dataclass(slots=True)
class TrendSampler:
    admin: AdminClient
    interval_s: float
    points: int
    clock: Callable[[], float] = SYSTEM_CLOCK.monotonic
    wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms
    times: deque[int] = field(init=False)
    brokers: dict[str, Series] = field(default_factory=dict)
    topics: dict[str, Series] = field(default_factory=dict)
    failures: int = 0
    last_error: str = ""
    _previous: dict[tuple[str, str], _Counter] = field(default_factory=dict)
    _task: Periodic | None = None

    def __post_init__(self) -> None:
        self.times = deque(maxlen=self.points)

    def start(self) -> None:
        self._task = Periodic("console-trends", self.sample, self.interval_s, first_delay=0, on_error=self._failed)
        self._task.start()

    async def stop(self) -> None:
        if self._task is not None:
            await self._task.stop()

    def _failed(self, _task: Periodic, exc: Exception) -> None:
        self.failures += 1
        self.last_error = str(exc) or type(exc).__name__
        if self.failures in (1, 10) or self.failures % 100 == 0:  # a cluster that stays away: not every round
            log.warning("console trends: a sample failed (%d so far): %s", self.failures, self.last_error)

    async def sample(self) -> None:
        """One round: read every counter, then append one point to every series."""
        broker_counts, topic_counts = await asyncio.gather(self._broker_counts(), self._topic_counts())
        now = self.clock()
        self.times.append(self.wall_ms() // 1000)
        self._append(self.brokers, "broker", broker_counts, now)
        self._append(self.topics, "topic", topic_counts, now)
        self.last_error = ""

    def _append(
        self, table: dict[str, Series], kind: str, counts: dict[str, tuple[int | None, int | None]], now: float
    ) -> None:
        for name in counts.keys() - table.keys():
            gaps = [None] * (len(self.times) - 1)
            table[name] = Series(deque(gaps, maxlen=self.points), deque(gaps, maxlen=self.points))
        for name, series in list(table.items()):
            inbound, outbound = counts.get(name, (None, None))
            before = self._previous.get((kind, name))
            self._previous[(kind, name)] = _Counter(now, inbound, outbound)
            series.inbound.append(_rate(before.inbound if before else None, inbound, before.at if before else now, now))
            series.outbound.append(
                _rate(before.outbound if before else None, outbound, before.at if before else now, now)
            )
            full = len(series.inbound) == self.points
            if full and all(v is None for v in series.inbound) and all(v is None for v in series.outbound):
                del table[name]  # gone for the whole window
                self._previous.pop((kind, name), None)

    async def _broker_counts(self) -> dict[str, tuple[int | None, int | None]]:
        info = await self.admin.cluster_info()
        addrs = sorted({a for d in info.broker_addr_table.values() for a in d.broker_addrs.values()})

        async def one(addr: str) -> tuple[int | None, int | None]:
            try:
                table = await self.admin.broker_runtime_info(addr)
            except (LedgerError, OSError) as exc:
                log.debug("console trends: runtime info of %s: %s", addr, exc)
                return None, None
            return _int(table.get("msgPutTotalTodayNow")), _int(table.get("msgGetTotalTodayNow"))

        answers = await asyncio.gather(*(one(a) for a in addrs))
        return dict(zip(addrs, answers, strict=True))

    async def _topic_counts(self) -> dict[str, tuple[int | None, int | None]]:
        all_topics = await self.admin.topic_list()
        topics = [t for t in all_topics if not t.startswith(SYSTEM_TOPIC_PREFIXES)]
        groups = [t[len(RETRY_PREFIX) :] for t in all_topics if t.startswith(RETRY_PREFIX)]
        inbound: dict[str, int | None] = {}
        for topic in topics:
            try:
                route = await self.admin.route(topic)
                total = 0
                for data in route.broker_datas:
                    addr = select_broker_addr(data)
                    if addr is not None:
                        total += sum(o.max_offset for o in (await self.admin.topic_stats(addr, topic)).values())
                inbound[topic] = total
            except (LedgerError, OSError) as exc:
                log.debug("console trends: stats of %s: %s", topic, exc)
                inbound[topic] = None
        outbound: dict[str, int] = {}
        for group in groups:
            try:
                stats = await self.admin.examine_consume_stats(group)
            except (LedgerError, OSError) as exc:
                log.debug("console trends: consume stats of %s: %s", group, exc)
                continue
            for mq, wrapper in stats.offset_table.items():
                if mq.topic in inbound:
                    outbound[mq.topic] = outbound.get(mq.topic, 0) + max(0, wrapper.consumer_offset)
        return {t: (inbound[t], outbound.get(t, 0) if inbound[t] is not None else None) for t in topics}

    def snapshot(self) -> dict[str, Any]:
        """What the page draws: the sample times (epoch seconds) and each series."""

        def table(t: dict[str, Series]) -> dict[str, Any]:
            return {name: {"in": list(s.inbound), "out": list(s.outbound)} for name, s in sorted(t.items())}

        return {
            "intervalS": self.interval_s,
            "times": list(self.times),
            "brokers": table(self.brokers),
            "topics": table(self.topics),
            "failures": self.failures,
            "lastError": self.last_error,
        }


def _rate(before: int | None, now_value: int | None, t0: float, t1: float) -> float | None:
    if before is None or now_value is None or t1 <= t0 or now_value < before:
        return None
    return round((now_value - before) / (t1 - t0), 2)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None
