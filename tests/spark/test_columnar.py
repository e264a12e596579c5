"""The Arrow decoder's vectorised path against its per-record path, record by record."""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from ledgermq.errors import RemoteProtocolError  # noqa: E402
from ledgermq.protocol import sysflag as SF  # noqa: E402
from ledgermq.protocol.message import encode_record  # noqa: E402
from ledgermq.protocol.msgid import offset_msg_id  # noqa: E402
from ledgermq.spark import columnar  # noqa: E402
from ledgermq.spark.columnar import RowBuffer  # noqa: E402

KEYS = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "x", ""]
VALUES = ["", "v", "a b", "é", "1\x012"]


@pytest.fixture(autouse=True)
def vectorise_small_pulls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulls of a few records take the per-record loop; here every pull is vectorised."""
    monkeypatch.setattr(columnar, "_MIN_VECTOR_ROWS", 0)


def props(rnd: random.Random) -> str:
    """Property text with empty, keyless, valueless and repeated segments now and then."""
    segments = []
    for _ in range(rnd.randint(0, 5)):
        if rnd.random() < 0.8:
            segments.append(f"{rnd.choice(KEYS)}\x01{rnd.choice(VALUES)}")
        else:
            segments.append(rnd.choice(["", "junk", "\x01", "\x01x"]))
    return "\x02".join(segments) + rnd.choice(["", "\x02", "\x02\x02"])


def record(rnd: random.Random, offset: int, **kw: Any) -> bytes:
    fields: dict[str, Any] = {
        "topic": rnd.choice(["T", "TopicX"]),
        "body": rnd.randbytes(rnd.choice([0, 1, 12, 13, 100])),
        "properties": props(rnd),
        "queue_offset": offset,
        "physical_offset": 5000 + 300 * offset,
        "born_timestamp": rnd.randrange(1 << 41),
        "store_timestamp": rnd.randrange(1 << 41),
        "reconsume_times": rnd.randrange(5),
        "store_host": rnd.choice([("127.0.0.1", 0), ("10.1.2.3", 10911)]),
    }
    fields.update(kw)
    return bytes(encode_record(**fields))


def decode(pulls: Sequence[tuple[bytes, int, int]], tags: frozenset[str] | None, *, slow: bool) -> Any:
    buf = RowBuffer("T", "broker-a", 3, tags)
    add = buf._add_records if slow else buf.add
    out = []
    for raw, start, end in pulls:
        out.append((add(raw, start, end), buf.gap))
        buf.gap = None
    return out, buf.take().to_pylist()


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_rows_equal_per_record_rows(seed: int) -> None:
    rnd = random.Random(seed)
    pulls = []
    offset = rnd.randint(0, 5)
    for _ in range(rnd.randint(1, 4)):
        start = offset
        rows = []
        for _ in range(rnd.randint(0, 40)):
            rows.append(record(rnd, offset))
            offset += 1 if rnd.random() < 0.9 else rnd.randint(2, 4)  # holes: a filter, or deletion
        end = rnd.choice([1 << 40, offset, max(start, offset - rnd.randint(1, 5))])
        pulls.append((b"".join(rows), start if rnd.random() < 0.9 else start - 1, end))
    tags = rnd.choice([None, frozenset({"v"}), frozenset({"a b", "v"})])
    assert decode(pulls, tags, slow=False) == decode(pulls, tags, slow=True)


def test_pulls_of_every_kind_in_one_batch() -> None:
    rnd = random.Random(3)
    plain = b"".join(record(rnd, i) for i in range(0, 50))
    compressed = record(
        rnd,
        50,
        body=zlib.compress(b"z" * 5000),
        sysflag=SF.COMPRESSED | SF.COMPRESSION_ZLIB,
        properties="",
        store_host=("10.0.0.9", 10911),
    )
    v6 = record(rnd, 51, store_host=("::1", 10911), properties="TAGS\x01v")
    mixed = b"".join(record(rnd, i) for i in range(52, 60))
    pulls = [(plain, 0, 1 << 40), (compressed + v6 + mixed, 50, 1 << 40), (plain[:0], 60, 1 << 40)]
    fast, rows = decode(pulls, None, slow=False)
    assert (fast, rows) == decode(pulls, None, slow=True)
    assert [r["queueOffset"] for r in rows] == list(range(60))
    assert rows[50]["value"] == b"z" * 5000
    assert rows[50]["msgId"] == offset_msg_id(("10.0.0.9", 10911), 5000 + 300 * 50)
    assert rows[51]["msgId"] == offset_msg_id(("::1", 10911), 5000 + 300 * 51)


def test_small_pulls_take_the_loop_and_large_ones_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "_MIN_VECTOR_ROWS", 8)
    rnd = random.Random(6)
    small = b"".join(record(rnd, i, body=b"x" * 10) for i in range(7))
    large = b"".join(record(rnd, i, body=b"x" * 10) for i in range(7, 30))
    calls: list[str] = []
    vectorised, per_record = RowBuffer._add_vectorised, RowBuffer._add_records

    def spy_vectorised(self: RowBuffer, *args: Any) -> int:
        calls.append("kernels")
        return vectorised(self, *args)

    def spy_records(self: RowBuffer, *args: Any) -> int:
        calls.append("loop")
        return per_record(self, *args)

    monkeypatch.setattr(RowBuffer, "_add_vectorised", spy_vectorised)
    monkeypatch.setattr(RowBuffer, "_add_records", spy_records)
    buf = RowBuffer("T", "broker-a", 3)
    assert buf.add(small, 0, 100) == 7 and buf.add(large, 7, 100) == 30 and buf.add(small, 30, 100) == 7
    assert calls == ["loop", "kernels", "loop"]
    rows = buf.take().to_pylist()
    pulls = [(small, 0, 100), (large, 7, 100), (small, 30, 100)]
    assert rows == decode(pulls, None, slow=True)[1]
    assert [r["queueOffset"] for r in rows] == [*range(30), *range(7)]


def test_msg_id_without_uniq_key_names_the_store_host() -> None:
    rnd = random.Random(1)
    raw = record(rnd, 7, properties="TAGS\x01a", store_host=("10.1.2.3", 10911), physical_offset=4242)
    buf = RowBuffer("T", "b", 0)
    buf.add(raw, 7, 8)
    assert buf.take().to_pylist()[0]["msgId"] == offset_msg_id(("10.1.2.3", 10911), 4242)


def test_gaps_and_the_range_end_inside_a_pull() -> None:
    rnd = random.Random(2)
    raw = b"".join(record(rnd, i) for i in [10, 11, 12, 15, 16, 17])
    buf = RowBuffer("T", "b", 0)
    assert buf.add(raw, 10, 17) == 17 and buf.gap == (13, 15)
    assert [r["queueOffset"] for r in buf.take().to_pylist()] == [10, 11, 12, 15, 16]
    late = RowBuffer("T", "b", 0)
    assert late.add(raw, 8, 11) == 11 and late.gap == (8, 10)
    assert late.add(raw, 8, 10) == 8 and len(late) == 1  # nothing below the end


def test_malformed_records_fail_unless_past_the_end() -> None:
    rnd = random.Random(4)
    good = b"".join(record(rnd, i) for i in range(3))
    bad_magic = bytearray(record(rnd, 3))
    bad_magic[4:8] = b"\0\0\0\0"
    with pytest.raises(RemoteProtocolError, match=r"record at \d+: bad magic or size"):
        RowBuffer("T", "b", 0).add(good + bytes(bad_magic), 0, 10)
    with pytest.raises(RemoteProtocolError, match="too short for a header"):
        RowBuffer("T", "b", 0).add(good + b"\0" * 20, 0, 10)
    overrun = bytearray(record(rnd, 3))
    overrun[84:88] = (len(overrun)).to_bytes(4, "big")  # the body length runs past the record
    with pytest.raises(RemoteProtocolError, match=r"body length \d+ overruns the record"):
        RowBuffer("T", "b", 0).add(good + bytes(overrun), 0, 10)
    past_end = b"".join(record(rnd, i) for i in range(3, 5)) + bytes(bad_magic)
    buf = RowBuffer("T", "b", 0)
    assert buf.add(good + past_end, 0, 3) == 3 and len(buf) == 3


def test_decoding_tries_no_imports() -> None:
    """A compute function given a bare Python scalar infers its type, and inference tries to
    import dateutil every time; without dateutil installed that is tens of microseconds a
    call. The decoder passes typed scalars only."""
    rnd = random.Random(5)
    raw = b"".join(record(rnd, i, properties="TAGS\x01v\x02KEYS\x01k\x02x\x01") for i in range(100))
    RowBuffer("T", "b", 0, frozenset({"v"})).add(raw, 0, 100)  # warm up: first imports, caches
    warm = RowBuffer("T", "b", 0, frozenset({"v"}))
    warm.add(raw, 0, 100)
    warm.take()

    tried: list[str] = []

    class Spy:
        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            tried.append(name)

    sys.meta_path.insert(0, Spy())  # type: ignore[arg-type]
    try:
        buf = RowBuffer("T", "b", 0, frozenset({"v"}))
        buf.add(raw, 0, 100)
        buf.add(raw, 100, 200)
        assert buf.take().num_rows == 200
    finally:
        sys.meta_path.pop(0)
    assert tried == []
