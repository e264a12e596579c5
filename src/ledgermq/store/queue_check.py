"""Consume queues checked against the commit log, and re-derived from it where they disagree.

A consume queue is derived data: unit ``k`` of queue (topic, id) must point at the record
whose header says topic, queue id and queue offset ``k``, with the unit's size and tag code.
A unit that points at no record, or at another queue's or another offset's record (a torn
or rotten queue file, a queue written by an older bug), makes the queue *re-derived*: its
units from the first bad one on are dropped and written again from the records of the
commit log, walked from the end of the last sound unit's record (store/record_walk.py).

Units pointing into a damaged commit-log range are not judged (their record cannot be
read) and are kept: they point at messages the store must get back, and a gap the walk
meets where such records sat is filled with the kept units (or placeholders,
store/queue_gaps.py) so later records keep their offsets.

What is checked when (bounded; docs/storage-integrity.md):

* start-up, after recovery: the *tail* of every queue (its last unit, and further back
  while units are bad); after a crash also every unit recovery re-dispatched (reput.replay);
* the scrub thread: every unit of every queue, at its rate (``QueueScrub`` in scrub.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ledgermq.clock import perf_seconds
from ledgermq.protocol import sysflag as SF
from ledgermq.store.commitlog import CommitLog, queue_key
from ledgermq.store.consumequeue import UNIT, UNIT_SIZE, ConsumeQueue
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.dispatch import DispatchRequest, check_record
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.record_walk import walk_records

log = logging.getLogger(__name__)

PRE_BLANK_SIZE = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class QueueCheckContext:
    """What checking and re-deriving queues needs from the store."""

    commitlog: CommitLog
    queues: ConsumeQueueTable
    damage: DamageRegistry
    delay_levels_ms: list[int]


def unit_problem(ctx: QueueCheckContext, cq: ConsumeQueue, k: int, unit: tuple[int, int, int]) -> str | None:
    """Why unit ``k`` of ``cq`` disagrees with the commit log, or None (sound, a pre-blank,
    below the commit log's minimum, or pointing into a damaged range: not judged)."""
    phy, size, tags = unit
    if size == PRE_BLANK_SIZE:
        return None
    if phy < 0 or size <= 0:
        return f"unit ({phy}, {size}) is no pointer"
    if ctx.damage.overlapping(phy, phy + size) is not None:
        return None
    commitlog = ctx.commitlog
    if phy + size > commitlog.max_offset:
        return f"points past the commit log's end at {phy}"
    mf = commitlog.queue.find(phy)
    if mf is None or not mf.pin():
        return None  # retention removed it: the queue's minimum moves past it
    try:
        rel = phy - mf.start_offset
        v = check_record(mf.mm, rel, mf.wrote, phy, check_crc=False, delay_levels_ms=ctx.delay_levels_ms,
                         capacity=mf.size, check_text=False)  # fmt: skip
    finally:
        mf.unpin()
    if not isinstance(v, DispatchRequest):
        return f"points at no record at {phy} ({v.reason})"
    if v.topic != cq.topic or v.queue_id != cq.queue_id or v.queue_offset != k:
        return f"points at the record of {v.topic}-{v.queue_id} offset {v.queue_offset} at {phy}"
    if v.size != size or v.tags_code != tags or not SF.gets_queue_entry(v.sysflag):
        return f"says ({size} bytes, tag code {tags}) of a record of {v.size} bytes, tag code {v.tags_code}"
    return None


def read_unit(cq: ConsumeQueue, k: int) -> tuple[int, int, int] | None:
    raw = cq.read_units(k, 1)
    if len(raw) < UNIT_SIZE:
        return None
    phy, size, tags = UNIT.unpack(raw)
    return int(phy), int(size), int(tags)


def bad_tail_from(ctx: QueueCheckContext, cq: ConsumeQueue) -> tuple[int, str] | None:
    """(first queue offset of the queue's bad tail, why) when its last unit disagrees with
    the commit log, walking back while units are bad; None when the last judged unit is
    sound. Costs one unit and one record header for a sound queue."""
    low, k = cq.min_offset, cq.max_offset - 1
    first_bad: tuple[int, str] | None = None
    while k >= low:
        unit = read_unit(cq, k)
        if unit is None:
            break
        ctx.queues.stats.add("units_checked")
        why = unit_problem(ctx, cq, k, unit)
        if why is None:
            if unit[1] == PRE_BLANK_SIZE or ctx.damage.overlapping(unit[0], unit[0] + unit[1]) is None:
                break  # a sound unit: everything after it is re-derived
            k -= 1  # kept (in a damaged range): look further back
            continue
        first_bad = (k, why)
        k -= 1
    return first_bad


def check_tails(ctx: QueueCheckContext, stop: int) -> int:
    """Start-up: re-derive every queue whose tail disagrees with the commit log (records up
    to ``stop``, where dispatch resumes). Returns how many queues were re-derived."""
    targets: dict[ConsumeQueue, int] = {}
    for cq in ctx.queues.all():
        bad = bad_tail_from(ctx, cq)
        if bad is not None:
            k, why = bad
            log.error("consume queue %s-%d: unit %d %s; re-deriving it from the commit log", cq.topic,
                      cq.queue_id, k, why)  # fmt: skip
            targets[cq] = k
    if targets:
        rederive(ctx, targets, stop)
        for cq in targets:
            ctx.commitlog.queue_offsets[queue_key(cq.topic, cq.queue_id)] = cq.max_offset
    return len(targets)


def _walk_start(ctx: QueueCheckContext, cq: ConsumeQueue, k: int) -> int:
    """Where the records of ``cq`` from queue offset ``k`` on can start: after the record
    of unit ``k - 1`` when that unit is sound, else the commit log's minimum."""
    low = cq.min_offset
    while k > low:
        unit = read_unit(cq, k - 1)
        if unit is None or unit[1] == PRE_BLANK_SIZE:
            break
        if unit_problem(ctx, cq, k - 1, unit) is None:
            return unit[0] + unit[1]
        k -= 1
    return ctx.commitlog.min_offset


def rederive(ctx: QueueCheckContext, targets: dict[ConsumeQueue, int], stop: int) -> None:
    """Write the units of each queue from its queue offset on again from the records in
    the commit log below ``stop`` (one walk for all queues). Units are rewritten in place,
    never dropped first: a pull served while the scrub re-derives a running broker's queue
    must not see it shorter than it is (that answers PULL_OFFSET_MOVED and re-delivers).
    Units past the last record the walk finds are dropped at the end unless they point
    into a damaged range (messages a repair will bring back). The caller holds the
    dispatch lock (or runs before dispatch starts)."""
    began = perf_seconds()
    plans: dict[tuple[str, int], tuple[ConsumeQueue, int]] = {}
    derived_end: dict[ConsumeQueue, int] = {}
    walk_from = stop
    for cq, k in targets.items():
        k = max(k, cq.min_offset)
        start = _walk_start(ctx, cq, k)
        plans[(cq.topic, cq.queue_id)] = (cq, start)
        derived_end[cq] = k
        walk_from = min(walk_from, start)
    records = 0
    for req in walk_records(ctx.commitlog, ctx.damage, walk_from, stop, ctx.delay_levels_ms, "queue rebuild"):
        plan = plans.get((req.topic, req.queue_id))
        if plan is None or req.commit_log_offset < plan[1] or not SF.gets_queue_entry(req.sysflag):
            continue
        cq = plan[0]
        cq.rewrite(req.commit_log_offset, req.size, req.tags_code, req.queue_offset, req.store_timestamp)
        derived_end[cq] = max(derived_end[cq], req.queue_offset + 1)
        records += 1
    for cq, end in derived_end.items():
        _drop_bogus_tail(ctx, cq, end)
        ctx.queues.mark_dirty(cq)
    ctx.queues.stats.add("queue_rebuilds", len(plans))
    log.warning(
        "re-derived %d consume queue(s) from the commit log [%d, %d): %d records in %.3fs",
        len(plans),
        walk_from,
        stop,
        records,
        perf_seconds() - began,
    )


def _drop_bogus_tail(ctx: QueueCheckContext, cq: ConsumeQueue, end: int) -> None:
    """Drop the units of ``cq`` from ``end`` (one past the last record the walk found for
    it) on, keeping a run of units that point into damaged ranges up to the last of them."""
    keep_to = end
    for j in range(end, cq.max_offset):
        raw = cq.read_units(j, 1)
        if len(raw) != UNIT_SIZE:
            break
        phy, size, _tags = UNIT.unpack(raw)
        if size != PRE_BLANK_SIZE and ctx.damage.overlapping(phy, phy + size) is not None:
            keep_to = j + 1
    if keep_to < cq.max_offset:
        cq.drop_from(keep_to)
