"""Helpers for recovery tests: write numbered messages, read them all back, check invariants."""

from __future__ import annotations

import random
import struct

from ledgermq.protocol.message import decode_record
from ledgermq.store.consumequeue import UNIT, UNIT_SIZE
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore

TOPIC = "RecoveryTopic"
QUEUES = 4


def body_for(seq: int, rng: random.Random | None = None) -> bytes:
    """Seq number first, then a seeded filler so records have varied sizes."""
    filler = b"" if rng is None else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 600)))
    return struct.pack(">q", seq) + filler


def seq_of(body: bytes) -> int:
    return int(struct.unpack_from(">q", body)[0])


def put_numbered(store: MessageStore, start: int, count: int, seed: int = 0) -> list[tuple[int, int]]:
    """Put messages start..start+count-1; return their (physical offset, end offset)."""
    rng = random.Random(seed)
    spans = []
    for seq in range(start, start + count):
        r = store.put_message(
            MessageInput(
                topic=TOPIC,
                body=body_for(seq, rng),
                queue_id=seq % QUEUES,
                properties={"TAGS": f"t{seq % 3}", "KEYS": f"key-{seq}"},
            )
        )
        assert r.ok, r
        assert r.append is not None
        spans.append((r.append.wrote_offset, r.append.next_offset))
    return spans


def commitlog_seqs(store: MessageStore) -> list[int]:
    """Every message in commit-log order, by walking the segments record by record."""
    out = []
    for mf in store.commitlog.queue.files:
        pos = 0
        while pos + 8 <= mf.wrote:
            size, magic = struct.unpack_from(">ii", mf.mm, pos)
            if magic != -626843481:
                break
            out.append(seq_of(decode_record(mf.mm[pos : pos + size]).body))
            pos += size
    return out


def queue_seqs(store: MessageStore, queue_id: int) -> list[int]:
    """The messages a consumer of one queue sees, checking each unit against its record."""
    cq = store.queues.get(TOPIC, queue_id)
    if cq is None:
        return []
    seqs = []
    for index in range(cq.min_offset, cq.max_offset):
        raw = cq.read_units(index, 1)
        assert len(raw) == UNIT_SIZE, f"queue {queue_id} offset {index}: no unit"
        phy, size, _tags = UNIT.unpack(raw)
        rec_bytes = store.commitlog.read(phy, size)
        assert rec_bytes is not None, f"queue {queue_id} offset {index} points at missing {phy}"
        rec = decode_record(rec_bytes)
        assert rec.queue_offset == index and rec.queue_id == queue_id and rec.physical_offset == phy
        seqs.append(seq_of(rec.body))
    return seqs


def assert_consistent_prefix(store: MessageStore, expected_count: int) -> None:
    """The store holds exactly messages 0..expected_count-1, in order, in log and queues."""
    assert store.wait_dispatched(timeout=10)
    assert commitlog_seqs(store) == list(range(expected_count))
    for q in range(QUEUES):
        assert queue_seqs(store, q) == list(range(q, expected_count, QUEUES)), f"queue {q}"
        assert store.max_offset_in_queue(TOPIC, q) == len(range(q, expected_count, QUEUES))
