"""Batch send bodies (docs/formats.md §4.6): entries of TOTALSIZE, MAGIC 0, BODYCRC 0, FLAG,
BODYLEN + body, PROPLEN (int16) + properties."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.batch import ENTRY_OVERHEAD, BatchEntry, encode_batch, iter_batch
from tests.protocol.golden import golden_batch_entry

ENTRIES = [
    BatchEntry(flag=0, body=b"hello", properties="UNIQ_KEY\x01A1\x02TAGS\x01TagA"),
    BatchEntry(flag=-1, body=b"", properties=""),
    BatchEntry(flag=7, body=bytes(range(256)), properties="KEYS\x01键 值"),
]


def _golden(entries: list[BatchEntry]) -> bytes:
    return b"".join(golden_batch_entry(flag=e.flag, body=e.body, props=e.properties.encode()) for e in entries)


def test_overhead_is_22() -> None:
    assert ENTRY_OVERHEAD == 22


def test_golden_bytes() -> None:
    assert encode_batch(ENTRIES) == _golden(ENTRIES)
    assert encode_batch([]) == b""


def test_totalsize_per_entry() -> None:
    body = encode_batch(ENTRIES)
    pos = 0
    for e in ENTRIES:
        total, magic, crc, flag, body_len = struct.unpack_from(">iiiii", body, pos)
        assert total == 22 + len(e.body) + len(e.properties.encode())
        assert (magic, crc, flag, body_len) == (0, 0, e.flag, len(e.body))
        pos += total
    assert pos == len(body)


def test_decode_golden() -> None:
    assert list(iter_batch(_golden(ENTRIES))) == ENTRIES
    assert list(iter_batch(memoryview(bytearray(_golden(ENTRIES))))) == ENTRIES
    assert list(iter_batch(b"")) == []


def test_magic_and_crc_from_the_client_are_ignored() -> None:
    # The broker recomputes the CRC and never checks these two fields.
    body = golden_batch_entry(flag=1, body=b"x", props=b"A\x01b", magic=-626843481, crc=12345)
    assert list(iter_batch(body)) == [BatchEntry(1, b"x", "A\x01b")]


BATCH_ENTRY = st.builds(
    BatchEntry,
    flag=st.integers(-(2**31), 2**31 - 1),
    body=st.binary(max_size=200),
    properties=st.text(max_size=60),
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(entries=st.lists(BATCH_ENTRY, max_size=6))
def test_round_trip(entries: list[BatchEntry]) -> None:
    body = encode_batch(entries)
    assert body == _golden(entries)
    assert len(body) == sum(22 + len(e.body) + len(e.properties.encode()) for e in entries)
    assert list(iter_batch(body)) == entries


# --------------------------------------------------------------------------- malformed bodies


def _collect(body: bytes | bytearray) -> list[BatchEntry]:
    return list(iter_batch(body))


def test_truncation_anywhere_but_an_entry_boundary_raises() -> None:
    body = encode_batch(ENTRIES)
    boundaries = {0}
    for e in ENTRIES:
        boundaries.add(max(boundaries) + 22 + len(e.body) + len(e.properties.encode()))
    for cut in range(len(body)):
        if cut in boundaries:
            assert _collect(body[:cut]) == ENTRIES[: sorted(boundaries).index(cut)]
        else:
            with pytest.raises(RemoteProtocolError):
                _collect(body[:cut])


def _entry(total: int | None = None, body_len: int | None = None, props_len: int | None = None) -> bytearray:
    raw = bytearray(golden_batch_entry(flag=3, body=b"body", props=b"A\x01b"))
    if total is not None:
        struct.pack_into(">i", raw, 0, total)
    if body_len is not None:
        struct.pack_into(">i", raw, 16, body_len)
    if props_len is not None:
        struct.pack_into(">h", raw, 20 + 4, props_len)
    return raw


GOOD_LEN = 22 + 4 + 3
INCONSISTENT = {
    "total below overhead": _entry(total=21),
    "total zero": _entry(total=0),
    "total negative": _entry(total=-5),
    "total beyond body": _entry(total=GOOD_LEN + 1),
    "total short of fields": _entry(total=GOOD_LEN - 1),
    "body length negative": _entry(body_len=-1),
    # -5 steps back into FLAG; with FLAG = 0 the "properties length" read there is 255 and the entry's
    # TOTALSIZE of 272 matches it, so only an explicit sign check rejects this one.
    "body length negative but lining up": bytearray(struct.pack(">iiiii", 272, 0, 0, 0, -5) + b"\x00" * (272 - 20)),
    "body length past entry": _entry(body_len=100),
    "body length one too long": _entry(body_len=5),
    "body length one too short": _entry(body_len=3),
    "props length too long": _entry(props_len=4),
    "props length too short": _entry(props_len=2),
    "props length negative": _entry(props_len=-1),
    "padding inside total": _entry(total=GOOD_LEN + 1) + b"\x00",
    "short tail after a good entry": _entry() + b"\x00" * 21,
    "good entry then garbage": _entry() + b"\xff" * 40,
}


@pytest.mark.parametrize("name", sorted(INCONSISTENT))
def test_inconsistent_entries_raise(name: str) -> None:
    assert _collect(_entry()) == [BatchEntry(3, b"body", "A\x01b")]  # the unpatched entry is fine
    with pytest.raises(RemoteProtocolError):
        _collect(INCONSISTENT[name])


def _only_protocol_errors(body: bytes | bytearray) -> None:
    with contextlib.suppress(RemoteProtocolError):
        _collect(body)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(body=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(body: bytes) -> None:
    _only_protocol_errors(body)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(entries=st.lists(BATCH_ENTRY, min_size=1, max_size=4), data=st.data())
def test_damaged_batches_never_raise_anything_else(entries: list[BatchEntry], data: st.DataObject) -> None:
    body = bytearray(encode_batch(entries))
    idx = data.draw(st.integers(0, len(body) - 1), label="index")
    body[idx] = data.draw(st.integers(0, 255), label="value")
    _only_protocol_errors(body)
    cut = data.draw(st.integers(0, len(body)), label="cut")
    _only_protocol_errors(body[:cut])
