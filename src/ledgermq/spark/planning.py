"""From offsets to Spark partitions, and the data-loss rules. Pure: no I/O, no Spark.

A partition is one range ``[start, end)`` of one queue. With ``minPartitions`` larger than
the number of ranges, the larger ranges are split (as spark-sql-kafka's
``KafkaOffsetRangeCalculator`` does): each range gets a share of ``minPartitions`` in
proportion to its size, at least one, and is cut into that many nearly equal pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.spark.offsets import QueueId


class DataLossError(RuntimeError):
    """Offsets a query still needed are gone (retention deleted them, or the queue was reset).

    Raised only with ``failOnDataLoss=true`` (the default); with false the source logs a
    warning and reads on from what is left."""


@dataclass(frozen=True, slots=True, order=True)
class QueueRange:
    queue: QueueId
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.queue} [{self.start}, {self.end})"


def ranges_between(start: Mapping[QueueId, int], end: Mapping[QueueId, int]) -> list[QueueRange]:
    """One range per queue with something between ``start`` (0 when absent) and ``end``."""
    out = []
    for q in sorted(end):
        s = start.get(q, 0)
        if end[q] > s:
            out.append(QueueRange(q, s, end[q]))
    return out


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Split so that there are at least ``min_partitions`` pieces (when there is enough data)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total == 0:
        return list(ranges)
    out: list[QueueRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            out.append(QueueRange(r.queue, lo, hi))
    return out


def check_start(q: QueueId, offset: int, low: int, high: int, *, fail: bool, what: str) -> int:
    """Where to start reading ``q`` from ``offset`` given the queue's [low, high] bounds.

    Below ``low``: the messages in between were deleted by retention (data loss). Above
    ``high``: the queue holds fewer messages than the query has already read (the topic was
    re-created or the store reset; data loss too). Either raises DataLossError when
    ``fail``, else moves the offset to ``low`` / leaves it (``high`` then catches up)."""
    if offset < low:
        if fail:
            raise DataLossError(
                f"{what}: {q} needs offset {offset} but the broker's earliest is {low}: "
                f"{low - offset} messages were deleted by retention before they were read "
                "(set failOnDataLoss=false to read on from the earliest offset)"
            )
        return low
    if offset > high and fail:
        raise DataLossError(
            f"{what}: {q} needs offset {offset} but the queue ends at {high}: the queue was "
            "re-created or its store reset (set failOnDataLoss=false to read on from what it holds)"
        )
    return offset
