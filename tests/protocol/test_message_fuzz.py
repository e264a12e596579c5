"""Robustness of the record decoder: on any input, decode_record / decode_records either return
records or raise RemoteProtocolError. Never struct.error, IndexError, UnicodeError, zlib.error...

All hypothesis runs are derandomized so a failure reproduces on every run.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MessageRecord, decode_record, decode_records, encode_record
from tests.protocol.golden import IP_127_0_0_1, MAGIC_BYTES, golden_record

FUZZ = settings(max_examples=300, derandomize=True, deadline=None)  # cheap inputs
FUZZ_RECORDS = settings(max_examples=120, derandomize=True, deadline=None)  # each builds records

FLAGS = st.tuples(st.booleans(), st.booleans())  # (check_crc, inflate)


def _ok_or_protocol_error(fn: Callable[[], object]) -> object | None:
    """Run fn; RemoteProtocolError is an accepted outcome, any other exception fails the test."""
    try:
        return fn()
    except RemoteProtocolError:
        return None


def _both(buf: bytes | bytearray | memoryview, check_crc: bool, inflate: bool) -> None:
    _ok_or_protocol_error(lambda: decode_record(buf, check_crc=check_crc, inflate=inflate))
    _ok_or_protocol_error(lambda: decode_records(buf, check_crc=check_crc, inflate=inflate))


# --------------------------------------------------------------------------- arbitrary bytes


@FUZZ
@given(buf=st.binary(max_size=400), flags=FLAGS)
def test_arbitrary_bytes(buf: bytes, flags: tuple[bool, bool]) -> None:
    _both(buf, *flags)


@FUZZ
@given(
    rest=st.binary(min_size=0, max_size=300),
    size_delta=st.integers(-100, 8),
    sysflag=st.integers(-(2**31), 2**31 - 1),
    flags=FLAGS,
)
def test_bytes_behind_a_plausible_header(rest: bytes, size_delta: int, sysflag: int, flags: tuple[bool, bool]) -> None:
    """Arbitrary content after a valid magic and a roughly right TOTALSIZE, so the decoder gets
    past its first checks and into the variable-length fields."""
    buf = bytearray(struct.pack(">i", 8 + len(rest) + size_delta) + MAGIC_BYTES + rest)
    if len(buf) >= 40:
        struct.pack_into(">i", buf, 36, sysflag)
    _both(buf, *flags)
    _both(memoryview(bytes(buf)), *flags)


# --------------------------------------------------------------------------- valid records, damaged

ADDR = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None)).map(str)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    compressed = draw(st.booleans())
    plain = draw(st.binary(max_size=120))
    sysflag = draw(st.sampled_from([0, SF.MULTI_TAGS, SF.TRANSACTION_PREPARED_TYPE, SF.COMPRESSION_ZLIB]))
    if compressed:
        sysflag |= SF.COMPRESSED
    return bytes(
        encode_record(
            topic=draw(st.text(min_size=1, max_size=20)),
            body=zlib.compress(plain) if compressed else plain,
            properties=draw(st.text(alphabet="\x01\x02KEYSTAG é漢", max_size=40)),
            sysflag=sysflag,
            queue_id=draw(st.integers(0, 64)),
            born_host=(draw(ADDR), draw(st.integers(0, 65535))),
            store_host=(draw(ADDR), draw(st.integers(0, 65535))),
            born_timestamp=draw(st.integers(0, 2**45)),
            physical_offset=draw(st.integers(0, 2**40)),
        )
    )


@FUZZ_RECORDS
@given(rec=records(), data=st.data(), flags=FLAGS)
def test_truncated_record_always_raises(rec: bytes, data: st.DataObject, flags: tuple[bool, bool]) -> None:
    assert isinstance(decode_record(rec, check_crc=True, inflate=True), MessageRecord)
    cut = data.draw(st.integers(0, len(rec) - 1), label="cut")
    with pytest.raises(RemoteProtocolError):
        decode_record(rec[:cut], check_crc=flags[0], inflate=flags[1])
    with pytest.raises(RemoteProtocolError):
        decode_records(rec[:cut] if cut else b"\x00", check_crc=flags[0], inflate=flags[1])


@FUZZ_RECORDS
@given(first=records(), second=records(), data=st.data())
def test_truncated_pull_body(first: bytes, second: bytes, data: st.DataObject) -> None:
    """A pull body cut anywhere yields all whole records when cut on a boundary, else an error."""
    body = first + second
    cut = data.draw(st.integers(0, len(body)), label="cut")
    if cut in (0, len(first), len(body)):
        got = decode_records(body[:cut])
        assert [r.store_size for r in got] == [len(first), len(second)][: len(got)]
        assert sum(r.store_size for r in got) == cut
    else:
        with pytest.raises(RemoteProtocolError):
            decode_records(body[:cut])


@FUZZ_RECORDS
@given(rec=records(), data=st.data(), flags=FLAGS)
def test_one_flipped_byte(rec: bytes, data: st.DataObject, flags: tuple[bool, bool]) -> None:
    buf = bytearray(rec)
    idx = data.draw(st.integers(0, len(buf) - 1), label="index")
    buf[idx] ^= data.draw(st.integers(1, 255), label="xor")
    _both(buf, *flags)


@FUZZ_RECORDS
@given(first=records(), second=records(), data=st.data(), flags=FLAGS)
def test_flipped_byte_in_a_pull_body(
    first: bytes, second: bytes, data: st.DataObject, flags: tuple[bool, bool]
) -> None:
    buf = bytearray(first + second)
    idx = data.draw(st.integers(0, len(buf) - 1), label="index")
    buf[idx] = data.draw(st.integers(0, 255), label="value")
    _ok_or_protocol_error(lambda: decode_records(buf, check_crc=flags[0], inflate=flags[1]))


@FUZZ_RECORDS
@given(rec=records(), data=st.data(), flags=FLAGS)
def test_random_garbage_overwrite(rec: bytes, data: st.DataObject, flags: tuple[bool, bool]) -> None:
    """A run of random bytes written over part of a valid record (a torn or garbled write)."""
    buf = bytearray(rec)
    start = data.draw(st.integers(0, len(buf) - 1), label="start")
    junk = data.draw(st.binary(min_size=1, max_size=len(buf) - start), label="junk")
    buf[start : start + len(junk)] = junk
    _both(buf, *flags)


# --------------------------------------------------------------------------- guaranteed detections


def _bit_flips(rec: bytes, positions: range) -> list[bytearray]:
    out = []
    for i in positions:
        for bit in range(8):
            b = bytearray(rec)
            b[i] ^= 1 << bit
            out.append(b)
    return out


BASE = golden_record(
    topic=b"TopicTest",
    body=bytes(range(64)),
    props=b"TAGS\x01TagA",
    queue_id=0,
    flag=0,
    queue_offset=0,
    physical_offset=0,
    sysflag=0,
    born_timestamp=0,
    born_ip=IP_127_0_0_1,
    born_port=0,
    store_timestamp=0,
    store_ip=IP_127_0_0_1,
    store_port=0,
    reconsume_times=0,
    prepared_offset=0,
)


def test_every_single_bit_error_in_the_body_fails_the_crc() -> None:
    for buf in _bit_flips(BASE, range(88, 88 + 64)):
        with pytest.raises(RemoteProtocolError):
            decode_record(buf)
        assert decode_record(buf, check_crc=False).body != bytes(range(64))


def test_every_single_bit_error_in_size_or_magic_is_detected() -> None:
    for buf in _bit_flips(BASE, range(0, 8)):
        with pytest.raises(RemoteProtocolError):
            decode_record(buf, check_crc=False)
        with pytest.raises(RemoteProtocolError):
            decode_records(buf, check_crc=False)
