"""The pure parts of exactlyOnce=true: the compact half list, the commit records, the options."""

from __future__ import annotations

import pickle
import random

import pytest

from ledgermq.client import MessageExt
from ledgermq.spark.commit_records import (
    DONE,
    PART_PROPERTY,
    CommitRecordError,
    StartedRecord,
    collect,
    done_message,
    started_messages,
)
from ledgermq.spark.eo_commit import stream_write_id
from ledgermq.spark.half_set import HalfSet, HalfSetError
from ledgermq.spark.options import DEFAULT_EO_GROUP, OptionError, parse_write_options

NS = {"namesrvAddr": "127.0.0.1:9876", "topic": "Out"}


def halves(n: int, seed: int = 1) -> HalfSet:
    rng = random.Random(seed)
    out = HalfSet()
    for i in range(n):
        broker = rng.choice(["a", "b"])
        out.add(broker, "Out", rng.randrange(4), 1000 + 97 * i, i, f"ID{i:030d}")
    return out


def test_half_set_round_trips_through_pickle_and_bytes() -> None:
    hs = halves(500)
    back = pickle.loads(pickle.dumps(hs))
    assert back == hs and len(back) == 500
    back.add("c", "Out", 0, 1, 1, "x")  # the index is rebuilt after unpickling
    assert back.targets[-1] == ("c", "Out", 0)
    decoded, meta = HalfSet.decode(hs.encode({"offsets": [["a", "Out", 1, 5]]}))
    assert decoded == hs and meta["offsets"] == [["a", "Out", 1, 5]]
    h = decoded.half(3)
    assert (h.commit_log_offset, h.queue_offset, h.msg_id) == (1000 + 97 * 3, 3, f"ID{3:030d}")
    assert HalfSet.decode(HalfSet().encode({}))[0] == HalfSet()


def test_half_set_decode_refuses_damage() -> None:
    body = halves(20).encode({})
    with pytest.raises(HalfSetError):
        HalfSet.decode(body[:-5])
    import zlib

    raw = zlib.decompress(body)
    with pytest.raises(HalfSetError, match="truncated"):
        HalfSet.decode(zlib.compress(raw[:-40]))


def test_half_set_concat_and_parts_keep_order() -> None:
    a, b = halves(7, 1), halves(5, 2)
    both = HalfSet.concat([a, b])
    assert both.msg_ids == a.msg_ids + b.msg_ids
    parts = both.parts(5)
    assert [len(p) for p in parts] == [5, 5, 2]
    assert HalfSet.concat(parts) == both


def _stored(msgs: list[object]) -> list[MessageExt]:
    """The records as a pull would hand them back (only the fields the collector reads)."""
    out = []
    for i, m in enumerate(msgs):
        out.append(MessageExt(topic=m.topic, body=m.body, properties={**m.properties, "TAGS": m.tags},  # type: ignore[attr-defined]
                              queue_offset=i))  # fmt: skip
    return out


def test_commit_records_complete_incomplete_and_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ledgermq.spark.commit_records.PART_HALVES", 30)
    hs = halves(70)
    record = StartedRecord("t1", hs, {("a", "Out", 0): 12})
    msgs = started_messages("C", "qW", 4, record)
    assert [m.properties[PART_PROPERTY] for m in msgs] == ["0/3", "1/3", "2/3"]
    found = collect(_stored(msgs), "qW", 4)
    assert found.started is not None and not found.done
    assert found.started.halves == hs and found.started.start_offsets == {("a", "Out", 0): 12}
    # another write's and another batch's records are not this batch's
    assert collect(_stored(msgs), "qOther", 4).started is None
    assert collect(_stored(msgs), "qW", 5).started is None
    # a driver that died between parts: the record counts as nothing
    partial = collect(_stored(msgs[:2]), "qW", 4)
    assert partial.started is None and partial.incomplete == {"t1": (2, 3)}
    done = collect(_stored([*msgs, done_message("C", "qW", 4)]), "qW", 4)
    assert done.done and done_message("C", "qW", 4).tags == DONE
    twice = started_messages("C", "qW", 4, StartedRecord("t2", hs, {}))
    with pytest.raises(CommitRecordError, match="two complete"):
        collect(_stored([*msgs, *twice]), "qW", 4)


def test_options_of_the_exactly_once_sink() -> None:
    opts = parse_write_options({**NS, "exactlyOnce": "true", "checkpointLocation": "/ck/q1/"})
    assert opts.exactly_once and opts.producer_group == DEFAULT_EO_GROUP
    assert opts.commit_topic == "LEDGERMQ_SPARK_COMMITS"
    # the write id is the checkpoint's, whatever the trailing slash
    again = parse_write_options({**NS, "exactlyOnce": "true", "checkpointLocation": "/ck/q1"})
    assert stream_write_id(opts) == stream_write_id(again)
    other = parse_write_options({**NS, "exactlyOnce": "true", "checkpointLocation": "/ck/q2"})
    assert stream_write_id(other) != stream_write_id(opts)
    assert not parse_write_options(NS).exactly_once
    with pytest.raises(OptionError, match="exactlyOnce"):
        parse_write_options({**NS, "exactlyOnce": "yes"})
    with pytest.raises(OptionError, match="commitTopic' needs exactlyOnce"):
        parse_write_options({**NS, "commitTopic": "C"})
    with pytest.raises(OptionError, match="commitTopic"):
        parse_write_options({**NS, "exactlyOnce": "true", "commitTopic": "bad topic"})
    with pytest.raises(OptionError, match="checkpointLocation"):
        stream_write_id(parse_write_options({**NS, "exactlyOnce": "true"}))
