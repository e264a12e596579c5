"""Admin processors against a real broker: topics, groups, offsets, stats, config."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ledgermq.broker.metadata_log import read_current
from ledgermq.config import BrokerRole
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from tests.broker.harness import Harness, running_broker

TOPIC_HEADER: dict[str, Any] = {
    "defaultTopic": "TBW102",
    "readQueueNums": 4,
    "writeQueueNums": 4,
    "perm": 6,
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": 0,
    "order": "false",
}


async def create_topic(h: Harness, topic: str, **changes: Any) -> int:
    resp = await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**TOPIC_HEADER, "topic": topic, **changes})
    return resp.code


async def all_topics(h: Harness) -> dict[str, Any]:
    resp = await h.call(RequestCode.GET_ALL_TOPIC_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    doc: dict[str, Any] = fastjson.loads(resp.body)
    return doc


async def all_groups(h: Harness) -> dict[str, Any]:
    resp = await h.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    doc: dict[str, Any] = fastjson.loads(resp.body)
    return doc


async def commit_offset(h: Harness, group: str, topic: str, queue_id: int, offset: int) -> None:
    header = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}
    resp = await h.call(RequestCode.UPDATE_CONSUMER_OFFSET, header)
    assert resp.code == ResponseCode.SUCCESS


# -- topics -----------------------------------------------------------------------------
def test_create_topic_shows_in_all_topic_config_and_topics_json(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            before = (await all_topics(h))["dataVersion"]["counter"]
            code = await create_topic(
                h, "Orders", readQueueNums=4, writeQueueNums=2, topicFilterType="MULTI_TAG", order="true"
            )
            assert code == ResponseCode.SUCCESS
            doc = await all_topics(h)
            assert doc["topicConfigTable"]["Orders"] == {
                "order": False,  # 4.9.7 does not store the header's `order`
                "perm": 6,
                "readQueueNums": 4,
                "topicFilterType": "MULTI_TAG",
                "topicName": "Orders",
                "topicSysFlag": 0,
                "writeQueueNums": 2,
            }
            assert doc["dataVersion"]["counter"] == before + 1
            assert "TBW102" in doc["topicConfigTable"]
            on_disk = read_current(tmp_path / "config" / "topics.json", "topicConfigTable")
            assert on_disk["topicConfigTable"]["Orders"]["writeQueueNums"] == 2

            # Updating replaces the config; C++-style numeric header values are fine.
            assert await create_topic(h, "Orders", readQueueNums=8, writeQueueNums=8, perm=4) == 0
            updated = (await all_topics(h))["topicConfigTable"]["Orders"]
            assert (updated["readQueueNums"], updated["perm"], updated["topicFilterType"]) == (8, 4, "SINGLE_TAG")
            # A retry topic may be managed like any other.
            assert await create_topic(h, "%RETRY%cg", readQueueNums=1, writeQueueNums=1) == 0

    asyncio.run(main())


def test_create_topic_refuses_bad_and_system_names(tmp_path: Path) -> None:
    refused = {
        "": "The specified topic is blank.",
        "bad topic": "illegal characters",
        "caf\u00e9": "illegal characters",
        "x" * 128: "longer than topic max length",
        "TBW102": "conflict with system topic",
        "SCHEDULE_TOPIC_XXXX": "conflict with system topic",
        "RMQ_SYS_TRANS_HALF_TOPIC": "conflict with system topic",
        "rmq_sys_mine": "conflict with system topic",
        "TestCluster": "conflict with system topic",
        "broker-a": "conflict with system topic",
        "TestCluster_REPLY_TOPIC": "conflict with system topic",
    }

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            for topic, remark in refused.items():
                resp = await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**TOPIC_HEADER, "topic": topic})
                assert resp.code == ResponseCode.SYSTEM_ERROR, topic
                assert remark in (resp.remark or ""), (topic, resp.remark)
            assert await create_topic(h, "x" * 127) == ResponseCode.SUCCESS

            missing = {k: v for k, v in TOPIC_HEADER.items() if k != "readQueueNums"}
            resp = await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**missing, "topic": "T1"})
            assert resp.code == ResponseCode.SYSTEM_ERROR and "readQueueNums" in (resp.remark or "")
            resp = await h.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**TOPIC_HEADER, "topic": "T1", "perm": "rw"})
            assert resp.code == ResponseCode.SYSTEM_ERROR and "perm" in (resp.remark or "")
            assert await create_topic(h, "T1", topicFilterType="WHATEVER") == ResponseCode.SYSTEM_ERROR
            assert await create_topic(h, "T1", writeQueueNums=-1) == ResponseCode.SYSTEM_ERROR
            assert "T1" not in (await all_topics(h))["topicConfigTable"]

    asyncio.run(main())


def test_delete_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await create_topic(h, "Gone") == ResponseCode.SUCCESS
            version = (await all_topics(h))["dataVersion"]["counter"]
            resp = await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"})
            assert resp.code == ResponseCode.SUCCESS
            doc = await all_topics(h)
            assert "Gone" not in doc["topicConfigTable"]
            assert doc["dataVersion"]["counter"] == version + 1
            on_disk = read_current(tmp_path / "config" / "topics.json", "topicConfigTable")
            assert "Gone" not in on_disk["topicConfigTable"]
            # Deleting an unknown topic is not an error; system topics are protected.
            assert (await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Never"})).code == 0
            resp = await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
            assert resp.code == ResponseCode.SYSTEM_ERROR and "system topic" in (resp.remark or "")
            assert "TBW102" in (await all_topics(h))["topicConfigTable"]
            resp = await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "no way"})
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert (await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {})).code == ResponseCode.SYSTEM_ERROR

    asyncio.run(main())


def test_topics_and_groups_survive_a_restart(tmp_path: Path) -> None:
    group = fastjson.dumps({"groupName": "kept", "retryMaxTimes": 5, "retryQueueNums": 2})

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await create_topic(h, "Kept", readQueueNums=3, writeQueueNums=3) == 0
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group)).code == 0
            assert await create_topic(h, "Dropped") == 0
            assert (await h.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Dropped"})).code == 0
            version = (await all_topics(h))["dataVersion"]
        async with running_broker(tmp_path) as h:
            doc = await all_topics(h)
            assert doc["topicConfigTable"]["Kept"]["readQueueNums"] == 3
            assert "Dropped" not in doc["topicConfigTable"]
            assert doc["dataVersion"] == version
            kept = (await all_groups(h))["subscriptionGroupTable"]["kept"]
            assert (kept["retryMaxTimes"], kept["retryQueueNums"]) == (5, 2)

    asyncio.run(main())


def test_changes_are_refused_on_a_slave(tmp_path: Path) -> None:
    changes: list[tuple[int, dict[str, Any], bytes]] = [
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {**TOPIC_HEADER, "topic": "T"}, b""),
        (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, b""),
        (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b'{"groupName":"g"}'),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"}, b""),
    ]

    async def main() -> None:
        async with running_broker(tmp_path, store={"broker_role": BrokerRole.SLAVE}, broker_id=1) as h:
            for code, header, body in changes:
                resp = await h.call(code, header, body)
                assert resp.code == ResponseCode.SYSTEM_ERROR, code
                assert "from slave broker" in (resp.remark or "")
            # Reads (what tools and slave sync ask) still work.
            assert (await h.call(RequestCode.GET_ALL_TOPIC_CONFIG)).code == ResponseCode.SUCCESS
            assert (await h.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_topic_stats(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await create_topic(h, "Stats", readQueueNums=2, writeQueueNums=2) == 0
            for _ in range(3):
                await h.send("Stats", queue_id=0)
            await h.dispatched()
            resp = await h.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Stats"})
            assert resp.code == ResponseCode.SUCCESS
            # fastjson's shape: the MessageQueue objects are the map keys, inline.
            assert resp.body.startswith(b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Stats"}:{')
            table = decode_mq_table(loads_lenient(resp.body)["offsetTable"])
            q0, q1 = MessageQueue("Stats", "broker-a", 0), MessageQueue("Stats", "broker-a", 1)
            assert set(table) == {q0, q1}
            assert (table[q0]["minOffset"], table[q0]["maxOffset"]) == (0, 3)
            assert table[q0]["lastUpdateTimestamp"] > 1_600_000_000_000
            assert table[q1] == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}

            resp = await h.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark == "topic[Nope] not exist"

    asyncio.run(main())


# -- runtime info, config, files ----------------------------------------------------------
def test_runtime_info(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await create_topic(h, "Rt") == 0
            for _ in range(2):
                await h.send("Rt")
            await h.dispatched()
            resp = await h.call(RequestCode.GET_BROKER_RUNTIME_INFO)
            assert resp.code == ResponseCode.SUCCESS
            table = fastjson.loads(resp.body)["table"]
            assert all(isinstance(v, str) for v in table.values())
            store = h.app.broker.store
            assert table["brokerVersion"] == "407" and table["brokerVersionDesc"] == "V4_9_7"
            assert table["commitLogMaxOffset"] == str(store.max_phy_offset)
            assert table["commitLogMinOffset"] == "0"
            assert int(table["msgPutTotalTodayNow"]) >= 2
            for key in ("msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning", "msgGetTotalTodayNow"):
                int(table[key])  # mqadmin clusterList parses these as longs
            assert float(table["putTps"].split(" ")[0]) == 0.0
            assert float(table["getTransferedTps"].split(" ")[0]) == 0.0
            assert int(table["earliestMessageTimeStamp"]) > 1_600_000_000_000
            assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
            assert table["commitLogDirCapacity"].startswith("Total : ")
            assert "dispatchBehindBytes" in table and "consumeQueues" in table

    asyncio.run(main())


def test_broker_config_and_delete_files(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            resp = await h.call(RequestCode.GET_BROKER_CONFIG)
            assert resp.code == ResponseCode.SUCCESS
            props = dict(line.split("=", 1) for line in resp.body.decode().splitlines())
            assert props["brokerName"] == "broker-a"
            assert props["brokerClusterName"] == "TestCluster"
            assert props["listenPort"] == str(h.app.port)
            assert props["autoCreateTopicEnable"] == "true"
            assert props["flushDiskType"] == "ASYNC_FLUSH"
            assert props["brokerRole"] == "ASYNC_MASTER"
            assert props["fileReservedTime"] == "72"
            assert props["storePathRootDir"] == str(tmp_path)
            version = fastjson.loads(resp.ext_fields["version"])
            assert version["counter"] == 0 and version["timestamp"] > 0
            again = await h.call(RequestCode.GET_BROKER_CONFIG)
            assert again.ext_fields["version"] == resp.ext_fields["version"]

            for code in (RequestCode.TRIGGER_DELETE_FILES, RequestCode.DELETE_EXPIRED_COMMITLOG):
                assert (await h.call(code)).code == ResponseCode.SUCCESS

    asyncio.run(main())


# -- offsets -------------------------------------------------------------------------------
def test_all_consumer_offsets_and_delay_offsets(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await commit_offset(h, "cg", "Off", 0, 12)
            await commit_offset(h, "cg", "Off", 1, 7)
            await commit_offset(h, "other", "Off", 0, 1)
            resp = await h.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
            assert resp.code == ResponseCode.SUCCESS
            table = fastjson.loads(resp.body)["offsetTable"]
            assert table["Off@cg"] == {"0": 12, "1": 7}
            assert table["Off@other"] == {"0": 1}

            resp = await h.call(RequestCode.GET_ALL_DELAY_OFFSET)
            assert resp.code == ResponseCode.SUCCESS
            assert fastjson.loads(resp.body) == {"offsetTable": {}}

    asyncio.run(main())


# -- subscription groups ---------------------------------------------------------------------
def test_subscription_group_create_list_delete(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            body = b'{"groupName":"cg1","retryMaxTimes":3,"retryQueueNums":2,"consumeEnable":"false"}\n'
            resp = await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
            assert resp.code == ResponseCode.SUCCESS
            doc = await all_groups(h)
            cfg = doc["subscriptionGroupTable"]["cg1"]
            assert cfg == {
                "brokerId": 0,
                "consumeBroadcastEnable": True,
                "consumeEnable": False,
                "consumeFromMinEnable": True,
                "groupName": "cg1",
                "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": 3,
                "retryQueueNums": 2,
                "whichBrokerWhenConsumeSlowly": 1,
            }
            assert "TOOLS_CONSUMER" in doc["subscriptionGroupTable"]
            on_disk = read_current(tmp_path / "config" / "subscriptionGroup.json", "subscriptionGroupTable")
            assert on_disk["subscriptionGroupTable"]["cg1"]["retryMaxTimes"] == 3

            # An empty body changes nothing (RocketMQ decodes it to null); bad bodies are errors.
            assert (await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b"")).code == 0
            for bad in (b"not json", b"[1,2]", b'{"retryMaxTimes":1}', b'{"groupName":"x","retryMaxTimes":"many"}'):
                resp = await h.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, bad)
                assert resp.code == ResponseCode.SYSTEM_ERROR, bad
            assert "x" not in (await all_groups(h))["subscriptionGroupTable"]

            # Delete, keeping offsets unless removeOffset is set.
            await commit_offset(h, "cg1", "T", 0, 5)
            await commit_offset(h, "cg10", "T", 0, 6)
            resp = await h.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "cg1"})
            assert resp.code == ResponseCode.SUCCESS
            assert "cg1" not in (await all_groups(h))["subscriptionGroupTable"]
            assert h.app.broker.offsets.query("cg1", "T", 0) == 5

            resp = await h.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "cg1", "removeOffset": "true"})
            assert resp.code == ResponseCode.SUCCESS
            assert h.app.broker.offsets.query("cg1", "T", 0) == -1
            assert h.app.broker.offsets.query("cg10", "T", 0) == 6
            assert (await h.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {})).code == ResponseCode.SYSTEM_ERROR

    asyncio.run(main())


# -- consumers --------------------------------------------------------------------------------
def test_consume_stats(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await create_topic(h, "CS", readQueueNums=2, writeQueueNums=2) == 0
            for _ in range(3):
                await h.send("CS", queue_id=0)
            await h.dispatched()
            await commit_offset(h, "g", "CS", 0, 1)

            for header in ({"consumerGroup": "g", "topic": "CS"}, {"consumerGroup": "g"}):
                resp = await h.call(RequestCode.GET_CONSUME_STATS, header)
                assert resp.code == ResponseCode.SUCCESS
                doc = loads_lenient(resp.body)
                assert doc["consumeTps"] == 0.0
                table = decode_mq_table(doc["offsetTable"])
                q0, q1 = MessageQueue("CS", "broker-a", 0), MessageQueue("CS", "broker-a", 1)
                assert set(table) == {q0, q1}
                assert (table[q0]["brokerOffset"], table[q0]["consumerOffset"]) == (3, 1)
                assert table[q0]["lastTimestamp"] > 1_600_000_000_000
                assert table[q1] == {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}

            # A group online with subscriptions that do not include the topic: skipped.
            assert (await h.heartbeat("10.0.0.9@1", "g", ["Elsewhere"])).code == ResponseCode.SUCCESS
            resp = await h.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g", "topic": "CS"})
            assert decode_mq_table(loads_lenient(resp.body)["offsetTable"]) == {}
            # Unknown topic: an empty table, not an error (as RocketMQ).
            resp = await h.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "nobody", "topic": "Nope"})
            assert resp.code == ResponseCode.SUCCESS
            assert (await h.call(RequestCode.GET_CONSUME_STATS, {})).code == ResponseCode.SYSTEM_ERROR

    asyncio.run(main())


def test_consumer_connection_list(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert (await h.heartbeat("10.0.0.5@42", "cg", ["CS"])).code == ResponseCode.SUCCESS
            resp = await h.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "cg"})
            assert resp.code == ResponseCode.SUCCESS
            doc = fastjson.loads(resp.body)
            assert doc["consumeType"] == "CONSUME_PASSIVELY"
            assert doc["messageModel"] == "CLUSTERING"
            assert doc["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
            [conn] = doc["connectionSet"]
            assert conn["clientId"] == "10.0.0.5@42"
            assert conn["language"] == "PYTHON"
            assert conn["version"] == 407
            assert conn["clientAddr"].startswith("127.0.0.1:")
            assert doc["subscriptionTable"]["CS"]["subString"] == "*"

            resp = await h.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ghost"})
            assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
            assert resp.remark == "the consumer group[ghost] not online"

    asyncio.run(main())
