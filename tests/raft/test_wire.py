"""The raft wire codec: hypothesis round trips, strictness on hand-made damage, fuzzing.

Garbage of any shape must only ever raise RemoteProtocolError (a peer's bytes must not
crash the transport's processor with anything else), and every valid batch must decode
to exactly the messages encoded.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.errors import LocalProtocolError, RemoteProtocolError
from ledgermq.raft.types import Entry, EntryKind, Message, MsgType
from ledgermq.raft.wire import decode_batch, encode_batch, encode_batches, encoded_size

U64 = st.integers(min_value=0, max_value=(1 << 63) - 1)
IDS = st.text(min_size=1, max_size=12).filter(lambda s: 0 < len(s.encode()) < 256)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    mtype = draw(st.sampled_from(list(MsgType)))
    index, log_term = draw(U64), draw(st.integers(min_value=0, max_value=1 << 40))
    entries: tuple[Entry, ...] = ()
    if mtype is MsgType.APPEND and index < (1 << 62):
        n = draw(st.integers(min_value=0, max_value=5))
        terms = sorted(draw(st.lists(st.integers(min_value=log_term, max_value=(1 << 40) + 5), min_size=n, max_size=n)))
        entries = tuple(
            Entry(index + 1 + i, t, draw(st.binary(max_size=40)), draw(st.sampled_from(list(EntryKind))))
            for i, t in enumerate(terms)
        )
    return Message(
        mtype,
        draw(IDS),
        draw(IDS),
        draw(U64),
        log_term=log_term,
        index=index,
        entries=entries,
        commit=draw(U64),
        reject=draw(st.booleans()),
        reject_hint=draw(U64),
        transfer=draw(st.booleans()),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), max_size=6))
def test_round_trip(batch: list[Message]) -> None:
    raw = encode_batch(batch)
    assert decode_batch(raw) == batch
    assert decode_batch(bytearray(raw)) == batch
    assert len(raw) == 8 + sum(encoded_size(m) for m in batch)


@settings(max_examples=100)
@given(st.lists(messages(), min_size=1, max_size=8), st.integers(min_value=200, max_value=600))
def test_split_batches_keep_order_and_cap(batch: list[Message], cap: int) -> None:
    small = [m for m in batch if 8 + encoded_size(m) <= cap]
    frames = encode_batches(small, cap)
    assert all(len(f) <= cap for f in frames)
    assert [m for f in frames for m in decode_batch(f, cap)] == small


def test_decoded_entry_data_are_memoryview_slices_of_the_input() -> None:
    m = Message(MsgType.APPEND, "n0", "n1", 3, log_term=2, index=4, entries=(Entry(5, 3, b"abc"), Entry(6, 3)))
    raw = encode_batch([m])
    (got,) = decode_batch(raw)
    data = got.entries[0].data
    assert isinstance(data, memoryview) and data.readonly and data.obj is raw
    assert got.entries[0] == Entry(5, 3, b"abc") and hash(got.entries[0]) == hash(Entry(5, 3, b"abc"))


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_garbage_only_raises_remote_protocol_error(raw: bytes) -> None:
    try:
        decode_batch(raw)
    except RemoteProtocolError:
        pass


@settings(max_examples=300)
@given(st.lists(messages(), min_size=1, max_size=4), st.data())
def test_mutated_batches_decode_or_raise_remote_protocol_error(batch: list[Message], data: st.DataObject) -> None:
    raw = bytearray(encode_batch(batch))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[pos] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    try:
        decode_batch(bytes(raw[:cut]))
    except RemoteProtocolError:
        pass


def _append(**kw: object) -> bytes:
    m = Message(MsgType.APPEND, "n0", "n1", 2, log_term=1, index=1, entries=(Entry(2, 2, b"x"),))
    return encode_batch([m])


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b[:-1], "cut short"),
        (lambda b: b + b"\0", "trailing"),
        (lambda b: b"\0\0" + b[2:], "magic"),
        (lambda b: b[:2] + b"\x02" + b[3:], "version"),
        (lambda b: b[:4] + struct.pack(">I", 1 << 30) + b[8:], "cannot fit"),
        (lambda b: b[:8] + b"\x63" + b[9:], "unknown message type"),
        (lambda b: b[:9] + b"\x80" + b[10:], "unknown flags"),
        (lambda b: b[:10] + b"\x00" + b[11:], "empty source"),
        (lambda b: b[:56] + b"\xff" + b[57:], "not UTF-8"),
        (lambda b: b[:8] + b"\x03" + b[9:], "carries 1 entries"),
        (lambda b: b[:60] + struct.pack(">Q", 7) + b[68:], "does not follow"),
        (lambda b: b[:76] + b"\x09" + b[77:], "unknown entry kind"),
    ],
)
def test_strict_decoding_names_the_problem(mutate: object, reason: str) -> None:
    raw = _append()
    with pytest.raises(RemoteProtocolError, match=reason):
        decode_batch(mutate(raw))  # type: ignore[operator]


def test_size_caps() -> None:
    big = Message(MsgType.APPEND, "n0", "n1", 1, entries=(Entry(1, 1, b"x" * 1000),))
    with pytest.raises(LocalProtocolError):
        encode_batch([big], max_bytes=500)
    with pytest.raises(LocalProtocolError):
        encode_batches([big], max_bytes=500)
    with pytest.raises(RemoteProtocolError, match="cap"):
        decode_batch(encode_batch([big]), max_bytes=500)
    with pytest.raises(LocalProtocolError):
        encode_batch([Message(MsgType.VOTE, "n" * 300, "n1", 1)])
    with pytest.raises(LocalProtocolError):
        encode_batch([Message(MsgType.VOTE, "n0", "n1", -1)])
