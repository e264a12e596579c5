"""A latency histogram cheap enough for the hot path: a bisect and two additions.

prometheus_client's Histogram takes a lock and (with labels) a dict lookup under another
lock per observation; the broker records one observation per request and per fsync, so it
keeps plain counts here and the metrics collector turns them into Prometheus buckets at
scrape time. Written from one thread at a time per histogram (the event loop, or the one
flush thread); a scrape reading while a write happens sees a count at most one behind.
"""

from __future__ import annotations

from bisect import bisect_left

# Seconds; 0.5 ms .. 30 s covers an in-memory pull up to a slave ack past syncFlushTimeout.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class LatencyHistogram:
    """Counts per bucket (upper bounds ``bounds``, then +Inf) and the sum of observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (Prometheus' le).
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, +Inf last, as Prometheus buckets are written."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*(repr(b) for b in self.bounds), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out
