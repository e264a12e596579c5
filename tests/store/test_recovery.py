"""Recovery after crashes that damage the files: torn tails, corrupt records, lost derived data.

Each test writes numbered messages, "crashes" the store (``abandon``: no final flush,
dispatch or checkpoint; abort marker left behind), damages files the way lost pages or
bad sectors would, reopens, and checks the store holds exactly the complete prefix, in
the commit log and in every consume queue, and keeps working afterwards.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ledgermq.protocol.message import decode_record
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.testing.crash import abandon
from tests.conftest import small_config
from tests.store.recovery_helpers import (
    QUEUES,
    TOPIC,
    assert_consistent_prefix,
    commitlog_seqs,
    put_numbered,
    seq_of,
)


def _open(root: Path, **overrides: Any) -> MessageStore:
    store = open_message_store(small_config(root, **overrides))
    store.start()
    return store


SEGMENT = 64 * 1024  # conftest's SMALL mappedFileSizeCommitLog


def _segment_of(root: Path, offset: int, size: int = SEGMENT) -> tuple[Path, int]:
    start = offset - offset % size
    return root / "commitlog" / f"{start:020d}", offset - start


def _cut_commitlog(root: Path, offset: int, fill: bytes | None, seed: int = 0) -> None:
    """Lose everything from ``offset`` on: zeros (lost pages) or seeded garbage."""
    path, pos = _segment_of(root, offset)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(pos)
        if fill is None:
            f.write(bytes(size - pos))
        else:
            rng = random.Random(seed)
            f.write(bytes(rng.randrange(256) for _ in range(min(size - pos, 4096))))
            f.write(bytes(max(0, size - pos - 4096)))
    for seg in sorted((root / "commitlog").iterdir()):
        if int(seg.name) > int(path.name):
            seg.unlink()


def test_clean_restart_keeps_everything_and_continues_offsets(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    put_numbered(store, 0, 700)  # several 64 KiB segments
    store.shutdown()
    assert not (root / "abort").exists()
    store = _open(root)
    try:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.recovery.stop_reason == "end of data"
        assert_consistent_prefix(store, 700)
        put_numbered(store, 700, 20)
        assert_consistent_prefix(store, 720)
    finally:
        store.shutdown()


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(n=st.integers(1, 400), cut_fraction=st.floats(0.0, 1.0), garbage=st.booleans())
@example(n=253, cut_fraction=0.609375, garbage=False)  # the cut falls inside a segment's BLANK tail
def test_torn_tail_leaves_exactly_the_complete_prefix(
    tmp_path_factory: object, n: int, cut_fraction: float, garbage: bool
) -> None:
    root = Path(tmp_path_factory.mktemp("torn"))  # type: ignore[attr-defined]
    store = _open(root)
    spans = put_numbered(store, 0, n, seed=n)
    abandon(store)
    cut = int(spans[0][0] + (spans[-1][1] - spans[0][0]) * cut_fraction)
    _cut_commitlog(root, cut, b"x" if garbage else None, seed=n)
    survivors = sum(1 for _start, end in spans if end <= cut)
    store = _open(root)
    try:
        assert store.recovery is not None and store.recovery.abnormal
        if garbage and survivors < n and cut >= _body_end(survivors, spans[survivors]):
            # The format checksums only the body: garbage confined to the topic and
            # properties of the record straddling the cut may go unnoticed (as in RocketMQ).
            survivors += len(commitlog_seqs(store)) - survivors
        assert_consistent_prefix(store, survivors)
        end = spans[survivors - 1][1] if survivors else 0
        nxt = spans[survivors][0] if survivors < n else None
        # A cut inside the BLANK that ends a segment leaves its header: the log is then valid
        # to the segment's end, where the next record (lost) began.
        blank_kept = nxt is not None and nxt % SEGMENT == 0 and nxt > end and cut >= end + 8
        assert store.max_phy_offset == (nxt if blank_kept else end)
        put_numbered(store, survivors, 5)  # queue offsets continue without gaps
        assert_consistent_prefix(store, survivors + 5)
    finally:
        store.shutdown()


def _body_end(seq: int, span: tuple[int, int]) -> int:
    """Where record ``seq``'s body ends: what follows is topic and properties only."""
    props = f"TAGS\x01t{seq % 3}\x02KEYS\x01key-{seq}".encode()
    return span[1] - (1 + len(TOPIC.encode()) + 2 + len(props))


