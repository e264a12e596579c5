"""A broker process whose open-file limit is far below its number of queues: every message
answered SEND_OK is readable, the broker stays within its limit, and it says what it
ran into (the limit and the descriptor budget it chose)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from tests.admin.servers import CALL_TIMEOUT, ProcessCluster, send_header

NOFILE = 256  # the broker may not raise it: soft = hard
TOPICS = 200
QUEUES = 4  # auto-created topics have 4; 800 queues, each with a message: more than may be open at once
IN_FLIGHT = 32


async def _send_and_read_back(addr: str, *, send: bool = True) -> tuple[int, list[str]]:
    client = RemotingClient()
    gate = asyncio.Semaphore(IN_FLIGHT)
    acked: list[tuple[str, int, bytes]] = []
    unreadable: list[str] = []

    async def send_one(topic: str, queue_id: int) -> None:
        body = f"{topic}/{queue_id}".encode()
        async with gate:
            cmd = RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, send_header(topic, queue_id, {"WAIT": "true"}), body
            )
            resp = await client.invoke(addr, cmd, CALL_TIMEOUT)
        if resp.code == ResponseCode.SUCCESS:
            acked.append((topic, queue_id, body))

    async def read(topic: str, queue_id: int, body: bytes) -> None:
        header = {
            "consumerGroup": "g",
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": 0,
            "maxMsgNums": 4,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        }
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            async with gate:
                resp = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header), CALL_TIMEOUT
                )
            if resp.code == ResponseCode.SUCCESS and [r.body for r in decode_records(resp.body)] == [body]:
                return
            if asyncio.get_running_loop().time() > deadline:
                unreadable.append(f"{topic}-{queue_id}: code {resp.code} {resp.remark}")
                return
            await asyncio.sleep(0.05)

    try:
        if send:
            await asyncio.gather(*(send_one(f"Many{t}", q) for t in range(TOPICS) for q in range(QUEUES)))
        else:  # what an earlier run acknowledged
            acked.extend((f"Many{t}", q, f"Many{t}/{q}".encode()) for t in range(TOPICS) for q in range(QUEUES))
        await asyncio.gather(*(read(t, q, b) for t, q, b in acked))
    finally:
        await client.close()
    return len(acked), unreadable


def test_every_acknowledged_message_is_readable_under_a_low_open_file_limit(tmp_path: Path) -> None:
    cluster = ProcessCluster(tmp_path, broker_nofile=NOFILE)
    cluster.start()
    try:
        acked, unreadable = asyncio.run(_send_and_read_back(cluster.broker_addr))
        assert unreadable == []
        assert acked == TOPICS * QUEUES  # nothing refused either: the broker never ran out
        broker_pid = cluster.procs[-1].pid
        assert len(os.listdir(f"/proc/{broker_pid}/fd")) < NOFILE
        for kill in (False, True):  # a restart, clean and after SIGKILL, is not stopped by the queue count
            cluster.restart_broker(kill=kill)
            _, unreadable = asyncio.run(_send_and_read_back(cluster.broker_addr, send=False))
            assert unreadable == []
    finally:
        cluster.stop()
    log = (tmp_path / "broker.log").read_text()
    assert f"the open-file limit {NOFILE} allows only 8 open consume-queue files" in log  # (256 - 256) // 4, >= 8
    assert "Too many open files" not in log
