"""The C path for send-batch records (ledgermq/_recordc.c, ``encoding.encode_batch_body``)
against the Python path it stands in for: decode each entry, merge the properties the
broker adds, ``encode_batch``. Wherever the C path answers, its records must be the same
bytes, for the same queue and host, with the same dispatch facts, the same wait and the
same body size; where it does not (None), the Python path decides, including every
refusal. Random batches come from hypothesis: clean ones, and ones with what the C path
must leave alone (non-ASCII text, NUL, separators inside names or values, repeated names,
delays, timers, transactions, an added name the entry also has, a truncated body).
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import speedups
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import batch as B
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.store.commitlog import EncodedMessage
from ledgermq.store.encoding import encode_batch, encode_batch_body
from ledgermq.store.message_input import BatchInput
from ledgermq.store.results import PutResult

STORE = ("127.0.0.1", 10911)
PURE = os.environ.get("LEDGERMQ_PURE_PYTHON", "") not in ("", "0")
needs_c = pytest.mark.skipif(PURE, reason="LEDGERMQ_PURE_PYTHON is set: this run checks the Python path alone")


def python_path(
    topic: str, queue_id: int, sysflag: int, born: tuple[str, int], body: bytes, extra: dict[str, str]
) -> tuple[list[EncodedMessage], bool] | str:
    """What the broker does without the C path (broker/processors/send.py, ``_batch_input``,
    then the store's ``encode_batch``); a refusal as its text."""
    entries = []
    try:
        for entry in B.iter_batch(body):
            props = P.decode_properties(entry.properties)
            if props.get(P.DELAY, "0") not in ("", "0"):
                return "delayed"
            if props.get(P.TRAN_MSG) == "true":
                return "transactional"
            props.update(extra)
            entries.append((entry.flag, entry.body, props))
    except RemoteProtocolError as exc:
        return f"malformed: {exc}"
    got = encode_batch(BatchInput(topic, entries, queue_id, sysflag, 1_700_000_000_000, born, STORE), STORE)
    if isinstance(got, PutResult):
        return f"refused: {got.remark}"
    return got[0], got[3]


def c_path(topic: str, queue_id: int, sysflag: int, born: tuple[str, int], body: bytes, extra: dict[str, str]) -> Any:
    return encode_batch_body(
        topic=topic,
        queue_id=queue_id,
        sysflag=sysflag,
        born_timestamp=1_700_000_000_000,
        born_host=born,
        store_host=STORE,
        body=body,
        extra=extra,
    )


def assert_same(c: Any, py: tuple[list[EncodedMessage], bool] | str, body: bytes) -> None:
    assert not isinstance(py, str), f"the C path took a batch the Python path refuses: {py}"
    records, wait = py
    assert c.wait == wait
    assert c.body_bytes == sum(len(e.body) for e in B.iter_batch(body))
    assert len(c.records) == len(records)
    for got, want in zip(c.records, records, strict=True):
        assert bytes(got.data) == bytes(want.data)
        assert got.queue_key == want.queue_key
        assert got.takes_queue_offset == want.takes_queue_offset
        assert got.store_host == want.store_host
        assert got.facts == want.facts


_ASCII = st.text(alphabet=st.sampled_from("abcXYZ019_-:. "), min_size=1, max_size=12)
_ODD = st.sampled_from(["", "é", "\x00", "a\x01b", "a\x02b", "漢字", "x" * 40])
_COMMON = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "MIN_OFFSET"])
_SPECIAL = st.sampled_from(["DELAY", "CLUSTER", P.TRAN_MSG, P.TIMER_DELAY_SEC, P.START_DELIVER_TIME])
_VALUE = st.one_of(_ASCII, st.sampled_from(["true", "false", "0", "1", "3"]))


@st.composite
def _name(draw: st.DrawFn, plain: bool = False) -> str:
    """Names clients use, and (unless ``plain``) one in eight the C path leaves to Python."""
    pick = draw(st.integers(1 if plain else 0, 7))
    return draw(_SPECIAL if pick == 0 else _COMMON if pick < 4 else _ASCII)


