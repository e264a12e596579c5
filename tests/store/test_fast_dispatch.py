"""Dispatch from a put's facts (store/appended.py) against dispatch from the stored bytes.

Records this process appends are dispatched from what the put knew; every other record is
parsed (``dispatch.check_record``). Both must give the same consume queues, the same index
files and the same dispatch requests (what hooks see), byte for byte and field for field,
for any message: the tests run the same puts through two stores on one manual clock, one
with the facts and units written per queue and pass, the other parsing each record and
writing each unit on its own (as before), and compare everything they wrote.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.clock import ManualClock
from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.store import encoding
from ledgermq.store.appended import AppendedRecords
from ledgermq.store.consumequeue import ConsumeQueue, Unit
from ledgermq.store.dispatch import DispatchRequest, check_record
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import open_message_store
from tests.conftest import small_config

HOST = ("127.0.0.1", 10911)
LEVELS = [1000, 5000, 10000]


class NoFacts(AppendedRecords):
    """The commit log forgets every put's facts: each record is parsed back."""

    __slots__ = ()

    def add(self, facts: DispatchRequest) -> None:
        return None


class CountingFacts(AppendedRecords):
    __slots__ = ("used",)

    def __init__(self) -> None:
        super().__init__()
        self.used = 0

    def take(self, offset: int, available: int) -> DispatchRequest | None:
        got = super().take(offset, available)
        self.used += got is not None
        return got


# -- what a message may carry ---------------------------------------------------------
_TEXT = st.text(alphabet=st.sampled_from("abcXYZ09 é漢😀\x01\x02#|-"), max_size=10)
_PROP_KEYS = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "TAGS\x01x", "X\x02KEYS", "", "WAIT", "CLUSTER"])
_PROPS = st.dictionaries(_PROP_KEYS, _TEXT, max_size=5)
_DELAY = st.sampled_from([None, "0", "1", "2", "3", "9", "x", ""])
_SYSFLAG = st.sampled_from(
    [0, SF.MULTI_TAGS, SF.TRANSACTION_PREPARED_TYPE, SF.TRANSACTION_COMMIT_TYPE, SF.TRANSACTION_ROLLBACK_TYPE]
)


@st.composite
def _message(draw: st.DrawFn) -> MessageInput:
    props = draw(_PROPS)
    delay = draw(_DELAY)
    if delay is not None:
        props["DELAY"] = delay
    return MessageInput(
        topic=draw(st.sampled_from(["TopicA", "TopicB", "T%x|y-1"])),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(0, 3)),
        flag=draw(st.integers(-5, 5)),
        properties=props,
        sysflag=draw(_SYSFLAG),
        born_timestamp=draw(st.integers(0, 2**40)),
        born_host=draw(st.sampled_from([("127.0.0.1", 5000), ("::1", 6000)])),
        store_host=draw(st.sampled_from([None, ("::1", 10911)])),  # IPv6 hosts move the later fields
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )


@st.composite
def _batch(draw: st.DrawFn) -> BatchInput:
    entries = draw(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=200), _PROPS), min_size=1, max_size=6))
    return BatchInput(
        topic=draw(st.sampled_from(["TopicA", "Batch"])), entries=entries, queue_id=draw(st.integers(0, 3))
    )


_OP = st.one_of(
    _message(),
    _message(),
    _message(),
    _batch(),
    st.just("dispatch"),
    st.integers(1, 5000).map(lambda ms: ("advance", ms)),
)


