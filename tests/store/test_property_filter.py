"""The store's property-filter path: a record's properties read without its body (both the
one-read and the two-read ways, IPv4 and IPv6 hosts), and pulls that skip what does not
match while the next offset moves on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledgermq.errors import RemoteProtocolError
from ledgermq.filter import compile_expression
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record, record_properties_text
from ledgermq.store.message_filter import PropertyFilter
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus

SIZES = [0, 1, 100, 1900, 2047, 2048, 2100, 5000, 40_000]


@pytest.mark.parametrize("v6", [False, True])
def test_properties_at_reads_what_decode_record_reads(store_factory: Callable[..., MessageStore], v6: bool) -> None:
    store = store_factory(mapped_file_size_commitlog=1024 * 1024)
    host = ("::1", 4000) if v6 else ("127.0.0.1", 4000)
    for n, size in enumerate(SIZES):
        props = {"n": str(n), "TAGS": "t", "text": "äöü ✓" * (n + 1)}
        store.put_message(MessageInput("P", bytes([n]) * size, born_host=host, store_host=host, properties=props))
    assert store.wait_dispatched(None, 5.0)
    result = store.get_message("P", 0, 0, 64)
    records = result.messages
    assert len(records) == len(SIZES)
    for rec_bytes in records:
        rec = decode_record(rec_bytes)
        text = store.commitlog.properties_at(rec.physical_offset, rec.store_size)
        assert text is not None and P.decode_properties(text) == rec.properties
        assert record_properties_text(rec_bytes) == text
    assert store.commitlog.properties_at(10**12, 100) is None  # nothing there


def test_a_record_whose_fields_do_not_add_up_is_refused(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory()
    store.put_message(MessageInput("P", b"x" * 10, properties={"a": "1"}))
    assert store.wait_dispatched(None, 5.0)
    [record] = store.get_message("P", 0, 0, 1).messages
    assert record_properties_text(record) == "a\x011"
    for bad in (record[:-1], record + b"\x00"):
        with pytest.raises(RemoteProtocolError):
            record_properties_text(bad)
    rec = decode_record(record)
    with pytest.raises(RemoteProtocolError):  # the consume queue's size disagrees with the record
        store.commitlog.properties_at(rec.physical_offset, rec.store_size - 1)


def test_pulls_skip_non_matching_records_and_move_on(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory()
    for n in range(50):
        props = {"a": str(n), "TAGS": "even" if n % 2 == 0 else "odd"}
        store.put_message(MessageInput("F", b"b" * (3000 if n % 7 == 0 else 10), properties=props))
    assert store.wait_dispatched(None, 5.0)
    expr = compile_expression("a >= 10 AND a < 20 AND TAGS = 'odd'")
    for flt in (PropertyFilter(expr.matches, expr.names), PropertyFilter(expr.matches)):
        got: list[int] = []
        offset = 0
        while offset < 50:
            result = store.get_message("F", 0, offset, 3, flt)
            assert result.next_begin_offset > offset
            if result.status is GetStatus.FOUND:
                got += [decode_record(r).queue_offset for r in result.messages]
            else:
                assert result.status is GetStatus.NO_MATCHED_MESSAGE and not result.messages
            offset = result.next_begin_offset
        assert got == [11, 13, 15, 17, 19]
    none = store.get_message("F", 0, 0, 32, PropertyFilter(compile_expression("a = 'x'").matches))
    assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 50)


def test_looking_up_only_the_named_properties_agrees_with_the_whole_map() -> None:
    texts = [
        "a\x011\x02b\x012",
        "a\x011\x02a\x013",  # a repeated key: the last wins in both
        "b\x01x\x02a\x01\x02c\x019",  # an empty value is no value
        "TAGS\x01t\x02KEYS\x01k1 k2\x02",  # C++'s trailing separator
        "",
    ]
    expr = compile_expression("a = 3 OR (b = 'x' AND a IS NULL) OR KEYS = 'k1 k2'")
    named = PropertyFilter(expr.matches, expr.names)
    whole = PropertyFilter(expr.matches)
    assert expr.names == {"a", "b", "KEYS"}
    results = [named.matches_properties(t) for t in texts]
    assert results == [whole.matches_properties(t) for t in texts]
    assert results == [False, True, True, True, False]
