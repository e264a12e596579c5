"""A slave's damaged range that its master's retention already deleted is let go as
retention would (store/damage_expiry.py): the leading segments holding it go, the damage
is forgotten, and readers below the queue's new minimum are told to move on; nothing at or
above the log start the master reported is ever dropped."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from ledgermq.store.log_start import FILE_NAME
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.results import GetStatus

SEG = 64 * 1024
TOPIC = "ExpireTopic"


def _filled(store_factory: Callable[..., MessageStore], segments: int) -> tuple[NativeMessageStore, list[int]]:
    """A store of ``segments`` segments; the commit-log offset of each queue-0 message."""
    store = store_factory(mapped_file_size_commitlog=SEG)
    assert isinstance(store, NativeMessageStore)
    offsets = []
    while len(store.commitlog.queue.files) < segments:
        r = store.put_message(MessageInput(topic=TOPIC, body=struct.pack(">q", len(offsets)) + bytes(3000), queue_id=0))
        assert r.ok and r.append is not None, r
        offsets.append(r.append.wrote_offset)
    assert store.wait_dispatched(timeout=10)
    return store, offsets


def _segments(store: NativeMessageStore) -> list[int]:
    return [mf.start_offset for mf in store.commitlog.queue.files]


def test_damage_below_the_groups_log_start_goes_with_its_segments_and_readers_move_on(
    store_factory: Callable[..., MessageStore],
) -> None:
    store, offsets = _filled(store_factory, 5)
    store.report_damage(1000, 2000, "test: flipped")  # in segment 0
    store.report_damage(SEG + 10, SEG + 20, "test: flipped")  # in segment 1
    first_in_2 = next(i for i, off in enumerate(offsets) if off >= 2 * SEG)
    assert store.get_message(TOPIC, 0, 0, 1).status is GetStatus.CORRUPT_RANGE

    gone = store.expire_damage_below(3 * SEG, "the master's log starts at 196608")
    assert gone is not None and gone.ranges == ((1000, 2000), (SEG + 10, SEG + 20))
    assert gone.segments == (f"{0:020d}", f"{SEG:020d}") and gone.log_start == 2 * SEG
    # Segment 2 is healthy: it stays for this store's own retention, though the master deleted it too.
    assert _segments(store) == [2 * SEG, 3 * SEG, 4 * SEG]
    assert store.damaged_ranges() == []
    assert (Path(store.config.root_dir) / FILE_NAME).read_text().strip() == str(2 * SEG)  # retention's record
    assert store.min_offset_in_queue(TOPIC, 0) == first_in_2
    moved = store.get_message(TOPIC, 0, 0, 1)
    assert moved.status is GetStatus.OFFSET_TOO_SMALL and moved.next_begin_offset == first_in_2, moved
    got = store.get_message(TOPIC, 0, first_in_2, 1)
    assert got.status is GetStatus.FOUND and got.messages


def test_nothing_the_master_still_holds_is_dropped(store_factory: Callable[..., MessageStore]) -> None:
    store, _offsets = _filled(store_factory, 4)
    store.report_damage(SEG + 10, SEG + 20, "test: flipped")
    # The master's log starts inside segment 1 or at its start: segment 1 is still held there.
    for group_start in (SEG, SEG + 20, 2 * SEG - 1):
        assert store.expire_damage_below(group_start, "test") is None
        assert _segments(store) == [0, SEG, 2 * SEG, 3 * SEG]
        assert store.damaged_ranges() == [(SEG + 10, SEG + 20)]
    # A range that reaches past the master's start is not below it: repaired from the master, not dropped.
    store.report_damage(2 * SEG - 5, 2 * SEG + 5, "test: flipped")
    gone = store.expire_damage_below(2 * SEG, "test")
    assert gone is not None and gone.ranges == ((SEG + 10, SEG + 20),)
    assert _segments(store) == [2 * SEG, 3 * SEG]
    assert store.damaged_ranges() == [(2 * SEG, 2 * SEG + 5)]
