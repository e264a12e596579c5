"""Offset message ids (docs/formats.md §4.5) and UNIQ_KEY client ids (MessageClientIDSetter layout:
ip, int16 pid, int32 per-process salt, int32 ms since the start of the month, int16 counter)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import random
import re
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.msgid import decode_offset_msg_id, offset_msg_id, uniq_id_ip
from ledgermq.util.unique_ids import UniqueIdGenerator

# --------------------------------------------------------------------------- offset message id


def test_facts_example() -> None:
    assert offset_msg_id(("127.0.0.1", 10911), 0) == "7F00000100002A9F0000000000000000"
    assert decode_offset_msg_id("7F00000100002A9F0000000000000000") == (("127.0.0.1", 10911), 0)


def test_layout_ip_port_offset() -> None:
    msg_id = offset_msg_id(("10.1.2.3", 65535), 0x0102030405060708)
    assert msg_id == "0A010203" + "0000FFFF" + "0102030405060708"
    assert decode_offset_msg_id(msg_id) == (("10.1.2.3", 65535), 0x0102030405060708)


def test_ipv6_id_is_56_hex_chars() -> None:
    msg_id = offset_msg_id(("2001:db8::1", 10911), 4096)
    assert len(msg_id) == 56
    assert msg_id == "20010DB8000000000000000000000001" + "00002A9F" + "0000000000001000"
    assert decode_offset_msg_id(msg_id) == (("2001:db8::1", 10911), 4096)


def test_ipv4_mapped_store_host_gives_an_ipv4_id() -> None:
    assert offset_msg_id(("::ffff:127.0.0.1", 10911), 0) == "7F00000100002A9F0000000000000000"


def test_lowercase_id_decodes() -> None:
    # Java's UtilAll.string2bytes upper-cases before parsing.
    assert decode_offset_msg_id("7f00000100002a9f00000000000000ff") == (("127.0.0.1", 10911), 255)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    addr=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None)),
    port=st.integers(0, 65535),
    offset=st.integers(0, 2**63 - 1),
)
def test_round_trip(addr: object, port: int, offset: int) -> None:
    msg_id = offset_msg_id((str(addr), port), offset)
    assert re.fullmatch(r"[0-9A-F]+", msg_id)
    assert len(msg_id) == (32 if ":" not in str(addr) else 56)
    assert decode_offset_msg_id(msg_id) == ((str(addr), port), offset)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "7F00000100002A9F000000000000000",  # 31 chars (odd)
        "7F00000100002A9F00000000000000",  # 30 chars
        "7F00000100002A9F000000000000000000",  # 34 chars
        "7F00000100002A9F0000000000000000" + "00" * 4,  # 40 chars, neither 32 nor 56
        "ZZ00000100002A9F0000000000000000",  # not hex
        "7F00000100002A9F000000000000000G",
        "é" * 32,
        "20010DB8000000000000000000000001" + "00002A9F" + "00000000000010",  # 54 chars
    ],
)
def test_bad_ids_raise_protocol_error(bad: str) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_offset_msg_id(bad)


@pytest.mark.parametrize(
    "bad",
    [
        "7F000001 00002A9F0000000000000000",  # 33 chars with a space
        "7F00000100002A9F0000000000000000\n",
    ],
)
def test_ids_with_whitespace_are_rejected(bad: str) -> None:
    """An offset id is exactly 32 or 56 hex characters. bytes.fromhex skips ASCII whitespace,
    so a lenient decoder would accept these; Java's decodeMessageId would fail on them."""
    with pytest.raises(RemoteProtocolError):
        decode_offset_msg_id(bad)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(text=st.one_of(st.text(max_size=60), st.text("0123456789abcdefABCDEF", max_size=60)))
def test_arbitrary_text_decodes_or_raises_protocol_error(text: str) -> None:
    try:
        (ip, port), offset = decode_offset_msg_id(text)
    except RemoteProtocolError:
        return
    assert ipaddress.ip_address(ip).packed + struct.pack(">iq", port, offset) == bytes.fromhex(text)


# --------------------------------------------------------------------------- UNIQ_KEY


def _local_ms(*args: int) -> int:
    return int(dt.datetime(*args).timestamp() * 1000)  # naive = local time, as Java's Calendar


MID_MAY = _local_ms(2024, 5, 15, 12, 30, 0)
MAY_START = _local_ms(2024, 5, 1)


def _parts(uid: str) -> tuple[str, int, int, int]:
    """(ip hex, pid, time ms, counter) of an IPv4 UNIQ_KEY."""
    pid, _salt, ms, counter = struct.unpack(">HiIH", bytes.fromhex(uid[8:]))
    return uid[:8], pid, ms, counter


def test_format_is_32_uppercase_hex() -> None:
    gen = UniqueIdGenerator(ip="10.20.30.40", pid=1234)
    for i in range(50):
        assert re.fullmatch(r"[0-9A-F]{32}", gen.next_id(MID_MAY + i))


def test_fixed_part_holds_ip_and_pid() -> None:
    gen = UniqueIdGenerator(ip="10.20.30.40", pid=1234)
    a, b = gen.next_id(MID_MAY), gen.next_id(MID_MAY + 5000)
    assert a[:8] == "0A141E28"
    assert a[8:12] == "04D2"
    assert a[:20] == b[:20]  # ip + pid + salt are fixed per generator
    assert uniq_id_ip(a) == "10.20.30.40"


def test_default_ip_is_loopback() -> None:
    assert uniq_id_ip(UniqueIdGenerator().next_id(MID_MAY)) == "127.0.0.1"


