"""A lost first commit-log segment is damage, not retention (store/log_start.py).

The 100-cycle segment-loss chaos run deleted a stopped master's first segment; the store
started its log one segment later, as if retention had removed it, and the 857 acknowledged
messages in it were gone without a word (no damage, no repair, the slave never asked). The
commit log now records where it begins before creating its first segment and before
retention deletes one, so a first file missing below the record is recreated and refused
until a replica repairs it, like any missing segment, while retention's own deletions (and a
crash in the middle of one) are never taken for damage.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq.errors import CorruptRangeError
from ledgermq.store.log_start import FILE_NAME
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus
from ledgermq.store.verify import verify_store

SEG = 64 * 1024
TOPIC = "StartTopic"


def fill(store: MessageStore, segments: int) -> list[tuple[int, int]]:
    """Puts until the log has ``segments`` files; (queue offset, commit-log offset) of each."""
    puts = []
    seq = 0
    while len(store.commitlog.queue.files) < segments:
        r = store.put_message(MessageInput(topic=TOPIC, body=struct.pack(">q", seq) + bytes(3000), queue_id=0))
        assert r.ok and r.append is not None, r
        puts.append((r.append.queue_offset, r.append.wrote_offset))
        seq += 1
    assert store.wait_dispatched(timeout=10)
    return puts


def first_segment(store: MessageStore) -> Path:
    return store.config.commitlog_path / f"{0:020d}"


def record(store: MessageStore) -> Path:
    return Path(store.config.root_dir) / FILE_NAME


def test_a_deleted_first_segment_is_refused_until_repair_not_silently_skipped(
    store_factory: Callable[..., MessageStore],
) -> None:
    store = store_factory(mapped_file_size_commitlog=SEG)
    root = Path(store.config.root_dir)
    puts = fill(store, 3)
    assert record(store).read_text().strip() == "0"
    in_first = [q for q, off in puts if off < SEG]
    store.shutdown()
    os.unlink(first_segment(store))
    found = verify_store(store.config)  # `ledgermq store verify` sees it on the stopped store
    assert [(f.start, f.end) for f in found.findings if "leading segments missing" in f.reason] == [(0, SEG)]

    again = store_factory(mapped_file_size_commitlog=SEG, root=root)
    assert again.min_phy_offset == 0  # the log still begins where it began
    assert first_segment(again).stat().st_size == SEG  # recreated, zero-filled, awaiting repair
    assert (0, SEG) in again.core.damage.ranges()
    assert again.min_offset_in_queue(TOPIC, 0) == 0
    refused = again.get_message(TOPIC, 0, in_first[0], 1)
    assert refused.status is GetStatus.CORRUPT_RANGE and not refused.messages, refused
    assert refused.next_begin_offset == in_first[0]  # never moved past
    with pytest.raises(CorruptRangeError):
        again.look_message_by_offset(0)
    later = next(q for q, off in puts if off >= SEG)
    got = again.get_message(TOPIC, 0, later, 1)
    assert got.status is GetStatus.FOUND and got.messages


def test_retention_deleting_the_first_segment_is_not_damage(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory(mapped_file_size_commitlog=SEG)
    root = Path(store.config.root_dir)
    fill(store, 3)
    removed = store.commitlog.queue.delete_first_while(lambda mf: mf.start_offset == 0, 10, 0.0)
    assert len(removed) == 1
    assert record(store).read_text().strip() == str(SEG)
    store.shutdown()

    again = store_factory(mapped_file_size_commitlog=SEG, root=root)
    assert again.min_phy_offset == SEG
    assert not again.core.damage.ranges()
    assert not first_segment(again).exists()


def test_a_crash_between_the_record_and_the_deletion_is_not_damage(
    store_factory: Callable[..., MessageStore],
) -> None:
    """The record moves first; the file a crash kept is still on disk, below the record."""
    store = store_factory(mapped_file_size_commitlog=SEG)
    root = Path(store.config.root_dir)
    fill(store, 3)
    store.shutdown()
    record(store).write_text(f"{SEG}\n")  # what retention wrote before it was interrupted

    again = store_factory(mapped_file_size_commitlog=SEG, root=root)
    assert not again.core.damage.ranges()
    assert first_segment(again).exists()


def test_a_store_from_before_the_record_gets_one_and_loses_nothing(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory(mapped_file_size_commitlog=SEG)
    root = Path(store.config.root_dir)
    fill(store, 3)
    store.shutdown()
    os.unlink(record(store))
    os.unlink(first_segment(store))  # indistinguishable from retention without the record

    again = store_factory(mapped_file_size_commitlog=SEG, root=root)
    assert not again.core.damage.ranges()
    assert again.min_phy_offset == SEG
    assert record(again).read_text().strip() == str(SEG)


def test_a_log_that_begins_late_records_its_own_start(store_factory: Callable[..., MessageStore]) -> None:
    """A slave that joined a master whose log begins at 3 segments starts its own there: no
    damage below it, ever."""
    store = store_factory(mapped_file_size_commitlog=SEG)
    root = Path(store.config.root_dir)
    start = 3 * SEG
    store.commitlog.append_raw(start, bytes(8))  # raw bytes at the master's offset (a slave)
    assert record(store).read_text().strip() == str(start)
    store.shutdown()

    again = store_factory(mapped_file_size_commitlog=SEG, root=root)
    assert not again.core.damage.ranges()
