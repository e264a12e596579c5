"""The sink's columnar path (``row_runs`` + ``prepare_rows``) against the message path it
replaced (``messages_of`` + ``prepare_batch``, which the exactly-once sender still uses):
the same rows refused, the same runs, the same bytes on the wire but for each fresh UNIQ_KEY."""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from ledgermq.client.errors import MessageInvalidError  # noqa: E402
from ledgermq.client.producer.outgoing import prepare_batch, prepare_rows  # noqa: E402
from ledgermq.clock import ManualClock  # noqa: E402
from ledgermq.protocol.batch import iter_batch  # noqa: E402
from ledgermq.spark.options import WriteOptions, parse_write_options  # noqa: E402
from ledgermq.spark.sink_rows import RowRun, SinkError, messages_of, row_runs  # noqa: E402
from ledgermq.util.unique_ids import UniqueIdGenerator  # noqa: E402

MAX_SIZE = 4 * 1024 * 1024
GOOD_TEXTS = ["", "a", "b c", " d  e ", "TagS"]
BAD_TEXTS = ["x\x01y", "z\x02"]
GOOD_KEYS = ["p", "q", "", "TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY"]
GOOD_VALUES = ["", "1", "v w"]
UNIQ_KEY_VALUE = re.compile("UNIQ_KEY\x01[0-9A-F]{32}")


@st.composite
def frames(draw: st.DrawFn) -> tuple[Any, dict[str, str]]:
    """A frame the sink may be given: values always, the other columns sometimes, with
    nulls, empty texts, separators, system properties and negative queue ids among them."""
    n = draw(st.integers(0, 12))
    bad = draw(st.integers(0, 2)) == 0  # separators in texts only in some frames: most must pass
    texts = st.sampled_from(GOOD_TEXTS + BAD_TEXTS if bad else GOOD_TEXTS)
    prop_keys = st.sampled_from(GOOD_KEYS + BAD_TEXTS if bad else GOOD_KEYS)
    prop_values = st.one_of(st.none(), st.sampled_from(GOOD_VALUES + BAD_TEXTS if bad else GOOD_VALUES))
    cols: dict[str, Any] = {}
    as_text = draw(st.booleans())
    values = [draw(st.binary(min_size=1, max_size=40)) for _ in range(n)]
    if draw(st.integers(0, 20)) == 0 and n:  # now and then a row the sink must refuse
        values[draw(st.integers(0, n - 1))] = b""
    cols["value"] = pa.array([v.hex() for v in values] if as_text else values, pa.string() if as_text else pa.binary())
    options = {"namesrvAddr": "127.0.0.1:9876"}
    if draw(st.booleans()):
        options["topic"] = "TOpt"
    if "topic" not in options or draw(st.booleans()):
        cols["topic"] = pa.array([draw(st.sampled_from(["TA", "TB"])) for _ in range(n)], pa.string())
    for name in ("key", "tags"):
        if draw(st.booleans()):
            cols[name] = pa.array([draw(st.one_of(st.none(), texts)) for _ in range(n)], pa.string())
    if draw(st.booleans()):
        maps = [draw(st.one_of(st.none(), st.lists(st.tuples(prop_keys, prop_values), max_size=4))) for _ in range(n)]
        cols["properties"] = pa.array(maps, pa.map_(pa.string(), pa.string()))
    if draw(st.booleans()):
        low = -1 if draw(st.integers(0, 10)) == 0 else 0
        cols["queueId"] = pa.array([draw(st.one_of(st.none(), st.integers(low, 2))) for _ in range(n)], pa.int32())
    return pa.record_batch(list(cols.values()), names=list(cols)), options


def _entries(body: bytes) -> list[tuple[int, bytes, str]]:
    """A batch body's entries, property text as written, each UNIQ_KEY value replaced by a
    mark (fresh ids differ)."""
    out = []
    for e in iter_batch(body):
        text, count = UNIQ_KEY_VALUE.subn("UNIQ_KEY\x01*", e.properties)
        assert count == 1 and text.endswith("UNIQ_KEY\x01*"), e.properties
        out.append((e.flag, e.body, text))
    return out


def _old(batch: Any, opts: WriteOptions, runs: list[RowRun]) -> list[bytes]:
    """The message path over the same runs: each run's messages made a batch by ``prepare_batch``."""
    rows = messages_of(batch, opts)
    ids, clock = UniqueIdGenerator(rng=random.Random(1)), ManualClock()
    bodies, at = [], 0
    for run in runs:
        part = rows[at : at + len(run.bodies)]
        at += len(part)
        assert {(m.topic, q) for m, q in part} == {(run.topic, run.queue_id)}
        assert [m.body for m, _ in part] == run.bodies
        bodies.append(prepare_batch([m for m, _ in part], ids, clock, MAX_SIZE).body)
    assert at == len(rows)
    return bodies


