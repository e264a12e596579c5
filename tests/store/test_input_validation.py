"""Puts the store refuses, storing nothing (RocketMQ ``DefaultMessageStore.checkMessage(s)``,
``CommitLog`` size checks; docs/formats.md §4.1 limits).

Topic > 127 bytes (the TOPIC LENGTH field is an int8) and bodies > maxMessageSize give
MESSAGE_ILLEGAL; properties > 32767 bytes (int16 field) give MESSAGE_ILLEGAL or
PROPERTIES_SIZE_EXCEEDED (RocketMQ uses either, and the broker answers both with code 13).
"""

from __future__ import annotations

import pytest

from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutStatus
from tests.store.rw_helpers import StoreFactory, parse_record, put, store_root

PROPS_REFUSED = {PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED}


def _assert_nothing_stored(store: MessageStore, topic: str) -> None:
    assert store.max_phy_offset == 0
    assert store.wait_dispatched()
    assert store.max_offset_in_queue(topic, 0) == 0
    assert not (store_root(store) / "consumequeue" / topic).exists()
    # The refusal did not break the store.
    assert put(store, "Fine").append.wrote_offset == 0


@pytest.mark.parametrize(
    "topic",
    ["T" * 128, "T" * 300, "\u00e9" * 64, ""],
    ids=["128-ascii", "300-ascii", "64-two-byte-chars", "empty"],
)
def test_bad_topic_is_refused(store_factory: StoreFactory, topic: str) -> None:
    store = store_factory()
    res = store.put_message(MessageInput(topic=topic, body=b"x"))
    assert res.status is PutStatus.MESSAGE_ILLEGAL
    assert res.append is None
    _assert_nothing_stored(store, topic or "x")


def test_topic_of_127_bytes_is_accepted(store_factory: StoreFactory) -> None:
    store = store_factory()
    topic = "T" * 127
    a = put(store, topic).append
    assert parse_record(store.look_message_by_offset(a.wrote_offset)).topic == topic


def test_body_above_max_message_size_is_refused(store_factory: StoreFactory) -> None:
    store = store_factory(max_message_size=1024)
    res = store.put_message(MessageInput(topic="Big", body=b"x" * 1025))
    assert res.status is PutStatus.MESSAGE_ILLEGAL
    _assert_nothing_stored(store, "Big")
    assert put(store, "Big", b"x" * 1024).ok


@pytest.mark.parametrize("value", ["v" * 32766, "\u00e9" * 16383], ids=["ascii", "two-byte-chars"])
def test_properties_above_32767_bytes_are_refused(store_factory: StoreFactory, value: str) -> None:
    store = store_factory()
    props = {"X": value}  # "X" 0x01 value: 32768 bytes either way
    assert len(b"X\x01" + value.encode()) == 32768
    res = store.put_message(MessageInput(topic="Props", body=b"x", properties=props))
    assert res.status in PROPS_REFUSED
    assert res.append is None
    _assert_nothing_stored(store, "Props")


def test_properties_of_exactly_32767_bytes_are_accepted(store_factory: StoreFactory) -> None:
    store = store_factory()
    a = put(store, "Props", X="v" * 32765).append
    assert parse_record(store.look_message_by_offset(a.wrote_offset)).props == {"X": "v" * 32765}


def test_bad_batches_are_refused(store_factory: StoreFactory) -> None:
    store = store_factory(max_message_size=1024)
    long_topic = store.put_messages(BatchInput(topic="B" * 128, entries=[(0, b"x", {})]))
    assert long_topic.status is PutStatus.MESSAGE_ILLEGAL
    too_big = store.put_messages(BatchInput(topic="B", entries=[(0, b"x" * 600, {}), (0, b"y" * 600, {})]))
    assert too_big.status is PutStatus.MESSAGE_ILLEGAL
    big_props = store.put_messages(BatchInput(topic="B", entries=[(0, b"x", {}), (0, b"y", {"X": "v" * 40000})]))
    assert big_props.status in PROPS_REFUSED
    _assert_nothing_stored(store, "B")


def test_put_after_shutdown_is_refused(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.shutdown()
    res = store.put_message(MessageInput(topic="Late", body=b"x"))
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE
