"""The C path of the reput's record scan (ledgermq/_recordc.c, ``record_scan.scan_records``)
against the Python loop it stands in for (``record_scan._python_scan_records``).

``scan_records`` lets C read the leading run of records and the Python loop go on from
where C stopped, so its answer must be the Python loop's for any bytes: the same rows
(the same values of the same types: bytes, not bytearray; a str topic) and the same end,
or the same error. Where the buffer holds everything the scan may read, C alone must give
that answer (it stops early only where the buffer ends before the scan's limit). Random
runs come from hypothesis: records of both host families, properties with and without
TAGS, KEYS and UNIQ_KEY, repeated keys, keys inside values, empty values, text that is not
UTF-8, the timer and delay topics; then damaged (cut short, a field overwritten, bytes
flipped), read as bytes and through an mmap, from any position, limit, capacity and count.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import speedups
from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.store import record_scan
from ledgermq.store.dispatch import SCHEDULE_TOPIC, TIMER_TOPIC
from ledgermq.store.record_scan import _python_scan_records, scan_records
from tests.store.test_batch_records_c import PURE, needs_c

LEVELS = [1000 * (i + 1) for i in range(18)]
HOSTS_V4 = [("127.0.0.1", 10911), ("10.1.2.3", 0)]
HOSTS_V6 = [("::1", 10911), ("fe80::1:2", 65535)]
_SIZE = struct.Struct(">i")
_SHORT = struct.Struct(">h")

KEY_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "TIMER_OUT_MS", "XTAGS", "UNIQ_KEYS", "a", "TAGSKEYS"]
_text_values = st.one_of(
    st.sampled_from(["", "TagA", "k1 k2", "3", "0", "-5", "17", "1700000000000", "\u0663", "\xe9t\xe9", "\U0001f600"]),
    st.text(max_size=12),
)
_raw_values = st.one_of(
    _text_values.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=10),
    st.sampled_from([b"\xff\xfe", b"\xe2\x82", b"TAGS\x01t", b"\x01", b"UNIQ_KEY\x01u"]),
)


@st.composite
def raw_properties(draw: st.DrawFn) -> bytes:
    """A stored properties text as bytes: pairs of the names the scan reads and others,
    repeated or empty, or bytes of any kind."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=80))
    pairs = draw(
        st.lists(
            st.tuples(st.one_of(st.sampled_from(KEY_NAMES), st.text(max_size=5)), _raw_values, st.booleans()),
            max_size=7,
        )
    )
    parts = []
    for key, value, with_sep in pairs:
        name = key.encode("utf-8", "surrogatepass")
        parts.append(name + b"\x01" + value if with_sep else name + value)
    return b"\x02".join(parts)


