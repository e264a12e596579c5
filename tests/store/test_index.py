"""The message index (docs/formats.md §5.3; RocketMQ IndexService / IndexFile).

Queries by each KEYS token and by UNIQ_KEY, scoped to the topic, filtered by store time
(second resolution relative to the file's beginTimestamp), newest first, at most max_num.
Index files are named yyyyMMddHHmmssSSS; a full file (indexCount == maxIndexNum) rolls to
a new one. The file bytes (header, slots, entries) are rebuilt independently and compared.
"""

from __future__ import annotations

import struct

from ledgermq.clock import ManualClock
from ledgermq.store.message_store import MessageStore
from tests.store.rw_helpers import (
    Rec,
    StoreFactory,
    java_hash,
    local_index_name,
    parse_record,
    put,
    store_root,
)

T0 = 1_700_000_000_000
SLOTS = 64  # conftest SMALL max_hash_slot_num


def _query(store: MessageStore, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**62) -> list[Rec]:
    return [parse_record(m) for m in store.query_message(topic, key, max_num, begin, end).messages]


def test_each_key_and_the_unique_key_find_the_message(store_factory: StoreFactory) -> None:
    store = store_factory()
    a = put(store, "Idx", b"one", KEYS="order-1 customer-9  sku-3", UNIQ_KEY="AC110001" + "0" * 24).append
    b = put(store, "Idx", b"two", KEYS="order-2 customer-9").append
    put(store, "Other", b"three", KEYS="order-1 customer-9")
    assert store.wait_dispatched()
    for key in ("order-1", "sku-3", "AC110001" + "0" * 24):
        assert [r.phys for r in _query(store, "Idx", key)] == [a.wrote_offset]
    assert [r.phys for r in _query(store, "Idx", "customer-9")] == [b.wrote_offset, a.wrote_offset]
    assert [r.body for r in _query(store, "Idx", "order-2")] == [b"two"]
    assert [r.topic for r in _query(store, "Other", "order-1")] == ["Other"]
    assert _query(store, "Idx", "order-1 customer-9") == []
    assert _query(store, "Idx", "missing") == []
    assert _query(store, "Nope", "order-1") == []


