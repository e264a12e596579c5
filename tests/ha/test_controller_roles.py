"""Controller mode between real processes: a paused master, the epoch cache, a planned switchover.

SIGSTOP of the master: its heartbeats stop, the controller elects the slave after controllerHeartBeatTimeoutMills,
and the new master takes writes. SIGCONT: the old master's lease has run out, so it refuses writes at once (never a
SEND_OK beside the new master) until the controller's answer makes it a slave of the new master. Both then answer
GET_BROKER_EPOCH_CACHE (``ledgermq admin getBrokerEpoch``) with the same epoch history, and ``ledgermq admin
electMaster`` moves the master back by plan.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from click.testing import CliRunner

from ledgermq.cli.main import cli
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import CLUSTER, GROUP, BrokerProc, send_raw

TOPIC = "CtlRolesTopic"


def send(b: BrokerProc, text: str) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        client = RemotingClient(connect_timeout=1.0)
        try:
            resp = await send_raw(client, b, TOPIC, 0, text.encode())
            return resp.code, resp.remark or ""
        finally:
            await client.close()

    return asyncio.run(run())


def admin(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["admin", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_a_paused_master_is_replaced_fenced_and_returns_as_a_slave_then_a_planned_switchover(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true")
    a = group.add_broker("a")
    b = group.add_broker("b")
    try:
        group.start_pair(a, b)
        assert send(a, "before")[0] == ResponseCode.SUCCESS
        a_id = group.info(a)["brokerControllerId"]

        group.pause(a)
        paused = time.monotonic()
        info = group.wait_role(b, "MASTER", 10)
        print(f"\nSIGSTOP -> slave serves as master: {(time.monotonic() - paused) * 1000:.0f} ms")
        assert info["masterEpoch"] == "2"
        assert send(b, "on the new master")[0] == ResponseCode.SUCCESS

        group.resume(a)
        code, remark = send(a, "to the old master")
        assert code == ResponseCode.SERVICE_NOT_AVAILABLE, (code, remark)
        group.wait_role(a, "SLAVE", 10)
        group.wait_sync_state_set(b, 2)
        group.wait_caught_up(b, [a], 10)

        code, out = admin("getBrokerEpoch", "-n", group.namesrv_addr, "-b", GROUP)
        assert code == 0, out
        # RocketMQ 5 brokers report their controller-mode keys: a console finds the controller there
        code, conf = admin("getBrokerConfig", "-n", group.namesrv_addr, "-c", CLUSTER)
        assert code == 0, conf
        assert conf.count("controllerAddr") == 2 and conf.count("enableControllerMode") == 2, conf
        assert out.count("EpochEntry{epoch=1, startOffset=0") == 2, out
        assert out.count("EpochEntry{epoch=2, startOffset=") == 2, out

        code, out = admin("electMaster", "-a", group.namesrv_addr, "-c", CLUSTER, "-bn", GROUP, "-b", a_id)
        assert code == 0, out
        info = group.wait_role(a, "MASTER", 10)
        assert info["masterEpoch"] == "3"
        group.wait_role(b, "SLAVE", 10)
        group.wait_sync_state_set(a, 2)
        assert send(a, "after the switchover")[0] == ResponseCode.SUCCESS
    finally:
        group.close()