# -- running and reading two stores ----------------------------------------------------
def _files(root: Path, sub: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    base = root / sub
    for dirpath, _dirs, names in os.walk(base):
        for name in names:
            path = Path(dirpath) / name
            out[str(path.relative_to(base))] = path.read_bytes()
    return out


def _one_put_per_unit(cq: ConsumeQueue, units: Sequence[Unit]) -> None:
    """The reference: each unit written on its own by ``ConsumeQueue.put``, as before
    units were batched."""
    for offset, size, tags_code, queue_offset, store_ts, _tag in units:
        cq.put(offset, size, tags_code, queue_offset, store_ts)


def _run(root: Path, ops: list[Any], facts: AppendedRecords) -> tuple[list[DispatchRequest], dict[str, bytes]]:
    """Apply ``ops`` to a fresh store; return the dispatch requests hooks saw and every
    file it wrote (commit log, consume queues, index). The reput thread is stopped so
    passes happen where ``ops`` says ("dispatch"), as the broker's loop turns do."""
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = open_message_store(small_config(root, message_delay_level="1s 5s 10s"), clock=clock, store_host=HOST)
    store.start()
    seen: list[DispatchRequest] = []
    store.add_dispatch_hook(lambda req: seen.append(DispatchRequest(**{f: getattr(req, f) for f in _FIELDS})))
    assert store.reput is not None
    store.reput.stop()
    store.commitlog.appended = facts
    for op in ops:
        if op == "dispatch":
            store.reput.dispatch_available()
        elif isinstance(op, tuple):
            clock.advance(op[1] / 1000)
        elif isinstance(op, MessageInput):
            store.put_message(op)
        else:
            store.put_messages(op)
    store.reput.dispatch_available()
    assert store.reput.reput_from == store.commitlog.max_offset
    assert store.reput.dispatch_error is None and store.reput.stuck_reason is None
    store.shutdown()
    files = {f"cq/{k}": v for k, v in _files(root, "consumequeue").items()}
    files.update({f"index/{k}": v for k, v in _files(root, "index").items()})
    files.update({f"commitlog/{k}": v for k, v in _files(root, "commitlog").items()})
    return seen, files


_FIELDS = [f for f in DispatchRequest.__dataclass_fields__]


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_OP, min_size=1, max_size=60))
def test_dispatch_from_facts_in_batches_writes_what_parsing_record_by_record_writes(
    tmp_path_factory: Any, ops: list[Any]
) -> None:
    base = tmp_path_factory.mktemp("fast")
    fast = CountingFacts()
    seen_fast, files_fast = _run(base / "fast", ops, fast)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConsumeQueue, "put_units", _one_put_per_unit)
        seen_parsed, files_parsed = _run(base / "parsed", ops, NoFacts())
    assert seen_fast == seen_parsed
    assert files_fast.keys() == files_parsed.keys()
    for name in files_fast:
        assert files_fast[name] == files_parsed[name], name
    scheduled = sum(1 for r in seen_fast if r.topic == "SCHEDULE_TOPIC_XXXX")
    assert fast.used == len(seen_fast) - scheduled  # every other record went the fast way


@settings(max_examples=300, deadline=None, derandomize=True)
@given(msg=_message(), queue_offset=st.integers(0, 2**40), phys=st.integers(0, 2**50), ts=st.integers(0, 2**42))
def test_facts_equal_what_check_record_reads_back(msg: MessageInput, queue_offset: int, phys: int, ts: int) -> None:
    encoded = encoding.encode_message(msg, HOST, LEVELS)
    if not isinstance(encoded, tuple):
        return  # refused: nothing is stored, nothing dispatched
    [record], topic, _queue_id, _wait = encoded
    qoff = queue_offset if record.takes_queue_offset else 0
    M.set_append_fields(record.data, 0, qoff, phys, ts)
    parsed = check_record(
        record.data, 0, len(record.data), phys, check_crc=True, delay_levels_ms=LEVELS, check_text=False
    )
    assert isinstance(parsed, DispatchRequest)
    if topic == "SCHEDULE_TOPIC_XXXX":
        assert record.facts is None  # its tag code is a due time: always parsed
        return
    facts = record.facts
    assert facts is not None
    facts.commit_log_offset, facts.queue_offset, facts.store_timestamp = phys, qoff, ts
    assert facts == parsed


def test_facts_of_a_cut_log_are_never_used(tmp_path: Path) -> None:
    """A slave realigning cuts its log and receives other records at the same offsets:
    facts queued for the old records must not describe the new ones."""
    store = open_message_store(small_config(tmp_path / "s"), store_host=HOST)
    store.start()
    try:
        assert store.reput is not None
        store.reput.stop()
        first = store.put_message(MessageInput(topic="T", body=b"one", properties={"TAGS": "a"}))
        store.put_message(MessageInput(topic="T", body=b"two", properties={"TAGS": "b"}))
        assert len(store.commitlog.appended) == 2
        assert first.append is not None
        store.truncate_after_offset(first.append.next_offset)
        assert len(store.commitlog.appended) == 0
        assert store.commitlog.appended.take(first.append.wrote_offset, 1 << 20) is None
    finally:
        store.shutdown()


def test_facts_wait_when_dispatch_is_far_behind(monkeypatch: Any) -> None:
    """The queue is bounded: past ``MAX_QUEUED`` new facts are dropped (those records are
    parsed later), and taking skips facts of records before the asked offset."""
    from ledgermq.store import appended as appended_mod

    monkeypatch.setattr(appended_mod, "MAX_QUEUED", 3)
    q = AppendedRecords()
    reqs = [DispatchRequest("T", 0, off, 10, 0, 0, i, 0, None, None, 0) for i, off in enumerate((0, 10, 20, 30))]
    for r in reqs:
        q.add(r)
    assert len(q) == 3
    assert q.take(10, 100) is reqs[1]  # the one at 0 is dropped on the way
    assert q.take(20, 5) is None  # not all of it is there yet
    assert q.take(20, 10) is reqs[2]
    assert q.take(30, 10) is None  # dropped at the bound: parsed instead
