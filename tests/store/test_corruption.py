"""Corruption in the middle of the commit log: found, never served, kept apart, repaired.

The scenario of issue #23 at store level: a cleanly stopped store with 1 MiB segments has
64 bytes flipped in the middle of its first sealed segment. Before, recovery cut the log
there and dropped every later segment; now every message outside the damaged range stays
readable, the damaged range is refused, and a replica's bytes (an untouched copy) repair it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgermq.cli.main import cli as main
from ledgermq.config import FlushDiskType
from ledgermq.errors import CorruptRangeError
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.consumequeue import UNIT
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from ledgermq.testing.crash import abandon
from tests.conftest import small_config

TOPIC = "RotTopic"
QUEUES = 4
MIB = 1 << 20


def _open(root: Path, **overrides: object) -> MessageStore:
    store = open_message_store(small_config(root, **overrides))
    store.start()
    return store


def _put(store: MessageStore, count: int, body_size: int = 1000, start: int = 0) -> list[tuple[int, int]]:
    spans = []
    for seq in range(start, start + count):
        body = struct.pack(">q", seq) + bytes((seq + i) % 251 for i in range(body_size - 8))
        r = store.put_message(
            MessageInput(topic=TOPIC, body=body, queue_id=seq % QUEUES, properties={"KEYS": f"k{seq}"})
        )
        assert r.ok and r.append is not None, r
        spans.append((r.append.wrote_offset, r.append.next_offset))
    assert store.wait_dispatched()
    return spans


def _flip(path: Path, at: int, n: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        data = f.read(n)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


def _copy_bytes(copy_root: Path, start: int, end: int, segment: int) -> bytes:
    out = b""
    pos = start
    while pos < end:
        seg = pos - pos % segment
        n = min(end, seg + segment) - pos
        with open(copy_root / "commitlog" / f"{seg:020d}", "rb") as f:
            f.seek(pos - seg)
            out += f.read(n)
        pos += n
    return out


def _units(store: MessageStore, q: int) -> list[tuple[int, int]]:
    cq = store.queues.get(TOPIC, q)
    assert cq is not None
    return [UNIT.unpack(cq.read_units(i, 1))[:2] for i in range(cq.min_offset, cq.max_offset)]


def _overlaps(span: tuple[int, int], ranges: list[tuple[int, int]]) -> bool:
    return any(s < span[1] and span[0] < e for s, e in ranges)


def test_issue_23_flip_in_first_sealed_segment_keeps_everything_else_and_is_repaired(tmp_path: Path) -> None:
    # recovery's own detection (the scrub, which would find the flip's digest block, has its tests)
    root, copy = tmp_path / "master", tmp_path / "slave"
    store = _open(root, mapped_file_size_commitlog=MIB, store_scrub_enable=False)
    spans = _put(store, 2600)  # ~2.7 MiB: three segments, all scanned by a clean restart
    assert len(store.commitlog.queue.files) == 3
    store.shutdown()
    shutil.copytree(root, copy)  # the untouched replica
    _flip(root / "commitlog" / f"{0:020d}", 524288, 64)

    store = _open(root, mapped_file_size_commitlog=MIB, store_scrub_enable=False)
    try:
        assert store.max_phy_offset == spans[-1][1], "nothing after the damage may be dropped"
        ranges = store.damaged_ranges()
        assert ranges and ranges[0][0] <= 524288 and ranges[-1][1] >= 524288 + 64
        assert sum(e - s for s, e in ranges) < 8 * 1024  # a few records, not the rest of the log
        info = store.runtime_info()
        assert info["storeDamagedRanges"] == str(len(ranges)) and int(info["storeCorruptionsFound"]) >= 1

        replica = _open(copy, mapped_file_size_commitlog=MIB)
        try:
            expected = {q: _units(replica, q) for q in range(QUEUES)}
            damaged = refused = 0
            for q in range(QUEUES):
                for index, (phy, size) in enumerate(expected[q]):
                    got = store.get_message(TOPIC, q, index, 1)
                    if _overlaps((phy, phy + size), ranges):
                        damaged += 1
                        assert got.status is GetStatus.CORRUPT_RANGE, (q, index, got.status)
                        assert "awaits repair from a replica" in got.remark
                        assert got.next_begin_offset == index  # refused, not skipped
                        with pytest.raises(CorruptRangeError):
                            store.look_message_by_offset(phy)
                        refused += 1
                    else:
                        assert got.status is GetStatus.FOUND, (q, index, got.status)
                        assert got.messages == [replica.commitlog.read(phy, size)]
            assert damaged >= 1 and refused == damaged
            with pytest.raises(CorruptRangeError):
                store.read_commitlog(ranges[0][0], 4096)  # not to a replica either
        finally:
            replica.shutdown()
    finally:
        store.shutdown()

    # The ranges survive a restart (a flip in a body would not be seen again by recovery
    # if the segment were not among the last ones scanned), then a replica repairs them.
    store = _open(root, mapped_file_size_commitlog=MIB, store_scrub_enable=False)
    try:
        assert store.damaged_ranges() == ranges
        for s, e in ranges:
            store.repair_range(s, _copy_bytes(copy, s, e, MIB), "slave copy")
        assert store.damaged_ranges() == []
        assert store.runtime_info()["storeRepairs"] == str(len(ranges))
        for q in range(QUEUES):
            offset = 0
            while offset < store.max_offset_in_queue(TOPIC, q):
                got = store.get_message(TOPIC, q, offset, 32)
                assert got.status is GetStatus.FOUND
                offset = got.next_begin_offset
        whole = _copy_bytes(copy, 0, spans[-1][1], MIB)
        assert _copy_bytes(root, 0, spans[-1][1], MIB) == whole  # byte for byte
    finally:
        store.shutdown()


def test_repair_refuses_bytes_that_do_not_validate(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    try:
        spans = _put(store, 200)
        start, end = spans[50]
        good = store.commitlog.read(start, end - start)
        assert good is not None
        store.report_damage(start, end, "test")
        bad_crc = bytearray(good)
        bad_crc[200] ^= 1  # inside the body
        shifted = store.commitlog.read(spans[51][0], end - start)
        assert shifted is not None
        for data in (bytes(end - start), bytes(bad_crc), shifted):
            with pytest.raises(CorruptRangeError):
                store.repair_range(start, data, "bad replica")
        with pytest.raises(ValueError):
            store.repair_range(store.max_phy_offset - 10, good, "beyond the end")
        assert store.damaged_ranges() == [(start, end)]
        assert store.commitlog.read(start, end - start) == good  # nothing was written
        store.repair_range(start, good, "good replica")
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()


def test_torn_tail_is_still_cut(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 100)
    abandon(store)
    start, end = spans[-1]
    seg = 64 * 1024
    path = root / "commitlog" / f"{start - start % seg:020d}"
    with open(path, "r+b") as f:  # the last record's second half never reached the disk
        f.seek(start % seg + (end - start) // 2)
        f.write(bytes(end - start - (end - start) // 2))
    store = _open(root)
    try:
        assert store.max_phy_offset == start
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()


def test_truncated_away_records_are_not_resurrected_by_crash_recovery(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 120, body_size=400)
    cut = spans[60][0]
    store.truncate_after_offset(cut)  # a slave realigning with its master
    new = _put(store, 5, body_size=100, start=1000)  # shorter records: old ones would follow
    abandon(store)
    store = _open(root)
    try:
        assert store.max_phy_offset == new[-1][1]
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()


def test_missing_sealed_segment_is_recreated_and_later_segments_kept(tmp_path: Path) -> None:
    root, copy = tmp_path / "s", tmp_path / "copy"
    seg = 64 * 1024
    store = _open(root)
    spans = _put(store, 300)  # ~5 segments
    store.shutdown()
    shutil.copytree(root, copy)
    os.unlink(root / "commitlog" / f"{seg:020d}")
    with open(root / "commitlog" / f"{2 * seg:020d}", "r+b") as f:
        f.truncate(1000)  # and one cut short
    store = _open(root)
    try:
        assert store.max_phy_offset == spans[-1][1]
        ranges = store.damaged_ranges()
        assert ranges[0][0] == seg and ranges[-1][1] >= 3 * seg - 8
        for s, e in ranges:
            store.repair_range(s, _copy_bytes(copy, s, e, seg), "copy")
        assert store.damaged_ranges() == []
        assert _copy_bytes(root, 0, spans[-1][1], seg) == _copy_bytes(copy, 0, spans[-1][1], seg)
    finally:
        store.shutdown()


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_scrub_finds_a_properties_flip_made_while_running_and_calls_the_listener(tmp_path: Path) -> None:
    """A flip in the properties passes the record's body CRC; the sealed segment's digest
    finds it, the scrub registers it (record-aligned) and calls the listener."""
    root = tmp_path / "s"
    store = _open(root, store_scrub_bytes_per_second=64 * MIB, store_scrub_interval_seconds=0)
    heard: list[tuple[int, int, str]] = []
    try:
        store.add_damage_listener(lambda s, e, r: heard.append((s, e, r)))
        spans = _put(store, 200)  # ~3 sealed 64 KiB segments
        seg = 64 * 1024
        assert _wait(lambda: store.digests.has(0) and store.digests.has(seg))
        victim = next(sp for sp in spans if sp[0] >= seg + 1000)
        target = victim[1] - 2  # inside the KEYS property, after the body
        fd = os.open(root / "commitlog" / f"{seg:020d}", os.O_RDWR)
        try:
            os.pwrite(fd, b"Z", target - seg)
        finally:
            os.close(fd)
        assert _wait(lambda: bool(heard))
        start, end, reason = heard[0]
        assert start <= victim[0] and end >= victim[1] and "digest" in reason
        assert store.damaged_ranges() == [(start, end)]
        info = store.runtime_info()
        assert int(info["storeScrubbedBytes"]) > 0 and info["storeDamagedBytes"] == str(end - start)
    finally:
        store.shutdown()

    result = CliRunner().invoke(main, ["store", "verify", str(root)])
    assert result.exit_code == 1, result.output
    assert f"[{start}, {end})" in result.output and "digest block" in result.output
    doc = json.loads(CliRunner().invoke(main, ["store", "verify", "--json", str(root)]).output)
    assert doc["summary"]["ok"] is False and doc["summary"]["digestsChecked"] >= 2


def test_verify_passes_a_sound_store_and_refuses_one_in_use(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    try:
        _put(store, 150)
        busy = CliRunner().invoke(main, ["store", "verify", str(root)])
        assert busy.exit_code != 0 and "in use" in busy.output
    finally:
        store.shutdown()
    result = CliRunner().invoke(main, ["store", "verify", "--json", str(root)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["summary"]["ok"] is True and doc["summary"]["records"] == 150 and doc["summary"]["queueUnits"] == 150


def test_verify_finds_a_header_flip_and_a_bad_queue_unit(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 150)
    store.shutdown()
    start, _end = spans[10]
    _flip(root / "commitlog" / f"{0:020d}", start + 12, 1)  # QUEUEID: outside the body CRC
    unit_file = root / "consumequeue" / TOPIC / "1" / f"{0:020d}"
    with open(unit_file, "r+b") as f:  # queue 1's unit 3 now points at another record
        f.seek(3 * 20)
        f.write(struct.pack(">qi", spans[0][0], spans[0][1] - spans[0][0]))
    result = CliRunner().invoke(main, ["store", "verify", str(root)])
    assert result.exit_code == 1
    assert "CORRUPT consumequeue" in result.output and f"{TOPIC}-1 offset 3" in result.output
    assert f"{TOPIC}-2 offset 2" in result.output  # the record whose queue id flipped


def _crash_with_checkpoint_at(root: Path, store: MessageStore, physic_ts: int) -> None:
    """SIGKILL's state, with the checkpoint saying the newest flushed record is ``physic_ts``."""
    abandon(store)
    cp = Checkpoint.load(root / "checkpoint")
    cp.physic_ts = physic_ts
    cp.save()


