"""AdminClient against a real name server and broker running in the test's event loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ledgermq.admin import AdminClient, AdminConnectError, AdminError, AdminResponseError, ConsumeStats, TopicOffset
from ledgermq.admin.model import mq_version_desc, msg_id, normalize_address, split_namesrv_addrs
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import closed_port
from tests.admin.servers import (
    BROKER,
    CLUSTER,
    HOST,
    commit_offset,
    heartbeat_body,
    poll,
    running_cluster,
    send_message,
)


async def route_when_visible(admin: AdminClient, topic: str) -> TopicRouteData:
    """Topic changes reach the name server with the broker's next (immediate) registration."""

    async def check() -> TopicRouteData | None:
        try:
            return await admin.route(topic)
        except AdminResponseError as exc:
            assert exc.code == ResponseCode.TOPIC_NOT_EXIST
            return None

    return await poll(f"the route of {topic}", check)


def test_cluster_info_topic_list_and_runtime_info(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            info = await admin.cluster_info()
            assert info.cluster_addr_table == {CLUSTER: [BROKER]}
            assert info.broker_addr_table[BROKER].broker_addrs == {0: c.broker_addr}
            assert info.master_addrs(CLUSTER) == [c.broker_addr]
            assert info.all_addrs(CLUSTER) == [c.broker_addr]
            assert info.broker_name_of(c.broker_addr) == BROKER
            assert info.cluster_of(BROKER) == CLUSTER
            with pytest.raises(AdminError, match="NoSuchCluster"):
                info.master_addrs("NoSuchCluster")

            topics = await admin.topic_list()
            assert "TBW102" in topics
            assert topics == sorted(topics)
            assert "TBW102" in await admin.topics_by_cluster(CLUSTER)

            kv = await admin.broker_runtime_info(c.broker_addr)
            assert kv["brokerVersionDesc"] == "V4_9_7"
            assert kv["msgPutTotalTodayNow"] == "0"
            assert list(kv) == sorted(kv)

    asyncio.run(main())


def test_create_topic_route_and_topic_stats(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            done = await admin.create_topic_in_cluster(CLUSTER, "AdminT", read_queue_nums=4, write_queue_nums=2)
            assert done == [c.broker_addr]
            route = await route_when_visible(admin, "AdminT")
            assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
                (BROKER, 4, 2, 6)
            ]
            assert route.broker_datas[0].broker_addrs == {0: c.broker_addr}
            assert "AdminT" in await admin.topic_list()

            # Stats cover the write queues (RocketMQ's TopicStatsTable); offsets move with sends.
            before = int(time.time() * 1000)
            for _ in range(3):
                await send_message(c.broker_addr, "AdminT", queue_id=1)

            async def dispatched() -> dict[MessageQueue, TopicOffset] | None:  # the consume queues lag the commit log
                table = await admin.examine_topic_stats("AdminT")
                return table if table[MessageQueue("AdminT", BROKER, 1)].max_offset == 3 else None

            stats = await poll("the consume queue", dispatched)
            assert list(stats) == [MessageQueue("AdminT", BROKER, 0), MessageQueue("AdminT", BROKER, 1)]
            q0, q1 = stats.values()
            assert (q0.min_offset, q0.max_offset, q0.last_update_timestamp) == (0, 0, 0)
            assert (q1.min_offset, q1.max_offset) == (0, 3)
            assert q1.last_update_timestamp >= before - 1000
            assert await admin.topic_stats(c.broker_addr, "AdminT") == stats

            # Updating an existing topic on one broker (mqadmin -b).
            tc = await admin.create_topic(c.broker_addr, "AdminT", read_queue_nums=8, write_queue_nums=8, perm=4)
            assert (tc.read_queue_nums, tc.perm) == (8, 4)

            async def updated() -> bool:
                r = await admin.route("AdminT")
                return r.queue_datas[0].perm == 4

            await poll("the updated route", updated)

            with pytest.raises(AdminResponseError) as err:
                await admin.topic_stats(c.broker_addr, "NoSuchTopic")
            assert err.value.code == ResponseCode.TOPIC_NOT_EXIST

    asyncio.run(main())


def test_unknown_topic_and_refused_topic_names(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            with pytest.raises(AdminResponseError) as err:
                await admin.route("NoSuchTopic")
            assert err.value.code == ResponseCode.TOPIC_NOT_EXIST
            assert "NoSuchTopic" in str(err.value) and "TOPIC_NOT_EXIST (17)" in str(err.value)
            with pytest.raises(AdminResponseError) as err:
                await admin.examine_topic_stats("NoSuchTopic")
            assert err.value.code == ResponseCode.TOPIC_NOT_EXIST
            with pytest.raises(AdminResponseError, match="illegal characters"):
                await admin.create_topic(c.broker_addr, "bad topic!")
            with pytest.raises(AdminResponseError, match="conflict with system topic"):
                await admin.create_topic(c.broker_addr, "TBW102")
            with pytest.raises(AdminError, match="not known"):
                await admin.create_topic_in_cluster("NoSuchCluster", "T")

    asyncio.run(main())


def test_order_topic_conf_reaches_the_route(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            await admin.create_topic(c.broker_addr, "OrderT", read_queue_nums=4, write_queue_nums=4, order=True)
            await admin.put_order_conf("OrderT", f"{BROKER}:4")
            route = await route_when_visible(admin, "OrderT")
            assert route.order_topic_conf == f"{BROKER}:4"

    asyncio.run(main())


def test_view_message_by_offset_id_and_query_by_key(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            await admin.create_topic(c.broker_addr, "MsgT", read_queue_nums=2, write_queue_nums=2)
            await route_when_visible(admin, "MsgT")
            uniq = "7F0000010001000000000000000000AB"
            first = await send_message(c.broker_addr, "MsgT", b"first body", queue_id=0, keys="order-1 shared")
            second = await send_message(
                c.broker_addr, "MsgT", b"second body", queue_id=1, keys="order-2 shared", uniq_key=uniq
            )

            rec = await admin.view_message_by_id(second.ext_fields["msgId"])
            assert (rec.topic, rec.body, rec.queue_id, rec.queue_offset) == ("MsgT", b"second body", 1, 0)
            assert rec.keys == ["order-2", "shared"]
            assert rec.tags == "TagA"
            assert rec.offset_msg_id == second.ext_fields["msgId"]
            assert rec.store_host == (HOST, c.broker.port)
            assert msg_id(rec) == uniq
            again = await admin.view_message(c.broker_addr, rec.physical_offset)
            assert again == rec

            async def found(key: str) -> list[bytes] | None:
                result = await admin.query_by_key("MsgT", key)
                return [r.body for r in result.messages] or None

            assert await poll("the index", lambda: found("order-1")) == [b"first body"]

            async def both_shared() -> list[bytes] | None:
                bodies = await found("shared")
                return sorted(bodies) if bodies and len(bodies) == 2 else None

            assert await poll("both messages indexed", both_shared) == [b"first body", b"second body"]
            by_uniq = await admin.query_by_key("MsgT", uniq, unique_key=True)
            assert [r.offset_msg_id for r in by_uniq.messages] == [second.ext_fields["msgId"]]
            assert by_uniq.index_last_update_timestamp > 0
            assert (await admin.query_by_key("MsgT", "no-such-key")).messages == []
            assert msg_id(await admin.view_message_by_id(first.ext_fields["msgId"])) == first.ext_fields["msgId"]

            with pytest.raises(AdminResponseError) as err:
                await admin.view_message(c.broker_addr, 10_000_000)
            assert err.value.code == ResponseCode.SYSTEM_ERROR
            with pytest.raises(AdminError, match="not an offset message id"):
                await admin.view_message_by_id("XYZ")
            with pytest.raises(AdminResponseError) as err:
                await admin.query_by_key("NoSuchTopic", "k")
            assert err.value.code == ResponseCode.TOPIC_NOT_EXIST

    asyncio.run(main())


def test_consume_stats_connections_and_groups(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_cluster(tmp_path) as c, AdminClient(c.ns_addr) as admin:
            await admin.create_topic(c.broker_addr, "ProgT", read_queue_nums=2, write_queue_nums=2)
            for queue_id, count in ((0, 3), (1, 1)):
                for _ in range(count):
                    await send_message(c.broker_addr, "ProgT", queue_id=queue_id)
            await commit_offset(c.broker_addr, "cg", "ProgT", 0, 2)
            await commit_offset(c.broker_addr, "cg", "ProgT", 1, 1)

            async def dispatched() -> ConsumeStats | None:
                answer = await admin.consume_stats(c.broker_addr, "cg", "ProgT")
                return answer if answer.total_diff == 1 else None

            stats = await poll("the consume queues", dispatched)
            assert {mq.queue_id: (w.broker_offset, w.consumer_offset) for mq, w in stats.offset_table.items()} == {
                0: (3, 2),
                1: (1, 1),
            }
            assert stats.total_diff == 1
            assert stats.offset_table[MessageQueue("ProgT", BROKER, 0)].last_timestamp > 0
            # No retry topic yet (no consumer ever sent a heartbeat): the brokers come from elsewhere.
            assert (await admin.examine_consume_stats("cg")).offset_table == stats.offset_table
            assert (await admin.examine_consume_stats("cg", "ProgT")).offset_table == stats.offset_table
            with pytest.raises(AdminResponseError) as err:
                await admin.examine_consume_stats("nobody")
            assert err.value.code == ResponseCode.CONSUMER_NOT_ONLINE
            with pytest.raises(AdminResponseError) as err:
                await admin.consumer_connection(c.broker_addr, "cg")
            assert err.value.code == ResponseCode.CONSUMER_NOT_ONLINE

            # A live consumer: its heartbeat creates %RETRY%cg, so the group shows up in the overview.
            # The heartbeat's connection must stay open while we look (closing it unregisters the client).
            conn = await admin.remoting.connection(c.broker_addr)
            body = heartbeat_body("10.0.0.9@1", "cg", ["ProgT"])
            heartbeat = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
            hb = await conn.request(heartbeat, 5.0)
            assert hb.code == ResponseCode.SUCCESS
            await route_when_visible(admin, "%RETRY%cg")
            cc = await admin.examine_consumer_connection("cg")
            assert [x.client_id for x in cc.connections] == ["10.0.0.9@1"]
            assert (cc.consume_type, cc.message_model) == ("CONSUME_PASSIVELY", "CLUSTERING")
            assert "ProgT" in cc.subscriptions
            groups = await admin.consumer_groups()
            assert [(g.group, g.count, g.diff_total, mq_version_desc(g.version)) for g in groups] == [
                ("cg", 1, 1, "V4_9_7")
            ]

    asyncio.run(main())


def test_unreachable_servers_and_name_server_failover(tmp_path: Path) -> None:
    async def main() -> None:
        dead = f"{HOST}:{closed_port()}"
        async with AdminClient(dead, timeout=2.0) as admin:
            with pytest.raises(AdminConnectError, match="no name server reachable"):
                await admin.topic_list()
        async with AdminClient([], timeout=2.0) as admin:
            with pytest.raises(AdminError, match="no name server address"):
                await admin.cluster_info()
        async with running_cluster(tmp_path) as c, AdminClient(f"{dead};{c.ns_addr}", timeout=2.0) as admin:
            assert "TBW102" in await admin.topic_list()
            assert admin.namesrv_in_use == c.ns_addr  # sticks to the one that answered
            with pytest.raises(AdminConnectError, match="cannot connect"):
                await admin.broker_runtime_info(dead)
            with pytest.raises(AdminError, match="not host:port"):
                await admin.broker_runtime_info("nonsense")

    asyncio.run(main())


def test_a_silent_server_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # read and never answer
            writer.close()

        server = await asyncio.start_server(swallow, HOST, 0)
        addr = f"{HOST}:{server.sockets[0].getsockname()[1]}"
        try:
            async with AdminClient(addr, timeout=0.5) as admin:
                # the client's own 0.5 s timeout ends the call (the outer bound only catches a hang)
                with pytest.raises(AdminConnectError, match="no answer"):
                    await asyncio.wait_for(admin.topic_list(), 60)
        finally:
            server.close()
            await asyncio.wait_for(server.wait_closed(), 5)

    asyncio.run(main())


def test_version_names_and_address_lists() -> None:
    assert mq_version_desc(407) == "V4_9_7"
    assert mq_version_desc(406) == "V4_9_7_SNAPSHOT"
    assert mq_version_desc(333) == "V4_6_0"
    assert mq_version_desc(213) == "V4_0_0"
    assert mq_version_desc(413) == "V5_0_0"
    assert mq_version_desc(612) == "HIGHER_VERSION"
    assert split_namesrv_addrs(" a:1; b:2 ;") == ["a:1", "b:2"]
    assert split_namesrv_addrs(["a:1", ""]) == ["a:1"]
    assert normalize_address(" 10.0.0.1:10911 ") == "10.0.0.1:10911"
    assert normalize_address("[::1]:10911") == "::1:10911"
    for bad in ("garbage", "host:", ":9876", "host:0", "host:65536", "host:99999"):
        with pytest.raises(AdminError, match="not host:port"):
            normalize_address(bad)


def test_admin_errors_belong_to_the_client_error_hierarchy() -> None:
    """One hierarchy: a caller catching the client's errors catches the admin tools' too."""
    from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError

    assert issubclass(AdminError, MQClientError)
    assert issubclass(AdminConnectError, MQConnectError) and issubclass(AdminConnectError, AdminError)
    refused = AdminResponseError(17, "no such topic", "route")
    assert isinstance(refused, MQBrokerError) and refused.code == 17 and refused.remark == "no such topic"
    assert str(refused) == "route: TOPIC_NOT_EXIST (17): no such topic"
