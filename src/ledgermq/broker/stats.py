"""Message and request statistics of one broker (RocketMQ's ``BrokerStatsManager`` and the
TPS figures of its ``StoreStatsService``), counted on the hot path and read by the metrics
collector, GET_BROKER_RUNTIME_INFO and VIEW_BROKER_STATS_DATA.

Why plain ints in dicts: a send or pull adds one dict lookup and three integer additions
(well under a microsecond); prometheus_client's labelled Counter costs a lock and a
label-tuple lookup per ``inc`` (measured: see docs/architecture.md, "Metrics"), and we
need the same numbers for the RocketMQ admin answers anyway. Everything here is touched
from the event loop only (the flush thread has its own histogram on the store,
``MessageStore.flush_latency``), so no locks.

* ``topic_put[topic]``: messages, bytes and requests of successful puts (TOPIC_PUT_NUMS,
  TOPIC_PUT_SIZE);
* ``group_get[(topic, group)]``: messages and bytes returned by pulls (GROUP_GET_NUMS,
  GROUP_GET_SIZE); key ``topic@group`` in VIEW_BROKER_STATS_DATA;
* ``requests[(request code, response code)]``: a latency histogram per pair;
* ``replication``: how long SYNC_MASTER sends waited for a slave's acknowledgement.

Cardinality: a dict stops growing at ``StatsSettings.max_keys``; later keys are counted
under topic/group ``__other__`` so totals stay right and the scrape stays bounded.
Windows (RocketMQ's StatsItem): every 10 s a sample of each key for the last minute, every
10 min for the last hour, every hour for the last day; every second a sample of the broker
totals for the 10 s / 1 min / 10 min TPS figures. ``tick`` takes them (BrokerApp calls it
every second) and rolls the midnight snapshots (``msg*TotalTodayMorning``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.util.latency import LatencyHistogram

OTHER = "__other__"
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
_MINUTE_EVERY_MS = 10_000
_HOUR_EVERY_MS = 600_000
_DAY_EVERY_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class StatsSettings:
    """Bounds on what is kept (and exported), so a broker with many topics stays cheap."""

    max_keys: int = 10_000  # per counter table (topics; topic-group pairs)
    max_lag_series: int = 2_000  # per-queue consumer lag series in a scrape
    tps_samples: int = 601  # one a second: enough for the 10-minute TPS


@dataclass(slots=True)
class KeyStats:
    """One key's totals since boot, and its samples (ts_ms, nums, size, times) per window."""

    nums: int = 0
    size: int = 0
    times: int = 0
    minute: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=7))
    hour: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=7))
    day: deque[tuple[int, int, int, int]] = field(default_factory=lambda: deque(maxlen=25))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """RocketMQ's StatsSnapshot: the window's sum, its rate per second, and sum per request."""

    sum: int
    tps: float
    avgpt: float

    def to_json(self) -> dict[str, object]:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}


def window(samples: deque[tuple[int, int, int, int]], size: bool) -> WindowStats:
    """First-to-last difference of a sample ring, as StatsItem.computeStatsData does it."""
    if len(samples) < 2:
        return WindowStats(0, 0.0, 0.0)
    first, last = samples[0], samples[-1]
    total = (last[2] - first[2]) if size else (last[1] - first[1])
    times = last[3] - first[3]
    span = last[0] - first[0]
    return WindowStats(total, total * 1000 / span if span > 0 else 0.0, total / times if times else 0.0)


