"""Driver-side planning: which queues a query reads, and the offsets its options mean.

Runs in Spark's planner worker (batch) or in the long-lived Python process of a streaming
source, through a ``BrokerSession``.
"""

from __future__ import annotations

import asyncio
import logging

from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.client.records import decode_record
from ledgermq.spark.broker import BrokerSession
from ledgermq.spark.offsets import EARLIEST, LATEST, Offsets, QueueId
from ledgermq.spark.options import OptionError, ReadOptions, Subscription
from ledgermq.spark.planning import QueueRange, check_start, ranges_between, split_ranges

log = logging.getLogger(__name__)

Bounds = dict[QueueId, tuple[int, int]]


async def subscribed_queues(session: BrokerSession, sub: Subscription) -> list[QueueId]:
    """The queues a subscription selects right now (sorted)."""
    if sub.assign:
        out: list[QueueId] = []
        for topic, brokers in sorted(sub.assign.items()):
            present = set(await session.queues(topic))
            for broker, ids in sorted(brokers.items()):
                for qid in ids:
                    q = QueueId(topic, broker, qid)
                    if q not in present:
                        raise OptionError(
                            f"option 'assign' names queue {q}, which the topic's route does not have "
                            f"(it has {', '.join(str(p) for p in sorted(present)) or 'no queues'})"
                        )
                    out.append(q)
        return out
    topics = list(sub.topics)
    if sub.pattern is not None:
        topics = [t for t in await session.topics() if sub.matches(t)]
    per_topic = await asyncio.gather(*(session.queues(t) for t in topics))
    return sorted(q for queues in per_topic for q in queues)


async def resolve_start(session: BrokerSession, opts: ReadOptions, bounds: Bounds) -> Offsets:
    """Concrete starting offsets of every queue in ``bounds`` (a new query's start)."""
    if opts.starting_timestamp is not None:
        ts = opts.starting_timestamp
        queues = sorted(bounds)
        found = await asyncio.gather(*(_offset_at(session, opts, q, ts, bounds[q]) for q in queues))
        return dict(zip(queues, found, strict=True))
    start: Offsets = {}
    for q, (low, high) in bounds.items():
        value = opts.starting.offsets.get(q, opts.starting.default_for(EARLIEST))
        if value == EARLIEST:
            start[q] = low
        elif value == LATEST:
            start[q] = high
        else:
            start[q] = check_start(q, value, low, high, fail=opts.fail_on_data_loss, what="startingOffsets")
    return start


async def _offset_at(
    session: BrokerSession, opts: ReadOptions, q: QueueId, timestamp: int, bounds: tuple[int, int]
) -> int:
    """The first offset stored at or after ``timestamp`` (spark-sql-kafka's meaning). The broker's
    search answers the message *nearest* in time (RocketMQ's ``getOffsetInQueueByTime``), which
    may be the last one before: then the next offset is the one."""
    low, high = bounds
    offset = min(max(await session.search_offset(q, timestamp), low), high)
    if offset < high:
        answer = await session.pull(q, opts.pull_group, offset, 1)
        found = answer.status is PullStatus.FOUND and answer.raw
        if found and decode_record(answer.raw, check_crc=False).store_timestamp < timestamp:
            offset += 1
    return offset


def resolve_end(opts: ReadOptions, bounds: Bounds) -> Offsets:
    end: Offsets = {}
    for q, (_low, high) in bounds.items():
        value = opts.ending.offsets.get(q, LATEST)
        if value == LATEST:
            end[q] = high
        else:
            if value > high:
                raise OptionError(f"option 'endingOffsets': {q} ends at {high}, before the requested end {value}")
            end[q] = value
    return end


def _unknown_queues(where: str, given: Offsets, known: Bounds) -> None:
    missing = sorted(q for q in given if q not in known)
    if missing:
        raise OptionError(
            f"option '{where}' names {', '.join(str(q) for q in missing)}, which the topic's route does not have"
        )


async def plan_batch(session: BrokerSession, opts: ReadOptions) -> list[QueueRange]:
    """The ranges of a batch read (``spark.read``)."""
    queues = await subscribed_queues(session, opts.subscription)
    bounds = await session.bounds(queues)
    _unknown_queues("startingOffsets", opts.starting.offsets, bounds)
    _unknown_queues("endingOffsets", opts.ending.offsets, bounds)
    start = await resolve_start(session, opts, bounds)
    end = resolve_end(opts, bounds)
    for q in sorted(bounds):
        if start[q] > end[q]:
            raise OptionError(
                f"option 'startingOffsets': {q} would start at {start[q]}, after its end {end[q]} (endingOffsets)"
            )
    return split_ranges(ranges_between(start, end), opts.min_partitions)
