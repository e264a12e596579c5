"""The name server over the wire: NamesrvApp in-process on a free port, real RemotingClients.

Codes and remarks follow J namesrv/processor/DefaultRequestProcessor.java (4.9.7):
REGISTER_BROKER checks ``bodyCrc32`` (crc32 & 0x7FFFFFFF; 0 = unchecked) and answers
"crc32 not match"; GET_ROUTEINFO_BY_TOPIC answers TOPIC_NOT_EXIST (17) with "No topic route
info in name server for the topic: <topic>..."; GET_KV_CONFIG misses are QUERY_NOT_FOUND (22).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from ledgermq.clock import SYSTEM_CLOCK, Clock, ManualClock
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig, TopicRouteData

HOST = "127.0.0.1"
CLUSTER = "DefaultCluster"
A0, A1, B0 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911"


def config(tmp_path: Path, **overrides: Any) -> NamesrvConfig:
    return NamesrvConfig(
        **{
            "listen_host": HOST,
            "listen_port": 0,
            "kv_config_path": str(tmp_path / "namesrv" / "kvConfig.json"),
            **overrides,
        }
    )


@contextlib.asynccontextmanager
async def namesrv(cfg: NamesrvConfig, clock: Clock = SYSTEM_CLOCK) -> AsyncIterator[NamesrvApp]:
    app = NamesrvApp(cfg, clock)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()


def ns_addr(app: NamesrvApp) -> str:
    return f"{HOST}:{app.port}"


async def call(
    c: RemotingClient, app: NamesrvApp, code: int, fields: dict[str, Any] | None = None, body: bytes = b""
) -> RemotingCommand:
    return await c.invoke(ns_addr(app), RemotingCommand.request(code, fields, body), 3)


def register_request(
    addr: str,
    *,
    name: str = "broker-a",
    bid: int = 0,
    cluster: str = CLUSTER,
    tcs: dict[str, TopicConfig] | None = None,
    version: DataVersion | None = None,
    crc: int | None = None,
    drop: str | None = None,
) -> RemotingCommand:
    if tcs is None:
        tcs = {"T": TopicConfig("T", 4, 4, 6), "TBW102": TopicConfig("TBW102", 8, 8, 7)}
    body = RegisterBrokerBody(version or DataVersion(1_700_000_000_000, 1), tcs).encode()
    fields: dict[str, Any] = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": addr.replace(":10911", ":10912"),
        "brokerId": bid,
        "compressed": "false",
        "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
    }
    if drop is not None:
        del fields[drop]
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)


async def register(c: RemotingClient, app: NamesrvApp, addr: str, **kw: Any) -> RemotingCommand:
    return await c.invoke(ns_addr(app), register_request(addr, **kw), 3)


async def route(c: RemotingClient, app: NamesrvApp, topic: str) -> RemotingCommand:
    return await call(c, app, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


async def wait_until(pred: Callable[[], Any], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


# -- registration and routes -------------------------------------------------------------
def test_register_broker_then_route_lookup(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker, client() as producer:
            response = await register(broker, app, A0)
            assert response.code == 0, response.remark
            # A master gets no master info back (J: only slaves get haServerAddr/masterAddr).
            assert "masterAddr" not in response.ext_fields and "haServerAddr" not in response.ext_fields
            assert response.body == b""  # no ORDER_TOPIC_CONFIG entries yet

            answer = await route(producer, app, "T")
            assert answer.code == 0, answer.remark
            doc = orjson.loads(answer.body)  # standard JSON, quoted brokerId keys, numeric perms
            assert doc == {
                "brokerDatas": [{"brokerAddrs": {"0": A0}, "brokerName": "broker-a", "cluster": CLUSTER}],
                "filterServerTable": {},
                "queueDatas": [
                    {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                     "writeQueueNums": 4},
                ],
            }  # fmt: skip
            tbw = TopicRouteData.decode((await route(producer, app, "TBW102")).body)
            assert tbw.queue_datas[0].perm == 7

    asyncio.run(main())


def test_cpp_style_route_request_gets_a_cpp_readable_answer(tmp_path: Path) -> None:
    """A GET_ROUTEINFO_BY_TOPIC as the C++ client writes it (jsoncpp FastWriter: trailing newline,
    remark "", version 333, AccessKey/OnsChannel/Signature) gets an answer C++ can read: JSON
    header (type byte 0), numeric code/opaque/flag, the opaque echoed, an extFields object, and
    a route body with numeric queue counts and perm (docs/formats.md §1, §3.4)."""

    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker:
            assert (await register(broker, app, A0)).code == 0
            header = (
                b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"c2ln",'
                b'"topic":"T"},"flag":0,"language":"CPP","opaque":12345,"remark":"","version":333}\n'
            )
            reader, writer = await asyncio.open_connection(HOST, app.port)
            try:
                writer.write(struct.pack(">ii", 4 + len(header), len(header)) + header)
                async with asyncio.timeout(10):
                    (length,) = struct.unpack(">i", await reader.readexactly(4))
                    frame = await reader.readexactly(length)
            finally:
                writer.close()
            (word,) = struct.unpack(">i", frame[:4])
            assert word >> 24 == 0, "C++ reads the whole header word as the length: JSON only"
            doc = orjson.loads(frame[4 : 4 + word])
            assert (doc["code"], doc["opaque"], doc["flag"]) == (0, 12345, 1)
            assert all(type(doc[k]) is int for k in ("code", "opaque", "flag"))
            assert isinstance(doc["extFields"], dict)
            assert all(isinstance(v, str) for v in doc["extFields"].values())
            assert isinstance(doc.get("remark", ""), str)
            body = orjson.loads(frame[4 + word :])
            queue = body["queueDatas"][0]
            assert all(type(queue[k]) is int for k in ("readQueueNums", "writeQueueNums", "perm"))
            assert body["brokerDatas"][0]["brokerAddrs"] == {"0": A0}
            assert "orderTopicConf" not in body

    asyncio.run(main())


def test_route_for_two_broker_groups_over_the_wire(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as a, client() as b, client() as c:
            assert (await register(a, app, A0, name="broker-a")).code == 0
            assert (await register(a, app, A1, name="broker-a", bid=1)).code == 0
            tcs = {"T": TopicConfig("T", 8, 8, 6)}
            assert (await register(b, app, B0, name="broker-b", tcs=tcs)).code == 0
            data = TopicRouteData.decode((await route(c, app, "T")).body)
            assert {bd.broker_name: bd.broker_addrs for bd in data.broker_datas} == {
                "broker-a": {0: A0, 1: A1},
                "broker-b": {0: B0},
            }
            assert {q.broker_name: (q.read_queue_nums, q.write_queue_nums) for q in data.queue_datas} == {
                "broker-a": (4, 4),
                "broker-b": (8, 8),
            }
            info = orjson.loads((await call(c, app, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
            assert info["clusterAddrTable"] == {CLUSTER: ["broker-a", "broker-b"]}
            assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": A0, "1": A1}
            topics = orjson.loads((await call(c, app, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
            assert topics == {"topicList": ["T", "TBW102"]}
            by_cluster = await call(c, app, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER})
            assert orjson.loads(by_cluster.body) == {"topicList": ["T", "TBW102"]}

    asyncio.run(main())


def test_register_broker_with_a_java_shaped_body(tmp_path: Path) -> None:
    """The body as a Java 4.9.x broker's fastjson writes it (RegisterBrokerBody, not compressed)."""
    body = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
        b'"timestamp":1700000000123},"topicConfigTable":{"TopicTest":{"order":false,"perm":6,'
        b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,'
        b'"writeQueueNums":4},"%RETRY%group":{"order":false,"perm":6,"readQueueNums":1,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%group","topicSysFlag":0,"writeQueueNums":1}}}}'
    )

    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            fields = {
                "brokerName": "broker-a",
                "brokerAddr": A0,
                "clusterName": CLUSTER,
                "haServerAddr": "10.0.0.1:10912",
                "brokerId": "0",
                "compressed": "false",
                "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
            }
            response = await call(c, app, RequestCode.REGISTER_BROKER, fields, body)
            assert response.code == 0, response.remark
            data = TopicRouteData.decode((await route(c, app, "TopicTest")).body)
            assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in data.queue_datas] == [(8, 4, 6)]
            assert (await route(c, app, "%RETRY%group")).code == 0
            assert app.routes.live[A0].data_version == DataVersion(1700000000123, 3)

    asyncio.run(main())