class BrokerStats:
    def __init__(self, settings: StatsSettings | None = None, now_ms: Callable[[], int] | None = None) -> None:
        self.settings = settings or StatsSettings()
        self._now_ms = now_ms or SYSTEM_CLOCK.wall_ms
        self.topic_put: dict[str, KeyStats] = {}
        self.group_get: dict[tuple[str, str], KeyStats] = {}
        self.requests: dict[tuple[int, int], LatencyHistogram] = {}
        self.replication = LatencyHistogram()
        self.put_msgs = 0  # messages put since boot
        self.get_msgs = 0  # messages returned by pulls since boot ("transferred")
        self.get_found = 0  # pulls that returned messages
        self.get_miss = 0  # pulls that returned none
        self.totals: deque[tuple[int, int, int, int, int]] = deque(maxlen=self.settings.tps_samples)
        # RocketMQ's BrokerStats: totals at the last two midnights (put: see runtime_info).
        self.put_today_morning = 0
        self.put_yesterday_morning = 0
        self.get_today_morning = 0
        self.get_yesterday_morning = 0
        self._day = time.localtime(self._now_ms() / 1000).tm_yday
        self._next_minute = self._next_hour = self._next_day = 0

    # -- hot path ----------------------------------------------------------------------
    def count_put(self, topic: str, msgs: int, size: int) -> None:
        s = self.topic_put.get(topic)
        if s is None:
            s = self._new_put(topic)
        s.nums += msgs
        s.size += size
        s.times += 1
        self.put_msgs += msgs

    def count_get(self, topic: str, group: str, msgs: int, size: int) -> None:
        """A pull answered: ``msgs`` messages of ``size`` bytes (0: a miss)."""
        if msgs <= 0:
            self.get_miss += 1
            return
        self.get_found += 1
        self.get_msgs += msgs
        key = (topic, group)
        s = self.group_get.get(key)
        if s is None:
            s = self._new_get(key)
        s.nums += msgs
        s.size += size
        s.times += 1

    def count_request(self, code: int, status: int, seconds: float) -> None:
        h = self.requests.get((code, status))
        if h is None:
            h = self.requests[(code, status)] = LatencyHistogram()
        h.observe(seconds)

    def _new_put(self, topic: str) -> KeyStats:
        if len(self.topic_put) >= self.settings.max_keys:
            topic = OTHER
        found = self.topic_put.get(topic)
        return found if found is not None else self.topic_put.setdefault(topic, self._started())

    def _new_get(self, key: tuple[str, str]) -> KeyStats:
        if len(self.group_get) >= self.settings.max_keys:
            key = (OTHER, OTHER)
        found = self.group_get.get(key)
        return found if found is not None else self.group_get.setdefault(key, self._started())

    def _started(self) -> KeyStats:
        """A new item whose rings start with a zero sample: otherwise the first traffic of a
        topic or group, counted before the item's first sample, would never show in a window."""
        s = KeyStats()
        zero = (self._now_ms(), 0, 0, 0)
        s.minute.append(zero)
        s.hour.append(zero)
        s.day.append(zero)
        return s

    # -- sampling (once a second) ------------------------------------------------------
    def tick(self, stored_messages: Callable[[], int] | None = None) -> None:
        """Take the samples that are due, and roll the midnight snapshots on a new day."""
        now = self._now_ms()
        self.totals.append((now, self.put_msgs, self.get_msgs, self.get_found, self.get_miss))
        rings: list[str] = []
        if now >= self._next_minute:
            rings.append("minute")
            self._next_minute = now + _MINUTE_EVERY_MS
        if now >= self._next_hour:
            rings.append("hour")
            self._next_hour = now + _HOUR_EVERY_MS
        if now >= self._next_day:
            rings.append("day")
            self._next_day = now + _DAY_EVERY_MS
        if rings:
            for table in (self.topic_put, self.group_get):
                for s in list(table.values()):
                    sample = (now, s.nums, s.size, s.times)
                    for ring in rings:
                        getattr(s, ring).append(sample)
        day = time.localtime(now / 1000).tm_yday
        if day != self._day:
            self._day = day
            self.put_yesterday_morning = self.put_today_morning
            self.put_today_morning = stored_messages() if stored_messages is not None else self.put_msgs
            self.get_yesterday_morning = self.get_today_morning
            self.get_today_morning = self.get_msgs

    def tps(self, index: int, seconds: int) -> float:
        """Per-second rate of total ``index`` (1 put, 2 get msgs, 3 found, 4 miss) over ``seconds``."""
        if len(self.totals) < 2:
            return 0.0
        last = self.totals[-1]
        since = last[0] - seconds * 1000
        first = last
        for sample in reversed(self.totals):
            if sample[0] < since:
                break
            first = sample
        span = last[0] - first[0]
        return (last[index] - first[index]) * 1000 / span if span > 0 else 0.0

    def tps_text(self, *indexes: int) -> str:
        """RocketMQ's "10 s, 1 min, 10 min" TPS triple (summed over ``indexes``)."""
        return " ".join(f"{sum(self.tps(i, s) for i in indexes):.2f}" for s in (10, 60, 600))

    def group_get_tps(self, topic: str, group: str) -> float:
        """RocketMQ's tpsGroupGetNums: messages per second pulled in the last minute."""
        s = self.group_get.get((topic, group))
        return window(s.minute, False).tps if s is not None else 0.0

    def key_stats(self, name: str, key: str) -> tuple[WindowStats, WindowStats, WindowStats] | None:
        """VIEW_BROKER_STATS_DATA: (minute, hour, day) of one stats item, None if unknown."""
        size = name.endswith("_SIZE")
        s: KeyStats | None
        if name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            s = self.topic_put.get(key)
        elif name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            topic, _, group = key.partition("@")
            s = self.group_get.get((topic, group))
        else:
            return None
        if s is None:
            return None
        return window(s.minute, size), window(s.hour, size), window(s.day, size)


def stats_runtime_info(stats: BrokerStats, stored: int) -> dict[str, str]:
    """The counter and TPS entries of GET_BROKER_RUNTIME_INFO (``brokerStatus``, and
    ``clusterList``'s InTPS/OutTPS and In/OutTotal columns); ``stored`` is the consume-queue
    entry count that stands for msgPutTotalTodayNow (see admin.runtime_info)."""
    return {
        "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
        "msgPutTotalTodayMorning": str(stats.put_today_morning),
        "msgPutTotalTodayNow": str(stored),
        "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
        "msgGetTotalTodayMorning": str(stats.get_today_morning),
        "msgGetTotalTodayNow": str(stats.get_msgs),
        "putTps": stats.tps_text(1),
        "getTransferedTps": stats.tps_text(2),
        "getFoundTps": stats.tps_text(3),
        "getMissTps": stats.tps_text(4),
        "getTotalTps": stats.tps_text(3, 4),
    }
