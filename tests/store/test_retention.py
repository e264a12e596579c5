"""Retention: which commit-log segments a cleaning round deletes, and what follows them.

Every test drives ``store.cleaner.clean_once()`` itself (the timer is set to an hour so
it never fires on its own), with a ManualClock for "now" and the hour of day, segment
ages set with ``os.utime`` relative to that clock, and a fake disk gauge.

RocketMQ (4.9.7 ``CleanCommitLogService`` / ``MappedFileQueue.deleteExpiredFileByTime``):
a round runs when the hour is in deleteWhen, the disk is fuller than
diskMaxUsedSpaceRatio, or an operator asked; it deletes leading segments older than
fileReservedTime (any age above the 0.85 forcible ratio), never the last one, stops at
the first segment it may not delete, and deletes at most 10 per round. Consume-queue
files whose last unit points below the new commit-log minimum go next, and so do index
files.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledgermq.clock import ManualClock
from ledgermq.protocol.message import decode_record
from ledgermq.store.consumequeue import UNIT_SIZE
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from tests.conftest import small_config

TOPIC = "RetentionTopic"
SEGMENT = 64 * 1024
CQ_UNITS_PER_FILE = 16
KEYS_PER_MESSAGE = 10
OLD_H = 100.0  # older than fileReservedTime (72 h)
YOUNG_H = 1.0

# The timer never fires by itself; tests run rounds with clean_once(). The scrub is off, and
# fill() waits for the digest of every sealed segment: a segment the scrub thread is reading
# is pinned, so on a loaded machine a round deleted fewer files than it may (the skip-and-retry
# of a pinned segment has tests of its own below).
RETENTION = dict(
    store_scrub_enable=False,
    clean_resource_interval_ms=3_600_000,
    file_reserved_time_hours=72.0,
    delete_when="04",
    disk_max_used_space_ratio=75,
    mapped_file_size_consume_queue=UNIT_SIZE * CQ_UNITS_PER_FILE,
)


def clock_at(hour: int, minute: int = 30) -> ManualClock:
    """A clock whose local wall time is ``hour:minute`` on a fixed day."""
    return ManualClock(wall_ms=int(dt.datetime(2024, 3, 5, hour, minute).timestamp() * 1000))


class DiskGauge:
    """Stands in for the used/total ratio of the commit-log partition."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.paths: list[Path] = []

    def __call__(self, path: Path) -> float:
        self.paths.append(Path(path))
        return self.ratio