def _flip_record(root: Path, span: tuple[int, int]) -> None:
    seg = 64 * 1024
    start, end = span
    _flip(root / "commitlog" / f"{start - start % seg:020d}", start % seg + (end - start) // 2, 8)


def test_after_a_crash_under_async_flush_a_bad_record_past_the_flushed_point_is_a_torn_write(tmp_path: Path) -> None:
    """The kernel writes dirty pages back in any order: a record past the checkpoint's
    flushed point may be missing while later ones reached the disk. Nothing past that point
    was promised durable, so it is cut as a torn tail, not kept as damage no replica holds."""
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 60, body_size=300)
    flushed_ts = _store_ts(store, spans[39])
    _crash_with_checkpoint_at(root, store, flushed_ts)
    _flip_record(root, spans[45])
    store = _open(root)
    try:
        assert store.damaged_ranges() == []
        assert store.max_phy_offset == spans[45][0]
    finally:
        store.shutdown()


def test_after_a_crash_a_bad_record_below_the_flushed_point_is_damage_and_later_records_stay(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 60, body_size=300)
    _crash_with_checkpoint_at(root, store, _store_ts(store, spans[-1]) + 1)
    _flip_record(root, spans[45])
    store = _open(root)
    try:
        assert len(store.damaged_ranges()) == 1
        assert store.max_phy_offset == spans[-1][1]
    finally:
        store.shutdown()