_topics = st.one_of(
    st.sampled_from([b"T", b"TopicTest", TIMER_TOPIC.encode(), SCHEDULE_TOPIC.encode(), b"T\xc3\xa9", b"\xff\xfeT"]),
    st.text(min_size=1, max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(min_size=1, max_size=255),
)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    born_v6, store_v6 = draw(st.booleans()), draw(st.booleans())
    return {
        "topic": draw(_topics),
        "props": draw(raw_properties()),
        "body": draw(st.binary(max_size=40)),
        "queue_id": draw(st.integers(-(2**31), 2**31 - 1)),
        "flag": draw(st.integers(-(2**31), 2**31 - 1)),
        "sysflag": draw(st.sampled_from([0, SF.MULTI_TAGS, SF.TRANSACTION_PREPARED_TYPE, 0x7FFF_FF00])),
        "born_host": draw(st.sampled_from(HOSTS_V6 if born_v6 else HOSTS_V4)),
        "store_host": draw(st.sampled_from(HOSTS_V6 if store_v6 else HOSTS_V4)),
        "queue_offset": draw(st.integers(-(2**63), 2**63 - 1)),
        "store_timestamp": draw(st.integers(-(2**63), 2**63 - 1)),
        "born_timestamp": draw(st.integers(0, 2**63 - 1)),
        "prepared_transaction_offset": draw(st.integers(-(2**63), 2**63 - 1)),
        "reconsume_times": draw(st.integers(0, 16)),
    }


def record_bytes(rec: dict[str, Any], phys: int) -> bytes:
    """``encode_record``'s record for ``rec`` at ``phys``, with its topic and properties
    bytes put in as they are (not UTF-8, a topic of up to 255 bytes)."""
    fields = {k: v for k, v in rec.items() if k not in ("topic", "props")}
    data = M.encode_record(topic="t", properties="", physical_offset=phys, **fields)
    topic, props = rec["topic"], rec["props"]
    head_and_body = bytes(data[: len(data) - 4])  # less the topic "t" and the empty properties
    out = head_and_body + bytes([len(topic)]) + topic + _SHORT.pack(len(props)) + props
    return _SIZE.pack(len(out)) + out[4:]


def run_bytes(recs: list[dict[str, Any]], base: int) -> tuple[bytes, list[int]]:
    """The records one after another from commit-log offset ``base``, and where each starts."""
    out = bytearray()
    starts = []
    for rec in recs:
        starts.append(len(out))
        phys = (base + len(out) + 2**63) % 2**64 - 2**63  # past 2**63: the Java long it wraps to
        out += record_bytes(rec, phys)
    return bytes(out), starts


# What a field is overwritten with: (offset in the record, struct format, value).
DAMAGE = st.one_of(
    st.tuples(st.just(4), st.just(">i"), st.sampled_from([M.BLANK_MAGIC_CODE, 0, M.MESSAGE_MAGIC_CODE + 1])),
    st.tuples(st.just(0), st.just(">i"), st.integers(-(2**31), 2**31 - 1) | st.integers(0, 300)),
    st.tuples(st.just(28), st.just(">q"), st.integers(-(2**63), 2**63 - 1)),  # phys
    st.tuples(st.just(36), st.just(">i"), st.sampled_from([0, SF.BORNHOST_V6, SF.STOREHOST_V6, 0x30, -1])),
    st.tuples(st.integers(84, 120), st.just(">i"), st.integers(-(2**31), 2**31 - 1) | st.integers(-3, 300)),
    st.tuples(st.integers(0, 400), st.just(">B"), st.integers(0, 255)),  # topic length, any byte
    st.tuples(st.integers(0, 400), st.just(">h"), st.integers(-(2**15), 2**15 - 1) | st.integers(-2, 200)),
)


def damaged(data: bytes, starts: list[int], hits: list[tuple[int, tuple[int, str, int]]]) -> bytes:
    buf = bytearray(data)
    for which, (offset, fmt, value) in hits:
        if not starts:
            break
        at = starts[which % len(starts)] + offset
        size = struct.calcsize(fmt)
        if at + size <= len(buf):
            struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


def outcome(scan: Callable[..., tuple[list[Any], int]], *args: Any) -> tuple[str, Any]:
    """A scan's answer as comparable text: the rows' repr shows each value's type."""
    try:
        rows, end = scan(*args)
    except Exception as exc:
        return "raised", (type(exc), str(exc))
    return "read", (repr(rows), repr(end), rows, end)


@contextmanager
def mapped(data: bytes) -> Iterator[mmap.mmap]:
    mm = mmap.mmap(-1, max(len(data), 1))
    mm[: len(data)] = data
    try:
        yield mm
    finally:
        mm.close()


def check_both(
    buf: bytes | mmap.mmap, pos: int, limit: int, base: int, capacity: int, count: int, levels: list[int]
) -> None:
    args = (buf, pos, limit, base, capacity, count, levels)
    expected = outcome(_python_scan_records, *args)
    assert outcome(scan_records, *args) == expected
    c = speedups.recordc
    if c is None:
        return
    # Where the buffer holds all the scan may read, C alone gives the whole answer.
    if pos >= 0 and min(limit, capacity) <= len(buf) and expected[0] == "read":
        got = outcome(c.scan_records, *args, record_scan._SPECIAL_TOPICS, record_scan._special_tags_code)
        assert got == expected


# -- sound runs ----------------------------------------------------------------------------
@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(records(), min_size=1, max_size=8),
    base=st.integers(0, 2**62),
    as_mmap=st.booleans(),
    levels=st.sampled_from([LEVELS, [], [5]]),
)
def test_sound_runs_read_the_same(recs: list[dict[str, Any]], base: int, as_mmap: bool, levels: list[int]) -> None:
    data, _starts = run_bytes(recs, base)
    if as_mmap:
        with mapped(data) as mm:
            check_both(mm, 0, len(data), base, len(data), 100, levels)
    else:
        check_both(data, 0, len(data), base, len(data), 100, levels)
    rows, end = scan_records(data, 0, len(data), base, len(data), 100, levels)
    assert len(rows) == len(recs) and end == len(data)