def test_query_result_reports_the_index_progress(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    empty = store.query_message("Idx", "k", 32, 0, 2**62)
    assert (empty.messages, empty.index_last_update_timestamp, empty.index_last_update_phy_offset) == (
        [],
        0,
        0,
    )
    put(store, "Idx", KEYS="k")
    clock.advance(3)
    last = put(store, "Idx", KEYS="j").append
    put(store, "Idx")  # no keys: not indexed
    assert store.wait_dispatched()
    res = store.query_message("Idx", "k", 32, 0, 2**62)
    assert len(res.messages) == 1
    assert res.index_last_update_timestamp == last.store_timestamp == T0 + 3000
    assert res.index_last_update_phy_offset == last.wrote_offset


def test_time_range_and_max_num(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    results = []
    for i in range(10):
        results.append(put(store, "Idx", f"m{i}".encode(), KEYS="same").append)
        clock.advance(10)
    assert store.wait_dispatched()
    ts = [a.store_timestamp for a in results]
    assert ts == [T0 + 10_000 * i for i in range(10)]
    everything = _query(store, "Idx", "same")
    assert [r.body for r in everything] == [f"m{i}".encode() for i in reversed(range(10))]
    assert [r.body for r in _query(store, "Idx", "same", max_num=3)] == [b"m9", b"m8", b"m7"]
    # [begin, end] is inclusive at both ends.
    window = _query(store, "Idx", "same", begin=ts[3], end=ts[5])
    assert [r.body for r in window] == [b"m5", b"m4", b"m3"]
    inside = _query(store, "Idx", "same", begin=ts[3] + 1, end=ts[5] - 1)
    assert [r.body for r in inside] == [b"m4"]
    assert [r.body for r in _query(store, "Idx", "same", max_num=2, begin=ts[2], end=ts[6])] == [b"m6", b"m5"]
    assert _query(store, "Idx", "same", begin=T0 - 60_000, end=T0 - 1) == []
    assert _query(store, "Idx", "same", begin=ts[9] + 1000, end=ts[9] + 60_000) == []


def _expected_index_files(entries: list[tuple[str, int, int]], max_index_num: int) -> list[bytes]:
    """Rebuild index file contents from (full key, phyOffset, storeTimestamp) in dispatch order."""
    per_file = max_index_num - 1  # entry numbers run 1 .. maxIndexNum-1
    files = []
    for start in range(0, len(entries), per_file):
        chunk = entries[start : start + per_file]
        slots = [0] * SLOTS
        body = bytearray(20)  # entry 0 is never used
        begin_ts = chunk[0][2]
        used_slots = 0
        for n, (key, phy, ts) in enumerate(chunk, start=1):
            h = abs(java_hash(key))
            h = 0 if h > 0x7FFFFFFF else h
            slot = h % SLOTS
            if slots[slot] == 0:
                used_slots += 1
            diff = (ts - begin_ts) // 1000 if n > 1 else 0
            body += struct.pack(">iqii", h, phy, diff, slots[slot])
            slots[slot] = n
        header = struct.pack(">qqqqii", begin_ts, chunk[-1][2], chunk[0][1], chunk[-1][1], used_slots, len(chunk) + 1)
        content = header + struct.pack(f">{SLOTS}i", *slots) + bytes(body)
        size = 40 + SLOTS * 4 + max_index_num * 20
        files.append(content + bytes(size - len(content)))
    return files


def test_rollover_file_names_and_bytes(store_factory: StoreFactory) -> None:
    max_index_num = 8  # 7 entries per file
    clock = ManualClock(T0 + 123)
    store = store_factory(clock=clock, max_index_num=max_index_num)
    entries: list[tuple[str, int, int]] = []
    first_entry_time: list[int] = []
    for i in range(9):
        uniq = f"{i:032X}"
        keys = f"key{i} shared" if i % 3 else f"key{i}"
        a = put(store, "Roll", f"m{i}".encode(), UNIQ_KEY=uniq, KEYS=keys).append
        assert store.wait_dispatched()  # index files are created at dispatch time
        for k in [uniq, *keys.split()]:
            if len(entries) % (max_index_num - 1) == 0:
                first_entry_time.append(a.store_timestamp)
            entries.append((f"Roll#{k}", a.wrote_offset, a.store_timestamp))
        clock.advance(1.5)
    expected = _expected_index_files(entries, max_index_num)
    assert len(expected) == 4

    # Every key is found, wherever its entries landed.
    for i in range(9):
        assert [r.body for r in _query(store, "Roll", f"key{i}")] == [f"m{i}".encode()]
        assert [r.body for r in _query(store, "Roll", f"{i:032X}")] == [f"m{i}".encode()]
    shared = [i for i in range(9) if i % 3]
    assert [r.body for r in _query(store, "Roll", "shared")] == [f"m{i}".encode() for i in reversed(shared)]
    assert [r.body for r in _query(store, "Roll", "shared", max_num=4)] == [
        f"m{i}".encode() for i in reversed(shared[-4:])
    ]

    # The header may be written lazily (at flush); a clean shutdown has flushed everything.
    store.shutdown()
    files = sorted((store_root(store) / "index").iterdir())
    names = [p.name for p in files]
    assert names == [local_index_name(t) for t in first_entry_time]
    assert all(len(n) == 17 and n.isdigit() for n in names)
    for path, want in zip(files, expected, strict=True):
        data = path.read_bytes()
        assert len(data) == 40 + SLOTS * 4 + max_index_num * 20
        assert struct.unpack_from(">qqqqii", data, 0) == struct.unpack_from(">qqqqii", want, 0)
        assert data == want, f"{path.name} differs from the rebuilt index file"


def test_messages_without_keys_create_no_index_file(store_factory: StoreFactory) -> None:
    store = store_factory()
    put(store, "NoKeys", TAGS="t")
    assert store.wait_dispatched()
    index_dir = store_root(store) / "index"
    assert not index_dir.exists() or list(index_dir.iterdir()) == []