def test_after_a_crash_under_sync_flush_a_bad_record_is_damage_whatever_the_checkpoint_says(tmp_path: Path) -> None:
    """Under SYNC_FLUSH a SEND_OK meant an fsync covered the record: a bad one is rot."""
    root = tmp_path / "s"
    store = _open(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    spans = _put(store, 60, body_size=300)
    _crash_with_checkpoint_at(root, store, _store_ts(store, spans[39]))
    _flip_record(root, spans[45])
    store = _open(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    try:
        assert len(store.damaged_ranges()) == 1
        assert store.max_phy_offset == spans[-1][1]
    finally:
        store.shutdown()


def _store_ts(store: MessageStore, span: tuple[int, int]) -> int:
    return store.commitlog.store_timestamp_at(span[0], span[1] - span[0])


def test_a_digest_taken_over_rotten_bytes_does_not_block_their_repair(tmp_path: Path) -> None:
    """Rot between a segment's sealing and its digest's write goes into the digest: the
    replica's healthy bytes then differ from the digest. The repair sees that our damaged
    bytes are what the digest says, drops the digest and lets the record checks decide (a
    100-cycle chaos run found a master range refused for good this way)."""
    root = tmp_path / "s"
    store = _open(root, mapped_file_size_commitlog=MIB, store_scrub_enable=False)  # the test writes the digest
    try:
        spans = _put(store, 1500)
        start, end = spans[50]
        assert end < MIB  # in the first (sealed) segment
        good = store.commitlog.read(start, end - start)
        assert good is not None
        _flip(root / "commitlog" / f"{0:020d}", start + 200, 16)  # behind the store's back
        store.digests.write(0, store.commitlog.queue.files[0].mm)  # the digest takes the rot in
        assert store.report_damage(start, end, "test: body flipped")
        store.repair_range(start, good, "good replica")
        assert store.damaged_ranges() == [] and not store.digests.has(0)
        assert store.commitlog.read(start, end - start) == good
    finally:
        store.shutdown()


def test_a_sound_digest_still_refuses_a_replica_whose_header_differs(tmp_path: Path) -> None:
    """The rule above drops only a digest our damaged bytes match: with a digest taken over
    healthy bytes, a replica's copy whose store timestamp differs (a header field no record
    check covers) is refused. The block's other records are registered then too (whether
    the replica's bytes or ours elsewhere in the block are wrong, the digest cannot say),
    and a whole healthy block repairs it all."""
    root = tmp_path / "s"
    store = _open(root, mapped_file_size_commitlog=MIB, store_scrub_enable=False)  # the test writes the digest
    try:
        spans = _put(store, 1500)
        start, end = spans[50]
        block = store.digests.block_size
        around = [sp for sp in spans if sp[0] < block and sp[1] > 0]  # the records block 0 touches
        whole = (around[0][0], around[-1][1])
        good = store.commitlog.read(whole[0], whole[1] - whole[0])
        assert good is not None and end <= block
        store.digests.write(0, store.commitlog.queue.files[0].mm)  # over healthy bytes
        _flip(root / "commitlog" / f"{0:020d}", start + 200, 16)
        assert store.report_damage(start, end, "test: body flipped")
        other = bytearray(good[start - whole[0] : end - whole[0]])
        other[63] ^= 0x01  # the store timestamp's last byte: every record check still passes
        with pytest.raises(CorruptRangeError, match="would not match its digest"):
            store.repair_range(start, bytes(other), "replica with a header flip")
        assert store.digests.has(0) and store.damaged_ranges() == [whole]
        store.repair_range(whole[0], good, "good replica")
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()


def test_the_scrub_narrows_a_differing_block_to_its_bad_record(tmp_path: Path) -> None:
    """A body flip in one record of a digested 64 KiB block: the scrub registers that record
    only (its body CRC fails), so the block's other records are still served while the
    repair is pending, and the bad one is refused with the corrupt-range error; a replica's
    bytes for that record alone then complete the block, which matches its digest again."""
    root = tmp_path / "s"
    store = _open(root, store_scrub_bytes_per_second=64 * MIB, store_scrub_interval_seconds=0)
    heard: list[tuple[int, int, str]] = []
    try:
        store.add_damage_listener(lambda s, e, r: heard.append((s, e, r)))
        spans = _put(store, 200)  # ~3 sealed 64 KiB segments, one digest block each
        seg = 64 * 1024
        assert _wait(lambda: store.digests.has(seg))
        in_block = [sp for sp in spans if seg <= sp[0] and sp[1] <= 2 * seg]
        victim = in_block[len(in_block) // 2]
        good = store.commitlog.read(victim[0], victim[1] - victim[0])
        assert good is not None
        fd = os.open(root / "commitlog" / f"{seg:020d}", os.O_RDWR)
        try:
            at = victim[0] + 300 - seg  # inside the body
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x10]), at)
        finally:
            os.close(fd)
        assert _wait(lambda: bool(heard))
        assert store.damaged_ranges() == [victim], (store.damaged_ranges(), victim)
        assert "digest block" in heard[0][2] and "CRC" in heard[0][2]

        refused = served = 0
        for q in range(QUEUES):
            for index, (phy, size) in enumerate(_units(store, q)):
                if not (seg <= phy < 2 * seg):
                    continue
                got = store.get_message(TOPIC, q, index, 1)
                if (phy, phy + size) == victim:
                    assert got.status is GetStatus.CORRUPT_RANGE and "awaits repair from a replica" in got.remark
                    assert got.next_begin_offset == index
                    refused += 1
                else:
                    assert got.status is GetStatus.FOUND, (q, index, got.status, got.remark)
                    served += 1
        assert refused == 1 and served == len(in_block) - 1 >= 10

        store.repair_range(victim[0], good, "good replica")  # the record alone: the block matches again
        assert store.damaged_ranges() == [] and store.digests.has(seg)
        assert store.commitlog.read(victim[0], victim[1] - victim[0]) == good
    finally:
        store.shutdown()


