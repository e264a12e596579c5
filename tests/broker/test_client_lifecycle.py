"""Client lifecycle over the wire: HEART_BEAT (Java and C++ bodies), NOTIFY_CONSUMER_IDS_CHANGED,
UNREGISTER_CLIENT, connection close, GET_CONSUMER_LIST_BY_GROUP, consumer offsets and their persistence.

Expected behaviour: J broker/.../processor/ClientManageProcessor.java, ConsumerManageProcessor.java,
broker/.../client/ConsumerManager.java and ConsumerGroupInfo.java (4.9.7); docs/formats.md §3.3, §3.5.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import Connection
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.message import decode_records
from tests.broker.harness import Harness, running_broker
from tests.broker.test_pull import heartbeat_body

TAG_A = 2598919  # "TagA".hashCode()


def java_heartbeat(client_id: str = "10.0.0.5@12345#8231945513600", group: str = "cg") -> bytes:
    """The Java body of docs/formats.md §3.5."""
    doc = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "codeSet": [TAG_A],
                        "expressionType": "TAG",
                        "subString": "TagA",
                        "subVersion": 1690000000000,
                        "tagsSet": ["TagA"],
                        "topic": "T",
                    },
                    {
                        "classFilterMode": False,
                        "codeSet": [],
                        "expressionType": "TAG",
                        "subString": "*",
                        "subVersion": 1690000000000,
                        "tagsSet": [],
                        "topic": f"%RETRY%{group}",
                    },
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [{"groupName": "pg"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
    }
    return fastjson.dumps(doc)


def cpp_heartbeat(client_id: str = "127.0.0.1@4242#1690000000#cpp", group: str = "cppg") -> bytes:
    """As rocketmq-client-cpp 2.x writes it: integer enums, string subVersion, no expressionType /
    classFilterMode / unitMode, a wrong codeSet (atoi of the tag), no producerDataSet, trailing newline."""
    doc = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 4,
                "consumeType": 1,
                "groupName": group,
                "messageModel": 1,
                "subscriptionDataSet": [
                    {
                        "codeSet": [0, 0],
                        "subString": "TagA || TagB",
                        "subVersion": "1690000000123",
                        "tagsSet": ["TagA", "TagB"],
                        "topic": "CT",
                    },
                    {
                        "codeSet": [],
                        "subString": "*",
                        "subVersion": "1690000000123",
                        "tagsSet": [],
                        "topic": f"%RETRY%{group}",
                    },
                ],
            }
        ],
    }
    return fastjson.dumps(doc) + b"\n"


async def consumer_ids(h: Harness, group: str) -> list[str] | None:
    """GET_CONSUMER_LIST_BY_GROUP: the id list, or None for the SYSTEM_ERROR "no consumer" answer."""
    resp = await h.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if resp.code == ResponseCode.SYSTEM_ERROR:
        assert resp.remark and group in resp.remark, resp
        return None
    assert resp.code == ResponseCode.SUCCESS, resp
    ids = fastjson.loads(resp.body)["consumerIdList"]
    assert isinstance(ids, list)
    return ids


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


class Inbox:
    """Broker-to-client requests a RemotingClient received."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.event = asyncio.Event()

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.requests.append(cmd)
        self.event.set()

    async def next(self, within: float = 3.0) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not self.requests:
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise AssertionError(f"no broker-to-client request within {within}s") from None
        return self.requests.pop(0)


@contextlib.asynccontextmanager
async def extra_client(
    on_request: Callable[[Connection, RemotingCommand], None] | None = None,
) -> AsyncIterator[RemotingClient]:
    client = RemotingClient(on_request=on_request)
    try:
        yield client
    finally:
        await asyncio.wait_for(client.close(), 5)


async def call_with(client: RemotingClient, h: Harness, code: int, ext: dict[str, Any], body: bytes = b"") -> Any:
    return await client.invoke(h.addr, RemotingCommand.request(code, ext, body), 5)