@needs_c
@settings(max_examples=150, deadline=None, derandomize=True)
@given(recs=st.lists(records(), min_size=1, max_size=6), base=st.integers(0, 2**40))
def test_c_reads_every_sound_record_itself(recs: list[dict[str, Any]], base: int) -> None:
    """Not by handing the whole run to the Python loop: C's own answer is all of it."""
    data, _starts = run_bytes(recs, base)
    c = speedups.recordc
    assert c is not None
    rows, end = c.scan_records(
        data, 0, len(data), base, len(data), 100, LEVELS, record_scan._SPECIAL_TOPICS, record_scan._special_tags_code
    )
    assert repr((rows, end)) == repr(_python_scan_records(data, 0, len(data), base, len(data), 100, LEVELS))
    assert len(rows) == len(recs) and end == len(data)


# -- damaged runs, any window --------------------------------------------------------------
@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(records(), min_size=1, max_size=6),
    hits=st.lists(st.tuples(st.integers(0, 5), DAMAGE), max_size=3),
    flips=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 255)), max_size=3),
    cut=st.none() | st.integers(0, 3000),
    start=st.integers(0, 6),
    odd_pos=st.none() | st.integers(0, 3000),
    limit_delta=st.integers(-200, 200),
    capacity_delta=st.integers(-200, 200),
    count=st.integers(-1, 8),
    base=st.sampled_from([0, 4096, 2**40, 2**63 - 100]),
    as_mmap=st.booleans(),
)
def test_damaged_runs_read_the_same(
    recs: list[dict[str, Any]],
    hits: list[tuple[int, tuple[int, str, int]]],
    flips: list[tuple[int, int]],
    cut: int | None,
    start: int,
    odd_pos: int | None,
    limit_delta: int,
    capacity_delta: int,
    count: int,
    base: int,
    as_mmap: bool,
) -> None:
    data, starts = run_bytes(recs, base)
    buf = bytearray(damaged(data, starts, hits))
    for at, value in flips:
        if at < len(buf):
            buf[at] = value
    if cut is not None:
        del buf[cut:]
    raw = bytes(buf)
    pos = odd_pos if odd_pos is not None else ([*starts, len(data)][min(start, len(starts))])
    limit = max(0, len(raw) + limit_delta)  # past the buffer's end too: the Python loop's errors
    capacity = max(0, len(raw) + capacity_delta)
    if as_mmap and raw:
        with mapped(raw) as mm:
            check_both(mm, pos, limit, base, capacity, count, LEVELS)
    else:
        check_both(raw, pos, limit, base, capacity, count, LEVELS)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    recs=st.lists(records(), min_size=1, max_size=4),
    pos=st.integers(-(2**64), 2**64),
    limit=st.integers(-(2**64), 2**64),
    base=st.integers(-(2**64), 2**64),
    count=st.integers(-(2**64), 2**64),
)
def test_arguments_out_of_range_read_the_same(
    recs: list[dict[str, Any]], pos: int, limit: int, base: int, count: int
) -> None:
    data, _starts = run_bytes(recs, 0)
    check_both(data, pos, limit, base, limit, count, LEVELS)
    check_both(data, 0, len(data), base, len(data), count, LEVELS)
    check_both(data, 0, limit, 0, len(data), 100, LEVELS)