@st.composite
def properties_text(draw: st.DrawFn, plain: bool) -> str:
    """What clients send (distinct ASCII pairs); unless ``plain``, sometimes something odd."""
    unique = plain or draw(st.integers(0, 7)) > 0
    pairs = draw(
        st.lists(st.tuples(_name(plain), _VALUE), max_size=5, unique_by=(lambda kv: kv[0]) if unique else None)
    )
    text = P.PROPERTY_SEPARATOR.join(f"{k}{P.NAME_VALUE_SEPARATOR}{v}" for k, v in pairs)
    if not plain and draw(st.integers(0, 9)) == 0:  # an odd piece somewhere: a raw segment or a separator
        piece = draw(st.one_of(_ODD, st.sampled_from(["\x02", "\x01", "k\x01", "\x01v", "k\x01v\x01w"])))
        at = draw(st.integers(0, len(text)))
        text = text[:at] + piece + text[at:]
    return text


@st.composite
def batches(draw: st.DrawFn) -> tuple[str, int, int, tuple[str, int], bytes, dict[str, str]]:
    """Half plain batches (the C path's own), half anything."""
    plain = draw(st.booleans())
    entries = [
        B.BatchEntry(
            draw(st.integers(-(2**31), 2**31 - 1)), draw(st.binary(max_size=300)), draw(properties_text(plain))
        )
        for _ in range(draw(st.integers(0, 5)))
    ]
    body = B.encode_batch(entries)
    extra = {"CLUSTER": "DefaultCluster"}
    born = draw(st.sampled_from([("127.0.0.1", 5555), ("::1", 6666), ("10.1.2.3", 65535)]))
    if plain:
        if draw(st.booleans()):  # a plain name the request header adds to every entry
            extra[draw(_ASCII)] = draw(_ASCII)
        topic = draw(st.sampled_from(["T", "BatchTopic"]))
        return topic, draw(st.integers(0, 15)), draw(st.sampled_from([0, SF.MULTI_TAGS])), born, body, extra
    if draw(st.integers(0, 7)) == 0 and body:  # a truncated or overlong body
        body = body[: draw(st.integers(0, len(body) - 1))] if draw(st.booleans()) else body + b"\x00\x01"
    for k, v in draw(st.lists(st.tuples(_name(), st.one_of(_VALUE, _ODD)), max_size=2)):
        extra[k] = v
    topic = draw(st.sampled_from(["T", "BatchTopic", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"]))
    sysflag = draw(st.sampled_from([0, SF.MULTI_TAGS, SF.TRANSACTION_PREPARED_TYPE]))
    return topic, draw(st.integers(0, 15)), sysflag, born, body, extra


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_c_path_builds_what_the_python_path_builds_or_leaves_the_batch_to_it(case: Any) -> None:
    topic, queue_id, sysflag, born, body, extra = case
    c = c_path(topic, queue_id, sysflag, born, body, extra)
    py = python_path(topic, queue_id, sysflag, born, body, extra)
    if c is not None:
        assert_same(c, py, body)


def _clean_batch(n: int, size: int, props: str) -> bytes:
    return B.encode_batch(B.BatchEntry(i, bytes([i % 251]) * size, props.format(i=i)) for i in range(n))


@needs_c
@pytest.mark.parametrize(
    "props",
    [
        "",
        "UNIQ_KEY\x01{i:032X}",
        "KEYS\x01k{i} other\x02TAGS\x01tag{i}\x02UNIQ_KEY\x01{i:032X}",
        "WAIT\x01true\x02TAGS\x01TagA",  # what Java's Message carries by default
        "WAIT\x01false\x02DELAY\x010\x02KEYS\x01order-{i}",
    ],
)
def test_what_clients_send_takes_the_c_path(props: str) -> None:
    """The C path must not quietly hand every batch back: the batches clients send (Java's
    WAIT=true, keys, tags, a UNIQ_KEY per entry) are built in C, the same as in Python."""
    body = _clean_batch(32, 100, props)
    extra = {"CLUSTER": "DefaultCluster"}
    c = c_path("BatchTopic", 3, 0, ("127.0.0.1", 5555), body, extra)
    assert c is not None
    assert_same(c, python_path("BatchTopic", 3, 0, ("127.0.0.1", 5555), body, extra), body)
    assert c.wait == ("WAIT\x01false" not in props)


@needs_c
def test_bodies_of_every_length_get_zlibs_crc() -> None:
    c = speedups.recordc
    assert c is not None
    data = bytes(range(256)) * 9
    for n in range(0, len(data), 7):
        assert c.crc32(data[:n]) == zlib.crc32(data[:n])


def test_the_compiled_record_path_is_built_unless_turned_off() -> None:
    """`make test` installs with a C compiler at hand: a build that quietly fell back to
    pure Python would leave the C path untested (and the broker slower)."""
    if PURE:
        assert speedups.recordc is None
    else:
        assert speedups.recordc is not None, "ledgermq._recordc was not built (pip install -e . needs a C compiler)"