# -- heartbeats ---------------------------------------------------------------------------
def test_java_heartbeat_registers_consumer_producer_and_retry_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await consumer_ids(h, "cg") is None
            resp = await h.call(RequestCode.HEART_BEAT, {}, java_heartbeat())
            assert (resp.code, resp.body) == (ResponseCode.SUCCESS, b""), resp
            assert await consumer_ids(h, "cg") == ["10.0.0.5@12345#8231945513600"]

            broker = h.app.broker
            retry = broker.topics.get("%RETRY%cg")
            assert retry is not None and (retry.read_queue_nums, retry.write_queue_nums, retry.perm) == (1, 1, 6)
            assert broker.subscriptions.table.get("cg") is not None
            info = broker.consumers.groups["cg"]
            assert (info.consume_type, info.message_model, info.consume_from_where) == (
                "CONSUME_PASSIVELY",
                "CLUSTERING",
                "CONSUME_FROM_LAST_OFFSET",
            )
            sub = broker.consumers.subscription("cg", "T")
            assert sub is not None and (sub.tags, set(sub.codes), sub.sub_version) == (["TagA"], {TAG_A}, 1690000000000)
            assert set(broker.producers.groups) >= {"pg", "CLIENT_INNER_PRODUCER"}

    asyncio.run(main())


def test_cpp_heartbeat_is_understood(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            resp = await h.call(RequestCode.HEART_BEAT, {}, cpp_heartbeat())
            assert resp.code == ResponseCode.SUCCESS, resp
            assert await consumer_ids(h, "cppg") == ["127.0.0.1@4242#1690000000#cpp"]
            broker = h.app.broker
            assert broker.topics.get("%RETRY%cppg") is not None
            info = broker.consumers.groups["cppg"]
            assert (info.consume_type, info.message_model, info.consume_from_where) == (
                "CONSUME_PASSIVELY",
                "CLUSTERING",
                "CONSUME_FROM_FIRST_OFFSET",
            )
            sub = broker.consumers.subscription("cppg", "CT")
            assert sub is not None
            assert sub.sub_version == 1690000000123
            assert set(sub.codes) == {tag_hash("TagA"), tag_hash("TagB")}, "codeSet recomputed from tagsSet"

            # The heartbeat subscription filters a pull without the SUBSCRIPTION flag.
            for tag in ("TagA", "TagC", "TagB"):
                await h.send("CT", tag.encode(), props={"TAGS": tag})
            await h.dispatched()
            pull = {
                "consumerGroup": "cppg",
                "topic": "CT",
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 32,
                "sysFlag": 0,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subVersion": 1690000000123,
            }
            resp = await h.call(RequestCode.PULL_MESSAGE, pull)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert [r.body for r in decode_records(resp.body)] == [b"TagA", b"TagB"]

            # A producer-only C++ heartbeat: no consumerDataSet key at all.
            body = fastjson.dumps({"clientID": "127.0.0.1@4243", "producerDataSet": [{"groupName": "cpp_pg"}]})
            assert (await h.call(RequestCode.HEART_BEAT, {}, body + b"\n")).code == ResponseCode.SUCCESS
            assert "cpp_pg" in broker.producers.groups

    asyncio.run(main())


def test_consumer_list_of_unknown_group_is_system_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            resp = await h.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "nobody"})
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp
            assert resp.remark == "no consumer for this group, nobody"
            assert resp.body == b""

    asyncio.run(main())


