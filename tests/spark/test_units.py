"""The pure parts of the Spark source: options, offsets, planning, the Arrow decoder, the sink's rows."""

from __future__ import annotations

import itertools
import time
import zlib

import pytest

pa = pytest.importorskip("pyarrow")

from ledgermq.protocol import properties as P  # noqa: E402
from ledgermq.protocol import sysflag as SF  # noqa: E402
from ledgermq.protocol.message import encode_record  # noqa: E402
from ledgermq.protocol.msgid import offset_msg_id  # noqa: E402
from ledgermq.spark.columnar import RowBuffer  # noqa: E402
from ledgermq.spark.offsets import (  # noqa: E402
    OffsetError,
    QueueId,
    advance,
    dumps,
    offsets_from_json,
    parse_offsets,
    rate_limit,
)
from ledgermq.spark.options import OptionError, parse_read_options, parse_write_options  # noqa: E402
from ledgermq.spark.planning import DataLossError, QueueRange, check_start, ranges_between, split_ranges  # noqa: E402
from ledgermq.spark.schema import arrow_schema  # noqa: E402

NS = "127.0.0.1:9876"
A0, A1, B0 = QueueId("T", "a", 0), QueueId("T", "a", 1), QueueId("T", "b", 0)


def read_opts(streaming: bool = False, **extra: str) -> object:
    return parse_read_options({"namesrvAddr": NS, "subscribe": "T", **extra}, streaming=streaming)


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"subscribe": "T"}, False, "namesrvAddr"),
        ({"namesrvAddr": "nohost", "subscribe": "T"}, False, "namesrvAddr"),
        ({"namesrvAddr": NS}, False, "subscribe"),
        ({"namesrvAddr": NS, "subscribe": "T", "assign": '{"T": {"a": [0]}}'}, False, "assign"),
        ({"namesrvAddr": NS, "subscribe": "bad topic"}, False, "subscribe"),
        ({"namesrvAddr": NS, "subscribePattern": "T("}, False, "subscribePattern"),
        ({"namesrvAddr": NS, "assign": '{"T": {"a": [-1]}}'}, False, "assign"),
        ({"namesrvAddr": NS, "assign": "[1]"}, False, "assign"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingOffsets": "latest"}, False, "startingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingOffsets": "{nope"}, False, "startingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingOffsets": '{"T": {"a:0": -1}}'}, False, "startingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingOffsets": '{"U": {"a:0": 1}}'}, False, "startingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingOffsets": '{"T": {"a0": 1}}'}, False, "startingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "endingOffsets": '{"T": {"a:0": -2}}'}, False, "endingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "endingOffsets": "latest"}, True, "endingOffsets"),
        ({"namesrvAddr": NS, "subscribe": "T", "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger"),
        ({"namesrvAddr": NS, "subscribe": "T", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({"namesrvAddr": NS, "subscribe": "T", "maxOffsetsPerTrigger": "x"}, True, "maxOffsetsPerTrigger"),
        ({"namesrvAddr": NS, "subscribe": "T", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({"namesrvAddr": NS, "subscribe": "T", "minPartitions": "0"}, False, "minPartitions"),
        ({"namesrvAddr": NS, "subscribe": "T", "startingTimestamp": "-5"}, False, "startingTimestamp"),
        ({"namesrvAddr": NS, "subscribe": "T", "groupId": "a b"}, False, "groupId"),
        ({"namesrvAddr": NS, "subscribe": "T", "pullBatchSize": "0"}, False, "pullBatchSize"),
        ({"namesrvAddr": NS, "subscribe": "T", "subcribe": "T"}, False, "subcribe"),
    ],
)
def test_bad_read_options_are_named(options: dict[str, str], streaming: bool, named: str) -> None:
    with pytest.raises(OptionError, match=f"'{named}'"):
        parse_read_options(options, streaming=streaming)


def test_read_options_defaults_and_case() -> None:
    opts = parse_read_options({"NAMESRVADDR": "h1:1;h2:2", "Subscribe": "T, U,T"}, streaming=False)
    assert opts.namesrv == ("h1:1", "h2:2")
    assert opts.subscription.topics == ("T", "U")
    assert opts.starting.kind == "earliest" and opts.ending.kind == "latest"
    assert opts.fail_on_data_loss is True and opts.tag_set is None
    stream = parse_read_options(
        {"namesrvAddr": NS, "subscribe": "T", "maxOffsetsPerTrigger": "7", "tags": "a || b", "failOnDataLoss": "FALSE"},
        streaming=True,
    )
    assert stream.starting.kind == "latest" and stream.max_offsets_per_trigger == 7
    assert stream.tag_set == frozenset({"a", "b"}) and stream.fail_on_data_loss is False
    assign = parse_read_options(
        {"namesrvAddr": NS, "assign": '{"T": {"a": [1, 0, 1]}}', "startingOffsets": '{"T": {"a:1": 5}}'},
        streaming=False,
    )
    assert assign.subscription.assign == {"T": {"a": (0, 1)}}
    assert assign.starting.offsets == {A1: 5}
    with pytest.raises(OptionError, match=r"'startingOffsets'.*does not assign"):
        parse_read_options(
            {"namesrvAddr": NS, "assign": '{"T": {"a": [0]}}', "startingOffsets": '{"T": {"a:1": 5}}'},
            streaming=False,
        )


def test_write_options() -> None:
    opts = parse_write_options({"namesrvAddr": NS, "topic": "Out", "sendBatchSize": "10"})
    assert opts.topic == "Out" and opts.send_batch_size == 10 and opts.retry_times == 2
    with pytest.raises(OptionError, match="'topic'"):
        parse_write_options({"namesrvAddr": NS, "topic": "no good"})
    with pytest.raises(OptionError, match="'sendBatchSize'"):
        parse_write_options({"namesrvAddr": NS, "sendBatchSize": "-1"})
    with pytest.raises(OptionError, match="unknown option 'subscribe'"):
        parse_write_options({"namesrvAddr": NS, "subscribe": "T"})


# -- offsets -------------------------------------------------------------------------------------
def test_offsets_json_round_trip() -> None:
    offsets = {A1: 7, A0: 3, QueueId("U", "b:x", 2): 2**63 - 1}
    text = dumps(offsets)
    assert text == '{"T":{"a:0":3,"a:1":7},"U":{"b:x:2":9223372036854775807}}'
    assert parse_offsets(text) == offsets
    assert parse_offsets('{"T": {"a:0": -2, "a:1": -1}}') == {A0: -2, A1: -1}
    for bad in ('{"T": {"a:0": -3}}', '{"T": {"a:0": 1.5}}', '{"T": {"a:0": true}}', '{"T": [1]}', "[]", "{"):
        with pytest.raises(OffsetError):
            parse_offsets(bad)
    with pytest.raises(OffsetError):
        offsets_from_json({"T": {"a:0": -2}}, allow_special=False)


def test_advance_never_goes_back_and_keeps_vanished_queues() -> None:
    start = {A0: 10, A1: 5}
    latest = {A0: 12, A1: 3, B0: 4}  # A1 shrank (handled as data loss elsewhere), B0 is new
    assert advance(start, latest) == {A0: 12, A1: 5, B0: 4}
    assert advance(start, {A0: 12}) == {A0: 12, A1: 5}  # A1 left the route: kept
    # an availableNow target caps the end; queues born after it are left for a later run
    assert advance(start, {A0: 20, A1: 9, B0: 4}, cap={A0: 15, A1: 9}) == {A0: 15, A1: 9}


def test_rate_limit_is_proportional_exact_and_deterministic() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    end = {A0: 100, A1: 50, B0: 1}
    limited = rate_limit(start, end, 30)
    assert sum(limited[q] - start[q] for q in end) == 30
    assert limited == rate_limit(start, end, 30)
    assert limited[A0] == 20 and limited[A1] == 10 and limited[B0] == 0
    assert rate_limit(start, end, 1000) == end
    assert rate_limit({A0: 5}, {A0: 6, A1: 1}, 1) in ({A0: 6, A1: 0}, {A0: 5, A1: 1})
    with pytest.raises(OffsetError):
        rate_limit(start, end, 0)


# -- planning ------------------------------------------------------------------------------------
def test_ranges_and_min_partitions() -> None:
    ranges = ranges_between({A0: 10, A1: 5}, {A0: 110, A1: 5, B0: 10})
    assert ranges == [QueueRange(A0, 10, 110), QueueRange(B0, 0, 10)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    pieces = split_ranges(ranges, 5)
    assert len(pieces) >= 5
    for q in (A0, B0):  # the pieces of a queue cover its range exactly, in order, without overlap
        mine = [p for p in pieces if p.queue == q]
        whole = next(r for r in ranges if r.queue == q)
        assert mine[0].start == whole.start and mine[-1].end == whole.end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
    assert split_ranges([QueueRange(A0, 0, 2)], 10) == [QueueRange(A0, 0, 1), QueueRange(A0, 1, 2)]


def test_check_start_data_loss_rules() -> None:
    assert check_start(A0, 5, 0, 10, fail=True, what="x") == 5
    with pytest.raises(DataLossError, match="deleted by retention"):
        check_start(A0, 2, 4, 10, fail=True, what="x")
    assert check_start(A0, 2, 4, 10, fail=False, what="x") == 4
    with pytest.raises(DataLossError, match="re-created"):
        check_start(A0, 12, 0, 10, fail=True, what="x")
    assert check_start(A0, 12, 0, 10, fail=False, what="x") == 12


# -- the Arrow decoder ---------------------------------------------------------------------------
def record(offset: int, body: bytes, props: dict[str, str], **kw: object) -> bytes:
    return bytes(
        encode_record(
            topic="T",
            body=body,
            queue_id=1,
            properties=P.encode_properties(props) + kw.pop("props_tail", ""),  # type: ignore[operator]
            queue_offset=offset,
            physical_offset=1000 + offset,
            born_timestamp=1_700_000_000_123,
            store_timestamp=1_700_000_000_456,
            reconsume_times=offset % 3,
            **kw,  # type: ignore[arg-type]
        )
    )


def test_row_buffer_decodes_every_column() -> None:
    raw = b"".join(
        [
            record(5, b"plain", {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U5", "x": "1"}),
            record(6, zlib.compress(b"z" * 5000), {"UNIQ_KEY": "U6"}, sysflag=SF.COMPRESSED | SF.COMPRESSION_ZLIB),
            record(7, b"v6", {"TAGS": "TagB"}, store_host=("::1", 10911), props_tail="\x02"),
            record(9, b"after a gap", {"TAGS": "TagA", "KEYS": "k9"}),
            record(10, b"past the end", {}),
        ]
    )
    buf = RowBuffer("T", "broker-a", 1)
    assert buf.add(raw, 5, 10) == 10
    assert buf.gap == (8, 9)
    batch = buf.take()
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert [r["queueOffset"] for r in rows] == [5, 6, 7, 9]
    assert rows[0]["value"] == b"plain" and rows[1]["value"] == b"z" * 5000
    assert [r["key"] for r in rows] == ["k1 k2", None, None, "k9"]
    assert [r["tags"] for r in rows] == ["TagA", None, "TagB", "TagA"]
    assert rows[0]["msgId"] == "U5" and rows[1]["msgId"] == "U6"
    assert rows[2]["msgId"] == offset_msg_id(("::1", 10911), 1007)
    assert rows[3]["msgId"] == offset_msg_id(("127.0.0.1", 0), 1009)
    assert dict(rows[0]["properties"]) == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U5", "x": "1"}
    assert dict(rows[2]["properties"]) == {"TAGS": "TagB"}
    assert {r["topic"] for r in rows} == {"T"} and {r["broker"] for r in rows} == {"broker-a"}
    assert {r["queueId"] for r in rows} == {1}
    assert [r["reconsumeTimes"] for r in rows] == [2, 0, 1, 0]
    assert int(rows[0]["bornTimestamp"].timestamp() * 1000) == 1_700_000_000_123
    assert int(rows[0]["storeTimestamp"].timestamp() * 1000) == 1_700_000_000_456
    assert len(buf) == 0 and buf.take().num_rows == 0


def test_row_buffer_skips_bad_property_segments_and_filters_tags() -> None:
    text = "TAGS\x01a\x02\x01novalue\x02nokey\x01\x02x\x02k\x01v"
    raw = record(0, b"b", {}, props_tail=text) + record(1, b"c", {"TAGS": "b"}) + record(2, b"d", {"TAGS": "a"})
    buf = RowBuffer("T", "q", 0, frozenset({"a"}))
    buf.add(raw, 0, 100)
    rows = buf.take().to_pylist()
    assert [r["queueOffset"] for r in rows] == [0, 2]
    assert dict(rows[0]["properties"]) == {"TAGS": "a", "k": "v"}


def test_row_buffer_decodes_a_large_pull_quickly() -> None:
    raw = b"".join(record(i, b"x" * 100, {"TAGS": "T", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}) for i in range(4096))
    buf = RowBuffer("T", "q", 0)
    started = time.thread_time()  # CPU time of this thread: other processes' load does not count
    for _ in range(5):
        buf.add(raw, 0, 1 << 40)
        assert buf.take().num_rows == 4096
    assert time.thread_time() - started < 5.0  # ~0.1 s here: a per-record Python loop would not be