def test_a_repair_that_leaves_its_block_differing_registers_the_rest_of_the_block(tmp_path: Path) -> None:
    """Two flips in one block: one in a body (its record fails its own check, and the scrub
    registers that record alone), one in a store timestamp (no record check sees it). The
    repair of the first record leaves the block still differing from its digest: it is
    refused and the block's records are registered, so the second flip is refused from then
    on and the next repair, of the whole block, brings everything back."""
    root = tmp_path / "s"
    store = _open(root, store_scrub_bytes_per_second=64 * MIB, store_scrub_interval_seconds=0)
    try:
        spans = _put(store, 200)
        seg = 64 * 1024
        assert _wait(lambda: store.digests.has(seg))
        in_block = [sp for sp in spans if seg <= sp[0] and sp[1] <= 2 * seg]
        body_hit, header_hit = in_block[3], in_block[-3]
        good_block = store.commitlog.read(seg, seg)  # the segment is one digest block
        assert good_block is not None and store.digests.block_size == seg
        fd = os.open(root / "commitlog" / f"{seg:020d}", os.O_RDWR)
        try:  # the body first: a scrub between the two writes narrows to it all the same
            for at in (body_hit[0] + 300 - seg, header_hit[0] + 63 - seg):
                os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x01]), at)
        finally:
            os.close(fd)
        assert _wait(lambda: store.damaged_ranges() == [body_hit]), store.damaged_ranges()
        good = good_block[body_hit[0] - seg : body_hit[1] - seg]
        with pytest.raises(CorruptRangeError, match="would not match its digest"):
            store.repair_range(body_hit[0], good, "replica")
        assert store.damaged_ranges() == [(seg, 2 * seg)]  # every record of the block
        with pytest.raises(CorruptRangeError):
            store.look_message_by_offset(header_hit[0])
        store.repair_range(seg, good_block, "replica")
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()


