"""MessageQueue-keyed bodies: written as fastjson writes them, read leniently."""

from __future__ import annotations

import pytest

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient, mq_list, mq_set, mq_table

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-a", 1)

# What a 4.9.7 broker sends for GET_TOPIC_STATS_INFO (fastjson, MessageQueue keys inline).
JAVA_TOPIC_STATS = (
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":0,'
    b'"maxOffset":0,"minOffset":0},{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
    b'{"lastUpdateTimestamp":1700000000000,"maxOffset":5,"minOffset":0}}}'
)


def test_mq_table_writes_inline_object_keys_sorted() -> None:
    body = fastjson.dumps({"consumeTps": 0.0, "offsetTable": mq_table({Q1: {"b": 2}, Q0: {"b": 1}})})
    assert body == (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"b":1},'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"b":2}}}'
    )
    assert fastjson.dumps({"offsetTable": mq_table({})}) == b'{"offsetTable":{}}'


def test_lenient_reader_reads_java_output_and_round_trips() -> None:
    table = decode_mq_table(loads_lenient(JAVA_TOPIC_STATS)["offsetTable"])
    assert table[Q0]["maxOffset"] == 5 and table[Q1]["maxOffset"] == 0
    ours = fastjson.dumps({"offsetTable": mq_table(table)})
    assert decode_mq_table(loads_lenient(ours)["offsetTable"]) == table


def test_lenient_reader_accepts_json_quirks() -> None:
    doc = loads_lenient(' {"a" : [1, -2.5, 3e2, true, false, null, "x\\"y"], 0:{1:"v"}, "k":{}} \n')
    assert doc == {"a": [1, -2.5, 300.0, True, False, None, 'x"y'], "0": {"1": "v"}, "k": {}}
    # Keys given as JSON text in strings also decode as queues.
    stringly = b'{"t":{"{\\"brokerName\\":\\"broker-a\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}":7}}'
    assert decode_mq_table(loads_lenient(stringly)["t"]) == {Q0: 7}
    assert loads_lenient("[]") == [] and loads_lenient("{}") == {}


@pytest.mark.parametrize(
    "bad",
    [b"", b"{", b'{"a":1,}', b'{"a" 1}', b"[1 2]", b'{"a":1} x', b'"open', b"{null:1}", b"\xff", b"[" * 100],
)
def test_lenient_reader_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        loads_lenient(bad)


def test_queue_sets() -> None:
    items = [Q1.to_json(), Q0.to_json(), {"brokerName": "broker-a", "queueId": "1", "topic": "T"}]
    assert mq_set(items) == {Q0, Q1}
    assert mq_set(None) == set()
    assert mq_list({Q1, Q0}) == [Q0.to_json(), Q1.to_json()]
    for bad in ({"a": 1}, [1], [{"topic": "T"}], [{"topic": "T", "queueId": "x"}]):
        with pytest.raises(RemoteProtocolError):
            mq_set(bad)
    with pytest.raises(RemoteProtocolError):
        MessageQueue.from_key("not json")
    with pytest.raises(RemoteProtocolError):
        decode_mq_table([1])