def test_compressed_registration_is_refused_not_misread(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            request = register_request(A0)
            request.ext_fields["compressed"] = "true"
            request.body = zlib.compress(request.body, 9)
            request.ext_fields["bodyCrc32"] = str(zlib.crc32(request.body) & 0x7FFFFFFF)
            response = await c.invoke(ns_addr(app), request, 3)
            assert response.code == 1
            assert (await route(c, app, "T")).code == 17

    asyncio.run(main())


def test_wrong_crc_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            request = register_request(A0)
            good = int(request.ext_fields["bodyCrc32"])
            response = await register(c, app, A0, crc=(good + 1) & 0x7FFFFFFF)
            assert (response.code, response.remark) == (1, "crc32 not match")
            assert (await route(c, app, "T")).code == 17
            # bodyCrc32 = 0 means "not checked" (J: getBodyCrc32() != 0).
            assert (await register(c, app, A0, crc=0)).code == 0
            assert (await route(c, app, "T")).code == 0

    asyncio.run(main())


def test_unknown_topic_is_topic_not_exist_with_a_remark(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            response = await route(c, app, "NoSuchTopic")
            assert response.code == 17
            assert response.remark is not None
            assert response.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")
            assert response.body == b""

    asyncio.run(main())


def test_slave_registration_answer_carries_the_masters_addresses(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as master, client() as slave:
            alone = await register(slave, app, A1, bid=1)
            assert alone.code == 0
            assert alone.ext_fields.get("masterAddr") is None and alone.ext_fields.get("haServerAddr") is None
            assert (await register(master, app, A0)).code == 0
            answer = await register(slave, app, A1, bid=1)
            assert answer.code == 0
            assert answer.ext_fields["masterAddr"] == A0
            assert answer.ext_fields["haServerAddr"] == "10.0.0.1:10912"

    asyncio.run(main())


@pytest.mark.parametrize("missing", ["brokerName", "brokerAddr", "clusterName", "brokerId"])
def test_register_broker_missing_header_field_names_it(tmp_path: Path, missing: str) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            response = await c.invoke(ns_addr(app), register_request(A0, drop=missing), 3)
            assert response.code == 1
            assert response.remark is not None and missing in response.remark
            assert (await route(c, app, "T")).code == 17

    asyncio.run(main())


@pytest.mark.parametrize(
    ("code", "fields", "missing"),
    [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k"}, "value"),
        (RequestCode.GET_KV_CONFIG, {"namespace": "ns"}, "key"),
        (RequestCode.DELETE_KV_CONFIG, {"key": "k"}, "namespace"),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": "a", "brokerAddr": A0, "clusterName": CLUSTER}, "brokerId"),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, "brokerName"),
    ],
)
def test_missing_header_fields_get_system_error_naming_the_field(
    tmp_path: Path, code: int, fields: dict[str, str], missing: str
) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            response = await call(c, app, code, fields)
            assert response.code == 1
            assert response.remark is not None and missing in response.remark

    asyncio.run(main())


def test_non_integer_broker_id_is_a_system_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            request = register_request(A0)
            request.ext_fields["brokerId"] = "zero"
            response = await c.invoke(ns_addr(app), request, 3)
            assert response.code == 1 and response.remark is not None and "brokerId" in response.remark

    asyncio.run(main())


def test_undecodable_register_body_is_a_system_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            request = register_request(A0)
            request.body = b"{not json"
            request.ext_fields["bodyCrc32"] = "0"
            response = await c.invoke(ns_addr(app), request, 3)
            assert response.code == 1
            assert (await route(c, app, "T")).code == 17

    asyncio.run(main())


def test_unsupported_code_on_the_name_server(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            response = await call(c, app, RequestCode.SEND_MESSAGE_V2)
            assert (response.code, response.remark) == (3, " request type 310 not supported")

    asyncio.run(main())


def test_unregister_broker_removes_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker, client() as c:
            assert (await register(broker, app, A0)).code == 0
            fields = {"brokerName": "broker-a", "brokerAddr": A0, "clusterName": CLUSTER, "brokerId": 0}
            assert (await call(broker, app, RequestCode.UNREGISTER_BROKER, fields)).code == 0
            assert (await route(c, app, "T")).code == 17

    asyncio.run(main())


def test_delete_topic_in_namesrv(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker, client() as c:
            assert (await register(broker, app, A0)).code == 0
            assert (await call(c, app, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"})).code == 0
            assert (await route(c, app, "T")).code == 17
            assert (await route(c, app, "TBW102")).code == 0
            topics = orjson.loads((await call(c, app, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
            assert topics == {"topicList": ["TBW102"]}

    asyncio.run(main())


def test_write_perm_wipe_and_add_over_the_wire(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker, client() as c:
            assert (await register(broker, app, A0)).code == 0
            wiped = await call(c, app, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
            assert (wiped.code, wiped.ext_fields["wipeTopicCount"]) == (0, "2")
            assert TopicRouteData.decode((await route(c, app, "T")).body).queue_datas[0].perm == 4
            added = await call(c, app, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
            assert (added.code, added.ext_fields["addTopicCount"]) == (0, "2")
            assert TopicRouteData.decode((await route(c, app, "T")).body).queue_datas[0].perm == 6

    asyncio.run(main())


def test_query_data_version(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker:
            v1 = DataVersion(1_700_000_000_000, 1)
            assert (await register(broker, app, A0, version=v1)).code == 0
            same = await call(broker, app, RequestCode.QUERY_DATA_VERSION, {
                "brokerName": "broker-a", "brokerAddr": A0, "clusterName": CLUSTER, "brokerId": 0,
            }, orjson.dumps(v1.to_json()))  # fmt: skip
            assert (same.code, same.ext_fields["changed"]) == (0, "false")
            newer = await call(broker, app, RequestCode.QUERY_DATA_VERSION, {
                "brokerName": "broker-a", "brokerAddr": A0, "clusterName": CLUSTER, "brokerId": 0,
            }, orjson.dumps(DataVersion(v1.timestamp, 2).to_json()))  # fmt: skip
            assert (newer.code, newer.ext_fields["changed"]) == (0, "true")

    asyncio.run(main())


# -- KV config -----------------------------------------------------------------------------
def test_kv_put_get_delete_list_and_persistence_across_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    kv_file = Path(cfg.kv_config_path)

    async def first_run() -> None:
        async with namesrv(cfg) as app, client() as c:
            for ns, k, v in [("ns1", "k1", "v1"), ("ns1", "k2", "v2"), ("ns2", "k", "x y z"), ("ns1", "k1", "v1b")]:
                put = await call(c, app, RequestCode.PUT_KV_CONFIG, {"namespace": ns, "key": k, "value": v})
                assert put.code == 0
            got = await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns1", "key": "k1"})
            assert (got.code, got.ext_fields["value"]) == (0, "v1b")
            miss = await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns1", "key": "nope"})
            assert (miss.code, miss.remark) == (22, "No config item, Namespace: ns1 Key: nope")
            listed = await call(c, app, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns1"})
            assert listed.code == 0
            assert orjson.loads(listed.body) == {"table": {"k1": "v1b", "k2": "v2"}}
            empty = await call(c, app, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "none"})
            assert (empty.code, empty.remark) == (22, "No config item, Namespace: none")
            deleted = await call(c, app, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns1", "key": "k2"})
            assert deleted.code == 0
            assert (await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns1", "key": "k2"})).code == 22
            # Deleting what is not there is fine.
            assert (await call(c, app, RequestCode.DELETE_KV_CONFIG, {"namespace": "zz", "key": "k"})).code == 0

    async def second_run() -> None:
        async with namesrv(cfg) as app, client() as c:
            got = await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns1", "key": "k1"})
            assert (got.code, got.ext_fields["value"]) == (0, "v1b")
            got = await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns2", "key": "k"})
            assert (got.code, got.ext_fields["value"]) == (0, "x y z")
            assert (await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ns1", "key": "k2"})).code == 22

    asyncio.run(first_run())
    # RocketMQ's kvConfig.json layout: {"configTable": {namespace: {key: value}}}.
    assert orjson.loads(kv_file.read_bytes()) == {"configTable": {"ns1": {"k1": "v1b"}, "ns2": {"k": "x y z"}}}
    asyncio.run(second_run())


def test_kv_config_written_by_java_is_loaded(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    kv_file = Path(cfg.kv_config_path)
    kv_file.parent.mkdir(parents=True)
    kv_file.write_text('{\n\t"configTable":{\n\t\t"ORDER_TOPIC_CONFIG":{\n\t\t\t"T":"broker-a:4"\n\t\t}\n\t}\n}')

    async def main() -> None:
        async with namesrv(cfg) as app, client() as c:
            got = await call(c, app, RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
            assert (got.code, got.ext_fields["value"]) == (0, "broker-a:4")

    asyncio.run(main())


def test_order_topic_config_appears_in_routes_and_register_answers(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as broker, client() as c:
            assert (await register(broker, app, A0)).code == 0
            plain = TopicRouteData.decode((await route(c, app, "T")).body)
            assert plain.order_topic_conf is None
            assert "orderTopicConf" not in orjson.loads((await route(c, app, "T")).body)
            put = await call(c, app, RequestCode.PUT_KV_CONFIG, {
                "namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4",
            })  # fmt: skip
            assert put.code == 0
            doc = orjson.loads((await route(c, app, "T")).body)
            assert doc["orderTopicConf"] == "broker-a:4"
            assert "orderTopicConf" not in orjson.loads((await route(c, app, "TBW102")).body)
            # A broker's registration answer carries the ORDER_TOPIC_CONFIG table (KVTable body).
            answer = await register(broker, app, A0)
            assert orjson.loads(answer.body) == {"table": {"T": "broker-a:4"}}

    asyncio.run(main())


# -- broker liveness -----------------------------------------------------------------------
def test_closed_broker_connection_removes_its_routes(tmp_path: Path) -> None:
    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            broker_a, broker_b = RemotingClient(), RemotingClient()
            try:
                assert (await register(broker_a, app, A0, name="broker-a")).code == 0
                assert (await register(broker_b, app, B0, name="broker-b")).code == 0
                assert len(TopicRouteData.decode((await route(c, app, "T")).body).broker_datas) == 2
                await broker_a.close()

                async def only_b() -> bool:
                    r = await route(c, app, "T")
                    names = [bd.broker_name for bd in TopicRouteData.decode(r.body).broker_datas]
                    return r.code == 0 and names == ["broker-b"]

                await wait_until(only_b, 10.0, "broker-a's routes to go with its connection")
                await broker_b.close()

                async def gone() -> bool:
                    return (await route(c, app, "T")).code == 17

                await wait_until(gone, 10.0, "the last broker's routes to go")
                info = orjson.loads((await call(c, app, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
                assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}
            finally:
                await broker_a.close()
                await broker_b.close()

    asyncio.run(main())


def test_registration_behind_a_malformed_frame_does_not_outlive_its_connection(tmp_path: Path) -> None:
    """A frame the server cannot parse closes the connection; a REGISTER_BROKER that arrived
    behind it in the same read is still processed after the connection-close cleanup ran, so the
    broker stays routable with a dead connection until the 120 s expiry (same root cause as
    tests/net/test_hostile_clients.py::test_requests_behind_an_unparseable_frame_are_not_processed)."""

    async def main() -> None:
        async with namesrv(config(tmp_path)) as app, client() as c:
            reader, writer = await asyncio.open_connection(HOST, app.port)
            try:
                garbage = b"\x00\x00\x00\x0b\x00\x00\x00\x07garbage"
                writer.write(garbage + register_request(A0).encode())
                async with asyncio.timeout(10):
                    while await reader.read(65536):
                        pass
            finally:
                writer.close()

            async def gone() -> bool:
                return (await route(c, app, "T")).code == 17

            await wait_until(gone, 10.0, "no route from a broker whose connection is closed")

    asyncio.run(main())


def test_a_broker_that_stops_registering_expires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expiry goes by the name server's clock, here a manual one: the scan runs every 50 ms
    for real, but a broker is silent only as long as the test says, however slowly the
    machine gets round to the next registration."""

    async def main() -> None:
        clock = ManualClock()
        cfg = config(tmp_path, broker_expiry_ms=400, scan_interval_ms=50)
        async with namesrv(cfg, clock) as app, client() as broker, client() as c:
            scans = 0
            scan = RouteInfo.scan_not_active

            def counting_scan(self: RouteInfo, now_ms: int) -> list[str]:
                nonlocal scans
                scans += 1
                return scan(self, now_ms)

            monkeypatch.setattr(RouteInfo, "scan_not_active", counting_scan)

            async def two_more_scans() -> None:
                target = scans + 2

                async def scanned() -> bool:
                    return scans >= target

                await wait_until(scanned, 10.0, "two expiry scans")

            # Re-registering every 100 ms keeps it alive well past the expiry time.
            for _ in range(10):
                assert (await register(broker, app, A0)).code == 0
                clock.advance(0.1)
                await two_more_scans()
                assert (await route(c, app, "T")).code == 0
            # Then it goes silent (connection still open): kept until its expiry time (400 ms)...
            conn = await broker.connection(ns_addr(app))
            clock.advance(0.25)  # 350 ms since the last registration
            await two_more_scans()
            assert (await route(c, app, "T")).code == 0 and not conn.closed.is_set()
            # ... and gone once it is past.
            clock.advance(0.1)

            async def gone() -> bool:
                return (await route(c, app, "T")).code == 17

            await wait_until(gone, 10.0, "the silent broker to expire")
            # Expiry removed it, then closed its connection as RocketMQ's scanNotActiveBroker
            # does: the broker reconnects and so knows to send its full table, not increments.
            async with asyncio.timeout(10.0):
                await conn.closed.wait()

    asyncio.run(main())
