"""The C path for a single send's record (ledgermq/_recordc.c, ``encoding.encode_single_text``)
against the Python path it stands in for, both taken through the send processor's own
``_message_input`` and the store's ``encode_message``: where the C path builds the record,
the bytes, queue, host, dispatch facts and wait must be what the Python path builds from
the same request; where it does not, the Python path decides (refusals included). Random
requests come from hypothesis (the batch test's property texts, clean and odd), with
retry topics, MULTI_TAG topics, transaction flags, hosts of both families and numbers at
the edges of their Java types.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import speedups
from ledgermq.broker.processors import send
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_send import SendMessageRequestHeader
from ledgermq.protocol.route import TopicConfig
from ledgermq.store.commitlog import EncodedMessage
from ledgermq.store.encoding import encode_message
from ledgermq.store.message_input import MessageInput
from ledgermq.store.results import PutResult
from ledgermq.store.timer.settings import TimerSettings
from tests.store.test_batch_records_c import PURE, needs_c, properties_text

STORE = ("127.0.0.1", 10911)
DELAY_LEVELS = [1000 * (i + 1) for i in range(18)]
NOW_MS = 1_700_000_000_000


def _broker() -> Any:
    config = SimpleNamespace(cluster_name="DefaultCluster", reject_transaction_message=False, broker_ip1="127.0.0.1")
    return SimpleNamespace(config=config, store_host=STORE, subscriptions=SimpleNamespace(find=lambda group: None))


def _ctx(peer: str) -> Any:
    return SimpleNamespace(connection=SimpleNamespace(attachment={}), peer=peer)


@contextlib.contextmanager
def _pure_python() -> Iterator[None]:
    saved = speedups.recordc
    speedups.recordc = None
    try:
        yield
    finally:
        speedups.recordc = saved


def build(request: dict[str, Any]) -> tuple[list[EncodedMessage], bool] | str:
    """What the broker stores for ``request`` (send.py's ``_message_input``, then
    ``encode_message``, the store's facade's call); a refusal as its text."""
    ext = {k: str(v) for k, v in request["header"].items() if v is not None}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, request["body"])
    hdr = SendMessageRequestHeader.decode(cmd)
    tc = TopicConfig(hdr.topic, 16, 16, topic_filter_type=request["filter_type"])
    made = send._message_input(_broker(), _ctx(request["peer"]), cmd, hdr, tc, hdr.queue_id)
    if isinstance(made, RemotingCommand):
        return f"answered {made.code}: {made.remark}"
    msg, wait = made
    assert isinstance(msg, MessageInput)
    got = encode_message(msg, STORE, DELAY_LEVELS, TimerSettings(), NOW_MS)
    if isinstance(got, PutResult):
        return f"refused: {got.remark}"
    assert got[3] == (wait and msg.wait_store_ok)
    return got[0], wait


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    plain = draw(st.booleans())
    topic = draw(st.sampled_from(["T", "SingleTopic", "%RETRY%group"] if not plain else ["T", "SingleTopic"]))
    sysflag = draw(
        st.sampled_from(
            [0, SF.COMPRESSED, SF.MULTI_TAGS]
            + ([] if plain else [SF.TRANSACTION_PREPARED_TYPE, SF.TRANSACTION_COMMIT_TYPE])
            + ([] if plain else [SF.TRANSACTION_ROLLBACK_TYPE])
        )
    )
    big = st.sampled_from([-(2**31), 2**31 - 1, 2**63 - 1, -(2**63), 2**31, 2**63])
    header = {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": draw(st.integers(0, 15)),
        "sysFlag": sysflag,
        "bornTimestamp": draw(st.one_of(st.integers(0, 2**41), big) if not plain else st.integers(0, 2**41)),
        "flag": draw(st.one_of(st.integers(-(2**31), 2**31 - 1), big) if not plain else st.integers(0, 9)),
        "properties": draw(properties_text(plain)) if draw(st.integers(0, 9)) else None,
        "reconsumeTimes": draw(st.integers(0, 20)) if draw(st.booleans()) else None,
        "maxReconsumeTimes": draw(st.sampled_from([None, 3, 16])),
    }
    return {
        "header": header,
        "body": draw(st.binary(max_size=400)),
        "peer": draw(st.sampled_from(["127.0.0.1:5555", "::1:6666", "10.1.2.3:65535", "[::1]:7777"])),
        "filter_type": draw(st.sampled_from(["SINGLE_TAG", "MULTI_TAG"])),
    }


def assert_same(c: tuple[list[EncodedMessage], bool] | str, py: tuple[list[EncodedMessage], bool] | str) -> None:
    assert isinstance(py, tuple), f"the C path took a message the Python path refuses: {py}"
    assert isinstance(c, tuple), c
    (got,), got_wait = c
    (want,), want_wait = py
    assert bytes(got.data) == bytes(want.data)
    assert got.queue_key == want.queue_key
    assert got.takes_queue_offset == want.takes_queue_offset
    assert got.store_host == want.store_host
    assert got.facts == want.facts
    assert got_wait == want_wait


def _took_c_path(request: dict[str, Any]) -> bool:
    ext = {k: str(v) for k, v in request["header"].items() if v is not None}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, request["body"])
    hdr = SendMessageRequestHeader.decode(cmd)
    tc = TopicConfig(hdr.topic, 16, 16, topic_filter_type=request["filter_type"])
    made = send._message_input(_broker(), _ctx(request["peer"]), cmd, hdr, tc, hdr.queue_id)
    return not isinstance(made, RemotingCommand) and made[0].encoded is not None


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_the_c_path_builds_what_the_python_path_builds_or_leaves_the_message_to_it(request: dict[str, Any]) -> None:
    try:
        c = build(request)
    except Exception as exc:  # the header decode refuses numbers out of range: both paths alike
        with _pure_python(), pytest.raises(type(exc)):
            build(request)
        return
    with _pure_python():
        py = build(request)
    if _took_c_path(request):
        assert_same(c, py)
    else:
        assert c == py or (isinstance(c, tuple) and isinstance(py, tuple))
        if isinstance(c, tuple) and isinstance(py, tuple):
            assert_same(c, py)


def _request(props: str | None, *, peer: str = "127.0.0.1:5555", reconsume: int | None = None) -> dict[str, Any]:
    header = {
        "producerGroup": "pg",
        "topic": "SingleTopic",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 3,
        "sysFlag": 0,
        "bornTimestamp": 1_732_000_000_123,
        "flag": 0,
        "properties": props,
        "reconsumeTimes": reconsume,
    }
    return {"header": header, "body": b"x" * 1024, "peer": peer, "filter_type": "SINGLE_TAG"}


@needs_c
@pytest.mark.parametrize(
    "props",
    [
        None,
        "UNIQ_KEY\x01AC1100010A2B18B4AAC2725B37B80000",
        "KEYS\x01k1 other\x02TAGS\x01tagA\x02UNIQ_KEY\x01AC1100010A2B18B4AAC2725B37B80000",
        "WAIT\x01true\x02TAGS\x01TagA",  # what Java's Message carries by default
        "TAGS\x01TagA\x02WAIT\x01false",
        "WAIT\x01true",
        "DELAY\x010\x02KEYS\x01order-1\x02WAIT\x01true\x02UNIQ_KEY\x01X",
    ],
)
@pytest.mark.parametrize("peer", ["127.0.0.1:5555", "::1:6666"])
def test_what_clients_send_takes_the_c_path(props: str | None, peer: str) -> None:
    """The C path must not quietly hand every message back: what clients send (Java's
    WAIT=true, keys, tags, a UNIQ_KEY) is built in C, byte for byte what Python builds,
    with WAIT left out of the stored properties and CLUSTER added."""
    request = _request(props, peer=peer, reconsume=2)
    assert _took_c_path(request)
    c = build(request)
    with _pure_python():
        py = build(request)
    assert_same(c, py)
    assert isinstance(c, tuple)
    (record,), wait = c
    assert wait == ("WAIT\x01false" not in (props or ""))
    text = record.facts.properties if record.facts is not None else ""
    assert "WAIT" not in text and text.endswith("CLUSTER\x01DefaultCluster")


@pytest.mark.parametrize(
    "props",
    [
        "DELAY\x013",  # rewritten to SCHEDULE_TOPIC_XXXX
        "TRAN_MSG\x01true",  # a half message
        "TIMER_DELAY_SEC\x0110",  # a timer
        "CLUSTER\x01Other",  # a name the broker adds
        "TAGS\x01标签",  # not ASCII
        "TAGS\x01a\x02TAGS\x01b",  # a repeated name
    ],
)
def test_what_python_must_decide_is_left_to_it(props: str) -> None:
    assert not _took_c_path(_request(props))


def test_the_pure_python_run_builds_every_record_in_python() -> None:
    if PURE:
        assert not _took_c_path(_request("TAGS\x01TagA"))