# -- particular cases ----------------------------------------------------------------------
def _one(topic: bytes, props: bytes, phys: int = 0, sysflag: int = 0) -> bytes:
    fields = {
        "topic": topic,
        "props": props,
        "body": b"body",
        "queue_id": 3,
        "flag": 0,
        "sysflag": sysflag,
        "born_host": HOSTS_V4[0],
        "store_host": HOSTS_V4[0],
        "queue_offset": 7,
        "store_timestamp": 1_700_000_000_000,
        "born_timestamp": 1_700_000_000_000,
        "prepared_transaction_offset": 0,
        "reconsume_times": 0,
    }
    return record_bytes(fields, phys)


@pytest.mark.parametrize(
    "props",
    [
        b"TAGS\x01\xff\xfe\x02UNIQ_KEY\x01\xe2\x82\x02KEYS\x01a \xc3 b",
        b"TAGS\x01a\x02TAGS\x01\x02UNIQ_KEY\x01u1\x02UNIQ_KEY\x01",
        b"XTAGS\x01no\x02KEYS\x01k\x00 k2\x02A\x01UNIQ_KEY\x01x",
        b"TAGS\x01",
        b"\x02\x02TAGS\x01t\x01t\x02",
        b"KEYS\x01  \x02KEYS\x01",
        b"TAGS\x01\xf0\x9f\x98\x80",  # outside the BMP: two UTF-16 units in the hash
        b"TIMER_OUT_MS\x01-12\x02DELAY\x012\x02TAGS\x01x",
        b"DELAY\x01\xd9\xa3",  # an Arabic-Indic 3: str.isdigit
        b"",
    ],
)
@pytest.mark.parametrize("topic", [b"T", TIMER_TOPIC.encode(), SCHEDULE_TOPIC.encode(), b"\xff" * 255])
def test_raw_properties_read_the_same(props: bytes, topic: bytes) -> None:
    data = _one(topic, props)
    for levels in (LEVELS, []):
        check_both(data, 0, len(data), 0, len(data), 10, levels)
        with mapped(data) as mm:
            check_both(mm, 0, len(data), 0, len(data), 10, levels)


def test_other_buffers_take_the_python_loop() -> None:
    """A bytearray's or a memoryview's slices are not bytes: the Python loop reads them, as before."""
    data = _one(b"T", b"TAGS\x01a\x02KEYS\x01k")
    for buf in (bytearray(data), memoryview(data)):
        assert outcome(scan_records, buf, 0, len(data), 0, len(data), 10, LEVELS) == outcome(
            _python_scan_records, buf, 0, len(data), 0, len(data), 10, LEVELS
        )


def test_an_error_of_the_special_tag_code_is_raised_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> int:
        raise ValueError(f"no tag code for {args[0]}")

    monkeypatch.setattr(record_scan, "_special_tags_code", refuse)
    first = _one(b"T", b"TAGS\x01a")
    data = first + _one(TIMER_TOPIC.encode(), b"TIMER_OUT_MS\x015", phys=len(first))
    with pytest.raises(ValueError, match="no tag code for rmq_sys_wheel_timer"):
        scan_records(data, 0, len(data), 0, len(data), 10, LEVELS)
    with pytest.raises(ValueError, match="no tag code for rmq_sys_wheel_timer"):
        _python_scan_records(data, 0, len(data), 0, len(data), 10, LEVELS)


def test_a_closed_mapping_reads_the_same() -> None:
    data = _one(b"T", b"TAGS\x01a")
    with mapped(data) as mm:
        pass
    assert outcome(scan_records, mm, 0, len(data), 0, len(data), 10, LEVELS) == outcome(
        _python_scan_records, mm, 0, len(data), 0, len(data), 10, LEVELS
    )


def test_the_compiled_scan_is_built_unless_turned_off() -> None:
    """A build without the scan (or without the extension) would leave the C path untested."""
    if PURE:
        assert speedups.recordc is None
    else:
        assert speedups.recordc is not None, "ledgermq._recordc was not built (pip install -e . needs a C compiler)"
        assert hasattr(speedups.recordc, "scan_records"), "ledgermq._recordc is an old build: rebuild it"
