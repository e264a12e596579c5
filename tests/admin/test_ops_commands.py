"""End to end: the operator commands (deleteTopic, updateSubGroup, deleteSubGroup,
consumerConnection, producerConnection, resetOffsetByTime, queryMsgByUniqueKey, queryMsgById
by unique key, printMsg, getBrokerConfig, updateBrokerConfig, wipeWritePerm, addWritePerm)
as ``ledgermq admin`` processes against a name server and a broker running as processes,
with ledgermq.client's producer and push consumer as the live clients."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import PERM_WRITE
from tests.admin.servers import BROKER, ProcessCluster, broker_call, commit_offset, ledgermq_cmd, ns_route

COMMAND_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    c = ProcessCluster(Path(tmp_path_factory.mktemp("ops")) / "cluster")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def run_admin(cluster: ProcessCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ledgermq_cmd("admin", *args, "-n", cluster.ns_addr), capture_output=True, text=True, timeout=COMMAND_TIMEOUT
    )


async def arun_admin(cluster: ProcessCluster, *args: str) -> tuple[int, str, str]:
    """``run_admin`` without blocking the loop (live clients must answer the broker meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        *ledgermq_cmd("admin", *args, "-n", cluster.ns_addr),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
    return proc.returncode or 0, out.decode(), err.decode()


def create_topic(cluster: ProcessCluster, topic: str, queues: int = 1) -> None:
    done = run_admin(
        cluster, "updateTopic", "-b", cluster.broker_addr, "-t", topic, "-r", str(queues), "-w", str(queues)
    )
    assert done.returncode == 0, done.stderr
    wait_for(f"{topic}'s route", lambda: asyncio.run(ns_route(cluster.ns_addr, topic)) is not None)


def wait_for(what: str, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def broker_json(cluster: ProcessCluster, code: int) -> dict[str, Any]:
    resp = asyncio.run(broker_call(cluster.broker_addr, code))
    doc = fastjson.loads(resp.body)
    assert isinstance(doc, dict)
    return doc


def test_delete_topic(cluster: ProcessCluster) -> None:
    create_topic(cluster, "OpsDoomed")
    done = run_admin(cluster, "deleteTopic", "-t", "OpsDoomed", "-c", "DefaultCluster")
    assert done.returncode == 0, done.stderr
    assert "delete topic [OpsDoomed] from cluster [DefaultCluster] success." in done.stdout
    assert "delete topic [OpsDoomed] from NameServer success." in done.stdout
    assert asyncio.run(ns_route(cluster.ns_addr, "OpsDoomed")) is None
    assert "OpsDoomed" not in broker_json(cluster, RequestCode.GET_ALL_TOPIC_CONFIG)["topicConfigTable"]
    assert "OpsDoomed" not in run_admin(cluster, "topicList").stdout.split()


def test_update_and_delete_sub_group(cluster: ProcessCluster) -> None:
    args = ["-b", cluster.broker_addr, "-g", "OPS_SG", "-s", "false", "-r", "5", "-q", "2", "-w", "0", "-a", "false"]
    done = run_admin(cluster, "updateSubGroup", *args)
    assert done.returncode == 0, done.stderr
    assert f"create subscription group to {cluster.broker_addr} success." in done.stdout
    cfg = broker_json(cluster, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)["subscriptionGroupTable"]["OPS_SG"]
    assert (cfg["consumeEnable"], cfg["retryMaxTimes"], cfg["retryQueueNums"]) == (False, 5, 2)
    assert (cfg["whichBrokerWhenConsumeSlowly"], cfg["notifyConsumerIdsChangedEnable"]) == (0, False)

    asyncio.run(commit_offset(cluster.broker_addr, "OPS_SG", "TBW102", 0, 3))
    done = run_admin(cluster, "deleteSubGroup", "-b", cluster.broker_addr, "-g", "OPS_SG", "-r", "true")
    assert done.returncode == 0, done.stderr
    assert f"delete subscription group [OPS_SG] from broker [{cluster.broker_addr}] success." in done.stdout
    assert "OPS_SG" not in broker_json(cluster, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)["subscriptionGroupTable"]
    assert "TBW102@OPS_SG" not in broker_json(cluster, RequestCode.GET_ALL_CONSUMER_OFFSET)["offsetTable"]


def test_connections_and_reset_offset_by_time(cluster: ProcessCluster) -> None:
    create_topic(cluster, "OpsReset")
    # a bound on the whole exchange, not a speed goal: it starts seven `ledgermq admin`
    # processes, and beside another test suite and chaos runs (load 10-14) they took > 50 s
    asyncio.run(asyncio.wait_for(_connections_and_reset(cluster), 150))


async def _connections_and_reset(cluster: ProcessCluster) -> None:
    seen: Counter[str] = Counter()

    async def listener(msgs: list[MessageRecord], context: Any) -> ConsumeConcurrentlyStatus:
        seen.update(m.msg_id for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    before = int(time.time() * 1000) - 1000
    producer = Producer("OPS_PG", cluster.ns_addr, client_ip="127.0.0.1", heartbeat_interval=1.0)
    consumer = PushConsumer("OPS_CG", cluster.ns_addr, client_ip="127.0.0.1", heartbeat_interval=1.0)
    consumer.subscribe("OpsReset", "*")
    consumer.register_listener(listener)
    await producer.start()
    await consumer.start()
    try:
        ids = [(await producer.send(Message("OpsReset", f"r{i}".encode()))).msg_id for i in range(4)]
        await _until("first delivery", lambda: all(seen[i] >= 1 for i in ids))

        rc, out, err = await arun_admin(cluster, "consumerConnection", "-g", "OPS_CG")
        assert rc == 0, err
        assert consumer.client_id in out and "Topic: OpsReset" in out and "MessageModel: CLUSTERING" in out
        rc, out, err = await arun_admin(cluster, "producerConnection", "-g", "OPS_PG", "-t", "OpsReset")
        assert rc == 0, err
        assert out.startswith("0001  ") and producer.client_id in out

        rc, out, err = await arun_admin(
            cluster, "resetOffsetByTime", "-g", "OPS_CG", "-t", "OpsReset", "-s", str(before)
        )
        assert rc == 0, err
        assert "rollback consumer offset by specified consumerGroup[OPS_CG], topic[OpsReset]" in out
        assert BROKER in out
        await _until("re-delivery from the reset offset", lambda: all(seen[i] >= 2 for i in ids))

        # statsAll: 4 in, at least 4 out in the last 24 hours (as in RocketMQ, the figures are
        # those of the last samples: up to 10 s for the minute, an hour for the day window),
        # nothing left over.
        deadline = time.monotonic() + 25
        while True:
            rc, out, err = await arun_admin(cluster, "statsAll", "-t", "OpsReset")
            assert rc == 0, err
            rows = [ln.split() for ln in out.splitlines() if ln.startswith("OpsReset")]
            if rows and rows[0][1] == "OPS_CG" and rows[0][2] == "0" and rows[0][5] == "4" and int(rows[0][6]) >= 4:
                break
            assert time.monotonic() < deadline, out
            await asyncio.sleep(0.5)
        assert out.splitlines()[0].split()[:2] == ["#Topic", "#Consumer"]

        # queryMsgByUniqueKey -g -d: the broker hands the message to that consumer directly.
        before_direct = seen[ids[0]]
        rc, out, err = await arun_admin(
            cluster, "queryMsgByUniqueKey", "-i", ids[0], "-t", "OpsReset", "-g", "OPS_CG", "-d", consumer.client_id
        )
        assert rc == 0, err
        assert "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS" in out
        assert seen[ids[0]] == before_direct + 1
        rc, out, err = await arun_admin(
            cluster, "queryMsgByUniqueKey", "-i", ids[0], "-t", "OpsReset", "-g", "OPS_CG", "-d", "nobody@0"
        )
        assert rc != 0 and "not online" in err
    finally:
        await consumer.shutdown()
        await producer.shutdown()

    # Offline: the broker's own table is reset.
    rc, out, err = await arun_admin(cluster, "resetOffsetByTime", "-g", "OPS_CG", "-t", "OpsReset", "-s", str(before))
    assert rc == 0, err
    resp = await broker_call(cluster.broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert fastjson.loads(resp.body)["offsetTable"]["OpsReset@OPS_CG"] in ({"0": 0}, {0: 0})


async def _until(what: str, check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_query_by_unique_key_and_print_msg(cluster: ProcessCluster) -> None:
    create_topic(cluster, "OpsMsgs")

    async def send() -> tuple[str, str]:
        async with Producer("OPS_QPG", cluster.ns_addr, client_ip="127.0.0.1") as p:
            r = await p.send(Message("OpsMsgs", b"find me", tags="TagQ", keys="k-1"))
            return r.msg_id, r.offset_msg_id

    unique, offset_id = asyncio.run(send())
    wait_for("the index", lambda: run_admin(cluster, "queryMsgByKey", "-t", "OpsMsgs", "-k", "k-1").returncode == 0)

    shown = run_admin(cluster, "queryMsgByUniqueKey", "-i", unique, "-t", "OpsMsgs")
    assert shown.returncode == 0, shown.stderr
    assert "Message Body:" in shown.stdout and "find me" in shown.stdout and offset_id in shown.stdout

    for given in (unique, offset_id):  # queryMsgById takes both kinds of id
        shown = run_admin(cluster, "queryMsgById", "-i", given)
        assert shown.returncode == 0, (given, shown.stderr)
        assert "find me" in shown.stdout and unique in shown.stdout

    printed = run_admin(cluster, "printMsg", "-t", "OpsMsgs", "-s", "TagQ")
    assert printed.returncode == 0, printed.stderr
    assert "minOffset=0, maxOffset=1" in printed.stdout
    assert f"MSGID: {unique} " in printed.stdout and printed.stdout.rstrip().endswith("BODY: find me")
    hidden = run_admin(cluster, "printMsg", "-t", "OpsMsgs", "-d", "false", "-e", "1000")
    assert hidden.returncode == 0, hidden.stderr
    assert "MSGID" not in hidden.stdout  # nothing stored before 1970-01-01 00:00:01


def test_broker_config_get_update_and_refusals(cluster: ProcessCluster) -> None:
    shown = run_admin(cluster, "getBrokerConfig", "-b", cluster.broker_addr)
    assert shown.returncode == 0, shown.stderr
    assert f"============{cluster.broker_addr}============" in shown.stdout
    assert any(ln.split() == ["brokerPermission", "=", "6"] for ln in shown.stdout.splitlines())

    create_topic(cluster, "OpsPerm")
    try:
        done = run_admin(cluster, "updateBrokerConfig", "-c", "DefaultCluster", "-k", "brokerPermission", "-v", "4")
        assert done.returncode == 0, done.stderr
        assert f"update broker config success, {cluster.broker_addr}" in done.stdout
        shown = run_admin(cluster, "getBrokerConfig", "-c", "DefaultCluster")
        assert any(ln.split() == ["brokerPermission", "=", "4"] for ln in shown.stdout.splitlines())

        def read_only() -> bool:
            route = asyncio.run(ns_route(cluster.ns_addr, "OpsPerm"))
            return route is not None and route.queue_datas[0].perm == 4

        wait_for("the read-only route", read_only)
    finally:
        restored = run_admin(
            cluster, "updateBrokerConfig", "-b", cluster.broker_addr, "-k", "brokerPermission", "-v", "6"
        )
        assert restored.returncode == 0, restored.stderr

    for key, value in (("listenPort", "1234"), ("flushDiskType", "SYNC_FLUSH"), ("noSuchKey", "1")):
        refused = run_admin(cluster, "updateBrokerConfig", "-b", cluster.broker_addr, "-k", key, "-v", value)
        assert refused.returncode == 1, (key, refused.stdout)
        assert key in refused.stderr and "Error:" in refused.stderr
    shown = run_admin(cluster, "getBrokerConfig", "-b", cluster.broker_addr)
    assert "noSuchKey" not in shown.stdout
    assert any(ln.split() == ["listenPort", "=", str(cluster.broker_port)] for ln in shown.stdout.splitlines())
    bad = run_admin(cluster, "updateBrokerConfig", "-b", cluster.broker_addr, "-k", "brokerPermission", "-v", "9")
    assert bad.returncode == 1 and "brokerPermission" in bad.stderr


def test_wipe_and_add_write_perm(cluster: ProcessCluster) -> None:
    create_topic(cluster, "OpsWipe")

    def perm() -> int:
        route = asyncio.run(ns_route(cluster.ns_addr, "OpsWipe"))
        assert route is not None
        return route.queue_datas[0].perm

    done = run_admin(cluster, "wipeWritePerm", "-b", BROKER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wipe write perm of broker[{BROKER}] in name server[{cluster.ns_addr}] OK, ")
    assert int(done.stdout.split("OK, ")[1]) >= 1
    assert not perm() & PERM_WRITE
    done = run_admin(cluster, "addWritePerm", "-b", BROKER)
    assert done.returncode == 0, done.stderr
    assert f"add write perm of broker[{BROKER}] in name server[{cluster.ns_addr}] OK, " in done.stdout
    assert perm() & PERM_WRITE


if sys.platform == "win32":  # pragma: no cover - the helpers use process groups
    pytest.skip("POSIX only", allow_module_level=True)
