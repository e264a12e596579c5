"""A replica's dispatch, a window of records at a time (store/record_scan.py,
store/window_dispatch.py), against ``check_record`` and the record-by-record pass.

The scan must accept exactly the records ``check_record`` accepts, with the same facts,
and stop where ``check_record`` refuses; a store dispatching that way must write the same
consume queues and index files and give hooks the same records as the record pass, and
keep its failure rules: a round stops at the first record whose unit, index entries or
queue could not be made, and the next pass goes on from there.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import failpoints
from ledgermq.clock import ManualClock
from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.store import encoding, window_dispatch
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.dispatch import DispatchRequest, check_record
from ledgermq.store.index import IndexFile
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.record_scan import request_of, scan_records
from ledgermq.store.reput import ReputService
from tests.conftest import small_config
from tests.store.rw_helpers import StoreFactory, put
from tests.store.test_fast_dispatch import _FIELDS, _OP, HOST, LEVELS, NoFacts, _files, _message, _one_put_per_unit


def _encoded(msg: MessageInput, phys: int, queue_offset: int, ts: int) -> bytearray | None:
    encoded = encoding.encode_message(msg, HOST, LEVELS)
    if not isinstance(encoded, tuple):
        return None
    [record], _topic, _queue_id, _wait = encoded
    M.set_append_fields(record.data, 0, queue_offset if record.takes_queue_offset else 0, phys, ts)
    return record.data


def _walk(buf: bytes, base: int) -> tuple[list[DispatchRequest], int]:
    """``check_record`` record by record, as the record pass reads: the requests, and where
    the first record it does not accept starts."""
    out: list[DispatchRequest] = []
    pos = 0
    while True:
        v = check_record(
            buf, pos, len(buf), base + pos, check_crc=False, delay_levels_ms=LEVELS, capacity=len(buf), check_text=False
        )
        if not isinstance(v, DispatchRequest):
            return out, pos
        out.append(v)
        pos += v.size


def _log_of(msgs: list[MessageInput], base: int) -> bytes:
    out = bytearray()
    for i, msg in enumerate(msgs):
        data = _encoded(msg, base + len(out), i, 1_700_000_000_000 + i)
        if data is not None:
            out += data
    return bytes(out)


# -- the scan against check_record ------------------------------------------------------
@settings(max_examples=200, deadline=None, derandomize=True)
@given(msgs=st.lists(_message(), min_size=1, max_size=8), base=st.integers(0, 2**40))
def test_scan_reads_what_check_record_reads(msgs: list[MessageInput], base: int) -> None:
    buf = _log_of(msgs, base)
    rows, end = scan_records(buf, 0, len(buf), base, len(buf), 100, LEVELS)
    expected, stop = _walk(buf, base)
    assert [request_of(r) for r in rows] == expected
    assert end == stop == len(buf)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    msgs=st.lists(_message(), min_size=1, max_size=5),
    damage=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 4000),
)
def test_scan_stops_where_check_record_refuses(
    msgs: list[MessageInput], damage: list[tuple[int, int]], cut: int
) -> None:
    """Any bytes: flipped, cut short anywhere (a record still arriving). The scan gives the
    records ``check_record`` accepts before the first it refuses, and stops there."""
    buf = bytearray(_log_of(msgs, 4096))
    for at, value in damage:
        if at < len(buf):
            buf[at] = value
    data = bytes(buf[: min(cut, len(buf))])
    rows, end = scan_records(data, 0, len(data), 4096, len(data), 100, LEVELS)
    expected, stop = _walk(data, 4096)
    assert [request_of(r) for r in rows] == expected
    assert end == stop


def test_scan_reads_raw_properties_as_the_text_parse_does() -> None:
    """Bytes that are not UTF-8, NULs, repeated keys, empty values, keys inside values."""
    cases = [
        b"TAGS\x01\xff\xfe\x02UNIQ_KEY\x01\xe2\x82\x02KEYS\x01a \xc3 b",
        b"TAGS\x01a\x02TAGS\x01\x02UNIQ_KEY\x01u1\x02UNIQ_KEY\x01",
        b"XTAGS\x01no\x02KEYS\x01k\x00 k2\x02A\x01UNIQ_KEY\x01x",
        b"TAGS\x01",
        b"\x02\x02TAGS\x01t\x01t\x02",
        b"KEYS\x01  \x02KEYS\x01",
    ]
    buf = bytearray()
    for i, raw in enumerate(cases):
        placeholder = "p" * (len(raw) - 2)  # "a\x01" + placeholder: as long as ``raw``
        data = _encoded(MessageInput(topic="T\xe9", body=b"b", properties={"a": placeholder}), len(buf), i, 5)
        assert data is not None
        at = data.index(b"a\x01" + placeholder.encode())
        data[at : at + len(raw)] = raw
        buf += data
    rows, end = scan_records(bytes(buf), 0, len(buf), 0, len(buf), 100, LEVELS)
    expected, stop = _walk(bytes(buf), 0)
    assert len(expected) == len(cases) and end == stop == len(buf)
    assert [request_of(r) for r in rows] == expected


def test_scan_takes_at_most_what_it_is_asked_for_and_stops_at_a_blank() -> None:
    msgs = [MessageInput(topic="T", body=b"x" * i, properties={"TAGS": "a"}) for i in range(5)]
    buf = _log_of(msgs, 0)
    rows, end = scan_records(buf, 0, len(buf), 0, len(buf), 3, LEVELS)
    assert len(rows) == 3 and end == sum(r[0] for r in rows)
    blank = buf + (64).to_bytes(4, "big") + (M.BLANK_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big") + bytes(56)
    rows, end = scan_records(blank, 0, len(blank), 0, len(blank), 100, LEVELS)
    assert len(rows) == 5 and end == len(buf)


# -- a store dispatching windows against the record pass --------------------------------
def _run(root: Path, ops: list[Any]) -> tuple[list[DispatchRequest], list[DispatchRequest], dict[str, bytes], int, int]:
    """Apply ``ops`` to a fresh store whose puts leave no facts, so every record is read
    back from the log as a replica's are; returns what a hook naming the property "a" and
    a hook wanting every record saw, the consume-queue and index files, the dispatched
    time and how many records were dispatched."""
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = open_message_store(small_config(root, message_delay_level="1s 5s 10s"), clock=clock, store_host=HOST)
    store.start()
    named: list[DispatchRequest] = []
    every: list[DispatchRequest] = []
    store.add_dispatch_hook(lambda req: named.append(_copy(req)), only_with="a")
    store.add_dispatch_hook(lambda req: every.append(_copy(req)))
    assert store.reput is not None
    store.reput.stop()
    store.commitlog.appended = NoFacts()
    dispatched = 0
    for op in ops:
        if op == "dispatch":
            dispatched += store.reput.dispatch_available()
        elif isinstance(op, tuple):
            clock.advance(op[1] / 1000)
        elif isinstance(op, MessageInput):
            store.put_message(op)
        else:
            store.put_messages(op)
    dispatched += store.reput.dispatch_available()
    assert store.reput.reput_from == store.commitlog.max_offset
    assert store.reput.dispatch_error is None and store.reput.stuck_reason is None
    ts = store.reput.dispatched_ts
    store.shutdown()
    files = {f"cq/{k}": v for k, v in _files(root, "consumequeue").items()}
    files.update({f"index/{k}": v for k, v in _files(root, "index").items()})
    return named, every, files, ts, dispatched


def _copy(req: DispatchRequest) -> DispatchRequest:
    return DispatchRequest(**{f: getattr(req, f) for f in _FIELDS})


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_OP, min_size=1, max_size=60))
def test_window_dispatch_writes_what_the_record_pass_writes(tmp_path_factory: Any, ops: list[Any]) -> None:
    base = tmp_path_factory.mktemp("window")
    scanned: list[int] = []
    real = window_dispatch.scan_records

    def counting(*args: Any) -> Any:
        rows, end = real(*args)
        scanned.append(len(rows))
        return rows, end

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_dispatch, "scan_records", counting)
        window = _run(base / "window", ops)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConsumeQueue, "put_units", _one_put_per_unit)
        patch.setattr(ReputService, "_window_dispatch_fits", lambda self: False)
        records = _run(base / "records", ops)
    assert window == records
    named, every, _files_window, _ts, dispatched = window
    assert sum(scanned) == dispatched == len(every)  # every record went the window's way
    assert named == [r for r in every if "a" in r.properties]


# -- failures inside a window ------------------------------------------------------------
def _replica_like(store: MessageStore) -> None:
    """Puts leave no facts (each record is read back, as a replica's), the thread stopped."""
    assert store.reput is not None
    store.reput.dispatch_available()
    store.reput.stop()
    store.commitlog.appended = NoFacts()


def _heard(store: MessageStore) -> list[int]:
    seen: list[int] = []
    store.add_dispatch_hook(lambda req: seen.append(req.commit_log_offset), only_with=P.TAGS)
    return seen


def test_a_failed_unit_write_stops_the_window_at_the_first_record_it_left_out(store_factory: StoreFactory) -> None:
    store = store_factory()
    _replica_like(store)
    seen = _heard(store)
    results = [put(store, "T", f"m{i}".encode(), i % 3, TAGS="t", KEYS=f"k{i}") for i in range(12)]
    offsets = [r.append.wrote_offset for r in results if r.append]
    calls: list[int] = []

    def second_write_fails() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert store.reput is not None
    with failpoints.armed("consume_queue.before_put", second_write_fails):
        assert store.reput.dispatch_available() == 1
    assert seen == offsets[:1]
    assert store.reput.reput_from == offsets[1]
    assert store.reput.dispatch_error is not None and "T-1 offset 0" in store.reput.dispatch_error
    assert store.reput.dispatch_available() == 11
    assert store.reput.dispatch_error is None
    assert seen == offsets
    for i in range(12):
        assert len(store.query_message("T", f"k{i}", 8, 0, 2**62).messages) == 1  # indexed once


@pytest.mark.parametrize("records", ["read back", "with their facts"])
def test_a_failed_index_entry_stops_the_round_at_its_record(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch, records: str
) -> None:
    """Records read back (a replica's window) or with their facts (a master's own puts,
    indexed a round at a time by ``build_staged``): the records before the failed one are
    dispatched, it and the rest are tried again, and every key is indexed once."""
    store = store_factory()
    assert store.reput is not None
    if records == "read back":
        _replica_like(store)
    else:
        store.reput.dispatch_available()
        store.reput.stop()
    seen = _heard(store)
    results = [put(store, "T", f"m{i}".encode(), 0, TAGS="t", KEYS=f"k{i}") for i in range(6)]
    offsets = [r.append.wrote_offset for r in results if r.append]
    assert bool(store.commitlog.appended.queued) == (records == "with their facts")
    real = IndexFile.put_hashed
    failed: list[int] = []

    def third_record_fails_once(f: IndexFile, java_hash: int, phy: int, ts: int) -> bool:
        if phy == offsets[2] and not failed:
            failed.append(phy)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(f, java_hash, phy, ts)

    monkeypatch.setattr(IndexFile, "put_hashed", third_record_fails_once)
    # The compiled run (IndexFile.put_run) declines every key, so each goes to put_hashed.
    monkeypatch.setattr(IndexFile, "put_run", lambda f, flat, start: 0)
    assert store.reput.dispatch_available() == 2
    assert seen == offsets[:2] and store.reput.reput_from == offsets[2]
    assert store.reput.dispatch_error is not None and "T-0 offset 2" in store.reput.dispatch_error
    assert store.max_offset_in_queue("T", 0) == 6  # units went first; written once
    assert store.reput.dispatch_available() == 4
    assert store.reput.dispatch_error is None and seen == offsets
    for i in range(6):
        assert len(store.query_message("T", f"k{i}", 8, 0, 2**62).messages) == 1


def test_a_queue_that_cannot_be_made_stops_the_window_at_its_record(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory()
    _replica_like(store)
    [put(store, "Good", f"g{i}".encode(), 0) for i in range(3)]
    bad = put(store, "Bad", b"b", 0)
    put(store, "Good", b"after", 0)
    real = ConsumeQueueTable.find_or_create

    def refuse_bad(table: ConsumeQueueTable, topic: str, queue_id: int) -> ConsumeQueue:
        if topic == "Bad":
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(table, topic, queue_id)

    monkeypatch.setattr(ConsumeQueueTable, "find_or_create", refuse_bad)
    assert store.reput is not None
    assert store.reput.dispatch_available() == 3
    assert bad.append is not None and store.reput.reput_from == bad.append.wrote_offset
    assert store.dispatch_problem is not None and "Bad-0 offset 0" in store.dispatch_problem
    assert store.max_offset_in_queue("Good", 0) == 3
    monkeypatch.setattr(ConsumeQueueTable, "find_or_create", real)
    assert store.reput.dispatch_available() == 2
    assert store.dispatch_problem is None
    assert store.max_offset_in_queue("Good", 0) == 4 and store.max_offset_in_queue("Bad", 0) == 1


def test_a_window_pauses_for_a_replica_copying_a_backlog(store_factory: StoreFactory) -> None:
    """While ``hold_off`` says a copy is under way, a pass stops after one scan (64
    records) instead of dispatching everything."""
    store = store_factory()
    _replica_like(store)
    for i in range(200):
        put(store, "T", f"m{i}".encode(), i % 2, TAGS="t")
    reput = store.reput
    assert reput is not None
    with reput.lock:
        done = reput._dispatch_available(lambda: True)
    assert done == window_dispatch.HOLD_CHECK_RECORDS and reput._held
    assert reput.dispatch_available() == 200 - done


def test_records_with_facts_take_the_record_pass(store_factory: StoreFactory) -> None:
    """A master's own puts (their facts queued) are not scanned: the record pass takes
    their facts instead of reading anything back."""
    store = store_factory()
    assert store.reput is not None
    store.reput.dispatch_available()
    store.reput.stop()
    rng = random.Random(7)
    for _ in range(5):
        put(store, "T", rng.randbytes(10), 0, TAGS="t")
    calls: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_dispatch, "scan_records", lambda *a: calls.append(1) or ([], a[1]))
        assert store.reput.dispatch_available() == 5
    assert calls == []
