"""The DLedgerEntry codec against bytes laid out by hand from DLedgerEntryCoder.encode."""

from __future__ import annotations

import struct
import zlib

import pytest

from ledgermq.store.dledger import entry as E

# index=7, term=3, pos=1024, body=b"hello", as DLedgerEntryCoder.encode lays it out:
# magic, size, index, term, pos, channel, chainCrc, bodyCrc, body length, body.
GOLDEN_ENTRY = bytes.fromhex(
    "00000001"  # magic: MAGIC_1
    "00000035"  # size: 48 + 5 = 53
    "0000000000000007"  # index
    "0000000000000003"  # term
    "0000000000000400"  # pos
    "00000000"  # channel (reserved)
    "00000000"  # chainCrc (never filled by DLedger)
    "3610a686"  # bodyCrc: crc32(b"hello") & 0x7FFFFFFF (ours; DLedger leaves 0)
    "00000005"  # body length
    "68656c6c6f"  # body
)
# DLedgerEntryCoder.encodeIndex(pos=1024, size=53, magic=1, index=7, term=3)
GOLDEN_UNIT = bytes.fromhex("0000000100000000000004000000003500000000000000070000000000000003")


def test_constants_match_dledger() -> None:
    assert (E.POS_OFFSET, E.HEADER_SIZE, E.BODY_OFFSET, E.INDEX_UNIT_SIZE) == (24, 44, 48, 32)
    assert (E.ENTRY_MAGIC, E.BLANK_MAGIC, E.MIN_BLANK_LEN) == (1, -1, 8)


def test_golden_entry_bytes() -> None:
    assert E.encode_entry(7, 3, 1024, b"hello") == GOLDEN_ENTRY
    buf = bytearray(100)
    E.pack_entry_head(buf, 10, 7, 3, 1024, b"hello")
    assert bytes(buf[10:58]) == GOLDEN_ENTRY[:48]


def test_golden_index_unit_and_blank() -> None:
    unit = bytearray(32)
    E.pack_index_unit(unit, 0, 1024, 53, 7, 3)
    assert bytes(unit) == GOLDEN_UNIT
    assert E.blank_head(4000) == bytes.fromhex("ffffffff") + struct.pack(">i", 4000)


def test_check_entry_round_trip_and_fields() -> None:
    buf = bytearray(2048)
    buf[1024 : 1024 + len(GOLDEN_ENTRY)] = GOLDEN_ENTRY
    v = E.check_entry(buf, 1024, len(buf), 1024)
    assert v == E.EntryInfo(index=7, term=3, pos=1024, size=53)
    assert isinstance(v, E.EntryInfo)
    assert (v.body_pos, v.body_size, v.end) == (1072, 5, 1077)
    assert bytes(buf[v.body_pos : v.body_pos + v.body_size]) == b"hello"


def test_set_pos_rewrites_the_pos_field() -> None:
    buf = bytearray(E.encode_entry(7, 3, 0, b"hello"))
    E.set_pos(buf, 0, 1024)
    assert bytes(buf) == GOLDEN_ENTRY


def _verdict(buf: bytes | bytearray, at: int = 0, expected: int = 1024, **kw: object) -> E.EntryInfo | E.Verdict:
    return E.check_entry(buf, at, len(buf), expected, **kw)  # type: ignore[arg-type]


def test_end_of_data_and_blank() -> None:
    assert _verdict(bytes(64)) == E.END_OF_DATA
    assert _verdict(bytes(7)) == E.END_OF_DATA  # fewer than a blank's 8 bytes left
    blank = E.blank_head(64) + bytes(56)
    v = _verdict(blank)
    assert isinstance(v, E.Verdict) and v.kind is E.VerdictKind.BLANK and v.size == 64
    short = _verdict(E.blank_head(60) + bytes(56))  # a blank must run to the file end
    assert isinstance(short, E.Verdict) and short.kind is E.VerdictKind.CORRUPT


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.__setitem__(slice(0, 4), b"\x00\x00\x00\x02"), "bad magic"),
        (lambda b: b.__setitem__(slice(4, 8), struct.pack(">i", 47)), "does not fit"),
        (lambda b: b.__setitem__(slice(44, 48), struct.pack(">i", 4)), "body length"),
        (lambda b: b.__setitem__(slice(24, 32), struct.pack(">q", 2048)), "claims pos"),
        (lambda b: b.__setitem__(slice(48, 53), b"hellO"), "CRC"),
        (lambda b: b.__setitem__(slice(48, 53), bytes(5)), "CRC"),  # a zero-filled (torn) body
        (lambda b: b.__setitem__(slice(8, 16), struct.pack(">q", -1)), "negative"),
    ],
)
def test_corrupt_entries_are_rejected_with_a_reason(mutate: object, reason: str) -> None:
    buf = bytearray(GOLDEN_ENTRY + bytes(64))
    mutate(buf)  # type: ignore[operator]
    v = _verdict(buf)
    assert isinstance(v, E.Verdict) and v.kind is E.VerdictKind.CORRUPT, v
    assert reason in v.reason


def test_entry_must_leave_room_for_a_blank() -> None:
    exact = GOLDEN_ENTRY + bytes(7)  # 53 + 7 < 53 + 8: DLedger would have rolled
    v = _verdict(exact)
    assert isinstance(v, E.Verdict) and v.kind is E.VerdictKind.CORRUPT
    assert isinstance(_verdict(GOLDEN_ENTRY + bytes(8)), E.EntryInfo)


def test_incomplete_when_capacity_says_more_will_come() -> None:
    v = E.check_entry(GOLDEN_ENTRY[:30], 0, 30, 1024, capacity=4096)
    assert v == E.INCOMPLETE


def test_zero_body_crc_is_not_checked_as_dledger_never_writes_one() -> None:
    java = bytearray(GOLDEN_ENTRY + bytes(8))
    java[40:44] = bytes(4)
    java[48:53] = b"HELLO"
    assert isinstance(_verdict(java), E.EntryInfo)
    assert isinstance(_verdict(GOLDEN_ENTRY + bytes(8), check_crc=False), E.EntryInfo)


def test_body_crc_convention() -> None:
    assert E.body_crc(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF == 0x3610A686