@dataclass(frozen=True)
class Put:
    seq: int
    queue_id: int
    queue_offset: int
    offset: int
    end: int


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(clock, gauge, root=None, **overrides)``: a started store, shut down afterwards."""
    made: list[MessageStore] = []

    def make(clock: ManualClock, gauge: DiskGauge, *, root: Path | None = None, **overrides: Any) -> MessageStore:
        cfg = small_config(root or tmp_path / "store", **{**RETENTION, **overrides})
        store = open_message_store(cfg, clock=clock, disk_usage=gauge)
        made.append(store)
        store.start()
        return store

    yield make
    for s in made:
        s.shutdown()


def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        threading.Event().wait(0.005)


def keys_of(seq: int) -> list[str]:
    return [f"m{seq}k{j}" for j in range(KEYS_PER_MESSAGE)]


def fill(store: MessageStore, segments: int, queues: int = 2) -> list[Put]:
    """Put ~5 KB messages until the commit log has ``segments`` files (the last one partly used)."""
    puts: list[Put] = []
    seq = 0
    while len(store.commitlog.queue.files) < segments:
        body = struct.pack(">q", seq) + bytes(5000)
        r = store.put_message(
            MessageInput(
                topic=TOPIC,
                body=body,
                queue_id=seq % queues,
                properties={"KEYS": " ".join(keys_of(seq))},
            )
        )
        assert r.ok and r.append is not None, r
        puts.append(Put(seq, seq % queues, r.append.queue_offset, r.append.wrote_offset, r.append.next_offset))
        seq += 1
    assert store.wait_dispatched(timeout=10)
    # Everything durable and quiet before ages are set: no later write touches old segments.
    wait_until(lambda: store.flushed_phy_offset >= store.max_phy_offset, what="commit-log flush")
    sealed = [mf.start_offset for mf in store.commitlog.queue.files[:-1]]
    wait_until(lambda: all(store.digests.has(start) for start in sealed), what="the sealed segments' digests")
    return puts


def segment_paths(store: MessageStore) -> list[Path]:
    return [mf.path for mf in store.commitlog.queue.files]


def segment_names_on_disk(store: MessageStore) -> list[str]:
    return sorted(p for p in os.listdir(store.config.commitlog_path) if p.isdigit())


def set_ages(clock: ManualClock, paths: list[Path], hours: list[float]) -> None:
    now_s = clock.wall_ms() / 1000
    for path, h in zip(paths, hours, strict=True):
        t = now_s - h * 3600
        os.utime(path, (t, t))


def seq_of(record: bytes) -> int:
    return int(struct.unpack_from(">q", decode_record(record).body)[0])


# == when a round runs and what it deletes ===========================================


def test_expired_segments_are_deleted_at_a_delete_hour_and_younger_ones_kept(open_store) -> None:
    clock, gauge = clock_at(4), DiskGauge(0.10)
    store = open_store(clock, gauge)
    fill(store, 6)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 3 + [YOUNG_H] * 3)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 3
    assert [p.exists() for p in paths] == [False] * 3 + [True] * 3
    assert segment_paths(store) == paths[3:]
    assert store.min_phy_offset == 3 * SEGMENT
    # The disk was measured on the commit-log directory.
    assert gauge.paths and all(p == store.config.commitlog_path for p in gauge.paths)

    # Nothing else is old enough: another round deletes nothing.
    assert store.cleaner.clean_once() == 0
    assert segment_paths(store) == paths[3:]


def test_a_young_segment_stops_the_round_so_nothing_is_deleted_from_the_middle(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    fill(store, 5)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H, YOUNG_H, OLD_H, OLD_H, OLD_H])

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 1
    assert [p.exists() for p in paths] == [False, True, True, True, True]
    assert store.min_phy_offset == SEGMENT


def test_at_most_ten_segments_per_round_and_never_the_active_one(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    fill(store, 13)
    paths = segment_paths(store)
    assert len(paths) == 13
    set_ages(clock, paths, [OLD_H] * 13)  # even the active segment is "old"

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 10
    assert [p.exists() for p in paths] == [False] * 10 + [True] * 3
    assert store.cleaner.clean_once() == 2
    assert store.cleaner.clean_once() == 0
    assert segment_paths(store) == [paths[-1]]
    assert paths[-1].exists()
    assert store.min_phy_offset == 12 * SEGMENT

    # The surviving active segment still takes writes.
    r = store.put_message(MessageInput(topic=TOPIC, body=b"after cleaning"))
    assert r.ok and r.append is not None and r.append.wrote_offset >= 12 * SEGMENT


@pytest.mark.parametrize("hour", [3, 5, 13, 23])
def test_nothing_is_deleted_outside_delete_hours_while_the_disk_is_fine(open_store, hour: int) -> None:
    clock = clock_at(hour)
    store = open_store(clock, DiskGauge(0.50))
    fill(store, 4)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 4)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 0
    assert all(p.exists() for p in paths)
    assert store.min_phy_offset == 0


def test_every_hour_listed_in_delete_when_is_a_delete_hour(open_store) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge(), delete_when="04;13")
    fill(store, 4)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 4)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 3


def test_the_delete_hour_comes_round_when_the_clock_reaches_it(open_store) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge())
    fill(store, 4)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 4)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 0
    clock.advance(15 * 3600)  # 13:30 -> 04:30 the next day (the segments age with it)
    assert store.cleaner.clean_once() == 3
    assert store.min_phy_offset == 3 * SEGMENT


def test_a_manual_trigger_runs_a_round_at_any_hour(open_store) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge(0.10))
    fill(store, 5)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H, OLD_H, YOUNG_H, YOUNG_H, YOUNG_H])
    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 0

    # The operator's request wakes the clean service, which runs the round itself.
    store.trigger_delete_files()
    wait_until(lambda: segment_paths(store) == paths[2:], what="the triggered round")
    assert not paths[0].exists() and not paths[1].exists()
    assert store.min_phy_offset == 2 * SEGMENT
    # A manual round still honours fileReservedTime: the young segments stay.
    assert all(p.exists() for p in paths[2:])


# == disk pressure ===================================================================


def test_disk_above_the_forcible_ratio_deletes_regardless_of_age(open_store) -> None:
    clock = clock_at(13)
    gauge = DiskGauge(0.90)
    store = open_store(clock, gauge)
    fill(store, 13)
    paths = segment_paths(store)
    set_ages(clock, paths, [YOUNG_H] * 13)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 10  # still at most ten a round
    assert store.cleaner.clean_once() == 2
    assert store.cleaner.clean_once() == 0
    assert segment_paths(store) == [paths[-1]]  # never the active segment

    gauge.ratio = 0.50  # pressure gone: nothing more happens
    assert store.cleaner.clean_once() == 0


def test_disk_above_max_used_ratio_deletes_only_expired_segments(open_store) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge(0.80))  # > diskMaxUsedSpaceRatio 75 %, < forcible 85 %
    fill(store, 6)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 2 + [YOUNG_H] * 4)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 2
    assert [p.exists() for p in paths] == [False] * 2 + [True] * 4
    assert store.cleaner.clean_once() == 0


@pytest.mark.parametrize(
    ("ratio", "ages", "deleted"),
    [
        (0.75, [OLD_H] * 4, 0),  # exactly the max-used ratio is not "full"
        (0.85, [YOUNG_H] * 4, 0),  # exactly the forcible ratio does not ignore age
        (0.85, [OLD_H] * 4, 3),  # ... but is above 75 %, so expired segments go
        (0.851, [YOUNG_H] * 4, 3),
    ],
)
def test_disk_ratio_thresholds_are_strict(open_store, ratio: float, ages: list[float], deleted: int) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge(ratio))
    fill(store, 4)
    set_ages(clock, segment_paths(store), ages)
    assert store.cleaner is not None
    assert store.cleaner.clean_once() == deleted


# == what protects a segment =========================================================


def test_retention_guards_keep_every_segment_ending_beyond_the_lowest_guard(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge(0.90))  # forcible too: guards still win
    fill(store, 8)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 8)

    needed = {"slave": 5 * SEGMENT + 10}
    store.add_retention_guard(lambda: None)  # a guard with no opinion protects nothing
    store.add_retention_guard(lambda: needed["slave"])
    store.add_retention_guard(lambda: 3 * SEGMENT + 100)  # the lowest one decides

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 3  # segments ending at 1, 2, 3 x 64 KiB
    assert segment_paths(store) == paths[3:]
    assert store.min_phy_offset == 3 * SEGMENT
    assert store.cleaner.clean_once() == 0


def test_a_guard_exactly_at_a_segment_end_lets_that_segment_go_and_moving_it_frees_more(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    fill(store, 8)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 8)

    needed = {"offset": 2 * SEGMENT}
    store.add_retention_guard(lambda: needed["offset"])
    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 2
    assert segment_paths(store) == paths[2:]

    needed["offset"] = 5 * SEGMENT + 1  # the consumer/slave moved on
    assert store.cleaner.clean_once() == 3
    assert segment_paths(store) == paths[5:]


def set_aside(path: Path) -> Path:
    return path.with_name(path.name + ".deleted")


def test_a_pinned_segment_survives_until_unpinned(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    puts = fill(store, 5)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 3 + [YOUNG_H] * 2)
    seg1 = store.commitlog.queue.files[1]
    assert seg1.pin()
    assert store.cleaner is not None
    try:
        assert store.cleaner.clean_once() == 1  # segment 0 goes; the round stops at the pinned one
        assert not paths[0].exists()
        # The pinned segment is set aside (renamed *.deleted, so its name is free) but kept
        # on disk for its reader; the reader still sees its bytes; new readers are turned away, and the minimum
        # offset already skips the dying segment (RocketMQ getMinOffset does the same).
        first_in_seg1 = next(p for p in puts if p.offset >= SEGMENT)
        assert first_in_seg1.offset == SEGMENT
        assert seq_of(seg1.read(0, first_in_seg1.end - first_in_seg1.offset)) == first_in_seg1.seq
        assert store.look_message_by_offset(first_in_seg1.offset) is None
        assert store.min_phy_offset == 2 * SEGMENT
        assert set_aside(paths[1]).exists() and paths[2].exists()
        assert store.cleaner.clean_once() == 0  # still pinned
        assert set_aside(paths[1]).exists()
    finally:
        seg1.unpin()
    assert not set_aside(paths[1]).exists()  # the last reader let go: the file is removed
    assert store.cleaner.clean_once() == 2  # the unpinned segment, then the next expired one
    assert not paths[1].exists() and not paths[2].exists()
    assert segment_paths(store) == paths[3:]
    assert store.min_phy_offset == 3 * SEGMENT


def test_a_pinned_segment_is_deleted_forcibly_after_the_destroy_interval(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge(), destroy_mapped_file_interval_forcibly_ms=200)
    fill(store, 3)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 3)
    seg0 = store.commitlog.queue.files[0]
    assert seg0.pin()
    assert store.cleaner is not None
    try:
        assert store.cleaner.clean_once() == 0
        assert set_aside(paths[0]).exists()
        # the store's clock decides when the pin stops protecting it: 0.15 s is too early
        clock.advance(0.15)
        assert store.cleaner.clean_once() == 0, "destroyed before destroyMapedFileIntervalForcibly"
        assert set_aside(paths[0]).exists()
        clock.advance(0.1)  # 0.25 s after the first request: past the 200 ms interval
        assert store.cleaner.clean_once() == 2, "the forcible destroy never happened"
        assert not set_aside(paths[0]).exists() and not paths[1].exists()
        assert segment_paths(store) == paths[2:]
    finally:
        seg0.unpin()  # a late unpin of a destroyed segment is harmless
    assert segment_paths(store) == paths[2:]


# == what follows the commit log =====================================================


def _expected_cq_files(puts: list[Put], queue_id: int, phy_min: int) -> list[str]:
    """Consume-queue files that must survive: the last, and any whose last unit is >= phy_min."""
    units = [p for p in puts if p.queue_id == queue_id]
    assert [p.queue_offset for p in units] == list(range(len(units)))
    n_files = (len(units) + CQ_UNITS_PER_FILE - 1) // CQ_UNITS_PER_FILE
    keep = []
    for k in range(n_files):
        last_unit = units[min(len(units), (k + 1) * CQ_UNITS_PER_FILE) - 1]
        if k == n_files - 1 or last_unit.offset >= phy_min:
            keep.append(f"{k * CQ_UNITS_PER_FILE * UNIT_SIZE:020d}")
    return keep


def _cq_files_on_disk(store: MessageStore, queue_id: int) -> list[str]:
    return sorted(os.listdir(store.config.consume_queue_path / TOPIC / str(queue_id)))


def test_deleting_segments_moves_queue_minimums_and_drops_orphaned_queue_and_index_files(
    open_store,
) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    puts = fill(store, 13)
    paths = segment_paths(store)
    set_ages(clock, paths, [OLD_H] * 13)
    assert store.index is not None
    index_before = [(f.path.name, f.end_phy) for f in store.index.files]
    assert len(index_before) >= 4, "the test needs several index files"
    max_before = {q: store.max_offset_in_queue(TOPIC, q) for q in (0, 1)}
    for q in (0, 1):
        assert _cq_files_on_disk(store, q) == _expected_cq_files(puts, q, 0)

    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 10
    phy_min = 10 * SEGMENT
    assert store.min_phy_offset == phy_min
    assert segment_names_on_disk(store) == [p.name for p in paths[10:]]

    gone = [p for p in puts if p.offset < phy_min]
    kept = [p for p in puts if p.offset >= phy_min]
    assert gone and kept

    for q in (0, 1):
        first_kept = next(p for p in kept if p.queue_id == q)
        low = first_kept.queue_offset
        assert store.min_offset_in_queue(TOPIC, q) == low
        assert store.max_offset_in_queue(TOPIC, q) == max_before[q]
        # Orphaned consume-queue files are deleted; the rest stay. The first survivor still
        # holds units of deleted messages, so the minimum had to be corrected inside it.
        expected_files = _expected_cq_files(puts, q, phy_min)
        assert _cq_files_on_disk(store, q) == expected_files
        assert int(expected_files[0]) < low * UNIT_SIZE
        assert len(expected_files) < len(_expected_cq_files(puts, q, 0))
        # Old offsets are too small and point the consumer at the new minimum.
        for old in sorted({0, low - 1}):
            got = store.get_message(TOPIC, q, old, 32)
            assert got.status is GetStatus.OFFSET_TOO_SMALL, (q, old, got.status)
            assert got.next_begin_offset == low
            assert got.min_offset == low and got.max_offset == max_before[q]
            assert got.messages == []
        # Reading from the new minimum returns exactly the surviving messages, in order.
        seqs: list[int] = []
        offset = low
        while offset < max_before[q]:
            got = store.get_message(TOPIC, q, offset, 32)
            assert got.status is GetStatus.FOUND, (q, offset, got.status)
            seqs.extend(seq_of(m) for m in got.messages)
            offset = got.next_begin_offset
        assert seqs == [p.seq for p in kept if p.queue_id == q]
        assert store.earliest_message_time(TOPIC, q) == clock.wall_ms()

    # Index files that only point at deleted segments are removed (never the newest).
    expected_index = [
        name for i, (name, end_phy) in enumerate(index_before) if end_phy >= phy_min or i == len(index_before) - 1
    ]
    assert sorted(os.listdir(store.config.index_path)) == expected_index
    assert [f.path.name for f in store.index.files] == expected_index
    assert len(expected_index) < len(index_before)

    # Deleted records are gone for direct lookups and key queries; kept ones are not.
    assert store.look_message_by_offset(gone[0].offset) is None
    assert store.look_message_by_offset(gone[-1].offset) is None
    rec = store.look_message_by_offset(kept[0].offset)
    assert rec is not None and seq_of(rec) == kept[0].seq
    far = 1 << 62
    assert store.query_message(TOPIC, keys_of(gone[-1].seq)[0], 32, 0, far).messages == []
    found = store.query_message(TOPIC, keys_of(kept[-1].seq)[3], 32, 0, far).messages
    assert [seq_of(m) for m in found] == [kept[-1].seq]


def test_queue_minimums_survive_a_restart_after_deletion(open_store, tmp_path: Path) -> None:
    clock = clock_at(4)
    root = tmp_path / "store"
    store = open_store(clock, DiskGauge(), root=root)
    puts = fill(store, 8)
    set_ages(clock, segment_paths(store), [OLD_H] * 5 + [YOUNG_H] * 3)
    assert store.cleaner is not None
    assert store.cleaner.clean_once() == 5
    lows = {q: store.min_offset_in_queue(TOPIC, q) for q in (0, 1)}
    highs = {q: store.max_offset_in_queue(TOPIC, q) for q in (0, 1)}
    for q in (0, 1):
        assert 0 < lows[q] < highs[q]
        # The first queue file left still starts with units of deleted messages.
        assert int(_cq_files_on_disk(store, q)[0]) < lows[q] * UNIT_SIZE
    store.shutdown()

    store = open_store(clock, DiskGauge(), root=root)
    assert store.recovery is not None and not store.recovery.abnormal
    assert store.min_phy_offset == 5 * SEGMENT
    for q in (0, 1):
        assert store.min_offset_in_queue(TOPIC, q) == lows[q]
        assert store.max_offset_in_queue(TOPIC, q) == highs[q]
        got = store.get_message(TOPIC, q, 0, 32)
        assert got.status is GetStatus.OFFSET_TOO_SMALL
        assert got.next_begin_offset == lows[q]
        got = store.get_message(TOPIC, q, lows[q], 1)
        assert got.status is GetStatus.FOUND
        first_kept = next(p for p in puts if p.queue_id == q and p.offset >= 5 * SEGMENT)
        assert seq_of(got.messages[0]) == first_kept.seq


# == disk full, pacing, manual rounds =================================================


def test_a_nearly_full_disk_refuses_puts_until_space_comes_back(open_store) -> None:
    clock, gauge = clock_at(13), DiskGauge(0.95)
    store = open_store(clock, gauge)
    fill(store, 2)
    assert store.cleaner is not None
    store.cleaner.clean_once()
    refused = store.put_message(MessageInput(topic=TOPIC, body=b"x"))
    assert refused.status.value == "SERVICE_NOT_AVAILABLE" and "disk" in refused.remark
    before = store.max_phy_offset
    gauge.ratio = 0.50
    store.cleaner.clean_once()
    assert store.put_message(MessageInput(topic=TOPIC, body=b"x")).ok
    assert store.max_phy_offset > before


def test_deletions_are_paced_by_delete_commitlog_files_interval(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge(), delete_commitlog_files_interval_ms=150)
    fill(store, 4)
    set_ages(clock, segment_paths(store), [OLD_H] * 4)
    assert store.cleaner is not None
    started = time.monotonic()
    assert store.cleaner.clean_once() == 3
    assert time.monotonic() - started >= 2 * 0.150  # a pause before the 2nd and the 3rd


def test_one_manual_trigger_buys_twenty_rounds_like_rocketmq(open_store) -> None:
    clock = clock_at(13)
    store = open_store(clock, DiskGauge())
    fill(store, 2)
    assert store.cleaner is not None
    store.cleaner.trigger()
    assert store.cleaner.manual_requests == 20
    store.cleaner.clean_once()
    assert store.cleaner.manual_requests <= 19  # each round, here or in the service thread, uses one
