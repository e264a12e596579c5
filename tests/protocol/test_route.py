"""Name-server bodies (docs/formats.md §3.4, §3.6): TopicRouteData, REGISTER_BROKER's body, DataVersion, TopicConfig."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.route import (
    MASTER_ID,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicRouteData,
)

PROPS = settings(max_examples=100, derandomize=True, deadline=None)

# The TopicRouteData example of docs/formats.md §3.4, minified.
FACTS_ROUTE_JSON = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
    b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)

# What a 4.9.0 name server (plain fastjson, no QuoteFieldNames for map keys) sends a client whose
# version is below V4_9_4: Long brokerAddrs keys unquoted.
JAVA_490_ROUTE_BODY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"},{"brokerAddrs":{0:"10.0.0.3:10911"},"brokerName":"broker-b",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"orderTopicConf":"broker-a:4;broker-b:4",'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
    b'{"brokerName":"broker-b","perm":4,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":2}]}'
)


def facts_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6, topic_sys_flag=0)],
        broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})],
    )


# -- TopicRouteData --------------------------------------------------------------------------------


def test_route_encode_matches_facts_example() -> None:
    assert facts_route().encode() == FACTS_ROUTE_JSON


def test_route_encode_types_for_cpp_client() -> None:
    doc = json.loads(facts_route().encode())
    qd = doc["queueDatas"][0]
    for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
        assert type(qd[key]) is int  # the C++ client reads these with asInt()
    addrs = doc["brokerDatas"][0]["brokerAddrs"]
    assert list(addrs) == ["0", "1"]  # quoted keys: valid JSON, accepted by fastjson and jsoncpp
    assert doc["filterServerTable"] == {}
    assert "orderTopicConf" not in doc


def test_route_encode_is_standard_json_and_sorted() -> None:
    raw = facts_route().encode()
    doc = json.loads(raw)  # the standard library parser accepts it
    assert list(doc) == sorted(doc)
    assert list(doc["queueDatas"][0]) == sorted(doc["queueDatas"][0])
    assert list(doc["brokerDatas"][0]) == sorted(doc["brokerDatas"][0])


def test_route_order_topic_conf_written_only_when_set() -> None:
    route = facts_route()
    route.order_topic_conf = "broker-a:4"
    assert json.loads(route.encode())["orderTopicConf"] == "broker-a:4"
    route.order_topic_conf = ""
    assert "orderTopicConf" not in json.loads(route.encode())


def test_route_decode_facts_example() -> None:
    route = TopicRouteData.decode(FACTS_ROUTE_JSON)
    assert route == facts_route()
    assert route.broker_datas[0].master_addr() == "10.0.0.1:10911"


def test_route_decode_java_490_body_with_unquoted_broker_ids() -> None:
    route = TopicRouteData.decode(JAVA_490_ROUTE_BODY)
    assert route.order_topic_conf == "broker-a:4;broker-b:4"
    assert route.queue_datas == [
        QueueData("broker-a", 4, 4, 6, 0),
        QueueData("broker-b", 8, 2, 4, 0),
    ]
    a, b = route.broker_datas
    assert a == BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})
    assert b.broker_addrs == {0: "10.0.0.3:10911"}
    assert all(isinstance(k, int) for k in a.broker_addrs)  # brokerIds come back as ints
    assert b.master_addr() == "10.0.0.3:10911"


def test_route_decode_pretty_printed_unquoted_body() -> None:
    body = (
        b'{\n\t"brokerDatas":[\n\t\t{\n\t\t\t"brokerAddrs":{\n\t\t\t\t0:"h:1",\n\t\t\t\t2:"h:3"\n\t\t\t},'
        b'\n\t\t\t"brokerName":"b","cluster":"c"\n\t\t}\n\t],\n\t"queueDatas":[]\n}'
    )
    route = TopicRouteData.decode(body)
    assert route.broker_datas == [BrokerData("c", "b", {0: "h:1", 2: "h:3"})]
    assert route.queue_datas == []


def test_broker_without_master_has_no_master_addr() -> None:
    bd = BrokerData("c", "b", {1: "10.0.0.2:10911"})
    assert bd.master_addr() is None
    assert MASTER_ID == 0


def test_route_round_trip_many_broker_ids() -> None:
    route = TopicRouteData(
        [QueueData("b", 16, 16, PERM_READ | PERM_WRITE, 0)],
        [BrokerData("c", "b", {10: "h:10", 2: "h:2", 0: "h:0", 1: "h:1"})],
        "b:16",
    )
    raw = route.encode()
    assert set(json.loads(raw)["brokerDatas"][0]["brokerAddrs"]) == {"0", "1", "2", "10"}
    assert TopicRouteData.decode(raw) == route


def test_route_decode_defaults_for_missing_optional_fields() -> None:
    route = TopicRouteData.decode(b'{"queueDatas":[{"brokerName":"b"}],"brokerDatas":[{"brokerName":"b"}]}')
    assert route.queue_datas == [QueueData("b", 0, 0, 6, 0)]
    assert route.broker_datas == [BrokerData("", "b", {})]
    assert route.order_topic_conf is None
    assert TopicRouteData.decode(b"{}") == TopicRouteData()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"null",
        b"12",
        b'{"queueDatas":[{}]}',
        b'{"queueDatas":[{"brokerName":"b","perm":"rw"}]}',
        b'{"queueDatas":{"b":1}}',
        b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"master":"h:1"}}]}',
        b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":[1,2]}]}',
        b'{"brokerDatas":[5]}',
    ],
)
def test_route_decode_rejects_bad_bodies(body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        TopicRouteData.decode(body)


def test_perm_constants() -> None:
    assert (PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT) == (8, 4, 2, 1)


# -- DataVersion -----------------------------------------------------------------------------------


def test_data_version_equality_compares_both_fields() -> None:
    assert DataVersion(1000, 3) == DataVersion(1000, 3)
    assert DataVersion(1000, 3) != DataVersion(1000, 4)
    assert DataVersion(1000, 3) != DataVersion(1001, 3)
    assert DataVersion.from_json({"counter": 3, "timestamp": 1000}) == DataVersion(1000, 3)


def test_data_version_next_and_json() -> None:
    v = DataVersion(timestamp=1000, counter=3)
    n = v.next(2000)
    assert n == DataVersion(2000, 4)
    assert v == DataVersion(1000, 3)  # unchanged
    assert n.to_json() == {"counter": 4, "timestamp": 2000}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, DataVersion(0, 0)),
        ({}, DataVersion(0, 0)),
        ({"counter": 7, "timestamp": 1690000000000}, DataVersion(1690000000000, 7)),
        ({"counter": {"value": 9}, "timestamp": 5}, DataVersion(5, 9)),  # AtomicLong as an object
        ({"counter": "2", "timestamp": "3"}, DataVersion(3, 2)),  # fastjson accepts numbers as strings
    ],
)
def test_data_version_from_json(doc: dict[str, Any] | None, expected: DataVersion) -> None:
    assert DataVersion.from_json(doc) == expected


# -- TopicConfig / RegisterBrokerBody --------------------------------------------------------------

# The REGISTER_BROKER body of docs/formats.md §3.4, with the TopicConfig shape of §3.6.
FACTS_REGISTER_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":5,'
    b'"timestamp":1690000000000},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4},'
    b'"TBW102":{"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},'
    b'"%RETRY%cg":{"order":false,"perm":6,"readQueueNums":1,"topicFilterType":"MULTI_TAG",'
    b'"topicName":"%RETRY%cg","topicSysFlag":0,"writeQueueNums":1}}}}'
)


def test_register_body_decode_facts_example() -> None:
    body = RegisterBrokerBody.decode(FACTS_REGISTER_BODY)
    assert body.data_version == DataVersion(1690000000000, 5)
    assert body.filter_servers == []
    assert body.topic_configs == {
        "T": TopicConfig("T", 4, 4, 6, "SINGLE_TAG", 0, False),
        "TBW102": TopicConfig("TBW102", 8, 8, 7, "SINGLE_TAG", 0, False),
        "%RETRY%cg": TopicConfig("%RETRY%cg", 1, 1, 6, "MULTI_TAG", 0, False),
    }


def test_register_body_round_trip() -> None:
    original = RegisterBrokerBody(
        DataVersion(1690000000123, 42),
        {
            "A": TopicConfig("A", 4, 2, PERM_READ | PERM_WRITE, "SINGLE_TAG", 0, True),
            "B-b_%": TopicConfig("B-b_%", 1, 1, PERM_READ, "MULTI_TAG", 3, False),
        },
        ["10.0.0.9:30000"],
    )
    raw = original.encode()
    assert RegisterBrokerBody.decode(raw) == original
    doc = json.loads(raw)
    assert list(doc) == ["filterServerList", "topicConfigSerializeWrapper"]
    wrapper = doc["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"] == {"counter": 42, "timestamp": 1690000000123}
    assert wrapper["topicConfigTable"]["A"] == {
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "A",
        "topicSysFlag": 0,
        "writeQueueNums": 2,
    }


def test_register_body_encode_matches_facts_shape() -> None:
    body = RegisterBrokerBody(DataVersion(1690000000000, 5), {"T": TopicConfig("T", 4, 4)})
    assert body.encode() == (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":5,'
        b'"timestamp":1690000000000},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}}'
    )


def test_register_body_empty_and_defaults() -> None:
    assert RegisterBrokerBody.decode(b"") == RegisterBrokerBody(DataVersion(0, 0), {}, [])
    body = RegisterBrokerBody.decode(b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{}}}}')
    assert body.topic_configs == {"T": TopicConfig("T")}
    assert TopicConfig("T") == TopicConfig("T", 16, 16, 6, "SINGLE_TAG", 0, False)  # docs/formats.md §3.6 defaults


@pytest.mark.parametrize(
    "raw",
    [
        b"nope",
        b"[1]",
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":5}}}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}',
        b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x"}}}',
        b'{"topicConfigSerializeWrapper":[1]}',
    ],
)
def test_register_body_rejects_bad_bodies(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        RegisterBrokerBody.decode(raw)


def test_topic_config_json_uses_java_getter_names() -> None:
    tc = TopicConfig("T", 4, 4, 6, "MULTI_TAG", 1, True)
    assert tc.to_json() == {
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "MULTI_TAG",
        "topicName": "T",
        "topicSysFlag": 1,
        "writeQueueNums": 4,
    }
    assert TopicConfig.from_json(tc.to_json()) == tc


# -- properties ------------------------------------------------------------------------------------

_NAMES = st.text(min_size=1, max_size=12)
_SMALL = st.integers(0, 1024)
_LONG = st.integers(0, 2**63 - 1)


@st.composite
def _routes(draw: st.DrawFn) -> TopicRouteData:
    qds = draw(
        st.lists(
            st.builds(QueueData, _NAMES, _SMALL, _SMALL, st.integers(0, 15), st.integers(0, 2**31 - 1)),
            max_size=4,
        )
    )
    addrs = st.dictionaries(_LONG, _NAMES, max_size=4)
    bds = draw(st.lists(st.builds(BrokerData, _NAMES, _NAMES, addrs), max_size=4))
    conf = draw(st.none() | st.text(min_size=1, max_size=20))
    return TopicRouteData(qds, bds, conf)


@PROPS
@given(route=_routes())
def test_route_round_trip_property(route: TopicRouteData) -> None:
    raw = route.encode()
    json.loads(raw)  # always standard JSON
    assert TopicRouteData.decode(raw) == route


@PROPS
@given(route=_routes())
def test_route_decode_of_unquoted_rendering(route: TopicRouteData) -> None:
    """The same route rendered the fastjson way (bare brokerId keys) decodes to the same value."""
    doc = route.to_json()
    text = json.dumps(doc, ensure_ascii=False)
    for bd in doc["brokerDatas"]:
        quoted = json.dumps(bd["brokerAddrs"], ensure_ascii=False)
        pairs = [f"{k}:{json.dumps(v, ensure_ascii=False)}" for k, v in bd["brokerAddrs"].items()]
        bare = "{" + ",".join(pairs) + "}"
        text = text.replace(quoted, bare, 1)
    assert TopicRouteData.decode(text.encode()) == route


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "queueDatas",
                    "brokerDatas",
                    "brokerName",
                    "brokerAddrs",
                    "perm",
                    "readQueueNums",
                    "topicConfigSerializeWrapper",
                    "topicConfigTable",
                    "dataVersion",
                    "counter",
                    "timestamp",
                    "filterServerList",
                    "0",
                ]
            )
            | st.text(max_size=4),
            inner,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@PROPS
@given(doc=_ANY_JSON)
def test_decoders_raise_only_protocol_errors(doc: Any) -> None:
    raw = json.dumps(doc).encode()
    for decode in (TopicRouteData.decode, RegisterBrokerBody.decode):
        try:
            decode(raw)
        except RemoteProtocolError:
            pass
