"""Controller mode, allAckInSyncStateSet: a slave's fault between real processes.

minInSyncReplicas=1: a paused slave (SIGSTOP, its connection open) holds sends back only until the master drops it
from the SyncStateSet (haMaxTimeSlaveNotCatchup, 1 s here) and the controller agrees; sends waiting meanwhile are
then answered SEND_OK. After SIGCONT the slave catches up and joins again. minInSyncReplicas=2: once the slave is
gone (kill -9) and the set shrank to the master alone, sends are refused ("in-sync replicas not enough", RocketMQ's
SYSTEM_ERROR) and nothing is stored.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import BrokerProc, send_raw

TOPIC = "CtlSlaveFaultTopic"
MAX_LAG_S = 1.0


def send(b: BrokerProc, text: str) -> tuple[int, str, float]:
    async def run() -> tuple[int, str, float]:
        client = RemotingClient(connect_timeout=1.0)
        started = time.monotonic()
        try:
            resp = await send_raw(client, b, TOPIC, 0, text.encode())
            return resp.code, resp.remark or "", time.monotonic() - started
        finally:
            await client.close()

    return asyncio.run(run())


def test_a_paused_slave_is_dropped_and_writes_resume_within_the_lag_limit(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", haMaxTimeSlaveNotCatchup=int(MAX_LAG_S * 1000))
    a = group.add_broker("a")
    b = group.add_broker("b")
    try:
        group.start_namesrv()
        group.start_broker(a, "MASTER")
        group.start_broker(b, "SLAVE")
        group.wait_sync_state_set(a, 2)
        assert send(a, "both hold it")[0] == ResponseCode.SUCCESS
        group.pause(b)
        code, remark, took = send(a, "waits for the paused slave")
        print(f"\nslave paused -> send answered after {took * 1000:.0f} ms")
        assert code == ResponseCode.SUCCESS, (code, remark)
        assert took < MAX_LAG_S + 1.0  # the lag limit, one check period and the controller's answer
        assert group.info(a)["syncStateSet"] == group.info(a)["brokerControllerId"]
        assert send(a, "master alone")[0] == ResponseCode.SUCCESS
        group.resume(b)
        group.wait_sync_state_set(a, 2)
    finally:
        group.close()


def test_with_min_in_sync_replicas_2_a_lost_slave_stops_writes_loudly(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", minInSyncReplicas=2)
    a = group.add_broker("a")
    b = group.add_broker("b")
    try:
        group.start_namesrv()
        group.start_broker(a, "MASTER")
        code, remark, _ = send(a, "alone before any slave")
        assert code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in remark, (code, remark)
        group.start_broker(b, "SLAVE")
        group.wait_sync_state_set(a, 2)
        assert send(a, "two replicas")[0] == ResponseCode.SUCCESS
        before = group.max_offset(a)
        group.kill(b)
        group.wait_sync_state_set(a, 1, timeout=5)
        code, remark, _ = send(a, "refused")
        assert code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in remark, (code, remark)
        assert "minInSyncReplicas=2" in remark
        assert group.max_offset(a) == before  # refused, not stored
    finally:
        group.close()