def _message_path_refuses(batch: Any, opts: WriteOptions) -> bool:
    """Whether ``messages_of`` or ``prepare_batch`` (one message at a time) refuses a row."""
    try:
        for msg, _ in messages_of(batch, opts):
            prepare_batch([msg], UniqueIdGenerator(), ManualClock(), MAX_SIZE)
    except (SinkError, MessageInvalidError):
        return True
    return False


def _check_cuts(runs: list[RowRun], size: int, max_bytes: int) -> None:
    """Each run keeps the limits, and ends only where the next row could not join it."""
    for run in runs:
        assert 1 <= len(run.bodies) <= size
        used = 0
        for j, body in enumerate(run.bodies):
            assert j == 0 or used + len(body) <= max_bytes
            used += len(body) + 64
    for a, b in itertools.pairwise(runs):
        joins = (a.topic, a.queue_id) == (b.topic, b.queue_id) and len(a.bodies) < size
        assert not joins or sum(len(x) + 64 for x in a.bodies) + len(b.bodies[0]) > max_bytes


@settings(max_examples=600, deadline=None)
@given(frames(), st.integers(1, 5), st.one_of(st.integers(60, 400), st.just(1024 * 1024)))
def test_runs_and_bytes_are_the_message_paths(frame: tuple[Any, dict[str, str]], size: int, max_bytes: int) -> None:
    batch, options = frame
    opts = parse_write_options(options)
    try:
        runs = row_runs(batch, opts, size, max_bytes)
        ids, clock = UniqueIdGenerator(rng=random.Random(2)), ManualClock()
        new = [prepare_rows(r.topic, r.bodies, r.prefixes, ids, clock, MAX_SIZE).body for r in runs]
    except SinkError as exc:
        assert _message_path_refuses(batch, opts), f"the message path takes a frame the columnar path refused: {exc}"
        return
    _check_cuts(runs, size, max_bytes)
    old = _old(batch, opts, runs)
    assert [_entries(b) for b in new] == [_entries(b) for b in old]
    if max_bytes == 1024 * 1024 and "topic" not in batch.schema.names and "queueId" not in batch.schema.names:
        assert [len(r.bodies) for r in runs] == [min(size, batch.num_rows - s) for s in range(0, batch.num_rows, size)]


def test_a_separator_in_a_row_is_refused_with_its_row_number() -> None:
    batch = pa.record_batch([pa.array([b"a", b"b"]), pa.array(["ok", "t\x01x"], pa.string())], names=["value", "tags"])
    with pytest.raises(SinkError, match=r"row 1: the tags 't\\x01x' contains a 0x01 or 0x02 character"):
        row_runs(batch, parse_write_options({"namesrvAddr": "h:1", "topic": "T"}), 128, 1024 * 1024)


def test_a_negative_queue_id_is_refused_with_its_row_number() -> None:
    batch = pa.record_batch(
        [pa.array([b"a", b"b", b"c"]), pa.array([0, None, -3], pa.int32())], names=["value", "queueId"]
    )
    with pytest.raises(SinkError, match="row 2: column 'queueId' is -3, below 0"):
        row_runs(batch, parse_write_options({"namesrvAddr": "h:1", "topic": "T"}), 128, 1024 * 1024)


def test_the_tags_and_keys_columns_win_over_those_in_properties() -> None:
    props = [[("TAGS", "pt"), ("KEYS", "pk"), ("u", "1")]] * 3
    batch = pa.record_batch(
        [
            pa.array([b"a", b"b", b"c"]),
            pa.array(["ct", None, ""], pa.string()),
            pa.array(["ck", None, None], pa.string()),
            pa.array(props, pa.map_(pa.string(), pa.string())),
        ],
        names=["value", "tags", "key", "properties"],
    )
    (run,) = row_runs(batch, parse_write_options({"namesrvAddr": "h:1", "topic": "T"}), 128, 1024 * 1024)
    wait = "WAIT\x01true\x02u\x011\x02"
    # an empty tags text is a value (the column's), which a message then leaves out
    assert run.prefixes == [
        f"TAGS\x01ct\x02KEYS\x01ck\x02{wait}",
        f"TAGS\x01pt\x02KEYS\x01pk\x02{wait}",
        f"KEYS\x01pk\x02{wait}",
    ]


@pytest.mark.parametrize(("max_bytes", "runs"), [(136, [2]), (135, [1, 1])])
def test_a_run_takes_a_row_whose_body_fits_exactly(max_bytes: int, runs: list[int]) -> None:
    """The second body fits when the first's 36 bytes and 64 of overhead plus its own 36 are
    at most ``max_bytes`` (the producer's batch cut, ``MAX_BATCH_BYTES``)."""
    batch = pa.record_batch([pa.array([b"x" * 36] * 2), pa.array([1, 1], pa.int32())], names=["value", "queueId"])
    got = row_runs(batch, parse_write_options({"namesrvAddr": "h:1", "topic": "T"}), 128, max_bytes)
    assert [len(r.bodies) for r in got] == runs