def test_corrupt_body_mid_log_is_registered_as_damage_not_cut(tmp_path: Path) -> None:
    """A bad record with sound records after it is rot, not a torn tail: recovery keeps
    everything after it and registers the record's bytes as damaged (refused until a
    replica repairs them); before, the log was cut there and every later message lost."""
    root = tmp_path / "s"
    store = _open(root)
    spans = put_numbered(store, 0, 300)
    assert store.wait_dispatched()
    store.queues.flush()
    abandon(store)
    # Every record known flushed (the checkpoint says so): a bad one is rot, not a torn
    # write past the flushed point (store/recovery.py, ASYNC_FLUSH after a crash).
    cp = Checkpoint.load(root / "checkpoint")
    cp.physic_ts = 2**62
    cp.save()
    bad = 290  # in the last segment, which every recovery scans
    start, end = spans[bad]
    path, pos = _segment_of(root, start)
    with open(path, "r+b") as f:  # flip a byte of the body (after the 8-byte seq)
        f.seek(pos + (end - start) - 40)
        byte = f.read(1)
        f.seek(pos + (end - start) - 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    store = _open(root)
    try:
        assert store.recovery is not None and store.recovery.stop_reason == "end of data"
        assert store.damaged_ranges() == [(start, end)]
        assert store.max_phy_offset == spans[-1][1]
        last = store.look_message_by_offset(spans[-1][0])  # nothing after the damage was dropped
        assert last is not None and seq_of(decode_record(last).body) == 299
    finally:
        store.shutdown()


def test_consume_queue_units_beyond_the_commit_log_are_dropped(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = put_numbered(store, 0, 200)
    assert store.wait_dispatched()
    store.queues.flush()  # the queues are durable up to 200...
    abandon(store)
    _cut_commitlog(root, spans[150][0], None)  # ...but the log lost its tail
    store = _open(root)
    try:
        assert_consistent_prefix(store, 150)
        for q in range(QUEUES):
            assert store.max_offset_in_queue(TOPIC, q) == len(range(q, 150, QUEUES))
    finally:
        store.shutdown()


def test_missing_consume_queues_are_rebuilt_after_clean_shutdown(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    put_numbered(store, 0, 500)
    store.shutdown()
    shutil.rmtree(root / "consumequeue")
    store = _open(root)
    try:
        assert_consistent_prefix(store, 500)
    finally:
        store.shutdown()


def test_missing_queues_and_checkpoint_are_rebuilt_after_crash(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    put_numbered(store, 0, 500)
    abandon(store)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index", ignore_errors=True)
    (root / "checkpoint").unlink(missing_ok=True)
    store = _open(root)
    try:
        assert store.recovery is not None and store.recovery.scan_start == 0
        assert_consistent_prefix(store, 500)
        found = store.query_message(TOPIC, "key-7", 4, 0, 2**62)
        assert len(found.messages) == 1
    finally:
        store.shutdown()


def test_lost_consume_queue_tail_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    """Units written after the last checkpoint are lost with the page cache; replay restores them."""
    root = tmp_path / "s"
    # Only the test flushes the consume queues (its own flush thread would race the step
    # below on the checkpoint file, and could checkpoint the second batch too).
    store = _open(root, flush_interval_consume_queue_ms=3_600_000)
    put_numbered(store, 0, 100)
    assert store.wait_dispatched()
    store.queue_flusher.step()  # checkpoint covers 0..99  # type: ignore[union-attr]
    put_numbered(store, 100, 100)
    assert store.wait_dispatched()
    abandon(store)
    # Zero every unit after the first 25 of each queue: as if only the checkpointed part hit disk.
    for q in range(QUEUES):
        qdir = root / "consumequeue" / TOPIC / str(q)
        for seg in sorted(qdir.iterdir()):
            base = int(seg.name) // 20
            with open(seg, "r+b") as f:
                keep = max(0, 25 - base) * 20
                size = seg.stat().st_size
                if keep < size:
                    f.seek(keep)
                    f.write(bytes(size - keep))
    store = _open(root)
    try:
        assert store.recovery is not None and store.recovery.records_redispatched > 0
        assert_consistent_prefix(store, 200)
    finally:
        store.shutdown()


def test_stale_checkpoint_temp_file_is_harmless(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    put_numbered(store, 0, 50)
    abandon(store)
    (root / "checkpoint.tmp").write_bytes(os.urandom(100))
    store = _open(root)
    try:
        assert_consistent_prefix(store, 50)
    finally:
        store.shutdown()