def test_a_flip_below_a_cut_is_still_found_after_the_segment_is_sealed_again(tmp_path: Path) -> None:
    """A store timestamp flipped (a field no record check sees) in a digested segment, which
    is then cut further on and refilled with the replica's bytes (a slave realigning, or a
    torn write cut by recovery). The segment's new digest keeps the CRCs its blocks below
    the cut had before it, so the scrub still finds the flip; a digest taken over the flip
    would have hidden it for good (a 5-cycle chaos run found one that way)."""
    root = tmp_path / "s"
    seg = 4 * 64 * 1024  # four digest blocks
    store = _open(root, mapped_file_size_commitlog=seg, store_scrub_enable=False)  # digests only, no passes
    try:
        spans = _put(store, 400)  # ~400 KiB: segment 0 sealed
        end = spans[-1][1]
        assert _wait(lambda: store.digests.has(0))
        before = store.digests.get(0)
        replica = _copy_bytes(root, 0, end, seg)
        victim = spans[5]
        cut = next(s for s, _ in spans if s >= 2 * 64 * 1024)  # in block 2: blocks 0 and 1 lie below
        fd = os.open(root / "commitlog" / f"{0:020d}", os.O_RDWR)
        try:
            at = victim[0] + 63  # the store timestamp's last byte
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x01]), at)
        finally:
            os.close(fd)
        store.truncate_after_offset(cut)
        assert not store.digests.has(0) and store.digests.kept_path_for(0).exists()
        store.append_raw(cut, replica[cut:])
        assert store.wait_dispatched()
    finally:
        store.shutdown()
    # Sealed again before this start: the scrub walks its records (they pass: the flip is in
    # a timestamp), digests it, and the digest keeps block 0's CRC from before the flip.
    store = _open(root, mapped_file_size_commitlog=seg, store_scrub_bytes_per_second=64 * MIB,
                  store_scrub_interval_seconds=0)  # fmt: skip
    try:
        assert _wait(lambda: bool(store.damaged_ranges())), "the flip below the cut was never found"
        assert store.digests.get(0) == before and not store.digests.kept_path_for(0).exists()
        (start, stop), *rest = store.damaged_ranges()
        assert not rest and start <= victim[0] and victim[1] <= stop <= 64 * 1024 + 2048
        store.repair_range(start, replica[start:stop], "replica")
        assert store.damaged_ranges() == []
    finally:
        store.shutdown()