def test_pid_is_written_as_java_short() -> None:
    """Java writes (short) pid: the low 16 bits. getPidFromID reads them back as value & 0xFFFF."""
    uid = UniqueIdGenerator(ip="10.0.0.1", pid=40000).next_id(MID_MAY)
    assert uid[8:12] == "9C40"
    uid = UniqueIdGenerator(ip="10.0.0.1", pid=0x12345).next_id(MID_MAY)
    assert uid[8:12] == "2345"


def test_ipv6_uniq_key() -> None:
    uid = UniqueIdGenerator(ip="2001:db8::7", pid=1).next_id(MID_MAY)
    assert re.fullmatch(r"[0-9A-F]{56}", uid)
    assert uid.startswith("20010DB8000000000000000000000007")
    assert uniq_id_ip(uid) == "2001:db8::7"


def test_unique_across_many_calls_in_the_same_millisecond() -> None:
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    ids = [gen.next_id(MID_MAY) for _ in range(20000)]
    assert len(set(ids)) == len(ids)
    counters = [_parts(u)[3] for u in ids]
    assert all((b - a) % 65536 == 1 for a, b in itertools.pairwise(counters))


def test_two_generators_do_not_collide() -> None:
    a = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    b = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    ids_a = {a.next_id(MID_MAY) for _ in range(100)}
    ids_b = {b.next_id(MID_MAY) for _ in range(100)}
    assert not ids_a & ids_b


def test_time_part_is_ms_since_local_month_start_and_grows() -> None:
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    times = [MID_MAY, MID_MAY + 1, MID_MAY + 1000, MID_MAY + 86_400_000]
    parts = [_parts(gen.next_id(t)) for t in times]
    assert [p[2] for p in parts] == [t - MAY_START for t in times]
    assert all(x[2] < y[2] for x, y in itertools.pairwise(parts))
    time_hex = [gen.next_id(t)[20:28] for t in times]  # big-endian hex: text order is time order
    assert time_hex == sorted(set(time_hex))


def test_time_part_restarts_at_a_new_month() -> None:
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    late_may = _local_ms(2024, 5, 24, 23, 59, 59)  # still below 2**31 ms into the month
    june = _local_ms(2024, 6, 1, 0, 0, 1)
    assert _parts(gen.next_id(late_may))[2] == late_may - MAY_START
    assert _parts(gen.next_id(june))[2] == 1000
    # And again the month after, with a different month length.
    july = _local_ms(2024, 7, 2)
    assert _parts(gen.next_id(july))[2] == 86_400_000


# 2**31 ms is 24 days 20:31:23.647, so every month has a tail where the elapsed time overflows an int32.
LATE_MAY = _local_ms(2024, 5, 28, 10, 0, 0)


def test_time_part_after_2_pow_31_ms_wraps_like_java() -> None:
    """Java computes (int)(now - monthStart) and writes all 32 bits; past 2**31 ms it wraps to a
    negative int, so the field keeps changing with the clock rather than sticking."""
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    for t in (LATE_MAY, LATE_MAY + 1, LATE_MAY + 60_000, _local_ms(2024, 5, 31, 23, 59, 59)):
        assert _parts(gen.next_id(t))[2] == (t - MAY_START) & 0xFFFFFFFF


def test_unique_late_in_the_month() -> None:
    """More than 65536 ids over 65 s late in the month: the counter wraps once, so uniqueness
    needs the time part to move."""
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    ids = [gen.next_id(LATE_MAY + i) for i in range(65537)]
    dupes = len(ids) - len(set(ids))
    assert dupes == 0, f"{dupes} duplicate ids; first and last are {ids[0]} and {ids[-1]}"


def test_counter_wraps_as_an_unsigned_short() -> None:
    gen = UniqueIdGenerator(ip="10.0.0.1", pid=7)
    counters = [_parts(gen.next_id(MID_MAY))[3] for _ in range(65538)]
    assert counters[0x7FFF:0x8001] == [0x7FFF, 0x8000]
    assert counters[65535:] == [0xFFFF, 0x0000, 0x0001]


@pytest.fixture
def berlin_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run with the process time zone set to Europe/Berlin (DST switch on 2024-03-31)."""
    if not hasattr(time, "tzset"):
        pytest.skip("time.tzset is not available")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


def test_month_start_is_local_midnight_across_a_dst_change(berlin_time: None) -> None:
    """Java's Calendar puts the month start at 00:00 local time on the 1st in that day's offset.
    On 2024-03-31 (CEST, +02:00) the March start is 2024-03-01 00:00 CET (+01:00), epoch ms
    1709247600000 (checked with java.util.Calendar under TZ=Europe/Berlin)."""
    now = 1711879200000  # 2024-03-31 12:00 CEST
    assert _local_ms(2024, 3, 1) == 1709247600000  # the fixture really switched the zone
    uid = UniqueIdGenerator(ip="10.0.0.1", pid=7).next_id(now)
    assert _parts(uid)[2] == now - 1709247600000


@pytest.mark.parametrize("now", [MID_MAY, LATE_MAY, _local_ms(2024, 6, 1, 0, 0, 1)])
def test_ids_drawn_at_once_are_the_ids_drawn_one_by_one(now: int) -> None:
    """A batch's ids (``next_ids``) are what as many ``next_id`` calls return, across the
    counter's wrap past 0xFFFF and a month tail whose time part is negative as Java's int."""
    one = UniqueIdGenerator(ip="10.0.0.1", pid=7, rng=random.Random(5))
    many = UniqueIdGenerator(ip="10.0.0.1", pid=7, rng=random.Random(5))
    for count in (1, 0, 127, 65_535, 3):
        assert many.next_ids(count, now) == [one.next_id(now) for _ in range(count)]
    assert many.next_ids(2, now + 1) == [one.next_id(now + 1), one.next_id(now + 1)]