# -- membership changes ------------------------------------------------------------------------
def test_second_consumer_joining_notifies_the_first(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            inbox1 = Inbox()
            async with extra_client(inbox1) as c1, extra_client() as c2:
                body1 = heartbeat_body("10.0.0.1@one", "grp", {"T": ("*", 1)})
                assert (await call_with(c1, h, RequestCode.HEART_BEAT, {}, body1)).code == ResponseCode.SUCCESS
                first = await inbox1.next()  # the group changed: it now has c1
                assert first.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED

                # The same client again: nothing changed, no notification.
                assert (await call_with(c1, h, RequestCode.HEART_BEAT, {}, body1)).code == ResponseCode.SUCCESS
                await asyncio.sleep(0.2)
                assert inbox1.requests == []

                body2 = heartbeat_body("10.0.0.2@two", "grp", {"T": ("*", 1)})
                assert (await call_with(c2, h, RequestCode.HEART_BEAT, {}, body2)).code == ResponseCode.SUCCESS
                note = await inbox1.next()
                assert note.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
                assert note.is_oneway and not note.is_response, "NOTIFY_CONSUMER_IDS_CHANGED is oneway"
                assert note.ext_fields == {"consumerGroup": "grp"}
                assert await consumer_ids(h, "grp") == ["10.0.0.1@one", "10.0.0.2@two"]

                # C++ style UNREGISTER_CLIENT (producerGroup ""): c2 leaves, c1 is told.
                unregister = {"clientID": "10.0.0.2@two", "producerGroup": "", "consumerGroup": "grp"}
                resp = await call_with(c2, h, RequestCode.UNREGISTER_CLIENT, unregister)
                assert resp.code == ResponseCode.SUCCESS, resp
                assert (await inbox1.next()).code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
                assert await consumer_ids(h, "grp") == ["10.0.0.1@one"]

                # Closing c1's connection removes the last member: the group is gone.
                await c1.close()

                async def gone() -> bool:
                    return await consumer_ids(h, "grp") is None

                await eventually(gone)

    asyncio.run(main())


def test_unregister_producer_and_close_remove_channels(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            producers = h.app.broker.producers
            async with extra_client() as c:
                body = fastjson.dumps({"clientID": "10.0.0.9@p", "producerDataSet": [{"groupName": "pgx"}]})
                assert (await call_with(c, h, RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
                assert "pgx" in producers.groups
                ext = {"clientID": "10.0.0.9@p", "producerGroup": "pgx", "consumerGroup": ""}
                assert (await call_with(c, h, RequestCode.UNREGISTER_CLIENT, ext)).code == ResponseCode.SUCCESS
                assert "pgx" not in producers.groups
                assert (await call_with(c, h, RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
                assert "pgx" in producers.groups

            async def gone() -> bool:
                return "pgx" not in producers.groups

            await eventually(gone)

    asyncio.run(main())


def test_heartbeat_without_a_topic_drops_its_subscription(tmp_path: Path) -> None:
    """J ConsumerGroupInfo.updateSubscription removes topics the latest heartbeat no longer lists.
    ledgermq's ConsumerManager.register only adds or replaces, so a stale subscription stays."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert (await h.heartbeat("10.0.0.1@one", "sub", ["A", "B"])).code == ResponseCode.SUCCESS
            assert (await h.heartbeat("10.0.0.1@one", "sub", ["B"])).code == ResponseCode.SUCCESS
            consumers = h.app.broker.consumers
            assert consumers.subscription("sub", "B") is not None
            assert consumers.subscription("sub", "A") is None

    asyncio.run(main())


def test_subscription_change_notifies_the_group(tmp_path: Path) -> None:
    """J ConsumerManager.registerConsumer notifies when the channel set OR the subscribed topics change
    (r1 || r2). ledgermq notifies only when the channel set changes."""

    async def main() -> None:
        async with running_broker(tmp_path) as h:
            inbox = Inbox()
            async with extra_client(inbox) as c:
                body = heartbeat_body("10.0.0.1@one", "subn", {"A": ("*", 1)})
                assert (await call_with(c, h, RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
                await inbox.next()
                body = heartbeat_body("10.0.0.1@one", "subn", {"A": ("*", 1), "B": ("*", 1)})
                assert (await call_with(c, h, RequestCode.HEART_BEAT, {}, body)).code == ResponseCode.SUCCESS
                note = await inbox.next(within=1.0)
                assert note.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED

    asyncio.run(main())


# -- offsets ---------------------------------------------------------------------------------------
def offset_header(topic: str, queue_id: int, **extra: Any) -> dict[str, Any]:
    return {"consumerGroup": "cg", "topic": topic, "queueId": queue_id, **extra}


async def query_offset(h: Harness, topic: str, queue_id: int) -> tuple[int, str | None]:
    resp = await h.call(RequestCode.QUERY_CONSUMER_OFFSET, offset_header(topic, queue_id))
    if resp.code == ResponseCode.SUCCESS:
        return resp.code, resp.ext_fields["offset"]
    assert resp.remark, resp
    return resp.code, None


def test_query_consumer_offset_semantics(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            # Nothing stored, young queue (or no queue at all): SUCCESS 0.
            assert await query_offset(h, "QO", 0) == (ResponseCode.SUCCESS, "0")
            for _ in range(3):
                await h.send("QO", queue_id=0)
            await h.dispatched()
            assert await query_offset(h, "QO", 0) == (ResponseCode.SUCCESS, "0")
            # A stored offset wins.
            ext = offset_header("QO", 0, commitOffset=2)
            assert (await h.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)).code == ResponseCode.SUCCESS
            assert await query_offset(h, "QO", 0) == (ResponseCode.SUCCESS, "2")

            # UPDATE_CONSUMER_OFFSET oneway (how both clients send it): no answer, stored.
            oneway = RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, offset_header("QO", 0, commitOffset=3), oneway=True
            )
            await h.client.invoke_oneway(h.addr, oneway)

            async def stored() -> bool:
                return await query_offset(h, "QO", 0) == (ResponseCode.SUCCESS, "3")

            await eventually(stored)

    asyncio.run(main())


def test_query_consumer_offset_not_found_when_offset_zero_is_on_disk(tmp_path: Path) -> None:
    """accessMessageInMemoryMaxRatio=0: every message behind the commit-log end counts as "in disk",
    so a group without a stored offset gets QUERY_NOT_FOUND (22) for a non-empty queue."""

    async def main() -> None:
        async with running_broker(tmp_path, store={"access_message_in_memory_max_ratio": 0}) as h:
            await h.send("Disk", queue_id=0)
            await h.send("Disk", queue_id=0)
            await h.dispatched()
            assert await query_offset(h, "Disk", 0) == (ResponseCode.QUERY_NOT_FOUND, None)

    asyncio.run(main())


def test_query_consumer_offset_of_an_empty_queue_is_zero_even_with_a_big_commit_log(tmp_path: Path) -> None:
    """J DefaultMessageStore.checkInDiskByConsumeOffset returns false when the queue has no unit at the
    offset, so an empty queue always answers SUCCESS 0. ledgermq's _in_disk takes the missing unit's
    commit-log offset as 0 and compares max_phy - 0 with the memory budget: once the commit log is
    larger than accessMessageInMemoryMaxRatio of RAM (here forced with ratio 0), an empty queue gets 22."""

    async def main() -> None:
        async with running_broker(tmp_path, store={"access_message_in_memory_max_ratio": 0}) as h:
            await h.send("Disk", queue_id=0)
            await h.dispatched()
            assert await query_offset(h, "Disk", 1) == (ResponseCode.SUCCESS, "0")

    asyncio.run(main())


def test_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            for queue_id, offset in ((0, 12), (1, 7)):
                ext = offset_header("Persist", queue_id, commitOffset=offset)
                assert (await h.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)).code == ResponseCode.SUCCESS
            retry = {"consumerGroup": "cg", "topic": "%RETRY%cg", "queueId": 0, "commitOffset": 1}
            assert (await h.call(RequestCode.UPDATE_CONSUMER_OFFSET, retry)).code == ResponseCode.SUCCESS

        saved = fastjson.loads((tmp_path / "config" / "consumerOffset.json").read_bytes())
        table = {k: {int(q): o for q, o in v.items()} for k, v in saved["offsetTable"].items()}
        assert table["Persist@cg"] == {0: 12, 1: 7}
        assert table["%RETRY%cg@cg"] == {0: 1}

        async with running_broker(tmp_path) as h:
            assert await query_offset(h, "Persist", 0) == (ResponseCode.SUCCESS, "12")
            assert await query_offset(h, "Persist", 1) == (ResponseCode.SUCCESS, "7")
            assert await query_offset(h, "%RETRY%cg", 0) == (ResponseCode.SUCCESS, "1")

    asyncio.run(main())
